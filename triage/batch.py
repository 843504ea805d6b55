"""Many failed jobs at once: `triage batch DIR_OF_JOBS -o results.jsonl`.

The unit of work is `diagnose_job(path, options) -> dict`: a pure function of one job's
folder or archive, returning one JSON-ready row. It is picklable and needs nothing but the
path, so the same function runs on a process pool here, or on a cluster:

    # Ray:  rows = ray.get([ray.remote(diagnose_job).remote(p, opts) for p in job_paths(d)])
    # Dask: rows = client.gather(client.map(diagnose_job, job_paths(d), options=opts))
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, TextIO

from triage.pipeline import Options, diagnose

_ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".zip", ".gz")


def job_paths(jobs_dir: str) -> list[str]:
    """Each sub-folder or archive directly under `jobs_dir` is one job, in name order."""
    root = Path(jobs_dir)
    return [
        str(p)
        for p in sorted(root.iterdir())
        if p.is_dir() or (p.is_file() and p.name.lower().endswith(_ARCHIVE_SUFFIXES))
    ]


def diagnose_job(path: str, options: Options = Options()) -> dict[str, Any]:
    """Diagnose one job; an internal failure becomes an `error` row, never an exception."""
    try:
        return {"job": path, "diagnosis": diagnose([path], options).to_dict()}
    except Exception as exc:  # noqa: BLE001 - one bad job must not stop the batch
        return {"job": path, "error": f"{type(exc).__name__}: {exc}"}


def run_batch(
    jobs: Sequence[str],
    out: TextIO,
    options: Options = Options(),
    workers: int | None = None,
    on_row: Callable[[dict[str, Any]], None] | None = None,
) -> int:
    """Diagnose `jobs` in parallel processes, writing one JSON line per job in job order;
    `on_row` hears of each row as it is written (the CLI's progress)."""
    count = 0
    for row in _rows(jobs, options, workers):
        out.write(json.dumps(row) + "\n")
        out.flush()
        count += 1
        if on_row is not None:
            on_row(row)
    return count


def _rows(jobs: Sequence[str], options: Options, workers: int | None) -> Iterator[dict[str, Any]]:
    if workers == 1 or len(jobs) <= 1:
        yield from (diagnose_job(job, options) for job in jobs)
        return
    with ProcessPoolExecutor(max_workers=workers) as pool:
        yield from pool.map(diagnose_job, jobs, [options] * len(jobs))
