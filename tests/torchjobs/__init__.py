"""Small real jobs the tests start with torchrun (gloo on CPU)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

JOBS = Path(__file__).resolve().parent
REPO = JOBS.parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def torchrun_argv(nproc: int, port: int, *entry: str, no_python: bool = False) -> list[str]:
    argv = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc-per-node={nproc}",
        "--master-addr=127.0.0.1",
        f"--master-port={port}",
    ]
    if no_python:
        argv.append("--no-python")
    return [*argv, *entry]


def job_env(extra: Mapping[str, str] = ()) -> dict[str, str]:  # type: ignore[assignment]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NCCL_", "TORCH_"))}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH", "")]))
    env.update(extra)
    return env


def stop(proc: subprocess.Popen[bytes]) -> None:
    """End a torchrun job and its ranks: torchrun starts each rank in a session of its own, so
    a signal to the launcher's process group does not reach them."""
    from triage.snapshot.procs import all_processes, descendants

    ranks = descendants(all_processes(), proc.pid)
    for pid in [proc.pid, *ranks]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    proc.wait(timeout=30)


def wait_for(path: Path, count: int, timeout: float, proc: subprocess.Popen[bytes]) -> None:
    """Until `count` files are in `path` (the ranks' ready markers), the job died, or timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if len(list(path.iterdir())) >= count:
            return
        if proc.poll() is not None:
            raise RuntimeError(f"the job exited early with {proc.returncode}")
        time.sleep(0.2)
    raise TimeoutError(f"only {len(list(path.iterdir()))} of {count} ranks got ready")
