"""The command line's rough edges: each is what a user met, and what they get now.

- `triage bot --dry-run` against an API that does not answer tried every read five times
  (31-35 s); it tries once and says what it could not read.
- Ctrl-C exited 1, the code of an internal failure; it exits 130 and says it was interrupted.
- A missing Dask or Ray install, or `--dask ''`, was an "internal error"; it is a usage error
  that names the extra to install.
- `bench/explain_speed.py` failed with an ImportError.
- `triage rules check DIR` named no file, read a missing path as text, and `rules check ""`
  scanned the current folder.
- `triage <(cat log)` and a FIFO said "No evidence found" without saying why.
- A name the OS refuses (ENAMETOOLONG) for `-o`, `--rules`, a jobs folder or `--event` was an
  internal error; a FIFO as the jobs folder crashed `batch`, and as `--event` or `--config` it
  blocked forever; `-o` under a file said the file "does not exist".
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from bot_samples import FAST_RETRY, SETTINGS, SHM_BODY
from click.testing import CliRunner
from tracker_api import TrackerAPI, github_issue_event

from triage.bot.ci import run_ci
from triage.cli import main

ROOT = Path(__file__).resolve().parent.parent
NAN_BUNDLE = ROOT / "corpus_samples" / "nan_from_one_rank_shard" / "bundle"
REPO = "acme/trainer"


@pytest.fixture
def api() -> Any:
    api = TrackerAPI().start()
    yield api
    api.stop()


def test_a_dry_run_asks_a_failing_api_once_per_read_and_says_what_it_missed(
    api: TrackerAPI, tmp_path: Path
) -> None:
    api.add_github_issue(REPO, 5)
    api.fail("GET", r".*", 503, times=1000, message="upstream unavailable")
    event = tmp_path / "event.json"
    event.write_text(json.dumps(github_issue_event(REPO, 5, SHM_BODY)), encoding="utf-8")
    printed: list[str] = []
    result = run_ci(
        "github",
        str(event),
        api_url=None,
        dry_run=True,
        settings=SETTINGS,
        env={"GITHUB_API_URL": api.github_url, "GITHUB_EVENT_NAME": "issues"},
        echo=printed.append,
        retry=FAST_RETRY,  # four tries for a real run: a dry run must not use them
    )
    assert result.exit_code == 0 and printed  # the comment is still printed
    paths = [r.path for r in api.requests]
    assert len(paths) == len(set(paths)), f"a dry run retried: {paths}"
    assert "not read from the github API" in result.message and "503" in result.message


def _ctrl_c_as_a_terminal_delivers_it() -> None:
    """The child starts with SIGINT at its default and unblocked, as under a shell: a child
    inherits an ignored or blocked SIGINT (something earlier in the full test run leaves the
    test process so), and Python then never raises KeyboardInterrupt."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _wait_until_it_reads_stdin(pid: int, limit: float = 60.0) -> None:
    """Where the user presses Ctrl-C: while `triage explain` waits for the paste. A fixed
    sleep raced a slow import on a loaded machine (the signal landed before the wait)."""
    reading = {"0", "63"}  # read(2) on x86-64 and on arm64
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            call = Path(f"/proc/{pid}/syscall").read_text().split()
        except OSError:
            time.sleep(1.0)  # no /proc: the old fixed wait
            return
        if call and call[0] in reading:
            return
        time.sleep(0.05)


def test_ctrl_c_exits_130_and_says_it_was_interrupted(tmp_path: Path) -> None:
    # `triage explain` waits on stdin; SIGINT is what Ctrl-C sends
    code = "import sys; from triage.cli import run; print('ready', flush=True); run()"
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "explain", "--no-embed", "-q"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        preexec_fn=_ctrl_c_as_a_terminal_delivers_it,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    _wait_until_it_reads_stdin(proc.pid)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted" in err and "internal error" not in err


@pytest.mark.parametrize(
    ("flag", "package", "extra"),
    [("--dask", "distributed", "triage[dask]"), ("--ray", "ray", "triage[ray]")],
)
def test_a_cluster_without_its_package_is_a_usage_error_naming_the_extra(
    flag: str, package: str, extra: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "jobs" / "job1").mkdir(parents=True)
    # None in sys.modules: Python's own way to say an import fails (the package is absent)
    monkeypatch.setitem(sys.modules, package, None)
    out = tmp_path / "rows.jsonl"
    result = CliRunner().invoke(
        main, ["batch", str(tmp_path / "jobs"), "-o", str(out), flag, "tcp://127.0.0.1:1"]
    )
    assert result.exit_code == 2, result.output
    assert extra in result.output and "internal error" not in result.output


@pytest.mark.parametrize("flag", ["--dask", "--ray"])
def test_an_empty_cluster_address_is_a_usage_error(flag: str, tmp_path: Path) -> None:
    (tmp_path / "jobs" / "job1").mkdir(parents=True)
    out = tmp_path / "rows.jsonl"
    result = CliRunner().invoke(main, ["batch", str(tmp_path / "jobs"), "-o", str(out), flag, ""])
    assert result.exit_code == 2, result.output
    assert "address" in result.output and not out.exists()


def test_the_explain_speed_bench_runs_the_stages_it_times() -> None:
    spec = importlib.util.spec_from_file_location(
        "explain_speed", ROOT / "bench" / "explain_speed.py"
    )
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    measured = bench.explain_once(bench.OOM)
    assert measured["symptom"] == "S14" and measured["total_s"] > 0


def test_rules_check_on_a_folder_names_the_file_of_each_hit() -> None:
    result = CliRunner().invoke(main, ["rules", "check", str(NAN_BUNDLE)])
    assert result.exit_code == 0, result.output
    first = result.output.splitlines()[0]
    assert first.startswith("loss-nan-inf:") and "stderr.log:7)" in first


def test_rules_check_refuses_a_missing_path_and_an_empty_argument(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = CliRunner().invoke(main, ["rules", "check", str(tmp_path / "rank3.log")])
    assert missing.exit_code == 2 and "no such file or folder" in missing.output
    # an empty argument is no path: it must not scan the folder it runs in
    (tmp_path / "train.log").write_text("RuntimeError: CUDA out of memory.\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    empty = CliRunner().invoke(main, ["rules", "check", ""])
    assert empty.exit_code == 2 and "nothing to check" in empty.output
    # text is still text
    text = CliRunner().invoke(main, ["rules", "check", "RuntimeError: CUDA out of memory."])
    assert text.exit_code == 0 and "cuda-oom" in text.output


def test_a_pasted_error_given_as_a_path_is_refused_with_the_way() -> None:
    # an error's whole text passed where a path belongs: the OS refuses a name that long, and
    # asking whether it exists raised OSError (ENAMETOOLONG), an internal error
    text = "RuntimeError: CUDA out of memory. " * 200
    result = CliRunner().invoke(main, [text, "--no-embed", "-q"])
    assert result.exit_code == 2, result.output
    assert "no such file or folder" in result.output and "triage explain" in result.output
    assert "internal error" not in result.output


def test_rules_check_reads_a_long_pasted_error_as_text() -> None:
    # a pasted pydantic error runs past the OS's file-name limit: asking whether it is a path
    # raised OSError (ENAMETOOLONG) and the command stopped with an internal error
    lines = [
        "pydantic_core._pydantic_core.ValidationError: 5 validation errors for DeepSpeedBF16Config"
    ]
    for key in ("loss_scale", "initial_scale_power", "loss_scale_window", "hysteresis"):
        lines += [key, "  Extra inputs are not permitted [type=extra_forbidden, input_value=0]"]
    text = "\n".join(lines * 3)
    result = CliRunner().invoke(main, ["rules", "check", text])
    assert result.exit_code == 0, result.output
    assert "ds-bf16-section-refuses-loss-scale-keys" in result.output


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
def test_a_pipe_given_as_a_path_is_refused_with_the_reason_and_the_way(tmp_path: Path) -> None:
    fifo = tmp_path / "job.log"
    os.mkfifo(fifo)
    result = CliRunner().invoke(main, [str(fifo), "--no-embed", "-q", "--brief"])
    assert result.exit_code == 2, result.output
    assert "is a pipe" in result.output and "triage explain" in result.output


# --------------------------------------------------------------------------- paths the OS refuses

_LONG = "x" * 5000  # longer than any file name: the OS answers ENAMETOOLONG


def _refused(args: list[str], *phrases: str) -> str:
    """The command stops with a usage error that says why, in a line a person can read."""
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    assert "internal error" not in result.output and "Traceback" not in result.output
    assert all(p in result.output for p in phrases), result.output
    assert _LONG not in result.output, "the refused name is quoted whole"
    return result.output


@pytest.mark.parametrize(
    "command",
    [
        [str(NAN_BUNDLE), "--no-embed", "-q", "-o"],
        ["explain", "RuntimeError: boom", "--no-embed", "-q", "-o"],
        ["batch", str(NAN_BUNDLE.parent), "--no-embed", "-o"],
        ["fleet", str(NAN_BUNDLE.parent), "--no-embed", "-q", "-o"],
        ["snapshot", "--pid", "1", "-o"],
    ],
    ids=["analyze", "explain", "batch", "fleet", "snapshot"],
)
def test_an_output_name_too_long_is_a_usage_error(command: list[str], tmp_path: Path) -> None:
    suffix = "" if command[0] == "snapshot" else ".json"
    _refused([*command, str(tmp_path / (_LONG + suffix))], "File name too long")


@pytest.mark.parametrize(
    "command",
    [
        [str(NAN_BUNDLE), "--no-embed", "-q", "-o"],
        ["batch", str(NAN_BUNDLE.parent), "--no-embed", "-o"],
        ["fleet", str(NAN_BUNDLE.parent), "--no-embed", "-q", "-o"],
    ],
    ids=["analyze", "batch", "fleet"],
)
def test_an_output_under_a_file_says_it_is_a_file_not_a_missing_folder(
    command: list[str], tmp_path: Path
) -> None:
    # "the folder report.txt does not exist" was said of a file that does exist
    afile = tmp_path / "report.txt"
    afile.write_text("x", encoding="utf-8")
    out = _refused([*command, str(afile / "r.json")], "is a file, not a folder")
    assert "does not exist" not in out


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
@pytest.mark.parametrize(
    ("command", "hint"),
    [
        ([str(NAN_BUNDLE), "--no-embed", "-q", "--rules"], "--rules"),
        (["batch", "-o", "OUT", "--no-embed"], "JOBS_DIR"),
        (["fleet", "--no-embed", "-q"], "JOBS_DIR"),
        (["bot", "github", "--dry-run", "--no-embed", "--event"], "--event"),
        (["serve", "--config"], "--config"),
    ],
    ids=["rules", "batch", "fleet", "bot-event", "serve-config"],
)
def test_a_pipe_where_a_folder_or_file_is_read_is_refused_not_read(
    command: list[str], hint: str, tmp_path: Path
) -> None:
    # a FIFO given as the jobs folder crashed batch (NotADirectoryError); given as the bot's
    # event or serve's config it blocked forever, waiting for a writer
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    command = [str(tmp_path / "out.jsonl") if a == "OUT" else a for a in command]
    args = (
        [*command, str(fifo)]
        if command[-1].startswith("-")
        else [*command[:1], str(fifo), *command[1:]]
    )
    _refused(args, hint, "is a pipe")


@pytest.mark.parametrize(
    "command",
    [
        [str(NAN_BUNDLE), "--no-embed", "-q", "--rules"],
        ["batch", "-o", "OUT", "--no-embed"],
        ["fleet", "--no-embed", "-q"],
        ["bot", "github", "--dry-run", "--no-embed", "--event"],
    ],
    ids=["rules", "batch", "fleet", "bot-event"],
)
def test_an_input_name_too_long_is_a_usage_error(command: list[str], tmp_path: Path) -> None:
    command = [str(tmp_path / "out.jsonl") if a == "OUT" else a for a in command]
    name = str(tmp_path / _LONG)
    args = [*command, name] if command[-1].startswith("-") else [*command[:1], name, *command[1:]]
    _refused(args, "File name too long")
