"""The one data model that every pipeline stage passes to the next.

ingest -> Source; parse -> Event (with typed payloads for structured inputs);
correlate -> Analysis (Finding, RankExit, HangReport, FailureRef);
classify -> Classification (ScoredLabel, Evidence, SimilarCase);
recommend -> FixRecommendation; everything ends in one Diagnosis, which renders to the
JSON schema `triage.diagnosis/1` (see DESIGN.md) through `Diagnosis.to_dict()`.

All records are frozen dataclasses, except flight-recorder entries and stack frames: those are
NamedTuples (a 1,024-rank job loads millions, and tuples build fastest). Stages never hand each
other raw dicts; the only dicts are `attrs` (named regex captures and small facts), which are
data, not structure. A finding's facts are typed per kind (`finding_facts`).
"""

from __future__ import annotations

from triage.model.analysis import (
    Analysis,
    AnalysisFacts,
    CollectiveProgress,
    EvidenceRef,
    FailureRef,
    Finding,
    GroupProgress,
    HangReport,
    Outcome,
    StackGroup,
    TimelineEntry,
)
from triage.model.diagnosis import (
    SCHEMA,
    SURE_CAUSE,
    Classification,
    Diagnosis,
    Evidence,
    FixRecommendation,
    InputSummary,
    RuleAction,
    ScoredLabel,
    SimilarCase,
)
from triage.model.finding_facts import (
    FACTS_OF,
    CascadeFacts,
    CollectiveMismatchFacts,
    FindingFacts,
    FindingKind,
    FirstFailureFacts,
    FrWindowFacts,
    HangFacts,
    HangShape,
    LaggingRankFacts,
    MissingRankFacts,
    ProgressFacts,
    RankExitFacts,
    RestartFacts,
    SettingFacts,
    StackOutlierFacts,
)
from triage.model.inputs import (
    EventKind,
    InputNote,
    Level,
    OutcomeKind,
    Source,
    SourceKind,
)
from triage.model.payloads import (
    CollectiveMismatch,
    CollectiveRef,
    EnvReport,
    Event,
    FlightRecorderDump,
    FlightRecorderEntry,
    ParsedSource,
    Payload,
    PySpyDump,
    PySpyThread,
    RankExit,
    StackFrame,
    Traceback,
    TracebackFrame,
    TracebackLink,
)

__all__ = [
    "Analysis",
    "AnalysisFacts",
    "CascadeFacts",
    "Classification",
    "CollectiveMismatch",
    "CollectiveMismatchFacts",
    "CollectiveProgress",
    "CollectiveRef",
    "Diagnosis",
    "EnvReport",
    "Event",
    "EventKind",
    "Evidence",
    "EvidenceRef",
    "FACTS_OF",
    "FailureRef",
    "Finding",
    "FindingFacts",
    "FindingKind",
    "FirstFailureFacts",
    "FixRecommendation",
    "FlightRecorderDump",
    "FlightRecorderEntry",
    "FrWindowFacts",
    "GroupProgress",
    "HangFacts",
    "HangReport",
    "HangShape",
    "InputNote",
    "InputSummary",
    "LaggingRankFacts",
    "Level",
    "MissingRankFacts",
    "Outcome",
    "OutcomeKind",
    "ParsedSource",
    "Payload",
    "ProgressFacts",
    "PySpyDump",
    "PySpyThread",
    "RankExit",
    "RankExitFacts",
    "RestartFacts",
    "RuleAction",
    "SCHEMA",
    "SURE_CAUSE",
    "ScoredLabel",
    "SettingFacts",
    "SimilarCase",
    "Source",
    "SourceKind",
    "StackFrame",
    "StackGroup",
    "StackOutlierFacts",
    "TimelineEntry",
    "Traceback",
    "TracebackFrame",
    "TracebackLink",
]
