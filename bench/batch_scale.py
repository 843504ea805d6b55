"""Jobs per second of `triage batch`, locally and on a real Dask cluster of 1, 2, 4 workers.

    python bench/batch_scale.py [--copies 4] [--workers 1 2 4] [--repeat 3]

The jobs are the corpus_samples bundles (real torchrun jobs), each copied `--copies` times
into a temp folder: 18 bundles x 4 = 72 jobs by default, diagnosed with `--no-embed` (the
rules settle them; the embedding model would add its load time per worker process). For
each worker count: the local process pool (`-j N`), and a `distributed.LocalCluster` of N
worker processes with one thread each (started, and warmed with one job, before the clock
runs: what a long-lived cluster costs per job). Median of `--repeat` runs.

Needs the `dask` extra (`pip install -e '.[dask]'`).
"""

from __future__ import annotations

import argparse
import io
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from triage.batch import job_paths, run_batch, wait_for_workers  # noqa: E402
from triage.pipeline import Options  # noqa: E402

OPTIONS = Options(use_embeddings=False)


def make_jobs(folder: Path, copies: int) -> list[str]:
    bundles = sorted(p for p in (ROOT / "corpus_samples").glob("*/bundle") if p.is_dir())
    for n in range(copies):
        for bundle in bundles:
            shutil.copytree(bundle, folder / f"{bundle.parent.name}_{n}")
    return job_paths(str(folder))


def timed(run: object, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        run()  # type: ignore[operator]
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--copies", type=int, default=4)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    from distributed import Client, LocalCluster

    with tempfile.TemporaryDirectory(prefix="triage-batch-bench-") as tmp:
        jobs = make_jobs(Path(tmp), args.copies)
        print(f"{len(jobs)} jobs; median of {args.repeat} runs\n")
        print("| workers | local pool (-j N) | Dask LocalCluster, N processes | cluster start |")
        print("|---|---|---|---|")
        for n in args.workers:
            local = timed(
                lambda n=n: run_batch(jobs, io.StringIO(), OPTIONS, workers=n), args.repeat
            )
            started = time.perf_counter()
            with (
                LocalCluster(
                    n_workers=n,
                    threads_per_worker=1,
                    processes=True,
                    dashboard_address=None,
                    worker_dashboard_address=None,
                ) as cluster,
                Client(cluster) as client,
            ):
                wait_for_workers(client, n)
                run_batch(jobs[:n], io.StringIO(), OPTIONS, dask=client)  # warm every worker
                start_s = time.perf_counter() - started
                dask = timed(
                    lambda client=client: run_batch(jobs, io.StringIO(), OPTIONS, dask=client),
                    args.repeat,
                )
            print(
                f"| {n} | {len(jobs) / local:.1f} jobs/s ({local:.1f} s) "
                f"| {len(jobs) / dask:.1f} jobs/s ({dask:.1f} s) | {start_s:.1f} s |"
            )


if __name__ == "__main__":
    main()
