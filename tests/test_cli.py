"""The CLI contract of DESIGN.md, as a user meets it."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from fr_samples import fr_entry

from triage.cli import EXIT_NO_EVIDENCE, main

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


def test_explain_dash_reads_the_error_from_stdin() -> None:
    result = CliRunner().invoke(main, ["explain", "--no-embed", "--format", "json", "-"], input=OOM)
    assert result.exit_code == 0, result.output
    diagnosis = _json(result.output)
    assert diagnosis["symptoms"][0]["id"] == "S14"
    assert "CUDA out of memory" in diagnosis["evidence"][0]["text"]


def test_explain_of_a_file_name_reads_that_file_and_says_so(tmp_path: Path) -> None:
    pasted = tmp_path / "error.txt"
    pasted.write_text(OOM, encoding="utf-8")
    result = CliRunner().invoke(main, ["explain", "--no-embed", "--format", "json", str(pasted)])
    assert result.exit_code == 0, result.output
    assert _json(result.stdout)["symptoms"][0]["id"] == "S14"
    assert f"reading the error from {pasted}" in result.stderr
    quiet = CliRunner().invoke(
        main, ["explain", "--no-embed", "--format", "json", "-q", str(pasted)]
    )
    assert quiet.exit_code == 0 and quiet.stderr == ""
    assert _json(quiet.stdout)["symptoms"][0]["id"] == "S14"


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
    # "hello" is no evidence of anything: a code of its own, and the report still comes out
    assert ok.returncode == EXIT_NO_EVIDENCE, ok.stderr
    assert json.loads(ok.stdout)["summary"].startswith("No evidence found")
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


# --------------------------------------------------------------------------- the command line


def test_main_help_lists_the_main_commands_options_and_the_commands() -> None:
    result = CliRunner().invoke(main, ["--help"], prog_name="triage")
    assert result.exit_code == 0
    for option in ("-o, --output", "--format", "--brief", "--no-embed", "--fr-entries", "-q"):
        assert option in result.output, option
    for command in ("explain", "rules", "batch", "index"):
        assert command in result.output
    assert "analyze" not in result.output
    assert f"{EXIT_NO_EVIDENCE} no evidence found" in result.output


def test_a_usage_error_of_the_main_command_names_triage_not_an_internal_command(
    tmp_path: Path,
) -> None:
    (tmp_path / "rank_0.log").write_text(OOM, encoding="utf-8")
    result = CliRunner().invoke(main, [str(tmp_path), "--format", "pdf"], prog_name="triage")
    assert result.exit_code == 2
    assert "Usage: triage [OPTIONS] PATH..." in result.output
    assert "Try 'triage --help'" in result.output
    assert "analyze" not in result.output


def test_output_into_a_missing_folder_is_a_usage_error_before_any_work(tmp_path: Path) -> None:
    (tmp_path / "rank_0.log").write_text(OOM, encoding="utf-8")
    target = tmp_path / "missing" / "dir" / "r.html"
    result = CliRunner().invoke(main, [str(tmp_path), "--no-embed", "-o", str(target)])
    assert result.exit_code == 2, result.output
    assert "does not exist" in result.output and "internal error" not in result.output
    assert not target.exists()


def test_an_unknown_output_suffix_is_a_usage_error_naming_the_formats(tmp_path: Path) -> None:
    (tmp_path / "rank_0.log").write_text(OOM, encoding="utf-8")
    pdf = tmp_path / "report.pdf"
    refused = CliRunner().invoke(main, [str(tmp_path), "--no-embed", "-q", "-o", str(pdf)])
    assert refused.exit_code == 2
    assert ".html, .json, .md or .txt" in refused.output and "--format" in refused.output
    assert not pdf.exists()
    # with --format the name is the user's choice
    chosen = CliRunner().invoke(
        main, [str(tmp_path), "--no-embed", "-q", "-o", str(pdf), "--format", "html"]
    )
    assert chosen.exit_code == 0, chosen.output
    assert pdf.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    text = tmp_path / "report.txt"
    plain = CliRunner().invoke(main, [str(tmp_path), "--no-embed", "-q", "-o", str(text)])
    assert plain.exit_code == 0 and "What to do" in text.read_text(encoding="utf-8")


@pytest.mark.parametrize("layout", ["empty folder", "nothing readable"])
def test_a_folder_without_evidence_says_so_with_its_own_exit_code(
    tmp_path: Path, layout: str
) -> None:
    if layout == "nothing readable":
        (tmp_path / "notes.txt").write_text("we restarted the job on monday\n", encoding="utf-8")
        (tmp_path / "empty.log").write_bytes(b"")
        (tmp_path / "picture.png").write_bytes(bytes(range(256)) * 8)
    result = CliRunner().invoke(main, [str(tmp_path), "--no-embed", "-q"])
    assert result.exit_code == EXIT_NO_EVIDENCE, result.output
    assert "No evidence found" in result.output
    assert "best guess" not in result.output
    # ... and what to collect instead
    assert "every rank's log" in result.output.lower()
    assert "py-spy dump" in result.output
    data = CliRunner().invoke(main, [str(tmp_path), "--no-embed", "-q", "--format", "json"])
    assert data.exit_code == EXIT_NO_EVIDENCE
    assert json.loads(data.output)["symptoms"] == []


def test_brief_is_the_verdict_the_culprit_the_top_fix_and_one_line_of_evidence() -> None:
    bundle = Path(__file__).parent.parent / "corpus_samples/oom_killed_rank_image_cache/bundle"
    result = CliRunner().invoke(main, [str(bundle), "--no-embed", "-q", "--brief"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert len(lines) <= 9, result.output  # four keys, each folded to at most three lines
    keys = [line.split(":", 1)[0] for line in lines if line and not line.startswith(" ")]
    assert keys == ["triage", "culprit", "fix", "evidence"]
    assert lines[0].split(":", 1)[1].strip().startswith("Failed: ")  # the outcome leads
    assert "insufficient host memory" in " ".join(lines[:2])
    assert "rank 1" in result.output and "dmesg" in result.output
    md = CliRunner().invoke(main, [str(bundle), "--no-embed", "-q", "--brief", "--format", "md"])
    assert md.exit_code == 0 and md.output.startswith("**triage:")
    refused = CliRunner().invoke(main, [str(bundle), "--brief", "--format", "json"])
    assert refused.exit_code == 2 and "text or md" in refused.output


def test_the_first_screen_of_the_terminal_report_carries_the_answer() -> None:
    """Verdict, culprit and the top fix come before any detail, within one screen."""
    bundle = Path(__file__).parent.parent / "corpus_samples/oom_killed_rank_image_cache/bundle"
    result = CliRunner().invoke(main, [str(bundle), "--no-embed", "-q"])
    assert result.exit_code == 0, result.output
    screen = "\n".join(result.output.splitlines()[:40])
    assert "caused by insufficient host memory" in screen
    assert "Culprit" in screen and "rank 1 on node11" in screen
    assert "What to do" in screen and "dmesg -T | grep -i" in screen
    assert result.output.index("What to do") < result.output.index("Details")
    assert result.output.index("Details") < result.output.index("Evidence")


def test_explain_shows_a_spinner_on_a_terminal_only(monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from triage.cli import progress

    started: list[str] = []

    class Status:
        def __init__(self, message: str) -> None:
            started.append(message)

        def start(self) -> None: ...

        def stop(self) -> None: ...

    class FakeConsole:
        def __init__(self, **_: object) -> None: ...

        def status(self, message: str, **_: object) -> Status:
            return Status(message)

    monkeypatch.setattr("rich.console.Console", FakeConsole)

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr(sys, "stderr", Tty())
    with progress.Spinner(True, progress.working_on("the error", embeddings=True)):
        pass
    assert started and "diagnosing the error" in started[0]
    monkeypatch.setattr(sys, "stderr", io.StringIO())  # not a terminal: nothing drawn
    started.clear()
    with progress.Spinner(True, "x"):
        pass
    assert started == []


def test_batch_reports_each_job_on_a_terminal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import io

    from triage.cli import progress

    for name in ("job_a", "job_b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "rank_0.log").write_text(OOM, encoding="utf-8")

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    err = Tty()
    monkeypatch.setattr(sys, "stderr", err)
    bar = progress.BatchProgress(2)
    seen: list[str] = []
    with bar:
        printed = bar.bar.console.print

        def keep(item: object, **kw: object) -> None:
            if isinstance(item, str):
                seen.append(item)
            printed(item, **kw)

        monkeypatch.setattr(bar.bar.console, "print", keep)
        bar.row({"job": str(tmp_path / "job_a"), "diagnosis": {"root_causes": []}})
        bar.row({"job": str(tmp_path / "job_b"), "error": "boom"})
    assert seen == ["job_a: no cause named", "job_b: error: boom"]
    assert bar.bar.tasks[0].completed == 2
    # the batch forks its workers later: the bar must not have started a thread of its own
    assert not bar.bar.live.auto_refresh


def test_no_embed_imports_neither_torch_nor_sentence_transformers(tmp_path: Path) -> None:
    (tmp_path / "rank_0.log").write_text(OOM, encoding="utf-8")
    probe = (
        "import sys\n"
        "from triage.cli import main\n"
        "from click.testing import CliRunner\n"
        f"r = CliRunner().invoke(main, [{str(tmp_path)!r}, '--no-embed', '-q', '--brief'])\n"
        "e = CliRunner().invoke(main, ['explain', '--no-embed', '-q', 'CUDA out of memory'])\n"
        "assert r.exit_code == 0 and e.exit_code == 0, (r.output, e.output)\n"
        "heavy = {'torch', 'sentence_transformers', 'transformers', 'sklearn'} & set(sys.modules)\n"
        "print(sorted(heavy))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_quiet_run_does_not_load_the_classifier_before_the_pipeline() -> None:
    # The classifier loads while the workers parse (pipeline.warm_later_stages): the CLI
    # itself imports it up front only to hang a notice on the model load, on a terminal.
    probe = (
        "import sys\n"
        "from triage.cli import progress\n"
        "progress.announce_model_load(True, True)\n"
        "progress.announce_model_load(False, False)\n"
        "print('triage.classify' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.strip() == "False", out.stdout + out.stderr


@pytest.mark.parametrize(("given", "expected"), [(None, "1"), ("3", "3")])
def test_the_cli_keeps_openblas_to_one_thread_unless_told(given: str | None, expected: str) -> None:
    probe = (
        "import os, sys\n"
        "sys.argv = ['triage', '--version']\n"
        "from triage import cli\n"
        "try:\n"
        "    cli.run()\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(os.environ.get('OPENBLAS_NUM_THREADS'))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    if given is not None:
        env["OPENBLAS_NUM_THREADS"] = given
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, env=env
    )
    assert out.stdout.strip().splitlines()[-1] == expected, out.stdout + out.stderr
