"""Collect: the events of all inputs, sorted by what the cross-rank analysis does with them.

Flight-recorder dumps, py-spy stacks and progress lines go to their own analyses; every other
event is placed on its rank and clock domain with its role (initiating, cascade, context).
Clock anchors (NCCL communicator inits) and the IP each host bootstraps from are noted on the
way, and the world size is worked out from everything that names a rank.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from triage import knowledge, regex_cache
from triage.analysis import exits, flight_recorder, launcher, pyspy
from triage.analysis.cascade import ERROR_KINDS, WATCHDOG_FAMILIES, Role, classify_event
from triage.analysis.ranks import RankIndex, event_rank
from triage.knowledge.routine import Routine
from triage.model import (
    CppExceptionFacts,
    Event,
    EventKind,
    FaultHandlerFacts,
    FlightRecorderDump,
    LineNotice,
    NcclLineFacts,
    ParsedSource,
    PySpyDump,
    SourceKind,
    TracebackFacts,
)

_CONTEXT = Role("context", None, 0.0)
# a task the launcher itself killed while it ended the step: a survivor, not a cause
_KILLED_BY_LAUNCHER = Role("cascade", "killed_by_launcher", 0.0)
# a fault of a later job step, after an earlier step of the same job had failed
_LATER_STEP = Role("context", None, 0.0)
# the abort a process group's watchdog ends its process with (`_aborted_by_the_watchdog`)
_WATCHDOG_ABORT = Role("cascade", "comm_aborted", 0.0)
# an error a rank raised after its own watchdog caught a collective timeout: what it ran
# next needed that collective's result (a barrier before reading a file a peer writes)
_AFTER_ITS_TIMEOUT = Role("cascade", "collective_timeout", 0.0)


@dataclass
class Collected:
    """What the inputs hold, sorted by use."""

    # every event that is not a dump, a stack or a progress line: its rank, clock domain, role
    placed: list[tuple[Event, int | None, str, Role]] = field(default_factory=list)
    fr_dumps: list[flight_recorder.FRDump] = field(default_factory=list)
    stacks: list[pyspy.RankStack] = field(default_factory=list)
    unmatched_stacks: list[PySpyDump] = field(default_factory=list)  # dumps of no known rank
    progress_events: list[tuple[int, Event]] = field(default_factory=list)
    # clock anchors: one moment seen from several clock domains (hosts)
    anchors: dict[object, dict[str, float]] = field(default_factory=lambda: defaultdict(dict))
    ranks_seen: set[int] = field(default_factory=set)
    ranks_with_events: set[int] = field(default_factory=set)  # ranks that printed an error
    hosts: set[str] = field(default_factory=set)
    ip_hosts: dict[str, str] = field(default_factory=dict)  # bootstrap IP -> host
    # real rank logs are here: a loose text file beside them is a note, not the job's output
    loose_text: bool = False
    exit_records: list[exits.ExitRecord] = field(default_factory=list)
    # tasks the launcher killed while it ended the step (`_killed_with_the_step`)
    launcher_victims: list[Event] = field(default_factory=list)
    # faults of a later step of a job whose earlier step had already failed (`_later_steps_from`)
    later_step_faults: list[Event] = field(default_factory=list)


@dataclass(frozen=True)
class World:
    size: int | None
    explicit: bool  # stated by the job (a log, the launcher, a dump), not guessed from ranks seen


def collect(
    parsed: Sequence[ParsedSource],
    index: RankIndex,
    kb: knowledge.Knowledge,
    routine: Routine | None,
) -> Collected:
    out = Collected()
    out.loose_text = any(
        ps.source.kind in (SourceKind.RANK_LOG, SourceKind.NCCL) and ps.events for ps in parsed
    )
    for ps in parsed:
        if ps.source.host:
            out.hosts.add(ps.source.host)
        marks = _marks(ps)
        watchdog = _WatchdogLines()
        for ev in ps.events:
            _one(out, ps, ev, index, kb, routine, marks, watchdog)
    out.exit_records = exits.collect_exits(parsed, index, kb)
    for rec in out.exit_records:
        if rec.exit.rank is not None:
            out.ranks_seen.add(rec.exit.rank)
        if rec.exit.host:
            out.hosts.add(rec.exit.host)
    return out


def _one(
    out: Collected,
    ps: ParsedSource,
    ev: Event,
    index: RankIndex,
    kb: knowledge.Knowledge,
    routine: Routine | None,
    marks: _SourceMarks,
    watchdog: _WatchdogLines,
) -> None:
    rank = event_rank(ev, index, ps.source.rank)
    host = ev.host or ps.source.host or (index.host_of_rank.get(rank) if rank is not None else None)
    if host:
        out.hosts.add(host)
    domain = host or ""
    if rank is not None:
        out.ranks_seen.add(rank)
    payload = ev.payload
    if ev.kind is EventKind.FLIGHT_RECORDER and isinstance(payload, FlightRecorderDump):
        if rank is not None:
            out.fr_dumps.append(flight_recorder.FRDump(rank, payload, ev, ps.source.attempt))
        return
    if ev.kind is EventKind.PYSPY and isinstance(payload, PySpyDump):
        r = rank if rank is not None else index.rank_for(payload.pid, host)
        if r is None:
            out.unmatched_stacks.append(payload)
        else:
            out.stacks.append(pyspy.RankStack(r, payload, ev))
            out.ranks_seen.add(r)
        return
    if ev.kind is EventKind.PROGRESS and rank is not None:
        out.progress_events.append((rank, ev))
        return
    if ev.kind is EventKind.NCCL_COMM and ev.time is not None:
        # the communicator's id as the NCCL parser read it from `Init COMPLETE`
        comm = ev.payload.comm_id if isinstance(ev.payload, NcclLineFacts) else None
        if comm is not None:
            out.anchors[("comm", str(comm))][domain] = ev.time
    ip = payload.ip if isinstance(payload, NcclLineFacts) else None
    if ip and host and not ip.startswith("127."):
        # the address a bootstrap or socket line names (a loopback one tells no host apart)
        out.ip_hosts.setdefault(ip, host)
    role = classify_event(ev, kb)
    ordinary = routine.which(ev.text) if role.role != "context" and routine is not None else None
    if ordinary is not None and not (ordinary.last_words and ev.line == marks.last_said):
        # what healthy jobs print (rules/routine.yaml) starts no failure, unless it is the
        # message a program dies of and nothing but the exit report follows it
        role = _CONTEXT
    if role.role == "cascade" and role.family in WATCHDOG_FAMILIES and ev.line is not None:
        watchdog.saw(rank, ev.line)
    elif role.role == "initiating" and _aborted_by_the_watchdog(ev, watchdog.since(rank)):
        role = _WATCHDOG_ABORT
    elif role.role == "initiating" and _after_its_own_timeout(ev, rank, watchdog):
        role = _AFTER_ITS_TIMEOUT
    if role.role == "initiating" and (
        _killed_with_the_step(ev, marks.step_killed_from)
        or _dumped_at_the_stop(ev, marks.stop_sent_from)
    ):
        role = _KILLED_BY_LAUNCHER
        out.launcher_victims.append(ev)
    elif (
        role.role == "initiating"
        and marks.later_steps_from is not None
        and ev.line is not None
        and ev.line > marks.later_steps_from
    ):
        role = _LATER_STEP
        out.later_step_faults.append(ev)
    if out.loose_text and ps.source.kind is SourceKind.TEXT and role.role != "context":
        # a stray note or README beside real logs narrates the failure; it is not one
        role = _CONTEXT
    out.placed.append((ev, rank, domain, role))
    if rank is not None and ev.kind in ERROR_KINDS:
        out.ranks_with_events.add(rank)


@dataclass
class _WatchdogLines:
    """Where a source's process-group watchdogs first reported a timeout or a torn-down
    communicator, per rank and on the whole stream (ranks that interleave their teardown
    lines on one stream often leave them without a rank of their own)."""

    first: int | None = None
    by_rank: dict[int | None, int] = field(default_factory=dict)

    def saw(self, rank: int | None, line: int) -> None:
        self.by_rank.setdefault(rank, line)
        if self.first is None:
            self.first = line

    def since(self, rank: int | None) -> int | None:
        """The line after which this rank's process is being taken down by its watchdog."""
        return self.by_rank.get(rank, self.first)


@dataclass(frozen=True)
class _SourceMarks:
    """Lines of one source that change what the events after them are."""

    step_killed_from: int | None  # the launcher kills its whole step (`_step_kill_line`)
    stop_sent_from: int | None  # the launcher sends its workers a stop (`_stop_signal_line`)
    later_steps_from: int | None  # a later job step begins (`_later_steps_from`)
    last_said: int | None  # the program's own last line (`_last_said`)


def _marks(ps: ParsedSource) -> _SourceMarks:
    return _SourceMarks(
        _step_kill_line(ps), _stop_signal_line(ps), _later_steps_from(ps), _last_said(ps)
    )


# what a launcher or the ingest adds after a program's own last line
_AFTER_THE_END = (EventKind.AGENT, EventKind.RANK_EXIT, EventKind.INPUT_WARNING)


def _last_said(ps: ParsedSource) -> int | None:
    """The line of the last event a program printed in this source (a launcher's exit report
    after it does not count): a routine line there (`last_words`) is what it died of."""
    lines = [ev.line for ev in ps.events if ev.kind not in _AFTER_THE_END and ev.line is not None]
    return max(lines, default=None)


def _launcher_notices(ps: ParsedSource) -> list[tuple[int, LineNotice]]:
    """(line, facts) of every launcher line of a source that a line template read."""
    return [
        (ev.line, ev.notice)
        for ev in ps.events
        if ev.kind is EventKind.AGENT and ev.notice is not None and ev.line is not None
    ]


def _step_kill_line(ps: ParsedSource) -> int | None:
    """The first line where the launcher says it kills its whole step (a line template's
    `action: kill_step`: srun's `Terminating StepId=N.M`, which it follows with SIGKILL), or
    where Slurm says it cancelled the step or the job (`*** STEP N.M ... CANCELLED AT`:
    slurmstepd then signals and kills every task of it)."""
    kills = [line for line, n in _launcher_notices(ps) if n.action == "kill_step"]
    kills += [
        ev.line
        for ev in ps.events
        if ev.kind is EventKind.SIGNAL
        and ev.notice is not None
        and ev.notice.slurm in ("step", "job")
        and ev.line is not None
    ]
    return min(kills, default=None)


def _later_steps_from(ps: ParsedSource) -> int | None:
    """Where a job's first failed step ended, when a later step of the same job was ended
    too: the line of the first step's kill (srun's `Terminating StepId=N.0`, then
    `Terminating StepId=N.1`). srun ends a step when one of its tasks fails, so the first
    step failed on its own; a later step (an evaluation, a conversion, a second `srun` of the
    batch script) ran after it, often on what the failed step never wrote. Its faults are
    the job's too, but not where the job started failing."""
    kills = [(line, n.job) for line, n in _launcher_notices(ps) if n.action == "kill_step"]
    if len({job for _, job in kills if job}) < 2:
        return None
    return min(line for line, job in kills if job)


def _stop_signal_line(ps: ParsedSource) -> int | None:
    """The first line where the launcher says it stops a worker (a line template's
    `role: victim`: torchrun's `Sending process N closing signal SIGTERM`, DeepSpeed's
    `Killing subprocess N`)."""
    return min((line for line, n in _launcher_notices(ps) if n.role == "victim"), default=None)


def _dumped_at_the_stop(ev: Event, stop_sent_from: int | None) -> bool:
    """A stack of frames alone (no exception line, no `Traceback` header) printed after the
    launcher sent its closing signal: a worker's faulthandler registered for that signal
    (`faulthandler.register(SIGTERM)` prints `Stack (most recent call first):` and the
    frames) shows where the stop found it; the stop caused it, it caused nothing."""
    facts = ev.payload
    return (
        stop_sent_from is not None
        and ev.kind is EventKind.TRACEBACK
        and isinstance(facts, TracebackFacts)
        and facts.headerless
        and facts.truncated  # no exception type nor message: nothing was raised
        and ev.line is not None
        and ev.line > stop_sent_from
    )


# a piece of an interleaved `terminate called ... 'c10::DistBackendError'` line on its own
_DIST_BACKEND_PIECE = regex_cache.compile(r"(?:c10::DistBackendError|')+\s*")


def _aborted_by_the_watchdog(ev: Event, watchdog_from: int | None) -> bool:
    """How a process ends after a process-group watchdog on its stream caught a timeout or
    tore its communicator down: ProcessGroupNCCL rethrows what it caught as an uncaught
    c10::DistBackendError (`To avoid data inconsistency, we are taking the entire process
    down`), std::terminate prints `terminate called after throwing an instance of
    'c10::DistBackendError'` and aborts, and faulthandler reports the SIGABRT (`Fatal Python
    error: Aborted`). That ending is the watchdog's doing, not a failure of its own. (Several
    ranks writing to one stream interleave these lines, what() included; a what() that names
    another failure keeps its event initiating, as the cascade file decides.)"""
    if watchdog_from is None or ev.line is None or ev.line <= watchdog_from:
        return False
    facts = ev.payload
    if ev.kind is EventKind.SIGNAL and isinstance(facts, FaultHandlerFacts):
        return facts.signal == "SIGABRT"
    first = ev.text.split("\n", 1)[0]
    if ev.kind is EventKind.CPP_EXCEPTION and isinstance(facts, CppExceptionFacts):
        # interleaved writers garble the class name around it; what() is the test
        return "c10::DistBackendError" in first and not (facts.what or "").strip()
    # a piece of such an interleaved `terminate called ...` line, cut off on a line of its own
    return ev.kind is EventKind.ERROR_LINE and _DIST_BACKEND_PIECE.fullmatch(first) is not None


def _after_its_own_timeout(ev: Event, rank: int | None, watchdog: _WatchdogLines) -> bool:
    """An error a rank printed after its own watchdog reported a collective timeout (or its
    communicator torn down) on the same stream: the rank was waiting on its peers, and what
    failed next depended on the collective that never completed. Only the rank's own
    watchdog counts: another rank's says nothing of this one."""
    own = watchdog.by_rank.get(rank) if rank is not None else None
    return own is not None and ev.line is not None and ev.line > own


def _killed_with_the_step(ev: Event, step_killed_from: int | None) -> bool:
    """A task the launcher reports killed (SIGKILL, no OOM said) after the line where it said
    it kills the step: the launcher's victim. Before that line, a `Killed` task stays a
    candidate cause (the OOM killer without a cgroup report, a person's `kill -9`)."""
    notice = ev.notice
    return (
        step_killed_from is not None
        and ev.kind is EventKind.SIGNAL
        and notice is not None
        and notice.slurm_tasks is not None
        and notice.signal == "SIGKILL"
        and notice.reason != "oom"
        and ev.line is not None
        and ev.line > step_killed_from
    )


def world(index: RankIndex, ranks_seen: set[int], topo: launcher.Topology) -> World:
    """The world size the logs and the launcher state, or the ranks seen imply."""
    size = index.world_size
    explicit = size is not None
    if ranks_seen:
        size = max(size or 0, max(ranks_seen) + 1)
    if topo.world_size:
        size = max(size or 0, topo.world_size)
        explicit = True
    return World(size, explicit)


def with_dumps(w: World, fr: flight_recorder.FRAnalysis) -> World:
    """The world once the flight recorder's process groups name their members."""
    size, explicit = w.size, w.explicit
    for rep in fr.reports:
        size = max(size or 0, max(rep.members, default=-1) + 1) or None
        explicit = True
    return World(size, explicit)


def add_dump_anchors(
    anchors: dict[object, dict[str, float]], fr: flight_recorder.FRAnalysis, index: RankIndex
) -> None:
    """A collective's creation time on each rank's clock is one moment seen from each host."""
    for (pg, seq), times in fr.anchors.items():
        for r, t_ns in times.items():
            dom = index.host_of_rank.get(r, "")
            anchors[("fr", pg, seq)].setdefault(dom, t_ns / 1e9)
