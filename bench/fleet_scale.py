"""Jobs per second of `triage fleet` over 10,000 small jobs: a real Dask LocalCluster and the
local process pool, in the same run, on the same jobs.

    python bench/fleet_scale.py [--jobs 10000] [--workers 2] [--local-jobs N]

The jobs are the shipped test fleet's real torchrun jobs (tests/fixtures/fleet: 3 ranks on
3 of 6 hosts, healthy, stopped and failing runs), copied until there are `--jobs` of them,
each copy on its own host names (`gpu-node01` of copy 7 becomes `gpu-node0043`), so every job
has its own content digest and the fleet spans hundreds of hosts. Each figure is one full
`run_fleet` into a fresh SQLite file: content digests, the per-job diagnosis (`--no-embed`),
the rows written to the store, and the aggregation and report over all of them. The Dask
cluster (N worker processes, one thread each) is started and warmed with one job before its
clock runs; the local pool starts inside its clock (as `triage fleet -j N` does). The load
average is printed with the figures: on a shared machine it says what the figures mean.
`--local-jobs` times the local pool on the first N jobs only (default: all).

Needs the `dask` extra (`pip install -e '.[dask]'`).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from triage.batch import wait_for_workers  # noqa: E402
from triage.fleet import run_fleet  # noqa: E402
from triage.fleet.render import render  # noqa: E402
from triage.pipeline import Options  # noqa: E402

OPTIONS = Options(use_embeddings=False, workers=1)
_HOST = re.compile(r"gpu-node(\d\d)(?!\d)")
FLEET = ROOT / "tests" / "fixtures" / "fleet"


def make_fleet(folder: Path, count: int) -> None:
    """`count` jobs: the fixture's jobs again and again, each copy on hosts of its own."""
    bases = sorted(p for part in ("jobs", "new") if (FLEET / part).is_dir()
                   for p in (FLEET / part).iterdir())  # fmt: skip
    texts = {
        base: {
            f.relative_to(base): f.read_text(encoding="utf-8", errors="replace")
            for f in base.rglob("*")
            if f.is_file()
        }
        for base in bases
    }
    for n in range(count):
        copy, base = divmod(n, len(bases))

        def host(text: str, copy: int = copy) -> str:
            # gpu-nodeNN -> gpu-node<copy*6+NN>: six new hosts per copy of the fleet (one pass:
            # a new name never meets the pattern again)
            return _HOST.sub(lambda m: f"gpu-node{copy * 6 + int(m.group(1)):04d}", text)

        job = folder / f"{bases[base].name}-c{copy:04d}"
        for rel, text in texts[bases[base]].items():
            dst = job / host(str(rel))
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.write_text(host(text), encoding="utf-8")


class Shown:
    """Progress on stderr: a line per tenth of the jobs."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.said = -1
        self.started = time.perf_counter()

    def __call__(self, event: str, done: int, total: int, job: str) -> None:
        tenth = done * 10 // max(1, total)
        if event == "job" and tenth != self.said:
            self.said = tenth
            took = time.perf_counter() - self.started
            print(f"  {self.name}: {done}/{total} jobs, {took:.0f} s", file=sys.stderr, flush=True)


def timed_fleet(jobs: Path, db: Path, name: str, **how: object) -> tuple[float, object]:
    started = time.perf_counter()
    report = run_fleet(str(jobs), str(db), OPTIONS, progress=Shown(name), **how)  # type: ignore[arg-type]
    return time.perf_counter() - started, report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--local-jobs", type=int, default=None)
    args = parser.parse_args()

    from distributed import Client, LocalCluster

    with tempfile.TemporaryDirectory(prefix="triage-fleet-bench-") as tmp:
        root = Path(tmp)
        jobs = root / "jobs"
        started = time.perf_counter()
        make_fleet(jobs, args.jobs)
        print(f"{args.jobs} jobs written in {time.perf_counter() - started:.0f} s", flush=True)
        load_before = os.getloadavg()

        with (
            LocalCluster(
                n_workers=args.workers,
                threads_per_worker=1,
                processes=True,
                dashboard_address=None,
                worker_dashboard_address=None,
            ) as cluster,
            Client(cluster) as client,
        ):
            wait_for_workers(client, args.workers)
            warm = root / "warm"
            warm.mkdir()
            shutil.copytree(next(jobs.iterdir()), warm / "one")
            run_fleet(str(warm), str(root / "warm.sqlite"), OPTIONS, dask=client)
            dask_s, report = timed_fleet(jobs, root / "dask.sqlite", "dask", dask=client)
        load_dask = os.getloadavg()

        local_jobs = jobs
        if args.local_jobs is not None and args.local_jobs < args.jobs:
            local_jobs = root / "local_jobs"
            local_jobs.mkdir()
            for job in sorted(jobs.iterdir())[: args.local_jobs]:
                job.rename(local_jobs / job.name)
        n_local = args.local_jobs if local_jobs is not jobs else args.jobs
        local_s, _ = timed_fleet(local_jobs, root / "local.sqlite", "local", workers=args.workers)
        load_local = os.getloadavg()

        html = render(report, "html")  # type: ignore[arg-type]
        flagged = [h.host for h in report.flagged]  # type: ignore[attr-defined]
        print(
            f"\n{os.cpu_count()} cores; load average before {load_before[0]:.1f}, after Dask "
            f"{load_dask[0]:.1f}, after local {load_local[0]:.1f}"
        )
        print(
            f"fleet report: {report.total_jobs} jobs, {len(report.groups)} groups, "  # type: ignore[attr-defined]
            f"{len(report.hosts)} hosts, flagged {len(flagged)}; HTML {len(html) / 1e6:.1f} MB"  # type: ignore[attr-defined]
        )
        print("\n| run | jobs | workers | seconds | jobs/s |")
        print("|---|---:|---:|---:|---:|")
        print(
            f"| Dask LocalCluster ({args.workers} processes x 1 thread) | {args.jobs} | "
            f"{args.workers} | {dask_s:.0f} | {args.jobs / dask_s:.1f} |"
        )
        print(
            f"| local pool (-j {args.workers}) | {n_local} | {args.workers} | {local_s:.0f} | "
            f"{n_local / local_s:.1f} |"
        )


if __name__ == "__main__":
    main()
