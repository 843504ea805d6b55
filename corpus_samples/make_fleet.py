"""Make a fleet of real torchrun jobs for `triage fleet`: many runs, some hosts, one bad host.

Every job is a real multi-node run of `jobs/fleet_train.py` (gloo on CPU): one torchrun agent
per simulated host (`--nnodes`, static rendezvous on 127.0.0.1), each agent's console and
`--log-dir` tree kept under the host's own folder, as a scheduler's per-node epilog would
collect them. What becomes of each run is drawn from a seeded plan:

- when the bad host takes part, one of its ranks hits a simulated GPU fault in a minority of
  its jobs (`--bad-rate`): an illegal memory access (Xid 13) or an uncorrectable ECC error
  (Xid 48), the kernel line written to that host's `dmesg.txt`;
- otherwise a software bug on a random rank (a KeyError in collate, a width mismatch), a stop
  on purpose (SIGTERM to every agent, as `scancel` does), or a healthy run.

The truth goes beside the fleet, never inside it (triage must not read it):
`<out>/jobs/<job>/...` and `<out>/truth.json`.

    python corpus_samples/make_fleet.py --out /tmp/fleet --jobs 48 --hosts 6
    python corpus_samples/make_fleet.py --out /tmp/fleet --jobs 8 --first 48   # more jobs later
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make import (  # noqa: E402
    JOBS,
    TORCHRUN,
    _copy_text,
    _free_port,
    _scrubber,
    _wait_for,
    clean_env,
)

SCRIPT = "fleet_train.py"
HARDWARE = ("illegal", "ecc")
SOFTWARE = ("keyerror", "valueerror")
STEPS = 8


@dataclass(frozen=True)
class PlannedJob:
    """One run of the fleet and its truth."""

    name: str
    hosts: tuple[str, ...]  # node_rank -> host (one rank per host)
    fate: str  # healthy | stopped | one of HARDWARE or SOFTWARE
    culprit_rank: int | None
    culprit_host: str | None
    step: int


def plan(
    count: int, hosts: list[str], bad: str, bad_rate: float, first: int, seed: int
) -> list[PlannedJob]:
    """What each job will be; the same seed gives the same fleet."""
    rng = random.Random(seed * 1_000_003 + first)
    jobs: list[PlannedJob] = []
    for n in range(first, first + count):
        chosen = tuple(rng.sample(hosts, 3))
        step = rng.randrange(2, STEPS - 2)
        roll = rng.random()
        if bad in chosen and rng.random() < bad_rate:
            fate, culprit = rng.choice(HARDWARE), chosen.index(bad)
        elif roll < 0.22:
            fate, culprit = rng.choice(SOFTWARE), rng.randrange(len(chosen))
        elif roll < 0.34:
            fate, culprit = "stopped", None
        else:
            fate, culprit = "healthy", None
        jobs.append(
            PlannedJob(
                name=f"job-{n:05d}",
                hosts=chosen,
                fate=fate,
                culprit_rank=culprit,
                culprit_host=None if culprit is None else chosen[culprit],
                step=step,
            )
        )
    return jobs


def run_job(job: PlannedJob, jobs_root: Path, wall_s: float = 90.0) -> None:
    """Run one planned job with one torchrun agent per host; write its bundle."""
    run_root = Path(tempfile.mkdtemp(prefix=f"fleet-{job.name}-"))
    workspace = run_root / "workspace"
    shutil.copytree(JOBS, workspace, ignore=shutil.ignore_patterns("__pycache__"))
    port = _free_port()
    agents: list[tuple[str, subprocess.Popen[bytes], Path]] = []
    for node_rank, host in enumerate(job.hosts):
        console = run_root / "console" / f"{host}.log"
        console.parent.mkdir(parents=True, exist_ok=True)
        env = clean_env()
        env.update(
            PYTHONUNBUFFERED="1",
            CORPUS_HOST=host,
            FLEET_KERNEL_LOG=str(run_root / "kernel" / f"{host}.log"),
            FLEET_STEP_S="0.3" if job.fate == "stopped" else "0.02",
            # torchrun's agent at INFO, as many clusters run it: it says when a worker group
            # finished, failed or was told to stop
            LOGLEVEL="INFO",
        )
        (run_root / "kernel").mkdir(exist_ok=True)
        if job.culprit_rank is not None:
            env["FLEET_FAULT"] = f"{job.fate}:{job.culprit_rank}:{job.step}"
        cmd = [
            str(TORCHRUN),
            f"--nnodes={len(job.hosts)}",
            "--nproc-per-node=1",
            f"--node-rank={node_rank}",
            "--master-addr=127.0.0.1",
            f"--master-port={port}",
            "--tee=3",
            f"--log-dir={run_root / 'logs' / host}",
            SCRIPT,
            f"--steps={STEPS}",
        ]
        with console.open("wb") as fh:
            proc = subprocess.Popen(
                cmd, cwd=workspace, env=env, stdout=fh, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        agents.append((host, proc, console))
    deadline = time.time() + wall_s
    if job.fate == "stopped" and _wait_for(
        rf"step {job.step} loss", [c for _, _, c in agents], deadline
    ):
        for _, proc, _ in agents:  # scancel: SIGTERM to every node's launcher
            os.kill(proc.pid, signal.SIGTERM)
    for _, proc, _ in agents:
        try:
            proc.wait(timeout=max(1.0, deadline - time.time()))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    bundle = jobs_root / job.name
    if bundle.exists():
        shutil.rmtree(bundle)
    try:
        for host, _, console in agents:
            scrub = _scrubber(run_root, host, {f"logs/{host}": f"/workspace/{host}/logs"})
            _copy_text(console, bundle / host / "console.log", scrub)
            logs = run_root / "logs" / host
            for f in sorted(p for p in logs.rglob("*") if p.is_file()):
                _copy_text(f, bundle / host / "logs" / f.relative_to(logs), scrub)
            kernel = run_root / "kernel" / f"{host}.log"
            if kernel.exists():
                _copy_text(kernel, bundle / host / "dmesg.txt", scrub)
    finally:
        shutil.rmtree(run_root, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--jobs", type=int, default=48)
    ap.add_argument("--first", type=int, default=0, help="number of the first job (add later)")
    ap.add_argument("--hosts", type=int, default=6)
    ap.add_argument("--bad", default="gpu-node05")
    ap.add_argument("--bad-rate", type=float, default=0.45)
    ap.add_argument("--seed", type=int, default=25)
    args = ap.parse_args(argv)
    hosts = [f"gpu-node{i:02d}" for i in range(1, args.hosts + 1)]
    jobs = plan(args.jobs, hosts, args.bad, args.bad_rate, args.first, args.seed)
    jobs_root = args.out / "jobs"
    jobs_root.mkdir(parents=True, exist_ok=True)
    truth_path = args.out / "truth.json"
    truth = json.loads(truth_path.read_text()) if truth_path.exists() else {"jobs": {}}
    truth.update(bad_host=args.bad, hosts=hosts, seed=args.seed, bad_rate=args.bad_rate)
    for job in jobs:
        t0 = time.time()
        run_job(job, jobs_root)
        truth["jobs"][job.name] = asdict(job)
        truth_path.write_text(json.dumps(truth, indent=1, sort_keys=True) + "\n")
        print(f"{job.name} {job.fate:10} {','.join(job.hosts)} {time.time() - t0:.0f}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
