"""The correlate stage on the real multi-rank bundles of corpus_samples/ (real torchrun jobs).

Every bundle's expected.json says which rank started the failure and whether the job hung; the
analysis must name that rank, and not the one torchrun's "Root Cause" block names when the two
differ.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from triage.analysis import correlate
from triage.ingest import discover
from triage.model import Analysis
from triage.parsers import parse

ROOT = Path(__file__).resolve().parent.parent / "corpus_samples"
BUNDLES = sorted(p.parent for p in ROOT.glob("*/expected.json"))


def analyse(bundle: Path) -> Analysis:
    # the evidence folder only: expected.json and README.md beside it are the answer
    return correlate([parse(s) for s in discover([str(bundle / "bundle")])])


@pytest.mark.parametrize("bundle", BUNDLES, ids=[b.name for b in BUNDLES])
def test_bundle_culprit_and_hang_match_expected(bundle: Path) -> None:
    expected = json.loads((bundle / "expected.json").read_text())
    a = analyse(bundle)
    assert sorted(a.culprit_ranks) == sorted(expected["culprit_ranks"]), [
        f.summary for f in a.findings[:3]
    ]
    detected = bool(a.hang and a.hang.detected)
    assert detected == bool(expected["hang"]), a.hang
    # the report's first failure belongs to a culprit, and the timeline tells the story in order
    if expected["culprit_ranks"]:
        assert a.first_failure is not None and a.first_failure.rank in a.culprit_ranks
    assert any(t.role in ("initiating", "context") for t in a.timeline)
    # every finding carries evidence a person can open: file, line, rank
    assert all(f.evidence for f in a.findings), [f.kind for f in a.findings if not f.evidence]
    if expected.get("world_size") and a.facts.world_size is not None:
        # a job that died before any worker started may not tell its size; if told, it is right
        assert a.facts.world_size == expected["world_size"]


@pytest.mark.parametrize("bundle", BUNDLES, ids=[b.name for b in BUNDLES])
def test_bundle_victims_are_marked_as_cascade_not_as_causes(bundle: Path) -> None:
    expected = json.loads((bundle / "expected.json").read_text())
    a = analyse(bundle)
    culprits = set(expected["culprit_ranks"])
    # no initiating event is ever placed on a rank that merely suffered
    assert {e.rank for e in a.initiating_events if e.rank is not None} <= culprits
    if a.cascade_events:
        cascade = next(f for f in a.findings if f.kind == "cascade")
        assert "consequences" in cascade.summary


def test_hang_bundles_beat_torchruns_root_cause_where_it_is_wrong() -> None:
    wrong = 0
    for bundle in BUNDLES:
        expected = json.loads((bundle / "expected.json").read_text())
        a = analyse(bundle)
        root = a.facts.torchrun_root_cause_rank
        if root is not None and root not in expected["culprit_ranks"]:
            wrong += 1
            assert sorted(a.culprit_ranks) == sorted(expected["culprit_ranks"])
            first = next(f for f in a.findings if f.kind == "first_failure")
            assert f"names rank {root}" in first.summary  # the report says why it disagrees
    if not BUNDLES:
        pytest.skip("no corpus_samples bundles yet")
    # the corpus holds hangs; torchrun blames the first survivor to time out in at least one
    assert wrong >= 1
