"""NCCL_DEBUG output: `host:pid:tid [dev] NCCL INFO|WARN ...` lines (formats.md §3).

`parse_nccl_line(text)` reads one line (any NCCL 2.x prefix generation, with or without the
`[%F %T] ` timestamp, with the `file.cc:LINE (func)` WARN source); `NcclTracker` turns such
lines into events (every WARN; of the INFO lines only the version, the network and transport
choices, communicator setup and `-> N` error chains) and learns which host:pid is which rank
from `Init COMPLETE` lines; `parse(source)` reads a whole NCCL-only file.

The `[dev]` field is the CUDA device index, never the rank.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

from triage.formats import NCCL_BARE_VERSION, NCCL_LINE
from triage.literals import group_literals
from triage.model import Event, EventKind, Level, NcclLineFacts, ParsedSource, Source
from triage.parsers.common import parser_stopped
from triage.parsers.prefixes import peel
from triage.parsers.timestamps import parse_dated
from triage.scan.markers import MarkerSet
from triage.scan.reader import ChunkReader, line_text, select_lines

MAX_EVENTS = 20_000

_LINE = NCCL_LINE
_BARE_VERSION = NCCL_BARE_VERSION

_VERSION = re.compile(r"NCCL version (?P<ver>\d+\.\d+[\w.+-]*)")
_DRIVER = re.compile(r"cudaDriverVersion (?P<ver>\d+)")
_BOOTSTRAP = re.compile(r"Bootstrap ?: ?Using (?P<iface>.+)")
_NET_USING = re.compile(r"NET/(?P<net>\w+) ?: ?Using (?P<what>.+)")
_NETWORK = re.compile(r"Using network (?P<network>\w+)")
# the external IB plugin (nccl-rdma-sharp-plugins; NCCL's own `IBext_v<N>` plugin interface
# names) drives the same InfiniBand verbs as NCCL's `NET/IB`: one transport, two names
_IB_PLUGIN = re.compile(r"IBext(?:_v\d+)?")
# the interface and IPv4 address a bootstrap or socket line goes on: `eth0:10.0.0.5<0>`,
# `[0]eth0:10.0.0.5<0>`
_INTERFACE_IP = re.compile(r"(?:\[\d+\])?\w+:(?P<ip>[\d.]+)<")
_CHANNEL = re.compile(
    r"Channel (?P<ch>\d+)(?:/\d+)? ?: (?P<src>\d+)\[(?P<srcdev>\w+)\] -> "
    r"(?P<dst>\d+)\[(?P<dstdev>\w+)\]"
    r"(?: \[(?P<dir>\w+)\])? via (?P<via>\S+)"
)
_COMM = re.compile(
    r"comm (?P<comm>0x[0-9a-fA-F]+) rank (?P<rank>\d+) nRanks (?P<nranks>\d+)"
    r"(?: nNodes (?P<nnodes>\d+))?(?: localRanks (?P<local_ranks>\d+))?"
    r"(?: localRank (?P<local_rank>\d+))?"
)
_INIT = re.compile(
    r"comm (?P<comm>0x[0-9a-fA-F]+) rank (?P<rank>\d+) nranks (?P<nranks>\d+) cudaDev (?P<dev>\d+)"
    r"(?: nvmlDev (?P<nvml>\d+))? busId (?P<bus>[0-9a-fA-F]+)"
    r"(?: commId (?P<commid>0x[0-9a-fA-F]+))? - Init COMPLETE"
)
_ENV_SET = re.compile(r"(?P<var>NCCL_\w+) set by environment to (?P<value>\S*)")
_CHAIN = re.compile(r"(?P<src>[\w./<>-]+):(?P<srcline>\d+) -> (?P<code>\d+)(?P<tail>.*)")
_INFO_TROUBLE = re.compile(
    r"error|fail|closed|abort|timeout|timed out|refused|unreachable|mismatch|exceeded", re.I
)

# ncclResult_t values (formats.md §3.3)
RESULT_NAMES = {
    0: "ncclSuccess",
    1: "ncclUnhandledCudaError",
    2: "ncclSystemError",
    3: "ncclInternalError",
    4: "ncclInvalidArgument",
    5: "ncclInvalidUsage",
    6: "ncclRemoteError",
    7: "ncclInProgress",
    8: "ncclTimeout",
}


@dataclass(frozen=True, slots=True)
class NcclLine:
    host: str | None
    pid: int | None
    tid: int | None
    dev: int | None  # CUDA device index, NOT the rank
    level: str  # INFO | WARN | TRACE | CALL | VERSION
    message: str
    src: str | None = None
    src_line: int | None = None
    func: str | None = None
    time: float | None = None


def _opt_int(value: str | None) -> int | None:
    return int(value) if value is not None else None


def parse_nccl_line(text: str) -> NcclLine | None:
    """One NCCL debug line (wrapper prefixes already peeled), or None when it is not one."""
    if "NCCL" not in text:
        return None
    m = _LINE.match(text)
    if m is None:
        # Timestamp formats set by NCCL_DEBUG_TIMESTAMP_FORMAT can differ; try past a `] `.
        cut = text.find("] ")
        if 0 < cut < 48 and text.startswith("["):
            m = _LINE.match(text, cut + 2)
    if m is None:
        v = _BARE_VERSION.match(text)
        if v is None:
            return None
        return NcclLine(None, None, None, None, "VERSION", text.strip())
    ts = m["ts"]
    return NcclLine(
        host=m["host"],
        pid=_opt_int(m["pid"]),
        tid=_opt_int(m["tid"]),
        dev=int(m["dev"]) if m["dev"] is not None else None,
        level=m["level"],
        message=m["msg"].strip(),
        src=m["src"],
        src_line=int(m["srcline"]) if m["srcline"] else None,
        func=m["func"],
        time=parse_dated(ts) if ts else None,
    )


@dataclass(frozen=True, slots=True)
class NcclFinding:
    """What one NCCL line is worth keeping as: kind, level and what it says."""

    kind: EventKind
    level: Level
    record: NcclLineFacts


# Communicator set-up lines (`comm 0x.. rank R nRanks N`, `... Init COMPLETE`) kept per input:
# the first communicators of a process already tell its rank, the world size and the groups
# ranks must agree on. A process that creates thousands of them (NCCL_DEBUG=INFO and a
# communicator per P2P pair or per step) would otherwise make every such line an event, ~2 of
# every ~70 lines of its log, each parsed in Python; past this many, they are counted only.
MAX_COMM_EVENTS = 64


class NcclTracker:
    """Decides which NCCL lines become events and learns host:pid -> rank. Bounded state."""

    _MAX_PROCS = 65_536

    def __init__(self) -> None:
        self.rank_of: dict[tuple[str, int], tuple[int, int]] = {}  # (host,pid) -> (rank, nranks)
        self._seen_transports: set[str] = set()
        self._seen_info: set[str] = set()
        self.comm_events = 0  # communicator set-up lines kept as events
        self.comms_dropped = 0  # ... and not kept, past MAX_COMM_EVENTS
        self.skipped = [0]  # ... and those a scan told were there but no longer looked at

    @property
    def comms_full(self) -> bool:
        """Whether further communicator set-up lines are only counted (the caller may then
        stop looking for them)."""
        return self.comm_events >= MAX_COMM_EVENTS

    def _comm_kept(self) -> bool:
        if self.comm_events >= MAX_COMM_EVENTS:
            self.comms_dropped += 1
            return False
        self.comm_events += 1
        return True

    def dropped_warning(self) -> str | None:
        """What the input warns about communicator set-up lines not kept, if any."""
        dropped = self.comms_dropped + self.skipped[0]
        if not dropped:
            return None
        return (
            f"{dropped} more NCCL communicator set-up lines not read (the first "
            f"{MAX_COMM_EVENTS} tell the ranks, the world size and the groups)"
        )

    def rank_for(self, host: str | None, pid: int | None) -> int | None:
        if host is None or pid is None:
            return None
        got = self.rank_of.get((host, pid))
        return got[0] if got else None

    def _learn(self, host: str | None, pid: int | None, rank: int, nranks: int) -> None:
        if host is None or pid is None:
            return
        key = (host, pid)
        old = self.rank_of.get(key)
        # A process has one rank per communicator; its global rank is the one in the biggest.
        if (old is None and len(self.rank_of) < self._MAX_PROCS) or (old and nranks > old[1]):
            self.rank_of[key] = (rank, nranks)

    def _once(self, key: str) -> bool:
        if key in self._seen_info or len(self._seen_info) > 4096:
            return False
        self._seen_info.add(key)
        return True

    def assess(self, line: NcclLine) -> NcclFinding | None:
        """The event a line makes, or None for INFO noise."""
        msg = line.message
        base = NcclLineFacts(host=line.host, pid=line.pid, cuda_dev=line.dev)
        if line.level == "WARN":
            record = replace(base, src=line.src, src_line=line.src_line, func=line.func)
            return NcclFinding(EventKind.NCCL_WARN, Level.WARNING, record)
        if line.level == "VERSION":
            v = _VERSION.search(msg)
            return NcclFinding(
                EventKind.NCCL_INFO,
                Level.INFO,
                NcclLineFacts(None, None, None, nccl_version=v["ver"] if v else None),
            )
        if line.level != "INFO":
            return None
        m = _INIT.search(msg)
        if m is not None:
            rank, nranks = int(m["rank"]), int(m["nranks"])
            self._learn(line.host, line.pid, rank, nranks)
            if not self._comm_kept():
                return None
            record = replace(
                base,
                rank=rank,
                nranks=nranks,
                cuda_dev=int(m["dev"]),
                nvml_dev=int(m["nvml"]) if m["nvml"] else None,
                bus_id=m["bus"],
                comm=m["comm"],
                comm_id=m["commid"],
            )
            return NcclFinding(EventKind.NCCL_COMM, Level.INFO, record)
        m = _CHAIN.match(msg)
        if m is not None:
            code = int(m["code"])
            record = replace(
                base,
                src=m["src"],
                src_line=int(m["srcline"]),
                result=code,
                result_name=RESULT_NAMES.get(code),
            )
            return NcclFinding(EventKind.NCCL_INFO, Level.ERROR if code else Level.INFO, record)
        m = _VERSION.search(msg)
        if m is not None:
            return NcclFinding(
                EventKind.NCCL_INFO, Level.INFO, replace(base, nccl_version=m["ver"])
            )
        m = _ENV_SET.search(msg)
        if m is not None:
            if not self._once(f"{line.host}:{line.pid}:env:{m['var']}"):
                return None
            env = {m["var"]: m["value"].rstrip(".")}
            return NcclFinding(EventKind.NCCL_INFO, Level.INFO, replace(base, env=env))
        m = _CHANNEL.search(msg)
        if m is not None:
            via = m["via"]
            transport = (
                "/".join(via.split("/")[:2]) if via.startswith("NET/") else via.split("/")[0]
            )
            if transport in self._seen_transports or len(self._seen_transports) > 64:
                return None
            self._seen_transports.add(transport)
            record = replace(
                base,
                transport=transport,
                via=via,
                channel=int(m["ch"]),
                peer_from=int(m["src"]),
                peer_to=int(m["dst"]),
            )
            return NcclFinding(EventKind.NCCL_INFO, Level.INFO, record)
        m = _COMM.search(msg)
        if m is not None and "Init COMPLETE" not in msg:
            rank, nranks = int(m["rank"]), int(m["nranks"])
            self._learn(line.host, line.pid, rank, nranks)
            if not self._comm_kept():
                return None
            record = replace(
                base,
                comm=m["comm"],
                rank=rank,
                nranks=nranks,
                nnodes=int(m["nnodes"]) if m["nnodes"] is not None else None,
                local_ranks=int(m["local_ranks"]) if m["local_ranks"] is not None else None,
                local_rank=int(m["local_rank"]) if m["local_rank"] is not None else None,
            )
            return NcclFinding(EventKind.NCCL_INFO, Level.INFO, record)
        for rx, key in (
            (_NETWORK, "network"),
            (_NET_USING, "net"),
            (_BOOTSTRAP, "bootstrap"),
            (_DRIVER, "cuda_driver"),
        ):
            m = rx.search(msg)
            if m is not None:
                if not self._once(f"{line.host}:{line.pid}:{key}:{msg}"):
                    return None
                if key == "net":
                    # `NET/IB : Using [0]mlx5_0:1/IB`: the network, and the devices it uses
                    record = replace(base, network=m["net"], net=f"{m['net']}: {m['what']}")
                    if m["net"] == "Socket":
                        record = replace(record, ip=_ip(m["what"]))
                elif key == "bootstrap":
                    record = replace(base, bootstrap=m[1], ip=_ip(m[1]))
                elif key == "network" and _IB_PLUGIN.fullmatch(m[1]):
                    record = replace(base, network="IB")
                else:
                    record = replace(base, **{key: m[1]})
                return NcclFinding(EventKind.NCCL_INFO, Level.INFO, record)
        if _INFO_TROUBLE.search(msg):
            return NcclFinding(EventKind.NCCL_INFO, Level.WARNING, base)
        return None


def _ip(interface: str) -> str | None:
    """The IPv4 address of what a `Using` names first (`[0]eth0:10.0.0.5<0>`), if any."""
    m = _INTERFACE_IP.match(interface)
    return m["ip"] if m is not None else None


def fill_ranks(events: list[Event], tracker: NcclTracker) -> None:
    """Give rank-less events the rank their host:pid was found to have (in place)."""
    if not tracker.rank_of:
        return
    for i, ev in enumerate(events):
        if ev.rank is None and ev.host is not None and ev.pid is not None:
            rank = tracker.rank_for(ev.host, ev.pid)
            if rank is not None:
                events[i] = replace(ev, rank=rank)


# The patterns of the NCCL lines `NcclTracker.assess` keeps (besides WARN lines): the marker
# scan's needles are their literals, so a new pattern is never missed by the scan.
_KEPT = (_VERSION, _DRIVER, _BOOTSTRAP, _NET_USING, _NETWORK, _CHANNEL, _COMM, _INIT, _ENV_SET)
_KEPT += (_CHAIN, _INFO_TROUBLE)


def notable_needles(kept: tuple[re.Pattern[str], ...] = _KEPT) -> list[str]:
    """Lowercased literals one of which every line `assess` keeps holds (WARN lines: "warn")."""
    out = ["warn"]
    for pattern in kept:
        text = f"(?i:{pattern.pattern})" if pattern.flags & re.IGNORECASE else pattern.pattern
        for literal in group_literals(text) or ():
            out.append(literal.lstrip("\0").lower())
    return list(dict.fromkeys(out))


NOTABLE = MarkerSet(notable_needles())
# Once an input's communicator set-ups are only counted (`MAX_COMM_EVENTS`), its later chunks
# are scanned without their needles: those lines then cost nothing.
NOTABLE_NO_COMM = MarkerSet(notable_needles(tuple(p for p in _KEPT if p not in (_COMM, _INIT))))


def line_needles() -> list[str]:
    """Lowercased literals of an NCCL debug line (`NCCL INFO`, `NCCL WARN`, `NCCL version`):
    in a process's log, every NCCL line is read (the tracker learns ranks from them)."""
    found = [*(group_literals(_LINE.pattern) or ()), *(group_literals(_BARE_VERSION.pattern) or ())]
    return list(dict.fromkeys(lit.lstrip("\0").lower() for lit in found))


class _Continuation:
    """A WARN message can span lines (formats.md §3.2): read every line while one is open."""

    def __init__(self) -> None:
        self.index: int | None = None

    def reading(self) -> bool:
        return self.index is not None


def _notable_lines(
    reader: ChunkReader,
    dense: Callable[[], bool],
    tracker: NcclTracker,
    scans: tuple[MarkerSet, MarkerSet],
) -> Iterator[tuple[int, str]]:
    notable, no_comm = scans
    for data, first in reader:
        counter = reader.counter
        markers = notable
        if tracker.comms_full:
            markers = no_comm  # what it no longer looks at is still counted
            tracker.skipped[0] += data.count(b" nRanks ") + data.count(b" nranks ")
        for number, raw in select_lines(data, first, markers.find(data), dense, counter):
            for text in line_text(reader, raw, number):
                yield number, text


def parse(source: Source, *, engine: str = "auto") -> ParsedSource:
    """All notable events of an NCCL-only debug file. Never raises. `engine` is the marker
    scan's (`MarkerSet.ENGINES`; tests run each)."""
    scans = (NOTABLE, NOTABLE_NO_COMM)
    if engine != "auto":
        scans = (NOTABLE.using(engine), NOTABLE_NO_COMM.using(engine))
    warnings: list[str] = list()
    events: list[Event] = []
    tracker = NcclTracker()
    reader: ChunkReader | None = None
    dropped = 0
    cont = _Continuation()  # the WARN whose continuation lines are being read
    try:
        stream = source.open()
    except Exception as exc:
        return ParsedSource(source, (), (f"cannot open: {exc!r}",))
    try:
        reader = ChunkReader(stream)
        for number, text in _notable_lines(reader, cont.reading, tracker, scans):
            pre = peel(text)
            line = parse_nccl_line(pre.rest)
            if line is None:
                # A WARN message can span lines (formats.md §3.2): keep a few continuations.
                if cont.index is not None and pre.rest.strip() and not pre.rest.startswith("["):
                    ev = events[cont.index]
                    if ev.text.count("\n") < 8:
                        events[cont.index] = replace(
                            ev, text=ev.text + "\n" + pre.rest.strip(), end_line=number
                        )
                        continue
                cont.index = None
                continue
            cont.index = None
            found = tracker.assess(line)
            if found is None:
                continue
            if len(events) >= MAX_EVENTS:
                dropped += 1
                continue
            rank = pre.rank
            if rank is None:
                rank = tracker.rank_for(line.host, line.pid)
            if rank is None and pre.task is None:
                rank = source.rank
            events.append(
                Event(
                    source=source.path,
                    kind=found.kind,
                    text=pre.rest.strip(),
                    line=number,
                    end_line=number,
                    rank=rank,
                    local_rank=pre.local_rank if pre.local_rank is not None else source.local_rank,
                    host=line.host or pre.host or source.host,
                    pid=line.pid,
                    time=line.time,
                    level=found.level,
                    payload=found.record,
                )
            )
            if found.kind is EventKind.NCCL_WARN:
                cont.index = len(events) - 1
    except Exception as exc:  # never let one bad file stop a diagnosis
        warnings.append(parser_stopped("NCCL", exc))
    finally:
        with contextlib.suppress(Exception):
            stream.close()
    if dropped:
        warnings.append(f"{dropped} more NCCL events dropped after the first {MAX_EVENTS}")
    comms = tracker.dropped_warning()
    if comms:
        warnings.append(comms)
    fill_ranks(events, tracker)
    if reader is not None:
        warnings[:0] = reader.warnings
    return ParsedSource(
        source=source,
        events=tuple(events),
        warnings=tuple(warnings),
        lines=reader.lines if reader else 0,
        bytes_read=reader.bytes_read if reader else 0,
    )
