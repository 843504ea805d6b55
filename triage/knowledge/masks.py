"""The signature's masking instructions (`kind: masks`), Drain3 style.

    kind: masks
    prefixes: [{name, pattern}]              # per-line wrappers removed first, in order
    masks:                                   # then each, in order:
      - {name, pattern, mask_with}           # matches replaced (a regex replacement template)
      - {name, pattern, keep: 2}             # group 2 kept as it is by every later mask
      - {name, pattern, mask_with: "<path>/{basename}", keep_after: [site-packages/]}
    salient: '<regex>'                       # a line worth embedding
    frame: '<regex with `file` and `func` groups>'
    innermost_first: '<regex>'               # a stack header whose first frame is innermost
    examples: [{text, masked}]

Shipped only (the index was built with these masks). The engine that applies them is
`triage.classify.signature`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import regex

from triage.knowledge.problems import compile_regex

KIND = "masks"
_KEYS = {"kind", "prefixes", "masks", "salient", "frame", "innermost_first", "examples"}
_MASK_KEYS = {"name", "pattern", "mask_with", "keep", "keep_after"}


@dataclass(frozen=True)
class Mask:
    name: str
    pattern: regex.Pattern[str]
    mask_with: str | None = None  # a replacement template; None with `keep`
    keep: int | None = None  # the group kept from every later mask
    keep_after: tuple[str, ...] = ()  # with `{basename}`: a path through one keeps its tail


@dataclass(frozen=True)
class Masks:
    prefixes: tuple[regex.Pattern[str], ...] = ()
    masks: tuple[Mask, ...] = ()
    salient: regex.Pattern[str] | None = None
    frame: regex.Pattern[str] | None = None
    innermost_first: regex.Pattern[str] | None = None
    examples: tuple[tuple[str, str], ...] = ()  # (text, masked)

    def named(self, name: str) -> Mask:
        return next(m for m in self.masks if m.name == name)


def build(body: Mapping[str, Any], report: Callable[[str, str], None], team: bool) -> Masks:
    unknown = set(body) - _KEYS
    if unknown:
        report("", f"unknown key(s) {sorted(unknown)}; allowed: {sorted(_KEYS - {'kind'})}")
    prefixes = []
    for n, entry in enumerate(_entries(body.get("prefixes"), "prefixes", report), 1):
        compiled = compile_regex(entry.get("pattern"), f"prefix {entry.get('name') or n}", report)
        if compiled is not None:
            prefixes.append(compiled)
    masks: list[Mask] = []
    for n, entry in enumerate(_entries(body.get("masks"), "masks", report), 1):
        mask = _mask(entry, n, report)
        if mask is not None:
            masks.append(mask)
    if "path" not in {m.name for m in masks}:
        report("masks", "needs a mask named `path` (frames keep their file through it)")
    salient = compile_regex(body.get("salient"), "salient", report)
    frame = compile_regex(body.get("frame"), "frame", report)
    if frame is not None and not {"file", "func"} <= set(frame.groupindex):
        report("frame", "needs `file` and `func` groups")
    innermost_first = (
        compile_regex(body["innermost_first"], "innermost_first", report)
        if "innermost_first" in body
        else None
    )
    examples = []
    for n, ex in enumerate(body.get("examples") or [], 1):
        if (
            isinstance(ex, dict)
            and isinstance(ex.get("text"), str)
            and isinstance(ex.get("masked"), str)
        ):
            examples.append((ex["text"], ex["masked"]))
        else:
            report(f"examples #{n}", "needs `text` and the `masked` text it must give")
    if not examples:
        report("examples", "needs at least one {text, masked} example")
    return Masks(tuple(prefixes), tuple(masks), salient, frame, innermost_first, tuple(examples))


def _mask(entry: Mapping[str, Any], n: int, report: Callable[[str, str], None]) -> Mask | None:
    item = f"mask {entry.get('name') or n}"
    bad = set(entry) - _MASK_KEYS
    if bad:
        report(item, f"unknown key(s) {sorted(bad)}; allowed: {sorted(_MASK_KEYS)}")
    if not isinstance(entry.get("name"), str):
        report(item, "needs a `name`")
        return None
    compiled = compile_regex(entry.get("pattern"), item, report)
    if compiled is None:
        return None
    mask_with, keep = entry.get("mask_with"), entry.get("keep")
    if (mask_with is None) == (keep is None):
        report(item, "needs either `mask_with` or `keep` (a group number)")
        return None
    if keep is not None and (
        isinstance(keep, bool) or not isinstance(keep, int) or not 0 < keep <= compiled.groups
    ):
        report(item, f"`keep` must be a group of the pattern (1..{compiled.groups})")
        return None
    if mask_with is not None and not isinstance(mask_with, str):
        report(item, "`mask_with` must be text")
        return None
    keep_after = entry.get("keep_after") or []
    if not isinstance(keep_after, list) or not all(isinstance(k, str) for k in keep_after):
        report(item, "`keep_after` must be a list of texts")
        return None
    return Mask(entry["name"], compiled, mask_with, keep, tuple(keep_after))


def _entries(value: Any, item: str, report: Callable[[str, str], None]) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not all(isinstance(e, dict) for e in value):
        report(item, "must be a list of {name, pattern, ...}")
        return []
    return value


def merge(values: Sequence[Masks]) -> Masks:
    return values[0] if values else Masks()
