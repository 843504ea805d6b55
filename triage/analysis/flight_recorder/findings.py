"""What a person reads of the analysis: findings with evidence, the stuck collective, the
reports' progress table."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from triage.analysis.flight_recorder.records import FRAnalysis, PGReport, op_of, record_ref
from triage.analysis.ranks import format_ranks, ranks_named
from triage.knowledge.frames import LibraryFrames
from triage.model import (
    CollectiveMismatchFacts,
    CollectiveProgress,
    CollectiveRef,
    EvidenceRef,
    Finding,
    FindingKind,
    FlightRecorderDump,
    FlightRecorderEntry,
    FrWindowFacts,
    GroupProgress,
    HangShape,
    LaggingRankFacts,
    MissingRankFacts,
)

__all__ = [
    "call_site_of",
    "collective_of",
    "findings_of",
    "progress",
    "status_table",
    "window_note",
]


def window_note(dumps: Sequence[FlightRecorderDump]) -> Finding:
    """Says that a big job's dumps were read in part, and how to read them whole."""
    kept = max(len(d.entries) for d in dumps)
    held = max(d.entries_total or 0 for d in dumps)
    return Finding(
        kind=FindingKind.FR_WINDOW,
        summary=(
            f"flight recorder: {len(dumps)} dumps read in part (a big job): the last {kept} "
            f"of up to {held:,} entries each, and every group's last enqueued, started and "
            "completed collective from pg_status; `--fr-entries 0` reads them whole"
        ),
        facts=FrWindowFacts(dumps=len(dumps), entries_kept=kept, entries_held=held),
    )


def call_site_of(e: FlightRecorderEntry | None, library: LibraryFrames) -> str | None:
    """The user's frame that issued the collective (NCCL-era dumps record Python frames)."""
    for f in e.frames if e is not None else ():
        if not library.is_library(f.filename):
            return f"{f.function} ({f.filename}:{f.line})"
    return None


def collective_of(report: PGReport) -> CollectiveRef:
    """The collective the group's ranks wait in, as the record of it says."""
    e = report.stuck_entry
    if e is None:
        return CollectiveRef(seq=report.stuck_seq, process_group=report.pg)
    return replace(record_ref(e, report.pg, report.call_site), seq=report.stuck_seq)


def _shapes_text(ref: CollectiveRef) -> str:
    """Input sizes and dtypes as a sentence says them: `6 Double`, `1024x4096, 16 Float`."""
    shapes = ", ".join("x".join(str(d) for d in shape) or "scalar" for shape in ref.input_sizes)
    dtypes = ",".join(ref.input_dtypes)
    return " ".join(p for p in (shapes, dtypes) if p) or "no inputs recorded"


def _ev(report: PGReport, rank: int, text: str) -> EvidenceRef:
    """Evidence that points at the rank's own dump file (or says none exists)."""
    source = report.sources.get(rank, f"flight recorder (no dump from rank {rank})")
    return EvidenceRef(source=source, line=None, rank=rank, text=text)


def findings_of(report: PGReport, suspects: dict[int, set[str]]) -> list[Finding]:
    out: list[Finding] = []
    label = f"{report.pg}" + (f" ({report.desc})" if report.desc else "")
    coll = collective_of(report)
    op = coll.op or "a collective"
    lasts = {
        r: (s.last_enqueued, s.last_started, s.last_completed)
        for r, s in sorted(report.states.items())
    }
    if report.missing:
        for r in report.missing:
            suspects.setdefault(r, set()).add("fr_missing_dump")
        out.append(
            Finding(
                kind=FindingKind.MISSING_RANK,
                summary=(
                    f"process group {label}: no flight-recorder dump from rank(s) "
                    f"{format_ranks(report.missing)} of {len(report.members)} members; the rank "
                    "that died or is stuck in teardown is often the one that did not dump"
                ),
                ranks=report.missing,
                evidence=tuple(
                    _ev(report, r, f"rank {r}: last enqueued {lasts[r][0]}")
                    for r in list(lasts)[:3]
                ),
                facts=MissingRankFacts(
                    pg=report.pg, members=len(report.members), missing=tuple(report.missing)
                ),
            )
        )
    if report.lagging:
        furthest = max(s.last_enqueued or 0 for s in report.states.values())
        few = len(report.lagging) * 2 <= len(report.states)
        for r in report.lagging:
            suspects.setdefault(r, set()).add("fr_lagging_few" if few else "fr_lagging_many")
        ahead = sorted(set(report.states) - set(report.lagging))
        where = ""
        if report.elsewhere:
            groups = ", ".join(sorted(set(report.elsewhere.values())))
            where = f", and their latest record is on process group {groups}"
        # each lagging rank's own last collective when they differ (#3 and #2 are not "#2"),
        # and the op of the furthest one, which is the ranks ahead's, not the stuck one's
        stops = sorted({lasts[r][0] or 0 for r in report.lagging})
        stopped = (
            f"collective #{stops[0]}"
            if len(stops) == 1
            else "collectives "
            + ", ".join(f"#{lasts[r][0]} (rank {r})" for r in report.lagging[:8])
        )
        far = next((g for r in ahead if (g := report.states[r].by_seq.get(furthest))), None)
        far_op = f" ({op_of(far.profiling_name)})" if far is not None else ""
        out.append(
            Finding(
                kind=FindingKind.LAGGING_RANK,
                summary=(
                    f"process group {label}: rank(s) {format_ranks(report.lagging)} stopped at "
                    f"{stopped} while rank(s) {format_ranks(ahead)} went on to #{furthest}"
                    # whether the others then waited for them is the hang's verdict, said
                    # when the finding is marked with how the job ended (`ended`)
                    f"{far_op}{where}"
                ),
                ranks=report.lagging,
                evidence=tuple(
                    _ev(report, r, f"rank {r}: last enqueued collective #{lasts[r][0]}")
                    for r in (list(report.lagging)[:3] + ahead[:2])
                ),
                facts=LaggingRankFacts(
                    pg=report.pg,
                    seq=report.stuck_seq,
                    op=coll.op,
                    last_enqueued={r: v[0] for r, v in lasts.items()},
                    waits_in_group=tuple(sorted(set(report.elsewhere.values()))),
                ),
            )
        )
    if report.not_started:
        for r in report.not_started:
            suspects.setdefault(r, set()).add("fr_not_started")
        out.append(
            Finding(
                kind=FindingKind.LAGGING_RANK,
                summary=(
                    f"process group {label}: every rank enqueued collective #{report.stuck_seq} "
                    f"({op}) but rank(s) {format_ranks(report.not_started)} never started it "
                    "(their GPU stream is stuck in earlier work)"
                ),
                ranks=report.not_started,
                evidence=tuple(
                    _ev(
                        report,
                        r,
                        f"rank {r}: last started #{lasts[r][1]}, completed #{lasts[r][2]}",
                    )
                    for r in report.not_started[:3]
                ),
                facts=LaggingRankFacts(pg=report.pg, seq=report.stuck_seq, op=coll.op),
            )
        )
    if report.mismatch:
        m = report.mismatch
        for r in m.ranks:
            suspects.setdefault(r, set()).add("fr_mismatch_tie" if m.tie else "fr_mismatch_odd")
        per = m.per_rank
        parts = []
        for sig_ranks in _group_by_sig(per):
            ex = per[sig_ranks[0]]
            parts.append(f"{ranks_named(sig_ranks)}: {ex.op} {_shapes_text(ex)}")
        how = ""
        if m.pattern == "left_loop":
            how = (
                f"; rank(s) {format_ranks(m.departed)} stopped issuing the collective the "
                "group had been repeating: they left the loop before the others"
            )
        out.append(
            Finding(
                kind=FindingKind.COLLECTIVE_MISMATCH,
                summary=(
                    f"process group {label}: collective #{m.seq} differs in {m.kind} across "
                    f"ranks ({'; '.join(parts[:4])}){how}"
                ),
                ranks=m.ranks,
                evidence=tuple(
                    _ev(
                        report,
                        r,
                        f"rank {r}: {per[r].profiling_name} {_shapes_text(per[r])}",
                    )
                    for r in list(per)[:4]
                ),
                facts=CollectiveMismatchFacts(
                    pg=report.pg,
                    seq=m.seq,
                    mismatch=m.kind,
                    pattern=HangShape(m.pattern),
                    ops={r: v.op for r, v in per.items()},
                    sizes={r: v.input_sizes for r, v in per.items()},
                    dtypes={r: v.input_dtypes for r, v in per.items()},
                ),
            )
        )
    return out


def _group_by_sig(per: Mapping[int, CollectiveRef]) -> list[list[int]]:
    groups: dict[str, list[int]] = {}
    for r, v in sorted(per.items()):
        key = repr((v.op, v.input_sizes, v.input_dtypes))
        groups.setdefault(key, []).append(r)
    return sorted(groups.values(), key=len)


def status_table(
    analysis: FRAnalysis,
) -> dict[str, dict[int, tuple[int | None, int | None, int | None]]]:
    """pg -> rank -> (last enqueued, last started, last completed), for facts and reports."""
    return {
        r.pg: {
            rank: (s.last_enqueued, s.last_started, s.last_completed)
            for rank, s in sorted(r.states.items())
        }
        for r in analysis.reports
    }


def progress(analysis: FRAnalysis) -> tuple[GroupProgress, ...]:
    """Each process group's last collectives per rank, for the reports' table."""
    out = []
    for r in analysis.reports:
        ranks = tuple(
            CollectiveProgress(
                rank,
                s.last_enqueued,
                s.last_started if r.has_states else None,
                s.last_completed if r.has_states else None,
            )
            for rank, s in sorted(r.states.items())
        )
        op = op_of(r.stuck_entry.profiling_name) if r.stuck_entry is not None else None
        out.append(GroupProgress(r.pg, r.desc, ranks, r.missing, r.lagging, r.stuck_seq, op))
    return tuple(out)
