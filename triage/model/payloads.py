"""What the parsers hand correlate: Events with their typed payloads (tracebacks, flight-recorder
dumps and collective references, py-spy dumps, exits, environment reports) and one
ParsedSource per input."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, NamedTuple

from triage.model.inputs import EventKind, Level, Source


class StackFrame(NamedTuple):
    """One Python frame of a py-spy or flight-recorder stack.

    A NamedTuple rather than a frozen dataclass like the other records: flight-recorder
    stacks are built by the thousand per dump, and a tuple is filled from a row at C speed
    (about the size of a slots dataclass: 8 bytes more). Immutable all the same; copy with
    `_replace`, not `dataclasses.replace`. Equal to a plain tuple of the same fields.
    """

    function: str
    filename: str
    line: int | None = None


class FlightRecorderEntry(NamedTuple):
    """One collective / p2p record of a flight-recorder ring buffer (any schema version).

    A NamedTuple for the same reason as StackFrame: 1,024 ranks x 2,000 entries is two
    million of these, and the parser fills each from a row of columns ~5x faster than it
    builds a frozen dataclass. Copy with `_replace`, not `dataclasses.replace`.
    """

    record_id: int
    pg_name: str
    pg_desc: str
    collective_seq_id: int  # `seq_id` in pre-2.0 dumps
    p2p_seq_id: int
    op_id: int
    is_p2p: bool
    profiling_name: str  # "nccl:all_reduce", "gloo:broadcast", "nccl:send 0->1"
    input_sizes: tuple[tuple[int, ...], ...]
    output_sizes: tuple[tuple[int, ...], ...]
    input_dtypes: tuple[str, ...]
    output_dtypes: tuple[str, ...]
    state: str  # scheduled | started | completed
    time_created_ns: int | None
    time_started_ns: int | None  # time_discovered_started_ns; None when not discovered
    time_completed_ns: int | None
    duration_ms: float | None
    timeout_ms: int | None
    retired: bool | None
    frames: tuple[StackFrame, ...] = ()

    @property
    def backend(self) -> str:
        return self.profiling_name.split(":", 1)[0] if ":" in self.profiling_name else ""

    @property
    def op(self) -> str:
        """The op name without backend prefix and p2p peers: `all_reduce`, `send`."""
        name = self.profiling_name.split(":", 1)[-1]
        return name.split(" ", 1)[0]


@dataclass(frozen=True)
class FlightRecorderDump:
    rank: int | None
    version: str | None  # None for the bare-list era
    pg_config: Mapping[str, tuple[int, ...]]  # pg name -> member ranks (may be incomplete)
    pg_desc: Mapping[str, str]  # pg name -> description
    pg_status: Mapping[str, Mapping[str, int]]  # pg id -> last_enqueued/started/completed
    comm_lib_version: str | None
    # the parser gives an EntryTable (entry_table.py): the entries held field by field
    entries: Sequence[FlightRecorderEntry]
    # entries the ring buffer held, when only the last `len(entries)` were read (big jobs)
    entries_total: int | None = None


@dataclass(frozen=True)
class CollectiveRef:
    """One collective as the evidence names it: a rank's flight-recorder record, a watchdog's
    `WorkNCCL(...)` line, gloo's timeout line, or what they say together (`merged`)."""

    op: str | None = None  # `all_reduce`, `send`: no backend prefix, no peers
    seq: int | None = None  # the collective sequence id in its process group
    process_group: str | None = None  # its name; HangReport says name and description
    profiling_name: str | None = None  # `nccl:all_reduce`: set only from a record
    input_sizes: tuple[tuple[int, ...], ...] = ()
    output_sizes: tuple[tuple[int, ...], ...] = ()
    input_dtypes: tuple[str, ...] = ()
    output_dtypes: tuple[str, ...] = ()
    timeout_ms: int | None = None
    state: str | None = None  # scheduled | started | completed, from a record
    call_site: str | None = None  # the user's frame that issued it: `fn (file:line)`
    numel_in: int | None = None  # the watchdog line's NumelIn
    gloo_wait: str | None = None  # gloo's transport step (recv/send), not the collective

    def merged(self, over: CollectiveRef) -> CollectiveRef:
        """This reference with every field `over` knows taken from `over`."""
        known = {
            name: value
            for name in _COLLECTIVE_FIELDS
            if (value := getattr(over, name)) is not None and value != ()
        }
        return replace(self, **known)

    def as_dict(self) -> dict[str, Any]:
        """The JSON diagnosis's `hang.collective`: what is known, sizes and dtypes only from a
        record (where empty lists say the record had none). The keys keep the order the
        reports have always listed them in (gloo's wait first, the sequence id last)."""
        out: dict[str, Any] = {}
        for key, value in (
            ("gloo_wait", self.gloo_wait),
            ("op", self.op),
            ("numel_in", self.numel_in),
            ("profiling_name", self.profiling_name),
        ):
            if value is not None:
                out[key] = value
        if self.profiling_name is not None:
            out["input_sizes"] = [list(shape) for shape in self.input_sizes]
            out["output_sizes"] = [list(shape) for shape in self.output_sizes]
            out["dtypes"] = list(self.input_dtypes)
        for key, value in (
            ("timeout_ms", self.timeout_ms),
            ("call_site", self.call_site),
            ("seq", self.seq),
        ):
            if value is not None:
                out[key] = value
        return out


_COLLECTIVE_FIELDS = tuple(CollectiveRef.__dataclass_fields__)


@dataclass(frozen=True)
class CollectiveMismatch:
    """The first collective the ranks of one process group recorded differently."""

    process_group: str
    seq: int
    kind: Literal["op", "size", "dtype"]  # what differs
    ranks: tuple[int, ...]  # the odd ones out; every holder on a tie
    tie: bool  # no majority: the flight recorder alone cannot say who is wrong
    # how the ranks parted: `left_loop` when some went on repeating the collective all had
    # been issuing and the others did something new (they ran out of work first); `diverged`
    # when each side issued a different new collective (one skipped or added a call);
    # `differing` for one collective with different sizes or dtypes
    pattern: Literal["differing", "diverged", "left_loop"]
    departed: tuple[int, ...]  # the ranks that left the loop (`left_loop`)
    per_rank: Mapping[int, CollectiveRef]  # each holder's record of it


@dataclass(frozen=True)
class PySpyThread:
    thread_id: str
    name: str | None
    status: str  # idle | active | active+gil | gil | unknown
    owns_gil: bool
    frames: tuple[StackFrame, ...]  # innermost first, as py-spy prints them


@dataclass(frozen=True)
class PySpyDump:
    pid: int | None
    command: str | None
    python_version: str | None
    threads: tuple[PySpyThread, ...]

    def main_thread(self) -> PySpyThread | None:
        for thread in self.threads:
            if thread.name == "MainThread":
                return thread
        return self.threads[0] if self.threads else None


@dataclass(frozen=True)
class RankExit:
    """How one rank ended, from a torchrun summary, an error.json or a launcher line."""

    rank: int | None
    local_rank: int | None
    host: str | None
    pid: int | None
    exitcode: int | None
    signal: str | None  # "SIGKILL", ... when the exit code is negative
    time: float | None  # epoch seconds
    error_file: str | None
    message: str | None  # exception text or traceback, when known
    is_root_cause_block: bool = False  # torchrun's "Root Cause (first observed failure)"


@dataclass(frozen=True)
class EnvReport:
    """Versions and settings from collect_env, ds_report, pip lists, nvidia-smi, env dumps."""

    report_kind: str  # collect_env | ds_report | pip | nvidia_smi | env_vars
    facts: Mapping[str, str]  # "torch", "cuda", "nccl", "driver", "gpu_models", ... -> value
    packages: Mapping[str, str] = field(default_factory=dict)  # package -> version
    env_vars: Mapping[str, str] = field(default_factory=dict)  # NCCL_*, MASTER_ADDR, ...


Payload = FlightRecorderDump | PySpyDump | RankExit | EnvReport


class TracebackFrame(NamedTuple):
    """One frame line of a Python traceback as printed: `File "x.py", line 12, in main`."""

    file: str
    line: int
    function: str


@dataclass(frozen=True)
class TracebackLink:
    """One exception of a (chained) traceback, as its event's text shows it."""

    exc_type: str | None  # `RuntimeError`; None when the link names no exception
    exc_message: str | None
    # the link's last line that names an exception (`RuntimeError: boom`), as printed: what
    # finally went wrong in it; None when the link names none (a traceback cut short)
    exception_line: str | None
    frames: tuple[TracebackFrame, ...]  # outermost first, as Python prints them
    start: int  # the 0-based line of the event's text where the link begins (0: the first)


@dataclass(frozen=True)
class Traceback:
    """A Python traceback the parser read, chained links split: later stages read these fields
    instead of parsing the event's text again."""

    links: tuple[TracebackLink, ...]  # earliest first, as Python prints a chain

    @property
    def exception_lines(self) -> tuple[str, ...]:
        """Each link's exception line, earliest first (links that name none left out)."""
        return tuple(link.exception_line for link in self.links if link.exception_line)

    @property
    def later_links_start(self) -> tuple[int, ...]:
        """The text lines where each link after the first begins."""
        return tuple(link.start for link in self.links[1:])

    @property
    def raised_at(self) -> TracebackFrame | None:
        """Where the rank's own exception was raised: the innermost frame of the first link
        (a later link was raised while handling it)."""
        frames = self.links[0].frames if self.links else ()
        return frames[-1] if frames else None


@dataclass(frozen=True)
class Event:
    """One thing a parser found: a line, a traceback, a dump. Line numbers are 1-based."""

    source: str  # Source.path
    kind: EventKind
    text: str  # what a person reads; multi-line for tracebacks (prefixes removed)
    line: int | None = None
    end_line: int | None = None
    rank: int | None = None
    local_rank: int | None = None
    host: str | None = None
    pid: int | None = None
    time: float | None = None  # epoch seconds; None when the line carries no timestamp
    level: Level = Level.INFO
    attrs: Mapping[str, Any] = field(default_factory=dict, compare=False)
    payload: Payload | None = field(default=None, compare=False)
    traceback: Traceback | None = field(default=None, compare=False)  # a TRACEBACK event's


@dataclass(frozen=True)
class ParsedSource:
    """A source and what its parser produced."""

    source: Source
    events: tuple[Event, ...]
    warnings: tuple[str, ...] = ()
    lines: int = 0
    bytes_read: int = 0
    # Pasted text (a TEXT input of at most MAX_PASTE bytes), read once by the parser so that no
    # later stage reopens the source: the digest of its content (whitespace runs as one space;
    # how a reference case is recognised), and the whole text when the parser found no event
    # in it (a bare assertion line, a P2P matrix: still the user's evidence).
    text_digest: str | None = None
    whole_text: str | None = None
