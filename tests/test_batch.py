"""`triage batch`: a cluster's daily failures, one JSON line per job, in job order."""

from __future__ import annotations

import json
import shutil
import tarfile
from pathlib import Path

from click.testing import CliRunner

from triage.cli import main

SAMPLES = Path(__file__).resolve().parents[1] / "corpus_samples"


def _jobs(tmp_path: Path) -> Path:
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    shutil.copytree(SAMPLES / "raise_mid_step" / "bundle", jobs / "a_raise")
    shutil.copytree(SAMPLES / "master_port_in_use" / "bundle", jobs / "b_port")
    with tarfile.open(jobs / "c_ddp.tar.gz", "w:gz") as tar:
        tar.add(SAMPLES / "ddp_head_shape_differs" / "bundle", arcname="ddp")
    (jobs / "d_broken.tgz").write_bytes(b"\x1f\x8b\x08 not really gzip")
    (jobs / "notes.txt").write_text("not a job", encoding="utf-8")
    return jobs


def test_batch_writes_one_row_per_job_in_order_with_each_jobs_culprit(tmp_path: Path) -> None:
    out = tmp_path / "results.jsonl"
    result = CliRunner().invoke(
        main, ["batch", str(_jobs(tmp_path)), "-o", str(out), "-j", "2", "--no-embed"]
    )
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [Path(r["job"]).name for r in rows] == [
        "a_raise",
        "b_port",
        "c_ddp.tar.gz",
        "d_broken.tgz",
        "notes.txt",
    ]
    by_name = {Path(r["job"]).name: r for r in rows}
    assert by_name["a_raise"]["diagnosis"]["culprit_ranks"] == [2]
    assert by_name["b_port"]["diagnosis"]["symptoms"][0]["id"] == "S10"
    assert by_name["c_ddp.tar.gz"]["diagnosis"]["culprit_ranks"] == [1]
    # a broken archive is a diagnosed job whose input says what was wrong, not a crash
    broken = by_name["d_broken.tgz"]["diagnosis"]["inputs"]
    assert broken and broken[0]["warnings"]
    # a loose file is no job: its row says so
    assert by_name["notes.txt"]["error"].startswith("not a job, skipped: a plain file")
