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
from dataclasses import dataclass, replace

import regex

from triage.analysis.ranks import first_line, format_ranks, quoted_line
from triage.model import Event, TimelineEntry

# (anchor id) -> {clock domain: epoch seconds}
Anchors = Mapping[object, Mapping[str, float]]

_NOISE_PATTERN = (
    r"0x[0-9a-fA-F]+|\d+(?:\.\d+)*|\[rank\d+\]:?|(?<=\[)[\w.-]+(?=\]:\d)|\b[\w-]+(?=:\d+:\d+)"
)
_NOISE = regex.compile(_NOISE_PATTERN)
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


def align(event: Event, domain: str, offsets: Mapping[str, float]) -> float | None:
    """Aligned epoch seconds; a line without a stamp takes the last stamp printed before it."""
    t = event.time
    if t is None:
        t = event.time_before
    if t is None:
        return None
    return t - offsets.get(domain, 0.0)


def signature(text: str) -> str:
    """A message with its numbers, addresses, ranks and hosts blanked: equal for all victims."""
    line = first_line(text, 400)
    return (_NOISE_ASCII if line.isascii() else _NOISE).sub("#", line)


def build(
    placed: Iterable[Placed], extra: Sequence[TimelineEntry] = (), limit: int = 40
) -> tuple[TimelineEntry, ...]:
    """Initiating events once per rank and message (a --tee job prints each error in the
    console, the rank's own log and its error.json), cascade events folded into one line per
    message kind across all ranks."""
    entries: list[tuple[float | None, int, TimelineEntry]] = []
    folded: dict[tuple[str, str], list[Placed]] = defaultdict(list)
    seen: set[tuple[int | None, str]] = set()
    order = 0
    placed = list(placed)
    # an unstamped cause whose only time bound falls after its consequences began says
    # nothing about when it happened: drop the bound, it sorts before the consequences
    c0 = min(
        (p.time for p in placed if p.role == "cascade" and not p.approx and p.time is not None),
        default=None,
    )
    if c0 is not None:
        placed = [
            replace(p, time=None)
            if p.approx and p.role == "initiating" and p.time is not None and p.time > c0
            else p
            for p in placed
        ]
    t0 = min(
        (p.time for p in placed if p.role == "initiating" and p.time is not None), default=None
    )
    if t0 is not None:
        # an unstamped consequence only has a lower bound; it cannot precede its cause
        placed = [
            replace(p, time=t0)
            if p.approx and p.role == "cascade" and p.time is not None and p.time < t0
            else p
            for p in placed
        ]
    for p in sorted(placed, key=lambda p: (p.time is None, p.time or 0.0, p.role != "initiating")):
        if p.role == "cascade":
            folded[(p.family or "", signature(p.event.text))].append(p)
            continue
        if p.role != "initiating":
            continue
        key = (p.rank, signature(p.event.text))
        if key in seen:
            continue
        seen.add(key)
        quoted = quoted_line(p.event, 240)
        entries.append(
            (
                p.time,
                order,
                TimelineEntry(
                    time=p.time,
                    rank=p.rank,
                    text=quoted[0],
                    source=p.event.source,
                    line=quoted[1],  # the quoted line's own, not the traceback's first
                    role="initiating",
                ),
            )
        )
        order += 1
    for (family, _), group in folded.items():
        group.sort(key=lambda p: (p.time is None, p.time or 0.0))
        head = group[0]
        ranks = sorted({p.rank for p in group if p.rank is not None})
        text, line = quoted_line(head.event, 200)
        if len(group) > 1:
            who = (
                f"ranks {format_ranks(ranks)}" if len(ranks) > 1 else f"rank {format_ranks(ranks)}"
            )
            text = f"{text}  [x{len(group)} on {who}; {family.replace('_', ' ')}]"
        entries.append(
            (
                head.time,
                order,
                TimelineEntry(
                    time=head.time,
                    rank=head.rank,
                    text=text,
                    source=head.event.source,
                    line=line,
                    role="cascade",
                ),
            )
        )
        order += 1
    for e in extra:
        entries.append((e.time, order, e))
        order += 1
    # a cause whose line carried no time still comes before its consequences
    first_cascade = min(
        (e.time for _, _, e in entries if e.role == "cascade" and e.time is not None),
        default=None,
    )

    def when(x: tuple[float | None, int, TimelineEntry]) -> tuple[bool, float, int]:
        t = x[0]
        if t is None and x[2].role == "initiating" and first_cascade is not None:
            t = first_cascade - 1e-6
        return (t is None, t or 0.0, x[1])

    entries.sort(key=when)
    out = [e for _, _, e in entries]
    if len(out) > limit:
        # keep every initiating line and the earliest of the rest
        keep = [e for e in out if e.role == "initiating"][: limit // 2]
        rest = [e for e in out if e.role != "initiating"][: limit - len(keep)]
        kept = {id(e) for e in keep + rest}
        out = [e for e in out if id(e) in kept]
    return tuple(out)
