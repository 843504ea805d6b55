"""What a rank's own failure explains, and whom a detected collective mismatch points at.

* A rank that raised, aborted or died by itself (its own exception, OOM, signal) stops issuing
  collectives. The flight recorder then shows it behind, at another collective or without a
  dump; py-spy shows it elsewhere; the others hang waiting for it. Those findings are true,
  but they are consequences of its failure: they are marked (`consequence_of`), so that the
  failure itself, not "collective mismatch", names what happened.
* A rank whose error says a peer's message did not fit its own collective (gloo's "Received
  data size doesn't match expected size") detected a mismatch. When the flight recorder shows
  that collective with other sizes or dtypes on another rank than on the majority, that rank
  is the cause and the detector's abort is a consequence.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

from triage import knowledge
from triage.analysis import exits, flight_recorder, timeline
from triage.analysis.cascade import reports_peer_mismatch
from triage.model import CollectiveMismatchFacts, EventKind, Finding, FindingKind

# the events that say a rank failed by itself (an ERROR line alone may be a warning in red)
_OWN_FAILURE_KINDS = (EventKind.TRACEBACK, EventKind.CPP_EXCEPTION, EventKind.SIGNAL)
# findings about where a rank stood (behind, elsewhere, silent, the hang itself): what a rank
# that already failed shows, whatever its failure was
_POSITION_KINDS = frozenset(
    {
        FindingKind.LAGGING_RANK,
        FindingKind.STACK_OUTLIER,
        FindingKind.COLLECTIVE_MISMATCH,
        FindingKind.MISSING_RANK,
        FindingKind.HANG,
    }
)
# the family given to a detector's error once the flight recorder names the rank it detected
DETECTED_FAMILY = "peer_mismatch_detected"


def sizes_odd_ones(fr: flight_recorder.FRAnalysis) -> set[int]:
    """Ranks whose record of one collective has other sizes or dtypes than the majority's."""
    odd: set[int] = set()
    for rep in fr.reports:
        m = rep.mismatch
        if m and m.kind in ("size", "dtype") and not m.tie:
            odd |= set(m.ranks)
    return odd


def mismatch_detectors(
    placed: Sequence[timeline.Placed],
    fr: flight_recorder.FRAnalysis,
    kb: knowledge.Knowledge | None = None,
) -> set[int]:
    """Ranks whose only initiating errors detect a peer's mismatch that the flight recorder
    pins on other ranks (`kb`: the run's knowledge, None: the shipped one)."""
    odd = sizes_odd_ones(fr)
    if not odd:
        return set()
    said: dict[int, list[bool]] = {}
    for p in placed:
        if p.role == "initiating" and p.rank is not None:
            said.setdefault(p.rank, []).append(reports_peer_mismatch(p.event, kb))
    return {r for r, detected in said.items() if r not in odd and all(detected)}


def as_detected(placed: Sequence[timeline.Placed], detectors: set[int]) -> list[timeline.Placed]:
    """The detectors' errors, re-read as consequences of the mismatch they detected."""
    return [
        replace(p, role="cascade", family=DETECTED_FAMILY)
        if p.role == "initiating" and p.rank in detectors
        else p
        for p in placed
    ]


def own_failures(
    placed: Iterable[timeline.Placed], exit_records: Iterable[exits.ExitRecord]
) -> set[int]:
    """Ranks that failed by themselves: an exception, a C++ abort or a signal of their own,
    or an exit that only the process itself causes (SIGKILL, SIGSEGV, SIGBUS)."""
    own = {
        p.rank
        for p in placed
        if p.role == "initiating" and p.rank is not None and p.event.kind in _OWN_FAILURE_KINDS
    }
    own |= {r.exit.rank for r in exit_records if r.exit.rank is not None and r.self_inflicted}
    return own


def mark(findings: Sequence[Finding], own: set[int]) -> list[Finding]:
    """Position findings about ranks that all failed by themselves (or aborted on detecting a
    peer's mismatch), marked as consequences of those failures. A collective whose sizes or
    dtypes differ is never one: a rank's own error does not change what it passes to a
    collective."""
    if not own:
        return list(findings)
    out = []
    for f in findings:
        differing = isinstance(f.facts, CollectiveMismatchFacts) and f.facts.mismatch in (
            "size",
            "dtype",
        )
        if f.kind in _POSITION_KINDS and f.ranks and set(f.ranks) <= own and not differing:
            f = replace(f, consequence_of=f.ranks)
        out.append(f)
    return out
