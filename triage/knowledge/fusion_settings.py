"""The settings of the fusion (`fusion.py`): weights and thresholds, kept as data.

They live in `models/fusion.json` (`SETTINGS_FILE`), one entry per setting with its value and
a one-line why, chosen by cross-validation on the reference cases (`bench/eval_corpus.py`) or
by the reasoning its why gives. They are read when the engine needs them (never at import),
validated against `SPECS` (every setting present, none unknown, each value of its kind and in
its range), and passed to the fusion's functions like `cause_fixes.json` is.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, fields
from functools import lru_cache
from pathlib import Path
from typing import Any

from triage.knowledge import models_dir
from triage.knowledge.problems import KnowledgeError, Problem

SETTINGS_FILE = "fusion.json"
SCHEMA = "triage.fusion_settings/1"


class FusionSettingsError(KnowledgeError):
    """The settings file is missing or malformed, or values are out of range: one problem
    each, naming the file and the setting (the CLI prints them all and exits 1)."""

    def __init__(self, where: str, problems: list[tuple[str, str]]) -> None:
        super().__init__(Problem(where, item, message) for item, message in problems)


@dataclass(frozen=True)
class FusionSettings:
    """One attribute per setting of `models/fusion.json` (the file says why each is what it is)."""

    cascade_factor: float
    generic_factor: float
    atlas_factor: float
    yield_weight: float
    generic_settle: float
    open_ties: int
    model_candidates: int
    model_min_prob: float
    stated_cause: float
    not_its_fix: float
    rule_margin: float
    chosen_weight: float
    chosen_margin: float
    stage_vote_weight: float
    mechanism_weight: float
    mechanism_margin: float


# The kind and range of each setting: "share" is a number in [0, 1], "count" an integer >= 1.
SPECS: Mapping[str, str] = {
    "cascade_factor": "share",
    "generic_factor": "share",
    "atlas_factor": "share",
    "yield_weight": "share",
    "generic_settle": "share",
    "open_ties": "count",
    "model_candidates": "count",
    "model_min_prob": "share",
    "stated_cause": "share",
    "not_its_fix": "share",
    "rule_margin": "share",
    "chosen_weight": "share",
    "chosen_margin": "share",
    "stage_vote_weight": "share",
    "mechanism_weight": "share",
    "mechanism_margin": "share",
}
assert set(SPECS) == {f.name for f in fields(FusionSettings)}


def parse(data: Any, where: str = SETTINGS_FILE) -> FusionSettings:
    """The settings of a parsed settings document; FusionSettingsError says what is wrong."""
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        got = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise FusionSettingsError(where, [("", f"schema {got!r}, expected {SCHEMA!r}")])
    entries = data.get("settings")
    if not isinstance(entries, dict):
        raise FusionSettingsError(where, [("", "'settings' must be a mapping of name -> entry")])
    problems = [(f"setting {n!r}", "unknown setting") for n in sorted(set(entries) - set(SPECS))]
    problems += [(f"setting {n!r}", "missing") for n in SPECS if n not in entries]
    values: dict[str, float | int] = {}
    for name, kind in SPECS.items():
        entry = entries.get(name)
        item = f"setting {name!r}"
        if entry is None:
            continue
        if not isinstance(entry, dict) or set(entry) != {"value", "why"}:
            problems.append((item, "must have exactly 'value' and 'why'"))
            continue
        if not isinstance(entry["why"], str) or not entry["why"].strip():
            problems.append((item, "needs a one-line 'why'"))
        value = entry["value"]
        if kind == "count":
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                problems.append((item, f"{value!r} is not a whole number >= 1"))
                continue
        elif isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
            problems.append((item, f"{value!r} is not a number in [0, 1]"))
            continue
        values[name] = value
    if problems:
        raise FusionSettingsError(where, problems)
    return FusionSettings(**values)  # type: ignore[arg-type]


def load(path: Path) -> FusionSettings:
    """The settings in `path` (validated)."""
    mtime = path.stat().st_mtime if path.is_file() else 0.0
    return _load(str(path), mtime)


@lru_cache(maxsize=4)
def _load(path: str, mtime: float) -> FusionSettings:
    if not mtime:
        raise FusionSettingsError(path, [("", "no fusion settings file (it ships in models/)")])
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise FusionSettingsError(path, [("", f"unreadable ({exc})")]) from exc
    return parse(data, path)


def shipped(directory: Path | None = None) -> FusionSettings:
    """The settings in `models/` (or `directory`)."""
    return load((directory or models_dir()) / SETTINGS_FILE)
