"""Standing: in a job, the labels its own initiating failure names lead their field.

The calibrator is fitted on pasted reference cases (`bench/eval_corpus.py`). What only a job's
logs show is rare there: which rank started the failure, the frames it raised in, correlate's
cross-rank findings about that rank. So the calibrator cannot learn how much such a fact
weighs, and neighbours and the learned model, which read the words, outvote it (a DataLoader
worker's segfault resolved by rebuilding extensions outranks the job's own segfault in its own
script; the hang the ranks end in outranks the gloo error that caused it).

A label has standing when a rule confidently explains the job's initiating failure with it:
the rule's hit is on an event correlate placed as initiating, or on a finding about the
culprit rank that is no consequence of another rank's failure; it is not a cascade hit, nor an
atlas match whose labels nobody reviewed; and it gives the label at least ANCHOR_WEIGHT,
clearly more than any other label of the field. Per field, the strongest such label has
standing, a specific rule's before the generic layer's (a generic hit on the initiating event
counts when no specific rule names a label of the field anywhere in the job: the user's own
frame of a KeyError).
The taxonomy's cascade guidance (rules/cascade.yaml): the initiating error outranks what it
caused. Pasted text keeps the calibrated order: the calibrator was fitted on exactly such
cases.

One exception, in a paste too: a library's message that prescribes its own remedy ("Re-running
torch.load with weights_only set to False will likely succeed"; a rule's `remedy`). Its authors
named the fix for the mechanism their check found; words and neighbours only guess at it. The
fix of such a remedy (on the initiating failure, in a job; on any line that is no cascade, in a
paste) has standing, before the fix a rule's weights alone would give it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from triage.classify.types import RuleHit
from triage.model import Analysis, Event

FIELDS = ("symptom", "root_cause", "fix")
# A rule this sure of a label on the initiating failure explains it (the threshold that makes
# the findings that followed its consequences, `classify.demote_consequences`).
ANCHOR_WEIGHT = 0.5
# ... and it has chosen that label when the next one is at least this much weaker (a hang in
# the rank's own work says "raise the timeout" 0.6 and "take the work off the step" 0.55).
MARGIN = 0.1

# field -> label -> the weight of the strongest rule that gives it standing
Standing = Mapping[str, Mapping[str, float]]


def standing(
    hits: Sequence[RuleHit], analysis: Analysis, pasted: bool = False
) -> dict[str, dict[str, float]]:
    """Per field, the label the job's initiating failure names, with its rule's weight; in a
    paste (`pasted`), only the remedy a library's message prescribes."""
    initiating = set(analysis.initiating_events)
    culprits = set(analysis.culprit_ranks)
    if pasted:
        # a paste has no initiating failure to stand on: any line that is no consequence
        told = [h for h in hits if not (h.from_cascade or h.atlas or h.generic)]
        remedy = prescribed(told)
        return {"fix": remedy} if remedy else {}
    anchors = [h for h in hits if _explains_the_start(h, initiating, culprits)]
    out = _named(hits, anchors)
    remedy = prescribed([h for h in anchors if not h.generic])
    if remedy:
        out["fix"] = remedy
    return out


def prescribed(hits: Sequence[RuleHit]) -> dict[str, float]:
    """The fix a library's message among `hits` prescribes itself (the rule's `remedy`), with
    its rule's weight for it; none when two messages prescribe different fixes alike."""
    best: dict[str, float] = {}
    for h in hits:
        if h.prescribes is not None:
            best[h.prescribes] = max(best.get(h.prescribes, 0.0), h.fix.get(h.prescribes, 0.0))
    ranked = sorted(best.items(), key=lambda kv: kv[1], reverse=True)
    if not ranked or (len(ranked) > 1 and ranked[1][1] > ranked[0][1] - MARGIN):
        return {}
    fix, weight = ranked[0]
    return {fix: weight}


def _named(hits: Sequence[RuleHit], anchors: Sequence[RuleHit]) -> dict[str, dict[str, float]]:
    """Per field, the label the rules on the initiating failure have chosen."""
    out: dict[str, dict[str, float]] = {}
    for fieldname in FIELDS:
        # a family prior yields to a mechanism a specific rule found on any line of the job
        # (the team's rule on the INFO line before the RuntimeError it explains)
        named = any(
            max(getattr(h, fieldname).values(), default=0.0) >= ANCHOR_WEIGHT
            for h in hits
            if not (h.generic or h.from_cascade or h.atlas)
        )
        # (specific before generic, weight) of the best anchor per label
        best: dict[str, tuple[bool, float]] = {}
        for h in anchors:
            if h.generic and named:
                continue
            for label, w in getattr(h, fieldname).items():
                best[label] = max(best.get(label, (False, 0.0)), (not h.generic, w))
        ranked = sorted(best.items(), key=lambda kv: kv[1], reverse=True)
        if not ranked or ranked[0][1][1] < ANCHOR_WEIGHT:
            continue
        (label, (specific, w)), runner_up = ranked[0], ranked[1:2]
        if runner_up and runner_up[0][1][0] == specific and runner_up[0][1][1] > w - MARGIN:
            continue  # the rules weigh two labels nearly alike: they have not chosen
        out[fieldname] = {label: w}
    return out


def _explains_the_start(hit: RuleHit, initiating: set[Event], culprits: set[int]) -> bool:
    # an atlas label from a label rule alone is a guess from the code around the message; one
    # a person reviewed, matched in full, is as good as a specific rule
    if hit.from_cascade or (hit.atlas and not hit.reviewed):
        return False
    if hit.finding is not None:
        # a finding about the culprit that is not where it stood after failing (its hang,
        # its silence): the dtypes rank 3 passed, the signal rank 1 died of
        return not hit.finding.consequence_of and bool(culprits & set(hit.finding.ranks))
    return hit.event is not None and hit.event in initiating
