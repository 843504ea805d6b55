r"""The rule engine: rules (`rules/*.yaml`, schema in `triage.knowledge.rules`) matched
against parsed events and correlate's findings.

A rule hit carries the rule's weighted conclusions, the line to quote and the rule's action
templates filled from the regex's named groups and the job's facts: the named groups, `rank`
/ `host` of the event, `analysis.facts` (torch, nccl, world_size, collective, timeout_ms, ...)
and, for finding rules, the finding's typed facts (`triage.model.finding_facts`, whose names
the loader checked) and `summary`. An action whose facts are unknown is not given (see
triage.knowledge.actions); its `when` conditions read the job's `JobConditions`.

The engine holds no rules: `load()` takes them from the knowledge base (the shipped folder
and the team folders), and a `RuleSet` adds what matching needs (the keyword prefilter).

Every rule's examples are read as triage reads a user's evidence (`example_readings`): the
shipped rules' by the tests, a team folder's whenever it is loaded (`check_team_examples`).
"""

from __future__ import annotations

import os
from bisect import bisect_right
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cached_property, lru_cache
from typing import Any, NamedTuple

import regex

from triage import knowledge
from triage.classify.types import RuleHit
from triage.knowledge.actions import JobConditions, plain
from triage.knowledge.frames import LibraryFrames
from triage.knowledge.rules import Rule, RuleError, rule_keywords
from triage.literals import required_literals
from triage.model import (
    Analysis,
    Event,
    EventKind,
    Finding,
    Level,
    RuleAction,
    SourceKind,
)
from triage.parsers.common import whole_text_event
from triage.parsers.tracebacks import raising_file

__all__ = [
    "Rule",
    "RuleError",
    "RuleSet",
    "describe",
    "job_facts",
    "list_rules",
    "load",
    "match_events",
    "match_text",
    "paste_hits",
    "required_literals",
    "rule_keywords",
    "whole_text_event",
]

MAX_HITS_PER_RULE = 16  # a wall of identical cascade lines adds nothing after the first few
MAX_EVIDENCE_CHARS = 600


@dataclass(frozen=True)
class RuleSet:
    rules: tuple[Rule, ...]
    # which frames are library code (rules/frames.yaml): what a rule's `raised_in` asks
    frames: LibraryFrames

    def __iter__(self) -> Any:
        return iter(self.rules)

    def __len__(self) -> int:
        return len(self.rules)

    @cached_property
    def text_rules(self) -> tuple[Rule, ...]:
        return tuple(r for r in self.rules if r.needs_text)

    @cached_property
    def prefilter(self) -> _Prefilter:
        """Which of `text_rules` may match each event (built once per rule set)."""
        return _Prefilter(self.text_rules)

    @cached_property
    def screens(self) -> tuple[_RuleScreen, ...]:
        """Per rule of `text_rules`, the literals each of its patterns needs."""
        return tuple(_RuleScreen.of(rule) for rule in self.text_rules)

    @cached_property
    def specific_text(self) -> RuleSet:
        """The specific (not generic) rules that read text: what a paste's whole text is read
        with (`paste_hits`), its prefilter built once per rule set."""
        return RuleSet(tuple(r for r in self.text_rules if not r.generic), self.frames)


# --------------------------------------------------------------------------- loading


def load(extra_dirs: Sequence[str | os.PathLike[str]] = ()) -> RuleSet:
    """The shipped rules plus every extra folder, validated and compiled (cached); the extra
    folders' rules must pass their own examples (RuleError naming each that does not)."""
    from triage.classify.rule_examples import check_team_examples  # it matches with a RuleSet

    kb = knowledge.load(extra_dirs)
    check_team_examples(kb)
    return ruleset(kb)


@lru_cache(maxsize=8)
def ruleset(kb: knowledge.Knowledge) -> RuleSet:
    """The rules of a loaded knowledge base, ready to match (one per load)."""
    return RuleSet(rules=kb.rules, frames=kb.frames)


# --------------------------------------------------------------------------- keyword prefilter
# A rule runs only when the event text contains one of its keywords (`rule_keywords`: literals
# every match of its patterns contains), found for many events at once.


# Events are joined by this separator into one text per batch; no keyword contains it, so a
# keyword found in the joined text lies inside one event.
_SEP = "\0"
# Every digit reads as 0 in the texts that are scanned: the many ranks of a job print the same
# lines with other numbers, and those lines become one text to scan.
_DIGITS = str.maketrans("123456789", "000000000")
_HAS_DIGIT = frozenset("0123456789")


class _Prefilter:
    """The rules worth running on each of many events, found with one `str.find` pass per
    keyword over the events' distinct texts joined together: a few C scans instead of a Python
    loop over every (event, rule) pair, linear in the size of the logs.

    A keyword without digits is in a text exactly when it is in the text with its digits
    masked (it cannot overlap a masked digit), so one scan of the masked text answers for every
    event that masks to it. A keyword with digits is looked for, with its digits masked too, in
    the masked texts first, then in each original text where that finds it.
    """

    def __init__(self, rules: Sequence[Rule]) -> None:
        self.always: list[int] = []  # rules without keywords run on every event
        # (lowercased?, keyword) -> rules; a lowercased keyword is tested on lowercased text
        self.keywords: dict[tuple[bool, str], list[int]] = {}
        for i, rule in enumerate(rules):
            # a case-insensitive keyword is "\0" + its lowercased text (see required_literals)
            split = [(k[0] == "\0", k[1:] if k[0] == "\0" else k) for k in rule.keywords or ()]
            if not split or any(not word or _SEP in word for _, word in split):
                self.always.append(i)
                continue
            for key in split:
                self.keywords.setdefault(key, []).append(i)
        # per case: (keyword with its digits masked, (keyword, rules))
        self.masked = {
            lower: [
                (word.translate(_DIGITS), (word, rules))
                for (is_lower, word), rules in self.keywords.items()
                if is_lower == lower
            ]
            for lower in (False, True)
        }

    def candidates(self, texts: Sequence[str]) -> list[list[int]]:
        """Per text, the indices (ascending) of the rules whose keywords it contains."""
        groups: dict[str, list[int]] = {}  # masked text -> the texts that mask to it
        for n, text in enumerate(texts):
            groups.setdefault(text.translate(_DIGITS), []).append(n)
        masked = list(groups)
        members = list(groups.values())
        group_rules: list[set[int]] = [set(self.always) for _ in masked]
        found: list[set[int]] = [set() for _ in texts]  # from keywords with digits
        lowered: dict[int, str] = {}
        for lower, hits in (
            (False, _find_all(self.masked[False], masked)),
            (True, _find_all(self.masked[True], [m.lower() for m in masked])),
        ):
            for (word, rules), where in hits:
                if not _HAS_DIGIT.intersection(word):
                    for g in where:
                        group_rules[g].update(rules)
                    continue
                for g in where:
                    for n in members[g]:
                        text = texts[n]
                        if lower:
                            if n not in lowered:
                                lowered[n] = text.lower()
                            text = lowered[n]
                        if word in text:
                            found[n].update(rules)
        out: list[list[int]] = [[] for _ in texts]
        for g, rules in enumerate(group_rules):
            shared = sorted(rules)  # read-only: the texts of a group share it
            for n in members[g]:
                out[n] = sorted(rules | found[n]) if found[n] else shared
        return out


def _find_all(
    keywords: Sequence[tuple[str, Any]], texts: Sequence[str]
) -> list[tuple[Any, list[int]]]:
    """For each (needle, tag): the tag and the indices of the texts that contain the needle."""
    if not keywords or not texts:
        return []
    joined = _SEP.join(texts)
    starts = [0] * len(texts)  # where each text begins in `joined`
    pos = 0
    for n, text in enumerate(texts):
        starts[n] = pos
        pos += len(text) + 1
    out = []
    for needle, tag in keywords:
        where: list[int] = []
        at = joined.find(needle)
        while at != -1:
            n = bisect_right(starts, at) - 1
            where.append(n)
            # one occurrence per text is enough: go on from the next text
            if n + 1 >= len(starts):
                break
            at = joined.find(needle, starts[n + 1])
        if where:
            out.append((tag, where))
    return out


class _RuleScreen(NamedTuple):
    """The literals each pattern of one rule needs (`required_literals`; None: unknown). The
    prefilter picks a rule when its text holds a literal of any one of its patterns; a rule
    such as generic-exception-library-code then has 16 long `any` patterns and a `not`, each
    a scan of a whole traceback, where a substring test tells most of them cannot match."""

    any: tuple[tuple[str, ...] | None, ...]
    not_: tuple[tuple[str, ...] | None, ...]
    all: tuple[tuple[str, ...] | None, ...]

    @classmethod
    def of(cls, rule: Rule) -> _RuleScreen:
        def needs(patterns: Sequence[regex.Pattern[str]]) -> tuple[tuple[str, ...] | None, ...]:
            return tuple(required_literals(p.pattern) for p in patterns)

        return cls(needs(rule.any), needs(rule.not_), needs(rule.all))


def _may_match(literals: tuple[str, ...] | None, text: str, lowered: str | None) -> bool:
    """Whether a pattern that needs one of `literals` can match `text` (`lowered`: the text
    lowercased when ASCII, else None)."""
    if literals is None:
        return True
    for literal in literals:
        if literal[:1] != "\0":
            if literal in text:
                return True
        # a case-insensitive literal ("\0" + lowercase): exact on an ASCII text and an ASCII
        # literal only (elsewhere other characters fold to its letters: only the regex knows)
        elif lowered is None or not literal.isascii() or literal[1:] in lowered:
            return True
    return False


# --------------------------------------------------------------------------- matching


def job_facts(analysis: Analysis | None) -> dict[str, Any]:
    """The job's facts a rule's action may name (the names are `JOB_FACT_NAMES`)."""
    if analysis is None:
        return {}
    known = analysis.facts
    facts: dict[str, Any] = known.values()
    if analysis.culprit_ranks:
        facts["ranks"] = ", ".join(str(r) for r in analysis.culprit_ranks)
    hang = analysis.hang
    if hang is not None:
        if hang.lagging_ranks and known.lagging_ranks is None:
            facts["lagging_ranks"] = ", ".join(str(r) for r in hang.lagging_ranks)
        if hang.collective and known.collective is None:
            op = hang.collective.op or hang.collective.profiling_name
            if op:
                facts["collective"] = op
        if hang.process_group:
            facts["process_group"] = hang.process_group
    return facts


def _kind_ok(rule: Rule, event: Event, source_kinds: Mapping[str, SourceKind] | None) -> bool:
    if not rule.event_kinds and not rule.source_kinds:
        return True
    if event.kind.value in rule.event_kinds:
        return True
    src = source_kinds.get(event.source) if source_kinds else None
    if src is None:
        # Unknown source kind: only an event-kind filter can reject the event.
        return not rule.event_kinds
    return src.value in rule.source_kinds


def _match_text(
    rule: Rule, text: str, screen: _RuleScreen, lowered: str | None, frames: LibraryFrames
) -> regex.Match[str] | None | bool:
    """The match to quote, True when only `all` patterns decide, None when no match.

    A pattern whose literals the text lacks is not run (it cannot match); `any` goes before
    `not`, the cheaper test first (searches have no side effects: the answer is the same)."""
    first: regex.Match[str] | None = None
    if rule.any:
        for pat, needs in zip(rule.any, screen.any, strict=True):
            if not _may_match(needs, text, lowered):
                continue
            if rule.raised_in is None:
                first = pat.search(text)
            else:
                first = _raised_in(pat, text, rule.raised_in, frames)
            if first:
                break
        if first is None:
            return None
    for pat, needs in zip(rule.not_, screen.not_, strict=True):
        if _may_match(needs, text, lowered) and pat.search(text):
            return None
    all_matches = []
    for pat, needs in zip(rule.all, screen.all, strict=True):
        m = pat.search(text) if _may_match(needs, text, lowered) else None
        if m is None:
            return None
        all_matches.append(m)
    if first is None and all_matches:
        first = all_matches[0]
    return first if first is not None else True


MAX_RAISED_TRIED = 32  # exception lines of one event read for `raised_in`


def _raised_in(
    pattern: regex.Pattern[str], text: str, where: str, frames: LibraryFrames
) -> regex.Match[str] | None:
    """The first exception line `pattern` finds that was raised in `where` ("library" or
    "user"): the frame printed right above it is library code or not, as the frames knowledge
    says. A line with no frame right above it was raised nowhere that the text shows."""
    for n, m in enumerate(pattern.finditer(text)):
        if n >= MAX_RAISED_TRIED:
            break
        frame = raising_file(text, m.start())
        if frame is None:
            continue
        file, cut = frame
        if frames.is_library(file, cut=cut) == (where == "library"):
            return m
    return None


def _captures(m: regex.Match[str] | None, rule: Rule, text: str) -> dict[str, str]:
    caps: dict[str, str] = {}
    for pat in rule.all:
        mm = pat.search(text)
        if mm:
            caps.update({k: v for k, v in mm.groupdict().items() if v is not None})
    if m is not None:
        caps.update({k: v for k, v in m.groupdict().items() if v is not None})
    return caps


def _quote(text: str, m: regex.Match[str] | None) -> tuple[str, int]:
    """The whole line(s) a match spans and their offset (0-based) inside the event text."""
    if m is None:
        first_line = text.split("\n", 1)[0]
        return first_line[:MAX_EVIDENCE_CHARS], 0
    start = text.rfind("\n", 0, m.start()) + 1
    end = text.find("\n", max(m.end() - 1, m.start()))
    if end == -1:
        end = len(text)
    quoted = text[start:end].strip("\r")
    if len(quoted) > MAX_EVIDENCE_CHARS:
        # Keep the matched part visible in very long lines (tqdm bars glued to errors).
        a = max(m.start() - start - 100, 0)
        quoted = quoted[a : a + MAX_EVIDENCE_CHARS]
    return quoted, text.count("\n", 0, start)


def _hit(
    rule: Rule,
    event: Event | None,
    m: regex.Match[str] | None,
    text: str,
    facts: Mapping[str, Any],
    job: JobConditions,
    from_cascade: bool,
) -> RuleHit:
    caps = _captures(m, rule, text) if rule.needs_text else {}
    context: dict[str, Any] = dict(facts)
    if event is not None:
        if event.rank is not None:
            context["rank"] = event.rank
        if event.host:
            context["host"] = event.host
    context.update(caps)
    concluded = frozenset(c for c, w in rule.root_cause.items() if w > 0)
    actions: dict[str, tuple[RuleAction, ...]] = {}
    for fix, action in rule.actions.items():
        chosen = action.choose(context, job)
        if chosen is not None:
            alt = chosen.alternative
            # advice for the causes its alternative says (`for:`), else its rule's
            causes = frozenset(alt.causes) or concluded
            actions[fix] = (RuleAction(chosen.text, causes, alt.frameworks, chosen.located),)
    quoted, offset = _quote(text, m) if text else ("", 0)
    line = event.line + offset if event is not None and event.line is not None else None
    numbers = event.line_numbers if event is not None else None
    if numbers and offset < len(numbers) and numbers[offset] is not None:
        line = numbers[offset]  # the quoted line's own line, past skipped blank lines
    return RuleHit(
        rule_id=rule.id,
        title=rule.title,
        event=event,
        symptom=dict(rule.symptom),
        root_cause=dict(rule.root_cause),
        fix=dict(rule.fix),
        stage=dict(rule.stage),
        captures=caps,
        actions=actions,
        evidence_text=quoted,
        evidence_line=line,
        from_cascade=from_cascade,
        generic=rule.generic,
        prescribes=_prescribed(rule, text),
        rules_out=rule.rules_out,
    )


def _prescribed(rule: Rule, text: str) -> str | None:
    """The rule's fix for the remedy its message prescribes, when this text says it."""
    remedy = rule.remedy
    return remedy.fix if remedy is not None and text and remedy.says.search(text) else None


def _finding_event(finding: Finding) -> Event | None:
    if not finding.evidence:
        return None
    ev = finding.evidence[0]
    return Event(
        source=ev.source,
        kind=EventKind.ERROR_LINE,
        text=ev.text,
        line=ev.line,
        rank=ev.rank,
        level=Level.ERROR,
    )


def match_events(
    events: Sequence[Event],
    analysis: Analysis | None = None,
    extra_dirs: Sequence[str | os.PathLike[str]] = (),
    *,
    source_kinds: Mapping[str, SourceKind] | None = None,
    rules: RuleSet | None = None,
    skip: Collection[str] = (),
) -> list[RuleHit]:
    """Every rule hit over these events (and the analysis's findings), in event order.

    `source_kinds` (event.source -> kind) lets rules filter on the input kind; without it
    only event-kind filters apply. A rule hits an event at most once, and at most
    MAX_HITS_PER_RULE times overall. The rules whose ids are in `skip` are not run.
    """
    ruleset = rules if rules is not None else load(extra_dirs)
    facts = job_facts(analysis)
    job = JobConditions.of(analysis.facts) if analysis is not None else JobConditions()
    all_findings = tuple(analysis.findings) if analysis is not None else ()
    findings = {
        r.id: [f for f in all_findings if _finding_ok(r, f)] for r in ruleset.rules if r.finding
    }
    cascade_set = set(analysis.cascade_events) if analysis is not None else set()
    initiating = set(analysis.initiating_events) if analysis is not None else set()
    counts: dict[str, int] = {}
    hits: list[RuleHit] = []

    text_rules = ruleset.text_rules
    screens = ruleset.screens
    # triage's own words on an input it could not read (a decoder that crashed, py-spy's
    # error) are no failure's words: the warning stays in the report, never a rule's evidence
    texts = ["" if ev.kind is EventKind.INPUT_WARNING else ev.text or "" for ev in events]
    candidates = ruleset.prefilter.candidates(texts)
    for event, text, indices in zip(events, texts, candidates, strict=True):
        if not text or not indices:
            continue
        lowered = text.lower() if text.isascii() else None
        on_event: list[tuple[Rule, RuleHit]] = []
        for i in indices:
            rule = text_rules[i]
            if counts.get(rule.id, 0) >= MAX_HITS_PER_RULE or rule.id in skip:
                continue
            if rule.finding and not findings[rule.id]:
                continue
            if not _kind_ok(rule, event, source_kinds):
                continue
            m = _match_text(rule, text, screens[i], lowered, ruleset.frames)
            if m is None:
                continue
            quoted_match = m if isinstance(m, regex.Match) else None
            from_cascade = event in cascade_set or (rule.cascade and event not in initiating)
            hit_facts = dict(facts)
            if rule.finding:
                hit_facts.update(_finding_facts(findings[rule.id][0]))
            on_event.append(
                (rule, _hit(rule, event, quoted_match, text, hit_facts, job, from_cascade))
            )
            counts[rule.id] = counts.get(rule.id, 0) + 1
        # a rule that refines another (`overrides`) speaks alone where both match
        refined = {rid for rule, _ in on_event for rid in rule.overrides}
        hits.extend(hit for rule, hit in on_event if rule.id not in refined)

    # Finding-only rules: one hit per finding of that kind.
    for rule in ruleset.rules:
        if rule.needs_text or not rule.finding or rule.id in skip:
            continue
        for finding in findings[rule.id][:MAX_HITS_PER_RULE]:
            ev = _finding_event(finding)
            hit_facts = {**facts, **_finding_facts(finding)}
            hit = _hit(rule, ev, None, "", hit_facts, job, rule.cascade)
            hits.append(
                RuleHit(
                    **{
                        **hit.__dict__,
                        # the line the finding stands on, as its file has it: the finding's
                        # own sentence is triage's, never a quote of that file
                        "evidence_text": ev.text if ev is not None else finding.summary,
                        "evidence_line": ev.line if ev is not None else None,
                        "finding": finding,
                    }
                )
            )
    return hits


def _finding_ok(rule: Rule, finding: Finding) -> bool:
    if finding.kind != rule.finding:
        return False
    for key, pat in rule.finding_where.items():
        # an unknown fact reads as "" so that negative patterns ('^(?!...)') still pass
        value = finding.facts.value(key)
        if not pat.search("" if value is None else plain(value)):
            return False
    return True


def _finding_facts(finding: Finding) -> dict[str, Any]:
    facts = finding.facts.values()
    facts["summary"] = finding.summary
    if finding.ranks:
        facts["ranks"] = ", ".join(str(r) for r in finding.ranks)
        facts["rank"] = finding.ranks[0]
    return facts


# --------------------------------------------------------------------------- library API


def list_rules(extra_dirs: Sequence[str | os.PathLike[str]] = ()) -> list[Rule]:
    return list(load(extra_dirs).rules)


def describe(rule: Rule) -> str:
    """One line per rule for `triage rules list`."""

    def top(weights: Mapping[str, float]) -> str:
        return ",".join(k for k, _ in sorted(weights.items(), key=lambda kv: -kv[1])[:2]) or "-"

    flags = (" cascade" if rule.cascade else "") + (" generic" if rule.generic else "")
    return (
        f"{rule.id:<44} {top(rule.symptom):<8} {top(rule.root_cause):<8} "
        f"{top(rule.fix):<6}{flags}  {rule.title}"
    )


def match_text(
    text: str,
    events: Sequence[Event],
    analysis: Analysis | None = None,
    extra_dirs: Sequence[str | os.PathLike[str]] = (),
    *,
    rules: RuleSet | None = None,
) -> list[RuleHit]:
    """Rule hits over a pasted text: the events the log parser read from it, then the whole
    text for the rest (`rules`: the rules to run; without it, the shipped ones plus
    `extra_dirs`).

    A parser keeps only notable lines and splits the paste into events, so a message the parser
    drops (a `Last error:` detail, an exception without its type) or one that spans two events
    would be missed; rules that did not hit any event get one more try on the whole text.
    """
    ruleset = rules if rules is not None else load(extra_dirs)
    parsed = tuple(events) or (whole_text_event(text),)
    hits = match_events(parsed, analysis, rules=ruleset)
    if len(parsed) == 1 and parsed[0].text == text:
        return hits
    seen = {h.rule_id for h in hits}
    return hits + paste_hits(text, parsed, seen, analysis, rules=ruleset, source=parsed[0].source)


def paste_hits(
    text: str,
    events: Sequence[Event],
    seen: Collection[str],
    analysis: Analysis | None = None,
    *,
    rules: RuleSet,
    source: str = "<pasted>",
    source_kinds: Mapping[str, SourceKind] | None = None,
) -> list[RuleHit]:
    """Hits over a paste's whole text of the rules that hit none of its events (`seen`: the
    ids that did), each kept only where what it matched lies outside every single event.

    That is a message that spans lines the parser cut into two events (a wrapped
    `ZeRORuntimeException`, two ranks' collective fingerprints), or a line the parser kept no
    event of (the `Saving FSDP model` INFO line before a watchdog timeout, the code line above
    a bare `IndexError`). A rule whose every match sits inside one event already had its say
    on that event, whose text the parser cleaned (rank prefixes dropped, wrapped paths
    joined); the whole text would only let a `not` pattern miss on the raw prefixes, or join
    pieces of two events that each read alone said nothing of. The hit's event is the span of
    the paste from its first matched line to its last, so the generic layer yields to it
    only on those lines.

    Only the specific rules (a mechanism's message) get this second reading. A generic rule
    gives an exception's family its prior, read from the exception line and the traceback
    layout of an event the parser made of it; over the raw paste its frame tests read the
    layout wrong (a `[rank5]:` prefix or an unindented frame line turns a library frame into
    the user's), and the exception line it needs is one the parser already read.
    """
    rest = rules.specific_text
    if not text or not rest.rules:
        return []
    whole = whole_text_event(text, source)
    hits = match_events([whole], analysis, rules=rest, source_kinds=source_kinds, skip=seen)
    if not hits:
        return []
    by_id = {r.id: r for r in rest.rules}
    held = [_lines_held(ev) for ev in events if ev.kind is not EventKind.INPUT_WARNING]
    starts = [0, *(m.end() for m in _NEWLINE.finditer(text))]
    kept = []
    for hit in hits:
        matched = _matched_spans(by_id[hit.rule_id], text, rest.frames)
        spans = [_line_span(starts, a, b) for a, b in matched]
        outside = [sp for sp in spans if not any(set(range(sp[0], sp[1] + 1)) <= h for h in held)]
        if not outside:
            continue
        first = min(a for a, _ in spans)
        last = max(b for _, b in spans)
        kept.append(replace(hit, event=_span_event(text, starts, first, last, source)))
    return kept


_NEWLINE = regex.compile("\n")


def _lines_held(event: Event) -> frozenset[int]:
    """The paste's lines (1-based) an event was read from."""
    if event.line_numbers:
        return frozenset(n for n in event.line_numbers if n is not None)
    if event.line is None:
        return frozenset()
    end = event.end_line if event.end_line is not None else event.line
    return frozenset(range(event.line, end + 1))


def _matched_spans(rule: Rule, text: str, frames: LibraryFrames) -> list[tuple[int, int]]:
    """Where in `text` the rule's first `any` pattern that matches, and each `all` pattern,
    matched (character offsets)."""
    spans: list[tuple[int, int]] = []
    for pat in rule.any:
        m = (
            pat.search(text)
            if rule.raised_in is None
            else _raised_in(pat, text, rule.raised_in, frames)
        )
        if m is not None:
            spans.append(m.span())
            break
    for pat in rule.all:
        m = pat.search(text)
        if m is not None:
            spans.append(m.span())
    return spans


def _line_span(starts: Sequence[int], a: int, b: int) -> tuple[int, int]:
    """The first and last line (1-based) of characters a..b (a match's span)."""
    return bisect_right(starts, a), bisect_right(starts, max(b - 1, a))


def _span_event(text: str, starts: Sequence[int], first: int, last: int, source: str) -> Event:
    end = starts[last] - 1 if last < len(starts) else len(text)
    span = text[starts[first - 1] : end]
    return replace(whole_text_event(span, source), line=first, end_line=last)
