"""The one data model that every pipeline stage passes to the next.

ingest -> Source; parse -> Event (with typed payloads for structured inputs);
correlate -> Analysis (Finding, RankExit, HangReport, FailureRef);
classify -> Classification (ScoredLabel, Evidence, SimilarCase);
recommend -> FixRecommendation; everything ends in one Diagnosis, which renders to the
JSON schema `triage.diagnosis/1` (see DESIGN.md) through `Diagnosis.to_dict()`.

All records are frozen dataclasses, except flight-recorder entries and stack frames: those are
NamedTuples (a 1,024-rank job loads millions, and tuples build fastest). Stages never hand each
other raw dicts; the only dicts are `attrs` (named regex captures and small facts), which are
data, not structure.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from enum import Enum
from typing import IO, Any, Literal, NamedTuple

SCHEMA = "triage.diagnosis/1"


class SourceKind(str, Enum):
    """What an input is, found by sniffing its content (never by its name alone)."""

    RANK_LOG = "rank_log"
    NCCL = "nccl"
    PYSPY = "pyspy"
    FLIGHT_RECORDER = "flight_recorder"
    ELASTIC_ERROR = "elastic_error"
    ENV_REPORT = "env_report"
    TEXT = "text"


class EventKind(str, Enum):
    """What one parsed event is. Rules filter on these; correlate reads the payloads."""

    TRACEBACK = "traceback"  # a whole Python traceback (chained exceptions kept)
    CPP_EXCEPTION = "cpp_exception"  # `terminate called after throwing ...` + `what():`
    ERROR_LINE = "error_line"  # one error-level line: glog E/F, logging ERROR, `Error:`
    WARNING_LINE = "warning_line"  # one warning-level line worth keeping
    AGENT = "agent"  # torchrun / deepspeed launcher lines (exit codes, SIGTERM sent)
    RANK_EXIT = "rank_exit"  # one rank's exit (payload RankExit): summary block, launcher
    NCCL_WARN = "nccl_warn"  # `NCCL WARN ...`
    NCCL_INFO = "nccl_info"  # NCCL INFO lines worth keeping (version, transport, errors)
    NCCL_COMM = "nccl_comm"  # communicator init: rank <-> host/pid/device (attrs)
    PROGRESS = "progress"  # last training progress seen on a rank (attrs: step, ...)
    SIGNAL = "signal"  # a signal or kill reported in text (Slurm OOM, Killed, SIGTERM)
    FLIGHT_RECORDER = "flight_recorder"  # payload FlightRecorderDump
    PYSPY = "pyspy"  # payload PySpyDump
    ELASTIC_ERROR = "elastic_error"  # payload RankExit built from error.json
    ENV_REPORT = "env_report"  # payload EnvReport
    INPUT_WARNING = "input_warning"  # the parser could not read something; text says why


class OutcomeKind(str, Enum):
    """What became of the job as a whole (DESIGN.md: `outcome.id`)."""

    SUCCEEDED = "succeeded"  # ran to its end and exited normally
    STOPPED = "stopped"  # stopped on purpose: time limit, preemption, a user, Ctrl-C, a signal
    FAILED = "failed"
    HUNG = "hung"  # ranks waited: a timeout fired, a collective never completed
    INCOMPLETE = "incomplete"  # the logs end while the job still ran normally
    UNKNOWN = "unknown"


class Level(str, Enum):
    DEBUG = "debug"
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"
    FATAL = "fatal"


class InputNote(str, Enum):
    """Warnings about an input that are facts about the job, not read failures: a killed
    rank's zero-byte stderr.log, a rank's empty log folder (`inputs[].warnings` says them)."""

    EMPTY_FILE = "empty file"
    EMPTY_DIRECTORY = "empty directory: nothing to read"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Source:
    """One input: a file on disk or a member of an archive.

    `open` returns a fresh binary stream each time; archive members are read in place,
    never extracted. `path` is what the user sees (`bundle.tgz!attempt_0/1/stderr.log`).
    """

    path: str
    kind: SourceKind
    size: int
    open: Callable[[], IO[bytes]] = field(repr=False, compare=False)
    rank: int | None = None
    local_rank: int | None = None
    host: str | None = None
    attempt: int | None = None
    warnings: tuple[str, ...] = ()
    # frees the temp space the content takes (a member copied out of a compressed tar); the
    # pipeline calls it once the source is parsed; None when there is nothing to free
    release: Callable[[], None] | None = field(default=None, repr=False, compare=False)


# --------------------------------------------------------------------------- payloads


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
    entries: tuple[FlightRecorderEntry, ...]
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


# --------------------------------------------------------------------------- correlate


@dataclass(frozen=True)
class EvidenceRef:
    source: str
    line: int | None
    rank: int | None
    text: str


class FindingKind(str, Enum):
    """What a finding is about; rules name these (`match: {finding: lagging_rank}`)."""

    FIRST_FAILURE = "first_failure"  # who started it
    CASCADE = "cascade"  # the errors that only followed
    HANG = "hang"  # the hang, or the crash the survivors saw instead
    LAGGING_RANK = "lagging_rank"  # behind the others in a process group's collectives
    MISSING_RANK = "missing_rank"  # never started, left no dump, or printed nothing
    COLLECTIVE_MISMATCH = "collective_mismatch"  # another collective, sizes or dtypes
    STACK_OUTLIER = "stack_outlier"  # py-spy: somewhere else than the others
    PROGRESS_DIVERGENCE = "progress_divergence"  # its last step or metric differs
    RANK_EXIT = "rank_exit"  # exits with a code or a signal
    RESTART = "restart"  # the launcher restarted the workers
    VERSION_MISMATCH = "version_mismatch"  # versions differ across ranks or hosts
    ENV_MISMATCH = "env_mismatch"  # settings differ
    TRANSPORT_MISMATCH = "transport_mismatch"  # NCCL transports differ
    FR_WINDOW = "fr_window"  # what of the flight-recorder dumps was read
    ANALYSIS_ERROR = "analysis_error"  # a bug of the analysis: culprit and hang unknown

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Finding:
    """One conclusion of the cross-rank analysis, checkable by a person."""

    kind: FindingKind
    summary: str  # one line a person can check
    ranks: tuple[int, ...] = ()
    evidence: tuple[EvidenceRef, ...] = ()
    # what rules may name and test (`{seq}`, `where: {mismatch: ...}`): the finding's facts
    facts: Mapping[str, Any] = field(default_factory=dict, compare=False)
    # the ranks whose own failure explains this finding (where they stood afterwards)
    consequence_of: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        # a kind given by its name is the kind (an unknown name is a bug: ValueError)
        object.__setattr__(self, "kind", FindingKind(self.kind))


@dataclass(frozen=True)
class FailureRef:
    rank: int | None
    host: str | None
    time: float | None
    source: str
    line: int | None
    text: str


class HangShape(str, Enum):
    """What the rank(s) the others waited for were doing (triage.analysis.hang_shape)."""

    FAILED = "failed"  # they had failed by themselves
    DIFFERING = "differing"  # the same collective with other sizes or dtypes
    DIVERGED = "diverged"  # another new collective at the same sequence number
    OTHER_GROUP = "other_group"  # a collective of another process group
    LEFT_LOOP = "left_loop"  # they stopped issuing the collective the others repeat
    BUSY_OUTSIDE_COLLECTIVES = "busy_outside_collectives"  # py-spy: in their own code
    ANOTHER_CALL_SITE = "another_call_site"  # py-spy: waiting at another call site
    BEHIND = "behind"  # only that they never arrived

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class HangReport:
    detected: bool
    lagging_ranks: tuple[int, ...]
    process_group: str | None
    collective: CollectiveRef | None  # op, seq id, sizes, dtypes where known
    # what happened, without the verdict: "rank(s) 3 never reached all_reduce #42 ..."
    account: str = ""
    shape: HangShape | None = None  # of a detected hang, where the evidence tells

    @property
    def explanation(self) -> str:
        """The verdict, then what happened: "hang: ..." or "no hang: ..." ("" when unsaid)."""
        if not self.account:
            return ""
        return f"{'hang' if self.detected else 'no hang'}: {self.account}"


@dataclass(frozen=True)
class TimelineEntry:
    time: float | None
    rank: int | None
    text: str
    source: str
    line: int | None
    role: str  # initiating | cascade | context


@dataclass(frozen=True)
class CollectiveProgress:
    """Where one rank stood in one process group's collectives (its flight-recorder dump)."""

    rank: int
    enqueued: int | None  # the last collective (sequence id) it called
    started: int | None  # ... that ran on the device (NCCL; None where the dump cannot tell)
    completed: int | None  # ... that finished (None where the dump cannot tell)


@dataclass(frozen=True)
class GroupProgress:
    """One process group across ranks: how far each rank got, who is behind or missing."""

    pg: str
    desc: str
    ranks: tuple[CollectiveProgress, ...]  # every rank that left a dump, by rank
    missing: tuple[int, ...] = ()  # members that left no dump
    lagging: tuple[int, ...] = ()  # behind the furthest rank
    stuck_seq: int | None = None  # the collective the others wait in
    stuck_op: str | None = None


@dataclass(frozen=True)
class StackGroup:
    """Ranks whose main thread stood at the same place (py-spy), biggest group first."""

    ranks: tuple[int, ...]
    frames: tuple[StackFrame, ...]  # innermost first, the top few
    waiting: bool  # inside a collective or a distributed wait
    outlier: bool  # the odd one out: somewhere else than the others


@dataclass(frozen=True)
class Outcome:
    """What became of the job, why we say so, and the lines that show it."""

    id: OutcomeKind
    why: str
    evidence: tuple[EvidenceRef, ...] = ()
    # a succeeded, stopped or incomplete job whose logs also hold a real fault (a rank's own
    # exception, a crash): the report says both
    fault_too: bool = False

    @property
    def clean(self) -> bool:
        """The job did not fail or hang, and nothing in its logs says a fault happened."""
        quiet = (OutcomeKind.SUCCEEDED, OutcomeKind.STOPPED, OutcomeKind.INCOMPLETE)
        return self.id in quiet and not self.fault_too


@dataclass(frozen=True)
class AnalysisFacts:
    """What correlate found about the job as a whole: later stages read these fields, and
    action templates and playbook conditions name them (`values()`: `{culprit_rank}`,
    `{collective}`, `{timeout_ms}`, `{torch}`, ...)."""

    world_size: int | None = None
    culprit_ranks: tuple[int, ...] = ()
    culprit_rank: int | None = None  # the lead culprit: the strongest case
    culprit_host: str | None = None
    hosts: tuple[str, ...] = ()
    # of the hang report, when there is one (hang: whether the survivors waited)
    hang: bool | None = None
    lagging_ranks: tuple[int, ...] | None = None
    collective: str | None = None  # the op's name
    seq: int | None = None
    timeout_ms: int | None = None
    pg: str | None = None
    # pg -> rank -> (last enqueued, last started, last completed), when dumps were read
    fr_status: Mapping[str, Mapping[int, tuple[int | None, int | None, int | None]]] | None = None
    fr_ranks_dumped: tuple[int, ...] | None = None
    missing_ranks: tuple[int, ...] = ()  # members of a process group that left no dump
    user_frame: str | None = None  # "function (file:line)" the first failure raised at
    last_progress: Mapping[int, Any] | None = None  # rank -> last step logged
    # the majority's versions across ranks
    torch: str | None = None
    nccl: str | None = None
    cuda: str | None = None
    python: str | None = None
    driver: str | None = None
    deepspeed: str | None = None
    gpu_models: str | None = None
    exitcode: int | None = None  # the culprit's own exit
    signal: str | None = None
    torchrun_root_cause_rank: int | None = None
    first_failure_text: str | None = None
    source_ranks: Mapping[str, int] = field(default_factory=dict)  # input path -> rank
    source_hosts: Mapping[str, str] = field(default_factory=dict)  # input path -> host
    frameworks: tuple[str, ...] = ()
    launchers: tuple[str, ...] = ()
    input_kinds: tuple[str, ...] = ()  # what the user gave (advice never asks for it again)
    analysis_error: str | None = None  # the analysis failed: culprit and hang are unknown

    def values(self) -> dict[str, Any]:
        """The facts by the names templates and conditions use; sequences as lists, facts
        not found left out."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None:
                continue
            if isinstance(value, tuple):
                value = list(value)
            elif isinstance(value, Mapping):
                value = dict(value)
            out[f.name] = value
        return out


@dataclass(frozen=True)
class Analysis:
    findings: tuple[Finding, ...] = ()
    first_failure: FailureRef | None = None
    culprit_ranks: tuple[int, ...] = ()
    hang: HangReport | None = None
    initiating_events: tuple[Event, ...] = ()  # the events that started it, best first
    cascade_events: tuple[Event, ...] = ()
    rank_exits: tuple[RankExit, ...] = ()
    timeline: tuple[TimelineEntry, ...] = ()
    facts: AnalysisFacts = field(default_factory=AnalysisFacts, compare=False)
    process_groups: tuple[GroupProgress, ...] = ()
    stack_groups: tuple[StackGroup, ...] = ()
    outcome: Outcome | None = None


# --------------------------------------------------------------------------- classify


@dataclass(frozen=True)
class ScoredLabel:
    id: str
    slug: str
    name: str
    score: float


@dataclass(frozen=True)
class Evidence:
    source: str
    line: int | None
    rank: int | None
    text: str
    why: str  # rule id or neighbour id


@dataclass(frozen=True)
class SimilarCase:
    id: str
    url: str | None
    score: float


@dataclass(frozen=True)
class Classification:
    symptoms: tuple[ScoredLabel, ...] = ()
    root_causes: tuple[ScoredLabel, ...] = ()
    stage: ScoredLabel | None = None
    fix_scores: Mapping[str, float] = field(default_factory=dict)  # fix id -> evidence score
    actions: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # fix id -> actions
    evidence: tuple[Evidence, ...] = ()
    similar_cases: tuple[SimilarCase, ...] = ()
    abstain_reason: str | None = None
    collect_next: tuple[str, ...] = ()  # on an abstention: the steps the reports list
    # no specific rule names a cause and the generic layer weighs several alike: the causes
    # shown are the neighbours' and the learned model's best guess
    cause_open: bool = False


# A root cause scored under this is right less often than wrong: reports call it a guess.
SURE_CAUSE = 0.5


# --------------------------------------------------------------------------- recommend


@dataclass(frozen=True)
class FixRecommendation:
    id: str
    slug: str
    name: str
    score: float
    actions: tuple[str, ...]
    why: str = ""


# --------------------------------------------------------------------------- diagnosis


@dataclass(frozen=True)
class InputSummary:
    path: str
    kind: SourceKind
    rank: int | None
    host: str | None
    warnings: tuple[str, ...] = ()
    events: int = 0


@dataclass(frozen=True)
class Diagnosis:
    summary: str
    symptoms: tuple[ScoredLabel, ...] = ()
    root_causes: tuple[ScoredLabel, ...] = ()
    stage: ScoredLabel | None = None
    fix_patterns: tuple[FixRecommendation, ...] = ()
    first_failure: FailureRef | None = None
    culprit_ranks: tuple[int, ...] = ()
    hang: HangReport | None = None
    evidence: tuple[Evidence, ...] = ()
    similar_cases: tuple[SimilarCase, ...] = ()
    inputs: tuple[InputSummary, ...] = ()
    findings: tuple[Finding, ...] = ()  # extra: shown in reports, not in the ★ schema keys
    timeline: tuple[TimelineEntry, ...] = ()
    # on an abstention, what to collect next, step by step (the reports show it; the JSON
    # carries the short form in `summary`)
    collect_next: tuple[str, ...] = ()
    # for the reports' pictures, not in the JSON: per-rank exits (no message: the evidence
    # quotes what matters), flight-recorder progress per group, py-spy stack groups
    rank_exits: tuple[RankExit, ...] = ()
    process_groups: tuple[GroupProgress, ...] = ()
    stack_groups: tuple[StackGroup, ...] = ()
    evidence_found: bool = True  # False: no input held anything triage could read
    outcome: Outcome | None = None
    cause_open: bool = False  # the causes are a guess (Classification.cause_open); not in JSON

    def to_dict(self) -> dict[str, Any]:
        """The ★ JSON diagnosis (schema triage.diagnosis/1), plus `findings`/`timeline`."""

        def label(x: ScoredLabel) -> dict[str, Any]:
            return {"id": x.id, "slug": x.slug, "name": x.name, "score": round(x.score, 3)}

        hang = None
        if self.hang is not None:
            hang = {
                "detected": self.hang.detected,
                "lagging_ranks": list(self.hang.lagging_ranks),
                "process_group": self.hang.process_group,
                "collective": self.hang.collective.as_dict() if self.hang.collective else None,
                "explanation": self.hang.explanation,
            }
        first = None
        if self.first_failure is not None:
            f = self.first_failure
            first = {
                "rank": f.rank,
                "host": f.host,
                "time": _iso(f.time),
                "source": f.source,
                "line": f.line,
                "text": f.text,
            }
        outcome = None
        if self.outcome is not None:
            outcome = {
                "id": self.outcome.id.value,
                "why": self.outcome.why,
                "evidence": [
                    {"source": e.source, "line": e.line, "rank": e.rank, "text": e.text}
                    for e in self.outcome.evidence
                ],
            }
        return {
            "schema": SCHEMA,
            "summary": self.summary,
            "outcome": outcome,
            "symptoms": [label(s) for s in self.symptoms],
            "root_causes": [label(r) for r in self.root_causes],
            "stage": {"id": self.stage.id, "slug": self.stage.slug} if self.stage else None,
            "fix_patterns": [
                {
                    "id": f.id,
                    "slug": f.slug,
                    "name": f.name,
                    "score": round(f.score, 3),
                    "actions": list(f.actions),
                    "why": f.why,
                }
                for f in self.fix_patterns
            ],
            "first_failure": first,
            "culprit_ranks": list(self.culprit_ranks),
            "hang": hang,
            "evidence": [
                {"source": e.source, "line": e.line, "rank": e.rank, "text": e.text, "why": e.why}
                for e in self.evidence
            ],
            "similar_cases": [
                {"id": c.id, "url": c.url, "score": round(c.score, 3)} for c in self.similar_cases
            ],
            "inputs": [
                {
                    "path": i.path,
                    "kind": i.kind.value,
                    "rank": i.rank,
                    "host": i.host,
                    "warnings": list(i.warnings),
                }
                for i in self.inputs
            ],
            "findings": [
                {"kind": f.kind.value, "summary": f.summary, "ranks": list(f.ranks)}
                for f in self.findings
            ],
            "timeline": [
                {
                    "time": _iso(t.time),
                    "rank": t.rank,
                    "role": t.role,
                    "text": t.text,
                    "source": t.source,
                    "line": t.line,
                }
                for t in self.timeline
            ],
        }


def _iso(epoch: float | None) -> str | None:
    if epoch is None:
        return None
    from datetime import datetime, timezone

    try:
        return datetime.fromtimestamp(epoch, tz=timezone.utc).isoformat(timespec="milliseconds")
    except (OverflowError, OSError, ValueError):  # NaN or a clock far outside any real run
        return None
