"""The cascade (`kind: cascade`): which messages are consequences of another rank's failure.

    kind: cascade
    families:                      # in order: a message reads as the first family it matches
      peer_closed:
        description: ...
        messages: ['Connection reset by peer', ...]   # case-insensitive regexes
        rules: [nccl-remote-peer-closed, ...]         # rules whose message is of this family
        examples: ["...a line of this family..."]
        readings:                  # optional: a narrower name the report gives some messages
          - name: store wait timeout during setup
            messages: ['DistStoreError', ...]
            examples: ["...a message of the family these match..."]
    initiating: ['out of memory', ...]   # make an error initiating despite a cascade phrase
    context: ['ChildFailedError', ...]   # launcher narration: never a cause on its own
    points_at_rank: ['...(?P<rank>\\d+)...']   # messages that name the rank they react to
    peer_address: '...(?P<ip>...)...(?P<port>\\d+)...'
    peer_mismatch:                 # optional: a rank saying a peer's collective did not fit
      description: ...
      messages: ["Received data size doesn't match expected size", ...]
      examples: ["...a line that says so..."]

Shipped only (correlate reads it before any team folder is known). Each list of messages is
compiled as one alternation, as correlate runs it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import regex

from triage.knowledge.problems import compile_alternation, compile_regex, pattern_with_examples

KIND = "cascade"
_KEYS = {
    "kind",
    "families",
    "initiating",
    "context",
    "points_at_rank",
    "peer_address",
    "peer_mismatch",
}
_FAMILY_KEYS = {"description", "messages", "rules", "examples", "readings"}
_READING_KEYS = {"name", "messages", "examples"}
_PEER_MISMATCH_KEYS = {"description", "messages", "examples"}


@dataclass(frozen=True)
class Reading:
    """What the reports call a message of a family that these messages match: the family
    stays what correlate and the classifier read (a store's wait still counts as a wait)."""

    name: str
    pattern: regex.Pattern[str]
    examples: tuple[str, ...] = ()


@dataclass(frozen=True)
class Family:
    name: str
    description: str
    pattern: regex.Pattern[str]  # the messages as one case-insensitive alternation
    rules: tuple[str, ...] = ()
    examples: tuple[str, ...] = ()
    readings: tuple[Reading, ...] = ()

    def wording(self, text: str) -> str:
        """How the reports name this family for one message of it."""
        for reading in self.readings:
            if reading.pattern.search(text):
                return reading.name
        return self.name.replace("_", " ")


@dataclass(frozen=True)
class Cascade:
    families: tuple[Family, ...] = ()
    initiating: regex.Pattern[str] | None = None
    context: regex.Pattern[str] | None = None
    points_at_rank: tuple[regex.Pattern[str], ...] = ()
    peer_address: regex.Pattern[str] | None = None
    rules: Mapping[str, str] = field(default_factory=dict)  # cascade rule id -> family
    # messages of a rank that detected a peer's collective did not fit its own (sizes or
    # dtypes): the cause may be that peer (correlate decides with the flight recorder)
    peer_mismatch: regex.Pattern[str] | None = None
    peer_mismatch_examples: tuple[str, ...] = ()


def build(body: Mapping[str, Any], report: Callable[[str, str], None], team: bool) -> Cascade:
    unknown = set(body) - _KEYS
    if unknown:
        report("", f"unknown key(s) {sorted(unknown)}; allowed: {sorted(_KEYS - {'kind'})}")
    families: list[Family] = []
    rules: dict[str, str] = {}
    raw = body.get("families")
    if not isinstance(raw, dict) or not raw:
        report("families", "needs at least one family: {name: {messages, rules, examples}}")
        raw = {}
    for name, spec in raw.items():
        item = f"family {name}"
        checked = _messages_with_examples(
            spec, item, _FAMILY_KEYS, report, "messages that read as this family"
        )
        if checked is None:
            continue
        pattern, examples = checked
        members = _strings(spec.get("rules") or [], f"{item} rules", report)
        for rule_id in members:
            if rule_id in rules:
                report(item, f"rule {rule_id!r} is already in family {rules[rule_id]}")
            rules[rule_id] = str(name)
        if pattern is not None:
            families.append(
                Family(
                    str(name),
                    str(spec.get("description") or ""),
                    pattern,
                    tuple(members),
                    tuple(examples),
                    _readings(spec.get("readings"), pattern, item, report),
                )
            )
    points: list[regex.Pattern[str]] = []
    for text in _strings(body.get("points_at_rank"), "points_at_rank", report):
        compiled = compile_regex(text, "points_at_rank", report, 0)
        if compiled is not None and "rank" not in compiled.groupindex:
            report("points_at_rank", f"{text!r} needs a `rank` group")
        elif compiled is not None:
            points.append(compiled)
    peer = body.get("peer_address")
    peer_pattern = compile_regex(peer, "peer_address", report, 0) if isinstance(peer, str) else None
    if peer_pattern is None or not {"ip", "port"} <= set(peer_pattern.groupindex):
        report("peer_address", "needs one regex with `ip` and `port` groups")
    mismatch, mismatch_examples = _peer_mismatch(body.get("peer_mismatch"), report)
    return Cascade(
        families=tuple(families),
        initiating=_alternation(body.get("initiating"), "initiating", report),
        context=_alternation(body.get("context"), "context", report),
        points_at_rank=tuple(points),
        peer_address=peer_pattern,
        rules=rules,
        peer_mismatch=mismatch,
        peer_mismatch_examples=mismatch_examples,
    )


def _readings(
    raw: Any, family: regex.Pattern[str], item: str, report: Callable[[str, str], None]
) -> tuple[Reading, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        report(item, "`readings` must be a list of {name, messages, examples}")
        return ()
    out = []
    for spec in raw:
        if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
            report(item, "a reading needs a `name`, `messages` and `examples`")
            continue
        where = f"{item} reading {spec['name']!r}"
        checked = _messages_with_examples(
            spec, where, _READING_KEYS, report, "messages of the family it names"
        )
        if checked is None or checked[0] is None:
            continue
        pattern, examples = checked
        for text in examples:
            if not family.search(text):
                report(where, f"example {text!r} is not a message of the family it matches")
        out.append(Reading(spec["name"], pattern, examples))
    return tuple(out)


def _peer_mismatch(
    spec: Any, report: Callable[[str, str], None]
) -> tuple[regex.Pattern[str] | None, tuple[str, ...]]:
    if spec is None:
        return None, ()
    checked = _messages_with_examples(
        spec,
        "peer_mismatch",
        _PEER_MISMATCH_KEYS,
        report,
        "messages a rank prints when it detects the mismatch",
    )
    return checked or (None, ())


def merge(values: Sequence[Cascade]) -> Cascade:
    return values[0] if values else Cascade()


def _strings(value: Any, item: str, report: Callable[[str, str], None]) -> list[str]:
    if value is None:
        return []
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    report(item, "must be a list of strings")
    return []


def _alternation(
    value: Any, item: str, report: Callable[[str, str], None]
) -> regex.Pattern[str] | None:
    messages = _strings(value, item, report)
    if not messages:
        report(item, "needs at least one message regex")
        return None
    return compile_alternation(messages, item, report, regex.I)


def _messages_with_examples(
    spec: Any, where: str, keys: set[str], report: Callable[[str, str], None], examples_are: str
) -> tuple[regex.Pattern[str] | None, tuple[str, ...]] | None:
    """A mapping of `keys` whose `messages` (one alternation) must find each of its
    `examples`."""
    return pattern_with_examples(
        spec,
        where,
        keys,
        report,
        lambda messages: _alternation(messages, where, report),
        "messages",
        examples_are,
    )
