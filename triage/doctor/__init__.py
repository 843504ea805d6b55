"""`triage doctor`: catch the failure before the job starts.

Local checks (`run(DoctorOptions())`, `triage doctor`): torch / CUDA / NCCL / driver /
framework versions against the compatibility table in rules/doctor/compat.yaml, visible GPUs
against the ranks per node, /dev/shm, memlock, free host and GPU memory, NCCL_* / TORCH_NCCL_*
variables against rules/doctor/env_vars.yaml, NCCL_SOCKET_IFNAME against this host's
interfaces, MASTER_ADDR resolution and MASTER_PORT availability.

Cross-rank checks (`triage doctor --distributed` under the job's launcher, or `check()` from a
training script after `init_process_group`): every rank sends its facts to rank 0 through the
job's store, and rank 0 reports what differs (versions, environment, hostnames, GPU mapping,
world size) and which rank never answered. Every wait has a deadline.

Each finding carries the taxonomy root cause it would lead to and the fix pattern that
prevents it; `Report.exit_code` is non-zero when any finding is an error, to gate a job script.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from datetime import timedelta
from typing import IO, Any

from triage.doctor import facts as facts_mod
from triage.doctor import knowledge, ranks
from triage.doctor.checks import run_checks
from triage.doctor.report import EXIT_ERRORS, PreflightFinding, Report, render, sort_findings

__all__ = [
    "EXIT_ERRORS",
    "DoctorError",
    "DoctorOptions",
    "PreflightFinding",
    "Report",
    "check",
    "render",
    "run",
]


class DoctorError(Exception):
    """What the user asked for cannot be done (no launcher environment, broken knowledge)."""


@dataclass(frozen=True)
class DoctorOptions:
    distributed: bool = False
    timeout: float = 30.0  # seconds for the store, each rank's facts, and the verdict
    knowledge_dir: str | None = None


def _knowledge(options: DoctorOptions) -> knowledge.Knowledge:
    try:
        return knowledge.load(options.knowledge_dir)
    except knowledge.KnowledgeError as exc:
        raise DoctorError(str(exc)) from exc


def run(options: DoctorOptions = DoctorOptions()) -> Report:
    """The doctor's one entry point for the CLI: local, or across the job's ranks."""
    k = _knowledge(options)
    if options.distributed:
        return _distributed(k, options.timeout)
    facts = facts_mod.collect()
    facts_mod.probe_master_addr(facts)
    if not _inside_a_job(os.environ):
        facts_mod.probe_master_port(facts)  # before launch; inside a job the store holds it
    return Report(
        findings=sort_findings(run_checks(facts, k)),
        distributed=False,
        hostname=facts["hostname"],
        versions=dict(facts.get("versions", {})),
    )


def check(
    timeout: float = 30.0, *, fmt: str | None = "text", file: IO[str] | None = None
) -> Report:
    """Cross-rank checks from inside a training script, after `init_process_group`.

    Every rank must call it (it is a rendezvous); rank 0 prints the report (`fmt=None`: no
    printing) and every rank gets one with the job's exit code, e.g. to stop early::

        report = triage.doctor.check()
        if report.exit_code:
            sys.exit(report.exit_code)
    """
    report = _distributed(_knowledge(DoctorOptions()), timeout)
    if fmt and report.reporter:
        print(render(report, fmt), file=file or sys.stderr, flush=True)
    return report


def _inside_a_job(env: Any) -> bool:
    return "TORCHELASTIC_RUN_ID" in env or "TORCHELASTIC_USE_AGENT_STORE" in env


def _store(timeout: float) -> tuple[Any, int, int]:
    """The job's store, this rank and the world size: the default process group's when one
    is initialised, else a rendezvous on the launcher's MASTER_ADDR/MASTER_PORT."""
    try:
        import torch.distributed as dist
    except ImportError as exc:  # triage's default install has no torch: the job's has
        raise DoctorError(
            "--distributed talks to the job through torch.distributed: run it with the job's "
            f"own Python environment, where its torch is installed ({exc})"
        ) from exc

    if dist.is_available() and dist.is_initialized():
        return dist.distributed_c10d._get_default_store(), dist.get_rank(), dist.get_world_size()
    missing = [
        v for v in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if v not in os.environ
    ]
    if missing:
        raise DoctorError(
            f"--distributed needs the job's launcher ({', '.join(missing)} not set): run "
            "`torchrun --nproc-per-node N --no-python triage doctor --distributed` with the "
            "job's own torchrun/srun options, or call triage.doctor.check() after "
            "init_process_group"
        )
    store, rank, world = next(dist.rendezvous("env://", timeout=timedelta(seconds=timeout)))
    store.set_timeout(timedelta(seconds=timeout))
    return store, rank, world


def _distributed(k: knowledge.Knowledge, timeout: float) -> Report:
    facts = facts_mod.collect()
    facts_mod.probe_master_addr(facts)
    host = facts["hostname"]
    try:
        store, rank, world = _store(timeout)
    except DoctorError:
        raise
    except Exception as exc:  # noqa: BLE001 - a store that cannot be reached is the finding
        env = facts["env"]
        where = f"{env.get('MASTER_ADDR', '?')}:{env.get('MASTER_PORT', '?')}"
        unreachable = k.finding(
            "rendezvous-unreachable",
            where=where,
            timeout=timeout,
            evidence=(f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}",),
        )
        local = run_checks(facts, k)
        return Report(
            findings=sort_findings([unreachable, *local]),
            distributed=True,
            hostname=host,
            versions=dict(facts.get("versions", {})),
        )
    ns, gathered = ranks.exchange(store, rank, world, facts, timeout, os.environ)
    if rank != 0:
        verdict = ranks.wait_verdict(store, ns, timeout + 10)
        if verdict is None:
            silent = k.finding("rendezvous-no-verdict", timeout=timeout + 10)
            return Report((silent,), True, host, reporter=False, exit_override=EXIT_ERRORS)
        return Report((), True, host, reporter=False, exit_override=int(verdict["exit_code"]))
    found = ranks.compare(gathered, world, k, timeout) + ranks.per_rank_findings(gathered, k)
    hosts: dict[str, list[int]] = {}
    for r, f in gathered.items():
        hosts.setdefault(str(f.get("hostname")), []).append(r)
    report = Report(
        findings=sort_findings(found),
        distributed=True,
        hostname=host,
        versions=dict(facts.get("versions", {})),
        ranks_answered=tuple(sorted(gathered)),
        world_size=world,
        hosts=hosts,
    )
    ranks.publish_verdict(
        store, ns, report.exit_code, f"{len(report.errors)} error(s) in {len(found)} finding(s)"
    )
    return report
