"""`models/` built from the reference cases, each read by the pipeline's own stages.

A reference case's evidence is read exactly as a user's input is: a corpus case as
`triage explain` reads a paste, a `corpus_samples` bundle as `triage DIR` reads a folder
(ingest, parse, correlate; never its `expected.json` or story). The cases are handed, already
parsed and correlated, to the classifier, which only computes signatures and writes the index:
classify never reads a source itself.

This is the one module of `triage.knowledge` that runs the pipeline; nothing in the package
imports it (`triage index build` and the tests do).
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import triage
from triage.knowledge import corpus, models_dir
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


# Fields of a bundle's truth file that the index does not read: the hand-written first action
# a report must give (tests/test_first_action.py) is no relabel and no reason to rebuild.
_NOT_INDEXED = ("first_action",)


def samples_hash(root: Path) -> str:
    """Hash of every bundle's truth file: a new, removed or relabeled bundle changes it."""
    digest = hashlib.sha256()
    for exp_path in sorted(root.glob("*/expected.json")):
        digest.update(exp_path.parent.name.encode() + b"\0" + _indexed_truth(exp_path))
    return digest.hexdigest()


def _indexed_truth(path: Path) -> bytes:
    """The truth file as make.py writes it, without the fields the index does not read."""
    raw = path.read_bytes()
    try:
        truth = json.loads(raw)
    except ValueError:
        return raw
    if not isinstance(truth, dict) or not any(k in truth for k in _NOT_INDEXED):
        return raw
    kept = {k: v for k, v in truth.items() if k not in _NOT_INDEXED}
    return (json.dumps(kept, indent=2) + "\n").encode("utf-8")


def file_hash(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _inputs(case_paths: Sequence[Path], samples: Path) -> dict[str, str]:
    from triage.classify.embedding import STATIC_FILE

    inputs = {path.name: file_hash(path) for path in case_paths}
    static = models_dir() / STATIC_FILE
    if static.exists():  # the index holds its reference cases embedded with this model
        inputs[STATIC_FILE] = file_hash(static)
    if samples.is_dir():
        inputs["corpus_samples"] = samples_hash(samples)
    return inputs


def _case_paths(cases_paths: Sequence[str | os.PathLike[str]] | None) -> list[Path]:
    if cases_paths is None:
        return corpus.reference_files()
    paths = [Path(p) for p in cases_paths]
    held_out = (
        {p.resolve() for p in corpus.held_out_files()} if corpus.corpus_dir().is_dir() else set()
    )
    leaked = [p for p in paths if p.resolve() in held_out]
    if leaked:
        # the switch that keeps held-out cases out of every index and calibration
        raise ValueError(f"{leaked[0]} is a held-out case file: it is never indexed")
    return paths


def build_index(
    out_dir: str | os.PathLike[str] | None = None,
    cases_paths: Sequence[str | os.PathLike[str]] | None = None,
    samples_dir: str | os.PathLike[str] | None = None,
    limit: int | None = None,
) -> Path:
    """Build the index into `out_dir` (default models/) from the reference case files
    (default: the `use: reference` files of models/corpus/manifest.yaml) and the
    corpus_samples bundles (default corpus_samples/; pass a missing path to leave them out).
    `limit` keeps the first N cases of each file. Returns the folder."""
    from triage.classify import neighbours

    out = Path(out_dir) if out_dir is not None else models_dir()
    paths = _case_paths(cases_paths)
    samples = Path(samples_dir) if samples_dir is not None else default_samples()
    cases = reference_cases(reference_inputs(paths, samples, limit))
    return neighbours.write_index(cases, out, _inputs(paths, samples), limit)


def stale_reasons(
    directory: str | os.PathLike[str] | None = None,
    cases_paths: Sequence[str | os.PathLike[str]] | None = None,
    samples_dir: str | os.PathLike[str] | None = None,
) -> list[str]:
    """Why the index no longer matches its inputs (empty when fresh): a cases file or a
    bundle's truth changed, the signature code changed, or a case's signature now reads
    differently (the parsers, correlate or the masks changed)."""
    from triage.classify.signature import SIGNATURE_VERSION

    root = Path(directory) if directory is not None else models_dir()
    paths = _case_paths(cases_paths)
    samples = Path(samples_dir) if samples_dir is not None else default_samples()
    try:
        manifest = json.loads((root / "manifest.json").read_text(encoding="utf-8"))
        stored = [
            json.loads(line)
            for line in (root / "index.jsonl").read_text(encoding="utf-8").splitlines()
            if line.strip()
        ]
    except (OSError, json.JSONDecodeError) as exc:
        return [f"no index: {exc}"]
    reasons = []
    if manifest.get("signature_version") != SIGNATURE_VERSION:
        reasons.append("signature version changed")
    recorded = manifest.get("inputs", {})
    current = _inputs(paths, samples)
    for name in sorted(set(recorded) | set(current)):
        if recorded.get(name) != current.get(name):
            reasons.append(
                f"{name} changed" if name != "corpus_samples" else "corpus_samples bundles changed"
            )
    if reasons:
        return reasons
    fresh = {
        c.id: (c.signature_sha, c.evidence_sha)
        for c in reference_cases(reference_inputs(paths, samples, manifest.get("limit")))
    }
    changed = [
        r["id"]
        for r in stored
        if fresh.get(r["id"]) != (r.get("signature_sha"), r.get("evidence_sha"))
    ]
    if changed:
        reasons.append(f"{len(changed)} cases read differently now (e.g. {changed[0]})")
    return reasons
