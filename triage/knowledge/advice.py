"""What to collect next (`kind: collect_next`): advice per situation, when triage abstains.

    kind: collect_next
    advice:
      - situation: no stacks of the stuck ranks       # for people reading the file
        when: {missing: pyspy}                        # see Situation for the conditions
        ask: ["`py-spy dump` of rank {stuck_rank}", "`py-spy dump` of every rank"]  # summary
        how: "Stacks of every rank while it is stuck: ..."                         # reports

The classifier (the abstention summary) and the reports read the same entries; each builds a
`Situation` from what it has. A team's advice comes after the shipped advice.

`thread_asks` are what the bot asks of an issue thread whose diagnosis is uncertain: one per
kind of evidence the thread lacks (`lacks`: one of `THREAD_EVIDENCE`, as the bot's
`seen_evidence` reads a thread), `hang_only` ones only when the job hung or nothing says what
happened; `ask_rank` is used instead of `ask` when the rank the others waited for is known.

    thread_asks:
      - {id: pyspy, lacks: pyspy, hang_only: true, ask: "...", ask_rank: "... rank {rank} ..."}

`thread_evidence` says how the bot tells that a thread already holds each kind: a piece the
sniffer read as one of `source_kinds`, or text `shown_by` matches (checked by its examples).

    thread_evidence:
      pyspy: {source_kinds: [pyspy], shown_by: '^Thread \\d+ \\(idle', examples: {...}}
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import regex

from triage.knowledge.actions import template_fields
from triage.knowledge.problems import compile_regex, pattern_with_examples
from triage.model import SourceKind

KIND = "collect_next"
_KINDS = frozenset(k.value for k in SourceKind)
_CONDITIONS = {
    "missing",
    "present",
    "inputs",
    "ranks_at_most",
    "hang",
    "setup",
    "failure",
    "any_of",
}
# the kinds of evidence the bot looks for in an issue thread (triage.bot.extract.seen_evidence);
# how each shows is `thread_evidence` in the shipped file
THREAD_EVIDENCE = ("traceback", "nccl_debug", "pyspy", "flight_recorder", "env")
_ASK_KEYS = {"id", "lacks", "hang_only", "ask", "ask_rank"}
_EVIDENCE_KEYS = {"source_kinds", "shown_by", "examples"}


@dataclass(frozen=True)
class Situation:
    """What a job's evidence holds, as far as advice goes."""

    kinds: frozenset[str] = frozenset()  # input kinds present (`nccl` also for NCCL lines)
    inputs: int = 0
    ranks: int = 0  # distinct ranks of the inputs
    hang: bool = False
    stuck_rank: int | None = None  # the rank the others waited for, else the culprit
    # no rank is known to have got past process-group setup (`setup: stuck`): there are no
    # collectives to record yet
    stuck_in_setup: bool = False
    # the job failed and its logs hold only a launcher's report of the workers' exit status,
    # none of their own output about it (`failure: unlogged`)
    failure_unlogged: bool = False

    def facts(self) -> dict[str, Any]:
        """What an advice's `{names}` may read (`FACTS`), the unknown left out."""
        return {"stuck_rank": self.stuck_rank} if self.stuck_rank is not None else {}


# The `{names}` advice may fill (Situation.facts)
FACTS = frozenset({"stuck_rank"})


@dataclass(frozen=True)
class Advice:
    situation: str
    when: Mapping[str, Any]
    ask: tuple[tuple[str, tuple[str, ...]], ...] = ()  # alternatives (template, facts needed)
    how: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def applies(self, situation: Situation) -> bool:
        return _holds(self.when, situation)


@dataclass(frozen=True)
class ThreadAsk:
    """What the bot asks a reporter to add to a thread that lacks one kind of evidence."""

    id: str
    lacks: str  # one of THREAD_EVIDENCE
    ask: str  # Markdown
    ask_rank: str | None = None  # with {rank}: the rank the others waited for
    hang_only: bool = False

    def text(self, rank: int | None) -> str:
        if rank is not None and self.ask_rank:
            return self.ask_rank.replace("{rank}", str(rank))
        return self.ask


@dataclass(frozen=True)
class ThreadEvidence:
    """How one kind of evidence shows in an issue thread."""

    name: str  # one of THREAD_EVIDENCE
    source_kinds: frozenset[SourceKind]  # a piece the sniffer read as one of these
    shown_by: regex.Pattern[str]  # or text this finds

    def in_piece(self, kind: SourceKind, text: str) -> bool:
        return kind in self.source_kinds or self.shown_by.search(text) is not None


@dataclass(frozen=True)
class CollectNext:
    advice: tuple[Advice, ...] = ()
    thread_asks: tuple[ThreadAsk, ...] = ()
    thread_evidence: tuple[ThreadEvidence, ...] = ()  # shipped only

    def asks(self, situation: Situation) -> list[str]:
        """The short forms, for the abstention summary."""
        return self._texts(situation, "ask")

    def steps(self, situation: Situation) -> list[str]:
        """The step-by-step forms, for the reports."""
        return self._texts(situation, "how")

    def _texts(self, situation: Situation, which: str) -> list[str]:
        out = []
        for advice in self.advice:
            if not advice.applies(situation):
                continue
            text = _first_known(getattr(advice, which), situation.facts())
            if text is not None:
                out.append(text)
        return out


def _first_known(
    options: Sequence[tuple[str, tuple[str, ...]]], facts: Mapping[str, Any]
) -> str | None:
    for template, needs in options:
        if all(facts.get(k) not in (None, "") for k in needs):
            return template.format_map({k: facts[k] for k in needs}) if needs else template
    return None


def _holds(when: Mapping[str, Any], s: Situation) -> bool:
    for key, value in when.items():
        if key == "missing" and any(kind in s.kinds for kind in _kinds(value)):
            return False
        if key == "present" and not all(kind in s.kinds for kind in _kinds(value)):
            return False
        if key == "inputs" and s.inputs:
            return False
        if key == "ranks_at_most" and s.ranks > int(value):
            return False
        if key == "hang" and s.hang != bool(value):
            return False
        if key == "setup" and s.stuck_in_setup != (value == "stuck"):
            return False
        if key == "failure" and s.failure_unlogged != (value == "unlogged"):
            return False
        if key == "any_of" and not any(_holds(c, s) for c in value):
            return False
    return True


def _kinds(value: Any) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def build(body: Mapping[str, Any], report: Callable[[str, str], None], team: bool) -> CollectNext:
    unknown = set(body) - {"kind", "advice", "thread_asks", "thread_evidence"}
    if unknown:
        report(
            "", f"unknown key(s) {sorted(unknown)}; allowed: advice, thread_asks, thread_evidence"
        )
    asks = _thread_asks(body.get("thread_asks"), report)
    if team and "thread_evidence" in body:
        report("thread_evidence", "is the shipped file's (how the bot reads a thread)")
    evidence = () if team else _thread_evidence(body.get("thread_evidence"), report)
    raw = body.get("advice")
    if raw is None and asks:
        return CollectNext((), asks, evidence)  # a team may add thread asks alone
    if not isinstance(raw, list) or not raw:
        report("advice", "needs a list of {situation, when, ask, how}")
        return CollectNext((), asks, evidence)
    out = []
    for n, entry in enumerate(raw, 1):
        item = f"advice #{n}"
        if not isinstance(entry, dict):
            report(item, "must be a mapping of situation, when, ask, how")
            continue
        item = f"advice {entry.get('situation') or n!r}"
        bad = set(entry) - {"situation", "when", "ask", "how"}
        if bad:
            report(item, f"unknown key(s) {sorted(bad)}; allowed: situation, when, ask, how")
        if not isinstance(entry.get("situation"), str):
            report(item, "needs a `situation`: what it is about, in words")
        when = entry.get("when")
        if not isinstance(when, dict) or not when or not _check_when(when, item, report):
            if not isinstance(when, dict) or not when:
                report(item, "needs `when`: the conditions it applies under")
            continue
        ask = _options(entry.get("ask"), f"{item} ask", report)
        how = _options(entry.get("how"), f"{item} how", report)
        if not ask and not how:
            report(item, "needs an `ask`, a `how` or both")
            continue
        out.append(Advice(str(entry.get("situation")), when, ask, how))
    return CollectNext(tuple(out), asks, evidence)


def _thread_evidence(raw: Any, report: Callable[[str, str], None]) -> tuple[ThreadEvidence, ...]:
    if not isinstance(raw, dict) or set(raw) != set(THREAD_EVIDENCE):
        report("thread_evidence", f"needs one entry for each of {list(THREAD_EVIDENCE)}")
        raw = raw if isinstance(raw, dict) else {}
    out = []
    for name in THREAD_EVIDENCE:
        item = f"thread_evidence {name}"
        entry = raw.get(name)
        checked = pattern_with_examples(
            entry,
            item,
            _EVIDENCE_KEYS,
            report,
            lambda text, item=item: compile_regex(text, item, report, regex.M),
            "shown_by",
            "lines `shown_by` finds (match) and does not (no_match)",
        )
        if checked is None or checked[0] is None:
            continue
        kinds = entry.get("source_kinds", [])
        unknown = [k for k in kinds if k not in _KINDS] if isinstance(kinds, list) else [kinds]
        if unknown:
            report(item, f"`source_kinds`: {unknown} are not input kinds {sorted(_KINDS)}")
            continue
        out.append(ThreadEvidence(name, frozenset(SourceKind(k) for k in kinds), checked[0]))
    return tuple(out)


def _thread_asks(raw: Any, report: Callable[[str, str], None]) -> tuple[ThreadAsk, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        report("thread_asks", "must be a list of {id, lacks, ask}")
        return ()
    out = []
    for n, entry in enumerate(raw, 1):
        item = f"thread_asks #{n}"
        if not isinstance(entry, dict):
            report(item, "must be a mapping of id, lacks, ask")
            continue
        item = f"thread_asks {entry.get('id') or n!r}"
        bad = set(entry) - _ASK_KEYS
        if bad:
            report(item, f"unknown key(s) {sorted(bad)}; allowed: {sorted(_ASK_KEYS)}")
        if not isinstance(entry.get("id"), str) or not isinstance(entry.get("ask"), str):
            report(item, "needs an `id` and `ask` text")
            continue
        if entry.get("lacks") not in THREAD_EVIDENCE:
            report(item, f"`lacks`: {entry.get('lacks')!r} is not one of {list(THREAD_EVIDENCE)}")
            continue
        rank_text = entry.get("ask_rank")
        if rank_text is not None and (not isinstance(rank_text, str) or "{rank}" not in rank_text):
            report(item, "`ask_rank` must be a text naming {rank}")
            rank_text = None
        hang_only = entry.get("hang_only", False)
        if not isinstance(hang_only, bool):
            report(item, "`hang_only` must be true or false")
        out.append(
            ThreadAsk(entry["id"], entry["lacks"], entry["ask"], rank_text, hang_only is True)
        )
    return tuple(out)


def _check_when(when: Mapping[str, Any], item: str, report: Callable[[str, str], None]) -> bool:
    ok = True
    for key, value in when.items():
        if key not in _CONDITIONS:
            report(item, f"unknown condition {key!r}; known: {', '.join(sorted(_CONDITIONS))}")
            ok = False
        elif key in ("missing", "present"):
            kinds = _kinds(value) if isinstance(value, (str, list)) else [repr(value)]
            for kind in kinds:
                if kind not in _KINDS:
                    report(item, f"`{key}`: {kind!r} is not an input kind {sorted(_KINDS)}")
                    ok = False
        elif key == "inputs" and value != "none":
            report(item, "`inputs` can only be `none`")
            ok = False
        elif key == "ranks_at_most" and (isinstance(value, bool) or not isinstance(value, int)):
            report(item, "`ranks_at_most` must be a number")
            ok = False
        elif key == "hang" and not isinstance(value, bool):
            report(item, "`hang` must be true or false")
            ok = False
        elif key == "setup" and value not in ("passed", "stuck"):
            report(item, "`setup` must be `passed` or `stuck`")
            ok = False
        elif key == "failure" and value not in ("logged", "unlogged"):
            report(item, "`failure` must be `logged` or `unlogged`")
            ok = False
        elif key == "any_of":
            if not isinstance(value, list) or not all(isinstance(c, dict) for c in value):
                report(item, "`any_of` must be a list of conditions")
                ok = False
            else:
                ok = all(_check_when(c, item, report) for c in value) and ok
    return ok


def _options(
    raw: Any, item: str, report: Callable[[str, str], None]
) -> tuple[tuple[str, tuple[str, ...]], ...]:
    if raw is None:
        return ()
    templates = [raw] if isinstance(raw, str) else raw
    if not isinstance(templates, list) or not all(isinstance(t, str) for t in templates):
        report(item, "must be a text or a list of alternatives")
        return ()
    out = []
    for template in templates:
        try:
            needs = tuple(dict.fromkeys(template_fields(template)))
        except ValueError as exc:
            report(item, f"malformed template ({exc}): {template!r}")
            return ()
        unknown = sorted(set(needs) - FACTS)
        if unknown:
            report(item, f"names {{{unknown[0]}}}; advice may name {', '.join(sorted(FACTS))}")
            return ()
        out.append((template, needs))
    if out and out[-1][1]:
        report(item, "the last alternative must name no {fact}")
    return tuple(out)


def merge(values: Sequence[CollectNext]) -> CollectNext:
    """The shipped advice, then each team's."""
    return CollectNext(
        tuple(a for value in values for a in value.advice),
        tuple(a for value in values for a in value.thread_asks),
        values[0].thread_evidence if values else (),
    )
