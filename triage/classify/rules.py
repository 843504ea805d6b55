r"""The rule engine: YAML rules (`rules/*.yaml`) matched against parsed events and findings.

A rule is data (Sigma style): what it matches (regexes over an event's text, event or source
kinds, a correlate finding) and what it concludes (weighted symptom / root cause / fix / stage
ids of the taxonomy), which line to quote, and action templates filled from the regex's named
groups and the job's facts. Every rule carries examples that must and must not match it
(Semgrep style); `tests/test_rules.py` runs them all.

Rules are validated when loaded: an unknown taxonomy id, a bad regex or a typo in a key is a
`RuleError` that names the file and the rule.

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
        finding: lagging_rank               # or {kind: rank_exit, where: {signal: SIGKILL}}
      concludes:                            # taxonomy id -> weight in [0, 1]
        symptom: {S12: 0.9}
        root_cause: {R05: 0.9}
        fix: {F5: 0.85, F4: 0.3}
        stage: {ST3: 0.8}                   # default: the stage of the strongest symptom
      cascade: false                        # true: a message that usually follows another failure
      layer: specific                       # or generic: a prior for a whole family (an exception
                                            # class, OOM, a signal) that yields to a specific rule
                                            # explaining the same failure
      sources: [deepspeed/runtime/engine.py]  # package/module that prints the message
      actions:                              # per fix: template(s) with {named_group} / {fact}
        F5: "Give the container more shared memory (segment {segment})"
      examples:
        match: ["...a line the rule must match..."]      # or {finding: ..., facts: {...}}
        no_match: ["...a line it must not match..."]

Patterns use the `regex` module with MULTILINE; `(?i:...)` for case-insensitive parts. Facts
for templates: the named groups, `rank`/`host` of the event, `analysis.facts` (torch, nccl,
world_size, collective, timeout_ms, ...) and, for finding rules, the finding's facts and
`summary`. A missing fact renders as a readable stand-in (`the failing rank`), never an error.
"""

from __future__ import annotations

import os
import string
from bisect import bisect_right
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any

import regex
import yaml

import triage
from triage import taxonomy
from triage.classify.types import RuleHit
from triage.literals import required_literals
from triage.model import Analysis, Event, EventKind, Finding, Level, SourceKind
from triage.parsers.common import whole_text_event

RULES_ENV = "TRIAGE_RULES_DIR"
MAX_HITS_PER_RULE = 16  # a wall of identical cascade lines adds nothing after the first few
MAX_EVIDENCE_CHARS = 600

_EVENT_KINDS = {k.value for k in EventKind}
_SOURCE_KINDS = {k.value for k in SourceKind}
_RULE_KEYS = {
    "id",
    "title",
    "description",
    "references",
    "match",
    "concludes",
    "cascade",
    "actions",
    "examples",
    "falsepositives",
    "tags",
    "sources",
    "layer",
}
_LAYERS = ("specific", "generic")
_MATCH_KEYS = {"kind", "any", "all", "not", "finding"}
_CONCLUDE_KEYS = {"symptom", "root_cause", "fix", "stage"}
_ID_PATTERN = regex.compile(r"^[a-z0-9][a-z0-9_.-]*$")
_FLAGS = regex.VERSION0 | regex.MULTILINE

# Readable stand-ins when a template names a fact this job did not reveal.
_FALLBACKS = {
    "rank": "the failing rank",
    "ranks": "the failing ranks",
    "host": "the failing node",
    "collective": "the collective",
    "op": "the collective",
    "timeout_ms": "the current timeout",
    "timeout": "the current timeout",
    "torch": "your torch version",
    "nccl": "your NCCL version",
    "cuda": "your CUDA version",
    "world_size": "the world size",
}


class RuleError(ValueError):
    """A rule file that cannot be used, with the file and rule named."""


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
    finding: str | None = None
    finding_where: Mapping[str, regex.Pattern[str]] = field(default_factory=dict)
    symptom: Mapping[str, float] = field(default_factory=dict)
    root_cause: Mapping[str, float] = field(default_factory=dict)
    fix: Mapping[str, float] = field(default_factory=dict)
    stage: Mapping[str, float] = field(default_factory=dict)
    cascade: bool = False
    actions: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    examples_match: tuple[Any, ...] = ()
    examples_no_match: tuple[Any, ...] = ()
    keywords: tuple[str, ...] | None = None  # see rule_keywords(); None: always run
    sources: tuple[str, ...] = ()  # where the message is printed (package/module)
    layer: str = "specific"  # "generic": a family prior that yields to a specific rule

    @property
    def generic(self) -> bool:
        return self.layer == "generic"

    @property
    def needs_text(self) -> bool:
        return bool(self.any or self.all)


@dataclass(frozen=True)
class RuleSet:
    rules: tuple[Rule, ...]

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


# --------------------------------------------------------------------------- loading


def default_rules_dir() -> Path:
    env = os.environ.get(RULES_ENV)
    if env:
        return Path(env)
    return Path(triage.__file__).resolve().parent.parent / "rules"


def load(extra_dirs: Sequence[str | os.PathLike[str]] = ()) -> RuleSet:
    """The shipped rules plus every extra folder, validated and compiled (cached)."""
    extra = tuple(Path(d) for d in extra_dirs)
    for d in extra:
        # a typo in --rules must not silently drop the team's rules
        if not d.is_dir():
            raise RuleError(f"{d}: rules folder not found")
    key = tuple(_dir_signature(d) for d in (default_rules_dir(), *extra))
    return _load_cached(key)


def _dir_signature(directory: Path) -> tuple[str, tuple[tuple[str, float], ...]]:
    files = _rule_files(directory)
    return (str(directory), tuple((str(f), f.stat().st_mtime) for f in files))


def _rule_files(directory: Path) -> list[Path]:
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())


@lru_cache(maxsize=8)
def _load_cached(key: tuple[tuple[str, tuple[tuple[str, float], ...]], ...]) -> RuleSet:
    rules: list[Rule] = []
    seen: dict[str, str] = {}
    for position, (_directory, files) in enumerate(key):
        # The shipped rules compile their regexes on first use: ~450 patterns cost ~0.3 s of
        # `triage explain`'s start-up and the keyword prefilter skips most of them. The test
        # suite compiles every one (each rule's examples); a team's folder is checked eagerly.
        lazy = position == 0 and not os.environ.get(RULES_ENV)
        for file, mtime in files:
            for rule in _load_file_cached(file, mtime, lazy):
                if rule.id in seen:
                    raise RuleError(
                        f"{file}: rule {rule.id!r} is already defined in {seen[rule.id]}"
                    )
                seen[rule.id] = file
                rules.append(rule)
    return RuleSet(rules=tuple(rules))


# --------------------------------------------------------------------------- keyword prefilter
# Running ~150 rules' regexes over every event is slow on big logs. Each pattern usually has a
# literal that every match must contain (`Watchdog caught collective operation timeout`); a
# rule runs only when the event text contains one of its literals (a plain substring test,
# see triage.literals).


def rule_keywords(rule: Rule) -> tuple[str, ...] | None:
    """Substrings one of which an event needs before the rule is worth running, or None."""
    if rule.any:
        out: list[str] = []
        for pat in rule.any:
            lits = required_literals(pat.pattern)
            if lits is None:
                return None
            out.extend(lits)
        return tuple(dict.fromkeys(out))
    for pat in rule.all:
        lits = required_literals(pat.pattern)
        if lits is not None:
            return lits
    return None


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


@lru_cache(maxsize=256)
def _load_file_cached(file: str, mtime: float, lazy: bool = False) -> tuple[Rule, ...]:
    return tuple(load_file(Path(file), lazy=lazy))


_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml is ~10x faster


def load_file(path: Path, lazy: bool = False) -> list[Rule]:
    """Every rule of one YAML file (a list of rules, `rules: [...]`, or `---` documents)."""
    try:
        docs = list(yaml.load_all(path.read_text(encoding="utf-8"), Loader=_YAML_LOADER))
    except (OSError, yaml.YAMLError) as exc:
        raise RuleError(f"{path}: cannot read rule file: {exc}") from exc
    raw: list[Any] = []
    for doc in docs:
        if doc is None:
            continue
        if isinstance(doc, list):
            raw.extend(doc)
        elif isinstance(doc, dict) and "rules" in doc and "id" not in doc:
            raw.extend(doc["rules"] or [])
        else:
            raw.append(doc)
    return [_build_rule(item, path, i, lazy) for i, item in enumerate(raw)]


def _build_rule(item: Any, path: Path, index: int, lazy: bool = False) -> Rule:
    if not isinstance(item, dict):
        raise RuleError(f"{path}: entry #{index + 1} is not a mapping")
    rid = item.get("id")
    where = f"{path}: rule {rid!r}" if rid else f"{path}: entry #{index + 1}"

    def fail(msg: str) -> RuleError:
        return RuleError(f"{where}: {msg}")

    if not isinstance(rid, str) or not _ID_PATTERN.match(rid):
        raise fail("needs an `id` of lowercase letters, digits, '-', '_' or '.'")
    unknown = set(item) - _RULE_KEYS
    if unknown:
        raise fail(f"unknown key(s) {sorted(unknown)}; allowed: {sorted(_RULE_KEYS)}")
    title = item.get("title")
    if not isinstance(title, str) or not title.strip():
        raise fail("needs a `title`")

    match = item.get("match")
    if not isinstance(match, dict):
        raise fail("needs a `match` mapping")
    bad = set(match) - _MATCH_KEYS
    if bad:
        raise fail(f"unknown match key(s) {sorted(bad)}; allowed: {sorted(_MATCH_KEYS)}")
    kinds = _str_list(match.get("kind"), fail, "match.kind")
    for k in kinds:
        if k not in _EVENT_KINDS and k not in _SOURCE_KINDS:
            raise fail(
                f"match.kind {k!r} is neither an event kind {sorted(_EVENT_KINDS)} "
                f"nor a source kind {sorted(_SOURCE_KINDS)}"
            )
    any_ = tuple(_compile(p, fail, lazy) for p in _str_list(match.get("any"), fail, "match.any"))
    all_ = tuple(_compile(p, fail, lazy) for p in _str_list(match.get("all"), fail, "match.all"))
    not_ = tuple(_compile(p, fail, lazy) for p in _str_list(match.get("not"), fail, "match.not"))
    finding = match.get("finding")
    finding_where: dict[str, regex.Pattern[str]] = {}
    if isinstance(finding, dict):
        # {kind: rank_exit, where: {signal: 'SIGKILL'}}: facts of the finding (and `summary`)
        # matched by regex
        bad = set(finding) - {"kind", "where"}
        if bad or not isinstance(finding.get("kind"), str):
            raise fail("match.finding is a kind, or {kind: ..., where: {fact: regex}}")
        raw_where = finding.get("where") or {}
        if not isinstance(raw_where, dict):
            raise fail("match.finding.where must map fact names to regexes")
        finding_where = {str(k): _compile(str(v), fail) for k, v in raw_where.items()}
        finding = finding["kind"]
    elif finding is not None and not isinstance(finding, str):
        raise fail("match.finding must be a finding kind or {kind: ..., where: {...}}")
    if not (any_ or all_ or finding):
        raise fail("match needs at least one of `any`, `all` or `finding`")

    concludes = item.get("concludes")
    if not isinstance(concludes, dict):
        raise fail("needs a `concludes` mapping")
    bad = set(concludes) - _CONCLUDE_KEYS
    if bad:
        raise fail(f"unknown concludes key(s) {sorted(bad)}; allowed: {sorted(_CONCLUDE_KEYS)}")
    tax = taxonomy.load()
    tables = {
        "symptom": tax.symptoms,
        "root_cause": tax.root_causes,
        "fix": tax.fix_patterns,
        "stage": tax.stages,
    }
    weights: dict[str, dict[str, float]] = {}
    for name, table in tables.items():
        weights[name] = _weights(concludes.get(name), table, fail, f"concludes.{name}")
    if not (weights["symptom"] or weights["root_cause"]):
        raise fail("concludes needs a `symptom` or a `root_cause`")
    if not weights["stage"]:
        # A rule's stage follows from its strongest symptom when it does not say otherwise.
        for sid, w in sorted(weights["symptom"].items(), key=lambda kv: -kv[1]):
            stage = tax.symptoms[sid].stage
            if stage:
                weights["stage"] = {stage: w}
                break

    actions_raw = item.get("actions") or {}
    if not isinstance(actions_raw, dict):
        raise fail("`actions` must map fix ids to a template or a list of templates")
    actions: dict[str, tuple[str, ...]] = {}
    for fid, templates in actions_raw.items():
        if fid not in tax.fix_patterns:
            raise fail(f"actions key {fid!r} is not a fix pattern id {sorted(tax.fix_patterns)}")
        if fid not in weights["fix"]:
            raise fail(f"actions for {fid} need a weight for {fid} in `concludes.fix`")
        temps = _str_list(templates, fail, f"actions.{fid}")
        for t in temps:
            _check_template(t, fail, fid)
        actions[fid] = tuple(temps)

    cascade = item.get("cascade", False)
    if not isinstance(cascade, bool):
        raise fail("`cascade` must be true or false")
    examples = item.get("examples")
    if not isinstance(examples, dict):
        raise fail("needs `examples` with `match` and `no_match` lists")
    ex_match = _examples(examples.get("match"), fail, "examples.match")
    ex_no = _examples(examples.get("no_match"), fail, "examples.no_match")
    refs = _str_list(item.get("references"), fail, "references")
    sources = _str_list(item.get("sources"), fail, "sources")
    layer = item.get("layer", "specific")
    if layer not in _LAYERS:
        raise fail(f"`layer` must be one of {list(_LAYERS)}, got {layer!r}")
    desc = item.get("description") or ""
    if not isinstance(desc, str):
        raise fail("`description` must be text")

    rule = Rule(
        id=rid,
        title=title.strip(),
        file=str(path),
        description=" ".join(desc.split()),
        references=tuple(refs),
        event_kinds=frozenset(k for k in kinds if k in _EVENT_KINDS),
        source_kinds=frozenset(k for k in kinds if k in _SOURCE_KINDS and k not in _EVENT_KINDS),
        any=any_,
        all=all_,
        not_=not_,
        finding=finding,
        finding_where=finding_where,
        symptom=weights["symptom"],
        root_cause=weights["root_cause"],
        fix=weights["fix"],
        stage=weights["stage"],
        cascade=cascade,
        actions=actions,
        examples_match=tuple(ex_match),
        examples_no_match=tuple(ex_no),
        sources=tuple(sources),
        layer=layer,
    )
    return replace(rule, keywords=rule_keywords(rule))


def _str_list(value: Any, fail: Any, what: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    raise fail(f"`{what}` must be a string or a list of strings")


class _LazyPattern:
    """A rule regex that compiles itself the first time it is used."""

    __slots__ = ("_compiled", "pattern")

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        self._compiled: regex.Pattern[str] | None = None

    def _get(self) -> regex.Pattern[str]:
        if self._compiled is None:
            self._compiled = regex.compile(self.pattern, _FLAGS)
        return self._compiled

    def search(self, *args: Any, **kwargs: Any) -> regex.Match[str] | None:
        return self._get().search(*args, **kwargs)

    def finditer(self, *args: Any, **kwargs: Any) -> Any:
        return self._get().finditer(*args, **kwargs)

    @property
    def groupindex(self) -> Mapping[str, int]:
        return self._get().groupindex


def _compile(pattern: str, fail: Any, lazy: bool = False) -> regex.Pattern[str]:
    if lazy:
        return _LazyPattern(pattern)  # type: ignore[return-value]
    try:
        return regex.compile(pattern, _FLAGS)
    except regex.error as exc:
        raise fail(f"bad regex {pattern!r}: {exc}") from exc


def _weights(value: Any, table: Mapping[str, Any], fail: Any, what: str) -> dict[str, float]:
    if value is None:
        return {}
    if isinstance(value, str):
        value = {value: 1.0}
    if not isinstance(value, dict):
        raise fail(f"`{what}` must map taxonomy ids to weights")
    out: dict[str, float] = {}
    for key, w in value.items():
        if key not in table:
            raise fail(f"`{what}`: unknown taxonomy id {key!r}; known: {', '.join(table)}")
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not 0.0 <= w <= 1.0:
            raise fail(f"`{what}.{key}` weight must be a number in [0, 1], got {w!r}")
        out[key] = float(w)
    return out


def _check_template(template: str, fail: Any, fid: str) -> None:
    try:
        fields = [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]
    except ValueError as exc:
        raise fail(f"action template for {fid} is malformed ({exc}): {template!r}") from exc
    for f in fields:
        if not regex.fullmatch(r"[A-Za-z_]\w*", f):
            raise fail(f"action template for {fid} uses {{{f}}}; only plain {{names}} are allowed")


def _examples(value: Any, fail: Any, what: str) -> list[Any]:
    if not isinstance(value, list) or not value:
        raise fail(f"`{what}` needs at least one example")
    for ex in value:
        if isinstance(ex, str):
            continue
        if isinstance(ex, dict) and set(ex) <= {"text", "finding", "summary", "facts", "kind"}:
            continue
        raise fail(f"`{what}` entries are text or {{text, finding, summary, facts, kind}} maps")
    return list(value)


# --------------------------------------------------------------------------- matching


class _Facts(dict[str, Any]):
    """The facts as text, each made only when a template asks for it: a job's facts include
    per-source maps that are big on big bundles and no template uses."""

    def __init__(self, facts: Mapping[str, Any]) -> None:
        super().__init__()
        self.facts = facts

    def __missing__(self, key: str) -> str:
        value = self.facts.get(key)
        text = _plain(value) if value is not None else ""
        return text if text != "" else _FALLBACKS.get(key, f"<{key}>")


def render(template: str, facts: Mapping[str, Any]) -> str:
    """Fill `{name}` fields from facts; a missing or empty fact reads as a plain fallback."""
    values = _Facts(facts)
    try:
        return template.format_map(values)
    except (ValueError, IndexError, AttributeError, KeyError):
        return template


def _plain(value: Any) -> str:
    """How a fact reads inside a sentence: lists as `3, 5`, everything else as str()."""
    if isinstance(value, (list, tuple, set, frozenset)):
        return ", ".join(str(v) for v in value)
    return str(value)


def _job_facts(analysis: Analysis | None) -> dict[str, Any]:
    if analysis is None:
        return {}
    facts: dict[str, Any] = {str(k): v for k, v in (analysis.facts or {}).items()}
    if analysis.culprit_ranks and "ranks" not in facts:
        facts["ranks"] = ", ".join(str(r) for r in analysis.culprit_ranks)
    hang = analysis.hang
    if hang is not None:
        if hang.lagging_ranks and "lagging_ranks" not in facts:
            facts["lagging_ranks"] = ", ".join(str(r) for r in hang.lagging_ranks)
        if hang.collective and "collective" not in facts:
            op = hang.collective.get("op") or hang.collective.get("profiling_name")
            if op:
                facts["collective"] = op
        if hang.process_group and "process_group" not in facts:
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


def _match_text(rule: Rule, text: str) -> regex.Match[str] | None | bool:
    """The match to quote, True when only `all` patterns decide, None when no match."""
    for pat in rule.not_:
        if pat.search(text):
            return None
    first: regex.Match[str] | None = None
    if rule.any:
        for pat in rule.any:
            first = pat.search(text)
            if first:
                break
        if first is None:
            return None
    all_matches = []
    for pat in rule.all:
        m = pat.search(text)
        if m is None:
            return None
        all_matches.append(m)
    if first is None and all_matches:
        first = all_matches[0]
    return first if first is not None else True


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
    quoted, offset = _quote(text, m) if text else ("", 0)
    line = event.line + offset if event is not None and event.line is not None else None
    return RuleHit(
        rule_id=rule.id,
        title=rule.title,
        event=event,
        symptom=dict(rule.symptom),
        root_cause=dict(rule.root_cause),
        fix=dict(rule.fix),
        stage=dict(rule.stage),
        captures=caps,
        actions={f: tuple(render(t, context) for t in ts) for f, ts in rule.actions.items()},
        evidence_text=quoted,
        evidence_line=line,
        from_cascade=from_cascade,
        generic=rule.generic,
    )


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
) -> list[RuleHit]:
    """Every rule hit over these events (and the analysis's findings), in event order.

    `source_kinds` (event.source -> kind) lets rules filter on the input kind; without it
    only event-kind filters apply. A rule hits an event at most once, and at most
    MAX_HITS_PER_RULE times overall.
    """
    ruleset = rules if rules is not None else load(extra_dirs)
    facts = _job_facts(analysis)
    all_findings = tuple(analysis.findings) if analysis is not None else ()
    findings = {
        r.id: [f for f in all_findings if _finding_ok(r, f)] for r in ruleset.rules if r.finding
    }
    cascade_set = set(analysis.cascade_events) if analysis is not None else set()
    initiating = set(analysis.initiating_events) if analysis is not None else set()
    counts: dict[str, int] = {}
    hits: list[RuleHit] = []

    text_rules = ruleset.text_rules
    texts = [event.text or "" for event in events]
    candidates = ruleset.prefilter.candidates(texts)
    for event, text, indices in zip(events, texts, candidates, strict=True):
        if not text:
            continue
        for i in indices:
            rule = text_rules[i]
            if counts.get(rule.id, 0) >= MAX_HITS_PER_RULE:
                continue
            if rule.finding and not findings[rule.id]:
                continue
            if not _kind_ok(rule, event, source_kinds):
                continue
            m = _match_text(rule, text)
            if m is None:
                continue
            quoted_match = m if isinstance(m, regex.Match) else None
            from_cascade = event in cascade_set or (rule.cascade and event not in initiating)
            hit_facts = dict(facts)
            if rule.finding:
                hit_facts.update(_finding_facts(findings[rule.id][0]))
            hits.append(_hit(rule, event, quoted_match, text, hit_facts, from_cascade))
            counts[rule.id] = counts.get(rule.id, 0) + 1

    # Finding-only rules: one hit per finding of that kind.
    for rule in ruleset.rules:
        if rule.needs_text or not rule.finding:
            continue
        for finding in findings[rule.id][:MAX_HITS_PER_RULE]:
            ev = _finding_event(finding)
            hit_facts = {**facts, **_finding_facts(finding)}
            hit = _hit(rule, ev, None, "", hit_facts, rule.cascade)
            hits.append(
                RuleHit(
                    **{
                        **hit.__dict__,
                        "evidence_text": finding.summary,
                        "evidence_line": ev.line if ev is not None else None,
                    }
                )
            )
    return hits


def _finding_ok(rule: Rule, finding: Finding) -> bool:
    if finding.kind != rule.finding:
        return False
    facts = {"summary": finding.summary, **(finding.facts or {})}
    for key, pat in rule.finding_where.items():
        # an absent fact reads as "" so that negative patterns ('^(?!...)') still pass
        value = facts.get(key)
        if not pat.search("" if value is None else _plain(value)):
            return False
    return True


def _finding_facts(finding: Finding) -> dict[str, Any]:
    facts = {str(k): v for k, v in (finding.facts or {}).items() if isinstance(k, str)}
    facts.setdefault("summary", finding.summary)
    if finding.ranks:
        facts.setdefault("ranks", ", ".join(str(r) for r in finding.ranks))
        facts.setdefault("rank", finding.ranks[0])
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


def text_events(text: str, name: str = "<pasted>") -> tuple[Event, ...]:
    """Events of pasted text as the log parser reads it; the whole text when it finds none."""
    from triage.parsers import parse_text

    return parse_text(text, name=name).events or (whole_text_event(text, name),)


def match_text(
    text: str,
    analysis: Analysis | None = None,
    extra_dirs: Sequence[str | os.PathLike[str]] = (),
    *,
    events: Sequence[Event] | None = None,
    name: str = "<pasted>",
) -> list[RuleHit]:
    """Rule hits over pasted text: its parsed events, then the whole text for the rest.

    A parser keeps only notable lines and splits the paste into events, so a message the parser
    drops (a `Last error:` detail, an exception without its type) or one that spans two events
    would be missed; rules that did not hit any event get one more try on the whole text.
    """
    ruleset = load(extra_dirs)
    parsed = tuple(events) if events is not None else text_events(text, name)
    hits = match_events(parsed, analysis, rules=ruleset)
    if len(parsed) == 1 and parsed[0].text == text:
        return hits
    seen = {h.rule_id for h in hits}
    rest = RuleSet(rules=tuple(r for r in ruleset.rules if r.id not in seen and r.needs_text))
    if rest.rules:
        hits += match_events([whole_text_event(text, name)], analysis, rules=rest)
    return hits


def check(text_or_path: str, extra_dirs: Sequence[str | os.PathLike[str]] = ()) -> list[RuleHit]:
    """Which rules match a file or folder (ingested and parsed like a bundle) or a text: the
    specific rules first, then the generic layer's family priors."""
    path = Path(text_or_path)
    try:
        is_path = len(text_or_path) < 4096 and "\n" not in text_or_path and path.exists()
    except (OSError, ValueError):
        is_path = False
    if is_path:
        hits = match_events(_file_events(path), None, extra_dirs)
    else:
        hits = match_text(text_or_path, None, extra_dirs)
    return sorted(hits, key=lambda h: h.generic)


def _file_events(path: Path) -> tuple[Event, ...]:
    """A file or folder read like a bundle (ingest and parse turn bad input into warnings)."""
    from triage.ingest import discover
    from triage.parsers import parse

    return tuple(ev for source in discover([str(path)]) for ev in parse(source).events)


def iter_examples(rule: Rule) -> Iterable[tuple[bool, Any]]:
    """(must_match, example) pairs of one rule, for the tests."""
    for ex in rule.examples_match:
        yield True, ex
    for ex in rule.examples_no_match:
        yield False, ex


def example_matches(rule: Rule, example: Any) -> bool:
    """Does this rule fire on one of its examples (text, or a finding with optional text)?"""
    ruleset = RuleSet(rules=(rule,))
    if isinstance(example, str):
        text, finding = example, None
    else:
        text = example.get("text", "")
        finding = (
            Finding(
                kind=example["finding"],
                summary=example.get("summary", example["finding"]),
                ranks=tuple((example.get("facts") or {}).get("ranks", ())),
                facts=example.get("facts") or {},
            )
            if example.get("finding")
            else None
        )
    analysis = Analysis(findings=(finding,) if finding else ())
    events = (whole_text_event(text, "<example>"),) if text else ()
    if isinstance(example, dict) and example.get("kind") and events:
        events = (Event(**{**events[0].__dict__, "kind": EventKind(example["kind"])}),)
    hits = match_events(events, analysis, rules=ruleset)
    return any(h.rule_id == rule.id for h in hits)
