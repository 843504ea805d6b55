"""Many failed jobs at once: `triage batch DIR_OF_JOBS -o results.jsonl`.

The unit of work is `diagnose_job(path, options) -> dict`: a pure function of one job's
folder or archive, returning one JSON-ready row. It is picklable and needs nothing but the
path, so the same function runs on a process pool here, or on a cluster (`--dask ADDRESS`,
`--ray ADDRESS`), where each worker reads the job at that path: a filesystem every worker
mounts.

Every entry of the folder gets a row: a job's diagnosis, an `error` saying why a job could not
be diagnosed (its worker died twice: out of memory, killed), or why an entry is not a job (a
plain file, a named pipe, a broken link, a link out of the folder).

A worker that dies (the OOM killer) takes only its job with it: the jobs it was running are
tried again, and a job whose worker dies a second time is run alone in a process of its own;
if that dies too, the job's row says so. Locally rows come in job order; from a cluster in the
order jobs finish.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import stat
import sys
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any, TextIO

from triage.pipeline import Options, diagnose

Unit = Callable[[str, Options], dict[str, Any]]
Row = dict[str, Any]

_HEAD = 1024  # enough for every archive magic (tar's is at byte 257)


@dataclass(frozen=True)
class Entry:
    """One entry of the jobs folder: a job to diagnose, or why it is not one."""

    path: str
    skipped: str | None = None  # None: a job


def job_entries(jobs_dir: str, *, follow_links: bool = False) -> list[Entry]:
    """Every entry of `jobs_dir`, in name order: sub-folders and archives are jobs; anything
    else (a plain file, a named pipe, a broken link, a link out of the folder unless
    `follow_links`) is listed with the reason it is skipped. Hidden entries are left out."""
    from triage.ingest.archives import container_format, printable_name
    from triage.ingest.walk import file_type

    root = os.path.realpath(jobs_dir)
    out: list[Entry] = []
    for name in sorted(os.listdir(jobs_dir)):
        if name.startswith("."):
            continue
        path = os.path.join(jobs_dir, name)
        why = _link_problem(path, root, follow_links)
        if why is None:
            try:
                st = os.stat(path)
            except OSError as exc:
                why = f"could not be read ({exc.strerror or type(exc).__name__})"
            else:
                if stat.S_ISDIR(st.st_mode):
                    out.append(Entry(path))
                    continue
                if not stat.S_ISREG(st.st_mode):
                    why = f"{file_type(st.st_mode)}, not read"
                else:
                    why = _not_an_archive(path, container_format)
        if why is None:
            out.append(Entry(path))
        else:
            out.append(Entry(path, f"not a job, skipped: {printable_name(why)}"))
    return out


def job_paths(jobs_dir: str) -> list[str]:
    """The jobs of `jobs_dir` (sub-folders and archives), in name order."""
    return [e.path for e in job_entries(jobs_dir) if e.skipped is None]


def _link_problem(path: str, root: str, follow_links: bool) -> str | None:
    if not os.path.islink(path):
        return None
    try:
        real = os.path.realpath(path, strict=True)
    except OSError:
        try:
            target = os.readlink(path)
        except OSError:
            target = "an unreadable target"
        return f"a broken symbolic link (to {target})"
    if follow_links or real == root or real.startswith(root.rstrip(os.sep) + os.sep):
        return None
    return f"a symbolic link to {real}, outside the jobs folder (--follow-links reads it)"


def _not_an_archive(path: str, container_format: Callable[[bytes], str | None]) -> str | None:
    try:
        with open(path, "rb") as f:
            head = f.read(_HEAD)
    except OSError as exc:
        return f"could not be read ({exc.strerror or type(exc).__name__})"
    if container_format(head) is None:
        return "a plain file (a job is a folder or an archive)"
    return None


def diagnose_job(path: str, options: Options = Options()) -> Row:
    """Diagnose one job; an internal failure becomes an `error` row, never an exception."""
    try:
        diagnosis = diagnose([path], options).to_dict()
        # what became of the job leads each row, as it leads every report
        outcome = (diagnosis.get("outcome") or {}).get("id", "unknown")
        return {"job": path, "outcome": outcome, "diagnosis": diagnosis}
    except Exception as exc:  # noqa: BLE001 - one bad job must not stop the batch
        from triage.redact import redact_text

        return {"job": path, "error": redact_text(f"{type(exc).__name__}: {exc}")}


class ClusterUnavailable(ValueError):
    """`--dask` / `--ray` cannot be used as given: no address, or the extra is not installed."""


# the package each cluster needs, and the extra of triage that installs it
_CLUSTERS = {
    "dask": ("distributed", "triage[dask]", "a scheduler address (tcp://host:8786)"),
    "ray": ("ray", "triage[ray]", "a cluster address (ray://host:10001, or auto)"),
}


def check_cluster(*, dask: str | None = None, ray: str | None = None) -> None:
    """Raise ClusterUnavailable when a cluster was asked for but cannot be used: an empty
    address, or its package missing. Checked before any job is read: a user's mistake, not an
    internal failure halfway through."""
    for name, address in (("dask", dask), ("ray", ray)):
        if address is None:
            continue
        package, extra, wanted = _CLUSTERS[name]
        if not address.strip():
            raise ClusterUnavailable(f"--{name} needs {wanted}, not an empty text")
        if not _installed(package):
            raise ClusterUnavailable(
                f"--{name} needs the `{package}` package, which is not installed here: "
                f"pip install '{extra}'"
            )


def _installed(package: str) -> bool:
    if package in sys.modules:
        return sys.modules[package] is not None  # None: an import that is known to fail
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):
        return False


def run_batch(
    jobs: Sequence[str | Entry],
    out: TextIO,
    options: Options = Options(),
    workers: int | None = None,
    *,
    dask: Any = None,
    ray: str | None = None,
    unit: Unit = diagnose_job,
    on_row: Callable[[dict[str, Any]], None] | None = None,
) -> int:
    """Diagnose `jobs`, writing one JSON line per job as it is ready; the number of rows.

    Locally (the default) in a pool of `workers` processes, rows in job order. With `dask`
    (a scheduler address, or a `distributed.Client` / cluster) or `ray` (an address, or
    "auto"), on that cluster, rows in the order jobs finish. `unit` is the function each job
    runs (`diagnose_job`); `on_row` hears of each row as it is written (the CLI's progress)."""
    entries = [j if isinstance(j, Entry) else Entry(j) for j in jobs]
    paths = [e.path for e in entries if e.skipped is None]
    if dask is not None:
        rows = _dask_rows(paths, options, dask, unit)
    elif ray is not None:
        rows = _ray_rows(paths, options, ray, unit)
    else:
        rows = _local_rows(paths, options, workers, unit)
    count = 0
    in_order = dask is None and ray is None

    def emit(row: dict[str, Any]) -> None:
        nonlocal count
        _write(out, row)
        count += 1
        if on_row is not None:
            on_row(row)

    for entry in entries:  # skipped entries in their place (local) or first (cluster)
        if entry.skipped is not None:
            emit({"job": entry.path, "error": entry.skipped})
        elif in_order:
            emit(next(rows))
    for row in rows:  # from a cluster, as jobs finish
        emit(row)
    return count


def _write(out: TextIO, row: Row) -> None:
    out.write(json.dumps(row) + "\n")
    out.flush()


# --------------------------------------------------------------------------- local pool

_TRIES_IN_POOL = 2  # a job whose worker died this often is run alone next


def _local_rows(
    jobs: Sequence[str], options: Options, workers: int | None, unit: Unit
) -> Iterator[Row]:
    """Rows in job order from a process pool that survives its workers dying."""
    if not jobs:
        return
    size = max(1, min(workers or os.cpu_count() or 1, len(jobs)))
    _warm(options)  # the forked workers inherit what is loaded here, instead of each loading it
    pending = deque(range(len(jobs)))
    deaths = [0] * len(jobs)
    done: dict[int, Row] = {}
    shown = 0
    pool = _new_pool(size)
    running: dict[Future[Row], int] = {}
    try:
        while pending or running:
            broken = False
            while pending and len(running) < 2 * size and not broken:
                i = pending.popleft()
                try:
                    running[pool.submit(unit, jobs[i], options)] = i
                except (BrokenProcessPool, RuntimeError):
                    pending.appendleft(i)
                    broken = True
            finished, _ = wait(list(running), return_when=FIRST_COMPLETED) if running else ([], ())
            lost: list[int] = []
            for future in finished:
                i = running.pop(future)
                try:
                    done[i] = future.result()
                except BrokenProcessPool:
                    lost.append(i)
                except Exception as exc:  # noqa: BLE001 - e.g. a row that could not travel
                    done[i] = {"job": jobs[i], "error": f"{type(exc).__name__}: {exc}"}
            if lost or broken:
                # A dead worker breaks the whole pool: every job still running is lost with it.
                lost += running.values()
                running.clear()
                pool.shutdown(wait=False, cancel_futures=True)
                pool = _new_pool(size)
                for i in sorted(lost):
                    deaths[i] += 1
                    if deaths[i] >= _TRIES_IN_POOL:
                        done[i] = _run_alone(unit, jobs[i], options)
                    else:
                        pending.appendleft(i)
                pending = deque(sorted(pending))
            while shown in done:
                yield done.pop(shown)
                shown += 1
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _warm(options: Options) -> None:
    from triage import knowledge, parsers
    from triage.pipeline import warm_later_stages

    # the knowledge every job loads (the same object, cached) and the scan tables derived
    # from it, here once before the workers fork
    try:
        kb = knowledge.load(options.extra_rules_dirs)
    except knowledge.KnowledgeError:  # each job reports it, loudly
        kb = None
    parsers.preload(kb=kb)
    warm_later_stages(options, kb)


def _new_pool(size: int) -> ProcessPoolExecutor:
    import multiprocessing

    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else None
    return ProcessPoolExecutor(max_workers=size, mp_context=multiprocessing.get_context(method))


def _run_alone(unit: Unit, job: str, options: Options) -> Row:
    """Run one job in a process of its own: its row, or an error row if that process dies."""
    import multiprocessing

    ctx = multiprocessing.get_context()
    receive, send = ctx.Pipe(duplex=False)
    process = ctx.Process(target=_alone, args=(send, unit, job, options), daemon=True)
    process.start()
    send.close()
    row: Row | None = None
    with contextlib.suppress(EOFError):  # EOF: the process died before it could answer
        row = receive.recv()
    process.join()
    if row is not None:
        return row
    return {"job": job, "error": _death(process.exitcode)}


def _alone(send: Any, unit: Unit, job: str, options: Options) -> None:
    send.send(unit(job, options))
    send.close()


def _death(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            how = f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            how = f"killed by signal {-exitcode}"
    else:
        how = f"exit code {exitcode}"
    hint = " (the OOM killer sends SIGKILL)" if exitcode == -signal.SIGKILL else ""
    return (
        f"the worker process diagnosing this job died ({how}{hint}), twice in the pool and "
        "once alone; the other jobs went on"
    )


# --------------------------------------------------------------------------- Dask

_CLUSTER_TRIES = 2  # a job lost with its worker is submitted again once, then reported


def _dask_rows(jobs: Sequence[str], options: Options, target: Any, unit: Unit) -> Iterator[Row]:
    """Rows in completion order from a Dask cluster (`distributed`, the `dask` extra).

    Dask itself reschedules a task whose worker died, up to the scheduler's
    `distributed.scheduler.allowed-failures`; a task that still fails raises KilledWorker.
    Such a job is submitted once more, then reported as an error row."""
    try:
        from distributed import Client, as_completed
        from distributed.client import FutureCancelledError
    except ImportError as exc:  # pragma: no cover - the extra is not installed
        raise RuntimeError("--dask needs Dask's `distributed`: pip install triage[dask]") from exc
    try:
        from distributed import KilledWorker
    except ImportError:  # pragma: no cover - older layout
        from distributed.scheduler import KilledWorker

    own = not isinstance(target, Client)
    client = Client(target) if own else target
    try:
        tries: dict[int, int] = {}
        index: dict[Any, int] = {}

        def submit(i: int) -> Any:
            tries[i] = tries.get(i, 0) + 1
            future = client.submit(unit, jobs[i], options, pure=False)
            index[future.key] = i
            return future

        queue = as_completed([submit(i) for i in range(len(jobs))])
        for future in queue:
            i = index.pop(future.key)
            try:
                yield future.result()
            except (KilledWorker, FutureCancelledError) as exc:
                if tries[i] < _CLUSTER_TRIES:
                    queue.add(submit(i))
                else:
                    how = f"submitted {tries[i]} times, each retried by the scheduler"
                    yield {"job": jobs[i], "error": _lost(type(exc).__name__, how)}
            except Exception as exc:  # noqa: BLE001 - the unit itself never raises
                yield {"job": jobs[i], "error": f"{type(exc).__name__}: {exc}"}
            finally:
                future.release()
    finally:
        if own:
            client.close()


def _lost(why: str, tries: str) -> str:
    return f"the cluster worker diagnosing this job died ({why}; {tries}); the other jobs went on"


# --------------------------------------------------------------------------- Ray


def _ray_rows(jobs: Sequence[str], options: Options, address: str, unit: Unit) -> Iterator[Row]:
    """Rows in completion order from a Ray cluster (the `ray` extra). Ray retries a task
    whose worker died (`max_retries`); one that still fails becomes an error row."""
    try:
        import ray
    except ImportError as exc:  # pragma: no cover - the extra is not installed
        raise RuntimeError("--ray needs Ray: pip install triage[ray]") from exc

    started = not ray.is_initialized()
    if started:
        ray.init(address=address, ignore_reinit_error=True, log_to_driver=False)
    try:
        remote = ray.remote(max_retries=_CLUSTER_TRIES - 1)(unit)
        index = {remote.remote(job, options): i for i, job in enumerate(jobs)}
        waiting = list(index)
        while waiting:
            ready, waiting = ray.wait(waiting, num_returns=1)
            (ref,) = ready
            i = index.pop(ref)
            try:
                yield ray.get(ref)
            except ray.exceptions.WorkerCrashedError:
                how = f"tried {_CLUSTER_TRIES} times"
                yield {"job": jobs[i], "error": _lost("WorkerCrashedError", how)}
            except ray.exceptions.RayError as exc:
                yield {"job": jobs[i], "error": f"{type(exc).__name__}: {exc}"}
    finally:
        if started:
            ray.shutdown()


def wait_for_workers(client: Any, count: int, timeout_s: float = 60.0) -> None:
    """Block until a Dask client sees `count` workers (benchmarks and tests start clusters)."""
    deadline = time.monotonic() + timeout_s
    while len(client.scheduler_info().get("workers", {})) < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"fewer than {count} Dask workers after {timeout_s:g} s")
        time.sleep(0.05)
