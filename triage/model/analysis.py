"""What correlate hands classify: the Analysis of the whole job (findings, the first failure,
the hang, the timeline, the outcome and the typed facts later stages read)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from triage.model.finding_facts import FACTS_OF, FindingFacts, FindingKind, HangShape
from triage.model.inputs import OutcomeKind
from triage.model.payloads import CollectiveRef, Event, RankExit, StackFrame


@dataclass(frozen=True)
class EvidenceRef:
    source: str
    line: int | None
    rank: int | None
    text: str


@dataclass(frozen=True)
class Finding:
    """One conclusion of the cross-rank analysis, checkable by a person."""

    kind: FindingKind
    summary: str  # one line a person can check
    ranks: tuple[int, ...] = ()
    evidence: tuple[EvidenceRef, ...] = ()
    # what rules may name and test (`{seq}`, `where: {mismatch: ...}`): the facts of its kind
    # (triage.model.finding_facts); left out, its kind's facts with nothing known
    facts: FindingFacts = field(default_factory=FindingFacts, compare=False)
    # the ranks whose own failure explains this finding (where they stood afterwards)
    consequence_of: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        # a kind given by its name is the kind (an unknown name is a bug: ValueError)
        kind = FindingKind(self.kind)
        object.__setattr__(self, "kind", kind)
        wanted = FACTS_OF[kind]
        if type(self.facts) is FindingFacts:
            object.__setattr__(self, "facts", wanted())
        elif type(self.facts) is not wanted:
            # a bug of the stage that made it: rules read this kind's fields
            raise TypeError(f"a {kind} finding's facts are {wanted.__name__}, not {self.facts!r}")


@dataclass(frozen=True)
class FailureRef:
    rank: int | None
    host: str | None
    time: float | None
    source: str
    line: int | None
    text: str
    # False: no error of the rank's own started it; `text` is the record that singles the rank
    # out (its flight-recorder entry), and another rank may have failed first
    own_error: bool = True
    time_resolution: float = 0.0  # seconds `time` leaves open (1.0: a stamp to the second)
    # the rank the quoted line is printed by, where the line says (`[rank1]:` on a console
    # the whole node writes); None: the file's rank or another rank's report about `rank`
    printed_by: int | None = None


@dataclass(frozen=True)
class HangReport:
    detected: bool
    lagging_ranks: tuple[int, ...]
    process_group: str | None
    collective: CollectiveRef | None  # op, seq id, sizes, dtypes where known
    # what happened, without the verdict: "rank(s) 3 never reached all_reduce #42 ..."
    account: str = ""
    shape: HangShape | None = None  # of a detected hang, where the evidence tells
    # who waited, where it was not the other ranks: "the launcher" (no rank had started)
    waiter: str = ""
    # the waiters stood in process-group setup or a rendezvous (py-spy): no collective ran
    in_setup: bool = False

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
    # a line without a stamp: the stamps before and after it in its own file (`time` is None)
    earliest: float | None = None
    latest: float | None = None
    # seconds `time` leaves open after it (1.0: a stamp to the second, torchrun's exits)
    resolution: float = 0.0


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
    setup: str = ""  # waiting in process-group setup or a rendezvous: the call (not a collective)


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
    # the same frame when it is the traceback's innermost: the user's own line raised, not a
    # library called from it
    raising_user_frame: str | None = None
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
    device: str | None = None  # "gpu" | "cpu": what the job ran on, where its evidence says
    # where in native code the job's C++ exception was thrown, as its own message says
    # (`gloo/transport/tcp/pair.cc:456`): the library and call a native stack would show
    native_origin: str | None = None
    # no rank is known to have got past process-group setup: py-spy shows waits in setup or a
    # rendezvous, and no step, flight-recorder entry or collective wait says otherwise
    stuck_in_setup: bool = False
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
    # tasks the launcher itself killed while it ended the step (srun's `Killed` after its
    # `Terminating StepId`): what they print says nothing about why the job failed
    launcher_victims: tuple[Event, ...] = ()
    # faults of a later job step (srun's second step) after an earlier step had failed: the
    # job's too, quoted, but not where it started failing
    later_step_faults: tuple[Event, ...] = ()
    rank_exits: tuple[RankExit, ...] = ()
    timeline: tuple[TimelineEntry, ...] = ()
    facts: AnalysisFacts = field(default_factory=AnalysisFacts, compare=False)
    process_groups: tuple[GroupProgress, ...] = ()
    stack_groups: tuple[StackGroup, ...] = ()
    outcome: Outcome | None = None
