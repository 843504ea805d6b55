"""Calibrated scores: a logistic model per label field over the fusion features.

Fitted on out-of-fold predictions over the labeled corpus (`bench/eval_corpus.py`), so that a
score of 0.8 is right about 80% of the time. Stored as plain numbers in
`models/calibration.json` (feature names, coefficients, intercept): no pickles, and applying it
needs numpy only.
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from triage.classify.fix_prior import FixPrior

CALIBRATION_FILE = "calibration.json"
CALIBRATION_SCHEMA = "triage.calibration/1"


@dataclass(frozen=True)
class LogisticCalibrator:
    """p(label is right | features) = sigmoid(coef . x + intercept)."""

    features: tuple[str, ...]
    coef: tuple[float, ...]
    intercept: float

    def predict(self, rows: Sequence[Mapping[str, float]]) -> list[float]:
        if not rows:
            return []
        x = np.array([[r.get(f, 0.0) for f in self.features] for r in rows], dtype=np.float64)
        z = x @ np.array(self.coef) + self.intercept
        return [float(v) for v in 1.0 / (1.0 + np.exp(-z))]

    def to_json(self) -> dict[str, Any]:
        return {
            "features": list(self.features),
            "coef": [round(c, 6) for c in self.coef],
            "intercept": round(self.intercept, 6),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LogisticCalibrator:
        return cls(
            features=tuple(data["features"]),
            coef=tuple(float(c) for c in data["coef"]),
            intercept=float(data["intercept"]),
        )


def fit(
    rows: Sequence[Mapping[str, float]], targets: Sequence[bool], features: Sequence[str]
) -> LogisticCalibrator:
    """Fit on candidate rows (one per case and candidate label; target: the label is right)."""
    from sklearn.linear_model import LogisticRegression

    x = np.array([[r.get(f, 0.0) for f in features] for r in rows], dtype=np.float64)
    y = np.array(targets, dtype=int)
    if len(set(y.tolist())) < 2:
        # One class only (tiny data): a constant at the observed rate, still a calibrated score.
        rate = min(max(float(y.mean()) if len(y) else 0.5, 1e-3), 1 - 1e-3)
        return LogisticCalibrator(
            tuple(features), (0.0,) * len(features), math.log(rate / (1 - rate))
        )
    model = LogisticRegression(C=1.0, max_iter=1000)
    model.fit(x, y)
    return LogisticCalibrator(
        tuple(features), tuple(float(c) for c in model.coef_[0]), float(model.intercept_[0])
    )


@dataclass(frozen=True)
class Calibration:
    """One calibrator per (neighbour method, field), plus the abstention threshold."""

    calibrators: Mapping[str, Mapping[str, LogisticCalibrator]]
    abstain_below: float
    meta: Mapping[str, Any]
    # P(fix | root cause) fitted on the same reference cases (None: the taxonomy's lists)
    fix_prior: FixPrior | None = None

    def get(self, method: str, field: str) -> LogisticCalibrator | None:
        return self.calibrators.get(method, {}).get(field)

    def save(self, path: Path) -> None:
        data = {
            "schema": CALIBRATION_SCHEMA,
            "abstain_below": self.abstain_below,
            "meta": dict(self.meta),
            "calibrators": {
                m: {f: c.to_json() for f, c in fields.items()}
                for m, fields in self.calibrators.items()
            },
        }
        if self.fix_prior is not None:
            data["fix_prior"] = self.fix_prior.to_json()
        path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
        _load_cached.cache_clear()


def load(path: Path) -> Calibration | None:
    return _load_cached(str(path))


@lru_cache(maxsize=4)
def _load_cached(path: str) -> Calibration | None:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        return Calibration(
            calibrators={
                m: {f: LogisticCalibrator.from_json(c) for f, c in fields.items()}
                for m, fields in data["calibrators"].items()
            },
            abstain_below=float(data["abstain_below"]),
            meta=data.get("meta", {}),
            fix_prior=FixPrior.from_json(data["fix_prior"]) if "fix_prior" in data else None,
        )
    except FileNotFoundError:
        return None
    except (OSError, KeyError, TypeError, ValueError) as exc:
        warnings.warn(
            f"calibration file {path} unusable ({exc}); scores uncalibrated", stacklevel=2
        )
        return None


def reliability(
    scores: Sequence[float],
    right: Sequence[bool],
    edges: Sequence[float] = (0, 0.2, 0.4, 0.6, 0.8, 1.0),
) -> list[tuple[float, float, int, float, float]]:
    """Rows (low, high, n, mean predicted score, observed accuracy) per score bin."""
    out = []
    for lo, hi in zip(edges, edges[1:], strict=False):
        sel = [
            (s, r)
            for s, r in zip(scores, right, strict=True)
            if lo <= s < hi or (hi == 1.0 and s == 1.0)
        ]
        if sel:
            out.append(
                (
                    lo,
                    hi,
                    len(sel),
                    sum(s for s, _ in sel) / len(sel),
                    sum(r for _, r in sel) / len(sel),
                )
            )
        else:
            out.append((lo, hi, 0, float("nan"), float("nan")))
    return out


def expected_calibration_error(scores: Sequence[float], right: Sequence[bool]) -> float:
    total = len(scores)
    if not total:
        return float("nan")
    return sum(
        n / total * abs(mean_p - acc)
        for _, _, n, mean_p, acc in reliability(scores, right, [i / 10 for i in range(11)])
        if n
    )
