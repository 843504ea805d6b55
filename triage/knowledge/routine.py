"""What healthy jobs print (`kind: routine`): lines that are never a failure by themselves.

    kind: routine
    lines:
      - id: ds-fp16-overflow-skip
        title: DeepSpeed's dynamic loss scaler skips a step after an fp16 overflow
        source: deepspeed/runtime/fp16/loss_scaler.py (DynamicLossScaler.update_scale)
        pattern: 'OVERFLOW! Rank \\d+ Skipping step'
        fault: "only when the scale reaches its floor (rule fp16-loss-scale-minimum)"
        examples:
          match: ["[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536"]
          no_match: ["Current loss scale already at minimum - cannot decrease scale anymore"]
        last_words: false   # true: the message a program dies of (git's `fatal:`); as the
                            # last line its program printed it stays the failure

Every healthy fp16 run prints loss-scale overflows in its first steps, every DeepSpeed job its op
report, every Megatron job dozens of NCCL sub-communicator set-ups. Read as errors they turn a
finished run into a failure. In a job's logs (not in a pasted error, where the user quotes the
line as the problem), a rule hit on a routine line is dropped unless the rule says why the line
is still a fault there (`routine_fault:`, see triage.knowledge.rules), and the outcome of a job
(triage.analysis.outcome) never rests on one. Shipped only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import regex

from triage.knowledge.problems import compile_regex
from triage.literals import required_literals

KIND = "routine"
_KEYS = {"kind", "lines"}
_LINE_KEYS = {"id", "title", "source", "pattern", "fault", "examples", "last_words"}


@dataclass(frozen=True)
class RoutineLine:
    id: str
    title: str
    source: str  # the library module that prints it
    pattern: regex.Pattern[str]
    fault: str  # when a line like it is a fault after all (and which rule says so)
    examples: tuple[str, ...]
    no_match: tuple[str, ...]
    # the message of a program that dies of it (git's `die`): as the last thing its log holds
    # (before the launcher's exit report) it is what ended the script, not routine
    last_words: bool = False


@dataclass(frozen=True)
class Routine:
    lines: tuple[RoutineLine, ...] = ()
    # each line's literals, one of which every match holds ("\0"-prefixed: lowercased), None
    # where its pattern has none: a text that holds none of a line's is no match of it, its
    # regex not run (a job's events each tried ~27 patterns once one routine word was in them:
    # a torch warning that holds `unused`)
    line_screens: tuple[tuple[str, ...] | None, ...] = ()

    @cached_property
    def screen(self) -> tuple[str, ...] | None:
        """The literals of every line that has some, together (None when no screens were
        given): one cheap screen before any line's. A text that holds none of them can only
        be one of the lines without literals (`unscreened`)."""
        screens = self.line_screens
        if len(screens) != len(self.lines):
            return None
        return tuple(dict.fromkeys(lit for lits in screens if lits for lit in lits))

    @cached_property
    def unscreened(self) -> tuple[RoutineLine, ...]:
        """The lines whose patterns hold no literal to screen by (a shell's `+ cmd` echo, a
        config dump's `'key': value`), in order: tried on every text."""
        return tuple(
            line for line, lits in zip(self.lines, self.line_screens, strict=False) if not lits
        )

    @cached_property
    def _answers(self) -> dict[str, RoutineLine | None]:
        """`which`'s answers so far: a job's events repeat their texts (the same warning from
        each rank), and each new text tries every line's screen (~40 us). A plain dict, not
        `functools.lru_cache` on the method: the knowledge must stay picklable."""
        return {}

    def which(self, text: str) -> RoutineLine | None:
        """The routine line `text` is (its first line that is one), or None."""
        if len(text) > _MAX_KEPT_TEXT:  # a traceback's text: kept by no answer
            return self._which(text)
        answers = self._answers
        if text in answers:
            return answers[text]
        if len(answers) >= _MAX_ANSWERS:  # bounded: a batch process reads many jobs
            answers.clear()
        found = answers[text] = self._which(text)
        return found

    def _which(self, text: str) -> RoutineLine | None:
        low = None
        if self.screen is not None:
            low = text.lower()
            if not any(_holds(lit, text, low) for lit in self.screen):
                # no screened line can match: the first match is the first unscreened one's
                for line in self.unscreened:
                    if line.pattern.search(text):
                        return line
                return None
        screens = self.line_screens or (None,) * len(self.lines)
        for line, lits in zip(self.lines, screens, strict=True):
            if lits is not None:
                low = text.lower() if low is None else low
                if not any(_holds(lit, text, low) for lit in lits):
                    continue
            if line.pattern.search(text):
                return line
        return None


# texts whose answer `which` keeps before it starts again, and the longest text it keeps
_MAX_ANSWERS = 4096
_MAX_KEPT_TEXT = 2048


def _holds(literal: str, text: str, low: str) -> bool:
    """Whether `text` holds a screen's literal ("\0"-led: case-insensitive, in `low`)."""
    return (literal[1:] in low) if literal.startswith("\0") else (literal in text)


def build(body: Mapping[str, Any], report: Callable[[str, str], None], team: bool) -> Routine:
    unknown = set(body) - _KEYS
    if unknown:
        report("", f"unknown key(s) {sorted(unknown)}; allowed: lines")
    raw = body.get("lines")
    if not isinstance(raw, list) or not raw:
        report("lines", "needs a list of routine lines")
        return Routine()
    out: list[RoutineLine] = []
    seen: set[str] = set()
    for n, spec in enumerate(raw):
        line = _line(spec, n, report)
        if line is None:
            continue
        if line.id in seen:
            report(f"line {line.id}", "is defined twice")
            continue
        seen.add(line.id)
        out.append(line)
    screens = tuple(required_literals(line.pattern.pattern, min_len=4) or None for line in out)
    return Routine(tuple(out), screens)


def _line(spec: Any, n: int, report: Callable[[str, str], None]) -> RoutineLine | None:
    if not isinstance(spec, dict):
        report(f"lines[{n}]", "must be a mapping")
        return None
    item = f"line {spec.get('id', n)}"
    bad = set(spec) - _LINE_KEYS
    if bad:
        report(item, f"unknown key(s) {sorted(bad)}; allowed: {sorted(_LINE_KEYS)}")
    missing = [k for k in ("id", "title", "source", "pattern", "fault") if not spec.get(k)]
    if missing:
        report(item, f"needs {', '.join(missing)}")
        return None
    pattern = compile_regex(str(spec["pattern"]), item, report)
    if pattern is None:
        return None
    examples = spec.get("examples") or {}
    must = tuple(str(x) for x in examples.get("match") or ())
    must_not = tuple(str(x) for x in examples.get("no_match") or ())
    last_words = spec.get("last_words", False)
    if not isinstance(last_words, bool):
        report(item, "last_words must be true or false")
        last_words = False
    if not must:
        report(item, "needs examples.match: real lines the library prints")
    for example in must:
        if not pattern.search(example):
            report(item, f"example does not match: {example!r}")
    for example in must_not:
        if pattern.search(example):
            report(item, f"no_match example matches: {example!r}")
    return RoutineLine(
        id=str(spec["id"]),
        title=str(spec["title"]),
        source=str(spec["source"]),
        pattern=pattern,
        fault=str(spec["fault"]),
        examples=must,
        no_match=must_not,
        last_words=last_words,
    )


def merge(values: Sequence[Routine]) -> Routine:
    return values[0] if values else Routine()
