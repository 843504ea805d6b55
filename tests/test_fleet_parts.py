"""The fleet's parts as a user meets them: its knowledge file, its statistics, its database
refusing what it cannot use, bad bundles as rows, hostile text in the reports."""

from __future__ import annotations

import re
import shutil
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from triage.cli import main
from triage.fleet import StoreError, build_report, run_fleet
from triage.fleet import knowledge as fleet_knowledge
from triage.fleet.model import HostPart, JobRecord, Label, RunInfo, SignalHit
from triage.fleet.render import render
from triage.fleet.store import Store
from triage.fleet.suspects import binomial_tail, holm
from triage.pipeline import Options

FLEET = Path(__file__).resolve().parent / "fixtures" / "fleet"
OPTIONS = Options(use_embeddings=False, workers=1)


# --------------------------------------------------------------------------- knowledge


def test_shipped_fleet_knowledge_loads_and_its_examples_hold() -> None:
    kn = fleet_knowledge.load()  # runs every signal's match / no_match examples
    assert {s.id for s in kn.signals} >= {"xid", "ecc", "nvlink", "ib_link"}
    assert 0 < kn.suspects.alpha < 1
    assert "succeeded" not in kn.failure_outcomes


def _problems_of_shipped_file_with(tmp_path: Path, *edits: tuple[str, str]) -> list[str]:
    """The problems `load` reports for the shipped fleet file with `edits` (old, new) made."""
    text = (fleet_knowledge.default_path()).read_text(encoding="utf-8")
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new)
    broken = tmp_path / "fleet.yaml"
    broken.write_text(text, encoding="utf-8")
    with pytest.raises(fleet_knowledge.FleetKnowledgeError) as caught:
        fleet_knowledge.load(broken)
    return caught.value.problems


def test_a_broken_fleet_file_reports_every_problem_at_once(tmp_path: Path) -> None:
    problems = _problems_of_shipped_file_with(
        tmp_path,
        ("alpha: 0.01", "alpha: 3"),
        ('"NVRM: loading NVIDIA UNIX', '"NVRM: Xid (PCI:0000:3b:00): 79, x NVRM'),
    )
    assert any("suspects.alpha" in p for p in problems)
    assert any("signal xid: no_match example matches" in p for p in problems)


def test_a_flagged_host_group_naming_an_unknown_signal_or_cause_is_refused(tmp_path: Path) -> None:
    problems = _problems_of_shipped_file_with(
        tmp_path,
        ("signals: [ecc, gpu_lost,", "signals: [ecc, cosmic_ray, gpu_lost,"),
        ("root_cause: R28", "root_cause: R99"),
    )
    assert any("flagged_host.signals" in p and "cosmic_ray" in p for p in problems)
    assert any("flagged_host.root_cause" in p and "R99" in p for p in problems)


def test_an_nccl_init_line_names_the_gpu_of_a_rank_that_reports_no_address() -> None:
    kn = fleet_knowledge.load()
    nccl = next(g for g in kn.gpu_names if g.id == "nccl_init")
    for line in nccl.examples_match:
        assert nccl.pattern.search(line)
    from triage.fleet.signals import gpu_from_bus_id, gpu_from_pci

    # NCCL's busId and the kernel's PCI address of one GPU come out the same
    assert gpu_from_bus_id("3b000") == gpu_from_pci("0000:3B:00") == "3b:00"
    assert gpu_from_pci("00000000:5E:00.0") == "5e:00"


# --------------------------------------------------------------------------- statistics


def test_the_binomial_tail_and_holm_give_textbook_values() -> None:
    assert binomial_tail(3, 3, 0.5) == pytest.approx(0.125)
    assert binomial_tail(0, 10, 0.3) == 1.0
    assert binomial_tail(2, 10, 0.1) == pytest.approx(1 - 0.9**10 - 10 * 0.1 * 0.9**9)
    # large n stays finite (log space)
    assert 0.0 < binomial_tail(600, 5000, 0.1) < 1e-3
    # Holm: the smallest p times m, the next times m-1, never below the one before
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])


def _record(name: str, hosts: list[str], culprit: str | None, **kw: object) -> JobRecord:
    fields: dict[str, object] = {
        "job": f"/fleet/{name}",
        "digest": name,
        "outcome": "failed" if culprit else "succeeded",
        "symptom": Label("S18", "Runtime exception") if culprit else None,
        "mechanism": "rule:x" if culprit else "",
        "hosts": tuple(HostPart(h, (i,), h == culprit) for i, h in enumerate(hosts)),
        "culprit_ranks": (hosts.index(culprit),) if culprit else (),
        "job_time": 1_760_000_000.0,
    }
    fields.update(kw)
    return JobRecord(**fields)  # type: ignore[arg-type]


def _report(tmp_path: Path, records: list[JobRecord]) -> object:
    kn = fleet_knowledge.load()
    with Store.open(str(tmp_path / "f.sqlite")) as store:
        run = store.begin_run("/fleet", len(records), 0)
        for r in records:
            store.add(r, run)
        store.commit()
        return build_report(store, RunInfo(run, "/fleet", len(records), len(records), 0, 0), kn)


def test_a_host_that_failed_in_few_jobs_is_listed_not_flagged(tmp_path: Path) -> None:
    # h9 hosted the culprit in both of its two jobs: striking, but two jobs prove nothing
    records = [_record(f"j{i}", ["a", "b", "c"], None) for i in range(30)]
    records += [_record("x1", ["h9", "a"], "h9"), _record("x2", ["h9", "b"], "h9")]
    report = _report(tmp_path, records)
    h9 = next(h for h in report.hosts if h.host == "h9")  # type: ignore[attr-defined]
    assert (h9.jobs, h9.culprit_jobs, h9.p_value, h9.flagged) == (2, 2, None, False)
    assert report.flagged == ()  # type: ignore[attr-defined]


# --------------------------------------------------------------------------- the database


def _one_job(tmp_path: Path) -> Path:
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    first = sorted((FLEET / "jobs").iterdir())[0]
    shutil.copytree(first, jobs / first.name)
    return jobs


def test_a_corrupt_database_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    db = tmp_path / "fleet.sqlite"
    db.write_bytes(b"these bytes were never a database" * 40)
    before = db.read_bytes()
    result = CliRunner().invoke(main, ["fleet", str(_one_job(tmp_path)), "--db", str(db), "-q"])
    assert result.exit_code == 2
    assert "not a readable SQLite database" in result.output
    assert "Traceback" not in result.output
    assert db.read_bytes() == before


def test_another_programs_database_is_refused_untouched(tmp_path: Path) -> None:
    db = tmp_path / "other.sqlite"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE invoices (id INTEGER)")
    before = db.read_bytes()
    with pytest.raises(StoreError, match="another program"):
        run_fleet(str(_one_job(tmp_path)), str(db), OPTIONS)
    assert db.read_bytes() == before


def test_a_database_of_a_newer_triage_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "fleet.sqlite"
    Store.open(str(db)).close()
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE meta SET value = '99' WHERE key = 'version'")
    with pytest.raises(StoreError, match="newer triage"):
        Store.open(str(db))


def test_a_database_another_run_is_writing_is_not_touched(tmp_path: Path) -> None:
    db = tmp_path / "fleet.sqlite"
    Store.open(str(db)).close()
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(StoreError, match="locked by another process"):
            run_fleet(str(_one_job(tmp_path)), str(db), OPTIONS, lock_wait_s=0.2)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    with Store.open(str(db)) as store:
        assert store.runs() == 0 and list(store.jobs()) == []


# --------------------------------------------------------------------------- bad bundles


def test_bundles_that_cannot_be_read_are_rows_with_their_reason(tmp_path: Path) -> None:
    jobs = _one_job(tmp_path)
    (jobs / "job-broken.tgz").write_bytes(b"\x1f\x8b\x08 not really gzip")
    (jobs / "job-notes").mkdir()
    (jobs / "job-notes" / "README").write_text("we will look at this on Monday\n")
    (jobs / "summary.csv").write_text("job,state\n")
    (jobs / "job-gone").symlink_to(tmp_path / "nowhere")
    report = run_fleet(str(jobs), str(tmp_path / "f.sqlite"), OPTIONS)
    why = {u.name: u.error for u in report.unreadable}
    assert set(why) == {"job-broken.tgz", "job-notes", "summary.csv", "job-gone"}
    assert "gzip" in why["job-broken.tgz"]
    assert "log line" in why["job-notes"]
    assert "plain file" in why["summary.csv"]
    assert "broken symbolic link" in why["job-gone"]
    assert report.total_jobs == 1 and report.run.errors == 4
    # the unreadable are tried again next time, the job read is not
    again = run_fleet(str(jobs), str(tmp_path / "f.sqlite"), OPTIONS)
    assert (again.run.new, again.run.known, again.run.errors) == (0, 1, 4)


# --------------------------------------------------------------------------- hostile text


def test_hostile_host_names_and_lines_stay_text_in_every_format(tmp_path: Path) -> None:
    evil = "<script>alert(1)</script>"
    hit = SignalHit(
        "xid", "Xid 79", f"node{evil}", "3b:00", 0, "dmesg.txt", 3, f"NVRM {evil} @team #12"
    )
    records = [
        _record(
            f"j{i}",
            [f"node{evil}", "b"],
            f"node{evil}",
            signals=(hit,),
            first_line=f"RuntimeError: {evil}",
            fix=Label("F5", "Resource and environment adjustment"),
            fix_action=f"drain {evil}",
        )
        for i in range(8)
    ]
    records += [_record(f"k{i}", ["b", "c", "d"], None) for i in range(40)]
    report = _report(tmp_path, records)
    page = render(report, "html")  # type: ignore[arg-type]
    assert evil not in page and "&lt;script&gt;" in page
    md = render(report, "md")  # type: ignore[arg-type]
    # outside code spans (which GitHub shows literally) no tag and no live @mention
    prose = re.sub(r"(`+).+?\1", "", md)
    assert "<script" not in prose and "@team" not in prose
    data = render(report, "json")  # type: ignore[arg-type]
    assert evil in data  # JSON keeps the text as data (escaped by the JSON encoder's quoting)
