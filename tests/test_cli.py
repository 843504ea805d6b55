"""The CLI contract of DESIGN.md, as a user meets it."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from fr_samples import fr_entry

from triage.cli import main

OOM = (
    "Traceback (most recent call last):\n"
    '  File "/workspace/train.py", line 40, in <module>\n'
    "    loss = model(batch).sum()\n"
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total "
    "capacity of 79.19 GiB of which 1.02 GiB is free. Including non-PyTorch memory, this "
    "process has 78.15 GiB memory in use.\n"
)
SCHEMA_KEYS = {
    "schema", "summary", "symptoms", "root_causes", "stage", "fix_patterns", "first_failure",
    "culprit_ranks", "hang", "evidence", "similar_cases", "inputs",
}  # fmt: skip


def _json(result_output: str) -> dict:
    return json.loads(result_output)


def test_explain_names_cuda_oom_from_a_pasted_traceback() -> None:
    result = CliRunner().invoke(main, ["explain", "--no-embed", "--format", "json", OOM])
    assert result.exit_code == 0, result.output
    diagnosis = _json(result.output)
    assert diagnosis.keys() >= SCHEMA_KEYS
    assert diagnosis["schema"] == "triage.diagnosis/1"
    assert diagnosis["symptoms"][0]["id"] == "S14"
    assert diagnosis["fix_patterns"], "an OOM must come with fixes"


def test_explain_reads_stdin_when_no_text_is_given() -> None:
    result = CliRunner().invoke(main, ["explain", "--no-embed", "--format", "json"], input=OOM)
    assert result.exit_code == 0, result.output
    assert _json(result.output)["symptoms"][0]["id"] == "S14"


def test_explain_jsonl_keeps_order_and_reports_bad_lines() -> None:
    lines = [
        json.dumps({"id": "b", "text": OOM}),
        "this is not json",
        json.dumps({"id": "a", "text": "it just stopped, no idea"}),
    ]
    result = CliRunner().invoke(
        main, ["explain", "--jsonl", "--no-embed"], input="\n".join(lines) + "\n"
    )
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.output.splitlines()]
    assert [r.get("id") for r in rows] == ["b", None, "a"]
    assert rows[0]["diagnosis"]["symptoms"][0]["id"] == "S14"
    assert "error" in rows[1]
    assert rows[2]["diagnosis"]["schema"] == "triage.diagnosis/1"


def test_empty_explain_is_a_usage_error() -> None:
    result = CliRunner().invoke(main, ["explain"], input="")
    assert result.exit_code == 2


def test_missing_path_is_a_usage_error() -> None:
    result = CliRunner().invoke(main, ["/no/such/bundle"])
    assert result.exit_code == 2
    assert "no such file" in result.output


def test_report_format_follows_the_output_suffix(tmp_path: Path) -> None:
    log = tmp_path / "rank_0.log"
    log.write_text(OOM, encoding="utf-8")
    for suffix, probe in ((".html", "<html"), (".json", '"schema"'), (".md", "#")):
        out = tmp_path / f"report{suffix}"
        result = CliRunner().invoke(main, [str(tmp_path), "--no-embed", "-q", "-o", str(out)])
        assert result.exit_code == 0, result.output
        assert probe in out.read_text(encoding="utf-8")


def test_junk_inputs_become_warnings_not_tracebacks(tmp_path: Path) -> None:
    """Binary junk, an empty file and a pickle that would run code: reported, run goes on."""
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):  # the classic pickle exploit
            return (__import__("os").system, (f"touch {marker}",))

    (tmp_path / "nccl_trace_rank_1").write_bytes(pickle.dumps(Evil(), protocol=2))
    (tmp_path / "junk.bin").write_bytes(bytes(range(256)) * 64)
    (tmp_path / "empty.log").write_bytes(b"")
    (tmp_path / "rank_0.log").write_text(OOM, encoding="utf-8")
    result = CliRunner().invoke(main, [str(tmp_path), "--no-embed", "-q", "--format", "json"])
    assert result.exit_code == 0, result.output
    diagnosis = _json(result.output)
    assert not marker.exists(), "an untrusted pickle ran code"
    by_name = {Path(i["path"]).name: i for i in diagnosis["inputs"]}
    assert set(by_name) >= {"nccl_trace_rank_1", "junk.bin", "empty.log", "rank_0.log"}
    for name in ("nccl_trace_rank_1", "junk.bin", "empty.log"):
        assert by_name[name]["warnings"], f"{name} should carry a warning"
    assert diagnosis["symptoms"][0]["id"] == "S14"


def test_console_script_exit_codes(tmp_path: Path) -> None:
    """The installed entry point: 0 on a finished diagnosis, 2 on a usage error."""
    log = tmp_path / "worker-0.log"
    log.write_text("hello\n", encoding="utf-8")
    ok = subprocess.run(
        [sys.executable, "-m", "triage", str(log), "--no-embed", "-q", "--format", "json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["schema"] == "triage.diagnosis/1"
    bad = subprocess.run(
        [sys.executable, "-m", "triage", "--format", "pdf", str(log)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2
    assert "Traceback" not in bad.stderr


@pytest.mark.parametrize("args", [["--help"], ["explain", "--help"], ["rules", "--help"]])
def test_help_is_available(args: list[str]) -> None:
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0
    assert "Usage" in result.output


def test_a_broken_team_rule_folder_is_a_usage_error_naming_the_rule(tmp_path: Path) -> None:
    (tmp_path / "team.yaml").write_text(
        "id: team-broken\ntitle: t\nmatch: {any: ['(unclosed']}\nconcludes: {symptom: {S14: 1}}\n",
        encoding="utf-8",
    )
    for args in (["rules", "list"], ["explain", "x"]):
        result = CliRunner().invoke(main, [*args, "--rules", str(tmp_path)])
        assert result.exit_code == 2, result.output
        assert "team-broken" in result.output


def test_rules_check_quotes_the_matching_line() -> None:
    line = (
        "node08:27106:27302 [0] include/shm.h:48 NCCL WARN Error while creating shared memory"
        " segment nccl-shm-recv-b79-0-3-0 (size 4460544)"
    )
    result = CliRunner().invoke(main, ["rules", "check", line])
    assert result.exit_code == 0, result.output
    assert "shm" in result.output.splitlines()[0]
    assert "nccl-shm-recv-b79-0-3-0" in result.output


def test_fr_entries_chooses_how_much_of_each_dump_the_report_reads(tmp_path: Path) -> None:
    entries = [fr_entry(seq) for seq in range(1, 301)]
    dump = {"version": "2.10", "pg_config": {}, "pg_status": {}, "entries": entries}
    (tmp_path / "nccl_trace_rank_0").write_bytes(pickle.dumps(dump, protocol=2))
    part = CliRunner().invoke(main, [str(tmp_path), "--fr-entries", "5", "--format", "md"])
    assert part.exit_code == 0, part.output
    assert "the last 5 of up to 300 entries each" in part.output
    whole = CliRunner().invoke(main, [str(tmp_path), "--fr-entries", "0", "--format", "md"])
    assert whole.exit_code == 0, whole.output
    assert "read in part" not in whole.output
    bad = CliRunner().invoke(main, [str(tmp_path), "--fr-entries", "-1"])
    assert bad.exit_code == 2 and "--fr-entries" in bad.output
