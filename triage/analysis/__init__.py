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
an error at once it was a crash.

What a rank's own failure explains is marked (`consequences.py`): the flight recorder and
py-spy findings about where it stood afterwards, and the abort of a rank that only detected a
peer's collective of other sizes or dtypes. The hang's shape (`hang_shape.py`) says what the
rank the others waited for was doing, which is what separates a collective mismatch from a
slow rank or uneven work.

This beats torchrun's "Root Cause (first observed failure)", which is only the first exit
the agent noticed (usually a survivor that timed out first).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace

import regex

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
from triage.analysis.cascade import (
    ERROR_KINDS,
    Role,
    classify_event,
    waited_until_timeout,
)
from triage.analysis.facts import frameworks, job_facts, source_identity
from triage.analysis.findings import (
    cascade_findings,
    culprit_findings,
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
from triage.analysis.hang import hang_report
from triage.analysis.ranks import (
    build_index,
    event_rank,
    first_line,
    format_ranks,
    ref,
)
from triage.knowledge.routine import Routine
from triage.model import (
    Analysis,
    Event,
    EventKind,
    Finding,
    FlightRecorderDump,
    ParsedSource,
    PySpyDump,
    SourceKind,
    TimelineEntry,
)

__all__ = ["analyse", "correlate"]

_INIT_COMM = regex.compile(r"commId (?P<c>0x[0-9a-f]+)")
_BOOTSTRAP_IP = regex.compile(
    r"(?:Bootstrap ?:|NET/Socket ?:) Using (?:\[\d+\])?\w+:(?P<ip>[\d.]+)<"
)


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
                    kind="analysis_error",
                    summary=f"cross-rank analysis failed ({type(exc).__name__}: {exc}); "
                    "culprit and hang are unknown",
                ),
            ),
            facts={"analysis_error": f"{type(exc).__name__}: {exc}"},
        )
    try:
        return replace(found, outcome=outcome.decide(parsed, found, kb.ends, kb.routine))
    except Exception as exc:  # noqa: BLE001 - the rest of the diagnosis still stands
        return replace(
            found,
            findings=(
                *found.findings,
                Finding(
                    kind="analysis_error",
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
    placed_raw: list[tuple[Event, int | None, str, Role]] = []
    fr_dumps: list[flight_recorder.FRDump] = []
    stacks: list[pyspy.RankStack] = []
    unmatched_stacks = 0
    progress_events: list[tuple[int, Event]] = []
    anchors: dict[object, dict[str, float]] = defaultdict(dict)
    ranks_seen: set[int] = set()
    ranks_with_events: set[int] = set()
    hosts: set[str] = set()
    ip_hosts: dict[str, str] = {}

    loose_text = any(
        ps.source.kind in (SourceKind.RANK_LOG, SourceKind.NCCL) and ps.events for ps in parsed
    )
    for ps in parsed:
        if ps.source.host:
            hosts.add(ps.source.host)
        for ev in ps.events:
            rank = event_rank(ev, index, ps.source.rank)
            host = (
                ev.host
                or ps.source.host
                or (index.host_of_rank.get(rank) if rank is not None else None)
            )
            if host:
                hosts.add(host)
            domain = host or ""
            if rank is not None:
                ranks_seen.add(rank)
            payload = ev.payload
            if ev.kind is EventKind.FLIGHT_RECORDER and isinstance(payload, FlightRecorderDump):
                if rank is not None:
                    fr_dumps.append(flight_recorder.FRDump(rank, payload, ev, ps.source.attempt))
                continue
            if ev.kind is EventKind.PYSPY and isinstance(payload, PySpyDump):
                r = rank if rank is not None else index.rank_for(payload.pid, host)
                if r is None:
                    unmatched_stacks += 1
                else:
                    stacks.append(pyspy.RankStack(r, payload, ev))
                    ranks_seen.add(r)
                continue
            if ev.kind is EventKind.PROGRESS and rank is not None:
                progress_events.append((rank, ev))
                continue
            if ev.kind is EventKind.NCCL_COMM and ev.time is not None:
                comm = (ev.attrs or {}).get("comm_id") or (ev.attrs or {}).get("commId")
                if comm is None:
                    m = _INIT_COMM.search(ev.text)
                    comm = m["c"] if m else None
                if comm is not None:
                    anchors[("comm", str(comm))][domain] = ev.time
            if ev.kind in (EventKind.NCCL_INFO, EventKind.NCCL_COMM) and host:
                m = _BOOTSTRAP_IP.search(ev.text)
                if m and not m["ip"].startswith("127."):
                    ip_hosts.setdefault(m["ip"], host)
            role = classify_event(ev, kb)
            if role.role != "context" and routine is not None and routine.which(ev.text):
                # what healthy jobs print (rules/routine.yaml) starts no failure
                role = Role("context", None, 0.0)
            if loose_text and ps.source.kind is SourceKind.TEXT and role.role != "context":
                # a stray note or README beside real logs narrates the failure; it is not one
                role = Role("context", None, 0.0)
            placed_raw.append((ev, rank, domain, role))
            if rank is not None and ev.kind in ERROR_KINDS:
                ranks_with_events.add(rank)

    exit_records = exits.collect_exits(parsed, index, kb)
    for rec in exit_records:
        if rec.exit.rank is not None:
            ranks_seen.add(rec.exit.rank)
        if rec.exit.host:
            hosts.add(rec.exit.host)

    world_size = index.world_size
    explicit_world = world_size is not None
    if ranks_seen:
        world_size = max(world_size or 0, max(ranks_seen) + 1)
    topo = launcher.topology((ev for ps in parsed for ev in ps.events), kb)
    if topo.world_size:
        world_size = max(world_size or 0, topo.world_size)
        explicit_world = True
    never_joined = topo.missing_ranks(ranks_seen)

    fr = flight_recorder.analyze(fr_dumps, kb.frames, world_size)
    for rep in fr.reports:
        world_size = max(world_size or 0, max(rep.members, default=-1) + 1) or None
        explicit_world = True
    for (pg, seq), times in fr.anchors.items():
        for r, t_ns in times.items():
            dom = index.host_of_rank.get(r, "")
            anchors[("fr", pg, seq)].setdefault(dom, t_ns / 1e9)
    offsets = timeline.estimate_offsets(anchors)

    placed = [
        timeline.Placed(
            ev,
            rank,
            domain,
            timeline.align(ev, domain, offsets),
            role.role,
            role.family,
            approx=ev.time is None,
        )
        for ev, rank, domain, role in placed_raw
    ]
    roles = {id(ev): role for ev, _, _, role in placed_raw}
    # a rank that only detected a peer's other-sized message is not the cause when the flight
    # recorder shows whose collective differed; its abort (and its missing dump) follow
    detectors = consequences.mismatch_detectors(placed, fr, kb)
    if detectors:
        placed = consequences.as_detected(placed, detectors)
        odd = consequences.sizes_odd_ones(fr)
        fr.suspects = {r: w for r, w in fr.suspects.items() if r not in detectors or r in odd}
    spy = pyspy.analyze(stacks, kb.frames, unmatched_stacks)
    prog = progress.analyze(progress_events)
    cons = consistency.analyze(parsed, index)

    votes = culprit.vote(
        placed, roles, exit_records, fr, spy, prog, cons, world_size, index, ip_hosts, kb
    )
    silent = silent_ranks(
        placed, exit_records, world_size, explicit_world, ranks_seen, ranks_with_events
    )
    # silence is strong evidence only when nobody raised an error of their own
    # ... or when the flight recorder already shows whose collective differed
    has_initiating = any(p.role == "initiating" and p.rank is not None for p in placed) or bool(
        consequences.sizes_odd_ones(fr)
    )
    culprit.vote_absent(votes, silent, has_initiating, never_joined)
    scores, reasons = votes.scores, votes.reasons
    culprits = culprit.pick(votes)
    lead = max(culprits, key=lambda r: (scores[r], -r)) if culprits else None
    placed = shared_errors_are_cascade(placed, culprits)
    initiating = sorted(
        (p for p in placed if p.role == "initiating"),
        key=lambda p: (p.rank not in culprits, -roles[id(p.event)].strength, by_time(p)),
    )
    cascade_events = [p for p in placed if p.role == "cascade"]
    # the cascade messages that say their rank waited until a timeout fired (read twice below)
    waited = [p for p in cascade_events if waited_until_timeout(p.event.text, kb)]
    launch_findings: list[Finding] = []
    if never_joined and topo.rendezvous_timeout is not None:
        joined = (
            f" ({topo.joined}/{topo.expected_agents} agents joined)" if topo.expected_agents else ""
        )
        launch_findings.append(
            Finding(
                kind="missing_rank",
                summary=(
                    f"rank(s) {format_ranks(never_joined)} never started: the launcher expected "
                    f"{topo.nnodes} node(s) x {topo.nproc_per_node} process(es) and its "
                    f"rendezvous timed out waiting for the rest{joined}"
                ),
                ranks=tuple(never_joined),
                evidence=(ref(topo.rendezvous_timeout),),
                facts={
                    "nnodes": topo.nnodes,
                    "nproc_per_node": topo.nproc_per_node,
                    "node_ranks_seen": sorted(topo.node_ranks),
                },
            )
        )
    silent_findings: list[Finding] = []
    if silent and not has_initiating:
        complaint = min(cascade_events, key=by_time, default=None)
        silent_findings.append(
            Finding(
                kind="missing_rank",
                summary=(
                    f"rank(s) {format_ranks(silent)} of {world_size} printed no error of their "
                    "own while the others failed: they were missing, behind or stuck elsewhere"
                ),
                ranks=tuple(silent),
                evidence=(ref(complaint.event, complaint.rank),) if complaint else (),
                facts={"world_size": world_size, "silent": list(silent)},
            )
        )
    structural = [*launch_findings, *fr.findings, *spy.findings, *silent_findings]
    early = [(r, prog.events[r]) for r in prog.non_finite if r in culprits]
    first = pick_first_failure(culprits, initiating, exit_records, structural, placed, early)
    if first is not None and first.rank is not None and first.rank in index.host_said:
        # the host a log names for the rank beats one read from a file or folder name
        first = replace(first, host=index.host_said[first.rank])
    hang = hang_report(placed, culprits, fr, spy, initiating, exit_records, {id(p) for p in waited})
    own = consequences.own_failures(placed, exit_records)
    shape = hang_shape.shape(hang, fr, spy, own, culprits)
    if hang is not None and shape in hang_shape.WORDING:
        hang = replace(hang, explanation=f"{hang.explanation}: {hang_shape.WORDING[shape]}")

    findings: list[Finding] = []
    findings.extend(culprit_findings(culprits, lead, scores, reasons, first, exit_records))
    if hang is not None:
        evidence = [ref(p.event, p.rank) for p in sorted(waited, key=by_time)[:2]]
        evidence += [e for f in structural[:2] for e in f.evidence[:1]]
        hang_op = (hang.collective or {}).get("op")
        findings.append(
            Finding(
                kind="hang",
                summary=hang.explanation,
                ranks=hang.lagging_ranks,
                evidence=tuple(evidence),
                facts={
                    "pg": hang.process_group,
                    # a template's `{collective}` is the op's name, never the whole record
                    **({"collective": hang_op} if hang_op else {}),
                    "collective_record": dict(hang.collective or {}),
                    "op": hang_op,  # what an action may name
                    **({"shape": shape} if shape else {}),
                },
            )
        )
    # how the job ended decides what a mismatch of sizes or dtypes looks like: a library
    # error (the receiver checked) or a hang
    ended = "hang" if hang is not None and hang.detected else "error"
    findings.extend(
        replace(f, facts={**f.facts, "ended": ended}) if f.kind == "collective_mismatch" else f
        for f in fr.findings
    )
    findings.extend(spy.findings)
    findings.extend(prog.findings)
    findings.extend(silent_findings)
    findings.extend(launch_findings)
    findings.extend(cascade_findings(cascade_events))
    findings.extend(exits.exit_findings(exit_records))
    findings.extend(exits.restart_findings(parsed, kb))
    findings.extend(cons.findings)
    # a detector's abort explains its missing dump as well as a rank's own error does
    findings = consequences.mark(findings, own | detectors)
    # a rank that printed an error of its own, or a consequence, did not go silent; nor did
    # one whose py-spy stack shows it alive in its own code
    spoke = own | {p.rank for p in placed if p.rank is not None and p.role != "context"}
    spoke |= {r for c in spy.clusters for r in c.ranks}
    findings = [with_silent(f, spoke) if f.kind == "missing_rank" else f for f in findings]

    extra = timeline_extras(exit_records, fr, spy, hang, offsets, index)
    for rank, ev in early:
        extra.append(
            TimelineEntry(
                time=ev.time,
                rank=rank,
                text=first_line(str((ev.attrs or {}).get("line") or ev.text), 240),
                source=ev.source,
                line=ev.line,
                role="initiating",
            )
        )
    for f in launch_findings:
        e = f.evidence[0] if f.evidence else None
        extra.append(
            TimelineEntry(
                time=topo.rendezvous_timeout.time if topo.rendezvous_timeout else None,
                rank=f.ranks[0] if f.ranks else None,
                text=f.summary,
                source=e.source if e else "launcher",
                line=e.line if e else None,
                role="context",
            )
        )
    tl = timeline.build(placed, extra)
    facts = job_facts(
        world_size, culprits, lead, first, hang, fr, spy, prog, cons, exit_records, hosts, index
    )
    raised = raising_frame(first, placed, kb)
    if raised is not None:
        # the line the first failure's traceback raised at; py-spy's frame is only where the
        # rank waited afterwards (its `finally:` barrier, a `Queue.get` of the main thread)
        facts["user_frame"] = f"{raised.function} ({raised.filename}:{raised.line})"
    facts["source_ranks"], facts["source_hosts"] = source_identity(parsed, index)
    facts["frameworks"], facts["launchers"] = frameworks(parsed, loose_text, kb)
    # what the user already gave: advice never asks for a kind of input that is here
    facts["input_kinds"] = sorted({ps.source.kind.value for ps in parsed})
    return Analysis(
        findings=tuple(findings),
        first_failure=first,
        culprit_ranks=tuple(culprits),
        hang=hang,
        initiating_events=tuple(p.event for p in initiating),
        cascade_events=tuple(p.event for p in cascade_events),
        rank_exits=tuple(r.exit for r in exit_records),
        timeline=tl,
        facts=facts,
        process_groups=flight_recorder.progress(fr),
        stack_groups=pyspy.groups(spy),
    )
