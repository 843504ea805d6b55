"""The report's pictures: per-rank lanes on one time axis, the flight recorder's progress per
process group, and the py-spy stack groups with the odd one out marked."""

from __future__ import annotations

import math
from collections import defaultdict

from triage.model import Diagnosis, FindingKind, GroupProgress, StackGroup

from . import common as c
from .view_model import Lane, Lanes, Mark, ProgressRow, ProgressTable, Stacks
from .wording import ranks_phrase

ROLES = ("initiating", "cascade", "context")

LANE_RANKS = 16  # ranks drawn on a lane of their own; the others share one lane


LANE_MARKS = 240  # marks per lane: more would only overdraw each other


AGGREGATE_BUCKETS = 200  # the shared lane draws one mark per bucket of time and role


def window(d: Diagnosis) -> tuple[float, float] | None:
    """The drawn axis: from the first failing event with a stamp (else the first drawn one)
    to the last drawn one; the timeline table counts its offsets from the same start."""
    # only what is drawn sets the axis: a job-wide note hours later must not squeeze the lanes
    timed = [e for e in d.timeline if e.time is not None and e.rank is not None]
    times = [e.time for e in timed if e.time is not None] + [
        x.time for x in d.rank_exits if x.time is not None and x.rank is not None
    ]
    if len(times) < 2 or max(times) <= min(times):
        return None
    start, end = min(times), max(times)
    failing = [e.time for e in timed if e.role != "context" and e.time is not None]
    if failing and min(failing) < end:
        start = min(failing)
    return start, end


def lanes(d: Diagnosis) -> Lanes | None:
    """Per-rank swimlanes: each rank's events and exit on one time axis.

    The window opens at the first initiating or cascade event: a start-up line hours earlier
    would otherwise squeeze the whole failure into the right edge; earlier events sit on the
    left edge. The culprit, lagging and initiating ranks get lanes first; past LANE_RANKS the
    other ranks share one lane, drawn as one mark per stretch of time and role.
    """
    span = window(d)
    if span is None:
        return None
    start, end = span
    timed = [e for e in d.timeline if e.time is not None and e.rank is not None]
    exits = [x for x in d.rank_exits if x.time is not None and x.rank is not None]
    times = [e.time for e in timed if e.time is not None] + [
        x.time for x in exits if x.time is not None
    ]
    earlier = sum(1 for t in times if t < start)
    by_rank: dict[int, list[Mark]] = defaultdict(list)

    def x_of(t: float) -> float:
        return max(0.0, min(1.0, (t - start) / (end - start)))

    # the timeline's row for an exit is drawn as the exit's own mark (below), not a second
    # one in the context colour that would show through a launcher stop's hollow square
    exit_at = {(x.rank, x.time) for x in exits}
    for e in timed:
        if e.rank is None or e.time is None:
            continue
        if e.role == "context" and (e.rank, e.time) in exit_at:
            continue
        role = e.role if e.role in ROLES else "context"
        title = (
            f"{c.clock_time(e.time, e.resolution)} rank {e.rank} {role}: {c.one_line(e.text, 160)}"
        )
        by_rank[e.rank].append(Mark(x_of(e.time), role, title))
    for x in exits:
        if x.rank is None or x.time is None:
            continue
        kind = "stopped" if x.exitcode in (-15, -2, 143) else "exit"
        how = f"exit {x.exitcode}" + (f" ({x.signal})" if x.signal else "")
        title = f"{c.clock_time(x.time, x.time_resolution)} rank {x.rank} {how}"
        by_rank[x.rank].append(Mark(x_of(x.time), kind, title))
    if not by_rank:
        return None
    culprits = set(d.culprit_ranks)
    if d.hang is not None and d.hang.detected:
        culprits |= set(d.hang.lagging_ranks)

    def priority(rank: int) -> tuple[int, int]:
        marks = by_rank[rank]
        if rank in culprits:
            return (0, rank)
        if any(m.kind == "initiating" for m in marks):
            return (1, rank)
        if any(m.kind == "exit" for m in marks):
            return (2, rank)
        return (3, rank)

    ordered = sorted(by_rank, key=priority)
    own = ordered if len(ordered) <= LANE_RANKS + 1 else ordered[:LANE_RANKS]
    own = sorted(own, key=lambda r: (r not in culprits, r))
    lanes = [Lane(f"rank {r}", r in culprits, _thin(by_rank[r])) for r in own]
    # a culprit whose own error carries no timestamp still gets its lane, saying so
    untimed = {
        e.rank: c.bounds(e.earliest, e.latest)
        for e in reversed(d.timeline)
        if e.time is None and e.role == "initiating"
    }
    for r in sorted(set(d.culprit_ranks) - set(by_rank), reverse=True):
        note = "nothing of it is timed"
        if r in untimed:
            note = "its error has no timestamp" + (f" ({untimed[r]})" if untimed[r] else "")
        lanes.insert(0, Lane(f"rank {r}", True, (), note=note))
    rest = [r for r in ordered if r not in set(own)]
    if rest:
        lanes.append(_shared_lane(rest, by_rank))
    restarts = next(
        (c.short(f.summary, 200) for f in d.findings if f.kind is FindingKind.RESTART), ""
    )
    return Lanes(
        lanes=tuple(lanes),
        # a start on a whole second is most likely a stamp to the second: not shown as `.000`
        start=c.iso_time(start, 1.0 if float(start).is_integer() else 0.0),
        span=end - start,
        ticks=_ticks(end - start),
        earlier=earlier,
        restarts=restarts,
    )


_DRAW_ORDER = {"cascade": 0, "context": 1, "stopped": 2, "exit": 3, "initiating": 4}


def _thin(marks: list[Mark]) -> tuple[Mark, ...]:
    """One mark per spot and kind, the loud ones drawn last (on top)."""
    seen: dict[tuple[int, str], Mark] = {}
    for m in marks:
        seen.setdefault((int(m.x * 400), m.kind), m)
    kept = sorted(seen.values(), key=lambda m: (_DRAW_ORDER.get(m.kind, 1), m.x))
    return tuple(kept[-LANE_MARKS:])


def _shared_lane(ranks: list[int], by_rank: dict[int, list[Mark]]) -> Lane:
    buckets: dict[tuple[int, str], list[tuple[int, Mark]]] = defaultdict(list)
    for r in ranks:
        for m in by_rank[r]:
            buckets[(int(m.x * AGGREGATE_BUCKETS), m.kind)].append((r, m))
    marks = []
    for (_, kind), members in buckets.items():
        who = sorted({r for r, _ in members})
        first = members[0][1]
        what = first.title.split(": ", 1)[-1] if ": " in first.title else first.title
        title = f"{len(members)} × {kind} on {ranks_phrase(who)}: {what}"
        marks.append(Mark(sum(m.x for _, m in members) / len(members), kind, title, len(members)))
    marks.sort(key=lambda m: (_DRAW_ORDER.get(m.kind, 1), m.x))
    label = f"{len(ranks):,} other ranks"
    return Lane(label, False, tuple(marks[-LANE_MARKS:]), shared=True)


def _ticks(span: float) -> tuple[tuple[float, str], ...]:
    """Four to ten round steps along the axis, in seconds, minutes or hours (1, 2 or 5 times a
    power of ten of the unit): `+0s`, `+2s`, ... or `+0min`, `+10min`, ..."""
    if not span > 0 or span == float("inf"):
        return ((0.0, "+0s"),)
    raw = span / 5
    unit, name = (1.0, "s") if raw < 60 else (60.0, "min") if raw < 3600 else (3600.0, "h")
    power = 10 ** math.floor(math.log10(raw / unit))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw / unit) * unit
    count = int(span / step + 1e-9)
    return tuple((n * step / span, f"+{n * step / unit:g}{name}") for n in range(count + 1))


def progress(g: GroupProgress, hung: bool = True) -> ProgressTable:
    """Ranks folded by where they stood; the rows that are not the majority's are marked."""
    states_known = any(p.started is not None or p.completed is not None for p in g.ranks)
    rows: dict[tuple[int | None, int | None, int | None], list[int]] = defaultdict(list)
    for p in g.ranks:
        rows[(p.enqueued, p.started, p.completed)].append(p.rank)
    majority = max(rows, key=lambda k: (len(rows[k]), k[0] or -1), default=None)
    lagging = set(g.lagging)
    out = []
    for key, ranks in sorted(rows.items(), key=lambda kv: (-(kv[0][0] or -1), kv[1][0])):
        behind = bool(lagging & set(ranks))
        outlier = key != majority or behind
        out.append(
            ProgressRow(
                ranks=c.ranks_str(ranks),
                count=len(ranks),
                enqueued=_seq(key[0]),
                started=_seq(key[1]) if states_known else "",
                completed=_seq(key[2]) if states_known else "",
                outlier=outlier,
                note="behind" if behind else ("odd one out" if outlier else ""),
            )
        )
    if g.missing:
        out.append(
            ProgressRow(c.ranks_str(g.missing), len(g.missing), "-", "", "", True, "no dump")
        )
    stuck = ""
    if g.stuck_seq is not None:
        op = f"{c.short(g.stuck_op, 60)} " if g.stuck_op else ""
        # "stuck" beside "no hang" would contradict it: the others got an error there
        stuck = f"{'stuck' if hung else 'went wrong'} at {op}#{g.stuck_seq}"
    group = c.short(g.pg if not g.desc else f"{g.pg} ({g.desc})", 120)
    return ProgressTable(group, stuck, tuple(out), states_known)


def _seq(value: int | None) -> str:
    return "-" if value is None else f"#{value}"


def blamed(d: Diagnosis) -> set[int]:
    blamed = set(d.culprit_ranks)
    if d.hang is not None and d.hang.detected:
        blamed |= set(d.hang.lagging_ranks)
    return blamed


def stacks(g: StackGroup, blamed: set[int]) -> Stacks:
    frames = tuple(
        c.short(f"{f.function} ({f.filename}" + (f":{f.line})" if f.line else ")"), 200)
        for f in g.frames
    )
    top = c.short(g.frames[0].function, 120) if g.frames else "?"
    culprit = bool(blamed & set(g.ranks))
    return Stacks(
        c.ranks_str(g.ranks),
        len(g.ranks),
        top,
        frames,
        g.waiting,
        g.outlier,
        culprit,
        c.short(g.setup, 80),
    )
