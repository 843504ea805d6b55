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

from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any

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
from triage.analysis.ranks import (
    RankIndex,
    build_index,
    event_rank,
    first_line,
    format_ranks,
    quoted_line,
    ref,
    traceback_of,
)
from triage.knowledge.routine import Routine
from triage.model import (
    Analysis,
    CollectiveRef,
    Event,
    EventKind,
    EvidenceRef,
    FailureRef,
    Finding,
    FlightRecorderDump,
    HangReport,
    ParsedSource,
    PySpyDump,
    SourceKind,
    StackFrame,
    TimelineEntry,
)

__all__ = ["analyse", "correlate"]

_WORK = regex.compile(
    r"WorkNCCL\((?:SeqNum=(?P<seq>\d+), )?OpType=(?P<op>\w+)(?:, NumelIn=(?P<nin>\d+), "
    r"NumelOut=(?P<nout>\d+))?, Timeout\(ms\)=(?P<timeout>\d+)\)"
)
_GLOO_TIMEOUT = regex.compile(r"Timed out waiting (?P<ms>\d+) ?ms for (?P<op>recv|send)")
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
                comm = (ev.attrs or {}).get("comm_id")
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
    silent = _silent_ranks(
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
    placed = _shared_errors_are_cascade(placed, culprits)
    initiating = sorted(
        (p for p in placed if p.role == "initiating"),
        key=lambda p: (p.rank not in culprits, -roles[id(p.event)].strength, _t(p)),
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
        complaint = min(cascade_events, key=_t, default=None)
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
    first = _first_failure(culprits, initiating, exit_records, structural, placed, early)
    if first is not None and first.rank is not None and first.rank in index.host_said:
        # the host a log names for the rank beats one read from a file or folder name
        first = replace(first, host=index.host_said[first.rank])
    hang = _hang(placed, culprits, fr, spy, initiating, exit_records, {id(p) for p in waited})
    own = consequences.own_failures(placed, exit_records)
    shape = hang_shape.shape(hang, fr, spy, own, culprits)
    if hang is not None and shape in hang_shape.WORDING:
        hang = replace(hang, explanation=f"{hang.explanation}: {hang_shape.WORDING[shape]}")

    findings: list[Finding] = []
    findings.extend(_culprit_findings(culprits, lead, scores, reasons, first, exit_records))
    if hang is not None:
        evidence = [ref(p.event, p.rank) for p in sorted(waited, key=_t)[:2]]
        evidence += [e for f in structural[:2] for e in f.evidence[:1]]
        hang_op = hang.collective.op if hang.collective else None
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
                    "collective_record": hang.collective.as_dict() if hang.collective else {},
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
    findings.extend(_cascade_findings(cascade_events))
    findings.extend(exits.exit_findings(exit_records))
    findings.extend(exits.restart_findings(parsed, kb))
    findings.extend(cons.findings)
    # a detector's abort explains its missing dump as well as a rank's own error does
    findings = consequences.mark(findings, own | detectors)
    # a rank that printed an error of its own, or a consequence, did not go silent; nor did
    # one whose py-spy stack shows it alive in its own code
    spoke = own | {p.rank for p in placed if p.rank is not None and p.role != "context"}
    spoke |= {r for c in spy.clusters for r in c.ranks}
    findings = [_with_silent(f, spoke) if f.kind == "missing_rank" else f for f in findings]

    extra = _timeline_extras(exit_records, fr, spy, hang, offsets, index)
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
    facts = _facts(
        world_size, culprits, lead, first, hang, fr, spy, prog, cons, exit_records, hosts, index
    )
    raised = _raising_frame(first, placed, kb)
    if raised is not None:
        # the line the first failure's traceback raised at; py-spy's frame is only where the
        # rank waited afterwards (its `finally:` barrier, a `Queue.get` of the main thread)
        facts["user_frame"] = f"{raised.function} ({raised.filename}:{raised.line})"
    facts["source_ranks"], facts["source_hosts"] = _source_identity(parsed, index)
    facts["frameworks"], facts["launchers"] = _frameworks(parsed, loose_text, kb)
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


def _t(p: timeline.Placed) -> tuple[bool, float]:
    return (p.time is None, p.time or 0.0)


def _silent_ranks(
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


def _shared_errors_are_cascade(
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


def _first_failure(
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
        )

    for rank, ev in early:
        # the culprit's own metric went bad before anything raised (a NaN loss, spread later)
        return FailureRef(
            rank=rank,
            host=ev.host,
            time=ev.time,
            source=ev.source,
            line=ev.line,
            text=first_line(str((ev.attrs or {}).get("line") or ev.text), 400),
        )
    mine = [p for p in initiating if p.rank in culprits]
    if mine:
        return from_placed(min(mine, key=_t))
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
            )
    # a culprit that printed nothing: the finding that points at it is the first failure
    for f in structural:
        hit = [r for r in f.ranks if r in culprits]
        if hit:
            # the rank's own record (its dump's entry), else a line about the whole job
            e = next((x for x in f.evidence if x.rank == hit[0]), None) or next(
                (x for x in f.evidence if x.rank is None), None
            )
            return FailureRef(
                rank=hit[0],
                host=None,
                time=None,
                source=e.source if e else "flight recorder",
                line=e.line if e else None,
                # what the finding stands on (a dump's record), not its sentence about it
                text=e.text if e else f.summary,
            )
    if initiating:
        return from_placed(min(initiating, key=_t))
    errors = [p for p in placed if p.role == "cascade"]
    if errors:
        # only consequences were seen (a lone watchdog timeout): the earliest is quoted, but
        # the rank that printed it merely reported the wait; it is not who failed
        return replace(from_placed(min(errors, key=_t)), rank=None)
    return None


def _collective_from_text(
    placed: Sequence[timeline.Placed],
) -> tuple[CollectiveRef | None, int | None]:
    for p in placed:
        m = _WORK.search(p.event.text)
        if m:
            seq, nin = m["seq"], m["nin"]
            coll = CollectiveRef(
                op=m["op"].lower(),
                seq=int(seq) if seq else None,
                numel_in=int(nin) if nin else None,
            )
            return coll, int(m["timeout"])
    for p in placed:
        m = _GLOO_TIMEOUT.search(p.event.text)
        if m:
            # gloo names its transport step (recv/send), not the collective
            return CollectiveRef(gloo_wait=m["op"]), int(m["ms"])
    return None, None


def _hang(
    placed: Sequence[timeline.Placed],
    culprits: Sequence[int],
    fr: flight_recorder.FRAnalysis,
    spy: pyspy.PySpyAnalysis,
    initiating: Sequence[timeline.Placed],
    exit_records: Sequence[exits.ExitRecord],
    waited: set[int],
) -> HangReport | None:
    """`waited`: ids of the cascade entries of `placed` whose text says they waited until a
    timeout fired (`waited_until_timeout`)."""
    # A hang is the survivors *waiting*: until a timeout fired, or still waiting when py-spy
    # looked. Survivors that got an immediate error (peer closed, reset) saw a crash, even if
    # the flight recorder shows them inside a collective. So do the real bundles and the
    # labelled corpus: watchdog timeouts after a rank's OOM are labelled a hang.
    timeouts = [
        p
        for p in placed
        if p.family == "collective_timeout" or (p.role == "cascade" and id(p) in waited)
    ]
    stall = bool(timeouts) or bool(spy.waiting_ranks and spy.suspects)
    if not stall and fr.hang_pg is None:
        return None
    crashed = [
        p
        for p in initiating
        if p.rank in culprits
        and p.event.kind in (EventKind.TRACEBACK, EventKind.CPP_EXCEPTION, EventKind.SIGNAL)
    ]
    crashed_exit = [r for r in exit_records if r.exit.rank in culprits and r.self_inflicted]
    # flight-recorder dumps alone (no logs) showing ranks behind: nobody saw an error, so wait
    errored = any(p.family in ("peer_closed", "comm_aborted") for p in placed)
    detected = stall or not (crashed or crashed_exit or errored)
    coll, timeout = _collective_from_text(timeouts or placed)
    pg = None
    lagging: list[int] = []
    rep = fr.hang_pg
    if rep is not None:
        pg = rep.pg + (f" ({rep.desc})" if rep.desc else "")
        fr_coll = flight_recorder.collective_of(rep)
        coll = fr_coll if coll is None else coll.merged(fr_coll)
        lagging = sorted(set(rep.lagging) | set(rep.missing) | set(rep.not_started))
        if rep.mismatch:
            lagging = sorted(set(lagging) | set(rep.mismatch.ranks))
    if not lagging:
        lagging = sorted(spy.suspects) or list(culprits)
    if (timeout or fr.timeout_ms) and (coll is None or coll.timeout_ms is None):
        coll = replace(coll or CollectiveRef(), timeout_ms=timeout or fr.timeout_ms)
    op = (coll.op if coll else None) or "a collective"
    seq = coll.seq if coll else None
    where = (
        f"{op}"
        + (f" #{seq}" if seq is not None else "")
        + (f" on process group {pg}" if pg else "")
    )
    if detected and (crashed or crashed_exit):
        text = (
            f"hang: the other ranks waited in {where} until they timed out; rank(s) "
            f"{format_ranks(culprits)} had already failed and never arrived"
        )
    elif detected and not lagging:
        text = (
            f"hang: ranks waited in {where} until they timed out; the rank they waited for "
            "is not identified (flight-recorder dumps or py-spy stacks of every rank would say)"
        )
    elif detected:
        text = (
            f"hang: rank(s) {format_ranks(lagging)} never reached {where} "
            "that the other ranks wait in"
        )
        if rep is not None and rep.mismatch and not rep.lagging:
            text = (
                f"hang: ranks disagree on {where} ({rep.mismatch.kind} mismatch); "
                f"suspect rank(s) {format_ranks(lagging)}"
            )
    elif rep is None or seq is None or _all_last_at(rep, seq, culprits):
        text = (
            f"no hang: the other ranks were in {where} when rank(s) {format_ranks(culprits)} "
            "failed, and got an error at once"
        )
    else:
        # the others stood at different collectives (#4, #3): no one place to name
        text = (
            f"no hang: rank(s) {format_ranks(culprits)} failed and the other ranks got an "
            "error at once"
        )
    return HangReport(
        detected=detected,
        lagging_ranks=tuple(lagging),
        process_group=pg,
        collective=coll if coll is not None and coll.as_dict() else None,
        explanation=text,
    )


def _with_silent(f: Finding, spoke: set[int]) -> Finding:
    """A missing rank's finding with the ranks of it that printed nothing (`silent_ranks`)."""
    silent = [r for r in f.ranks if r not in spoke]
    if not silent:
        return f
    return replace(f, facts={**f.facts, "silent_ranks": format_ranks(silent)})


def _raising_frame(
    first: FailureRef | None, placed: Sequence[timeline.Placed], kb: knowledge.Knowledge
) -> StackFrame | None:
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


def _all_last_at(rep: flight_recorder.PGReport, seq: int, culprits: Sequence[int]) -> bool:
    """Did every other rank that left a record stop at collective `seq`?"""
    return all(
        st.last_enqueued == seq
        for r, st in rep.states.items()
        if r not in culprits and st.last_enqueued is not None
    )


def _culprit_findings(
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
                kind="first_failure",
                summary=summary,
                ranks=tuple(culprits),
                evidence=evidence,
                facts={
                    "scores": {
                        r: round(scores[r], 2) for r in sorted(scores, key=lambda r: -scores[r])[:8]
                    },
                    "torchrun_root_cause_rank": root[0] if root else None,
                },
            )
        )
    elif first is not None:
        out.append(
            Finding(
                kind="first_failure",
                summary=f"earliest error seen (no rank stands out): {first.text}",
                ranks=(first.rank,) if first.rank is not None else (),
                evidence=(EvidenceRef(first.source, first.line, first.rank, first.text),),
            )
        )
    return out


def _cascade_findings(cascade_events: Sequence[timeline.Placed]) -> list[Finding]:
    if not cascade_events:
        return []
    by_family: dict[str, list[timeline.Placed]] = defaultdict(list)
    for p in cascade_events:
        by_family[p.family or "other"].append(p)
    ranks = sorted({p.rank for p in cascade_events if p.rank is not None})
    parts = [
        f"{fam.replace('_', ' ')} x{len(ps)}"
        for fam, ps in sorted(by_family.items(), key=lambda kv: -len(kv[1]))
    ]
    return [
        Finding(
            kind="cascade",
            summary=(
                f"{len(cascade_events)} error(s) on rank(s) {format_ranks(ranks)} are consequences "
                f"of the first failure ({', '.join(parts)})"
            ),
            ranks=tuple(ranks),
            evidence=tuple(ref(ps[0].event, ps[0].rank) for ps in list(by_family.values())[:4]),
            facts={"families": {k: len(v) for k, v in by_family.items()}},
        )
    ]


def _timeline_extras(
    exit_records: Sequence[exits.ExitRecord],
    fr: flight_recorder.FRAnalysis,
    spy: pyspy.PySpyAnalysis,
    hang: HangReport | None,
    offsets: dict[str, float],
    index: RankIndex,
) -> list[TimelineEntry]:
    out: list[TimelineEntry] = []
    groups: dict[int | None, list[exits.ExitRecord]] = defaultdict(list)
    for rec in exit_records:
        if rec.exit.exitcode != 0:
            groups[rec.exit.exitcode].append(rec)
    for code, recs in groups.items():
        ranks = [r.exit.rank for r in recs if r.exit.rank is not None]
        times = []
        for r in recs:
            if r.exit.time is not None:
                dom = r.exit.host or (
                    index.host_of_rank.get(r.exit.rank, "") if r.exit.rank is not None else ""
                )
                times.append(r.exit.time - offsets.get(dom or "", 0.0))
        out.append(
            TimelineEntry(
                time=min(times) if times else None,
                rank=ranks[0] if len(ranks) == 1 else None,
                text=f"rank(s) {format_ranks(ranks)} exited {code}: {recs[0].meaning}",
                source=recs[0].event.source,
                line=recs[0].event.line,
                role="context",
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
                rank=f.ranks[0] if f.ranks else None,
                text=f.summary,
                source=e.source if e else "py-spy",
                line=e.line if e else None,
                role="context",
            )
        )
    return out


def _frameworks(
    parsed: Sequence[ParsedSource], loose_text: bool, kb: knowledge.Knowledge
) -> tuple[list[str], list[str]]:
    """The frameworks and launchers the job's own lines show (`rules/frameworks.yaml`): which
    advice applies to it. A note beside real logs is not the job's own output."""

    def texts() -> Iterator[str]:
        for ps in parsed:
            if loose_text and ps.source.kind is SourceKind.TEXT:
                continue
            if ps.whole_text:
                yield ps.whole_text
            for ev in ps.events:
                if ev.text:
                    yield ev.text

    found, launchers = kb.frameworks.detect(texts())
    return list(found), list(launchers)


def _source_identity(
    parsed: Sequence[ParsedSource], index: RankIndex
) -> tuple[dict[str, int], dict[str, str]]:
    """The rank and host each input belongs to, as far as all inputs together tell.

    A torchrun `--log-dir` file knows only its local rank; the launcher's summary, NCCL's rank
    map or the `[rankN]:` prefixes inside it give the global rank (one rank per file only).
    """
    ranks: dict[str, int] = {}
    hosts: dict[str, str] = {}
    for ps in parsed:
        path = ps.source.path
        if ps.source.kind is SourceKind.TEXT and ps.source.rank is None:
            continue  # notes, a README, an issue's text: no rank's own output
        seen = {r for ev in ps.events if (r := event_rank(ev, index, ps.source.rank)) is not None}
        if ps.source.rank is not None:
            ranks[path] = ps.source.rank
        elif len(seen) == 1:
            ranks[path] = next(iter(seen))
        elif not seen and ps.source.local_rank is not None:
            got = index.rank_for_local(ps.source.local_rank, ps.source.host)
            if got is not None:
                ranks[path] = got
        host = ps.source.host or index.host_of_source.get(path)
        if host is None and path in ranks:
            host = index.host_of_rank.get(ranks[path])
        if host:
            hosts[path] = host
    return ranks, hosts


def _facts(
    world_size: int | None,
    culprits: Sequence[int],
    lead: int | None,
    first: FailureRef | None,
    hang: HangReport | None,
    fr: flight_recorder.FRAnalysis,
    spy: pyspy.PySpyAnalysis,
    prog: progress.ProgressAnalysis,
    cons: consistency.ConsistencyAnalysis,
    exit_records: Sequence[exits.ExitRecord],
    hosts: set[str],
    index: RankIndex,
) -> dict[str, Any]:
    facts: dict[str, Any] = {
        "world_size": world_size,
        "culprit_ranks": list(culprits),
        "hosts": sorted(hosts),
    }
    if lead is not None:
        facts["culprit_rank"] = lead
        host = index.host_said.get(lead) or index.host_of_rank.get(lead)
        if host:
            facts["culprit_host"] = host
    if hang is not None:
        coll = hang.collective or CollectiveRef()
        facts["hang"] = hang.detected
        facts["lagging_ranks"] = list(hang.lagging_ranks)
        if coll.op:
            facts["collective"] = coll.op
        if coll.seq is not None:
            facts["seq"] = coll.seq
        if coll.timeout_ms:
            facts["timeout_ms"] = coll.timeout_ms
        if hang.process_group:
            facts["pg"] = hang.process_group
    if fr.reports:
        facts["fr_status"] = flight_recorder.status_table(fr)
        facts["fr_ranks_dumped"] = list(fr.ranks_dumped)
        missing = sorted({r for rep in fr.reports for r in rep.missing})
        if missing:
            facts["missing_ranks"] = missing
    if lead is not None and lead in spy.user_frames:
        uf = spy.user_frames[lead]
        facts["user_frame"] = f"{uf.function} ({uf.filename}:{uf.line})"
    if prog.last:
        facts["last_progress"] = {r: v for r, (_, v) in sorted(prog.last.items())}
    for key in ("torch", "nccl", "cuda", "python", "driver", "deepspeed", "gpu_models"):
        if key in cons.facts:
            facts[key] = cons.facts[key]
    cuda = cons.facts.get("cuda_build") or cons.facts.get("cuda_runtime")
    if cuda and "cuda" not in facts:
        facts["cuda"] = cuda
    if "nccl" not in facts and fr.comm_lib_versions:
        facts["nccl"] = Counter(fr.comm_lib_versions.values()).most_common(1)[0][0]
    for rec in exit_records:
        if rec.exit.rank in culprits and rec.exit.exitcode not in (None, 0):
            facts["exitcode"] = rec.exit.exitcode
            facts["signal"] = rec.signal
            break
    root = [r.exit.rank for r in exit_records if r.exit.is_root_cause_block]
    if root:
        facts["torchrun_root_cause_rank"] = root[0]
    if first is not None:
        facts["first_failure_text"] = first.text
    return facts
