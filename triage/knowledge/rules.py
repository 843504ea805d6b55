r"""The rule schema: what a rule file may say, checked and compiled.

A rule is data (Sigma style): what it matches (regexes over an event's text, event or source
kinds, a correlate finding) and what it concludes (weighted symptom / root cause / fix / stage
ids of the taxonomy), which line to quote, and action templates filled from the regex's named
groups and the job's facts. Every rule carries examples that must and must not match it
(Semgrep style); `tests/test_rules.py` runs them all through the log parser.

A rule file (`rules/*.yaml`, or a team's folder passed as `--rules DIR`) holds a list of rules:

    - id: nccl-shm-exhausted                # unique, lowercase
      title: NCCL cannot create its shared-memory segment
      description: why it happens (the mechanism)
      references: [https://...]             # issues/docs that teach the mechanism
      match:
        kind: [nccl_warn, rank_log]         # optional: event kinds and/or source kinds
        any: ['Error while creating shared memory segment (?P<segment>\S+)']  # one must match
        all: ['...']                        # every one must match (same event)
        not: ['...']                        # none may match
        raised_in: library                  # or user: where the exception line `any` found
                                            # was raised, by the frame printed right above it
                                            # (library code or not: rules/frames.yaml decides)
        finding: lagging_rank               # or {kind: rank_exit, where: {signal: SIGKILL}}
      concludes:                            # taxonomy id -> weight in [0, 1]
        symptom: {S12: 0.9}
        root_cause: {R05: 0.9}
        fix: {F5: 0.85, F4: 0.3}
        stage: {ST3: 0.8}                   # default: the stage of the strongest symptom
      layer: specific                       # or generic: a prior for a whole family (an exception
                                            # class, OOM, a signal) that yields to a specific rule
                                            # explaining the same failure
      sources: [deepspeed/runtime/engine.py]  # package/module that prints the message
      routine_fault: why a line healthy jobs print (rules/routine.yaml) is a fault here;
                                            # without it, hits on routine lines of a job's
                                            # logs are dropped (pastes keep them)
      overrides: [signature-changed]        # more general rules this one refines: where
                                            # both match one event, only this one's hit stays
      rules_out:                            # labels the matched fact contradicts: they are
        symptom: [S17]                      # not offered, whatever else votes for them (a
        root_cause: [R11]                   # "no hang" finding rules out a collective hang)
      remedy:                               # the message names its own remedy: when the
        fix: F3                             # matched event says it (`says`), the rule's fix
        says: 'weights_only set to False'   # for it leads, in a paste too (standing.py)
      actions:                              # per fix: one action, filled with {named_group}
        F5: "Give the container more shared memory (segment {segment})"   # / {fact}
        F4:                                 # or alternatives, most specific first: the first
          - text: "... `NCCL_SHM_DISABLE=1` in the DeepSpeed launcher's env"  # that applies
            when: {framework: deepspeed}    # to the job is given (triage.knowledge.actions)
          - "... {host} ..."
          - "... any host ..."
      examples:
        match: ["...a line the rule must match..."]      # or {text:, paste:, finding:, facts:}
        no_match: ["...a line it must not match..."]

Whether a rule's message is the cascade of another rank's failure is not said here: the
cascade file (`kind: cascade`) lists the rules of each cascade family.

Patterns use the `regex` module with MULTILINE; `(?i:...)` for case-insensitive parts. Every
problem of every rule is reported (file, rule, field), not only the first. A new optional key
is one entry in `OPTIONAL_KEYS` and, if it carries data, one field of `Rule`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import regex

from triage import regex_cache, taxonomy
from triage.knowledge.actions import JOB_FACT_NAMES, Action, parse_action
from triage.knowledge.finding_examples import finding_example
from triage.knowledge.problems import KnowledgeError
from triage.literals import required_literals
from triage.model import FACTS_OF, EventKind, FindingKind, SourceKind

EVENT_KINDS = frozenset(k.value for k in EventKind)
SOURCE_KINDS = frozenset(k.value for k in SourceKind)
REQUIRED_KEYS = frozenset({"id", "title", "match", "concludes", "examples"})
OPTIONAL_KEYS = frozenset(
    {
        "description",
        "references",
        "actions",
        "falsepositives",
        "tags",
        "sources",
        "layer",
        "routine_fault",
        "remedy",
        "rules_out",
        "overrides",
    }
)
LAYERS = ("specific", "generic")
MATCH_KEYS = frozenset({"kind", "any", "all", "not", "raised_in", "finding"})
# `raised_in`: the frame an exception line was raised in is library code, or the user's
RAISED_IN = ("library", "user")
CONCLUDE_KEYS = frozenset({"symptom", "root_cause", "fix", "stage"})
# the label fields a rule may rule out: what the job was and why (a fix is chosen, not true)
RULES_OUT_KEYS = ("symptom", "root_cause")
# `paste: true`: a paste, not lines a log holds (a fragment a person trimmed, or lines that
# only mean something together); the tests read it only as `triage explain` reads a paste
EXAMPLE_KEYS = frozenset({"text", "finding", "summary", "facts", "kind", "paste"})
_ID_PATTERN = regex_cache.compile(r"^[a-z0-9][a-z0-9_.-]*$")
FLAGS = regex.VERSION0 | regex.MULTILINE


class RuleError(KnowledgeError):
    """Rule files that cannot be used: every problem, with the file and rule named."""


@dataclass(frozen=True)
class Remedy:
    """The remedy a library's message prescribes itself ("Re-running torch.load with
    weights_only set to False will likely succeed", "set find_unused_parameters=True"): the
    library's authors named the fix for the mechanism their check found. `fix` is the rule's
    own fix for it (with an action saying how); `says` finds the remedy in the matched text."""

    fix: str
    says: regex.Pattern[str]


@dataclass(frozen=True)
class Rule:
    id: str
    title: str
    file: str
    description: str = ""
    references: tuple[str, ...] = ()
    event_kinds: frozenset[str] = frozenset()
    source_kinds: frozenset[str] = frozenset()
    any: tuple[regex.Pattern[str], ...] = ()
    all: tuple[regex.Pattern[str], ...] = ()
    not_: tuple[regex.Pattern[str], ...] = ()
    raised_in: str | None = None  # "library" / "user": whose frame raised the `any` line
    finding: str | None = None
    finding_where: Mapping[str, regex.Pattern[str]] = field(default_factory=dict)
    symptom: Mapping[str, float] = field(default_factory=dict)
    root_cause: Mapping[str, float] = field(default_factory=dict)
    fix: Mapping[str, float] = field(default_factory=dict)
    stage: Mapping[str, float] = field(default_factory=dict)
    cascade: bool = False  # set from the cascade file: the rule's message is a consequence
    actions: Mapping[str, Action] = field(default_factory=dict)
    examples_match: tuple[Any, ...] = ()
    examples_no_match: tuple[Any, ...] = ()
    keywords: tuple[str, ...] | None = None  # see rule_keywords(); None: always run
    sources: tuple[str, ...] = ()  # where the message is printed (package/module)
    layer: str = "specific"  # "generic": a family prior that yields to a specific rule
    # why a line healthy jobs print (rules/routine.yaml) is still a fault when this rule
    # matches it; without it, the rule's hits on routine lines of a job's logs are dropped
    routine_fault: str = ""
    remedy: Remedy | None = None  # the remedy the matched message prescribes, if it names one
    # field -> labels the matched fact contradicts (`rules_out`): never offered for the job
    rules_out: Mapping[str, frozenset[str]] = field(default_factory=dict)
    # the ids of more general rules this one refines (`overrides`): on an event both match,
    # their hits give way to this one's (`classify.rules.match_events`)
    overrides: frozenset[str] = frozenset()

    @property
    def generic(self) -> bool:
        return self.layer == "generic"

    @property
    def needs_text(self) -> bool:
        return bool(self.any or self.all)


class _Invalid(Exception):
    """One problem of the rule being checked (caught per section: the others still run)."""


def build_rules(
    items: list[Any], path: Path, lazy: bool, report: Callable[[str, str], None]
) -> list[Rule]:
    """Every valid rule of one file; each problem of the others goes to `report(item, msg)`."""
    out = []
    for index, item in enumerate(items):
        rule = build_rule(item, path, index, lazy, report)
        if rule is not None:
            out.append(rule)
    return out


def build_rule(
    item: Any, path: Path, index: int, lazy: bool, report: Callable[[str, str], None]
) -> Rule | None:
    """One rule, checked section by section: every problem is reported, then None."""
    if not isinstance(item, dict):
        report(f"entry #{index + 1}", "is not a mapping")
        return None
    rid = item.get("id")
    name = f"rule {rid!r}" if rid else f"entry #{index + 1}"
    found: list[str] = []

    def section(check: Callable[[], Any], default: Any = None) -> Any:
        try:
            return check()
        except _Invalid as exc:
            found.append(str(exc))
            return default

    def head() -> str:
        if not isinstance(rid, str) or not _ID_PATTERN.match(rid):
            raise _Invalid("needs an `id` of lowercase letters, digits, '-', '_' or '.'")
        allowed = REQUIRED_KEYS | OPTIONAL_KEYS
        unknown = set(item) - allowed
        if "cascade" in unknown:
            raise _Invalid(
                "`cascade` is said in the cascade file: list the rule in a family's `rules` "
                "(rules/cascade.yaml)"
            )
        if unknown:
            raise _Invalid(f"unknown key(s) {sorted(unknown)}; allowed: {sorted(allowed)}")
        title = item.get("title")
        if not isinstance(title, str) or not title.strip():
            raise _Invalid("needs a `title`")
        return title.strip()

    title = section(head)
    matched = section(lambda: _match(item.get("match"), lazy), ((), (), (), (), None, None, {}))
    rules_out = section(lambda: _rules_out(item.get("rules_out")), {})
    overrides = section(lambda: _overrides(item.get("overrides"), rid), frozenset())
    weights = section(lambda: _concludes(item.get("concludes"), bool(rules_out)), {})
    section(lambda: _not_both(weights, rules_out))
    actions = section(lambda: _actions(item.get("actions"), weights.get("fix", {})), {})
    examples = section(lambda: _examples_of(item.get("examples")), ((), ()))
    section(lambda: _names_known(matched, actions))
    references = section(lambda: tuple(_str_list(item.get("references"), "references")), ())
    description = section(lambda: _text(item.get("description"), "description"), "")
    sources = section(lambda: tuple(_str_list(item.get("sources"), "sources")), ())
    layer = section(lambda: _layer(item.get("layer", "specific")), "specific")
    routine_fault = section(lambda: _text(item.get("routine_fault"), "routine_fault"), "")
    remedy = section(lambda: _remedy(item.get("remedy"), weights, actions, layer, lazy))
    for message in found:
        report(name, message)
    if found:
        return None
    kinds, any_, all_, not_, raised_in, finding, finding_where = matched
    rule = Rule(
        id=rid,
        title=title,
        file=str(path),
        description=" ".join(description.split()),
        references=references,
        event_kinds=frozenset(k for k in kinds if k in EVENT_KINDS),
        source_kinds=frozenset(k for k in kinds if k in SOURCE_KINDS and k not in EVENT_KINDS),
        any=any_,
        all=all_,
        not_=not_,
        raised_in=raised_in,
        finding=finding,
        finding_where=finding_where,
        symptom=weights["symptom"],
        root_cause=weights["root_cause"],
        fix=weights["fix"],
        stage=weights["stage"],
        actions=actions,
        examples_match=examples[0],
        examples_no_match=examples[1],
        sources=sources,
        layer=layer,
        routine_fault=" ".join(routine_fault.split()),
        remedy=remedy,
        rules_out=rules_out,
        overrides=overrides,
    )
    return replace(rule, keywords=rule_keywords(rule))


_REMEDY_KEYS = frozenset({"fix", "says"})


def _remedy(
    raw: Any,
    weights: Mapping[str, Mapping[str, float]],
    actions: Mapping[str, Action],
    layer: str,
    lazy: bool,
) -> Remedy | None:
    """`remedy: {fix: F3, says: 'regex'}`: the fix the rule's message prescribes, one the
    rule itself concludes and has an action for (what the user is told to do)."""
    if raw is None:
        return None
    if not isinstance(raw, dict) or set(raw) != _REMEDY_KEYS:
        raise _Invalid(
            "`remedy` is {fix: <fix id>, says: <regex of the remedy the message prints>}"
        )
    fix, says = raw["fix"], raw["says"]
    if layer != "specific":
        raise _Invalid("`remedy` is a message's own: a generic (family) rule names none")
    if not isinstance(fix, str) or fix not in weights.get("fix", {}):
        raise _Invalid(f"remedy.fix {fix!r} needs a weight in `concludes.fix`")
    if fix not in actions:
        raise _Invalid(f"remedy.fix {fix} needs an action in `actions` (what the user is told)")
    if not isinstance(says, str) or not says.strip():
        raise _Invalid("remedy.says must be a regex of the remedy as the message prints it")
    return Remedy(fix, compile_pattern(says, lazy))


def _layer(layer: Any) -> str:
    if layer not in LAYERS:
        raise _Invalid(f"`layer` must be one of {list(LAYERS)}, got {layer!r}")
    return str(layer)


def _match(match: Any, lazy: bool) -> tuple[Any, ...]:
    if not isinstance(match, dict):
        raise _Invalid("needs a `match` mapping")
    bad = set(match) - MATCH_KEYS
    if bad:
        raise _Invalid(f"unknown match key(s) {sorted(bad)}; allowed: {sorted(MATCH_KEYS)}")
    kinds = _str_list(match.get("kind"), "match.kind")
    for k in kinds:
        if k not in EVENT_KINDS and k not in SOURCE_KINDS:
            raise _Invalid(
                f"match.kind {k!r} is neither an event kind {sorted(EVENT_KINDS)} "
                f"nor a source kind {sorted(SOURCE_KINDS)}"
            )
    any_ = tuple(compile_pattern(p, lazy) for p in _str_list(match.get("any"), "match.any"))
    all_ = tuple(compile_pattern(p, lazy) for p in _str_list(match.get("all"), "match.all"))
    not_ = tuple(compile_pattern(p, lazy) for p in _str_list(match.get("not"), "match.not"))
    raised_in = match.get("raised_in")
    if raised_in is not None and raised_in not in RAISED_IN:
        raise _Invalid(f"match.raised_in must be one of {list(RAISED_IN)}, got {raised_in!r}")
    if raised_in is not None and not any_:
        raise _Invalid("match.raised_in needs `any`: the exception line whose frame it reads")
    finding = match.get("finding")
    finding_where: dict[str, regex.Pattern[str]] = {}
    if isinstance(finding, dict):
        # {kind: rank_exit, where: {signal: 'SIGKILL'}}: facts of the finding matched by regex
        bad = set(finding) - {"kind", "where"}
        if bad or not isinstance(finding.get("kind"), str):
            raise _Invalid("match.finding is a kind, or {kind: ..., where: {fact: regex}}")
        raw_where = finding.get("where") or {}
        if not isinstance(raw_where, dict):
            raise _Invalid("match.finding.where must map fact names to regexes")
        finding_where = {str(k): compile_pattern(str(v)) for k, v in raw_where.items()}
        finding = finding["kind"]
    elif finding is not None and not isinstance(finding, str):
        raise _Invalid("match.finding must be a finding kind or {kind: ..., where: {...}}")
    if finding is not None and finding not in {k.value for k in FindingKind}:
        known = ", ".join(k.value for k in FindingKind)
        raise _Invalid(f"match.finding: no finding is of kind {finding!r} (kinds: {known})")
    if finding is not None:
        names = FACTS_OF[FindingKind(finding)].names()
        for name in finding_where:
            if name not in names:
                raise _Invalid(
                    f"match.finding.where names {name!r}, a fact no {finding} finding has "
                    f"(its facts: {', '.join(sorted(names)) or 'none'})"
                )
    if not (any_ or all_ or finding):
        raise _Invalid("match needs at least one of `any`, `all` or `finding`")
    return kinds, any_, all_, not_, raised_in, finding, finding_where


def _overrides(raw: Any, rid: Any) -> frozenset[str]:
    """`overrides: [rule-id, ...]`: the more general rules this one refines (checked against
    every loaded rule once all files are read)."""
    if raw is None:
        return frozenset()
    if not isinstance(raw, list) or not raw or not all(isinstance(i, str) for i in raw):
        raise _Invalid("`overrides` must be a list of rule ids")
    if rid in raw:
        raise _Invalid("`overrides` names the rule itself")
    return frozenset(raw)


def _rules_out(raw: Any) -> dict[str, frozenset[str]]:
    """`rules_out: {symptom: [S17], root_cause: [R11]}`: taxonomy ids the matched fact
    contradicts."""
    if raw is None:
        return {}
    if not isinstance(raw, dict) or not raw:
        raise _Invalid("`rules_out` maps `symptom` and/or `root_cause` to lists of ids")
    bad = set(raw) - set(RULES_OUT_KEYS)
    if bad:
        raise _Invalid(f"unknown rules_out key(s) {sorted(bad)}; allowed: {list(RULES_OUT_KEYS)}")
    tax = taxonomy.load()
    tables = {"symptom": tax.symptoms, "root_cause": tax.root_causes}
    out: dict[str, frozenset[str]] = {}
    for name, ids in raw.items():
        if not isinstance(ids, list) or not ids:
            raise _Invalid(f"`rules_out.{name}` must be a list of taxonomy ids")
        unknown = [i for i in ids if i not in tables[name]]
        if unknown:
            raise _Invalid(f"`rules_out.{name}`: unknown taxonomy id(s) {unknown}")
        out[name] = frozenset(ids)
    return out


def _not_both(
    weights: Mapping[str, Mapping[str, float]], ruled: Mapping[str, frozenset[str]]
) -> None:
    """A rule does not conclude a label it rules out."""
    both = sorted(i for name, ids in ruled.items() for i in ids if i in weights.get(name, {}))
    if both:
        raise _Invalid(f"concludes and rules out {both}")


def _concludes(concludes: Any, rules_out: bool = False) -> dict[str, dict[str, float]]:
    if not isinstance(concludes, dict):
        raise _Invalid("needs a `concludes` mapping")
    bad = set(concludes) - CONCLUDE_KEYS
    if bad:
        raise _Invalid(f"unknown concludes key(s) {sorted(bad)}; allowed: {sorted(CONCLUDE_KEYS)}")
    tax = taxonomy.load()
    tables = {
        "symptom": tax.symptoms,
        "root_cause": tax.root_causes,
        "fix": tax.fix_patterns,
        "stage": tax.stages,
    }
    weights = {
        name: weight_map(concludes.get(name), t, f"concludes.{name}") for name, t in tables.items()
    }
    # a rule that only rules labels out (a fact that contradicts them) may name none
    if not (weights["symptom"] or weights["root_cause"] or rules_out):
        raise _Invalid("concludes needs a `symptom` or a `root_cause` (or the rule `rules_out`)")
    if not weights["stage"]:
        # A rule's stage follows from its strongest symptom when it does not say otherwise.
        for sid, w in sorted(weights["symptom"].items(), key=lambda kv: -kv[1]):
            stage = tax.symptoms[sid].stage
            if stage:
                weights["stage"] = {stage: w}
                break
    return weights


def _actions(raw: Any, fix_weights: Mapping[str, float]) -> dict[str, Action]:
    """Per fix: one action, as the playbook writes it: a template, a {text, when} mapping, or
    a list of those (alternatives, most specific first; see triage.knowledge.actions)."""
    raw = raw or {}
    if not isinstance(raw, dict):
        raise _Invalid("`actions` must map fix ids to a template or a list of alternatives")
    fixes = taxonomy.load().fix_patterns
    actions: dict[str, Action] = {}
    for fid, entry in raw.items():
        if fid not in fixes:
            raise _Invalid(f"actions key {fid!r} is not a fix pattern id {sorted(fixes)}")
        if fid not in fix_weights:
            raise _Invalid(f"actions for {fid} need a weight for {fid} in `concludes.fix`")
        problems: list[str] = []
        action = parse_action(entry, f"actions.{fid}", _collector(problems))
        if problems or action is None:
            raise _Invalid("; ".join(problems) or f"actions.{fid} is empty")
        actions[fid] = action
    return actions


def _collector(problems: list[str]) -> Callable[[str, str], None]:
    def report(item: str, message: str) -> None:
        problems.append(f"{item}: {message}")

    return report


# What an action of a finding rule may name besides the finding's facts and the job's
_FINDING_CONTEXT = frozenset({"summary", "ranks", "rank"})
# A named group of a pattern, read from its text (a lazy pattern is not compiled to see it)
_GROUP = regex_cache.compile(r"\(\?P?<([A-Za-z_]\w*)>")


def _names_known(matched: tuple[Any, ...], actions: Mapping[str, Action]) -> None:
    """Every `{name}` of the rule's actions is something the engine fills: a named group of
    its patterns, the event's `rank` / `host`, the job's facts, or its finding's facts."""
    _, any_, all_, _, _, finding, _ = matched
    allowed = set(JOB_FACT_NAMES)
    for pattern in (*any_, *all_):
        allowed.update(_GROUP.findall(pattern.pattern))
    if finding is not None:
        allowed |= FACTS_OF[FindingKind(finding)].names() | _FINDING_CONTEXT
    for fix, action in actions.items():
        for alt in action.alternatives:
            unknown = [n for n in alt.needs if n not in allowed]
            if unknown:
                what = f"{finding} finding" if finding else "pattern's named group"
                raise _Invalid(
                    f"actions.{fix} names {{{unknown[0]}}}: no {what} and no job fact has it"
                )


def _examples_of(examples: Any) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    if not isinstance(examples, dict):
        raise _Invalid("needs `examples` with `match` and `no_match` lists")
    return (
        tuple(_example_list(examples.get("match"), "examples.match")),
        tuple(_example_list(examples.get("no_match"), "examples.no_match")),
    )


def _example_list(value: Any, what: str) -> list[Any]:
    if not isinstance(value, list) or not value:
        raise _Invalid(f"`{what}` needs at least one example")
    for ex in value:
        if isinstance(ex, str):
            continue
        if isinstance(ex, dict) and set(ex) <= EXAMPLE_KEYS:
            if ex.get("finding"):
                try:
                    finding_example(ex)
                except ValueError as exc:
                    raise _Invalid(f"`{what}` example {ex!r}: {exc}") from exc
            continue
        raise _Invalid(f"`{what}` entries are text or maps of {sorted(EXAMPLE_KEYS)}")
    return list(value)


def _text(value: Any, what: str) -> str:
    value = value or ""
    if not isinstance(value, str):
        raise _Invalid(f"`{what}` must be text")
    return value


def _str_list(value: Any, what: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    raise _Invalid(f"`{what}` must be a string or a list of strings")


def weight_map(value: Any, table: Mapping[str, Any], what: str) -> dict[str, float]:
    """`{taxonomy id: weight in [0, 1]}` (a bare id means weight 1)."""
    if value is None:
        return {}
    if isinstance(value, str):
        value = {value: 1.0}
    if not isinstance(value, dict):
        raise _Invalid(f"`{what}` must map taxonomy ids to weights")
    out: dict[str, float] = {}
    for key, w in value.items():
        if key not in table:
            raise _Invalid(f"`{what}`: unknown taxonomy id {key!r}; known: {', '.join(table)}")
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not 0.0 <= w <= 1.0:
            raise _Invalid(f"`{what}.{key}` weight must be a number in [0, 1], got {w!r}")
        out[key] = float(w)
    return out


class _LazyPattern:
    """A rule regex that compiles itself the first time it is used."""

    __slots__ = ("_compiled", "pattern")

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        self._compiled: regex.Pattern[str] | None = None

    def _get(self) -> regex.Pattern[str]:
        if self._compiled is None:
            self._compiled = regex_cache.compile(self.pattern, FLAGS)
        return self._compiled

    def search(self, *args: Any, **kwargs: Any) -> regex.Match[str] | None:
        return self._get().search(*args, **kwargs)

    def finditer(self, *args: Any, **kwargs: Any) -> Any:
        return self._get().finditer(*args, **kwargs)

    @property
    def groupindex(self) -> Mapping[str, int]:
        return self._get().groupindex


def compile_pattern(pattern: str, lazy: bool = False) -> regex.Pattern[str]:
    """A rule pattern, compiled now (a bad one is a problem) or on first use (`lazy`)."""
    if lazy:
        return _LazyPattern(pattern)  # type: ignore[return-value]
    try:
        return regex_cache.compile(pattern, FLAGS)
    except regex.error as exc:
        raise _Invalid(f"bad regex {pattern!r}: {exc}") from exc


# --------------------------------------------------------------------------- keywords
# Running ~150 rules' regexes over every event is slow on big logs. Each pattern usually has a
# literal that every match must contain (`Watchdog caught collective operation timeout`); a
# rule runs only when the event text contains one of its literals (a plain substring test,
# see triage.literals). The log parser's marker scan looks for the same literals.


def rule_keywords(rule: Rule) -> tuple[str, ...] | None:
    """Substrings one of which an event needs before the rule is worth running, or None."""
    return pattern_keywords([p.pattern for p in rule.any], [p.pattern for p in rule.all])


def pattern_keywords(any_: list[str], all_: list[str]) -> tuple[str, ...] | None:
    """`rule_keywords` of raw `any` / `all` patterns."""
    if any_:
        out: list[str] = []
        for pat in any_:
            lits = required_literals(pat)
            if lits is None:
                return None
            out.extend(lits)
        return tuple(dict.fromkeys(out))
    for pat in all_:
        lits = required_literals(pat)
        if lits is not None:
            return lits
    return None
