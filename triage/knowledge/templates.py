"""The log parser's line templates (`kind: templates`), see `rules/templates.yaml`.

A template is a regex with named groups and what the event it makes says: its kind, level,
attrs (constants or converted groups), its own pid / host / time / local rank, whether it
carries a RankExit. The parser (`triage.parsers.rank_log`) tries them in order on each line's
message; every template's examples are fed through the parser by the tests.

The file also says which words make a line without a level an error or a warning event, what
the shell's signal words mean, and which healthy lines the big-log marker scan must skip. The
marker needles are derived from it and from the rules (`needles`).

Shipped only: the parser reads it when it is imported.
"""

from __future__ import annotations

import re
import signal as _signal
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from triage import regex_cache
from triage.literals import group_literals, required_literals
from triage.model import LINE_NOTICE_FIELDS, EventKind, Level

KIND = "templates"
_KEYS = {
    "kind",
    "error_words",
    "warning_words",
    "fatal_in_info",
    "not_an_error",
    "signal_words",
    "healthy",
    "templates",
}
_TEMPLATE_KEYS = {
    "id",
    "title",
    "pattern",
    "event",
    "level",
    "level_if",
    "only_levels",
    "unleveled",
    "also",
    "optional",
    "attrs",
    "pid",
    "host",
    "time",
    "local_rank",
    "exit",
    "exception",
    "examples",
    "no_match",
}
_EVENTS = {
    "agent": EventKind.AGENT,
    "rank_exit": EventKind.RANK_EXIT,
    "signal": EventKind.SIGNAL,
    "warning_line": EventKind.WARNING_LINE,
}
_LEVELS = {"error": Level.ERROR, "warning": Level.WARNING, "info": Level.INFO, "fatal": Level.FATAL}
CONVERSIONS = ("str", "int", "signal", "word_signal", "lower", "strip", "present", "dated")
_VALUE = re.compile(r"^\$(?P<group>\w+)(?::(?P<conv>\w+))?$")
MIN_NEEDLE = 4  # the marker scan's shortest needle


@dataclass(frozen=True)
class Value:
    """A constant, or a named group read through a conversion."""

    group: str | None = None
    conversion: str = "str"
    constant: Any = None

    @classmethod
    def parse(cls, raw: Any) -> Value:
        if isinstance(raw, str):
            m = _VALUE.match(raw)
            if m is not None:
                return cls(group=m["group"], conversion=m["conv"] or "str")
        return cls(constant=raw)


@dataclass(frozen=True)
class Template:
    id: str
    title: str
    pattern: re.Pattern[str]
    literals: tuple[str, ...]  # one of which the message holds (NUL-led: case-insensitive)
    event: EventKind
    level: Level | None  # None: the line's own level, else error
    level_if: tuple[str, str, Level] | None = None  # (group, value, level)
    only_levels: frozenset[Level] | None = None
    unleveled: bool = False
    also: re.Pattern[str] | None = None
    optional: re.Pattern[str] | None = None
    attrs: Mapping[str, Value] = field(default_factory=dict)
    pid: Value | None = None
    host: Value | None = None
    time: Value | None = None
    local_rank: Value | None = None
    exit: bool = False
    # also read on a Python traceback's exception line (`Type: message`): a launcher that
    # reports a worker's end by raising (mp.spawn's ProcessExitedException)
    exception: bool = False
    examples: tuple[tuple[str, Mapping[str, Any]], ...] = ()
    no_match: tuple[str, ...] = ()


@dataclass(frozen=True)
class Templates:
    templates: tuple[Template, ...] = ()
    error_words: re.Pattern[str] | None = None
    warning_words: re.Pattern[str] | None = None
    fatal_in_info: re.Pattern[str] | None = None
    signal_words: Mapping[str, str] = field(default_factory=dict)
    healthy: tuple[str, ...] = ()
    # error words that say no error where they stand (`no error`, `-Wno-error=pedantic`)
    not_an_error: re.Pattern[str] | None = None

    def needles(self) -> list[str]:
        """Lowercased literals of the templates and of the error and warning words: one is in
        every line that can make a template's or a word's event."""
        out: list[str] = []
        for template in self.templates:
            out.extend(_lower(lit) for lit in template.literals)
        for pattern in (self.error_words, self.warning_words):
            if pattern is not None:
                out.extend(_lower(lit) for lit in literals_of(pattern.pattern))
        return list(dict.fromkeys(out))


def _lower(literal: str) -> str:
    return (literal[1:] if literal.startswith("\0") else literal).lower()


def literals_of(pattern: str) -> tuple[str, ...]:
    """Literals every match of a pattern holds, one per top-level branch, at least MIN_NEEDLE
    characters where the branch has one that long; () when a branch has none."""
    found = required_literals(pattern, min_len=MIN_NEEDLE)
    return found or ()


def signal_of_exit_code(code: int | None) -> str | None:
    """The signal a negative exit code names (-9: SIGKILL), else None."""
    if code is None or code >= 0:
        return None
    try:
        return _signal.Signals(-code).name
    except ValueError:
        return None


def build(body: Mapping[str, Any], report: Callable[[str, str], None], team: bool) -> Templates:
    unknown = set(body) - _KEYS
    if unknown:
        report("", f"unknown key(s) {sorted(unknown)}; allowed: {sorted(_KEYS - {'kind'})}")
    words = {}
    for key in ("error_words", "warning_words", "fatal_in_info"):
        words[key] = _compile(body.get(key), key, report)
        if words[key] is not None and key != "fatal_in_info" and not literals_of(body[key]):
            report(key, "every branch needs a literal of 4+ characters (the marker scan's)")
    signal_words = body.get("signal_words") or {}
    if not isinstance(signal_words, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and v.startswith("SIG")
        for k, v in signal_words.items()
    ):
        report("signal_words", "must map shell words to signal names (SIG...)")
        signal_words = {}
    healthy = body.get("healthy") or []
    if not isinstance(healthy, list) or not all(isinstance(h, str) for h in healthy):
        report("healthy", "must be a list of lines")
        healthy = []
    out = []
    seen: set[str] = set()
    for n, raw in enumerate(body.get("templates") or [], 1):
        template = _template(raw, n, report)
        if template is None:
            continue
        if template.id in seen:
            report(f"template {template.id!r}", "is defined twice")
        seen.add(template.id)
        out.append(template)
    if not out:
        report("templates", "needs at least one template")
    return Templates(
        tuple(out),
        words["error_words"],
        words["warning_words"],
        words["fatal_in_info"],
        dict(signal_words),
        tuple(healthy),
        _compile(body.get("not_an_error"), "not_an_error", report)
        if body.get("not_an_error") is not None
        else None,
    )


def _template(raw: Any, n: int, report: Callable[[str, str], None]) -> Template | None:
    if not isinstance(raw, dict) or not isinstance(raw.get("id"), str):
        report(f"templates #{n}", "needs an `id`")
        return None
    item = f"template {raw['id']!r}"
    problems: list[str] = []
    bad = set(raw) - _TEMPLATE_KEYS
    if bad:
        problems.append(f"unknown key(s) {sorted(bad)}; allowed: {sorted(_TEMPLATE_KEYS)}")
    pattern = _compile(raw.get("pattern"), item, report)
    if pattern is None:
        return None
    literals = group_literals(pattern.pattern, min_len=MIN_NEEDLE)
    if literals is None:
        problems.append("its pattern needs a literal of 4+ characters (the marker scan's)")
    event = _EVENTS.get(raw.get("event"))
    if event is None:
        problems.append(f"`event` must be one of {sorted(_EVENTS)}")
    level_name = raw.get("level")
    level = None if level_name == "line" else _LEVELS.get(level_name)
    if level is None and level_name != "line":
        problems.append(f"`level` must be `line` or one of {sorted(_LEVELS)}")
    level_if = None
    if raw.get("level_if") is not None:
        spec = raw["level_if"]
        if not isinstance(spec, dict) or set(spec) != {"group", "equals", "level"}:
            problems.append("`level_if` is {group, equals, level}")
        elif spec["level"] not in _LEVELS or spec["group"] not in pattern.groupindex:
            problems.append("`level_if` names an unknown group or level")
        else:
            level_if = (spec["group"], str(spec["equals"]), _LEVELS[spec["level"]])
    only = None
    if raw.get("only_levels") is not None:
        names = raw["only_levels"]
        if not isinstance(names, list) or not all(x in _LEVELS for x in names):
            problems.append(f"`only_levels` is a list of {sorted(_LEVELS)}")
        else:
            only = frozenset(_LEVELS[x] for x in names)
    also = _compile(raw["also"], f"{item} also", report) if "also" in raw else None
    optional = _compile(raw["optional"], f"{item} optional", report) if "optional" in raw else None
    groups = set(pattern.groupindex) | set(optional.groupindex if optional else ())
    values: dict[str, Value] = {}
    raw_attrs = raw.get("attrs") or {}
    if not isinstance(raw_attrs, dict):
        problems.append("`attrs` must map names to values")
        raw_attrs = {}
    for name, value in raw_attrs.items():
        if str(name) not in LINE_NOTICE_FIELDS:
            # the event carries them as a LineNotice: a name it has no field for is lost
            problems.append(f"`attrs.{name}` is not a field of a line notice")
            continue
        values[str(name)] = _value(value, groups, f"attrs.{name}", problems)
    fields = {
        key: _value(raw[key], groups, key, problems) if key in raw else None
        for key in ("pid", "host", "time", "local_rank")
    }
    examples = []
    for ex in raw.get("examples") or []:
        if isinstance(ex, dict) and isinstance(ex.get("line"), str):
            examples.append((ex["line"], dict(ex.get("attrs") or {})))
        else:
            problems.append("`examples` entries are {line, attrs}")
    if not examples:
        problems.append("needs `examples`: lines and the event attrs each must make")
    no_match = raw.get("no_match") or []
    if not isinstance(no_match, list) or not all(isinstance(x, str) for x in no_match):
        problems.append("`no_match` is a list of lines")
        no_match = []
    for message in problems:
        report(item, message)
    if problems or event is None:
        return None
    return Template(
        id=raw["id"],
        title=str(raw.get("title") or ""),
        pattern=pattern,
        literals=literals or (),
        event=event,
        level=level,
        level_if=level_if,
        only_levels=only,
        unleveled=bool(raw.get("unleveled")),
        also=also,
        optional=optional,
        attrs=values,
        exit=bool(raw.get("exit")),
        exception=bool(raw.get("exception")),
        examples=tuple(examples),
        no_match=tuple(no_match),
        **fields,
    )


def _value(raw: Any, groups: set[str], what: str, problems: list[str]) -> Value:
    value = Value.parse(raw)
    if value.group is not None:
        if value.group not in groups:
            problems.append(f"`{what}` reads group {value.group!r}, which the pattern lacks")
        if value.conversion not in CONVERSIONS:
            problems.append(f"`{what}`: unknown conversion {value.conversion!r}; {CONVERSIONS}")
    return value


def _compile(text: Any, item: str, report: Callable[[str, str], None]) -> re.Pattern[str] | None:
    if not isinstance(text, str):
        report(item, "needs a regex")
        return None
    try:
        return regex_cache.compile_std(text)
    except re.error as exc:
        report(item, f"bad regex {text!r}: {exc}")
        return None


def merge(values: Sequence[Templates]) -> Templates:
    return values[0] if values else Templates()
