"""One timeline across ranks and hosts, and a compact "what happened, in order" list.

Clocks: within one host all ranks share a clock, so per-host order is trusted as printed.
Across hosts clocks may be skewed by seconds, so we never compare raw stamps blindly: we
estimate each host's offset from events that happen at (nearly) the same instant everywhere
— flight-recorder records of one collective (same process group and sequence id) and NCCL
`Init COMPLETE` of one communicator (a bootstrap barrier) — and shift that host's events by
the median difference. A host with no shared anchor keeps its own clock; time order between
it and the others is then only a tie-breaker, never the main argument for blame.
"""

from __future__ import annotations

import re
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from triage import regex_cache
from triage.analysis.ranks import first_line, format_ranks, quoted_line
from triage.model import Event, TimelineEntry
from triage.parsers import timestamps

# (anchor id) -> {clock domain: epoch seconds}
Anchors = Mapping[object, Mapping[str, float]]

_NOISE_PATTERN = (
    r"0x[0-9a-fA-F]+|\d+(?:\.\d+)*|\[rank\d+\]:?|(?<=\[)[\w.-]+(?=\]:\d)|\b[\w-]+(?=:\d+:\d+)"
)
_NOISE = regex_cache.compile(_NOISE_PATTERN)
# The stdlib engine runs this pattern ~3x faster; on ASCII text both read \w, \d and \b alike
# (on other text `regex` follows Unicode more closely, so it keeps that text).
_NOISE_ASCII = re.compile(_NOISE_PATTERN)


def estimate_offsets(anchors: Anchors) -> dict[str, float]:
    """Seconds to subtract from each clock domain's stamps to line it up with the others."""
    diffs: dict[str, list[float]] = defaultdict(list)
    for times in anchors.values():
        if len(times) < 2:
            continue
        centre = statistics.median(times.values())
        for domain, t in times.items():
            diffs[domain].append(t - centre)
    offsets = {d: statistics.median(v) for d, v in diffs.items() if v}
    if not offsets:
        return {}
    # re-centre on the domain with the most anchors so its printed times stay as they are
    ref = min(sorted(diffs), key=lambda d: -len(diffs[d]))  # ties: the first host by name
    base = offsets[ref]
    return {d: o - base for d, o in offsets.items()}


@dataclass(frozen=True)
class Placed:
    """An event with its rank, clock domain, aligned time and role in the story."""

    event: Event
    rank: int | None
    domain: str
    time: float | None  # aligned epoch seconds
    role: str
    family: str | None
    approx: bool = False  # the line had no stamp: `time` is the last stamp printed before it
    # a line without a stamp lies after `earliest` (its own stream's last stamp) and before
    # `latest` (the launcher's next): what the timeline shows (None: unknown)
    earliest: float | None = None
    latest: float | None = None
    wording: str | None = None  # what the reports call its family (cascade.family_wording)


def align(event: Event, domain: str, offsets: Mapping[str, float]) -> float | None:
    """Aligned epoch seconds; a line without a stamp takes the last stamp printed before it."""
    t = event.time
    if t is None:
        t = event.time_before
    if t is None:
        return None
    return t - offsets.get(domain, 0.0)


def align_bound(bound: float | None, domain: str, offsets: Mapping[str, float]) -> float | None:
    """A bound of a line without a stamp (`Event.stream_time_before`, `.time_after`), aligned."""
    return None if bound is None else bound - offsets.get(domain, 0.0)


def signature(text: str) -> str:
    """A message with its numbers, addresses, ranks and hosts blanked: equal for all victims."""
    line = first_line(text, 400)
    return (_NOISE_ASCII if line.isascii() else _NOISE).sub("#", line)


def build(
    placed: Iterable[Placed], extra: Sequence[TimelineEntry] = (), limit: int = 40
) -> tuple[TimelineEntry, ...]:
    """Initiating events once per rank and message (a --tee job prints each error in the
    console, the rank's own log and its error.json), cascade events folded into one line per
    message kind across all ranks.

    A line without a stamp keeps no time of its own: its entry carries the stamps around it in
    its file (`earliest`, `latest`), sorts by the first, and one with neither sits by its
    file's neighbours."""
    entries: list[TimelineEntry] = []
    folded: dict[tuple[str, str], list[Placed]] = defaultdict(list)
    seen: set[tuple[int | None, str]] = set()
    for p in sorted(placed, key=lambda p: (p.time is None, p.time or 0.0, p.role != "initiating")):
        if p.role == "cascade":
            folded[(p.wording or p.family or "", signature(p.event.text))].append(p)
            continue
        if p.role != "initiating":
            continue
        key = (p.rank, signature(p.event.text))
        if key in seen:
            continue
        seen.add(key)
        text, line = quoted_line(p.event, 240)  # the quoted line's own, not the traceback's first
        entries.append(_entry(p, text, line))
    for (family, _), group in folded.items():
        group.sort(key=lambda p: (p.time is None, p.time or 0.0))
        head = group[0]
        ranks = sorted({p.rank for p in group if p.rank is not None})
        text, line = quoted_line(head.event, 200)
        count = prints(group)
        if count > 1:
            who = (
                f"ranks {format_ranks(ranks)}" if len(ranks) > 1 else f"rank {format_ranks(ranks)}"
            )
            text = f"{text}  [x{count} on {who}; {family.replace('_', ' ')}]"
        entries.append(_entry(head, text, line))
    out = _in_order([*entries, *extra])
    if len(out) > limit:
        # keep every initiating line and the earliest of the rest
        keep = [e for e in out if e.role == "initiating"][: limit // 2]
        rest = [e for e in out if e.role != "initiating"][: limit - len(keep)]
        kept = {id(e) for e in keep + rest}
        out = [e for e in out if id(e) in kept]
    return tuple(out)


def prints(group: Iterable[Placed]) -> int:
    """How many errors ranks printed in these lines: each rank's line once, however many files
    show it. A --tee job prints each line in the console and again in the rank's own log,
    `@record` adds the error to error.json (as a message and a traceback), and torchrun's
    summary quotes it: copies, not errors of their own."""
    return len({(p.rank, first_line(p.event.text, 400)) for p in group})


def first_error(entries: Sequence[TimelineEntry]) -> TimelineEntry | None:
    """The earliest error a rank printed, of a timeline in order (`build`)."""
    return next(
        (e for e in entries if e.role in ("initiating", "cascade") and e.rank is not None), None
    )


def _entry(p: Placed, text: str, line: int | None) -> TimelineEntry:
    if p.approx:
        return TimelineEntry(
            None, p.rank, text, p.event.source, line, p.role, earliest=p.earliest, latest=p.latest
        )
    return TimelineEntry(
        p.time, p.rank, text, p.event.source, line, p.role, resolution=stamp_resolution(p.event)
    )


def stamp_resolution(ev: Event) -> float:
    """1.0 for a line stamped to the second (`2026-12-02 10:20:43`), which the reports show
    so, never as `.000`; else 0.0."""
    if ev.time is None:
        return 0.0
    return 1.0 if timestamps.dated_resolution(ev.text) >= 1.0 else 0.0


_ROLE_ORDER = {"initiating": 0, "cascade": 1}


def _in_order(entries: Sequence[TimelineEntry]) -> list[TimelineEntry]:
    """Entries by time (a line without a stamp by the stamp before it, else the one after);
    a cause before its consequences where its own line cannot say; a line with no stamp
    around it beside its file's neighbours."""
    keys: dict[int, float] = {}
    for i, e in enumerate(entries):
        t = e.time if e.time is not None else e.earliest
        if e.time is not None and e.resolution and e.role != "initiating":
            # a stamp to the second holds that whole second: a consequence stamped so (an
            # exit at 12:00:05) is not before a finer stamp within it (the error at
            # 12:00:05.300 that caused it), and still before the next second
            t = e.time + e.resolution * (1 - 1e-6)
        if t is None and e.latest is not None:
            # only a stamp after it: it sorts before that stamp, and before anything stamped
            # in the second before it (stamps to the second, an exit's, read up to 1 s early)
            t = e.latest - 1.0
        if t is not None:
            keys[i] = t
    # A line without a stamp whose bounds hold an error's stamp is not shown above that error:
    # it would read as earlier than a stamp its own "before" bound is later than (a rank's
    # traceback on stderr, printed ahead of its buffered stdout line that logged the NaN)
    stamped = [
        keys[i]
        for i, e in enumerate(entries)
        if e.time is not None and e.role in _ROLE_ORDER and i in keys
    ]
    for i, e in enumerate(entries):
        if e.time is None and e.earliest is not None and e.latest is not None and i in keys:
            inside = [t for t in stamped if e.earliest < t < e.latest]
            if inside:
                keys[i] = max(keys[i], max(inside) + 1e-3)
    # Lines without a stamp of one file that the same next stamp bounds lie in intervals that
    # overlap: their streams' last stamps differ, which says nothing of which came first, and
    # the file's own order is the best witness (rank 2's abort, printed before the errors it
    # caused on ranks 1 and 3 though rank 2 last stamped a few ms after them)
    window: dict[tuple[str, float], list[int]] = defaultdict(list)
    for i, e in enumerate(entries):
        if e.time is None and e.latest is not None and i in keys:
            window[(e.source, e.latest)].append(i)
    for members in window.values():
        low = min(keys[i] for i in members)
        for i in members:
            keys[i] = low
    cascades = [keys[i] for i, e in enumerate(entries) if e.role == "cascade" and i in keys]
    first_cascade = min(cascades, default=None)
    if first_cascade is not None:
        # an unstamped cause whose stamp before falls after its consequences began says
        # nothing about when it happened: it sorts before the consequences
        for i, e in enumerate(entries):
            if e.role == "initiating" and e.time is None and keys.get(i, -1.0) >= first_cascade:
                keys[i] = first_cascade - 1e-6
    causes = [keys[i] for i, e in enumerate(entries) if e.role == "initiating" and i in keys]
    if causes:
        # an unstamped consequence only has a lower bound; it cannot precede its cause
        t0 = min(causes)
        for i, e in enumerate(entries):
            if e.role == "cascade" and e.time is None and i in keys and keys[i] < t0:
                keys[i] = t0
    # A stamp earlier than a consequence's "after" bound goes above that line: its file's
    # group of lines without a stamp sorts by the group's earliest bound, which can lie before
    # the stamp (the flight recorder's 16.741, below a line printed after 16.744). A cause
    # keeps its place before its consequences (above).
    for i, e in enumerate(entries):
        if e.time is None or i not in keys:
            continue
        later = [
            keys[j]
            for j, u in enumerate(entries)
            if u.time is None and u.earliest is not None and u.role != "initiating"
            if j in keys and u.earliest >= e.time + e.resolution and keys[j] <= keys[i]
        ]
        if later:
            keys[i] = min(later) - 1e-6

    def order(i: int) -> tuple[float, int, str, int, int]:
        e = entries[i]
        return (keys[i], _ROLE_ORDER.get(e.role, 2), e.source, e.line or 0, i)

    out = [entries[i] for i in sorted(keys, key=order)]
    for i in sorted(
        set(range(len(entries))) - set(keys),
        key=lambda i: (entries[i].source, entries[i].line or 0, i),
    ):
        e = entries[i]
        out.insert(_file_place(out, e), e)
    return out


def _file_place(out: Sequence[TimelineEntry], e: TimelineEntry) -> int:
    """Where an entry with no time at all goes: before the next line of its own file, else
    after the last one before it; else, a cause, before the first consequence; else last."""
    if e.line is not None:
        same = [
            (j, x.line) for j, x in enumerate(out) if x.source == e.source and x.line is not None
        ]
        after = [j for j, line in same if line > e.line]
        if after:
            return min(after)
        before = [j for j, line in same if line <= e.line]
        if before:
            return max(before) + 1
    if e.role == "initiating":
        return next((j for j, x in enumerate(out) if x.role == "cascade"), len(out))
    return len(out)
