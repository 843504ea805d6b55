"""The reference cases read by the pipeline's own stages, for the index and the calibration.

A reference case's evidence is read exactly as a user's input is: a corpus case as
`triage explain` reads a paste, a `corpus_samples` bundle as `triage DIR` reads a folder
(ingest, parse, correlate; never its `expected.json` or story). The cases are handed, already
parsed and correlated, to the classifier, which only computes signatures: classify never
reads a source itself.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import triage
from triage.knowledge import corpus
from triage.model import Analysis, ParsedSource

SAMPLES_ENV = "TRIAGE_SAMPLES"
# A bundle's truth and its story: never read as evidence.
BUNDLE_TRUTH_FILES = ("expected.json", "README.md")


@dataclass(frozen=True)
class ReferenceInput:
    """One labeled case, read: its labels (`row`), where it came from, what the stages made."""

    row: Mapping[str, Any]
    origin: str
    parsed: tuple[ParsedSource, ...]
    analysis: Analysis


def default_samples() -> Path:
    """The corpus_samples bundles of a source checkout (`$TRIAGE_SAMPLES` overrides); an
    installed wheel has none, and its index is built from the corpus files alone."""
    env = os.environ.get(SAMPLES_ENV)
    return Path(env) if env else Path(triage.__file__).resolve().parents[1] / "corpus_samples"


def bundle_case_id(bundle: Path) -> str:
    return f"sample:{bundle.name}"


def paste_evidence(text: str, name: str = "<pasted>") -> list[ParsedSource]:
    """A pasted text read as `triage explain` reads it."""
    from triage import parsers

    return [parsers.parse_text(text, name=name)]


def bundle_evidence(bundle: Path) -> list[ParsedSource]:
    """A corpus_samples scenario's evidence as a user's folder: its `bundle/` folder, or (older
    layout) the scenario folder minus its truth files."""
    from triage import pipeline

    if (bundle / "bundle").is_dir():
        return pipeline.read_inputs([str(bundle / "bundle")], workers=1)
    skip = {str(bundle / name) for name in BUNDLE_TRUTH_FILES}
    return [
        ps for ps in pipeline.read_inputs([str(bundle)], workers=1) if ps.source.path not in skip
    ]


def reference_inputs(
    case_paths: Sequence[Path], samples: Path, limit: int | None = None
) -> Iterator[ReferenceInput]:
    """Every reference case read by the stages: the corpus files' cases (the first `limit`
    of each), then the bundles under `samples` (when it is a folder)."""
    from triage.analysis import correlate

    for path in case_paths:
        rows = corpus.read_cases(path)
        for row in rows[:limit] if limit else rows:
            parsed = paste_evidence(row["evidence"])
            yield ReferenceInput(row, path.name, tuple(parsed), correlate(parsed))
    if not samples.is_dir():
        return
    for exp_path in sorted(samples.glob("*/expected.json")):
        try:
            exp = json.loads(exp_path.read_text(encoding="utf-8"))
            parsed = bundle_evidence(exp_path.parent)
            analysis = correlate(parsed)
        except Exception as exc:  # noqa: BLE001 - one bad bundle must not stop the build
            warnings.warn(f"{exp_path.parent}: not indexed ({exc})", stacklevel=2)
            continue
        if not all(k in exp for k in corpus.LABELS):
            continue
        row = {**exp, "id": bundle_case_id(exp_path.parent), "url": None}
        row.pop("evidence", None)
        origin = f"corpus_samples/{exp_path.parent.name}"
        yield ReferenceInput(row, origin, tuple(parsed), analysis)


def reference_cases(inputs: Sequence[ReferenceInput] | Iterator[ReferenceInput]) -> list[Any]:
    """The index rows of read reference cases (a bundle without a signature is left out)."""
    from triage.classify import case_signature, neighbours

    out = []
    for item in inputs:
        sig = case_signature(item.parsed, item.analysis)
        if sig or item.row.get("evidence"):
            digest = neighbours.evidence_digest(item.parsed)
            out.append(neighbours.reference_case(item.row, sig, item.origin, digest))
    return out
