"""The fleet generator makes real torchrun jobs that triage reads as their planned fates
(slow: four multi-node torchrun runs, ~1-2 minutes)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from triage.fleet import run_fleet
from triage.pipeline import Options

CORPUS = Path(__file__).resolve().parents[1] / "corpus_samples"


@pytest.mark.slow
def test_fresh_torchrun_jobs_land_in_their_planned_groups(tmp_path: Path) -> None:
    sys.path.insert(0, str(CORPUS))
    try:
        from make_fleet import PlannedJob, run_job
    finally:
        sys.path.remove(str(CORPUS))
    hosts = ("gpu-node01", "gpu-node02", "gpu-node03")
    plans = [
        PlannedJob("job-ecc", hosts, "ecc", 1, "gpu-node02", 3),
        PlannedJob("job-key", hosts, "keyerror", 2, "gpu-node03", 3),
        PlannedJob("job-ok", hosts, "healthy", None, None, 3),
        PlannedJob("job-stop", hosts, "stopped", None, None, 3),
    ]
    jobs = tmp_path / "jobs"
    for plan in plans:
        run_job(plan, jobs)
    report = run_fleet(str(jobs), str(tmp_path / "f.sqlite"), Options(use_embeddings=False))
    assert report.total_jobs == 4
    by_job = {j: g for g in report.groups for j in g.jobs}
    assert by_job["job-ecc"].root_cause is not None
    assert by_job["job-ecc"].root_cause.id == "R28"
    assert by_job["job-ecc"].hosts == (("gpu-node02", 1),)
    assert by_job["job-key"].hosts == (("gpu-node03", 1),)
    assert by_job["job-key"] is not by_job["job-ecc"]
    node2 = next(h for h in report.hosts if h.host == "gpu-node02")
    assert {s.signal for s in node2.signals} >= {"xid", "ecc"}
