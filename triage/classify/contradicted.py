"""Labels the job's own facts contradict: not offered, whatever else votes for them.

Neighbours and the learned model read a job's words, and a job that crashed reads much like
one that hung (the same peer errors, a rank behind in the flight recorder); the rules that match
its lines weigh what a line usually means. Correlate's findings say what happened in this job:
the other ranks stopped at once (no hang: no collective hang, no timeout too short), the
rank the others waited for had died of its own error (no longer timeout brings it back), every
rank issued the same collectives and one was slow (no collective mismatch). A rule that matches
such a fact says which labels it rules out (`rules_out` in rules/*.yaml, with examples); those
labels leave the ranked lists before a fix is chosen from the causes (`fusion.fuse`). The
other labels keep their calibrated scores.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from triage.classify.types import RuleHit

if TYPE_CHECKING:
    pass

# the fields a rule may rule labels out of (triage.knowledge.rules.RULES_OUT_KEYS)
FIELDS = ("symptom", "root_cause")


def ruled_out(hits: Sequence[RuleHit]) -> dict[str, frozenset[str]]:
    """Per field, the labels some matched fact of the job contradicts."""
    out: dict[str, set[str]] = {}
    for hit in hits:
        for fieldname, labels in hit.rules_out.items():
            out.setdefault(fieldname, set()).update(labels)
    return {k: frozenset(v) for k, v in out.items()}
