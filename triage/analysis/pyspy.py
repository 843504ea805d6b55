"""Hang localization from py-spy dumps: cluster ranks by their main-thread stack.

In a hang almost every rank sits in the same place (`barrier`, `all_reduce`, a `wait`) and
one rank sits elsewhere (`save_checkpoint`, a data loader, `time.sleep`). We normalise each
main-thread stack to its functions and files (line numbers and install prefixes vary), group
ranks by it, and call the minority suspect; a rank outside any collective, while the others
wait in one, is the strongest suspect of all.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from triage import regex_cache
from triage.analysis.ranks import format_ranks
from triage.knowledge.frames import LibraryFrames
from triage.model import (
    Event,
    EvidenceRef,
    Finding,
    FindingKind,
    PySpyDump,
    StackFrame,
    StackGroup,
    StackOutlierFacts,
    Traceback,
    TracebackFrame,
)

_SITE = regex_cache.compile(r"^.*?/(?:site|dist)-packages/")


@dataclass(frozen=True)
class RankStack:
    rank: int
    dump: PySpyDump
    event: Event


@dataclass
class StackCluster:
    signature: tuple[tuple[str, str], ...]
    ranks: list[int]
    waiting: bool  # inside a collective / distributed wait
    top: str  # innermost function, as a person would name it
    setup: str | None  # the setup or rendezvous call it waits in (`init_process_group`)
    user_frame: StackFrame | None
    event: Event


@dataclass
class PySpyAnalysis:
    clusters: list[StackCluster] = field(default_factory=list)
    outliers: list[StackCluster] = field(default_factory=list)
    # rank -> the culprit signal it gave (`rules/culprit.yaml`, group stacks)
    suspects: dict[int, set[str]] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    waiting_ranks: tuple[int, ...] = ()
    user_frames: dict[int, StackFrame] = field(default_factory=dict)
    unmatched: int = 0  # dumps whose pid could not be mapped to a rank
    # rank -> the setup or rendezvous call its stack waits in; None: a dump of no known rank
    # (a launcher's agent waiting in its rendezvous)
    setup_waits: dict[int | None, str] = field(default_factory=dict)


def _short(filename: str) -> str:
    return _SITE.sub("", filename)


def normalise(frames: Sequence[StackFrame]) -> tuple[tuple[str, str], ...]:
    """Functions and short file names, innermost first; line numbers dropped."""
    return tuple((f.function, _short(f.filename).rsplit("/", 1)[-1]) for f in frames)


def user_frame(frames: Sequence[StackFrame], library: LibraryFrames) -> StackFrame | None:
    """The innermost frame that belongs to the user's code rather than a library
    (`library`: the run's `kb.frames`)."""
    for f in frames:
        if not library.is_library(f.filename):
            return f
    return None


@dataclass(frozen=True)
class RaisedAt:
    """Where a traceback's first link raised, as the user's code saw it."""

    user: StackFrame | None  # the innermost frame of the user's code
    # that frame is the innermost of all: the user's own line raised, not a library it called
    by_user: bool


def as_stack(frames: Sequence[TracebackFrame]) -> list[StackFrame]:
    """A traceback's frames (outermost first, as Python prints them) as a py-spy stack holds
    them: innermost first, the order `LibraryFrames` reads a stack in."""
    return [StackFrame(f.function, f.file, f.line) for f in frames][::-1]


def raising_frame(traceback: Traceback, library: LibraryFrames) -> RaisedAt:
    """The user's line that raised: the innermost frame of the user's code in the first link of
    a (chained) traceback. A later link was raised while handling it (a `finally:` barrier),
    and a thread's traceback is its own (`Exception in thread prefetch-1:`)."""
    frames = as_stack(traceback.links[0].frames if traceback.links else ())
    user = user_frame(frames, library)
    return RaisedAt(user, user is not None and user is frames[0])


def analyze(
    stacks: Sequence[RankStack], library: LibraryFrames, unranked: Sequence[PySpyDump] = ()
) -> PySpyAnalysis:
    """`unranked`: dumps no rank could be found for (a launcher's own process)."""
    out = PySpyAnalysis(unmatched=len(unranked))
    for dump in unranked:
        main = dump.main_thread()
        call = library.setup_call(main.frames) if main is not None else None
        if call is not None:
            out.setup_waits.setdefault(None, call)
    groups: dict[tuple[tuple[str, str], ...], list[RankStack]] = defaultdict(list)
    seen: set[int] = set()
    for rs in stacks:
        if rs.rank in seen:
            continue  # several dumps of one rank: keep the first (they are usually the same)
        seen.add(rs.rank)
        main = rs.dump.main_thread()
        if main is None:
            continue
        groups[normalise(main.frames)].append(rs)
        uf = user_frame(main.frames, library)
        if uf:
            out.user_frames[rs.rank] = uf
    for sig, members in groups.items():
        main = members[0].dump.main_thread()
        frames = main.frames if main else ()
        setup = library.setup_call(frames)
        out.clusters.append(
            StackCluster(
                signature=sig,
                ranks=sorted(m.rank for m in members),
                waiting=library.is_waiting(frames),
                top=frames[0].function if frames else "?",
                user_frame=user_frame(frames, library),
                event=members[0].event,
                setup=setup,
            )
        )
        if setup is not None:
            out.setup_waits.update({m.rank: setup for m in members})
    out.clusters.sort(key=lambda c: (-len(c.ranks), c.ranks))
    out.waiting_ranks = tuple(sorted(r for c in out.clusters if c.waiting for r in c.ranks))
    total = sum(len(c.ranks) for c in out.clusters)
    if len(out.clusters) < 2 or total < 2:
        return out

    waiting = [c for c in out.clusters if c.waiting]
    elsewhere = [c for c in out.clusters if not c.waiting]
    away = sum(len(c.ranks) for c in elsewhere)
    if waiting and elsewhere and away * 2 <= total:
        # the classic hang: the peers wait in a collective, these ranks are somewhere else.
        # Half and half (two ranks, one each side) still says who the waiters wait for, but
        # less surely: the rank outside may have its own reason to be there
        outliers = elsewhere
        signal = (
            "stack_outside_collective_few" if away * 2 < total else "stack_outside_collective_half"
        )
        why = "not in any collective while the others wait in one"
    else:
        biggest = len(out.clusters[0].ranks)
        outliers = [c for c in out.clusters if len(c.ranks) < biggest]
        signal = "stack_elsewhere"
        why = "stopped in a different place than the majority"
        if not outliers:
            return out  # an even split: no minority to blame
    majority = max(out.clusters, key=lambda c: (c.waiting, len(c.ranks)))
    out.outliers = list(outliers)
    for c in outliers:
        for r in c.ranks:
            out.suspects.setdefault(r, set()).add(signal)
        uf = c.user_frame
        where = f"{c.top}" + (
            f" (user code: {uf.function} at {uf.filename}:{uf.line})" if uf else ""
        )
        out.findings.append(
            Finding(
                kind=FindingKind.STACK_OUTLIER,
                summary=(
                    f"py-spy: rank(s) {format_ranks(c.ranks)} {why}: main thread in {where}; "
                    f"{len(majority.ranks)} rank(s) are in {majority.top}"
                ),
                ranks=tuple(c.ranks),
                evidence=(
                    _ref(c),
                    _ref(majority),
                ),
                facts=StackOutlierFacts(
                    stack_top=c.top,
                    majority_top=majority.top,
                    # in a collective of its own (another call site) or busy outside any
                    in_collective=c.waiting,
                    user_frame=f"{uf.function} ({uf.filename}:{uf.line})" if uf else None,
                    clusters=tuple((format_ranks(x.ranks), x.top) for x in out.clusters[:8]),
                ),
            )
        )
    return out


def _ref(c: StackCluster) -> EvidenceRef:
    frames = " <- ".join(f"{fn} ({fi})" for fn, fi in c.signature[:4])
    return EvidenceRef(source=c.event.source, line=c.event.line, rank=c.ranks[0], text=frames)


STACK_FRAMES = 8  # frames a report shows of each group: where it stands and how it got there


def groups(analysis: PySpyAnalysis) -> tuple[StackGroup, ...]:
    """The stack groups, biggest first, the odd ones out marked, for the reports."""
    odd = {id(c) for c in analysis.outliers}
    out = []
    for c in analysis.clusters:
        main = c.event.payload.main_thread() if isinstance(c.event.payload, PySpyDump) else None
        frames = tuple(
            f._replace(filename=_short(f.filename)) for f in (main.frames if main else ())
        )
        out.append(
            StackGroup(
                tuple(c.ranks), frames[:STACK_FRAMES], c.waiting, id(c) in odd, c.setup or ""
            )
        )
    return tuple(out)
