"""`triage snapshot`: capture the evidence of a job that is hanging right now, on this node.

For every training process (the ranks under a launcher pid, or every process on the node whose
environment has RANK / LOCAL_RANK): py-spy stacks (text and JSON), its allow-listed environment,
and its flight-recorder dumps (triggered through the job's dump pipe when it set one). Plus the
node's facts: memory, /dev/shm, memlock, nvidia-smi, kernel messages about OOM kills and Xid.

The folder is a bundle `triage` reads like any other, one sub-folder per host:

    DIR/host-<hostname>/rank_<N>/{pyspy.txt, pyspy.json, env.txt, fr_dump}
    DIR/host-<hostname>/node/{node.txt, nvidia-smi.txt, kernel.txt}
    DIR/host-<hostname>/snapshot.json          what was captured and what went wrong

so snapshots of several nodes can be copied into one folder (or passed together) and read as
one job. Every capture has a timeout; the snapshot never hangs on a stuck process.
"""

from __future__ import annotations

import json
import os
import re
import socket
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from triage.snapshot import capture
from triage.snapshot.procs import Discovery, Target, find_targets

if TYPE_CHECKING:
    from triage.model import Diagnosis

SCHEMA = "triage.snapshot/1"
EXIT_NOTHING_FOUND = 3  # no training process was found: nothing captured


class SnapshotError(Exception):
    """A problem with what the user asked for (no such pid, an unusable folder)."""


@dataclass(frozen=True)
class SnapshotOptions:
    out_dir: str
    pid: int | None = None  # a launcher's (or one rank's) pid; None: every rank on the node
    native: bool = False  # py-spy --native: C/C++ frames too (slower, pauses longer)
    timeout: float = 20.0  # seconds for each capture (one py-spy run, one dump, one tool)
    analyze: bool = False
    use_embeddings: bool = True  # for --analyze


@dataclass
class RankCapture:
    target: Target
    folder: str
    files: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def add(self, got: capture.Captured) -> None:
        self.files += got.files
        self.problems += got.problems


@dataclass
class SnapshotResult:
    out_dir: Path
    host_dir: Path
    hostname: str
    ranks: list[RankCapture]
    node: capture.Captured
    problems: list[str]  # about the whole snapshot (nothing found, environments unreadable)
    diagnosis: Diagnosis | None = None

    @property
    def found(self) -> bool:
        return bool(self.ranks)

    def summary(self) -> list[str]:
        """What was captured, one line per rank, then every problem: for the terminal."""
        lines: list[str] = []
        if self.ranks:
            ranks = [r.target.rank for r in self.ranks if r.target.rank is not None]
            lines.append(
                f"snapshot of {len(self.ranks)} training process(es) on {self.hostname}"
                + (f" (ranks {_ranks(ranks)})" if ranks else "")
                + f" in {self.host_dir}"
            )
        for r in self.ranks:
            got = ", ".join(r.files) if r.files else "nothing"
            lines.append(f"  {r.target.label} (pid {r.target.pid}): {got}")
        if self.ranks:
            lines.append(f"  node: {', '.join(self.node.files) or 'nothing'}")
        lines += [f"  note: {n}" for n in self.node.notes]
        problems = self.problems + self.node.problems + [p for r in self.ranks for p in r.problems]
        lines += [f"  problem: {p}" for p in dict.fromkeys(problems)]  # "py-spy not found" once
        return lines


def _ranks(ranks: list[int]) -> str:
    from triage.analysis.ranks import format_ranks

    return format_ranks(sorted(ranks))


def folder_name(hostname: str) -> str:
    """`host-<name>`: the form ingest reads a host from (any name, not only `node01`)."""
    return "host-" + (re.sub(r"[^A-Za-z0-9._-]", "-", hostname).strip("-.") or "unknown")


def take(options: SnapshotOptions) -> SnapshotResult:
    """Capture every training process found, write the bundle, analyse it when asked."""
    if options.pid is not None and not Path(f"/proc/{options.pid}").exists():
        raise SnapshotError(f"no process with pid {options.pid} on this node")
    hostname = socket.gethostname()
    out_dir = Path(options.out_dir)
    host_dir = out_dir / folder_name(hostname)
    if host_dir.exists():
        raise SnapshotError(
            f"{host_dir} already holds a snapshot of this host: give another -o folder"
        )
    discovery = find_targets(options.pid, exclude=[os.getpid()])
    problems = _discovery_problems(discovery, options.pid)
    if not discovery.targets:  # nothing to capture: write nothing
        return SnapshotResult(out_dir, host_dir, hostname, [], capture.Captured(), problems)
    try:
        host_dir.mkdir(parents=True)
    except OSError as exc:
        raise SnapshotError(f"cannot create {host_dir}: {exc.strerror}") from exc

    ranks = [
        RankCapture(t, folder)
        for t, folder in zip(discovery.targets, rank_folders(discovery.targets), strict=True)
    ]
    for r in ranks:
        (host_dir / r.folder).mkdir(parents=True)
    _capture_ranks(ranks, host_dir, options)
    node_dir = host_dir / "node"
    node_dir.mkdir()
    node = capture.node_facts(node_dir, hostname, discovery.targets, options.timeout)
    node.files = [f"node/{f}" for f in node.files]
    result = SnapshotResult(out_dir, host_dir, hostname, ranks, node, problems)
    _write_manifest(result, options)
    if options.analyze and result.found:
        from triage import pipeline

        result.diagnosis = pipeline.diagnose(
            [str(out_dir)], pipeline.Options(use_embeddings=options.use_embeddings)
        )
    return result


def rank_folders(targets: Sequence[Target]) -> list[str]:
    """`rank_<N>` for each target; with several jobs on the node (`--all`), one `job-<pid>`
    folder per launcher first, so that two jobs' rank 0 never share a folder."""
    several = len({t.launcher_pid for t in targets}) > 1
    used: set[str] = set()
    out = []
    for t in targets:
        # no rank known: a name ingest reads no rank from
        name = f"rank_{t.rank}" if t.rank is not None else f"process-pid{t.pid}"
        if several:
            name = f"job-{t.launcher_pid or 'none'}/{name}"
        if name in used:
            name = f"{name}/pid{t.pid}"  # the same rank twice under one launcher
        used.add(name)
        out.append(name)
    return out


def _discovery_problems(discovery: Discovery, pid: int | None) -> list[str]:
    problems: list[str] = []
    if not discovery.targets:
        where = f"under pid {pid}" if pid is not None else "on this node"
        problems.append(
            f"no training process found {where}: none has RANK or LOCAL_RANK in its "
            "environment (is the job running on this node? give the launcher's pid with --pid)"
        )
    if discovery.unreadable_env:
        shown = ", ".join(str(p) for p in discovery.unreadable_env[:8])
        problems.append(
            f"{len(discovery.unreadable_env)} process(es) whose environment may not be read "
            f"(pids {shown}{'...' if len(discovery.unreadable_env) > 8 else ''}): run as the "
            "job's user or as root"
        )
    seen: dict[int, int] = {}
    for t in discovery.targets:
        if t.rank is not None and t.rank in seen:
            problems.append(
                f"pids {seen[t.rank]} and {t.pid} both have RANK={t.rank}: two jobs on this node? "
                "give the launcher's pid with --pid"
            )
        elif t.rank is not None:
            seen[t.rank] = t.pid
    return problems


def _capture_ranks(ranks: list[RankCapture], host_dir: Path, options: SnapshotOptions) -> None:
    """Stacks of every rank first and at once (they should show one moment), then the
    flight-recorder dumps (a pipe-triggered dump runs a thread in the job), then environments."""
    pyspy = capture.find_pyspy()

    def stacks(r: RankCapture) -> None:
        # text then JSON, one after the other: two tracers cannot attach to one process at once
        for name, as_json in (("pyspy.txt", False), ("pyspy.json", True)):
            got = capture.pyspy_dump(
                pyspy,
                r.target.pid,
                host_dir / r.folder / name,
                as_json=as_json,
                native=options.native,
                timeout=options.timeout,
            )
            r.files += got.files
            r.problems += [p for p in got.problems if p not in r.problems]  # say it once

    with ThreadPoolExecutor(max_workers=max(1, min(16, len(ranks)))) as pool:
        list(pool.map(stacks, ranks))
        triggered: list[float | None] = []
        for r in ranks:
            when, problem = capture.trigger_fr_pipe(r.target, options.timeout)
            triggered.append(when)
            if problem:
                r.problems.append(problem)
        dumps = [
            pool.submit(
                capture.collect_fr,
                r.target,
                host_dir / r.folder,
                triggered_at=when,
                timeout=options.timeout,
            )
            for r, when in zip(ranks, triggered, strict=True)
        ]
        for r, dump in zip(ranks, dumps, strict=True):
            r.add(dump.result())
    for r in ranks:
        r.add(capture.write_env(r.target, host_dir / r.folder / "env.txt"))
        r.files = [f"{r.folder}/{f}" for f in r.files]


def _write_manifest(result: SnapshotResult, options: SnapshotOptions) -> None:
    doc = {
        "schema": SCHEMA,
        "host": result.hostname,
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "asked_for": {"pid": options.pid, "native": options.native, "timeout_s": options.timeout},
        "ranks": [
            {
                "rank": r.target.rank,
                "local_rank": r.target.local_rank,
                "world_size": r.target.world_size,
                "pid": r.target.pid,
                "launcher_pid": r.target.launcher_pid,
                "files": r.files,
                "problems": r.problems,
            }
            for r in result.ranks
        ],
        "node": {
            "files": result.node.files,
            "notes": result.node.notes,
            "problems": result.node.problems,
        },
        "problems": result.problems,
    }
    (result.host_dir / "snapshot.json").write_text(json.dumps(doc, indent=2) + "\n")
