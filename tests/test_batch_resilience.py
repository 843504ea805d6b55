"""`triage batch` over many jobs survives what real clusters do to it: a worker killed by the
OOM killer, odd entries in the jobs folder, and jobs spread over a real Dask cluster."""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from triage.batch import diagnose_job, run_batch
from triage.cli import main
from triage.pipeline import Options

SAMPLES = Path(__file__).resolve().parents[1] / "corpus_samples"
OPTIONS = Options(use_embeddings=False)


def _jobs(tmp_path: Path) -> Path:
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    for name in ("raise_mid_step", "master_port_in_use", "oom_killed_rank_image_cache"):
        shutil.copytree(SAMPLES / name / "bundle", jobs / name)
    return jobs


def dies_on_the_oom_job(path: str, options: Options) -> dict:
    """The unit of work, except that the job named like an OOM kills its own worker with
    SIGKILL, as the kernel's OOM killer does (at module level: workers must find it)."""
    if path.endswith("oom_killed_rank_image_cache"):
        os.kill(os.getpid(), signal.SIGKILL)
    return diagnose_job(path, options)


def _rows(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines()]


def test_a_worker_killed_mid_job_costs_only_that_jobs_row(tmp_path: Path) -> None:
    jobs = [str(p) for p in sorted(_jobs(tmp_path).iterdir())]
    out = io.StringIO()
    count = run_batch(jobs, out, OPTIONS, workers=2, unit=dies_on_the_oom_job)
    rows = _rows(out.getvalue())
    assert count == len(rows) == 3
    assert [Path(r["job"]).name for r in rows] == [Path(j).name for j in jobs]  # job order
    by_name = {Path(r["job"]).name: r for r in rows}
    lost = by_name["oom_killed_rank_image_cache"]
    assert "died" in lost["error"] and "SIGKILL" in lost["error"]
    assert by_name["raise_mid_step"]["diagnosis"]["culprit_ranks"] == [2]
    assert by_name["master_port_in_use"]["diagnosis"]["symptoms"][0]["id"] == "S10"


def test_odd_entries_of_the_jobs_folder_get_a_row_saying_why(tmp_path: Path) -> None:
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    shutil.copytree(SAMPLES / "raise_mid_step" / "bundle", jobs / "a_job")
    os.mkfifo(jobs / "b_pipe")
    (jobs / "c_gone").symlink_to(tmp_path / "nowhere")
    (jobs / "d_notes.txt").write_text("loose notes", encoding="utf-8")
    elsewhere = tmp_path / "other_team"
    shutil.copytree(SAMPLES / "raise_mid_step" / "bundle", elsewhere)
    (jobs / "e_link_out").symlink_to(elsewhere)
    out = tmp_path / "rows.jsonl"
    result = CliRunner().invoke(main, ["batch", str(jobs), "-o", str(out), "--no-embed"])
    assert result.exit_code == 0, result.output
    rows = {Path(r["job"]).name: r for r in _rows(out.read_text())}
    assert list(rows) == ["a_job", "b_pipe", "c_gone", "d_notes.txt", "e_link_out"]
    assert "diagnosis" in rows["a_job"]
    assert "named pipe" in rows["b_pipe"]["error"]
    assert "broken symbolic link" in rows["c_gone"]["error"]
    assert "plain file" in rows["d_notes.txt"]["error"]
    assert "outside the jobs folder" in rows["e_link_out"]["error"]
    from triage.batch import job_entries

    entries = job_entries(str(jobs), follow_links=True)
    assert [e.skipped is None for e in entries] == [True, False, False, False, True]


def _on_dask(jobs: list[str], **args: object) -> list[dict]:
    """Rows of `run_batch` on a real Dask LocalCluster of 2 worker processes, run by
    tests/dask_child.py in a process of its own (Dask leaves a thread in its process)."""
    pytest.importorskip("distributed")
    child = Path(__file__).resolve().parent / "dask_child.py"
    done = subprocess.run(
        [sys.executable, str(child), json.dumps({"jobs": jobs, "workers": 2, **args})],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return _rows(done.stdout)


def test_a_dask_cluster_gives_the_rows_a_local_run_gives(tmp_path: Path) -> None:
    jobs = [str(p) for p in sorted(_jobs(tmp_path).iterdir())]
    local = io.StringIO()
    run_batch(jobs, local, OPTIONS, workers=2)
    remote = _on_dask(jobs)
    assert len(remote) == 3
    key = lambda row: row["job"]  # noqa: E731 - rows arrive in completion order
    assert sorted(remote, key=key) == sorted(_rows(local.getvalue()), key=key)


@pytest.mark.slow  # worker processes die and restart twice: ~10 s; the local pool's is above
def test_a_dask_job_whose_worker_dies_is_retried_then_reported(tmp_path: Path) -> None:
    jobs = [str(p) for p in sorted(_jobs(tmp_path).iterdir())]
    # The scheduler gives up on a task after its first lost worker (default: 3 of them).
    remote = _on_dask(jobs, allowed_failures=0, unit="dies_on_the_oom_job")
    rows = {Path(r["job"]).name: r for r in remote}
    assert "died" in rows["oom_killed_rank_image_cache"]["error"]
    assert "submitted 2 times" in rows["oom_killed_rank_image_cache"]["error"]
    assert rows["raise_mid_step"]["diagnosis"]["culprit_ranks"] == [2]
    assert rows["master_port_in_use"]["diagnosis"]["symptoms"][0]["id"] == "S10"


@pytest.mark.slow
def test_a_ray_cluster_gives_the_rows_a_local_run_gives(tmp_path: Path) -> None:
    ray = pytest.importorskip("ray")
    jobs = [str(p) for p in sorted(_jobs(tmp_path).iterdir())]
    local = io.StringIO()
    run_batch(jobs, local, OPTIONS, workers=2)
    _ray_init(ray)
    try:
        remote = io.StringIO()
        assert run_batch(jobs, remote, OPTIONS, ray="auto") == 3
    finally:
        ray.shutdown()
    key = lambda row: row["job"]  # noqa: E731
    assert sorted(_rows(remote.getvalue()), key=key) == sorted(_rows(local.getvalue()), key=key)


@pytest.mark.slow
def test_a_ray_job_whose_worker_dies_is_retried_then_reported(tmp_path: Path) -> None:
    ray = pytest.importorskip("ray")
    jobs = [str(p) for p in sorted(_jobs(tmp_path).iterdir())]
    _ray_init(ray)
    try:
        out = io.StringIO()
        run_batch(jobs, out, OPTIONS, ray="auto", unit=dies_on_the_oom_job)
    finally:
        ray.shutdown()
    rows = {Path(r["job"]).name: r for r in _rows(out.getvalue())}
    assert "died" in rows["oom_killed_rank_image_cache"]["error"]
    assert rows["raise_mid_step"]["diagnosis"]["culprit_ranks"] == [2]


def _ray_init(ray) -> None:  # noqa: ANN001 - the ray module
    # Ray's workers import this module to find the unit of work: they need tests/ on the path.
    here = str(Path(__file__).resolve().parent)
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")]))}
    ray.init(
        num_cpus=2, include_dashboard=False, log_to_driver=False, runtime_env={"env_vars": env}
    )
