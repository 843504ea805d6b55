"""Who is who: map every event, dump and exit to a global rank, and learn the world size.

Parsers attach a rank when the line itself says so (`[rank3]:`, a per-rank log file, an
NCCL `Init COMPLETE ... rank R` line). py-spy dumps and many launcher lines only carry a
pid, so we join pids to ranks through every place where both appear together: torchrun's
`failed (exitcode ..) local_rank: 0 (pid: 5454)`, the ChildFailedError block, NCCL's
`host:pid:tid` prefix next to `rank R`, and per-rank files whose source knows its rank.
"""

from __future__ import annotations

import ast
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from triage.model import (
    EnvReport,
    Event,
    EventKind,
    EvidenceRef,
    FlightRecorderDump,
    NcclLineFacts,
    ParsedSource,
    RankExit,
    Traceback,
    TracebackFacts,
)
from triage.parsers import tracebacks
from triage.rank_ranges import ranks_text


@dataclass
class RankIndex:
    """pid/host/source -> rank joins, built once from all parsed sources."""

    by_host_pid: dict[tuple[str, int], int] = field(default_factory=dict)
    by_pid: dict[int, int] = field(default_factory=dict)
    ambiguous_pids: set[int] = field(default_factory=set)
    by_source: dict[str, int] = field(default_factory=dict)
    local_of_source: dict[str, int] = field(default_factory=dict)
    host_of_source: dict[str, str] = field(default_factory=dict)
    host_of_rank: dict[int, str] = field(default_factory=dict)
    # hosts the logs themselves name for a rank (torchrun's failure summary, NCCL's
    # `host:pid:tid`), which beat hosts read from file and folder names
    host_said: dict[int, str] = field(default_factory=dict)
    world_sizes: Counter[int] = field(default_factory=Counter)  # claimed size -> votes
    # the largest NCCL communicator seen: Megatron and DeepSpeed set up many sub-communicators
    # (TP, PP, DP groups of sizes 1..N) before the world one, so a communicator's size is no
    # claim about the world; the largest one bounds it from below
    largest_comm: int = 0
    # torchrun's summary says (host, local_rank) -> rank; per-rank log dirs only know local_rank
    by_host_local: dict[tuple[str | None, int], int] = field(default_factory=dict)
    local_is_global: bool = False
    # a line names a rank other than 0: more than one process ran, whatever a log claims
    other_ranks_named: bool = False

    def learn_local(self, host: str | None, local_rank: int | None, rank: int | None) -> None:
        if local_rank is None or rank is None or rank < 0:
            return
        self.by_host_local.setdefault((host, local_rank), rank)

    @property
    def ranks_of_host(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for r, h in self.host_of_rank.items():
            out.setdefault(h, []).append(r)
        return out

    def finish(self) -> None:
        """After all joins are known: is this a single-node job where local rank = rank?"""
        # an agent line without a host (`failed (exitcode: -9) local_rank: 1`) is the one
        # named host's own agent when there is only one
        hosts = {h for h, _ in self.by_host_local if h is not None}
        self.local_is_global = (
            bool(self.by_host_local)
            and len(hosts) <= 1
            and all(lr == r for (_, lr), r in self.by_host_local.items())
        )

    def rank_for_local(self, local_rank: int | None, host: str | None) -> int | None:
        if local_rank is None:
            return None
        if (host, local_rank) in self.by_host_local:
            return self.by_host_local[(host, local_rank)]
        hosts = {h for h, _ in self.by_host_local}
        if len(hosts) == 1:
            # one agent's summary covers every worker: the host spelling may differ
            only = next(iter(hosts))
            if (only, local_rank) in self.by_host_local:
                return self.by_host_local[(only, local_rank)]
        return local_rank if self.local_is_global else None

    def learn(self, pid: int | None, host: str | None, rank: int | None) -> None:
        if pid is None or rank is None or rank < 0:
            return
        if host:
            self.by_host_pid.setdefault((host, pid), rank)
            self.host_of_rank.setdefault(rank, host)
        known = self.by_pid.get(pid)
        if known is None:
            self.by_pid[pid] = rank
        elif known != rank:
            # pids repeat across hosts; without a host a bare pid is then meaningless
            self.ambiguous_pids.add(pid)

    def rank_for(self, pid: int | None, host: str | None) -> int | None:
        if pid is None:
            return None
        if host and (host, pid) in self.by_host_pid:
            return self.by_host_pid[(host, pid)]
        if pid in self.ambiguous_pids:
            return None
        return self.by_pid.get(pid)

    @property
    def world_size(self) -> int | None:
        """The job's own statement (WORLD_SIZE, a launcher's world size, a flight recorder's
        widest group), else the largest communicator."""
        if not self.world_sizes:
            return self.largest_comm or None
        # the most-voted claim; ties go to the larger size
        claimed = max(self.world_sizes.items(), key=lambda kv: (kv[1], kv[0]))[0]
        return max(claimed, self.largest_comm)


def build_index(parsed: Sequence[ParsedSource]) -> RankIndex:
    index = RankIndex()
    for ps in parsed:
        if ps.source.local_rank is not None:
            index.local_of_source[ps.source.path] = ps.source.local_rank
            # a worker's own file (torchrun --log-dir) whose lines name one global rank
            # (`[rank2]:`) says which rank its local rank is; the lines the prefixer never
            # sees (a thread's uncaught exception, plain prints) then belong to it too
            named = {ev.rank for ev in ps.events if ev.rank is not None and ev.rank >= 0}
            if len(named) == 1:
                index.learn_local(ps.source.host, ps.source.local_rank, next(iter(named)))
        if ps.source.host:
            index.host_of_source[ps.source.path] = ps.source.host
        if ps.source.rank is not None:
            index.by_source[ps.source.path] = ps.source.rank
            if ps.source.host:
                index.host_of_rank.setdefault(ps.source.rank, ps.source.host)
        for ev in ps.events:
            host = ev.host or ps.source.host
            rank = ev.rank if ev.rank is not None else ps.source.rank
            if rank is not None and rank > 0:
                index.other_ranks_named = True
            payload = ev.payload
            if isinstance(payload, RankExit):
                if payload.host and payload.rank is not None:
                    index.host_said.setdefault(payload.rank, payload.host)
                index.learn(payload.pid, payload.host or host, payload.rank)
                index.learn_local(payload.host or host, payload.local_rank, payload.rank)
                continue
            if ev.kind is EventKind.NCCL_COMM:
                comm = (
                    payload
                    if isinstance(payload, NcclLineFacts)
                    else NcclLineFacts(None, None, None)
                )
                r = comm.rank if comm.rank is not None else ev.rank
                pid = comm.pid or ev.pid
                if comm.host and r is not None:
                    index.host_said.setdefault(r, comm.host)
                index.learn(pid, comm.host or host, r)
                n = comm.nranks
                if n:
                    index.largest_comm = max(index.largest_comm, n)
                continue
            if isinstance(payload, FlightRecorderDump):
                sizes = [max(pg_ranks(r)) + 1 for r in payload.pg_config.values() if pg_ranks(r)]
                if sizes:
                    # the widest group of a dump is, in practice, the default (world) group
                    index.world_sizes[max(sizes)] += 1
                continue
            if isinstance(payload, EnvReport):
                ws = _int(payload.env_vars.get("WORLD_SIZE"))
                if ws:
                    index.world_sizes[ws] += 1
                continue
            if ev.pid is not None and rank is not None and ev.kind is not EventKind.AGENT:
                # an agent line's pid is torchrun's own, never a worker's
                index.learn(ev.pid, host, rank)
            ws = ev.notice.world_size if ev.notice is not None else None
            if ws:
                index.world_sizes[ws] += 1
    index.finish()
    return index


def event_rank(ev: Event, index: RankIndex, source_rank: int | None = None) -> int | None:
    """The global rank an event belongs to, or None when nothing says."""
    if ev.rank is not None and ev.rank >= 0:
        return ev.rank
    payload = ev.payload
    if isinstance(payload, RankExit) and payload.rank is not None:
        return payload.rank
    if isinstance(payload, FlightRecorderDump) and payload.rank is not None:
        return payload.rank
    if source_rank is None:
        source_rank = index.by_source.get(ev.source)
    if source_rank is not None:
        return source_rank
    if ev.kind is EventKind.AGENT:
        return None
    if index.world_size == 1 and not index.other_ranks_named:
        # a job of one process: whatever its launcher did not print is that process's
        return 0
    if ev.tagged_rank is not None:
        # torch names the rank inside the message (`[Rank 2] Watchdog caught ...`) even when a
        # progress bar or a collector glued junk before the prefix (the parser read the tag)
        return ev.tagged_rank
    local = ev.local_rank if ev.local_rank is not None else index.local_of_source.get(ev.source)
    if local is not None:
        got = index.rank_for_local(local, ev.host or index.host_of_source.get(ev.source))
        if got is not None:
            return got
    return index.rank_for(ev.pid, ev.host)


def pg_ranks(value: object) -> tuple[int, ...]:
    """pg_config ranks arrive as a tuple, a list or the string repr `'[0, 1]'`."""
    if type(value) is tuple:
        return value  # the model's own type: the common, hot case (1,024-rank configs)
    if isinstance(value, str):
        try:
            value = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            return ()
    if isinstance(value, Iterable):
        out = []
        for v in value:
            iv = _int(v)
            if iv is not None:
                out.append(iv)
        return tuple(out)
    return ()


def ref(ev: Event, rank: int | None = None, limit: int = 300) -> EvidenceRef:
    text, line = quoted_line(ev, limit)
    return EvidenceRef(
        source=ev.source, line=line, rank=ev.rank if rank is None else rank, text=text
    )


def quoted_line(ev: Event, limit: int = 300) -> tuple[str, int | None]:
    """The event's most telling line and the file line that holds it.

    A torchrun summary entry opens with `[0]:`; its `exitcode : -9` line is the one that
    tells. The line is the event's first unless the parser kept where each line came from
    (tracebacks skip blank and interleaved lines) or the event's lines map one to one.
    """
    text = first_line(ev.text, limit, ev.traceback)
    raw = ev.text.splitlines()
    if ev.kind is EventKind.RANK_EXIT:
        text = next((x.strip() for x in raw if x.strip().startswith("exitcode")), text)
    if ev.line is None:
        return text, None
    head = text.removesuffix("…")
    at = next((i for i, x in enumerate(raw) if head and head in x), None)
    numbers = ev.line_numbers
    if at is None:
        return text, ev.line
    if numbers and at < len(numbers) and numbers[at] is not None:
        return text, numbers[at]
    if numbers is None and ev.end_line is not None and ev.end_line - ev.line + 1 == len(raw):
        return text, ev.line + at
    return text, ev.line


def first_line(text: str, limit: int = 300, traceback: Traceback | None = None) -> str:
    """The most telling single line of a (possibly multi-line) event text; `traceback`: the
    text's chain as the parser read it, when it did."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not lines:
        return ""
    line = lines[0]
    # frames without their `Traceback` header (a progress bar printed it mid-line) are read
    # the same: the exception says what went wrong, not the outermost frame
    headerless = line.startswith('File "')
    if (line.startswith("Traceback") or headerless) and len(lines) > 1:
        # a chain prints its first exception first: that one is what went wrong, the later
        # ones were raised while handling it (a `finally:` barrier that then timed out)
        heads = (traceback or tracebacks.read(text)).exception_lines
        line = heads[0] if len(heads) > 1 else (heads[-1] if heads else line)
        if not heads and not headerless:
            # a traceback cut before its exception (another rank's lines broke in): its
            # innermost frame says where it was, `Traceback (most recent call last):` nothing
            frames = [ln for ln in lines if ln.startswith('File "')]
            line = frames[-1] if frames else line
    return line if len(line) <= limit else line[: limit - 1] + "…"


def outermost_frame(ev: Event) -> tuple[str, str] | None:
    """The (file, function) of the first frame a traceback event printed (its first link's)."""
    if ev.kind is not EventKind.TRACEBACK:
        return None
    links = traceback_of(ev).links
    if not links or not links[0].frames:
        return None
    frame = links[0].frames[0]
    return frame.file, frame.function


# the outermost frame of a traceback that reached the interpreter's top level: the script's
# own module, or runpy's for `python -m`
_TOP_LEVEL = frozenset({"<module>", "_run_module_as_main"})


def ended_its_process(ev: Event) -> bool:
    """An uncaught exception's traceback, whole and run from the interpreter's top level: the
    Python process that printed it ended there."""
    facts = ev.payload
    if not isinstance(facts, TracebackFacts) or facts.truncated or facts.headerless:
        return False
    outermost = outermost_frame(ev)
    return outermost is not None and outermost[1] in _TOP_LEVEL


def traceback_of(ev: Event) -> Traceback:
    """A traceback event's chain as the parser read it (`Event.traceback`); an event built
    without one (a test, a record of another parser) has its text read the same way."""
    return ev.traceback if ev.traceback is not None else tracebacks.read(ev.text)


def format_ranks(ranks: Iterable[int]) -> str:
    """`[0, 1, 2, 5]` -> `0-2, 5`: compact for 1,024-rank jobs (`triage.rank_ranges`)."""
    return ranks_text(ranks)


def ranks_named(ranks: Iterable[int]) -> str:
    """`rank 3`, `ranks 0-1`: the noun agrees with how many ranks it names."""
    listed = sorted(set(ranks))
    return f"{'rank' if len(listed) == 1 else 'ranks'} {format_ranks(listed)}"


def _int(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            return None
    return None
