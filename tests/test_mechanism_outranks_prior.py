"""A root cause a specific rule recognised by its mechanism is not outvoted by the learned
model's and the neighbours' prior for a frequent cause (a framework bug, R25)."""

from __future__ import annotations

from triage.classify import fusion, load_calibration
from triage.classify.types import NeighbourVote, RuleHit


def _votes(root_cause: str) -> list[NeighbourVote]:
    return [NeighbourVote(f"ref-{i}", None, 0.8, "S18", root_cause, "F6", "ST4") for i in range(7)]


def test_a_version_skew_rule_leads_over_a_frequent_cause_the_prior_prefers() -> None:
    # a library's own version check failed: the rule names R01 well above the framework bug
    # it also allows
    skew = RuleHit(
        "explicit-version-requirement",
        "a library refused to run with the installed version of a dependency",
        None,
        symptom={"S03": 0.75},
        root_cause={"R01": 0.8, "R25": 0.1},
        fix={"F1": 0.85},
    )
    # the learned model and every neighbour say a framework bug
    model = {"root_cause": {"R25": 0.8, "R01": 0.15}, "symptom": {"S18": 0.8}}
    out = fusion.fuse([skew], {"tfidf": _votes("R25")}, load_calibration(), "tfidf", model)
    causes = [(s.label, round(s.score, 2)) for s in out["root_cause"]]
    assert causes[0][0] == "R01", causes
    # the list still reads top-down: what it outranks scores no more than it
    assert causes[1][1] <= causes[0][1], causes


def test_rules_that_weigh_two_causes_alike_leave_the_order_to_the_calibration() -> None:
    unsure = RuleHit(
        "torch-compile-failure",
        "torch.compile failed",
        None,
        symptom={"S18": 0.6},
        root_cause={"R25": 0.4, "R01": 0.3},
        fix={"F1": 0.45, "F6": 0.4},
    )
    model = {"root_cause": {"R26": 0.8, "R25": 0.1}, "symptom": {"S18": 0.8}}
    out = fusion.fuse([unsure], {"tfidf": _votes("R26")}, load_calibration(), "tfidf", model)
    assert fusion.mechanism_cause([unsure]) is None
    assert out["root_cause"][0].label != "R01"
