"""What classify and recommend add, and the Diagnosis everything ends in: labels, evidence,
similar cases, fixes, and the JSON schema `triage.diagnosis/1` (`Diagnosis.to_dict()`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from triage.model.analysis import (
    FailureRef,
    Finding,
    GroupProgress,
    HangReport,
    Outcome,
    StackGroup,
    TimelineEntry,
)
from triage.model.inputs import SourceKind
from triage.model.payloads import RankExit

SCHEMA = "triage.diagnosis/1"


@dataclass(frozen=True)
class ScoredLabel:
    id: str
    slug: str
    name: str
    score: float


@dataclass(frozen=True)
class Evidence:
    source: str
    line: int | None
    rank: int | None
    text: str
    why: str  # rule id or neighbour id


@dataclass(frozen=True)
class SimilarCase:
    id: str
    url: str | None
    score: float


@dataclass(frozen=True)
class RuleAction:
    """An action a matched rule gave, filled for the job, and the root causes it is advice for
    (the alternative's `for`, else what its rule concludes; empty: any cause)."""

    text: str
    causes: frozenset[str] = frozenset()
    # the frameworks its wording names (rules/frameworks.yaml `named`; empty: any job's)
    frameworks: frozenset[str] = frozenset()
    located: bool = False  # filled with where in the job's code it failed (`fn (train.py:46)`)


@dataclass(frozen=True)
class Classification:
    symptoms: tuple[ScoredLabel, ...] = ()
    root_causes: tuple[ScoredLabel, ...] = ()
    stage: ScoredLabel | None = None
    fix_scores: Mapping[str, float] = field(default_factory=dict)  # fix id -> evidence score
    # fix id -> the matched rules' actions, the rules that back the fix most first
    actions: Mapping[str, tuple[RuleAction, ...]] = field(default_factory=dict)
    evidence: tuple[Evidence, ...] = ()
    similar_cases: tuple[SimilarCase, ...] = ()
    abstain_reason: str | None = None
    collect_next: tuple[str, ...] = ()  # on an abstention: the steps the reports list
    # the top root cause is a guess, not stated: no specific rule names a cause and the
    # generic layer weighs several alike, or it scored under the fusion's `stated_cause`
    # (right less often than wrong); the causes shown are the best guess
    cause_open: bool = False
    # the fix classify put first for a reason beyond its score, and that reason: "cause" (the
    # most likely root cause's usual fix), "remedy" (the library's message prescribes it) or
    # "standing" (the job's initiating failure names it); recommend keeps it first
    fix_lead: tuple[str, str] | None = None


# --------------------------------------------------------------------------- recommend


@dataclass(frozen=True)
class FixRecommendation:
    id: str
    slug: str
    name: str
    score: float
    actions: tuple[str, ...]
    why: str = ""


# --------------------------------------------------------------------------- diagnosis


@dataclass(frozen=True)
class InputSummary:
    path: str
    kind: SourceKind
    rank: int | None
    host: str | None
    warnings: tuple[str, ...] = ()
    events: int = 0


# How many of each ranked label (symptoms, root causes) a report's tables list; the JSON has
# them all. A sentence of the report names no label the tables leave out.
LABELS_SHOWN = 3


@dataclass(frozen=True)
class Diagnosis:
    summary: str
    symptoms: tuple[ScoredLabel, ...] = ()
    root_causes: tuple[ScoredLabel, ...] = ()
    stage: ScoredLabel | None = None
    fix_patterns: tuple[FixRecommendation, ...] = ()
    first_failure: FailureRef | None = None
    culprit_ranks: tuple[int, ...] = ()
    hang: HangReport | None = None
    evidence: tuple[Evidence, ...] = ()
    similar_cases: tuple[SimilarCase, ...] = ()
    inputs: tuple[InputSummary, ...] = ()
    findings: tuple[Finding, ...] = ()  # extra: shown in reports, not in the ★ schema keys
    timeline: tuple[TimelineEntry, ...] = ()
    # on an abstention, what to collect next, step by step (the reports show it; the JSON
    # carries the short form in `summary`)
    collect_next: tuple[str, ...] = ()
    # for the reports' pictures, not in the JSON: per-rank exits (no message: the evidence
    # quotes what matters), flight-recorder progress per group, py-spy stack groups
    rank_exits: tuple[RankExit, ...] = ()
    process_groups: tuple[GroupProgress, ...] = ()
    stack_groups: tuple[StackGroup, ...] = ()
    evidence_found: bool = True  # False: no input held anything triage could read
    outcome: Outcome | None = None
    cause_open: bool = False  # the causes are a guess (Classification.cause_open); not in JSON

    def to_dict(self) -> dict[str, Any]:
        """The ★ JSON diagnosis (schema triage.diagnosis/1), plus `findings`/`timeline`."""

        def label(x: ScoredLabel) -> dict[str, Any]:
            return {"id": x.id, "slug": x.slug, "name": x.name, "score": round(x.score, 3)}

        hang = None
        if self.hang is not None:
            hang = {
                "detected": self.hang.detected,
                "lagging_ranks": list(self.hang.lagging_ranks),
                "process_group": self.hang.process_group,
                "collective": self.hang.collective.as_dict() if self.hang.collective else None,
                "explanation": self.hang.explanation,
            }
        first = None
        if self.first_failure is not None:
            f = self.first_failure
            first = {
                "rank": f.rank,
                "host": f.host,
                "time": _iso(f.time),
                "source": f.source,
                "line": f.line,
                "text": f.text,
            }
        outcome = None
        if self.outcome is not None:
            outcome = {
                "id": self.outcome.id.value,
                "why": self.outcome.why,
                "evidence": [
                    {"source": e.source, "line": e.line, "rank": e.rank, "text": e.text}
                    for e in self.outcome.evidence
                ],
            }
        return {
            "schema": SCHEMA,
            "summary": self.summary,
            "outcome": outcome,
            "symptoms": [label(s) for s in self.symptoms],
            "root_causes": [label(r) for r in self.root_causes],
            "stage": {"id": self.stage.id, "slug": self.stage.slug} if self.stage else None,
            "fix_patterns": [
                {
                    "id": f.id,
                    "slug": f.slug,
                    "name": f.name,
                    "score": round(f.score, 3),
                    "actions": list(f.actions),
                    "why": f.why,
                }
                for f in self.fix_patterns
            ],
            "first_failure": first,
            "culprit_ranks": list(self.culprit_ranks),
            "hang": hang,
            "evidence": [
                {"source": e.source, "line": e.line, "rank": e.rank, "text": e.text, "why": e.why}
                for e in self.evidence
            ],
            "similar_cases": [
                {"id": c.id, "url": c.url, "score": round(c.score, 3)} for c in self.similar_cases
            ],
            "inputs": [
                {
                    "path": i.path,
                    "kind": i.kind.value,
                    "rank": i.rank,
                    "host": i.host,
                    "warnings": list(i.warnings),
                }
                for i in self.inputs
            ],
            "findings": [
                {"kind": f.kind.value, "summary": f.summary, "ranks": list(f.ranks)}
                for f in self.findings
            ],
            "timeline": [
                {
                    "time": _iso(t.time),
                    "rank": t.rank,
                    "role": t.role,
                    "text": t.text,
                    "source": t.source,
                    "line": t.line,
                }
                for t in self.timeline
            ],
        }


def _iso(epoch: float | None) -> str | None:
    if epoch is None:
        return None
    from datetime import datetime, timezone

    try:
        return datetime.fromtimestamp(epoch, tz=timezone.utc).isoformat(timespec="milliseconds")
    except (OverflowError, OSError, ValueError):  # NaN or a clock far outside any real run
        return None
