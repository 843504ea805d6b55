"""What the knowledge validator reports: every problem, each with its file and item.

pySigma style: a validator does not stop at the first problem; it returns all it finds, so
one run shows everything that is wrong with a folder of rules.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import regex

from triage import regex_cache


@dataclass(frozen=True)
class Problem:
    """One thing wrong with one item of one knowledge file."""

    file: str
    item: str  # "rule 'nccl-shm-exhausted'", "template 'torchrun-worker-failed'", "" (file)
    message: str

    def __str__(self) -> str:
        return (
            f"{self.file}: {self.item}: {self.message}"
            if self.item
            else (f"{self.file}: {self.message}")
        )


class KnowledgeError(ValueError):
    """Knowledge that cannot be used: every problem found, each naming its file and item."""

    def __init__(self, problems: Iterable[Problem]) -> None:
        self.problems = tuple(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


class Problems:
    """Collects problems while files are checked; `raise_if_any` ends a load that found some."""

    def __init__(self) -> None:
        self.found: list[Problem] = []

    def add(self, file: object, item: str, message: str) -> None:
        self.found.append(Problem(str(file), item, message))

    def extend(self, problems: Iterable[Problem]) -> None:
        self.found.extend(problems)

    def __bool__(self) -> bool:
        return bool(self.found)

    def raise_if_any(self, error: type[KnowledgeError] = KnowledgeError) -> None:
        if self.found:
            raise error(self.found)


class _Searches(Protocol):
    def search(self, string: str, /) -> Any: ...


def check_examples(
    pattern: _Searches, examples: Any, item: str, report: Callable[[str, str], None]
) -> None:
    """A pattern's `examples: {match: [...], no_match: [...]}`: both are needed, every `match`
    line must be found and no `no_match` line may be."""
    examples = examples if isinstance(examples, Mapping) else {}
    match, no_match = examples.get("match") or [], examples.get("no_match") or []
    if not match or not no_match:
        report(item, "needs examples: match and no_match")
    for line in match:
        if not pattern.search(line):
            report(item, f"misses its example {line!r}")
    for line in no_match:
        if pattern.search(line):
            report(item, f"matches its no_match example {line!r}")


def pattern_with_examples(
    spec: Any,
    item: str,
    keys: Collection[str],
    report: Callable[[str, str], None],
    pattern: Callable[[Any], regex.Pattern[str] | None],
    pattern_key: str,
    examples_are: str,
) -> tuple[regex.Pattern[str] | None, tuple[str, ...]] | None:
    """An entry that names a pattern and the examples it must find: a mapping of `keys` whose
    `pattern_key` `pattern` builds (reporting its own problems), its `examples` either a list
    of lines it must find (`examples_are` says what they are, when missing) or
    `{match, no_match}`. Every problem is reported; None when the entry is not a mapping, else
    the pattern (None when it could not be built) and the lines it must match."""
    if not isinstance(spec, Mapping):
        report(item, f"must be a mapping of {', '.join(sorted(keys))}")
        return None
    bad = set(spec) - set(keys)
    if bad:
        report(item, f"unknown key(s) {sorted(bad)}; allowed: {sorted(keys)}")
    compiled = pattern(spec.get(pattern_key))
    raw = spec.get("examples")
    if isinstance(raw, Mapping):
        if compiled is not None:
            check_examples(compiled, raw, item, report)
        match = raw.get("match") or []
        return compiled, tuple(line for line in match if isinstance(line, str))
    if raw is not None and not (isinstance(raw, list) and all(isinstance(v, str) for v in raw)):
        report(f"{item} examples", "must be a list of strings")
        raw = None
    examples = tuple(raw or ())
    if not examples:
        report(item, f"needs `examples`: {examples_are}")
    for line in examples:
        if compiled is not None and not compiled.search(line):
            report(item, f"misses its example {line!r}")
    return compiled, examples


def compile_regex(
    text: Any, item: str, report: Callable[[str, str], None], flags: int = 0
) -> regex.Pattern[str] | None:
    """A knowledge file's regex, compiled (through the disk cache); a missing or broken one
    is reported with its item and gives None, so loading goes on and says every problem."""
    if not isinstance(text, str) or not text:
        report(item, "needs a regex")
        return None
    try:
        return regex_cache.compile(text, flags)
    except regex.error as exc:
        report(item, f"bad regex {text!r}: {exc}")
        return None


def compile_alternation(
    texts: Sequence[str], item: str, report: Callable[[str, str], None], flags: int = 0
) -> regex.Pattern[str] | None:
    """Several of a knowledge file's regexes as one pattern that matches where any of them
    does (each in its own group, so an inline `|` stays inside it); None for none, or where
    one does not compile: that one is reported with its item, like `compile_regex`."""
    if not texts:
        return None
    try:
        return regex_cache.compile("|".join(f"(?:{text})" for text in texts), flags)
    except regex.error as exc:
        # name the one that is broken; each may compile alone and still clash (a group name
        # used twice)
        if all(compile_regex(text, item, report, flags) is not None for text in texts):
            report(item, f"the regexes do not compile as one: {exc}")
        return None
