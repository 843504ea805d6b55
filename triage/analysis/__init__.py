"""Correlate stage: events of all ranks -> findings, culprit ranks, hang report, timeline.

`correlate(parsed)` is the only entry point. It weighs independent signals per rank and names
the rank(s) with the strongest case as culprits:

* initiating errors (not a cascade family), earliest on the aligned timeline first;
* cascade messages that name a rank (`remote error detected from rank: N`, desync reports);
* flight-recorder position: missing, behind, never started, or odd one out in a mismatch;
* py-spy: the rank outside any collective while the others wait in one;
* progress: the rank whose last logged step is behind (or ahead of) the rest, or whose own
  metric went NaN/inf while the others' stayed finite;
* exits: SIGKILL / SIGSEGV / SIGBUS are self-inflicted, SIGTERM marks a survivor;
* silence: a rank of a known world size that printed nothing while the others complained;
* launcher topology: ranks of a node that never joined a rendezvous that timed out.

Every signal's weight and the reason it gives are data (`rules/culprit.yaml`, voted by
`culprit.py`); ranks whose score is within the table's co-culprit share (70%) of the best are
all named (several ranks can fail the same way). A hang is reported as detected when the
survivors waited until a timeout fired or were still waiting when py-spy looked; if they got
an error or a stop at once it was a crash.

What a rank's own failure explains is marked (`consequences.py`): the flight recorder and
py-spy findings about where it stood afterwards, and the abort of a rank that only detected a
peer's collective of other sizes or dtypes. The hang's shape (`hang_shape.py`) says what the
rank the others waited for was doing, which is what separates a collective mismatch from a
slow rank or uneven work.

This beats torchrun's "Root Cause (first observed failure)", which is only the first exit
the agent noticed (usually a survivor that timed out first).

`analyse` only runs the steps, each in its own module: `collect` (events sorted by use, the
world size), the flight recorder, py-spy, progress and consistency analyses, `culprit` (the
vote), `first_failure` (the line that started it), `hang` and `hang_shape`, `findings` (the
job's findings and the timeline's extras) and `facts` (the `AnalysisFacts` later stages read).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from triage import knowledge
from triage.analysis import (
    consequences,
    consistency,
    culprit,
    exits,
    flight_recorder,
    hang_shape,
    launcher,
    outcome,
    progress,
    pyspy,
    timeline,
)
from triage.analysis.appended_jobs import this_job
from triage.analysis.cascade import family_wording, waited_until_timeout
from triage.analysis.collect import Collected, add_dump_anchors, collect, with_dumps, world
from triage.analysis.facts import job_facts
from triage.analysis.findings import (
    cascade_findings,
    culprit_findings,
    early_entries,
    fr_findings_ended,
    hang_findings,
    launch_entries,
    launch_findings,
    silent_findings,
    timeline_extras,
    with_silent,
)
from triage.analysis.first_failure import (
    by_time,
    pick_first_failure,
    raising_frame,
    shared_errors_are_cascade,
    silent_ranks,
)
from triage.analysis.hang import hang_report, setup_raised
from triage.analysis.ranks import build_index
from triage.knowledge.routine import Routine
from triage.model import Analysis, AnalysisFacts, Finding, FindingKind, ParsedSource

__all__ = ["analyse", "correlate", "this_job"]


def correlate(parsed: Sequence[ParsedSource], kb: knowledge.Knowledge | None = None) -> Analysis:
    """Cross-rank analysis of everything the parsers found. Never raises on odd input.
    `kb`: the run's knowledge (cascade families, frameworks), None: the shipped one.

    A bug here must not cost the user the rest of the diagnosis: it becomes a finding that
    says so, and the classifier still sees every event.
    """
    kb = kb if kb is not None else knowledge.shipped()
    try:
        found = analyse(parsed, kb.routine, kb)
    except Exception as exc:  # noqa: BLE001 - the report must still come out
        return Analysis(
            findings=(
                Finding(
                    kind=FindingKind.ANALYSIS_ERROR,
                    summary=f"cross-rank analysis failed ({type(exc).__name__}: {exc}); "
                    "culprit and hang are unknown",
                ),
            ),
            facts=AnalysisFacts(analysis_error=f"{type(exc).__name__}: {exc}"),
        )
    try:
        decided = outcome.decide(parsed, found, kb.ends, kb.routine)
        return replace(found, outcome=decided, hang=outcome.hang_report(decided, found))
    except Exception as exc:  # noqa: BLE001 - the rest of the diagnosis still stands
        return replace(
            found,
            findings=(
                *found.findings,
                Finding(
                    kind=FindingKind.ANALYSIS_ERROR,
                    summary=f"deciding the job's outcome failed ({type(exc).__name__}: {exc})",
                ),
            ),
        )


def analyse(
    parsed: Sequence[ParsedSource],
    routine: Routine | None = None,
    kb: knowledge.Knowledge | None = None,
) -> Analysis:
    """`correlate` without the safety net (tests call this to see real errors)."""
    kb = kb if kb is not None else knowledge.shipped()
    index = build_index(parsed)
    seen = collect(parsed, index, kb, routine)
    topo = launcher.topology((ev for ps in parsed for ev in ps.events), kb)
    never_joined = topo.missing_ranks(seen.ranks_seen)
    w = world(index, seen.ranks_seen, topo)
    fr = flight_recorder.analyze(seen.fr_dumps, kb.frames, w.size)
    w = with_dumps(w, fr)
    add_dump_anchors(seen.anchors, fr, index)
    offsets = timeline.estimate_offsets(seen.anchors)
    placed = _place(seen, offsets, kb)
    roles = {id(ev): role for ev, _, _, role in seen.placed}
    # a rank that only detected a peer's other-sized message is not the cause when the flight
    # recorder shows whose collective differed; its abort (and its missing dump) follow
    detectors = consequences.mismatch_detectors(placed, fr, kb)
    if detectors:
        placed = consequences.as_detected(placed, detectors)
        odd = consequences.sizes_odd_ones(fr)
        fr.suspects = {r: w for r, w in fr.suspects.items() if r not in detectors or r in odd}
    spy = pyspy.analyze(seen.stacks, kb.frames, seen.unmatched_stacks)
    prog = progress.analyze(seen.progress_events)
    cons = consistency.analyze(parsed, index, kb.agreement)

    votes = culprit.vote(
        placed, roles, seen.exit_records, fr, spy, prog, cons, w.size, index, seen.ip_hosts, kb
    )
    silent = silent_ranks(
        placed, seen.exit_records, w.size, w.explicit, seen.ranks_seen, seen.ranks_with_events
    )
    # silence is strong evidence only when nobody raised an error of their own
    # ... or when the flight recorder already shows whose collective differed
    has_initiating = any(p.role == "initiating" and p.rank is not None for p in placed) or bool(
        consequences.sizes_odd_ones(fr)
    )
    unnamed_error = any(p.role == "initiating" and p.rank is None for p in placed)
    culprit.vote_absent(votes, silent, has_initiating, never_joined, unnamed_error)
    culprits = culprit.pick(votes)
    if not culprits and w.explicit and w.size == 1 and any(p.role == "initiating" for p in placed):
        # a job of one process (its world size stated): whatever failed, failed on rank 0
        culprits = [0]
    lead = max(culprits, key=lambda r: (votes.scores[r], -r)) if culprits else None
    placed = shared_errors_are_cascade(placed, culprits)
    initiating = sorted(
        (p for p in placed if p.role == "initiating"),
        key=lambda p: (p.rank not in culprits, -roles[id(p.event)].strength, by_time(p)),
    )
    cascade_events = [p for p in placed if p.role == "cascade"]
    # the cascade messages that say their rank waited until a timeout fired (read twice below)
    waited = [p for p in cascade_events if waited_until_timeout(p.event.text, kb)]
    launch = launch_findings(never_joined, topo)
    silent_found = silent_findings(silent, has_initiating, w.size, cascade_events, unnamed_error)
    structural = [*launch, *fr.findings, *spy.findings, *silent_found]
    early = [(r, prog.events[r]) for r in prog.non_finite if r in culprits]
    # a task the launcher killed while it ended the step is never the first failure
    victims = {id(ev) for ev in seen.launcher_victims}
    own_ends = [p for p in placed if id(p.event) not in victims]
    first = pick_first_failure(culprits, initiating, seen.exit_records, structural, own_ends, early)
    if first is not None and first.rank is not None and first.rank in index.host_said:
        # the host a log names for the rank beats one read from a file or folder name
        first = replace(first, host=index.host_said[first.rank])
    hang = hang_report(
        placed,
        culprits,
        fr,
        spy,
        initiating,
        seen.exit_records,
        {id(p) for p in waited},
        raised_in_setup=setup_raised([p.event for p in waited], kb.frames),
    )
    own = consequences.own_failures(placed, seen.exit_records)
    shape = hang_shape.shape(hang, fr, spy, own, culprits)
    if hang is not None:
        said = hang_shape.WORDING.get(shape) if shape is not None else None
        hang = replace(
            hang, shape=shape, account=f"{hang.account}: {said}" if said else hang.account
        )

    findings = [
        *culprit_findings(culprits, lead, votes.scores, votes.reasons, first, seen.exit_records),
        *hang_findings(hang, waited, structural),
        *fr_findings_ended(fr.findings, hang),
        *spy.findings,
        *prog.findings,
        *silent_found,
        *launch,
        *cascade_findings(cascade_events, first),
        *exits.exit_findings(seen.exit_records),
        *exits.restart_findings(parsed, kb),
        *progress.loss_diverged(parsed),
        *cons.findings,
    ]
    # a detector's abort explains its missing dump as well as a rank's own error does
    findings = consequences.mark(findings, own | detectors)
    # a rank that printed an error of its own, or a consequence, did not go silent; nor did
    # one whose py-spy stack shows it alive in its own code
    spoke = own | {p.rank for p in placed if p.rank is not None and p.role != "context"}
    spoke |= {r for c in spy.clusters for r in c.ranks}
    # ... and where only an error on no rank's line started it, who went silent is not known:
    # it may be theirs
    if has_initiating or not unnamed_error:
        findings = [
            with_silent(f, spoke) if f.kind is FindingKind.MISSING_RANK else f for f in findings
        ]

    extra = timeline_extras(seen.exit_records, fr, spy, hang, offsets, index)
    extra += early_entries(early)
    extra += launch_entries(launch, topo)
    facts = job_facts(
        parsed,
        w.size,
        culprits,
        lead,
        first,
        raising_frame(first, placed, kb),
        hang,
        fr,
        spy,
        prog,
        cons,
        seen.exit_records,
        seen.hosts,
        index,
        seen.loose_text,
        kb,
    )
    return Analysis(
        findings=tuple(findings),
        first_failure=first,
        culprit_ranks=tuple(culprits),
        hang=hang,
        initiating_events=tuple(p.event for p in initiating),
        cascade_events=tuple(p.event for p in cascade_events),
        launcher_victims=tuple(seen.launcher_victims),
        later_step_faults=tuple(seen.later_step_faults),
        rank_exits=tuple(r.exit for r in seen.exit_records),
        timeline=timeline.build(placed, extra),
        facts=facts,
        process_groups=flight_recorder.progress(fr),
        stack_groups=pyspy.groups(spy),
    )


def _place(
    seen: Collected, offsets: dict[str, float], kb: knowledge.Knowledge
) -> list[timeline.Placed]:
    """Every collected event on the aligned timeline, with its role."""
    return [
        timeline.Placed(
            ev,
            rank,
            domain,
            timeline.align(ev, domain, offsets),
            role.role,
            role.family,
            approx=ev.time is None,
            earliest=timeline.align_bound(ev.stream_time_before, domain, offsets),
            latest=timeline.align_bound(ev.time_after, domain, offsets),
            wording=family_wording(role.family, ev, kb),
        )
        for ev, rank, domain, role in seen.placed
    ]
