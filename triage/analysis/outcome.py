"""What became of the job as a whole: succeeded, stopped, failed, hung, incomplete or unknown.

Most logs a user hands over are whole jobs, and most of a whole job's output is routine. The
outcome is decided from how the job *ended*, before any symptom is named:

* a stop on purpose (a scheduler's time limit or preemption, a user's scancel, Ctrl-C, a
  signal from outside) is `stopped`, and what the stop itself caused (KeyboardInterrupt or
  SignalException tracebacks, SIGTERM exits, the launcher killing its workers) is its
  consequence, not a failure; a fault *before* the stop still makes the job failed or hung;
* ranks that waited (a watchdog timeout, a collective that never completed) make it `hung`;
* a rank's own fault that training did not go on past (a traceback, a C++ exception, a kill,
  a non-zero exit) makes it `failed`; one it went on past is a fault the report still names;
* the launchers' and frameworks' own end lines (all processes exited 0, the training loop
  reported its end), or progress that reached its total, make it `succeeded`;
* progress and nothing else is `incomplete`: the log ends while the job still ran.

What each line means is knowledge: the end markers are line templates (`end:`, `stop:` attrs,
rules/templates.yaml), the reasons and stop exceptions are `kind: outcome`
(rules/outcome.yaml), the lines healthy jobs print are `kind: routine` (rules/routine.yaml).
"""

from __future__ import annotations

import ntpath
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from triage.analysis.ranks import (
    ended_its_process,
    first_line,
    format_ranks,
    outermost_frame,
    ranks_named,
    ref,
)
from triage.analysis.timeline import first_error
from triage.knowledge.outcome import Ends
from triage.knowledge.routine import Routine
from triage.model import (
    Analysis,
    Event,
    EventKind,
    EvidenceRef,
    FaultHandlerFacts,
    Finding,
    HangReport,
    HangShape,
    Level,
    LineNotice,
    Outcome,
    OutcomeKind,
    ParsedSource,
    ProgressDivergenceFacts,
    ProgressFacts,
    RankExit,
    SourceKind,
    TracebackFacts,
)

_FAULT_KINDS = (EventKind.TRACEBACK, EventKind.CPP_EXCEPTION)
# what ends a process whatever it printed before: an exit, a kill
_ENDING_KINDS = (EventKind.RANK_EXIT, EventKind.ELASTIC_ERROR, EventKind.SIGNAL)
# the blank or routine lines an output stream may end with after its last event
_STREAM_TAIL = 2
_MAX_EVIDENCE = 3


@dataclass(frozen=True)
class _Stop:
    event: Event
    why: str
    outcome: OutcomeKind  # STOPPED, or FAILED for a scheduler's word for a fault (node failure)
    # how to say it after a failure the logs show first (`Reason.after_failure`)
    after_failure: str | None = None
    time_limit: bool = False  # the scheduler's time limit ran out (`time_limits`)


def decide(
    parsed: Sequence[ParsedSource], found: Analysis, ends: Ends, routine: Routine
) -> Outcome:
    """The outcome of one job (or one paste) from its events and correlate's findings."""
    events = [ev for ps in parsed for ev in ps.events]
    # progress a note or an issue's prose mentions (`it stopped at step 4100`) is no rank's
    logs = [ev for ps in parsed if ps.source.kind is not SourceKind.TEXT for ev in ps.events]
    lines = {ps.source.path: ps.lines for ps in parsed if ps.source.kind is not SourceKind.TEXT}
    # a process's log read whole in which nothing was an event (no step, fault, exit or stop
    # triage knows): the job printed something, and it does not say how it ended
    quiet = sum(ps.lines for ps in parsed if ps.source.kind.process_output and not ps.events)
    decided = _decide(events, logs, found, ends, routine, lines, quiet)
    if found.later_step_faults and decided.id in (OutcomeKind.FAILED, OutcomeKind.HUNG):
        # quoted in the evidence without weight: say why
        later = found.later_step_faults[0]
        line = later.text.strip().splitlines()[-1] if later.text.strip() else later.text
        note = f"; a later job step failed too: `{_clip(line.replace('`', ''), 120)}`"
        decided = replace(decided, why=decided.why + note)
    # earlier runs that wrote to the same file were left out before correlate
    # (appended_jobs.py): the outcome says where
    for by, said in (
        ("slurm", "earlier Slurm jobs wrote to the same file ({lines}; {n} by id)"),
        (
            "exception",
            "earlier runs wrote to the same file ({lines}; {n} ended by an uncaught "
            "exception before the last run began)",
        ),
    ):
        earlier = [
            (ps.source.path, ps.earlier_jobs)
            for ps in parsed
            if ps.earlier_jobs and ps.earlier_jobs.by == by
        ]
        if not earlier:
            continue
        n = sum(head.jobs for _, head in earlier)
        # a file's name whichever separator its path uses (a Windows path read on Linux too)
        lines = ", ".join(
            f"{ntpath.basename(path)} up to line {head.last_line}" for path, head in earlier
        )
        decided = replace(decided, why=f"{decided.why}; {said.format(lines=lines, n=n)}: left out")
    return decided


def _decide(
    events: Sequence[Event],
    logs: Sequence[Event],
    found: Analysis,
    ends: Ends,
    routine: Routine,
    lines: Mapping[str, int],
    quiet_lines: int = 0,
) -> Outcome:
    progress = _progress_lines(logs)
    last_progress = _last_progress(progress)
    stops = _stops(events, ends) or _stopped_from_outside(events, ends)
    stop_caused = _stop_consequences(events, ends) if stops else set()
    faults = [ev for ev in _faults(events, found, ends, routine) if id(ev) not in stop_caused]
    # where each file's rank-tagged lines begin (`srun -l`'s `3: `, torchrun's `[rank3]:`); a
    # rank only the message names (c10d's `[Rank 1] Watchdog caught ...` on an untagged
    # console) says nothing of where the ranks' own output begins
    first_tagged: dict[str, int] = {}
    for ev in logs:
        if ev.rank is not None and ev.tagged_rank is None and ev.line is not None:
            first_tagged[ev.source] = min(ev.line, first_tagged.get(ev.source, ev.line))
    handled = _handled(faults, progress)
    fatal = [
        ev
        for ev in faults
        if not _went_on_past(ev, progress)
        and not _before_the_ranks(ev, first_tagged)
        and id(ev) not in handled
    ]
    logged = [
        ev for ev in faults if ev.kind in _FAULT_KINDS and ev not in fatal and id(ev) not in handled
    ]
    hung = found.hang is not None and found.hang.detected

    if stops:
        first = min(stops, key=lambda s: _order(s.event))
        # where the stop began: its own lines and the first things it caused (the launcher
        # killing its workers, KeyboardInterrupt tracebacks), whichever came first
        marks = [s.event for s in stops] + [ev for ev in events if id(ev) in stop_caused]
        # a stop is plain evidence; what outweighs it is a fault just as plain (an exception
        # that can be read, a kill, an exit), not a stray error line
        before = [
            ev
            for ev in fatal
            if ev.kind is not EventKind.ERROR_LINE and _readable(ev) and _before_all(ev, marks)
        ]
        if hung and not _after_stop(found, first.event):
            return _hung(found, f"; then {first.why}", [first.event])
        if first.outcome is OutcomeKind.FAILED:
            return Outcome(OutcomeKind.FAILED, _cap(first.why), _refs([first.event]))
        if before:
            return _failed(before, found, then=first)
        stuck = _stuck_until(first, found, progress, marks, ends)
        if stuck is not None:
            said = _clip(_line_of(stuck).replace("`", ""), 160)
            return Outcome(
                OutcomeKind.HUNG,
                _cap(f"no progress and no process exit after `{said}` until {first.why}"),
                _refs([stuck, first.event]),
            )
        # a scheduler's own words say most; of several (a file runs were appended to), the
        # last is what became of this job
        said = [s for s in stops if _scheduler_stop(s.event)] or stops
        last = max(said, key=lambda s: (s.event.time or float("-inf"), s.event.line or 0))
        return Outcome(
            OutcomeKind.STOPPED,
            _cap(last.why),
            _refs([s.event for s in stops]),
            fault_too=bool(logged),
        )
    if hung:
        mine = _waited_for_failed(found, fatal, ends)
        if mine:
            # the rank the others waited for had failed by itself: the job failed there, and
            # the wait is what the others suffered
            # a fault on no rank's line is quoted as it stands, not as correlate's account of
            # the rank it put first (that rank printed nothing it could call its own)
            named = all(ev.rank is not None for ev in mine)
            failed = _failed(mine, found if named else replace(found, first_failure=None))
            return Outcome(
                OutcomeKind.FAILED,
                f"{failed.why}; the other ranks then waited until a timeout",
                failed.evidence,
            )
        return _hung(found, "", [])
    succeeded = _success(events)
    ending = [ev for ev in fatal if ev.kind in _ENDING_KINDS or _notice(ev).end == "failed"]
    after_end: list[Event] = []
    if succeeded is not None and not any(_notice(ev).target_pid is not None for ev in succeeded[1]):
        marks = succeeded[1]
        # a script's own end line (not a launcher's exit count) says nothing of what came after
        # it: an exception raised later in the same file (the final save), or closing the job's
        # other stream while this one went on, is how it ended
        after_end = [
            ev
            for ev in fatal
            if ev.kind in _FAULT_KINDS
            and _readable(ev)
            and (_after_any(ev, marks) or _ends_the_other_stream(ev, marks, lines, ends))
        ]
    ended_badly = [*ending, *after_end]
    if succeeded is not None and not ended_badly:
        # every process the launcher saw ended well: an exception it printed was handled
        why, shown = succeeded
        logged = [ev for ev in faults if ev.kind in _FAULT_KINDS and id(ev) not in handled]
        return Outcome(OutcomeKind.SUCCEEDED, why, _refs(shown), fault_too=bool(logged))
    if fatal:
        failed = _failed(fatal, found)
        only_after_end = {id(e) for e in ending} <= {id(e) for e in after_end}
        if succeeded is not None and after_end and only_after_end:
            # what the work said of itself stands beside how the job ended: the training may
            # be done and saved, what failed came after it
            said = _clip(_line_of(succeeded[1][-1]).replace("`", ""), 80)
            failed = replace(failed, why=f"{failed.why}, after the job said it was done (`{said}`)")
        return failed
    diverged = _loss_diverged(found)
    if diverged is not None:
        # no exception, but the loss it reports is no number: the run is lost
        shown = diverged.evidence[:_MAX_EVIDENCE]
        return Outcome(OutcomeKind.FAILED, _cap(diverged.summary), shown)
    if last_progress:
        done = _progress_done(last_progress.values(), _planned_steps(logs))
        if done is not None:
            why, shown = done
            return Outcome(OutcomeKind.SUCCEEDED, why, _refs([shown]), fault_too=bool(logged))
        furthest = max(last_progress.values(), key=lambda ev: _step(ev) or 0)
        step = _step(furthest)
        total = _total_steps(furthest)
        at = f" at step {step}" + (f" of {total}" if total else "") if step is not None else ""
        return Outcome(
            OutcomeKind.INCOMPLETE,
            f"The log ends{at} with no error, exit or stop: it does not say that the job "
            "ended (it may have been still running when the log was copied, or its end unlogged)",
            _refs([furthest]),
            fault_too=bool(logged),
        )
    if logged:
        return _failed(logged, found)
    if logs:
        # a job's own log with no step, fault, exit or stop: every launcher and trainer prints
        # one of those by its end, so the log stops before the job did (still setting up)
        return Outcome(
            OutcomeKind.INCOMPLETE,
            "The log ends before any training step, with no error, exit or stop: it does not "
            "say that the job ended (it may have been still starting when the log was copied)",
        )
    if quiet_lines:
        return Outcome(
            OutcomeKind.INCOMPLETE,
            f"The log ({quiet_lines} lines) holds no training step, error, exit or stop that "
            "triage reads: it does not say how the job ended",
        )
    return Outcome(OutcomeKind.UNKNOWN, "The logs show neither how the job ended nor a fault")


# --------------------------------------------------------------------------- signals


def _stops(events: Iterable[Event], ends: Ends) -> list[_Stop]:
    out: list[_Stop] = []
    for ev in events:
        notice = _notice(ev)
        if notice.end == "stopped":
            key = str(notice.stop or "signal")
            out.append(_Stop(ev, ends.stop_reasons.get(key, key), OutcomeKind.STOPPED))
        elif notice.slurm:
            reason = ends.scheduler_reasons.get(str(notice.reason or "").upper())
            if reason is None:  # a reason Slurm gives that we do not know: not a stop we know
                continue
            what = f"{notice.slurm} {notice.job}" if notice.job else ""
            where = f" (Slurm {what})" if what else ""
            after = reason.after_failure + where if reason.after_failure else None
            out.append(
                _Stop(
                    ev,
                    reason.why + where,
                    OutcomeKind(reason.outcome),
                    after,
                    str(notice.reason or "").upper() in ends.time_limits,
                )
            )
        elif notice.scheduler_end:
            reason = ends.scheduler_reasons.get(notice.scheduler_end.upper())
            if reason is not None:
                limit = notice.scheduler_end.upper() in ends.time_limits
                out.append(_Stop(ev, reason.why, OutcomeKind(reason.outcome), None, limit))
        elif ev.kind is EventKind.TRACEBACK and ends.stop_exception(_exc_type(ev)):
            key = "ctrl_c" if "KeyboardInterrupt" in str(_exc_type(ev)) else "signal"
            out.append(_Stop(ev, ends.stop_reasons.get(key, key), OutcomeKind.STOPPED))
    return out


def _stopped_from_outside(events: Sequence[Event], ends: Ends) -> list[_Stop]:
    """Every worker exit the launcher reports is a stop's signal (SIGTERM, SIGINT, SIGHUP: exit
    -15, 143, ...) and none is a code of a worker's own: the signal reached all of them from
    outside (a scheduler's time limit, a `kill` of the job), since a launcher that stops the
    survivors of a failure reports the failed worker's own exit too. The first such exit
    stands for the stop."""
    exits = [
        ev
        for ev in events
        if ev.kind in (EventKind.RANK_EXIT, EventKind.ELASTIC_ERROR) and _exitcode(ev)
    ]
    if not exits or any(_exitcode(ev) not in ends.stop_exit_codes for ev in exits):
        return []
    first = min(exits, key=_order)
    return [_Stop(first, ends.stop_reasons.get("signal", "signal"), OutcomeKind.STOPPED)]


def _stop_consequences(events: Iterable[Event], ends: Ends) -> set[int]:
    """Events a stop itself causes: outside signals, the exits they leave, the launcher
    killing its workers, and tracebacks of exceptions raised by the stop (a chained one
    whose any link is KeyboardInterrupt/SignalException too)."""
    out: set[int] = set()
    for ev in events:
        notice = _notice(ev)
        if ev.kind is EventKind.TRACEBACK:
            types = [_exc_type(ev), *_chain_types(ev)]
            if any(ends.stop_exception(t) for t in types if t):
                out.add(id(ev))
        elif ev.kind in (EventKind.SIGNAL, EventKind.RANK_EXIT, EventKind.ELASTIC_ERROR):
            sig, code = _signal(ev), _exitcode(ev)
            if isinstance(ev.payload, RankExit):
                sig = sig or ev.payload.signal
            if sig in ends.outside_signals or code in ends.stop_exit_codes or code == 1:
                out.add(id(ev))
        elif ev.kind is EventKind.AGENT and notice.role == "victim":
            out.add(id(ev))
    return out


def _chain_types(ev: Event) -> list[str]:
    """The exception types of a chained traceback's earlier links (`ValueError`), as the log
    parser read them (an error file's traceback names its one exception in `exc_type`)."""
    links = ev.traceback.links[:-1] if ev.traceback is not None else ()
    return [link.exc_type for link in links if link.exc_type]


def _faults(events: Iterable[Event], found: Analysis, ends: Ends, routine: Routine) -> list[Event]:
    """A rank's own faults: tracebacks and C++ exceptions (not raised by a stop), kills and
    crashes, non-zero exits, and the error lines correlate found to start the failure."""
    initiating = {id(ev) for ev in found.initiating_events}
    victims = {id(ev) for ev in found.launcher_victims}
    out: list[Event] = []
    for ev in events:
        notice = _notice(ev)
        if id(ev) in victims:  # killed by the launcher as it ended the step: not a fault
            continue
        if notice.end == "failed":  # the job's own word that it failed (MLPerf aborted)
            out.append(ev)
        elif notice.action == "kill_step":
            # the launcher ending the whole step (srun does after a task's bad exit, its
            # --wait, or a forced Ctrl-C): the plainest fault left when the cause went unlogged
            out.append(ev)
        elif ev.kind in _FAULT_KINDS:
            if ends.stop_exception(_exc_type(ev)) or ends.ignored_traceback(outermost_frame(ev)):
                continue
            out.append(ev)
        elif ev.kind is EventKind.SIGNAL:
            if notice.end or notice.scheduler_end or notice.slurm:
                continue
            if notice.reason == "oom" or _signal(ev) in ends.fault_signals:
                out.append(ev)
        elif ev.kind in (EventKind.RANK_EXIT, EventKind.ELASTIC_ERROR):
            code = _exitcode(ev)
            if code not in (None, 0):
                out.append(ev)
        elif (
            id(ev) in initiating
            and ev.level in (Level.ERROR, Level.FATAL)
            and _not_routine_here(ev, routine)
        ):
            out.append(ev)
    return out


def _not_routine_here(ev: Event, routine: Routine) -> bool:
    """An initiating error line that is no routine line, or a routine message a program dies
    of (`last_words`: git's `fatal:`) that correlate kept as initiating because nothing of the
    program followed it."""
    line = routine.which(ev.text)
    return line is None or line.last_words


def _success(events: Sequence[Event]) -> tuple[str, list[Event]] | None:
    marks = [ev for ev in events if _notice(ev).end == "succeeded"]
    zero_exits = [ev for ev in events if ev.kind is EventKind.RANK_EXIT and _exitcode(ev) == 0]
    if not marks and not zero_exits:
        return None
    launcher_exits = [ev for ev in marks if _notice(ev).target_pid is not None]
    if launcher_exits:
        n = len(launcher_exits)
        why = f"The launcher saw {n} worker process{'es' if n > 1 else ''} exit 0"
        shown = launcher_exits
    elif zero_exits:
        why = "The launcher reported exit code 0"
        shown = zero_exits
    else:
        why = f"The job reported its own end: `{_line_of(marks[-1])}`"
        shown = marks
    return why, [shown[0], shown[-1]] if len(shown) > 1 else shown


def _progress_done(
    last: Iterable[Event], planned: dict[str, int] | None = None
) -> tuple[str, Event] | None:
    """The last progress line that reached its total: the line's own (`500/500`), else the
    total its file's printed config set (`max_iters = 6000`, `planned`). A stream done while
    its file logged other progress after it that was not (a set-up bar at 100%, then the
    training's own lines) is not the job's end."""
    last = list(last)
    done: list[tuple[Event, int, int]] = []
    for ev in last:
        step, total = _step(ev), _total_steps(ev)
        if total is None and planned:
            total = planned.get(ev.source)
        if step is not None and isinstance(total, int) and total > 1 and step >= total:
            done.append((ev, step, total))
    finished = {id(ev) for ev, _, _ in done}
    for ev, step, total in done:
        if not any(
            other.source == ev.source
            and id(other) not in finished
            and (other.line or 0) > (ev.line or 0)
            for other in last
        ):
            return f"Training reached its last step ({step} of {total})", ev
    return None


# --------------------------------------------------------------------------- order


def _planned_steps(events: Iterable[Event]) -> dict[str, int]:
    """Per file, the steps its printed config says the loop runs (the last such line wins:
    an override is printed after the file's config)."""
    out: dict[str, tuple[int, int]] = {}
    for ev in events:
        total = ev.notice.total_steps if ev.notice is not None else None
        if total is not None and total > 1:
            line = ev.line or 0
            if ev.source not in out or line >= out[ev.source][0]:
                out[ev.source] = (line, total)
    return {source: total for source, (_, total) in out.items()}


def _loss_diverged(found: Analysis) -> Finding | None:
    """Correlate's finding that every stream's last progress line reports a nan/inf loss."""
    for f in found.findings:
        if isinstance(f.facts, ProgressDivergenceFacts) and f.facts.loss_diverged:
            return f
    return None


def _progress_lines(events: Iterable[Event]) -> dict[tuple[str, int | None], list[Event]]:
    """The progress lines of each (file, rank), in file order."""
    out: dict[tuple[str, int | None], list[Event]] = {}
    for ev in events:
        if ev.kind is EventKind.PROGRESS:
            out.setdefault((ev.source, ev.rank), []).append(ev)
    for lines in out.values():
        lines.sort(key=lambda ev: ev.line or 0)
    return out


def _last_progress(
    progress: dict[tuple[str, int | None], list[Event]],
) -> dict[tuple[str, int | None], Event]:
    """The last progress line of each (file, rank)."""
    return {key: lines[-1] for key, lines in progress.items()}


def _went_on_past(ev: Event, progress: dict[tuple[str, int | None], list[Event]]) -> bool:
    """Training logged progress after this event (in its file, on its rank when known): the
    job survived it. A progress bar redrawn at the step it had already shown (tqdm renders
    its bar once more when it is closed, as the exception unwinds or the process exits) is
    no step taken after the fault. The parser keeps each stream's last progress line, so the
    step shown before the fault is known only where another line of the stream came before
    it; without one, only a bar still at step 0 is told apart."""
    if ev.kind in _ENDING_KINDS or _notice(ev).end == "failed":
        return False
    lines = progress.get((ev.source, ev.rank)) or (
        progress.get((ev.source, None)) if ev.rank is None else None
    )
    if lines is None and ev.rank is None:
        lines = sorted(
            (p for (src, _), ps in progress.items() if src == ev.source for p in ps),
            key=lambda p: p.line or 0,
        )
    end = ev.end_line or ev.line
    if not lines or end is None:
        return False
    before = [s for p in lines if (p.line or 0) < (ev.line or end) and (s := _step(p)) is not None]
    reached = max(before, default=0)
    return any(
        (p.line or 0) > end + 1 and ((step := _step(p)) is None or step > reached) for p in lines
    )


def _handled(
    faults: Sequence[Event], progress: dict[tuple[str, int | None], list[Event]]
) -> set[int]:
    """The faults the job handles: the same fault (`_fault_key`) again and again in one file
    and rank, training going on past the first of them (a reward loop's per-sample parse
    error, logged and skipped). A repeat where the log ends is no more how the job ended than
    the ones before it, and none of them is a fault the report holds up; a fault the job went
    on past once is still one (`fault_too`). An exception that ended its process is no handled
    one, however often it recurs (each run of a script appended to one file died of it)."""
    series: dict[tuple[str, int | None, tuple[str, str]], list[Event]] = {}
    for ev in faults:
        if (
            ev.kind in _ENDING_KINDS
            or _notice(ev).end == "failed"
            or ev.line is None
            or ended_its_process(ev)
        ):
            continue
        series.setdefault((ev.source, ev.rank, _fault_key(ev)), []).append(ev)
    out: set[int] = set()
    for members in series.values():
        if len(members) < 2:
            continue
        first = min(members, key=lambda ev: ev.line or 0)
        if _went_on_past(first, progress):
            out.update(id(ev) for ev in members)
    return out


def _fault_key(ev: Event) -> tuple[str, str]:
    """Where a fault was raised (a traceback's innermost frame, with its exception type), else
    how its message begins, up to the first `: ` and with every word that holds a digit
    blanked: each sample's error quotes its own data (an id, the text it could not parse)
    after the same words."""
    facts = ev.payload
    exc_type = ev.exception.exc_type if ev.exception is not None else None
    if isinstance(facts, TracebackFacts) and facts.frames:
        file, _, function = facts.frames[-1]
        return exc_type or "", f"{file}:{function}"
    said = ev.exception.exc_message if ev.exception is not None else None
    text = first_line(said if said else ev.text, 400)
    own_words = text.split(": ", 1)[0]
    if len(own_words) >= _KEY_MIN_CHARS:
        text = own_words
    return exc_type or ev.kind.value, _WORD_WITH_DIGIT.sub("#", text)[:_KEY_CHARS]


# a word that holds a digit (a count, an id, a uuid, an address), and how much of a message's
# start says which message it is
_WORD_WITH_DIGIT = re.compile(r"\S*\d\S*")
_KEY_CHARS = 48
_KEY_MIN_CHARS = 12


def _before_the_ranks(ev: Event, first_tagged: dict[str, int]) -> bool:
    """An untagged fault above its file's first rank-tagged line: the batch script's own step
    before the launch (a set-up helper's `srun: error: ... Exited with exit code 1`), after
    which the job started its ranks; how the job ended is theirs to say."""
    start = first_tagged.get(ev.source)
    end = ev.end_line or ev.line
    return ev.rank is None and start is not None and end is not None and end < start


def _order(ev: Event) -> tuple[float, str, int]:
    return (ev.time if ev.time is not None else float("inf"), ev.source, ev.line or 0)


def _after_any(ev: Event, marks: Sequence[Event]) -> bool:
    """`ev` comes after one of `marks` in the same file."""
    return any(
        ev.source == m.source and (ev.line or 0) > (m.end_line or m.line or 0) for m in marks
    )


def _ends_the_other_stream(
    ev: Event, marks: Sequence[Event], lines: Mapping[str, int], ends: Ends
) -> bool:
    """`ev` is how the job's other output stream ends (`job-42.err` beside `job-42.out`: one
    job's stderr and stdout, never ordered line by line) and came after the end line: by their
    stamps where both have one, else because the stream with the end line goes on after it
    (the job did more after it said it was done: its next phase, whose end this is)."""
    job = ends.job_stream(ev.source)
    end = max(ev.end_line or 0, ev.line or 0)
    if job is None or lines.get(ev.source, 0) - end > _STREAM_TAIL:
        return False
    for m in marks:
        if m.source == ev.source or ends.job_stream(m.source) != job:
            continue
        if ev.time is not None and m.time is not None:
            if ev.time > m.time:
                return True
        elif lines.get(m.source, 0) - max(m.end_line or 0, m.line or 0) > _STREAM_TAIL:
            return True
    return False


def _stuck_until(
    stop: _Stop,
    found: Analysis,
    progress: dict[tuple[str, int | None], list[Event]],
    marks: Sequence[Event],
    ends: Ends,
) -> Event | None:
    """The error a job never got past, when a time limit ended it: the last error correlate
    found to start the failure (an NCCL WARN, an error line) came before the stop, no process
    exited and no progress was logged after it in any file. A job that was still working when
    its time ran out logs progress to the end; one that sat on an error waits there."""
    if not stop.time_limit or found.rank_exits:
        return None
    exits = ends.exit_reports
    errors = [
        ev
        for ev in found.initiating_events
        if ev.kind in (EventKind.NCCL_WARN, EventKind.ERROR_LINE, EventKind.TRACEBACK)
        and _readable(ev)
        and _before_all(ev, marks)
        and not (exits is not None and exits.search(ev.text))
    ]
    if not errors:
        return None
    last = max(errors, key=_order)
    # progress logged after it anywhere (by line in its own file, by time in another), or
    # progress in another file it cannot be placed against: not shown to be stuck
    for (source, _), lines in progress.items():
        for p in lines:
            if source == last.source:
                if (p.line or 0) > (last.line or 0):
                    return None
            elif p.time is None or last.time is None or p.time > last.time:
                return None
    return last


def _scheduler_stop(ev: Event) -> bool:
    notice = _notice(ev)
    return bool(notice.slurm or notice.scheduler_end)


def _before_all(ev: Event, marks: Sequence[Event]) -> bool:
    """`ev` happened before every mark of the stop it can be compared with (by time when both
    have one, by line in the same file); with none to compare, it is taken as the stop's
    consequence."""
    compared = False
    for mark in marks:
        if ev.time is not None and mark.time is not None:
            earlier = ev.time < mark.time - 1.0
        elif ev.source == mark.source and ev.line is not None and mark.line is not None:
            earlier = ev.line < mark.line
        else:
            continue
        compared = True
        if not earlier:
            return False
    return compared


def _readable(ev: Event) -> bool:
    """A fault whose exception can be read: a traceback garbled by many ranks writing at once
    (no exception line left) cannot outweigh a stop that can."""
    return ev.kind is not EventKind.TRACEBACK or bool(_exc_type(ev))


def _after_stop(found: Analysis, stop: Event) -> bool:
    """Whether every timeout behind the hang came after the stop (then the stop caused it)."""
    waited = [ev for ev in found.cascade_events if ev.time is not None]
    return bool(waited) and stop.time is not None and all(ev.time > stop.time for ev in waited)


# --------------------------------------------------------------------------- wording


def _failed(faults: Sequence[Event], found: Analysis, then: _Stop | None = None) -> Outcome:
    """Failed, in correlate's words where it found the first failure (it weighs every rank's
    errors and the cascade), else by the earliest fault."""
    first = found.first_failure
    if (
        first is not None
        and then is not None
        and (first.source, first.line)
        == (
            then.event.source,
            then.event.line,
        )
    ):
        first = None  # correlate took the stop itself for the failure
    culprits = found.culprit_ranks
    shown = list(faults[:_MAX_EVIDENCE])
    if first is not None:
        who = f"rank {first.rank}" if first.rank is not None else ""
        text = first.text.strip().splitlines()[0] if first.text.strip() else ""
        lead = (EvidenceRef(first.source, first.line, first.rank, text[:240]),)
    else:
        event = min(faults, key=_order)
        who, text, lead = _who(event), _line_of(event), ()
        shown = [event, *(s for s in faults if s is not event)][:_MAX_EVIDENCE]
    if culprits and not who and not text:
        # a rank is put to a line only where the line is its own: an error printed without a
        # rank prefix (eight tracebacks on one console) may be any rank's, whoever exited first
        who = ranks_named(culprits)
    said = f"`{_clip(text.replace('`', ''), 160)}`" if text else "no message of its own"
    why = f"first failure on {who}: {said}" if who else f"first failure: {said}"
    if first is not None and not first.own_error:
        # the culprit's record (its dump's entry) is no failure: say who failed first
        why = f"started by {who}: {said}"
        # in a hang the others' first errors are their waits timing out, no failure of theirs
        hung = found.hang is not None and found.hang.detected
        earlier = None if hung else first_error(found.timeline)
        printed = next(
            (
                ev
                for ev in (*found.initiating_events, *found.cascade_events)
                if earlier is not None and (ev.source, ev.line) == (earlier.source, earlier.line)
            ),
            None,
        )
        if earlier is not None and printed is not None and earlier.rank != first.rank:
            line = _line_of(printed)
            why += f"; rank {earlier.rank} failed first: `{_clip(line.replace('`', ''), 120)}`"
            lead += (EvidenceRef(printed.source, earlier.line, earlier.rank, line[:240]),)
    if then is not None:
        why += f"; then {then.after_failure or then.why}"
    # one line once: the lead quotes it cut at 240 characters, `_refs` with an ellipsis
    by_line: dict[tuple[str, int | None], EvidenceRef] = {}
    for r in (*lead, *_refs(shown)):
        by_line.setdefault((r.source, r.line), r)
    refs = tuple(by_line.values())[:_MAX_EVIDENCE]
    return Outcome(OutcomeKind.FAILED, _cap(why), refs)


def _waited_for_failed(found: Analysis, fatal: Sequence[Event], ends: Ends) -> list[Event]:
    """The fatal faults of the ranks the others waited for, when correlate found that those
    ranks had failed by themselves (the hang's shape `failed`, triage.analysis.hang_shape), or
    a fault that started it all and names no rank (a launcher's console with no rank tags)
    while the ones waited for are known: what kept them away. The watchdog's own abort is the
    wait's consequence, not such a fault."""
    hang = found.hang
    if hang is None:
        return []
    failed_by_themselves = hang.shape is HangShape.FAILED
    if not failed_by_themselves and not hang.lagging_ranks:
        return []
    culprits = set(found.culprit_ranks)
    deaths = ends.hang_deaths
    cascade = {id(ev) for ev in found.cascade_events}
    started = {id(ev) for ev in found.initiating_events}
    return [
        ev
        for ev in fatal
        if ev.kind in _FAULT_KINDS
        and (
            (failed_by_themselves and ev.rank in culprits)
            or (ev.rank is None and id(ev) in started)
        )
        and id(ev) not in cascade
        and _readable(ev)
        and not (deaths is not None and deaths.search(ev.text))
    ]


def _hung(found: Analysis, then: str, extra: Sequence[Event]) -> Outcome:
    hang = found.hang
    assert hang is not None
    lagging = hang.lagging_ranks
    noun = "rank" if len(lagging) == 1 else "ranks"
    waiter = hang.waiter or "ranks"
    what = f"{waiter} waited for {noun} {format_ranks(lagging)}" if lagging else f"{waiter} waited"
    op = hang.collective.op if hang.collective else None
    if op:
        what += f" in {op}"
    shown = [*found.cascade_events[:2], *extra]
    return Outcome(OutcomeKind.HUNG, _cap(f"{what} until a timeout{then}"), _refs(shown))


def hang_report(decided: Outcome, found: Analysis) -> HangReport | None:
    """The hang the report shows: correlate's, or, for a job the outcome found hung without it
    (it sat on an error until its time limit: no collective timed out, no stack was taken),
    one that says so, so that the report's hang never denies its own outcome."""
    if decided.id is not OutcomeKind.HUNG or (found.hang is not None and found.hang.detected):
        return found.hang
    why = decided.why
    return HangReport(
        detected=True,
        lagging_ranks=(),
        process_group=None,
        collective=None,
        account=why[:1].lower() + why[1:],
    )


def _who(ev: Event) -> str:
    return f"rank {ev.rank}" if ev.rank is not None else ""


def _line_of(ev: Event) -> str:
    return first_line(ev.text, 160)


def _step(ev: Event) -> int | None:
    return ev.payload.step if isinstance(ev.payload, ProgressFacts) else None


def _total_steps(ev: Event) -> int | None:
    return ev.payload.total_steps if isinstance(ev.payload, ProgressFacts) else None


_NO_NOTICE = LineNotice()


def _notice(ev: Event) -> LineNotice:
    """What the event's line template said (nothing for an event no template made)."""
    return ev.notice if ev.notice is not None else _NO_NOTICE


def _exc_type(ev: Event) -> str | None:
    return ev.exception.exc_type if ev.exception is not None else None


def _signal(ev: Event) -> str | None:
    """The signal a line template or a faulthandler block names."""
    if ev.notice is not None:
        return ev.notice.signal
    return ev.payload.signal if isinstance(ev.payload, FaultHandlerFacts) else None


def _exitcode(ev: Event) -> int | None:
    if ev.notice is not None and ev.notice.exitcode is not None:
        return ev.notice.exitcode
    return ev.payload.exitcode if isinstance(ev.payload, RankExit) else None


def _refs(events: Sequence[Event]) -> tuple[EvidenceRef, ...]:
    seen: set[tuple[str, int | None]] = set()
    out = []
    for ev in events:
        key = (ev.source, ev.line)
        if key in seen:
            continue
        seen.add(key)
        out.append(ref(ev, limit=240))
    return tuple(out[:_MAX_EVIDENCE])


def _clip(text: str, limit: int) -> str:
    """At most `limit` characters, cut at a word boundary with an ellipsis."""
    if len(text) <= limit:
        return text
    cut = text[:limit].rsplit(" ", 1)[0]
    return (cut if len(cut) > limit // 2 else text[:limit]) + "…"


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]
