"""`triage snapshot` on a real hung job, and what it does when things go wrong.

The main story runs a real 3-rank torchrun job (gloo on CPU) whose rank 2 is stuck loading
data while ranks 0 and 1 wait in an all_reduce, snapshots it, and diagnoses the snapshot.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from torchjobs import JOBS, free_port, job_env, stop, torchrun_argv, wait_for

from triage import pipeline
from triage.ingest import discover, sniff
from triage.model import SourceKind
from triage.snapshot import SnapshotOptions, capture, folder_name, take
from triage.snapshot.procs import find_targets, rank_of

SECRET = "hf_do_not_leak_4242"


def _triage(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "triage", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=job_env(),
    )


@pytest.fixture(scope="module")
def hung_job(tmp_path_factory: pytest.TempPathFactory):
    """A 3-rank torchrun job hanging right now; rank 2 is the straggler."""
    root = tmp_path_factory.mktemp("hung")
    ready = root / "ready"
    ready.mkdir()
    env = job_env(
        {
            "READY_DIR": str(ready),
            "STALL_RANK": "2",
            "TORCH_FR_BUFFER_SIZE": "2000",
            # the job asked for pipe-triggered flight-recorder dumps (see hang_job.py)
            "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": str(root / "fr_pipe_"),
            "TORCH_FR_DUMP_TEMP_FILE": str(root / "fr_rank_"),
            "HF_TOKEN": SECRET,  # must never reach the snapshot
            "TORCH_HUB_TOKEN": SECRET,
        }
    )
    proc = subprocess.Popen(
        torchrun_argv(3, free_port(), str(JOBS / "hang_job.py")),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(ready, 3, timeout=90, proc=proc)
        time.sleep(1.0)  # ranks 0 and 1 enter the all_reduce, rank 2 its sleep
        yield proc
    finally:
        stop(proc)


def test_snapshot_of_a_hung_3_rank_job_names_every_rank_and_analysis_finds_the_stuck_one(
    hung_job: subprocess.Popen[bytes], tmp_path: Path
) -> None:
    out = tmp_path / "snap"
    done = _triage(
        "snapshot", "--pid", str(hung_job.pid), "-o", str(out), "--analyze", "--no-embed"
    )
    assert done.returncode == 0, done.stderr
    for rank in (0, 1, 2):
        assert f"rank {rank} (pid" in done.stderr
    assert "problem:" not in done.stderr, done.stderr
    assert "rank 2" in done.stdout  # the report printed by --analyze

    host_dir = next(out.iterdir())
    assert host_dir.name.startswith("host-")
    for rank in (0, 1, 2):
        names = {p.name for p in (host_dir / f"rank_{rank}").iterdir()}
        assert names >= {"pyspy.txt", "pyspy.json", "env.txt", "fr_dump"}, names

    # ingest reads every file as the right kind and rank
    kinds = {
        (Path(s.path).parent.name, Path(s.path).name): (s.kind, s.rank) for s in discover([out])
    }
    for rank in (0, 1, 2):
        folder = f"rank_{rank}"
        assert kinds[(folder, "pyspy.txt")] == (SourceKind.PYSPY, rank)
        assert kinds[(folder, "pyspy.json")] == (SourceKind.PYSPY, rank)
        assert kinds[(folder, "fr_dump")] == (SourceKind.FLIGHT_RECORDER, rank)
        assert kinds[(folder, "env.txt")] == (SourceKind.ENV_REPORT, rank)
    assert kinds[("node", "node.txt")][0] is SourceKind.TEXT
    hosts = {s.host for s in discover([out])}
    assert hosts == {host_dir.name.removeprefix("host-")}

    diagnosis = pipeline.diagnose([str(out)], pipeline.Options(use_embeddings=False))
    assert diagnosis.culprit_ranks == (2,)
    assert diagnosis.hang is not None and diagnosis.hang.lagging_ranks == (2,)

    for path in out.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path
    env_text = (host_dir / "rank_1" / "env.txt").read_text()
    assert "export RANK=1" in env_text and "TORCH_FR_DUMP_TEMP_FILE" in env_text


def test_snapshots_of_single_ranks_read_together_as_one_job(
    hung_job: subprocess.Popen[bytes], tmp_path: Path
) -> None:
    # as when each node is snapshot on its own: three folders, passed together
    ranks = find_targets(hung_job.pid).targets
    assert [t.rank for t in ranks] == [0, 1, 2]
    folders = []
    for t in ranks:
        result = take(SnapshotOptions(out_dir=str(tmp_path / f"node{t.rank}"), pid=t.pid))
        assert [r.target.rank for r in result.ranks] == [t.rank]
        folders.append(str(tmp_path / f"node{t.rank}"))
    diagnosis = pipeline.diagnose(folders, pipeline.Options(use_embeddings=False))
    assert diagnosis.culprit_ranks == (2,)


def test_a_process_without_a_rank_is_not_a_training_process(tmp_path: Path) -> None:
    plain = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        done = _triage("snapshot", "--pid", str(plain.pid), "-o", str(tmp_path / "s"))
    finally:
        plain.kill()
        plain.wait()
    assert done.returncode == 3
    assert "no training process found" in done.stderr
    assert not (tmp_path / "s").exists()  # nothing captured, nothing written


def test_bad_arguments_are_usage_errors(tmp_path: Path) -> None:
    both = _triage("snapshot", "--pid", "1", "--all", "-o", str(tmp_path / "a"))
    assert both.returncode == 2 and "not both" in both.stderr
    gone = _triage("snapshot", "--pid", "999999999", "-o", str(tmp_path / "b"))
    assert gone.returncode == 2 and "no process with pid" in gone.stderr
    assert "Traceback" not in both.stderr + gone.stderr


def test_py_spy_on_a_process_that_exited_says_so() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    got = capture.pyspy_dump(
        capture.find_pyspy(), proc.pid, Path("unused"), as_json=False, native=False, timeout=10
    )
    assert got.files == []
    assert got.problems == [f"pid {proc.pid} exited during the snapshot (no stack captured)"]


def test_py_spy_without_ptrace_rights_says_how_to_grant_them(tmp_path: Path) -> None:
    pyspy = capture.find_pyspy()
    if os.geteuid() != 0 or pyspy is None:
        pytest.skip("needs root to run py-spy as another user")
    target = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        # py-spy run as `nobody` against a root process: the kernel refuses ptrace
        denied = subprocess.run(
            [pyspy, "dump", "--pid", str(target.pid)],
            capture_output=True,
            text=True,
            timeout=30,
            user=65534,
        )
        message = capture.pyspy_problem(target.pid, denied.stderr + denied.stdout)
    finally:
        target.kill()
        target.wait()
    assert denied.returncode != 0
    assert "ptrace permission denied" in message and "SYS_PTRACE" in message


def test_a_py_spy_that_hangs_is_cut_off_by_the_timeout(tmp_path: Path) -> None:
    stuck = tmp_path / "py-spy"
    stuck.write_text("#!/bin/sh\nsleep 30\n")
    stuck.chmod(0o755)
    started = time.monotonic()
    got = capture.pyspy_dump(
        str(stuck), os.getpid(), tmp_path / "out.txt", as_json=False, native=False, timeout=1
    )
    assert time.monotonic() - started < 10
    assert got.files == [] and "did not finish within 1 s" in got.problems[0]


def test_dump_files_of_rank_1_are_not_those_of_rank_12(tmp_path: Path) -> None:
    for name in ("fr_rank_1", "fr_rank_1.json", "fr_rank_12", "fr_rank_10.json", "other"):
        (tmp_path / name).write_bytes(b"x")
    found = capture._dump_files(tmp_path / "fr_rank_", 1)
    assert [p.name for p in found] == ["fr_rank_1", "fr_rank_1.json"]


def test_flight_recorder_prefixes_follow_the_jobs_variables() -> None:
    assert capture.fr_prefixes({"TORCH_FR_DUMP_TEMP_FILE": "/d/fr_"}) == ["/d/fr_"]
    assert capture.fr_prefixes({"TORCH_NCCL_DEBUG_INFO_TEMP_FILE": "/d/old_"}) == ["/d/old_"]
    assert capture.fr_prefixes({"HOME": "/home/u"}) == [
        "/home/u/.cache/torch/comm_lib_trace_rank_",
        "/tmp/nccl_trace_rank_",
    ]


def test_environment_allow_list_keeps_distributed_settings_and_drops_secrets() -> None:
    kept = capture.allowed_env(
        {
            "RANK": "3",
            "MASTER_ADDR": "node01",
            "NCCL_SOCKET_IFNAME": "eth0",
            "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
            "TORCH_HUB_TOKEN": SECRET,
            "NCCL_IB_PASSWORD": SECRET,
            "AWS_SECRET_ACCESS_KEY": SECRET,
            "HOME": "/root",
        }
    )
    assert kept == {
        "MASTER_ADDR": "node01",
        "NCCL_SOCKET_IFNAME": "eth0",
        "RANK": "3",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
    }


def test_rank_comes_from_the_launchers_variables() -> None:
    assert rank_of({"RANK": "5", "LOCAL_RANK": "1", "WORLD_SIZE": "8"}) == (5, 1, 8)
    assert rank_of({"LOCAL_RANK": "2", "GROUP_RANK": "1", "LOCAL_WORLD_SIZE": "4"}) == (6, 2, None)
    assert rank_of({"LOCAL_RANK": "1"}) == (None, 1, None)  # a local rank alone is no rank
    assert rank_of({"LOCAL_RANK": "1", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"}) == (1, 1, 2)


def _fake_proc(root: Path, pid: int, ppid: int, argv: list[str], env: dict[str, str]) -> None:
    d = root / str(pid)
    d.mkdir()
    name = Path(argv[0]).name[:15]
    (d / "stat").write_text(f"{pid} ({name}) S {ppid} 0 0 0")
    (d / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    (d / "environ").write_bytes(b"\0".join(f"{k}={v}".encode() for k, v in env.items()) + b"\0")


def test_of_a_rank_and_its_children_only_the_outer_python_process_is_the_rank(
    tmp_path: Path,
) -> None:
    # a /proc tree as a launcher leaves it: torchrun, a bash wrapper for rank 0, workers
    run = {"TORCHELASTIC_RUN_ID": "r1", "WORLD_SIZE": "2"}
    _fake_proc(tmp_path, 10, 1, ["/venv/bin/python3", "/venv/bin/torchrun", "train.py"], {})
    _fake_proc(tmp_path, 11, 10, ["/bin/bash", "-c", "python train.py"], {**run, "RANK": "0"})
    _fake_proc(tmp_path, 12, 11, ["/venv/bin/python3", "train.py"], {**run, "RANK": "0"})
    _fake_proc(tmp_path, 13, 12, ["/venv/bin/python3", "-c", "worker"], {**run, "RANK": "0"})
    _fake_proc(tmp_path, 14, 10, ["/venv/bin/python3", "train.py"], {**run, "RANK": "1"})
    _fake_proc(tmp_path, 20, 1, ["/venv/bin/python3", "other.py"], {})
    found = find_targets(10, root=tmp_path)
    assert [(t.pid, t.rank) for t in found.targets] == [(12, 0), (14, 1)]
    everywhere = find_targets(None, root=tmp_path)
    assert [(t.pid, t.rank) for t in everywhere.targets] == [(12, 0), (14, 1)]


def test_snapshot_files_are_sniffed_as_the_kinds_they_are(tmp_path: Path) -> None:
    from triage.snapshot.procs import Target

    env = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2", "MASTER_PORT": "29500"}
    target = Target(pid=1, rank=0, local_rank=0, world_size=2, argv=("python",), env=env)
    capture.write_env(target, tmp_path / "env.txt")
    assert sniff((tmp_path / "env.txt").read_bytes()).kind is SourceKind.ENV_REPORT
    capture.node_facts(tmp_path, "node07", [target], timeout=10)
    assert sniff((tmp_path / "node.txt").read_bytes()).kind is SourceKind.TEXT
    assert folder_name("gpu node:7") == "host-gpu-node-7"


@pytest.mark.skipif(shutil.which("py-spy") is None and capture.find_pyspy() is None, reason="")
def test_find_pyspy_finds_the_one_beside_python() -> None:
    assert capture.find_pyspy() is not None


def _target(pid: int, rank: int | None, launcher: int | None, **env: str):
    from triage.snapshot.procs import Target

    return Target(pid, rank, rank, 2, ("python",), {"RANK": str(rank), **env}, launcher)


def test_two_jobs_on_one_node_get_a_folder_each() -> None:
    from triage.snapshot import rank_folders

    one_job = [_target(11, 0, 10), _target(12, 1, 10)]
    assert rank_folders(one_job) == ["rank_0", "rank_1"]
    two_jobs = [_target(11, 0, 10), _target(21, 0, 20), _target(22, None, 20)]
    assert rank_folders(two_jobs) == ["job-10/rank_0", "job-20/rank_0", "job-20/process-pid22"]


def test_a_dump_pipe_without_reader_or_missing_is_reported_not_waited_on(tmp_path: Path) -> None:
    stem = str(tmp_path / "fr_pipe_")
    os.mkfifo(f"{stem}0.pipe")  # the job made it, but nothing reads it any more
    target = _target(os.getpid(), 0, None, TORCH_NCCL_DEBUG_INFO_PIPE_FILE=stem)
    started = time.monotonic()
    when, problem = capture.trigger_fr_pipe(target, timeout=0.5)
    assert time.monotonic() - started < 5
    assert when is None and problem is not None and "has no reader" in problem
    other = _target(os.getpid(), 1, None, TORCH_NCCL_DEBUG_INFO_PIPE_FILE=stem)
    when, problem = capture.trigger_fr_pipe(other, timeout=0.5)
    assert problem is not None and "only for NCCL process groups" in problem
