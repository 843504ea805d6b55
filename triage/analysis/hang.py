"""The hang: did the survivors wait, in which collective, and for whom."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from triage.analysis import exits, flight_recorder, pyspy, timeline
from triage.analysis.ranks import format_ranks, traceback_of
from triage.knowledge.frames import LibraryFrames
from triage.model import CollectiveRef, Event, EventKind, HangReport


def collective_from_events(
    placed: Sequence[timeline.Placed],
) -> tuple[CollectiveRef | None, int | None]:
    """The collective a watchdog timed out, as the parser read it from the WorkNCCL record,
    and its timeout."""
    for p in placed:
        c10d = p.event.c10d
        if c10d is not None and c10d.timeout is not None:
            coll = c10d.timeout.collective
            return replace(coll, timeout_ms=None), coll.timeout_ms
    for p in placed:
        c10d = p.event.c10d
        if c10d is not None and c10d.gloo_timeout is not None:
            # gloo names its transport step (recv/send), not the collective
            return CollectiveRef(gloo_wait=c10d.gloo_timeout.step), c10d.gloo_timeout.timeout_ms
    return None, None


def hang_report(
    placed: Sequence[timeline.Placed],
    culprits: Sequence[int],
    fr: flight_recorder.FRAnalysis,
    spy: pyspy.PySpyAnalysis,
    initiating: Sequence[timeline.Placed],
    exit_records: Sequence[exits.ExitRecord],
    waited: set[int],
    raised_in_setup: str | None = None,
) -> HangReport | None:
    """`waited`: ids of the cascade entries of `placed` whose text says they waited until a
    timeout fired (`waited_until_timeout`); `raised_in_setup`: the process-group setup call
    every such wait's traceback raised in (`setup_raised`), else None."""
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
    coll, timeout = collective_from_events(timeouts or placed)
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
    waiters = "the other ranks"
    setup = _setup_waited(spy, culprits) if coll is None or coll.op is None else None
    if setup is None and raised_in_setup is not None and (coll is None or coll.op is None):
        # no stacks, but the waits' own tracebacks timed out inside the setup call
        setup = raised_in_setup, False
    if setup is not None:
        # their stacks stand in init_process_group or a rendezvous: they waited for the others
        # to start or join, in no collective
        call, by_launcher = setup
        setup_of = "the rendezvous" if "rendezvous" in call else "process-group setup"
        where = f"{setup_of} ({call})"
        waiters = "the launcher" if by_launcher else waiters
    # who failed: the culprits whose own error or exit shows it, else the ranks whose exit
    # came first and was not the launcher's stop (a mismatch's odd one out need not be the
    # rank that aborted on it: gloo aborts on the rank that receives the odd message)
    failed = sorted(
        {p.rank for p in crashed if p.rank is not None}
        | {r.exit.rank for r in crashed_exit if r.exit.rank is not None}
    )
    ended = [r for r in exit_records if not r.launcher_killed and r.exit.exitcode]
    first_end = min((r.exit.time for r in ended if r.exit.time is not None), default=None)
    if not failed and first_end is not None:
        failed = sorted(
            {r.exit.rank for r in ended if r.exit.time == first_end and r.exit.rank is not None}
        )
    if detected and (crashed or crashed_exit):
        text = (
            f"{waiters} waited in {where} until they timed out; rank(s) "
            f"{format_ranks(culprits)} had already hit an error and never arrived"
        )
    elif detected and not lagging:
        text = (
            f"ranks waited in {where} until they timed out; the rank they waited for "
            "is not identified (flight-recorder dumps or py-spy stacks of every rank would say)"
        )
    elif detected:
        text = f"rank(s) {format_ranks(lagging)} never reached {where} that {waiters} waited in"
        if rep is not None and rep.mismatch and not rep.lagging:
            text = (
                f"ranks disagree on {where} ({rep.mismatch.kind} mismatch); "
                f"suspect rank(s) {format_ranks(lagging)}"
            )
    elif rep is None or seq is None or all_last_at(rep, seq, culprits):
        text = (
            f"the other ranks were in {where} when rank(s) {format_ranks(failed or culprits)} "
            "failed, and stopped at once (an error of their own or the launcher's stop)"
        )
    else:
        # the others stood at different collectives (#4, #3): no one place to name
        who = format_ranks(failed or culprits)
        text = (
            f"rank(s) {who} failed and the other ranks stopped at once (an error of their own "
            "or the launcher's stop)"
        )
    return HangReport(
        detected=detected,
        lagging_ranks=tuple(lagging),
        process_group=pg,
        collective=coll if coll is not None and coll.as_dict() else None,
        account=text,
        waiter="the launcher" if waiters == "the launcher" else "",
        in_setup=setup is not None,
    )


def setup_raised(waits: Sequence[Event], library: LibraryFrames) -> str | None:
    """The process-group setup or rendezvous call (`init_process_group`) every one of these
    waits raised in, read from their tracebacks' frames (a store timeout while the ranks
    fetched the NCCL unique id from rank 0); None when one raised elsewhere or has none."""
    calls = set()
    for ev in waits:
        if ev.kind is not EventKind.TRACEBACK:
            return None
        frames = [f for link in traceback_of(ev).links for f in link.frames]
        call = library.setup_call(pyspy.as_stack(frames))
        if call is None:
            return None
        calls.add(call)
    return min(calls) if calls else None


def _setup_waited(spy: pyspy.PySpyAnalysis, culprits: Sequence[int]) -> tuple[str, bool] | None:
    """The setup or rendezvous call that every waiting rank's stack stands in (py-spy), and
    whether only a launcher's own dump shows it; None when a waiter stands elsewhere."""
    waiting = [r for r in spy.waiting_ranks if r not in culprits]
    calls = {spy.setup_waits.get(r) for r in waiting}
    if waiting and None not in calls:
        return min(c for c in calls if c is not None), False
    if not waiting and None in spy.setup_waits:
        return spy.setup_waits[None], True
    return None


def all_last_at(rep: flight_recorder.PGReport, seq: int, culprits: Sequence[int]) -> bool:
    """Did every other rank that left a record stop at collective `seq`?"""
    return all(
        st.last_enqueued == seq
        for r, st in rep.states.items()
        if r not in culprits and st.last_enqueued is not None
    )
