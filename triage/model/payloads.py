"""What the parsers hand correlate: Events with their typed payloads (tracebacks, flight-recorder
dumps and collective references, py-spy dumps, exits, environment reports, and what a log's
records and lines say) and one ParsedSource per input."""

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
    # seconds `time` leaves open after it: torchrun's summary and error.json stamp to the
    # second (1.0), so the exit lies anywhere in that second
    time_resolution: float = 0.0


@dataclass(frozen=True)
class EnvReport:
    """Versions and settings from collect_env, ds_report, pip lists, nvidia-smi, env dumps."""

    report_kind: str  # collect_env | ds_report | pip | nvidia_smi | env_vars
    facts: Mapping[str, str]  # "torch", "cuda", "nccl", "driver", "gpu_models", ... -> value
    packages: Mapping[str, str] = field(default_factory=dict)  # package -> version
    env_vars: Mapping[str, str] = field(default_factory=dict)  # NCCL_*, MASTER_ADDR, ...


# --------------------------------------------------------------------------- log records
# What the log parsers read from one record of a log. Each event kind carries its own record
# (`Event.payload`); facts several kinds share (the exception a record names, the c10d facts a
# message names, a line template's facts) are typed fields of the Event itself.

# A frame as a log's traceback or faulthandler block prints it: (file, line, function).
LogFrame = tuple[str, int, str]


@dataclass(frozen=True)
class TracebackFacts:
    """A Python traceback block of a log (the exception it names is `Event.exception`)."""

    # outermost first, every link of a chain; which are library code is the frames
    # knowledge's to say (rules/frames.yaml), not the parser's
    frames: tuple[LogFrame, ...]
    truncated: bool  # neither an exception type nor a message: the block was cut short
    frames_dropped: int = 0  # frames past the parser's per-traceback limit
    headerless: bool = False  # frames with no `Traceback (most recent call last):` above


@dataclass(frozen=True)
class FaultHandlerFacts:
    """faulthandler's `Fatal Python error: Segmentation fault` block."""

    fatal_error: str  # `Segmentation fault`, `Aborted`
    signal: str | None  # the signal that word names (`SIGSEGV`)
    frames: tuple[LogFrame, ...]  # innermost first, as faulthandler prints them


@dataclass(frozen=True)
class CppExceptionFacts:
    """A c10 C++ exception (`terminate called after throwing an instance of ...`)."""

    exception_class: str | None
    what: str | None
    # `Exception raised from f at file.cpp:12`, or the place its what() names
    # (`gloo/transport/tcp/pair.cc:456` of `[enforce fail at ...pair.cc:456]`)
    raised_from: str | None = None
    cpp_frames: int = 0  # the frames of its C++ stack


@dataclass(frozen=True)
class LogLineFacts:
    """An error or warning line, or an INFO line a rule looks for (`notable`)."""

    src: str | None = None  # glog / c10 `file.cpp` the line was logged from
    src_line: int | None = None
    logger: str | None = None  # Python logging's logger name
    notable: bool = False  # kept only because a rule looks for it: context, not a complaint
    # a c10 error line's C++ stack below it: where it was raised, how many frames
    raised_from: str | None = None
    cpp_frames: int = 0


@dataclass(frozen=True)
class NcclLineFacts:
    """One NCCL_DEBUG line worth keeping: a warning, a communicator set-up, a version, a
    transport, an environment setting or an error chain."""

    host: str | None
    pid: int | None
    cuda_dev: int | None
    rank: int | None = None  # the rank in this communicator
    nranks: int | None = None  # the communicator's size
    comm: str | None = None  # its address, `0x5581...`
    comm_id: str | None = None  # its commId, from `Init COMPLETE`
    nvml_dev: int | None = None
    bus_id: str | None = None
    nnodes: int | None = None
    local_ranks: int | None = None
    local_rank: int | None = None
    nccl_version: str | None = None  # as printed, `2.21.5+cuda12.4`
    src: str | None = None  # `init.cc` of a warning or an error chain's step
    src_line: int | None = None
    func: str | None = None
    result: int | None = None  # an error chain's ncclResult_t
    result_name: str | None = None
    transport: str | None = None  # `P2P`, `NET/IB`
    via: str | None = None
    channel: int | None = None
    peer_from: int | None = None
    peer_to: int | None = None
    env: Mapping[str, str] = field(default_factory=dict)  # a `NCCL_X set by environment to Y`
    # the network NCCL uses, `IB`: from `Using network IB` or `NET/IB : Using [0]mlx5_0:1/IB`
    network: str | None = None
    net: str | None = None  # a `NET/...: Using` line's network and devices
    bootstrap: str | None = None
    ip: str | None = None  # the IPv4 address a bootstrap or `NET/Socket` line uses
    cuda_driver: str | None = None


@dataclass(frozen=True)
class ProgressFacts:
    """The last training progress line of a rank (or a stream with no rank)."""

    step: int | None
    total_steps: int | None
    epoch: float | None
    non_finite: bool = False  # the line prints a metric as nan or inf (`loss nan`)
    loss_non_finite: bool = False  # ... and that metric is the loss (`loss: nan`)


@dataclass(frozen=True)
class ProcessGroupTag:
    """`[PG ID 0 PG GUID 0(default_pg) Rank 3]` at the start of a c10d message."""

    pg_id: int
    guid: str | None
    desc: str | None


@dataclass(frozen=True)
class WatchdogTimeout:
    """`Watchdog caught collective operation timeout: WorkNCCL(SeqNum=.., OpType=.., ...)`."""

    # op as the record prints it, lowercased (`allreduce`), seq, timeout_ms and numel_in
    collective: CollectiveRef
    numel_out: int | None = None
    ran_ms: int | None = None  # `ran for N milliseconds before timing out`


@dataclass(frozen=True)
class WatchdogProgress:
    """The watchdog's summary of a process group: last enqueued and completed work."""

    seq: int
    last_enqueued: int
    last_completed: int


@dataclass(frozen=True)
class NcclErrorNote:
    """`NCCL error in: file.cpp:12, <reason>, NCCL version 2.21.5`."""

    reason: str
    version: str | None


@dataclass(frozen=True)
class GlooTimeout:
    """gloo's `Timed out waiting Nms for recv operation to complete`: a pair's wait for its
    peer, named by its transport step (recv/send), not by the collective."""

    step: str  # recv | send
    timeout_ms: int


@dataclass(frozen=True)
class C10dFacts:
    """What a c10d / ProcessGroupNCCL message names (read with `rules/log_shapes.yaml`)."""

    rank: int | None = None  # the reporting rank: the tag the message starts with
    process_group: ProcessGroupTag | None = None
    timeout: WatchdogTimeout | None = None
    watchdog_progress: WatchdogProgress | None = None
    stuck_s: int | None = None  # the watchdog thread stuck for this many seconds
    watchdog_terminated: bool = False  # `thread terminated with exception`
    dump_signal_from_rank: int | None = None  # a flight-recorder dump asked for by that rank
    nccl_error: NcclErrorNote | None = None
    gloo_timeout: GlooTimeout | None = None


@dataclass(frozen=True)
class RaisedException:
    """The exception a traceback, an error line or a torchrun error file names."""

    exc_type: str | None
    exc_message: str | None


@dataclass(frozen=True)
class LineNotice:
    """What a launcher, scheduler or job line says, as its line template (`rules/templates.yaml`,
    `attrs`) reads it. Each template fills the fields it names; the rest stay None."""

    # a process's end as the launcher reports it
    exitcode: int | None = None
    signal: str | None = None  # `SIGTERM`
    launcher: str | None = None  # torchrun | deepspeed | srun
    binary: str | None = None
    names_last_spawned: bool | None = None  # the deepspeed launcher names its last rank
    # a process the line is about, and what happened to it
    target_pid: int | None = None
    process: str | None = None  # the kernel's name of a killed process
    # `victim`: killed by the launcher, not failing on its own; `launcher`: the process the
    # line is about is the launcher itself, not a worker
    role: str | None = None
    action: str | None = None
    reason: str | None = None  # `oom`, or Slurm's reason (`TIME LIMIT`; None: a user's scancel)
    oom_kills: int | None = None
    core_dumped: bool | None = None
    # the launcher's worker group and rendezvous
    worker_group: str | None = None
    attempts_left: int | None = None
    max_attempts: int | None = None
    rendezvous: bool | None = None
    world_size: int | None = None
    # the steps the training loop will run, as its printed config says (`max_iters = 6000`)
    total_steps: int | None = None
    data_parallel_size: int | None = None
    # the scheduler
    slurm: str | None = None  # what Slurm cancelled: `job` or `step`
    job: str | None = None  # its id, `1234.0`
    node: str | None = None
    slurm_tasks: str | None = None
    task: int | None = None
    scheduler_end: str | None = None  # LSF's / PBS's word for the end (`WALLTIME`)
    # the job's own word on how it ended
    end: str | None = None  # succeeded | stopped | failed
    stop: str | None = None  # why it stopped (a key of `rules/outcome.yaml` stop reasons)
    non_finite: bool | None = None  # a metric went nan / inf


LINE_NOTICE_FIELDS = frozenset(LineNotice.__dataclass_fields__)


def log_frames(payload: object) -> tuple[LogFrame, ...]:
    """The frames of a log's traceback or faulthandler record, in the order printed."""
    if isinstance(payload, (TracebackFacts, FaultHandlerFacts)):
        return payload.frames
    return ()


Payload = (
    FlightRecorderDump
    | PySpyDump
    | RankExit
    | EnvReport
    | TracebackFacts
    | FaultHandlerFacts
    | CppExceptionFacts
    | LogLineFacts
    | NcclLineFacts
    | ProgressFacts
)


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
    # what only the parser and its tests read (no later stage reads a key of it)
    attrs: Mapping[str, Any] = field(default_factory=dict, compare=False)
    payload: Payload | None = field(default=None, compare=False)  # the record, by kind
    traceback: Traceback | None = field(default=None, compare=False)  # a TRACEBACK event's
    exception: RaisedException | None = field(default=None, compare=False)
    c10d: C10dFacts | None = field(default=None, compare=False)
    notice: LineNotice | None = field(default=None, compare=False)  # a line template's facts
    # where each line of `text` sits in its file, when not consecutive (other lines between)
    line_numbers: tuple[int | None, ...] | None = field(default=None, compare=False)
    # a line with no stamp of its own: the latest time the file printed before it
    time_before: float | None = field(default=None, compare=False)
    # ... the latest its own output stream printed before it, the launcher's first after it
    stream_time_before: float | None = field(default=None, compare=False)
    time_after: float | None = field(default=None, compare=False)
    # the rank a c10d tag near the start of an error's text names (`[Rank 2]`, wherever it
    # stands there): its rank when neither the line's prefix nor its file says
    tagged_rank: int | None = field(default=None, compare=False)


@dataclass(frozen=True)
class EarlierJobs:
    """The head of a file that earlier runs wrote to before this job appended its own output
    (an `#SBATCH --output` without `%j`, `nohup ... >> nohup.out`): left out of this job's
    diagnosis."""

    last_line: int  # the last line an earlier run wrote (its end line)
    jobs: int  # how many earlier runs
    # how they were told apart: "slurm" (the job ids of Slurm's end lines) or "exception"
    # (a process that an uncaught exception ended, before a later run's end line)
    by: str = "slurm"


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
    # The text itself of a paste (`parsers.parse_text`, up to MAX_PASTE bytes): the rules read
    # it whole where a message spans lines or stands on a line no event kept (classify).
    paste: str | None = None
    # set when earlier jobs' output heads the file: their events are left out of `events`
    earlier_jobs: EarlierJobs | None = None
