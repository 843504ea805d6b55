"""Across jobs: `triage fleet DIR_OF_JOBS [-o report.html|.md|.json] [--db fleet.sqlite]`.

A platform team triages hundreds of failed jobs a week. `run_fleet` reads a folder of job
bundles, adds the jobs it has not seen (by content digest) to an SQLite history, and reports
over the whole history: failures grouped by mechanism, the hosts (and GPUs) that keep hosting
the culprit, with the test that flags them and the lines behind each flag.

One module per job: `collect` (digest, the per-job unit), `signals` (hardware-ish lines per
host and GPU), `store` (SQLite), `aggregate` (groups, outcomes, days), `suspects` (host
statistics), `render` (HTML, Markdown, JSON). The per-job work runs through
`triage.batch.run_batch` (a local pool, Dask or Ray); the aggregation reads only the rows.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from triage.fleet import collect
from triage.fleet.knowledge import FleetKnowledge, FleetKnowledgeError
from triage.fleet.model import FleetReport, JobRecord, RunInfo, StoredJob, Unreadable
from triage.fleet.store import LOCK_WAIT_S, Store, StoreError
from triage.pipeline import Options

__all__ = [
    "FleetKnowledgeError",
    "FleetReport",
    "Plan",
    "StoreError",
    "build_report",
    "plan_run",
    "run_fleet",
]

# (event, done, total, job name): "hash" while digests are taken, "job" as rows come back
Progress = Callable[[str, int, int, str], None]


@dataclass(frozen=True)
class Plan:
    """What a run will read: the new jobs (with their digests) and what it will not."""

    found: int
    new: tuple[tuple[str, str], ...]  # (path, digest)
    known: int
    skipped: tuple[tuple[str, str], ...]  # (path, why it is not read)


def plan_run(
    store: Store, jobs_dir: str, *, follow_links: bool = False, progress: Progress | None = None
) -> Plan:
    """Which jobs of `jobs_dir` are new: a path whose files are unchanged since it was hashed
    keeps its digest unread; other jobs are hashed; a digest already stored is not read again."""
    from triage import batch
    from triage.fleet import collect

    entries = batch.job_entries(jobs_dir, follow_links=follow_links)
    new: list[tuple[str, str]] = []
    skipped: list[tuple[str, str]] = []
    seen: set[str] = set()
    known = 0
    for n, entry in enumerate(entries, 1):
        if progress is not None:
            progress("hash", n, len(entries), os.path.basename(entry.path))
        if entry.skipped is not None:
            skipped.append((entry.path, entry.skipped))
            continue
        try:
            print_ = collect.fingerprint(entry.path).key()
            digest = store.path_digest(entry.path, print_)
            if digest is None:
                digest = collect.content_digest(entry.path)
                store.remember_path(entry.path, print_, digest)
        except OSError as exc:
            skipped.append((entry.path, f"could not be read ({exc.strerror or exc})"))
            continue
        if digest in seen or store.known(digest):
            known += 1
        else:
            new.append((entry.path, digest))
        seen.add(digest)
    store.commit()
    return Plan(len(entries), tuple(new), known, tuple(skipped))


def run_fleet(
    jobs_dir: str,
    db_path: str,
    options: Options = Options(),
    *,
    knowledge: FleetKnowledge | None = None,
    workers: int | None = None,
    dask: Any = None,
    ray: str | None = None,
    progress: Progress | None = None,
    lock_wait_s: float = LOCK_WAIT_S,
) -> FleetReport:
    """Add the new jobs of `jobs_dir` to the history in `db_path`, then report over it all.

    The per-job work is `collect.fleet_job` on `triage.batch.run_batch` (a local pool of
    `workers`, or a Dask scheduler / Ray cluster: every worker must see `jobs_dir` at the same
    path). Raises `StoreError` (the database cannot be used: nothing written) and
    `FleetKnowledgeError` (rules/fleet/fleet.yaml is broken) before any job is read; a
    database another run holds is waited for `lock_wait_s`."""
    from triage import batch
    from triage.fleet import knowledge as fleet_knowledge

    kn = knowledge or fleet_knowledge.load()
    jobs_dir = os.path.abspath(jobs_dir)
    with Store.open(db_path, lock_wait_s) as store:
        plan = plan_run(store, jobs_dir, follow_links=options.follow_links, progress=progress)
        run = store.begin_run(jobs_dir, plan.found, plan.known)
        digests = dict(plan.new)
        added = errors = 0

        def on_row(row: dict[str, Any]) -> None:
            nonlocal added, errors
            path = str(row.get("job", ""))
            if "outcome" not in row:  # an error row: unreadable, skipped, or its worker died
                errors += 1
                store.unreadable(path, run, str(row["error"]))
            else:
                record = JobRecord.from_row({**row, "digest": digests[path]})
                added += store.add(record, run)
            if progress is not None:
                progress("job", added + errors, len(plan.new) + len(plan.skipped), path)

        entries = [batch.Entry(p, why) for p, why in plan.skipped]
        entries += [batch.Entry(p) for p, _ in plan.new]
        unit = _unit(kn, on_ray=ray is not None)
        with open(os.devnull, "w", encoding="utf-8") as sink:  # the rows go to the store
            batch.run_batch(
                entries, sink, options, workers, dask=dask, ray=ray, unit=unit, on_row=on_row
            )
        store.finish_run(run, added, errors)
        info = RunInfo(run, jobs_dir, plan.found, added, plan.known, errors)
        return build_report(store, info, kn)


def _unit(kn: FleetKnowledge, on_ray: bool) -> Callable[[str, Options], dict[str, Any]]:
    """`collect.fleet_job` with the knowledge bound: a partial travels to local and Dask
    workers by pickle; Ray's `remote` takes only a plain function (cloudpickle sends it)."""
    if not on_ray:
        return partial(collect.fleet_job, knowledge=kn)

    def fleet_job(path: str, options: Options) -> dict[str, Any]:
        return collect.fleet_job(path, options, knowledge=kn)

    return fleet_job


def build_report(store: Store, run: RunInfo, knowledge: FleetKnowledge) -> FleetReport:
    """The fleet report over every job in the store (the rows only, never a bundle)."""
    from triage.fleet import aggregate, suspects

    jobs: list[StoredJob] = list(store.jobs())
    hosts, base, tested = suspects.host_stats(jobs, knowledge)
    return FleetReport(
        run=run,
        db=store.path,
        total_jobs=len(jobs),
        outcomes=tuple(aggregate.outcomes(jobs)),
        groups=tuple(
            aggregate.groups(jobs, run.run, knowledge, {h.host for h in hosts if h.flagged})
        ),
        hosts=tuple(hosts),
        base_rate=base,
        test=knowledge.suspects.test,
        alpha=knowledge.suspects.alpha,
        min_jobs=knowledge.suspects.min_jobs,
        tested_hosts=tested,
        days=tuple(aggregate.days(jobs, knowledge)),
        unreadable=tuple(
            Unreadable(os.path.basename(p.rstrip("/")) or p, p, e)
            for p, e in store.unreadable_rows()
        ),
        generated=time.time(),
        failure_outcomes=tuple(sorted(knowledge.failure_outcomes)),
    )
