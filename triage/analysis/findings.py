"""The findings about the whole job: who started it, what is cascade, the timeline's extras."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import replace

from triage.analysis import exits, flight_recorder, launcher, pyspy, timeline
from triage.analysis.first_failure import by_time
from triage.analysis.ranks import RankIndex, first_line, format_ranks, ranks_named, ref
from triage.model import (
    CascadeFacts,
    CollectiveMismatchFacts,
    Event,
    EvidenceRef,
    FailureRef,
    Finding,
    FindingKind,
    FirstFailureFacts,
    HangFacts,
    HangReport,
    LaggingRankFacts,
    MissingRankFacts,
    TimelineEntry,
)


def with_silent(f: Finding, spoke: set[int]) -> Finding:
    """A missing rank's finding with the ranks of it that printed nothing (`silent_ranks`)."""
    silent = [r for r in f.ranks if r not in spoke]
    if not silent:
        return f
    if not isinstance(f.facts, MissingRankFacts):
        return f
    return replace(f, facts=replace(f.facts, silent_ranks=format_ranks(silent)))


def culprit_findings(
    culprits: Sequence[int],
    lead: int | None,
    scores: Counter[int],
    reasons: dict[int, list[str]],
    first: FailureRef | None,
    exit_records: Sequence[exits.ExitRecord],
) -> list[Finding]:
    root = [
        r.exit.rank for r in exit_records if r.exit.is_root_cause_block and r.exit.rank is not None
    ]
    out: list[Finding] = []
    if culprits and lead is not None:
        why = "; ".join(reasons[lead][:4])
        summary = f"rank(s) {format_ranks(culprits)} started it: {why}"
        if root and root[0] not in culprits:
            summary += (
                f". torchrun's 'Root Cause (first observed failure)' names rank {root[0]}, "
                "but that is only the first exit the agent noticed"
            )
        evidence: tuple[EvidenceRef, ...] = ()
        if first is not None:
            evidence = (EvidenceRef(first.source, first.line, first.rank, first.text),)
        out.append(
            Finding(
                kind=FindingKind.FIRST_FAILURE,
                summary=summary,
                ranks=tuple(culprits),
                evidence=evidence,
                facts=FirstFailureFacts(
                    scores={
                        r: round(scores[r], 2) for r in sorted(scores, key=lambda r: -scores[r])[:8]
                    },
                    torchrun_root_cause_rank=root[0] if root else None,
                ),
            )
        )
    elif first is not None:
        out.append(
            Finding(
                kind=FindingKind.FIRST_FAILURE,
                summary=f"earliest error seen (no rank stands out): {first.text}",
                ranks=(first.rank,) if first.rank is not None else (),
                evidence=(EvidenceRef(first.source, first.line, first.rank, first.text),),
            )
        )
    return out


def cascade_findings(
    cascade_events: Sequence[timeline.Placed], first: FailureRef | None = None
) -> list[Finding]:
    if not cascade_events:
        return []
    # where no error of their own is seen, the first failure is the earliest consequence: the
    # errors are then consequences of a failure these logs do not show, not of that one
    whose = (
        "a failure these logs do not show"
        if first is not None and any(_holds(p.event, first) for p in cascade_events)
        else "the first failure"
    )
    by_family: dict[str, list[timeline.Placed]] = defaultdict(list)
    by_wording: dict[str, list[timeline.Placed]] = defaultdict(list)
    for p in cascade_events:
        by_family[p.family or "other"].append(p)
        by_wording[p.wording or (p.family or "other").replace("_", " ")].append(p)
    ranks = sorted({p.rank for p in cascade_events if p.rank is not None})
    # a line a rank's console and its own log both show is one error (timeline.prints)
    counts = {words: timeline.prints(ps) for words, ps in by_wording.items()}
    parts = [f"{words} x{n}" for words, n in sorted(counts.items(), key=lambda kv: -kv[1])]
    return [
        Finding(
            kind=FindingKind.CASCADE,
            summary=(
                f"{timeline.prints(cascade_events)} error(s)"
                # errors no rank printed (the launcher's, a store's) are not "on rank(s) none"
                + (f" on rank(s) {format_ranks(ranks)}" if ranks else "")
                + f" are consequences of {whose} ({', '.join(parts)})"
            ),
            ranks=tuple(ranks),
            evidence=tuple(ref(ps[0].event, ps[0].rank) for ps in list(by_family.values())[:4]),
            facts=CascadeFacts(families={k: len(v) for k, v in by_family.items()}),
        )
    ]


def _holds(ev: Event, ref: FailureRef) -> bool:
    """The event is the one a failure reference quotes (its line, or one of its lines)."""
    if ev.source != ref.source or ev.line is None or ref.line is None:
        return False
    return ev.line <= ref.line <= (ev.end_line if ev.end_line is not None else ev.line)


def timeline_extras(
    exit_records: Sequence[exits.ExitRecord],
    fr: flight_recorder.FRAnalysis,
    spy: pyspy.PySpyAnalysis,
    hang: HangReport | None,
    offsets: dict[str, float],
    index: RankIndex,
) -> list[TimelineEntry]:
    out: list[TimelineEntry] = []
    # one row per exit code and time: ranks that exited with one code at different times (a
    # node's ranks 20 s after another's) are not dated by the earliest of them
    groups: dict[tuple[int | None, float | None], list[exits.ExitRecord]] = defaultdict(list)
    for rec in exit_records:
        if rec.exit.exitcode == 0:
            continue
        when = None
        if rec.exit.time is not None:
            dom = rec.exit.host or (
                index.host_of_rank.get(rec.exit.rank, "") if rec.exit.rank is not None else ""
            )
            when = rec.exit.time - offsets.get(dom or "", 0.0)
        groups[(rec.exit.exitcode, when)].append(rec)
    for (code, when), recs in groups.items():
        ranks = [r.exit.rank for r in recs if r.exit.rank is not None]
        out.append(
            TimelineEntry(
                time=when,
                rank=ranks[0] if len(ranks) == 1 else None,
                text=f"{_who_exited(ranks, len(recs))} exited {code}: {recs[0].meaning}",
                source=recs[0].event.source,
                line=recs[0].event.line,
                role="context",
                resolution=max(r.exit.time_resolution for r in recs) if when is not None else 0.0,
            )
        )
    if hang is not None and fr.hang_pg is not None and fr.hang_pg.stuck_entry is not None:
        e = fr.hang_pg.stuck_entry
        t = e.time_created_ns / 1e9 if e.time_created_ns else None
        out.append(
            TimelineEntry(
                time=t,
                rank=None,
                text=f"flight recorder: {hang.explanation}",
                source="flight recorder",
                line=None,
                role="context",
            )
        )
    for f in spy.findings[:2]:
        e = f.evidence[0] if f.evidence else None
        out.append(
            TimelineEntry(
                time=None,
                # a finding about several ranks is none of theirs alone (its text names them)
                rank=f.ranks[0] if len(f.ranks) == 1 else None,
                text=f.summary,
                source=e.source if e else "py-spy",
                line=e.line if e else None,
                role="context",
            )
        )
    return out


def launch_findings(never_joined: Sequence[int], topo: launcher.Topology) -> list[Finding]:
    """Ranks of a node that never joined the launcher's rendezvous before it timed out."""
    if not never_joined or topo.rendezvous_timeout is None:
        return []
    joined = (
        f" ({topo.joined}/{topo.expected_agents} agents joined)" if topo.expected_agents else ""
    )
    return [
        Finding(
            kind=FindingKind.MISSING_RANK,
            summary=(
                f"rank(s) {format_ranks(never_joined)} never started: the launcher expected "
                f"{topo.nnodes} node(s) x {topo.nproc_per_node} process(es) and its "
                f"rendezvous timed out waiting for the rest{joined}"
            ),
            ranks=tuple(never_joined),
            evidence=(ref(topo.rendezvous_timeout),),
            facts=MissingRankFacts(
                nnodes=topo.nnodes,
                nproc_per_node=topo.nproc_per_node,
                node_ranks_seen=tuple(sorted(topo.node_ranks)),
            ),
        )
    ]


def silent_findings(
    silent: Sequence[int],
    has_initiating: bool,
    world_size: int | None,
    cascade_events: Sequence[timeline.Placed],
    unnamed_error: bool = False,
) -> list[Finding]:
    """Ranks that printed nothing while the others complained (when nobody raised);
    `unnamed_error`: an error no rank's line names started the failure (it may be theirs)."""
    if not silent or has_initiating:
        return []
    complaint = min(cascade_events, key=by_time, default=None)
    said = (
        "printed no error under their own rank while the others failed; the error no rank's "
        "line names may be theirs"
        if unnamed_error
        else "printed no error of their own while the others failed: they were missing, "
        "behind or stuck elsewhere"
    )
    return [
        Finding(
            kind=FindingKind.MISSING_RANK,
            summary=f"rank(s) {format_ranks(silent)} of {world_size} {said}",
            ranks=tuple(silent),
            evidence=(ref(complaint.event, complaint.rank),) if complaint else (),
            facts=MissingRankFacts(world_size=world_size, silent=tuple(silent)),
        )
    ]


def hang_findings(
    hang: HangReport | None,
    waited: Sequence[timeline.Placed],
    structural: Sequence[Finding],
) -> list[Finding]:
    """The hang (or the crash the survivors saw), with the waits and records that show it."""
    if hang is None:
        return []
    evidence = [ref(p.event, p.rank) for p in sorted(waited, key=by_time)[:2]]
    evidence += [e for f in structural[:2] for e in f.evidence[:1]]
    coll = hang.collective
    return [
        Finding(
            kind=FindingKind.HANG,
            summary=hang.explanation,
            ranks=hang.lagging_ranks,
            evidence=tuple(evidence),
            facts=HangFacts(
                detected=hang.detected,  # a rule tells a hang from the crash the others saw
                pg=hang.process_group,
                # a template's `{collective}` is the op's name, never the whole record
                collective=(coll.op or coll.profiling_name or None) if coll else None,
                op=coll.op if coll else None,
                shape=hang.shape,
                in_setup=hang.in_setup,
            ),
        )
    ]


# what a rank behind in the flight recorder meant, by how the job ended: in a hang the others
# waited for it; where they stopped at once the records only say where each rank stood
_BEHIND_MEANT = {
    "hang": "; they never entered the collective the others wait in",
    "error": "; that is where each rank stood when the job failed (no hang: the others stopped "
    "at once, nobody waited)",
}


def fr_findings_ended(fr_findings: Sequence[Finding], hang: HangReport | None) -> list[Finding]:
    """The flight recorder's findings, a collective mismatch, a missing dump and a rank behind
    marked with how the job ended: a mismatch of sizes or dtypes is a library error (the
    receiver checked) or a hang; a rank without a dump, or behind the others, while the others
    stopped at once did not hang them."""
    ended = "hang" if hang is not None and hang.detected else "error"
    out = []
    for f in fr_findings:
        if isinstance(f.facts, (CollectiveMismatchFacts, MissingRankFacts)):
            f = replace(f, facts=replace(f.facts, ended=ended))
        elif isinstance(f.facts, LaggingRankFacts):
            # the ranks that stopped short, not those that never started a collective they
            # had enqueued (that finding says nothing of the others' wait)
            said = f.summary + (_BEHIND_MEANT[ended] if f.facts.last_enqueued else "")
            f = replace(f, summary=said, facts=replace(f.facts, ended=ended))
        out.append(f)
    return out


def early_entries(early: Sequence[tuple[int, Event]]) -> list[TimelineEntry]:
    """The culprit's metric that went bad before anything raised, on the timeline."""
    return [
        TimelineEntry(
            time=ev.time,
            rank=rank,
            text=first_line(ev.text, 240),
            source=ev.source,
            line=ev.line,
            role="initiating",
            resolution=timeline.stamp_resolution(ev),
        )
        for rank, ev in early
    ]


def launch_entries(launch: Sequence[Finding], topo: launcher.Topology) -> list[TimelineEntry]:
    """The launcher's rendezvous timeout, on the timeline."""
    out = []
    for f in launch:
        e = f.evidence[0] if f.evidence else None
        out.append(
            TimelineEntry(
                time=topo.rendezvous_timeout.time if topo.rendezvous_timeout else None,
                # a finding about several ranks is none of theirs alone (its text names them)
                rank=f.ranks[0] if len(f.ranks) == 1 else None,
                text=f.summary,
                source=e.source if e else "launcher",
                line=e.line if e else None,
                role="context",
            )
        )
    return out


def _who_exited(ranks: list[int], processes: int) -> str:
    """`rank 3`, `ranks 0-7`; a process the launcher names without a rank (DeepSpeed's
    `exits with return code`) is `a worker`, not `rank(s) none`."""
    if ranks:
        return ranks_named(ranks)
    return "a worker" if processes == 1 else f"{processes} workers"
