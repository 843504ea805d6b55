"""Wrapper prefixes that launchers and collectors stack in front of a log line.

Peeled from the outside in (formats.md §1): `srun -l` task labels `3: `, pdsh/clush host labels
`node07: `, `mpirun --tag-output` `[1,0]<stdout>:`, torchrun `--tee`/`--redirects` `[default3]:`
(local rank; the role name can differ), the `[rank3]: ` that torch's excepthook puts on every
traceback line (global rank; glued to C++ logs as `[rank0]:[E1218 ...`), and `[80746] ` line
numbers that some log collectors add (noise), and Ray's `(RayWorkerWrapper pid=123) `. A
container runtime's own time stamp (`docker logs --timestamps`, `kubectl logs --timestamps`:
RFC 3339 with nanoseconds, `2025-11-21T23:37:35.078263831Z `) comes first of all: it is kept
as the line's time (`stamp`), and the prefixes after it are peeled as usual.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_SRUN = re.compile(r"(\d{1,6}): ")
_MPIRUN = re.compile(r"\[(\d+),(\d+)\]<(?:stdout|stderr)>: ?")
_RANK = re.compile(r"\[rank(\d{1,6})\]: ?")
_ROLE = re.compile(r"\[([A-Za-z_][A-Za-z_-]*?)(\d{1,6})\]: ?")
_COLLECTOR = re.compile(r"\[\d{1,9}\] ")
# a container runtime's stamp: RFC 3339, a `T`, seconds with a fraction, `Z` or an offset
_RUNTIME_STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{1,9}(?:Z|[+-]\d\d:\d\d) ")
_RAY = re.compile(
    r"\((?P<actor>[\w.]+)(?:\[(?:[^\]]*?rank=(?P<rank>\d+))?[^\]]*\])? pid=(?P<pid>\d+)"
    r"(?:, ip=[\w.:-]+)?\) ?"
)
_HOST = re.compile(r"([A-Za-z0-9][\w.-]{0,62}): ")

# Words that end in `: ` at the start of a line but are not host names.
_NOT_HOSTS = frozenset(
    {
        *("srun", "slurmstepd", "sbatch", "salloc", "error", "warning", "warn", "info"),
        *("debug", "critical", "fatal", "note", "notice", "hint", "traceback", "file"),
        *("exception", "localrank", "rank"),
    }
)
_NOT_HOST_SHAPES = re.compile(
    r"(?:rank|local_rank|step|epoch|iter|iteration|it|loss|batch|layer|stage|part|phase)\d*"
    r"|.*(?:Error|Exception|Warning|Exit|Interrupt|Failure|Timeout)",
    re.IGNORECASE,
)


@dataclass(frozen=True, slots=True)
class Prefixes:
    """What the peeled prefixes said, and the line without them."""

    rest: str
    rank: int | None = None  # global rank: `[rankN]:` or mpirun's `[job,rank]`
    local_rank: int | None = None  # torchrun `[defaultN]:`
    role: str | None = None  # torchrun role name (`default` unless changed)
    host: str | None = None  # pdsh/clush `node07: `
    task: int | None = None  # `srun -l` task id
    key: str = ""  # the prefixes as written, minus collector noise: one output stream
    stamp: str | None = None  # a container runtime's time stamp in front of them all

    @property
    def empty(self) -> bool:
        return not self.key

    @property
    def excepthook(self) -> bool:
        """Written by torch's distributed excepthook (`[rankN]: `), which prefixes every line
        of one uncaught exception's print, its message's later lines included."""
        return self.rank is not None and f"[rank{self.rank}]" in self.key


def _looks_like_host(name: str) -> bool:
    if name.lower() in _NOT_HOSTS or _NOT_HOST_SHAPES.fullmatch(name):
        return False
    if name == "localhost":
        return True
    first = name.split(".", 1)[0]
    # A host label carries a digit or a dash (node07, gpu-node-3, 10.0.0.5, ip-10-0-0-5.ec2...);
    # plain words and dotted module paths (`torch.distributed.run: `) are log text.
    return any(c.isdigit() or c == "-" for c in first)


# Ray's log deduplication prints one line for many alike and appends how many it stood for
# (ray/_private/ray_logging: LogDeduplicator, ` [repeated 65x across cluster]`, in green, its
# first time with a note on RAY_DEDUP_LOGS): a wrapper's words, not the message's, which a
# traceback's frame or exception line would otherwise carry
_RAY_REPEATED = re.compile(
    r"(?:\x1b\[\d+m)? \[repeated \d+x across cluster\]"
    r"(?: \(Ray deduplicates logs by default\.[^)]*\))?(?:\x1b\[0m)?\s*$"
)


def _without_ray_repeat(text: str) -> str:
    if "across cluster]" not in text:
        return text
    m = _RAY_REPEATED.search(text)
    return text if m is None else text[: m.start()]


def peel(text: str, *, max_layers: int = 8) -> Prefixes:
    """Strip stacked wrapper prefixes from `text`, outermost first (and Ray's count of the
    lines a deduplicated line stands for, at its end)."""
    text = _without_ray_repeat(text)
    rank = local_rank = task = None
    role = host = stamp = None
    keys: list[str] = []
    pos = 0
    if text[:1].isdigit():
        m = _RUNTIME_STAMP.match(text)
        if m is not None:
            stamp, pos = m[0].rstrip(), m.end()
    for _ in range(max_layers):
        if pos >= len(text):
            break
        first = text[pos]
        if first == "[":
            m = _RANK.match(text, pos)
            if m is not None:
                rank = int(m[1])
                keys.append(f"[rank{m[1]}]")
                pos = m.end()
                continue
            m = _MPIRUN.match(text, pos)
            if m is not None:
                if rank is None:
                    rank = int(m[2])
                keys.append(f"[{m[1]},{m[2]}]")
                pos = m.end()
                continue
            m = _ROLE.match(text, pos)
            if m is not None:
                role, local_rank = m[1], int(m[2])
                keys.append(f"[{m[1]}{m[2]}]")
                pos = m.end()
                continue
            m = _COLLECTOR.match(text, pos)
            if m is not None:
                pos = m.end()
                continue
            break
        if first == "(":
            # Ray prefixes worker output with `(ActorName pid=123, ip=10.0.0.5) `.
            m = _RAY.match(text, pos)
            if m is not None:
                if m["rank"] is not None and rank is None:
                    rank = int(m["rank"])
                keys.append(f"({m['actor']} pid={m['pid']})")
                pos = m.end()
                continue
            break
        if first.isdigit():
            m = _SRUN.match(text, pos)
            if m is not None:
                task = int(m[1])
                keys.append(f"{m[1]}:")
                pos = m.end()
                continue
        if first.isalnum():
            m = _HOST.match(text, pos)
            if m is not None and _looks_like_host(m[1]):
                host = m[1]
                keys.append(f"{m[1]}:")
                pos = m.end()
                continue
        break
    if pos == 0:
        return Prefixes(rest=text)
    return Prefixes(
        rest=text[pos:],
        rank=rank,
        local_rank=local_rank,
        role=role,
        host=host,
        task=task,
        key="".join(keys),
        stamp=stamp,
    )
