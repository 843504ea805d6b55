"""A fact of the job that contradicts a label rules it out (`rules_out` in a rule): the report
never offers that label, whatever the neighbours and the learned model vote for it."""

from __future__ import annotations

from pathlib import Path

import pytest

from triage import knowledge
from triage.knowledge.rules import RuleError
from triage.pipeline import Options, diagnose, explain

CORPUS = Path(__file__).resolve().parent.parent / "corpus_samples"

WATCHDOG = (
    "[rank1]:[E1202 10:11:50.000000 123 ProcessGroupNCCL.cpp:632] [Rank 1] Watchdog caught "
    "collective operation timeout: WorkNCCL(SeqNum=12, OpType=ALLREDUCE, NumelIn=1, "
    "NumelOut=1, Timeout(ms)=600000) ran for 600012 milliseconds before timing out."
)
PREEMPTED = "gangctl: member node07 preempted by gang train-hi-42"
# A team's scheduler stops a gang member first; the others' watchdog timeouts follow it.
TEAM_RULE = """
- id: team-gang-preempted
  title: The gang scheduler preempted the job; the ranks' timeouts followed
  match:
    any: ['gangctl: member (?P<member>\\S+) preempted by gang (?P<gang>\\S+)']
  concludes:
    symptom: {S28: 0.6}
  rules_out:
    symptom: [S17]
    root_cause: [R11]
  examples:
    match: ["gangctl: member node07 preempted by gang train-hi-42"]
    no_match: ["gangctl: member node07 joined gang train-hi-42"]
"""


def _team(tmp_path: Path, body: str) -> str:
    folder = tmp_path / "team_rules"
    folder.mkdir()
    (folder / "team.yaml").write_text(body, encoding="utf-8")
    return str(folder)


def test_a_label_a_rule_rules_out_is_never_offered_however_strong_the_rest(
    tmp_path: Path,
) -> None:
    paste = f"{WATCHDOG}\n{PREEMPTED}\n"
    plain = explain(paste, Options(use_embeddings=False, workers=1))
    assert plain.symptoms[0].id == "S17"
    assert "R11" in {c.id for c in plain.root_causes}

    team = (_team(tmp_path, TEAM_RULE),)
    d = explain(paste, Options(use_embeddings=False, workers=1, extra_rules_dirs=team))
    assert "S17" not in {s.id for s in d.symptoms}
    assert "R11" not in {c.id for c in d.root_causes}
    assert d.symptoms[0].id == "S28"


@pytest.mark.parametrize(
    ("rules_out", "said"),
    [
        ("{symptom: [S99]}", "rules_out.symptom"),
        ("{fix: [F3]}", "unknown rules_out key"),
        ("{symptom: [S28]}", "concludes and rules out ['S28']"),
    ],
)
def test_a_rule_that_rules_out_what_it_cannot_is_reported(
    tmp_path: Path, rules_out: str, said: str
) -> None:
    body = TEAM_RULE.replace("  rules_out:\n    symptom: [S17]\n    root_cause: [R11]\n", "")
    body = body.replace("  examples:", f"  rules_out: {rules_out}\n  examples:")
    with pytest.raises(RuleError, match=r"team-gang-preempted.*" + r"\W*".join(said.split())):
        knowledge.load([_team(tmp_path, body)])


def test_a_job_whose_ranks_ran_collectives_together_is_not_put_down_to_its_launcher() -> None:
    # every rank's flight recorder holds collectives #1-#26: the launcher and the cluster
    # brought the job up; rank 2's ValueError stopped it (the neighbours' and the learned
    # model's launcher misconfiguration, R06, is contradicted)
    bundle = CORPUS / "eval_label_mismatch_rank_waits_at_barrier" / "bundle"
    d = diagnose([str(bundle)], Options(workers=1))
    assert d.hang is not None and d.hang.detected
    assert "R06" not in {c.id for c in d.root_causes}
