"""Records passed between the parts of the classify stage (rules, neighbours, fusion)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from triage.model import Event, Finding, RuleAction


@dataclass(frozen=True)
class RuleHit:
    """One rule matching one event (or one correlate finding).

    `symptom`, `root_cause`, `fix` and `stage` map taxonomy ids to the rule's weight in
    [0, 1]. `actions` are the rule's actions already filled with the captured groups and job
    facts, keyed by fix id, each with the root causes it is advice for.
    """

    rule_id: str
    title: str
    event: Event | None
    symptom: Mapping[str, float] = field(default_factory=dict)
    root_cause: Mapping[str, float] = field(default_factory=dict)
    fix: Mapping[str, float] = field(default_factory=dict)
    stage: Mapping[str, float] = field(default_factory=dict)
    captures: Mapping[str, str] = field(default_factory=dict)
    actions: Mapping[str, tuple[RuleAction, ...]] = field(default_factory=dict)
    evidence_text: str = ""  # the line(s) to quote as evidence
    evidence_line: int | None = None  # absolute line number of the quoted text
    from_cascade: bool = False  # the matched event is cascade, not initiating
    generic: bool = False  # from a `layer: generic` rule: a family prior, not a mechanism
    atlas: bool = False  # a library's own message, matched in the atlas (classify.atlas)
    # an atlas match whose labels a person reviewed (every template of that text)
    reviewed: bool = False
    finding: Finding | None = None  # the correlate finding a finding rule hit
    # the fix the matched message prescribes itself (the rule's `remedy`), when it says it
    prescribes: str | None = None
    # field -> labels the matched fact contradicts (the rule's `rules_out`): a fact, not a
    # vote, so it holds on a cascade hit or one kept as evidence only
    rules_out: Mapping[str, frozenset[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class NeighbourVote:
    """One reference case close to the failure signature."""

    case_id: str
    url: str | None
    similarity: float  # cosine similarity in [-1, 1]
    symptom: str
    root_cause: str
    fix: str
    stage: str
    symptom_alt: tuple[str, ...] = ()
    root_cause_alt: tuple[str, ...] = ()
    fix_alt: tuple[str, ...] = ()
