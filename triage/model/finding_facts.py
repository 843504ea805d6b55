"""The kinds of findings, and what each kind knows beyond its summary and ranks: one frozen
dataclass of facts per kind.

Rules name these fields: `{seq}` in an action, `where: {mismatch: '^op$'}` in a match. The
knowledge loader checks every such name against the finding kind's fields (`names_of`), and the
rule engine reads the attributes (`FindingFacts.value`, `FindingFacts.values`). A field left
at None (or empty) is a fact this finding does not know.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from enum import Enum
from typing import Any


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
class FindingFacts:
    """The facts of a finding kind that has none beyond its summary and ranks (and the base
    of those that have some)."""

    @classmethod
    def names(cls) -> frozenset[str]:
        """The fact names a rule may use for this kind."""
        return frozenset(f.name for f in fields(cls))

    def value(self, name: str) -> Any:
        """One fact by a name the loader checked; None where this finding does not know it."""
        got = getattr(self, name)
        return None if _empty(got) else got

    def values(self) -> dict[str, Any]:
        """Every fact of this kind by name, an unknown one as None: a finding's own fact is
        never filled in from the job's (a stack outlier's frame is not the first failure's)."""
        return {f.name: self.value(f.name) for f in fields(self)}


def _empty(value: Any) -> bool:
    return value is None or (isinstance(value, (tuple, list, Mapping)) and not value)


@dataclass(frozen=True)
class FirstFailureFacts(FindingFacts):
    scores: Mapping[int, float] = field(default_factory=dict)  # the culprit vote, best first
    torchrun_root_cause_rank: int | None = None  # the rank torchrun's summary named


@dataclass(frozen=True)
class CascadeFacts(FindingFacts):
    families: Mapping[str, int] = field(default_factory=dict)  # cascade family -> errors


@dataclass(frozen=True)
class HangFacts(FindingFacts):
    detected: bool = False  # a hang, or (False) the crash the survivors saw instead
    pg: str | None = None
    # the collective's name as its record says it (the op, else the profiling name)
    collective: str | None = None
    op: str | None = None  # the op alone, where the evidence names it
    shape: HangShape | None = None  # what the rank(s) the others waited for were doing
    # the waiters stood in process-group setup or a rendezvous: no collective ran, so nothing
    # about collectives (their order, their work, their timeout) explains the wait
    in_setup: bool = False


@dataclass(frozen=True)
class LaggingRankFacts(FindingFacts):
    pg: str | None = None
    seq: int | None = None  # the collective the others wait in
    op: str | None = None
    last_enqueued: Mapping[int, int | None] = field(default_factory=dict)  # rank -> seq
    waits_in_group: tuple[str, ...] = ()  # the other process groups their latest record is on
    # how the job ended: hang (the others waited for them) | error (the others got an error at
    # once: where each rank stood when the job failed, nobody waited)
    ended: str | None = None


@dataclass(frozen=True)
class MissingRankFacts(FindingFacts):
    # a process group's members that left no flight-recorder dump
    pg: str | None = None
    members: int | None = None
    missing: tuple[int, ...] = ()
    # the ranks of a node that never joined the launcher's rendezvous
    nnodes: int | None = None
    nproc_per_node: int | None = None
    node_ranks_seen: tuple[int, ...] = ()
    # ranks that printed no error while the others failed
    world_size: int | None = None
    silent: tuple[int, ...] = ()
    silent_ranks: str | None = None  # of the finding's ranks, those that printed nothing: `0-2, 5`
    ended: str | None = None  # of a missing dump: how the job ended, hang | error


@dataclass(frozen=True)
class CollectiveMismatchFacts(FindingFacts):
    pg: str | None = None
    seq: int | None = None
    mismatch: str | None = None  # what differs: op | size | dtype
    pattern: HangShape | None = None  # differing | diverged | left_loop
    ops: Mapping[int, str | None] = field(default_factory=dict)  # rank -> its collective
    sizes: Mapping[int, tuple[tuple[int, ...], ...]] = field(default_factory=dict)
    dtypes: Mapping[int, tuple[str, ...]] = field(default_factory=dict)
    ended: str | None = None  # how the job ended: hang | error


@dataclass(frozen=True)
class StackOutlierFacts(FindingFacts):
    stack_top: str = ""  # where the outlier's main thread stood
    majority_top: str = ""  # ... and the majority's
    in_collective: bool = False  # in a collective of its own (another call site), or busy
    user_frame: str | None = None  # the outlier's own frame: `fn (file:line)`
    clusters: tuple[tuple[str, str], ...] = ()  # (ranks, top frame) of every stack group


@dataclass(frozen=True)
class ProgressDivergenceFacts(FindingFacts):
    unit: str = ""  # step | iteration | epoch | ...
    majority: float | None = None  # the majority's last one
    last: Mapping[int, float] = field(default_factory=dict)  # rank -> its last one
    step: float | None = None  # where a rank's metric went non-finite
    non_finite: tuple[int, ...] = ()
    # every stream's last progress line reports the loss as nan/inf: the training diverged
    loss_diverged: bool = False


@dataclass(frozen=True)
class RankExitFacts(FindingFacts):
    exitcode: int | None = None
    signal: str | None = None  # SIGKILL, ...
    meaning: str = ""
    count: int = 0  # workers that ended this way
    # the launcher's words that the program never started (slurmstepd's `execve(): ...`): the
    # status is that failure's errno, not the program's own
    not_started: str | None = None


@dataclass(frozen=True)
class RestartFacts(FindingFacts):
    attempts: int = 0
    attempt_ids: tuple[int, ...] = ()
    max_restarts: int | None = None


@dataclass(frozen=True)
class SettingFacts(FindingFacts):
    """A version, setting or transport that differs across ranks or hosts (the facts of
    version_mismatch, env_mismatch and transport_mismatch)."""

    name: str = ""  # `torch`, `NCCL_SOCKET_IFNAME`, `NCCL transport`, `nranks`
    by_value: Mapping[str, Any] = field(default_factory=dict)  # value -> where it was seen


@dataclass(frozen=True)
class FrWindowFacts(FindingFacts):
    dumps: int = 0
    entries_kept: int = 0
    entries_held: int = 0


# Each finding kind's facts
FACTS_OF: Mapping[FindingKind, type[FindingFacts]] = {
    FindingKind.FIRST_FAILURE: FirstFailureFacts,
    FindingKind.CASCADE: CascadeFacts,
    FindingKind.HANG: HangFacts,
    FindingKind.LAGGING_RANK: LaggingRankFacts,
    FindingKind.MISSING_RANK: MissingRankFacts,
    FindingKind.COLLECTIVE_MISMATCH: CollectiveMismatchFacts,
    FindingKind.STACK_OUTLIER: StackOutlierFacts,
    FindingKind.PROGRESS_DIVERGENCE: ProgressDivergenceFacts,
    FindingKind.RANK_EXIT: RankExitFacts,
    FindingKind.RESTART: RestartFacts,
    FindingKind.VERSION_MISMATCH: SettingFacts,
    FindingKind.ENV_MISMATCH: SettingFacts,
    FindingKind.TRANSPORT_MISMATCH: SettingFacts,
    FindingKind.FR_WINDOW: FrWindowFacts,
    FindingKind.ANALYSIS_ERROR: FindingFacts,
}


def names_of(kind: FindingKind | str) -> frozenset[str]:
    """The fact names a finding of this kind has (ValueError for an unknown kind)."""
    return FACTS_OF[FindingKind(kind)].names()
