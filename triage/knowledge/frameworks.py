"""What a job runs on (`kind: frameworks`): frameworks and launchers, known by what they print.

    kind: frameworks
    frameworks:
      deepspeed:
        name: DeepSpeed
        seen: ['deepspeed/runtime/', '\\[deepspeed\\]']   # regexes over the job's lines
        examples: ["...a line only a DeepSpeed job prints..."]
        named: ['\\bDeepSpeed\\b', '\\bZeRO\\b']       # how advice names it (optional)
        engine: true                        # false: a wrapper on an engine (Accelerate)
    launchers:
      torchrun: {name: torchrun, seen: [...], examples: [...]}
    gpu_seen: {pattern: '\\bCUDA error', examples: {match: [...], no_match: [...]}}

Correlate reads the job's lines (tracebacks hold the frameworks' file paths, launchers narrate
themselves) and sets the facts `frameworks` and `launchers`; actions name them in their
conditions (`when: {framework: deepspeed}`, see triage.knowledge.actions). An installed package
is not a sign of use: only what the job printed counts, weighted by how many lines: a
DeepSpeed job whose lines name DeepSpeed again and again and FSDP once runs on DeepSpeed
(among engines; a wrapper such as Accelerate counts when seen). Recommend leaves out advice
that names (`named`) only frameworks the job does not run on: what an action's own words name
is found once, when the knowledge loads (`Alternative.frameworks`), not in the facts it is
filled with (a job's `stage3_train.py` is its own file, not DeepSpeed's). Shipped only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import regex

from triage.knowledge.problems import check_examples, compile_alternation, compile_regex

KIND = "frameworks"
_KEYS = {"kind", "frameworks", "launchers", "gpu_seen"}
_ENTRY_KEYS = {"name", "seen", "examples", "named", "engine"}
# Lines counted per framework before the count stops mattering, and the share of the most
# named engine's count another engine needs to count as run on: a job shards its model with
# one engine, and a DeepSpeed job whose lines pass one FSDP-named helper runs on DeepSpeed.
# Wrappers (`engine: false`: Accelerate, Transformers, Lightning) sit on an engine and are
# named by few frames of a traceback: seen once is enough for them.
COUNT_CAP = 200
MINOR_SHARE = 0.2


@dataclass(frozen=True)
class Marker:
    id: str
    name: str
    pattern: regex.Pattern[str]  # the `seen` regexes as one alternation
    examples: tuple[str, ...] = ()
    # literals one of which every match holds (`triage.literals`; "\0" + lowercase: tested
    # against the lowercased text), None when some `seen` regex has none
    literals: tuple[str, ...] | None = None
    named: regex.Pattern[str] | None = None  # how advice names it (`named`), None: not said
    engine: bool = True  # shards or replicates the model itself (weighted against the others)
    # literals one of which every `named` match holds (as `literals`), None: always searched
    named_literals: tuple[str, ...] | None = None

    @cached_property
    def named_screen(self) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
        """`named_literals` as `Frameworks.screen` holds them."""
        return _screen([self.named_literals])


@dataclass(frozen=True)
class Frameworks:
    frameworks: tuple[Marker, ...] = ()
    launchers: tuple[Marker, ...] = ()
    # every marker's literals (case-sensitive ones, case-insensitive ones lowercased): a
    # text that holds none cannot match any marker (None: some marker has no literals)
    screen: tuple[tuple[str, ...], tuple[str, ...]] | None = None
    # a line only a job on GPUs prints (`gpu_seen`): the job's `device` fact (actions'
    # `when: {device: gpu}`); None: no line tells
    gpu_seen: regex.Pattern[str] | None = None
    # the same of the frameworks' `named` patterns: advice that holds none names none
    named_screen: tuple[tuple[str, ...], tuple[str, ...]] | None = None

    def _may_match(self, text: str) -> bool:
        return _may_hold(text, self.screen)

    def detect(self, texts: Iterable[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(framework ids, most named first, leaving out those named by only a few of the
        lines the leading one is; launcher ids seen), for these texts."""
        counts = dict.fromkeys((m.id for m in self.frameworks), 0)
        left = [*self.frameworks, *self.launchers]
        found: set[str] = set()
        for text in texts:
            if not left:
                break
            # substring tests for the markers' literals first: a big job has thousands of
            # lines and most hold none (~75,000 regex searches on a 64-rank NCCL init bundle)
            if not self._may_match(text):
                continue
            hit = [m for m in left if m.pattern.search(text)]
            if not hit:
                continue
            found.update(m.id for m in hit)
            done = []
            for m in hit:
                if m.id not in counts:
                    done.append(m)  # a launcher: seen once is enough
                    continue
                # a text may hold many lines (a whole file): each matching line counts
                counts[m.id] += len(m.pattern.findall(text)) if "\n" in text else 1
                if counts[m.id] >= COUNT_CAP:
                    done.append(m)
            if done:
                left = [m for m in left if m not in done]
        engines = {m.id for m in self.frameworks if m.engine}
        seen = [m.id for m in self.frameworks if counts[m.id]]
        top = max((counts[f] for f in seen if f in engines), default=0)
        floor = max(1.0, MINOR_SHARE * min(top, COUNT_CAP))
        kept = [f for f in seen if f not in engines or counts[f] >= floor]
        kept.sort(key=lambda f: -min(counts[f], COUNT_CAP))  # stable: file order on ties
        return (
            tuple(kept),
            tuple(m.id for m in self.launchers if m.id in found),
        )

    def named_in(self, text: str) -> set[str]:
        """The frameworks a piece of advice names (their `named` patterns)."""
        # a substring test first: most advice names no framework (~600 templates a load)
        if not _may_hold(text, self.named_screen):
            return set()
        return {
            m.id
            for m in self.frameworks
            if m.named is not None and _may_hold(text, m.named_screen) and m.named.search(text)
        }


def _may_hold(text: str, screen: tuple[tuple[str, ...], tuple[str, ...]] | None) -> bool:
    """Can the text match a pattern whose literals are these (see `Frameworks.screen`)?"""
    if screen is None:
        return True
    exact, folded = screen
    if any(lit in text for lit in exact):
        return True
    if not folded:
        return False
    if not text.isascii():
        return True  # case folding beyond ASCII: the regexes decide
    lowered = text.lower()
    return any(lit in lowered for lit in folded)


def build(body: Mapping[str, Any], report: Callable[[str, str], None], team: bool) -> Frameworks:
    unknown = set(body) - _KEYS
    if unknown:
        report("", f"unknown key(s) {sorted(unknown)}; allowed: {sorted(_KEYS - {'kind'})}")
    frameworks = _markers(body.get("frameworks"), "frameworks", report)
    launchers = _markers(body.get("launchers"), "launchers", report)
    gpu_seen = None
    if "gpu_seen" in body:
        spec = body["gpu_seen"] if isinstance(body["gpu_seen"], Mapping) else {}
        gpu_seen = compile_regex(spec.get("pattern"), "gpu_seen", report)
        if gpu_seen is not None:
            check_examples(gpu_seen, spec.get("examples"), "gpu_seen", report)
    named = [m.named_literals for m in frameworks if m.named is not None]
    return Frameworks(
        frameworks,
        launchers,
        _screen([m.literals for m in (*frameworks, *launchers)]),
        gpu_seen,
        _screen(named),
    )


def _screen(
    literal_sets: Sequence[tuple[str, ...] | None],
) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """The patterns' literals, split into case-sensitive and (lowercased, ASCII)
    case-insensitive ones; None when some pattern has none or a non-ASCII folded one."""
    if not literal_sets or any(literals is None for literals in literal_sets):
        return None
    found = [lit for literals in literal_sets for lit in literals or ()]
    folded = [lit[1:] for lit in found if lit.startswith("\0")]
    if not all(lit.isascii() for lit in folded):
        return None
    exact = [lit for lit in found if not lit.startswith("\0")]
    return tuple(dict.fromkeys(exact)), tuple(dict.fromkeys(folded))


def _markers(raw: Any, what: str, report: Callable[[str, str], None]) -> tuple[Marker, ...]:
    if not isinstance(raw, dict) or not raw:
        report(what, "needs at least one entry: {id: {name, seen, examples}}")
        return ()
    out = []
    for ident, spec in raw.items():
        item = f"{what} {ident}"
        if not isinstance(spec, dict):
            report(item, "must be a mapping of name, seen, examples")
            continue
        bad = set(spec) - _ENTRY_KEYS
        if bad:
            report(item, f"unknown key(s) {sorted(bad)}; allowed: {sorted(_ENTRY_KEYS)}")
        seen = _strings(spec.get("seen"), f"{item} seen", report)
        examples = _strings(spec.get("examples"), f"{item} examples", report)
        named, named_literals = _named(spec, item, report)
        if not seen or not examples:
            report(item, "needs `seen` (regexes) and `examples` (lines they must match)")
            continue
        pattern = compile_alternation(seen, f"{item} seen", report)
        if pattern is None:
            continue
        for example in examples:
            if not pattern.search(example):
                report(item, f"example does not match `seen`: {example!r}")
        out.append(
            Marker(
                str(ident),
                str(spec.get("name") or ident),
                pattern,
                tuple(examples),
                _literals(seen),
                named,
                bool(spec.get("engine", True)),
                named_literals,
            )
        )
    return tuple(out)


def _named(
    spec: Mapping[str, Any], item: str, report: Callable[[str, str], None]
) -> tuple[regex.Pattern[str] | None, tuple[str, ...] | None]:
    """The `named` regexes as one pattern, and the literals one of which its every match
    holds; the entry's own `name` must be one of them."""
    named = _strings(spec.get("named"), f"{item} named", report)
    if not named:
        return None, None
    pattern = compile_alternation(named, f"{item} named", report)
    if pattern is None:
        return None, None
    name = str(spec.get("name") or "")
    if name and not pattern.search(name):
        report(item, f"`named` does not match the entry's own name {name!r}")
    return pattern, _literals(named)


def _literals(seen: Sequence[str]) -> tuple[str, ...] | None:
    """Literals one of which every match of the `seen` alternation holds: each regex's own,
    together; None when one of them has none (that marker is always searched)."""
    from triage.literals import required_literals

    out: list[str] = []
    for pattern in seen:
        found = required_literals(pattern, min_len=3)  # `mpirun`'s "mpi"
        if found is None:
            return None
        out.extend(found)
    return tuple(dict.fromkeys(out))


def _strings(value: Any, item: str, report: Callable[[str, str], None]) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    report(item, "must be a text or a list of texts")
    return []


def merge(values: Sequence[Frameworks]) -> Frameworks:
    return values[0] if values else Frameworks()
