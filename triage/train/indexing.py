"""`models/` index built from the reference cases (`triage index build`), and whether the
shipped one is still fresh. The cases are read by the stages (`triage.train.references`); the
classifier computes their signatures and writes the index.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path

from triage.knowledge import corpus, models_dir
from triage.train.references import default_samples, reference_cases, reference_inputs

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
