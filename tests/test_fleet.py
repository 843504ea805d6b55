"""`triage fleet` on a fleet of real torchrun jobs: one bad host among six, a mix of failures,
healthy and stopped runs (tests/fixtures/fleet, made by corpus_samples/make_fleet.py; the truth
is in truth.json beside the jobs, never read by triage)."""

from __future__ import annotations

import json
import shutil
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from triage.cli import main

FLEET = Path(__file__).resolve().parent / "fixtures" / "fleet"
TRUTH = json.loads((FLEET / "truth.json").read_text(encoding="utf-8"))
FIRST = {p.name for p in (FLEET / "jobs").iterdir()}  # the first run's jobs; new/ comes later
HARDWARE = {"illegal", "ecc"}
SOFTWARE = {"keyerror", "valueerror"}


def _fleet(args: list[str]) -> dict[str, Any]:
    result = CliRunner().invoke(main, ["fleet", *args, "--no-embed", "-q", "-j", "2"])
    assert result.exit_code == 0, result.output
    return json.loads(Path(args[args.index("-o") + 1]).read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def first_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("fleet")
    shutil.copytree(FLEET / "jobs", tmp / "jobs")
    db = tmp / "fleet.sqlite"
    report = _fleet([str(tmp / "jobs"), "--db", str(db), "-o", str(tmp / "fleet.json")])
    return db, report


def _fate(job: str) -> str:
    return TRUTH["jobs"][job]["fate"]


def test_the_bad_host_is_flagged_alone_with_the_xid_lines_behind_it(first_run: Any) -> None:
    _, report = first_run
    suspects = report["suspects"]
    assert suspects["flagged"] == [TRUTH["bad_host"]]
    bad = next(h for h in suspects["hosts"] if h["host"] == TRUTH["bad_host"])
    assert bad["adjusted_p"] < suspects["alpha"]
    # the GPU under the bad ranks is named by the kernel's Xid lines, with its signals
    assert bad["gpus"] and any(s["signal"] == "xid" for s in bad["gpus"][0]["signals"])
    quoted = [e["text"] for e in bad["evidence"]]
    assert any("NVRM: Xid" in text for text in quoted)
    # every quoted line comes from a job in which the bad host really faulted
    for e in bad["evidence"]:
        assert _fate(e["job"]) in HARDWARE, e
    # the other hosts took part in as many jobs and are not flagged
    others = [h for h in suspects["hosts"] if h["host"] != TRUTH["bad_host"]]
    assert others and all(not h["flagged"] and not h["signals"] for h in others)


def test_failure_groups_match_the_jobs_known_causes(first_run: Any) -> None:
    _, report = first_run
    fates_by_group = {g["key"]: Counter(_fate(j) for j in g["jobs"]) for g in report["groups"]}
    # each group holds one known cause
    for key, fates in fates_by_group.items():
        assert len(fates) == 1, (key, fates)
    # each known failure cause is one group, and the hardware ones blame the hardware
    groups_of: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for g in report["groups"]:
        (fate,) = {_fate(j) for j in g["jobs"]}
        groups_of[fate].append(g)
    failing = Counter(_fate(j) for j in FIRST if _fate(j) not in {"healthy", "stopped"})
    assert set(groups_of) == set(failing)
    for fate, count in failing.items():
        assert [g["count"] for g in groups_of[fate]] == [count], fate
    for fate in HARDWARE & set(groups_of):
        (group,) = groups_of[fate]
        assert group["root_cause"]["id"] == "R28"
        # the bad host started every job of it (a peer may be named with it now and then)
        assert group["culprit_hosts"][0] == {"host": TRUTH["bad_host"], "jobs": group["count"]}
        assert group["fix"]["id"] == "F5"


def test_healthy_and_stopped_runs_are_counted_not_grouped(first_run: Any) -> None:
    _, report = first_run
    fates = Counter(_fate(j) for j in FIRST)
    assert report["outcomes"].get("succeeded") == fates["healthy"]
    assert report["outcomes"].get("stopped") == fates["stopped"]
    grouped = {j for g in report["groups"] for j in g["jobs"]}
    assert all(_fate(j) not in {"healthy", "stopped"} for j in grouped)
    assert report["total_jobs"] == len(FIRST)


def test_a_second_run_reads_only_the_new_jobs(first_run: Any, tmp_path: Path) -> None:
    db, first = first_run
    # the same jobs, copied elsewhere (other paths, same content), plus new ones
    jobs = tmp_path / "jobs"
    shutil.copytree(FLEET / "jobs", jobs)
    for new in sorted((FLEET / "new").iterdir()):
        shutil.copytree(new, jobs / new.name)
    history = tmp_path / "fleet.sqlite"
    shutil.copy(db, history)
    report = _fleet([str(jobs), "--db", str(history), "-o", str(tmp_path / "again.json")])
    added = len(list((FLEET / "new").iterdir()))
    assert report["run"]["new"] == added
    assert report["run"]["known"] == first["total_jobs"]
    assert report["total_jobs"] == first["total_jobs"] + added
    # a group none of the first jobs had is marked new; one they had is not
    for g in report["groups"]:
        assert g["new"] is not any(j in FIRST for j in g["jobs"]), g["key"]
    # a third run over the same folder reads nothing
    third = _fleet([str(jobs), "--db", str(history), "-o", str(tmp_path / "third.json")])
    assert (third["run"]["new"], third["run"]["known"]) == (0, report["total_jobs"])


def test_the_html_report_names_the_host_to_drain_and_runs_no_script(
    first_run: Any, tmp_path: Path
) -> None:
    db, _ = first_run
    history = tmp_path / "fleet.sqlite"
    shutil.copy(db, history)
    out = tmp_path / "fleet.html"
    jobs = tmp_path / "empty"
    jobs.mkdir()
    result = CliRunner().invoke(
        main, ["fleet", str(jobs), "--db", str(history), "-o", str(out), "-q"]
    )
    assert result.exit_code == 0, result.output
    page = out.read_text(encoding="utf-8")
    assert f"DRAIN</span> {TRUTH['bad_host']}" in page
    assert "script-src" not in page and "<script" not in page
    assert "default-src 'none'" in page
