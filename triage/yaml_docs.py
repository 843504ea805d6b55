"""YAML read through the disk cache: the knowledge files, the taxonomy and the redaction
patterns are the same text run after run, so their documents are kept as JSON
(`triage.diskcache`, keyed by the text's SHA-256) and a warm run never imports PyYAML
(~20-30 ms of every start). A mapping whose keys are not all strings (`rules/exits.yaml`
maps exit codes) is kept as its list of pairs; anything else JSON cannot give back exactly
(a date) is parsed every time. The sections are named anew (`yaml-v2`): an older triage
sharing the cache folder reads its own.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from triage import diskcache


class YamlError(ValueError):
    """The text is not YAML (PyYAML's own error, as the message)."""


def documents(text: str) -> list[Any]:
    """Every document of `text` (`yaml.load_all` with the safe loader)."""
    got = _cached("yaml-v2", text, all_documents=True)
    return got if isinstance(got, list) else []


def document(text: str) -> Any:
    """The one document of `text` (`yaml.load` with the safe loader)."""
    return _cached("yaml-one-v2", text, all_documents=False)


def _cached(section: str, text: str, all_documents: bool) -> Any:
    key = hashlib.sha256(text.encode("utf-8")).hexdigest()
    cached = diskcache.section(section).get(key)
    if isinstance(cached, str):  # kept as JSON text: each read builds objects of its own
        try:
            found = _loads(cached)
            if not all_documents or isinstance(found, list):
                return found
        except ValueError:
            pass
    found = _parse(text, all_documents)
    try:
        as_json = json.dumps(_encode(found))
        if _loads(as_json) == found:  # nothing JSON would change (dates)
            diskcache.put(section, key, as_json)
    except (TypeError, ValueError):
        pass
    return found


_PAIRS = "\0pairs"  # the one key of a mapping kept as pairs (no YAML key starts with NUL)


def _encode(value: Any) -> Any:
    if isinstance(value, dict):
        if all(type(k) is str for k in value) and _PAIRS not in value:
            return {k: _encode(v) for k, v in value.items()}
        return {_PAIRS: [[k, _encode(v)] for k, v in value.items()]}
    if isinstance(value, list):
        return [_encode(v) for v in value]
    return value


def _loads(text: str) -> Any:
    """What `json.dumps(_encode(value))` was made of: a mapping kept as pairs is a mapping
    again. json calls the hook on each mapping, innermost first (a walk of every value in
    Python was ~30 ms of a run's start)."""
    return json.loads(text, object_hook=_mapping)


def _mapping(value: dict[str, Any]) -> Any:
    pairs = value.get(_PAIRS)
    if len(value) == 1 and isinstance(pairs, list):
        return {k: v for k, v in pairs}
    return value


def _parse(text: str, all_documents: bool) -> Any:
    import yaml  # here: a warm run finds every document in the cache

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml is ~10x faster
    try:
        if all_documents:
            return list(yaml.load_all(text, Loader=loader))
        return yaml.load(text, Loader=loader)
    except yaml.YAMLError as exc:
        raise YamlError(str(exc)) from exc
