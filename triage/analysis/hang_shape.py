"""What the rank the others waited for was doing: the shape of a hang.

"Collective mismatch" (ranks issue different collectives) is one reading of a hang; a slow rank
busy in its own code and a rank that ran out of work are others, with other fixes. Which one
the evidence shows, strongest first:

* `failed`: the ranks the others waited for had failed by themselves (their exception, not
  the hang, says what happened);
* `differing`: the flight recorder shows one collective with other sizes or dtypes on them;
* `diverged`: at the same sequence number they issued another new collective than the rest
  (one skipped or added a call: rank-dependent control flow);
* `other_group`: their latest record is a collective on another process group;
* `left_loop`: they stopped issuing the collective the whole group had been repeating, while
  the others issued it once more (they ran out of work first: uneven data);
* `busy_outside_collectives`: py-spy shows them in their own code, not in any collective,
  while the others wait (slow work on one rank: an upload, preprocessing);
* `another_call_site`: py-spy shows them waiting in a collective at another call site (what
  py-spy alone sees of both `diverged` and `left_loop`);
* `behind`: only that they never arrived.

The shape is a fact of the hang finding; which root causes each shape supports is knowledge
(`rules/hang.yaml`).
"""

from __future__ import annotations

from collections.abc import Sequence

from triage.analysis import flight_recorder, pyspy
from triage.model import HangReport, HangShape

# how a person reads each shape, appended to the hang's explanation
WORDING = {
    HangShape.DIFFERING: "they passed other sizes or dtypes to the same collective",
    HangShape.DIVERGED: "they issued another collective than the others at that point",
    HangShape.OTHER_GROUP: "they wait in a collective of another process group",
    HangShape.LEFT_LOOP: "they stopped issuing the collective the others repeat (less work: "
    "they left the loop first)",
    HangShape.BUSY_OUTSIDE_COLLECTIVES: "py-spy shows them busy in their own code, outside any "
    "collective",
    HangShape.ANOTHER_CALL_SITE: "py-spy shows them waiting in another collective than the others",
}


def shape(
    hang: HangReport | None,
    fr: flight_recorder.FRAnalysis,
    spy: pyspy.PySpyAnalysis,
    own: set[int],
    culprits: Sequence[int],
) -> HangShape | None:
    """The shape of a detected hang (see the module), or None when nothing hung."""
    if hang is None or not hang.detected:
        return None
    lagging = set(hang.lagging_ranks) or set(culprits)
    if lagging and lagging <= own:
        return HangShape.FAILED
    rep = fr.hang_pg
    if rep is not None and rep.mismatch and set(rep.mismatch.ranks) & (lagging or {-1}):
        pattern = rep.mismatch.pattern
        if pattern in ("differing", "diverged", "left_loop"):
            return HangShape(pattern)
    if rep is not None and rep.elsewhere and set(rep.elsewhere) & lagging:
        return HangShape.OTHER_GROUP
    return _from_stacks(spy, lagging) or HangShape.BEHIND


def _from_stacks(spy: pyspy.PySpyAnalysis, lagging: set[int]) -> HangShape | None:
    """What py-spy saw the lagging ranks do while the others waited in a collective. Two
    ranks, one each side, still tell: the waiter is known by its stack, the lagging rank by
    the flight recorder or the culprit vote."""
    if not lagging:
        lagging = {r for c in spy.outliers for r in c.ranks}
    where = {r: c for c in spy.clusters for r in c.ranks}
    mine = [where[r] for r in sorted(lagging) if r in where]
    theirs = [c for r, c in where.items() if r not in lagging]
    if not mine or not theirs or not all(c.waiting for c in theirs):
        return None
    if {c.signature for c in mine} & {c.signature for c in theirs}:
        return None  # the lagging rank stands where the waiters stand: py-spy cannot tell
    if all(c.waiting for c in mine):
        return HangShape.ANOTHER_CALL_SITE
    if not any(c.waiting for c in mine):
        return HangShape.BUSY_OUTSIDE_COLLECTIVES
    return None
