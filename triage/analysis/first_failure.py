"""The first failure: which line started it, and the culprit's copies on other ranks."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from triage import knowledge
from triage.analysis import exits, pyspy, timeline
from triage.analysis.ranks import first_line, quoted_line, traceback_of
from triage.model import Event, EventKind, FailureRef, Finding, FindingKind
from triage.parsers import timestamps


def by_time(p: timeline.Placed) -> tuple[bool, float]:
    return (p.time is None, p.time or 0.0)


def silent_ranks(
    placed: Sequence[timeline.Placed],
    exit_records: Sequence[exits.ExitRecord],
    world_size: int | None,
    explicit_world: bool,
    ranks_seen: set[int],
    ranks_with_events: set[int],
) -> list[int]:
    """Ranks of a known world that said nothing while others reported consequences.

    A rank is known to exist when the world size is stated, when anything names it (an exit,
    a dump, a log file), or when it is a gap between several complaining ranks; one pasted
    timeout line from rank 1 is too little to conjure up a silent rank 0.
    """
    if not world_size or world_size < 2:
        return []
    complaining = {p.rank for p in placed if p.role == "cascade" and p.rank is not None}
    if not complaining:
        return []
    wide = explicit_world or len(complaining) >= 2
    known = set(range(world_size)) if wide else set(ranks_seen)
    spoke = set(ranks_with_events)
    spoke |= {
        r.exit.rank for r in exit_records if r.exit.rank is not None and not r.launcher_killed
    }
    silent = sorted(r for r in known if r not in spoke)
    # if most ranks are "silent", their logs were simply not collected: no signal
    if not silent or len(silent) * 2 > world_size:
        return []
    return silent


def shared_errors_are_cascade(
    placed: list[timeline.Placed], culprits: Sequence[int]
) -> list[timeline.Placed]:
    """The culprit's own error, raised again on the other ranks, is a consequence there.

    A NaN all-reduced into every rank makes all of them raise the same `loss became nan`;
    once other evidence singled out the rank it started on, the copies elsewhere are cascade.
    """
    if not culprits:
        return placed
    theirs = {
        timeline.signature(p.event.text)
        for p in placed
        if p.role == "initiating" and p.rank in culprits
    }
    out = []
    for p in placed:
        if (
            p.role == "initiating"
            and p.rank is not None
            and p.rank not in culprits
            and timeline.signature(p.event.text) in theirs
        ):
            p = replace(p, role="cascade", family="same_error_as_culprit")
        out.append(p)
    return out


def pick_first_failure(
    culprits: Sequence[int],
    initiating: Sequence[timeline.Placed],
    exit_records: Sequence[exits.ExitRecord],
    structural: Sequence[Finding],
    placed: Sequence[timeline.Placed],
    early: Sequence[tuple[int, Event]] = (),
) -> FailureRef | None:
    def from_placed(p: timeline.Placed) -> FailureRef:
        text, line = quoted_line(p.event, 400)
        return FailureRef(
            rank=p.rank,
            host=p.event.host,
            time=p.event.time,
            source=p.event.source,
            line=line,
            text=text,
            time_resolution=_resolution(p.event),
            printed_by=p.event.rank,
        )

    mine = [p for p in initiating if p.rank in culprits]
    if mine:
        # the culprit's own error is the failure; a metric line that went NaN before it is
        # its first sign, shown on the timeline, not what failed
        return from_placed(min(_telling(mine), key=by_time))
    for rank, ev in early:
        # the culprit's own metric went bad and it raised nothing (a NaN loss, spread later)
        return FailureRef(
            rank=rank,
            host=ev.host,
            time=ev.time,
            source=ev.source,
            line=ev.line,
            text=first_line(ev.text, 400),
            time_resolution=_resolution(ev),
        )
    for rec in exit_records:
        if rec.exit.rank in culprits and rec.self_inflicted:
            # quoted as the launcher wrote it: what the code means is the findings' to say
            text, line = quoted_line(rec.event, 400)
            return FailureRef(
                rank=rec.exit.rank,
                host=rec.exit.host,
                time=rec.exit.time,
                source=rec.event.source,
                line=line,
                text=text,
                time_resolution=rec.exit.time_resolution,
            )
    # a culprit that printed nothing: the finding that points at it is the first failure
    unnamed = [p for p in initiating if p.rank is None]
    for f in structural:
        hit = [r for r in f.ranks if r in culprits]
        if hit and f.kind is FindingKind.MISSING_RANK and unnamed:
            # silent under its own rank, but an error on no rank's line started it (a console
            # the launcher writes untagged): that error is the failure, most likely the silent
            # rank's own, quoted as it stands and on no rank (the culprit row names the silent
            # one; the line is no other rank's report about it)
            told = from_placed(min(_telling(unnamed), key=by_time))
            return replace(told, rank=None)
        if hit:
            # the rank's own record (its dump's entry), else a line about the whole job
            e = next((x for x in f.evidence if x.rank == hit[0]), None) or next(
                (x for x in f.evidence if x.rank is None), None
            )
            return FailureRef(
                rank=hit[0],
                host=None,
                time=None,
                source=e.source if e else _STANDS_ON.get(f.kind, str(f.kind)),
                line=e.line if e else None,
                # what the finding stands on (a dump's record), not its sentence about it
                text=e.text if e else f.summary,
                own_error=False,
            )
    if initiating:
        return from_placed(min(_telling(initiating), key=by_time))
    errors = [p for p in placed if p.role == "cascade"]
    if errors:
        # only consequences were seen (a lone watchdog timeout): the earliest is quoted, but
        # the rank that printed it merely reported the wait; it is not who failed
        return replace(from_placed(min(errors, key=by_time)), rank=None)
    return None


def _telling(placed: Sequence[timeline.Placed]) -> Sequence[timeline.Placed]:
    """The events that say what went wrong: a traceback another rank's lines cut before its
    exception line (16 ranks writing one stream) only says where it was; the first failure is
    quoted from one that holds its exception, when there is one."""
    told = [
        p
        for p in placed
        if p.event.kind is not EventKind.TRACEBACK or traceback_of(p.event).exception_lines
    ]
    return told or placed


# What a culprit that printed nothing is known from, when no line of its own shows it: the
# report names it beside the rank ("rank 13 (flight recorder)")
_STANDS_ON = {
    FindingKind.LAGGING_RANK: "flight recorder",
    FindingKind.COLLECTIVE_MISMATCH: "flight recorder",
    FindingKind.STACK_OUTLIER: "py-spy stacks",
    FindingKind.PROGRESS_DIVERGENCE: "progress lines",
    # silent while the others failed: its absence from the logs
    FindingKind.MISSING_RANK: "no output of its own",
}


def _resolution(ev: Event) -> float:
    """Seconds the event's own stamp leaves open (`2026-12-02 10:20:43`: a whole second)."""
    return timestamps.dated_resolution(ev.text) if ev.time is not None else 0.0


def raising_frame(
    first: FailureRef | None, placed: Sequence[timeline.Placed], kb: knowledge.Knowledge
) -> pyspy.RaisedAt | None:
    if first is None:
        return None
    for p in placed:
        ev = p.event
        if (
            ev.source == first.source
            and ev.line is not None
            and first.line is not None
            and ev.line <= first.line <= (ev.end_line or ev.line)
            and first.rank == p.rank
        ):
            return pyspy.raising_frame(traceback_of(ev), kb.frames)
    return None
