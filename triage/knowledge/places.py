"""Where a traceback ran (`kind: places`): frame patterns -> the place and stage of a failure.

    kind: places
    places:
      - id: checkpoint-save
        title: A checkpoint was being saved
        sources: [transformers/trainer.py (_save_checkpoint)]
        frames:
          - {function: '_save_checkpoint|save_checkpoint'}
          - {file: 'lightning/pytorch/callbacks/model_checkpoint\\.py'}
        concludes:
          symptom: {S28: 0.65}
          root_cause: {R25: 0.35}
          fix: {F6: 0.45}
          stage: {ST5: 0.8}
        actions:
          F3: "The save failed: ..."
        examples:
          match: ["transformers/trainer.py:_save_checkpoint"]
          no_match: ["transformers/trainer.py:_load_from_checkpoint"]

A frame matches an entry of `frames` when its function name matches `function` in full and its
file path (with `/` separators) contains a match of `file`, for the keys the entry gives. Any
frame of the traceback counts, not only the innermost: a traceback cut before its exception
line (`File ".../trainer.py", line 1212 in _save_checkpoint` as its last line) is still a
checkpoint save. Examples are `path:function` frames that must and must not match. A place
whose `when: waiting` holds only for a stack of a process that was waiting (a py-spy or
faulthandler dump, or a traceback with no exception line), not for one that raised.
An action may name `{rank}`, the rank whose stack it is; where that rank is unknown, the
sentence that names it is left out.

    refines: [S18]              # the symptoms an exception's family prior assumes

`refines` names the symptoms a generic rule's family prior (`KeyError` -> a runtime exception
in a training step) concludes only because nothing said where the exception was raised: on
the lines a place stands on, the prior yields those symptoms, and the stage they belong to,
to the place. Shipped only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import regex

from triage import taxonomy
from triage.knowledge.problems import compile_regex

KIND = "places"
_KEYS = {"kind", "places", "refines"}
_PLACE_KEYS = {"id", "title", "sources", "frames", "when", "concludes", "actions", "examples"}
_FRAME_KEYS = {"file", "function"}
_WHEN = {"waiting", "raised"}
_FIELDS = ("symptom", "root_cause", "fix", "stage")


@dataclass(frozen=True)
class FramePattern:
    file: regex.Pattern[str] | None
    function: regex.Pattern[str] | None

    def matches(self, file: str, function: str) -> bool:
        path = file.replace("\\", "/")
        return (self.file is None or self.file.search(path) is not None) and (
            self.function is None or self.function.fullmatch(function.strip()) is not None
        )


@dataclass(frozen=True)
class Place:
    id: str
    title: str
    sources: tuple[str, ...]
    frames: tuple[FramePattern, ...]
    when: str | None  # "waiting", "raised" or None: either
    symptom: Mapping[str, float]
    root_cause: Mapping[str, float]
    fix: Mapping[str, float]
    stage: Mapping[str, float]
    actions: Mapping[str, str]
    # fix -> the frameworks its action names (rules/frameworks.yaml `named`), set on load
    action_frameworks: Mapping[str, frozenset[str]] = field(default_factory=dict)

    def matches(self, file: str, function: str) -> bool:
        return any(p.matches(file, function) for p in self.frames)


@dataclass(frozen=True)
class Places:
    places: tuple[Place, ...] = ()
    # symptoms a family prior assumes where nothing says where it raised (`refines`)
    refines: frozenset[str] = frozenset()

    def place_of(self, file: str, function: str, waiting: bool | None) -> Place | None:
        """The first place (file order: the more specific first) the frame is in."""
        for place in self.places:
            # a cut traceback (waiting None) may be either
            if place.when == "waiting" and waiting is False:
                continue
            if place.when == "raised" and waiting is True:
                continue
            if place.matches(file, function):
                return place
        return None


def build(body: Mapping[str, Any], report: Callable[[str, str], None], team: bool) -> Places:
    unknown = set(body) - _KEYS
    if unknown:
        report("", f"unknown key(s) {sorted(unknown)}; allowed: places, refines")
    raw = body.get("places")
    if not isinstance(raw, list) or not raw:
        report("places", "needs a list of places")
        return Places()
    tax = taxonomy.load()
    refines = body.get("refines") or []
    if not isinstance(refines, list):
        report("refines", "must be a list of symptom ids")
        refines = []
    for label in refines:
        if label not in tax.symptoms:
            report("refines", f"{label} is not a symptom id")
    out: list[Place] = []
    seen: set[str] = set()
    for n, spec in enumerate(raw):
        place = _place(spec, n, report, tax)
        if place is None:
            continue
        if place.id in seen:
            report(f"place {place.id}", "is defined twice")
            continue
        seen.add(place.id)
        out.append(place)
    return Places(tuple(out), frozenset(str(x) for x in refines if x in tax.symptoms))


def _place(
    spec: Any, n: int, report: Callable[[str, str], None], tax: taxonomy.Taxonomy
) -> Place | None:
    if not isinstance(spec, dict):
        report(f"places[{n}]", "must be a mapping")
        return None
    item = f"place {spec.get('id', n)}"
    bad = set(spec) - _PLACE_KEYS
    if bad:
        report(item, f"unknown key(s) {sorted(bad)}; allowed: {sorted(_PLACE_KEYS)}")
    missing = [k for k in ("id", "title", "sources", "frames", "concludes") if not spec.get(k)]
    if missing:
        report(item, f"needs {', '.join(missing)}")
        return None
    when = spec.get("when")
    if when is not None and when not in _WHEN:
        report(item, f"when must be one of {sorted(_WHEN)}")
    patterns: list[FramePattern] = []
    for k, entry in enumerate(spec["frames"]):
        if not isinstance(entry, dict) or not entry or set(entry) - _FRAME_KEYS:
            report(item, f"frames[{k}] needs `file` and/or `function` (regexes), nothing else")
            continue
        f = compile_regex(entry["file"], f"{item} file", report) if "file" in entry else None
        g = (
            compile_regex(entry["function"], f"{item} function", report)
            if "function" in entry
            else None
        )
        patterns.append(FramePattern(f, g))
    concludes = spec["concludes"]
    weights: dict[str, dict[str, float]] = {}
    tables = {
        "symptom": tax.symptoms,
        "root_cause": tax.root_causes,
        "fix": tax.fix_patterns,
        "stage": tax.stages,
    }
    for label_kind in _FIELDS:
        row = concludes.get(label_kind) or {}
        for label, w in row.items():
            if label not in tables[label_kind]:
                report(item, f"concludes.{label_kind}: {label} is not a taxonomy id")
            elif not 0 < float(w) <= 1:
                report(item, f"concludes.{label_kind}.{label}: weight must be in (0, 1]")
        weights[label_kind] = {str(k): float(v) for k, v in row.items() if k in tables[label_kind]}
    if not weights["stage"]:
        report(item, "concludes.stage: a place says which stage was running")
    given = spec.get("actions") or {}
    if not isinstance(given, dict):
        report(item, "actions: must map a fix pattern to one sentence")
        given = {}
    actions: dict[str, str] = {}
    for fix, value in given.items():
        # a list or a mapping would be printed as its Python form, brackets and all
        if not isinstance(value, str) or not value.strip():
            report(
                item, f"actions.{fix}: must be one sentence (a string), not {type(value).__name__}"
            )
        else:
            actions[str(fix)] = value
    for fix, text in actions.items():
        if fix not in tax.fix_patterns:
            report(item, f"actions: {fix} is not a fix pattern")
        named = set(regex.findall(r"\{(\w+)\}", text)) - {"rank"}
        if named:
            report(item, f"actions.{fix}: names {sorted(named)}; a place knows only {{rank}}")
    place = Place(
        id=str(spec["id"]),
        title=str(spec["title"]),
        sources=tuple(str(s) for s in spec["sources"]),
        frames=tuple(patterns),
        when=when,
        symptom=weights["symptom"],
        root_cause=weights["root_cause"],
        fix=weights["fix"],
        stage=weights["stage"],
        actions=actions,
    )
    examples = spec.get("examples") or {}
    must = [str(x) for x in examples.get("match") or ()]
    if not must:
        report(item, "needs examples.match: `path:function` frames of the place")
    for example in must:
        if not place.matches(*_split(example)):
            report(item, f"example does not match: {example!r}")
    for example in examples.get("no_match") or ():
        if place.matches(*_split(str(example))):
            report(item, f"no_match example matches: {example!r}")
    return place


def _split(example: str) -> tuple[str, str]:
    file, _, function = example.rpartition(":")
    return file, function


def merge(values: Sequence[Places]) -> Places:
    return values[0] if values else Places()
