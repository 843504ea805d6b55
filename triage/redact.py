"""Mask secrets (and, on request, host names) in text that is about to be shown to people.

    redact_text("HF_TOKEN=hf_... failed")              -> "HF_TOKEN=<redacted> failed"
    redact_text("node07 at 10.0.0.7", hosts=True)      -> "node07 at <ip-1>"
    redact_diagnosis(diagnosis, hosts=False)           -> the same Diagnosis, every string masked

Reports are pasted into issues and chat: every quoted log line, path, warning and value of a
Diagnosis passes through here once, after the analysis (so ranks, hosts and collectives were
found on the real text), before any format renders it. The patterns are data
(`triage/redact.yaml`, each with examples run as tests); this module only applies them.

With `hosts=True`, e-mail addresses, IP addresses, host names and the user names of home
folders become numbered stand-ins (`<host-1>`, `<ip-2>`, `<email-1>`, `<user-1>`), the same
name the same stand-in throughout one report, so which ranks shared a host still reads.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from functools import lru_cache
from importlib import resources
from typing import Any

import regex

from triage import diskcache, regex_cache, yaml_docs
from triage.model import (
    Diagnosis,
    EnvReport,
    Event,
    ParsedSource,
    RankExit,
    ScoredLabel,
    SimilarCase,
)
from triage.parsers import tracebacks

__all__ = [
    "MASK",
    "Pattern",
    "Redactor",
    "patterns",
    "redact_diagnosis",
    "redact_events",
    "redact_text",
]

MASK = "<redacted>"
_MAX_DEPTH = 32  # Diagnosis values are a few levels deep; facts dicts a few more
# Names that are not worth hiding and would only blur a report (and stand-ins already made).
_NOT_HOSTS = frozenset({"localhost", "localhost.localdomain", "127.0.0.1", "::1", "0.0.0.0"})
# Never masked: labels and similar cases come from triage's own taxonomy and corpus.
_OWN_VALUES = (ScoredLabel, SimilarCase)


@dataclass(frozen=True)
class Pattern:
    id: str
    what: str
    regex: Any  # re.Pattern or regex.Pattern: both search and sub alike
    kind: str | None  # hosts: the stand-in's name (host, ip, email, user); None: a secret
    needs: tuple[str, ...] = ()  # lower-case strings one of which every match holds
    match: tuple[str, ...] = ()  # examples that must change
    no_match: tuple[str, ...] = ()  # examples that must stay as they are


class RedactionRulesError(ValueError):
    """redact.yaml is malformed: a packaging bug, never ignored (nothing would be masked)."""


@lru_cache(maxsize=1)
def patterns() -> tuple[tuple[Pattern, ...], tuple[Pattern, ...]]:
    """(secrets, hosts) from `triage/redact.yaml`, compiled once."""
    text = resources.files("triage").joinpath("redact.yaml").read_text(encoding="utf-8")
    doc = yaml_docs.document(text)
    # read after start-up saved what it derived: kept now, or every run imports PyYAML
    diskcache.save()
    if not isinstance(doc, dict):
        raise RedactionRulesError("redact.yaml: expected `secrets:` and `hosts:` lists")
    out = []
    for group in ("secrets", "hosts"):
        items = doc.get(group)
        if not isinstance(items, list) or not items:
            raise RedactionRulesError(f"redact.yaml: `{group}` must be a non-empty list")
        out.append(tuple(_pattern(item, group) for item in items))
    return out[0], out[1]


def _pattern(item: Any, group: str) -> Pattern:
    if not isinstance(item, dict) or not isinstance(item.get("id"), str):
        raise RedactionRulesError(f"redact.yaml: every `{group}` item needs an id")
    pid = item["id"]
    if not isinstance(item.get("pattern"), str):
        raise RedactionRulesError(f"redact.yaml: {pid}: a pattern is needed")
    try:
        # The stdlib engine is ~3x faster on these; `regex` takes what it cannot compile.
        compiled: Any = regex_cache.compile_std(item["pattern"])
    except re.error:
        try:
            compiled = regex_cache.compile(item["pattern"])
        except regex.error as exc:
            raise RedactionRulesError(f"redact.yaml: {pid}: bad pattern ({exc})") from None
    needs = item.get("needs", [])
    if not isinstance(needs, list) or not all(isinstance(n, str) and n for n in needs):
        raise RedactionRulesError(f"redact.yaml: {pid}: `needs` must be a list of strings")
    kind = item.get("kind")
    if group == "hosts" and not isinstance(kind, str):
        raise RedactionRulesError(f"redact.yaml: {pid}: a hosts pattern needs a `kind`")
    examples = item.get("examples") or {}
    return Pattern(
        id=pid,
        what=str(item.get("what", "")),
        regex=compiled,
        kind=kind if group == "hosts" else None,
        needs=tuple(n.lower() for n in needs),
        match=tuple(str(x) for x in examples.get("match", ())),
        no_match=tuple(str(x) for x in examples.get("no_match", ())),
    )


# `Redactor.text` keeps the answers for up to this many texts of at most this length
_MAX_KEPT = 4096
_MAX_KEPT_TEXT = 4096
_NOT_SEEN = object()


class Redactor:
    """Masks text with the secret patterns (and host patterns when `hosts`), keeping one
    stand-in per host name across every text it is given."""

    def __init__(self, *, hosts: bool = False, known_hosts: Iterable[str] = ()) -> None:
        secrets, host_patterns = patterns()
        self._aliases: dict[tuple[str, str], str] = {}
        self._done: dict[str, str | None] = {}  # text -> masked (None: clean), see `text`
        self._counts: dict[str, int] = {}
        self._steps: list[tuple[Any, tuple[str, ...], Any]] = [
            (p.regex, p.needs, self._mask) for p in secrets
        ]
        if hosts:
            names = sorted({h for h in known_hosts if _worth_hiding(h)}, key=lambda h: (-len(h), h))
            # The job's own host names (from NCCL prefixes, torchrun summaries, paths), as
            # words, before the host-name shapes: e-mails and home folders go first, whole.
            known = (
                regex_cache.compile(
                    r"(?<![\w.-])(?P<value>" + "|".join(map(regex.escape, names)) + r")(?![\w-])",
                    regex.IGNORECASE,
                )
                if names
                else None
            )
            for p in host_patterns:
                if known is not None and p.kind == "host":
                    self._steps.append((known, (), self._host_replacer("host")))
                    known = None
                self._steps.append((p.regex, p.needs, self._host_replacer(p.kind or "host")))
            if known is not None:
                self._steps.append((known, (), self._host_replacer("host")))
        self._needs = frozenset(n for _, needs, _ in self._steps for n in needs)
        self._ungated = [pattern for pattern, needs, _ in self._steps if not needs]

    def text(self, text: str) -> str:
        """`text` with every secret masked (and hosts replaced); the same object if clean."""
        if not text:
            return text
        # A job's ranks print the same lines: a text seen before gets the answer it got (its
        # host names have their stand-ins by then, so masking it again gives the same). Kept by
        # hand, not by `functools.lru_cache`: a clean text must come back as the caller's object.
        done = self._done.get(text, _NOT_SEEN)
        if done is not _NOT_SEEN:
            return text if done is None else done
        out = self._masked(text)
        if len(text) <= _MAX_KEPT_TEXT:
            if len(self._done) >= _MAX_KEPT:
                self._done.clear()
            self._done[text] = None if out is text else out
        return out

    def _masked(self, text: str) -> str:
        out = text
        lower = text.lower()
        for pattern, needs, replace in self._steps:
            if needs and not any(n in lower for n in needs):
                continue
            new = pattern.sub(replace, out)
            if new != out:
                out, lower = new, new.lower()
        return text if out == text else out

    def could_change(self, text: str) -> bool:
        """Whether `text` holds anything a pattern could match (False: `text()` keeps it).
        Substring tests run at memory speed: one call settles a whole job's text."""
        lower = text.lower()
        return any(n in lower for n in self._needs) or any(
            pattern.search(text) for pattern in self._ungated
        )

    def value(self, obj: Any, depth: int = 0) -> Any:
        """`obj` with every string inside it masked: dataclasses, tuples (NamedTuples too),
        lists and mappings are rebuilt only where something changed."""
        if type(obj) is str:
            return self.text(obj)
        if obj is None or isinstance(obj, (bool, int, float, Enum, _OWN_VALUES)):
            return obj
        if depth > _MAX_DEPTH:
            return obj
        if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            changes = {}
            for f in dataclasses.fields(obj):
                old = getattr(obj, f.name)
                new = self.value(old, depth + 1)
                if new is not old:
                    changes[f.name] = new
            return dataclasses.replace(obj, **changes) if changes else obj
        if isinstance(obj, (tuple, list)):
            items = [self.value(x, depth + 1) for x in obj]
            if all(a is b for a, b in zip(items, obj, strict=True)):
                return obj
            if isinstance(obj, list):
                return items
            return type(obj)(*items) if hasattr(obj, "_fields") else tuple(items)
        if isinstance(obj, Mapping):
            pairs = [(self.value(k, depth + 1), self.value(v, depth + 1)) for k, v in obj.items()]
            if all(k is a and v is b for (k, v), (a, b) in zip(pairs, obj.items(), strict=True)):
                return obj
            return dict(pairs)
        return obj

    @staticmethod
    def _mask(m: regex.Match[str]) -> str:
        return _with_value(m, MASK)

    def _host_replacer(self, kind: str) -> Any:
        def alias(m: regex.Match[str]) -> str:
            value = m.group("value") if "value" in m.re.groupindex else m.group()
            if value is None or not _worth_hiding(value):
                return m.group()
            return _with_value(m, self._alias(kind, value))

        return alias

    def _alias(self, kind: str, value: str) -> str:
        key = ("host" if kind == "host" else kind, value.lower())
        found = self._aliases.get(key)
        if found is None:
            n = self._counts.get(key[0], 0) + 1
            self._counts[key[0]] = n
            found = self._aliases[key] = f"<{key[0]}-{n}>"
        return found


def _with_value(m: regex.Match[str], replacement: str) -> str:
    """The match with only its `value` group replaced (the whole match when it has none)."""
    if "value" not in m.re.groupindex or m.start("value") < 0:
        return replacement
    whole = m.group()
    start, end = m.start("value") - m.start(), m.end("value") - m.start()
    return whole[:start] + replacement + whole[end:]


def _worth_hiding(name: str) -> bool:
    return (
        len(name) >= 2
        and name.lower() not in _NOT_HOSTS
        and not name.isdigit()
        and not name.startswith("<")
    )


def redact_text(text: str, hosts: bool = False) -> str:
    """`text` with secrets masked; with `hosts`, e-mails, IPs, host names and home-folder user
    names replaced by numbered stand-ins too. For one-off texts (an issue body, a comment)."""
    return Redactor(hosts=hosts).text(text)


def redact_events(parsed: Sequence[ParsedSource]) -> list[ParsedSource]:
    """What the parsers found, with the secrets in its text masked: the event texts and the
    messages of error files and env reports. Run between parse and correlate: the later
    stages quote pieces of these texts cut at a length (a cut token would no longer match its
    pattern). Ranks, hosts, times and collectives are fields the parsers already filled. A
    paste's own text (and its whole text, kept when no event was found) is masked the same
    way: the rules quote it where a message spans lines."""
    redactor = Redactor()
    # Most jobs quote no secret at all: one search over all the text settles that.
    texts = [e.text for item in parsed for e in item.events]
    texts += [t for item in parsed for t in (item.paste, item.whole_text) if t]
    if not redactor.could_change("\n".join(texts)):
        return list(parsed)
    out = []
    for item in parsed:
        events = tuple(_event(redactor, e) for e in item.events)
        changed = any(a is not b for a, b in zip(events, item.events, strict=True))
        paste = redactor.text(item.paste) if item.paste else item.paste
        whole = redactor.text(item.whole_text) if item.whole_text else item.whole_text
        if changed or paste is not item.paste or whole is not item.whole_text:
            item = dataclasses.replace(item, events=events, paste=paste, whole_text=whole)
        out.append(item)
    return out


def _event(redactor: Redactor, event: Event) -> Event:
    # the typed facts (a notice's, c10d's, a record's) are whole values: the Diagnosis pass
    # masks those that a report shows (filled into actions, facts), uncut.
    text = redactor.text(event.text)
    payload = event.payload
    if isinstance(payload, (RankExit, EnvReport)):
        payload = redactor.value(payload)
    if text is event.text and payload is event.payload:
        return event
    traceback = event.traceback
    if traceback is not None and text is not event.text:
        # the chain read again from the masked text: its quoted lines are the text's
        named = redactor.value([(link.exc_type, link.exc_message) for link in traceback.links])
        traceback = tracebacks.read(text, named)
    return dataclasses.replace(event, text=text, payload=payload, traceback=traceback)


def redact_diagnosis(diagnosis: Diagnosis, *, hosts: bool = False) -> Diagnosis:
    """Every string a report can show of `diagnosis`, masked. The hosts the analysis found
    (per input, the first failure's) are hidden wherever they appear when `hosts` is set."""
    known: set[str] = {i.host for i in diagnosis.inputs if i.host}
    if diagnosis.first_failure is not None and diagnosis.first_failure.host:
        known.add(diagnosis.first_failure.host)
    return Redactor(hosts=hosts, known_hosts=known).value(diagnosis)
