"""Find the training processes on this node from /proc, and map each to its rank.

A training process is one whose environment names its rank (`RANK` or `LOCAL_RANK`, set by
torchrun, deepspeed, accelerate and most Slurm wrappers). Its own children inherit that
environment (data-loader workers, compile workers, a `bash -c` wrapper's python), so of a chain
of processes with the same rank only one is kept: the outermost Python process.

Everything here reads /proc and nothing else; a process that vanishes while it is being read
is simply not there, and an environment we may not read is reported, not raised.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

PROC = Path("/proc")


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    name: str  # the kernel's short name (`comm`)
    argv: tuple[str, ...]


@dataclass(frozen=True)
class Target:
    """One rank's process, with the environment it was started with."""

    pid: int
    rank: int | None
    local_rank: int | None
    world_size: int | None
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(repr=False)  # the whole environment: never written out
    launcher_pid: int | None = None

    @property
    def label(self) -> str:
        return f"rank {self.rank}" if self.rank is not None else f"pid {self.pid}"


@dataclass(frozen=True)
class Discovery:
    targets: tuple[Target, ...]
    unreadable_env: tuple[int, ...]  # candidates whose environment we may not read
    looked_at: int  # processes considered


def read_proc(pid: int, root: Path = PROC) -> Proc | None:
    """The process's parent, name and argv; None when it is gone or unreadable."""
    base = root / str(pid)
    try:
        stat = (base / "stat").read_text(encoding="utf-8", errors="replace")
        raw_argv = (base / "cmdline").read_bytes()
    except OSError:
        return None
    # `pid (comm) state ppid ...`: comm may hold spaces and parentheses, so cut at the last ')'
    open_at, close_at = stat.find("("), stat.rfind(")")
    if open_at < 0 or close_at < 0:
        return None
    rest = stat[close_at + 2 :].split()
    try:
        ppid = int(rest[1])
    except (IndexError, ValueError):
        return None
    argv = tuple(a.decode("utf-8", "replace") for a in raw_argv.split(b"\0") if a)
    return Proc(pid=pid, ppid=ppid, name=stat[open_at + 1 : close_at], argv=argv)


def read_env(pid: int, root: Path = PROC) -> dict[str, str]:
    """The environment a process was started with. Raises OSError (gone, or not allowed)."""
    data = (root / str(pid) / "environ").read_bytes()
    env: dict[str, str] = {}
    for item in data.split(b"\0"):
        name, sep, value = item.partition(b"=")
        if sep and name:
            env[name.decode("utf-8", "replace")] = value.decode("utf-8", "replace")
    return env


def all_processes(root: Path = PROC) -> dict[int, Proc]:
    procs: dict[int, Proc] = {}
    try:
        entries = list(root.iterdir())
    except OSError:
        return procs
    for entry in entries:
        if entry.name.isdigit() and (p := read_proc(int(entry.name), root)) is not None:
            procs[p.pid] = p
    return procs


def descendants(procs: Mapping[int, Proc], pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for p in procs.values():
        children.setdefault(p.ppid, []).append(p.pid)
    out: list[int] = []
    todo = [pid]
    while todo:
        for child in sorted(children.get(todo.pop(), ())):
            out.append(child)
            todo.append(child)
    return out


def ancestors(procs: Mapping[int, Proc], pid: int) -> list[int]:
    """Parents of `pid`, nearest first (stops at a loop or an unknown parent)."""
    out: list[int] = []
    seen = {pid}
    p = procs.get(pid)
    while p is not None and p.ppid not in seen and p.ppid > 0:
        out.append(p.ppid)
        seen.add(p.ppid)
        p = procs.get(p.ppid)
    return out


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None and value.strip() != "" else None
    except ValueError:
        return None


def rank_of(env: Mapping[str, str]) -> tuple[int | None, int | None, int | None]:
    """(rank, local rank, world size) from what launchers export."""
    local_rank = _int(env.get("LOCAL_RANK"))
    rank = _int(env.get("RANK"))
    if rank is None and local_rank is not None:
        # torchrun always sets RANK; other launchers may give only the node's rank and size
        group, per_node = (
            _int(env.get("GROUP_RANK") or env.get("NODE_RANK")),
            _int(env.get("LOCAL_WORLD_SIZE")),
        )
        if group is not None and per_node is not None:
            rank = group * per_node + local_rank
        elif (
            group is None
            and env.get("WORLD_SIZE")
            and env.get("WORLD_SIZE") == env.get("LOCAL_WORLD_SIZE")
        ):
            rank = local_rank  # one node: local rank is the rank
    return rank, local_rank, _int(env.get("WORLD_SIZE"))


def _is_rank_env(env: Mapping[str, str]) -> bool:
    return "RANK" in env or "LOCAL_RANK" in env


def _rank_key(env: Mapping[str, str]) -> tuple[str | None, ...]:
    return (env.get("RANK"), env.get("LOCAL_RANK"), env.get("TORCHELASTIC_RUN_ID"))


def _is_python(p: Proc) -> bool:
    head = os.path.basename(p.argv[0]) if p.argv else p.name
    return "python" in head or "python" in p.name


def find_targets(
    launcher_pid: int | None = None,
    *,
    root: Path = PROC,
    exclude: Iterable[int] = (),
) -> Discovery:
    """The rank processes under `launcher_pid` (itself included), or on the whole node.

    `exclude` pids (and their parents) are never targets: a snapshot started from a shell
    inside the job's allocation has RANK in its environment, and so have its parent shells.
    """
    procs = all_processes(root)
    excluded = set(exclude)
    for pid in list(excluded):
        excluded.update(ancestors(procs, pid))
    if launcher_pid is not None:
        pool = [launcher_pid, *descendants(procs, launcher_pid)]
    else:
        pool = sorted(procs)
    pool = [pid for pid in pool if pid in procs and pid not in excluded]

    envs: dict[int, dict[str, str]] = {}
    unreadable: list[int] = []
    for pid in pool:
        try:
            env = read_env(pid, root)
        except PermissionError:
            if _is_python(procs[pid]):  # could be a rank; other processes are not our business
                unreadable.append(pid)
            continue
        except OSError:
            continue  # gone since it was listed
        if _is_rank_env(env):
            envs[pid] = env

    keep: list[int] = []
    for pid, env in envs.items():
        key = _rank_key(env)
        same_above = [a for a in ancestors(procs, pid) if a in envs and _rank_key(envs[a]) == key]
        if _is_python(procs[pid]):
            # a Python ancestor of the same rank is the rank itself; this one is its worker
            if any(_is_python(procs[a]) for a in same_above):
                continue
        elif same_above or any(
            _is_python(procs[d])
            for d in descendants(procs, pid)
            if d in envs and _rank_key(envs[d]) == key
        ):
            continue  # a shell wrapper or a non-Python child: its Python process is the rank
        keep.append(pid)

    targets = []
    for pid in keep:
        rank, local_rank, world = rank_of(envs[pid])
        parent = procs[pid].ppid
        targets.append(
            Target(
                pid=pid,
                rank=rank,
                local_rank=local_rank,
                world_size=world,
                argv=procs[pid].argv,
                env=envs[pid],
                launcher_pid=parent if parent in procs and parent not in envs else None,
            )
        )
    targets.sort(key=lambda t: (t.rank is None, t.rank if t.rank is not None else 0, t.pid))
    return Discovery(tuple(targets), tuple(unreadable), len(pool))
