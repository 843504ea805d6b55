"""P(fix | root cause): which fix patterns resolved the reference cases of each root cause.

Fitted at build time from the labeled reference cases (`bench/eval_corpus.py
--write-calibration`, inside each fold for the cross-validated figures) and stored beside the
calibration (`calibration.json`, key `fix_prior`). Each cause's counts are smoothed toward its
taxonomy list (`taxonomy.root_causes[R].fixes`, best first), so a cause with few cases keeps
the taxonomy's order and one with many follows what resolved them: a checkpoint-layout mismatch
was fixed by the resume flags far more often than by code, whatever the list's order says.

Two tables ship. The calibration's (`calibration.json`, `fix_prior`) feeds the calibrator's
`rc_prior` feature, so it is the one the calibrator was fitted with (fitted like
`cause_fixes.json` unless `--fix-prior listed`: on cross-validation the fitted table gave
fix@1 0.9 points over the lists). `cause_fixes.json` is the
fit on every reference case's labels: what resolved the cases of each cause. It names a
cause's usual fix, which leads the fixes when the report states that cause
(`fusion.follow_the_cause`) and which `recommend` explains a fix by. Both are written by
`bench/eval_corpus.py --write-calibration`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from triage import taxonomy

# A root cause's listed fixes as pseudo-counts, best first (the taxonomy's order).
LIST_WEIGHTS = (1.0, 0.5, 0.25)
# How many cases the taxonomy's list is worth next to the observed ones. Chosen by
# cross-validation on the reference cases (bench/eval_corpus.py prints fix@1 and fix@3).
SMOOTHING = 3.0
# An alternative fix a case's thread also found to work counts this much of a case.
ALT_WEIGHT = 0.5


@dataclass(frozen=True)
class FixPrior:
    """Root cause -> fix pattern -> weight (a probability, each row summing to 1, when fitted)."""

    table: Mapping[str, Mapping[str, float]]
    meta: Mapping[str, Any]

    def given(self, rc_probs: Mapping[str, float]) -> dict[str, float]:
        """P(fix) when the root cause is uncertain: each cause's row weighted by its
        probability, normalised by the total probability of the causes given."""
        norm = sum(rc_probs.values())
        if norm <= 0:
            return {}
        out: dict[str, float] = {}
        for rc, p in rc_probs.items():
            for fix, q in self.table.get(rc, {}).items():
                out[fix] = out.get(fix, 0.0) + p * q
        return {k: v / norm for k, v in out.items()}

    def ranked(self, rc: str) -> list[tuple[str, float]]:
        """The fixes of one cause, most probable first (ties: by id)."""
        return sorted(self.table.get(rc, {}).items(), key=lambda kv: (-kv[1], kv[0]))

    def to_json(self) -> dict[str, Any]:
        return {
            "meta": dict(self.meta),
            "table": {
                rc: {f: round(p, 4) for f, p in sorted(row.items())}
                for rc, row in sorted(self.table.items())
            },
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FixPrior:
        table = {
            str(rc): {str(f): float(p) for f, p in row.items()} for rc, row in data["table"].items()
        }
        return cls(table, dict(data.get("meta", {})))


def listed(tax: taxonomy.Taxonomy | None = None) -> FixPrior:
    """The prior from the taxonomy's lists alone, as weights (1, 0.5, 0.25 down each list): a
    cause's first listed fix gets the cause's whole score, as before a prior was fitted."""
    tax = tax if tax is not None else taxonomy.load()
    table = {
        rc: dict(zip(cat.fixes, LIST_WEIGHTS, strict=False))
        for rc, cat in tax.root_causes.items()
        if cat.fixes
    }
    return FixPrior(table, {"cases": 0, "from": "the taxonomy's lists"})


def fit(
    cases: Iterable[tuple[str, str, Iterable[str]]],
    tax: taxonomy.Taxonomy | None = None,
    smoothing: float = SMOOTHING,
) -> FixPrior:
    """Fit from (root cause, fix, alternative fixes) of labeled cases."""
    tax = tax if tax is not None else taxonomy.load()
    counts: dict[str, dict[str, float]] = {}
    n_cases = 0
    for rc, fix, alts in cases:
        if rc not in tax.root_causes:
            continue
        n_cases += 1
        row = counts.setdefault(rc, {})
        row[fix] = row.get(fix, 0.0) + 1.0
        for alt in set(alts) - {fix}:
            row[alt] = row.get(alt, 0.0) + ALT_WEIGHT
    table: dict[str, dict[str, float]] = {}
    for rc, cat in tax.root_causes.items():
        weights = LIST_WEIGHTS[: len(cat.fixes)]
        listed_total = sum(weights) or 1.0
        row = {f: smoothing * w / listed_total for f, w in zip(cat.fixes, weights, strict=False)}
        for f, c in counts.get(rc, {}).items():
            row[f] = row.get(f, 0.0) + c
        total = sum(row.values())
        if total > 0:
            table[rc] = {f: v / total for f, v in row.items()}
    return FixPrior(table, {"cases": n_cases, "smoothing": smoothing, "alt_weight": ALT_WEIGHT})


CAUSE_FIXES_FILE = "cause_fixes.json"
SCHEMA = "triage.cause_fixes/1"


def save(prior: FixPrior, path: Path) -> None:
    """Write a fitted table (`cause_fixes.json`)."""
    data = {"schema": SCHEMA, **prior.to_json()}
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def load(path: Path) -> FixPrior | None:
    """The table written by `save`, or None when there is none."""
    return _load(str(path), path.stat().st_mtime if path.is_file() else 0.0)


@lru_cache(maxsize=4)
def _load(path: str, mtime: float) -> FixPrior | None:
    if not mtime:
        return None
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if data.get("schema") != SCHEMA:
        raise ValueError(f"{path}: schema {data.get('schema')!r}, expected {SCHEMA!r}")
    return FixPrior.from_json(data)
