"""A finding's facts are typed per kind: rules name its fields, the loader checks each name
against the kind's fields when it reads the rule, and actions' conditions read the job's
`JobConditions`, never a dict of facts by key."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest

from triage import knowledge
from triage.classify import rules as engine
from triage.knowledge import KnowledgeError
from triage.knowledge.actions import JobConditions
from triage.model import (
    FACTS_OF,
    Analysis,
    AnalysisFacts,
    Finding,
    FindingKind,
    HangFacts,
    HangShape,
    StackOutlierFacts,
)
from triage.parsers import parse_text

CONCLUDES = """  concludes:
    symptom: {S17: 0.6}
    fix: {F6: 0.5}"""


def _load(tmp_path: Path, body: str, name: str = "team.yaml") -> knowledge.Knowledge:
    folder = tmp_path / "team"
    folder.mkdir(exist_ok=True)
    (folder / name).write_text(body, encoding="utf-8")
    return knowledge.load([folder])


def _problem(tmp_path: Path, body: str, name: str = "team.yaml") -> str:
    with pytest.raises(KnowledgeError) as caught:
        _load(tmp_path, body, name)
    return str(caught.value)


def test_a_rule_that_tests_a_fact_no_finding_of_its_kind_has_is_reported_with_file_and_rule(
    tmp_path: Path,
) -> None:
    # `mismatch` is a fact of a collective mismatch, not of a lagging rank
    said = _problem(
        tmp_path,
        f"""
- id: team-lagging-op-mismatch
  title: A lagging rank that issued another op
  match:
    finding: {{kind: lagging_rank, where: {{mismatch: '^op$'}}}}
{CONCLUDES}
  examples:
    match: [{{finding: lagging_rank, facts: {{ranks: [1], seq: 4}}}}]
    no_match: [{{finding: hang}}]
""",
    )
    assert "team.yaml" in said and "team-lagging-op-mismatch" in said
    assert "'mismatch', a fact no lagging_rank finding has" in said
    assert "seq" in said  # the facts it could have named


def test_an_action_naming_a_fact_nothing_fills_is_reported(tmp_path: Path) -> None:
    said = _problem(
        tmp_path,
        f"""
- id: team-outlier-stack-depth
  title: An outlier with a deep stack
  match:
    finding: stack_outlier
{CONCLUDES}
  actions:
    F6: "Rank {{ranks}} is {{stack_depth}} frames deep at {{stack_top}}."
  examples:
    match: [{{finding: stack_outlier, facts: {{ranks: [1], stack_top: f}}}}]
    no_match: [{{finding: hang}}]
""",
    )
    assert "team-outlier-stack-depth" in said and "{stack_depth}" in said


def test_an_action_may_name_the_findings_facts_the_jobs_and_its_patterns_groups(
    tmp_path: Path,
) -> None:
    kb = _load(
        tmp_path,
        f"""
- id: team-outlier-where
  title: An outlier stood elsewhere
  match:
    finding: stack_outlier
{CONCLUDES}
  actions:
    F6: "Rank {{ranks}} stood at {{stack_top}} (torch {{torch}})."
  examples:
    match: [{{finding: stack_outlier, facts: {{ranks: [1], stack_top: sleep}}}}]
    no_match: [{{finding: hang}}]
- id: team-upload-throttled
  title: Uploads are throttled
  match:
    any: ['objstore throttled upload of (?P<object>\\S+)']
{CONCLUDES}
  actions:
    F6: "Upload {{object}} less often on {{host}}."
  examples:
    match: ["objstore throttled upload of s3://b/k"]
    no_match: ["objstore upload done"]
""",
    )
    assert {"team-outlier-where", "team-upload-throttled"} <= {r.id for r in kb.rules}


@pytest.mark.parametrize(
    ("facts", "wrong"),
    [
        ("{ranks: [1], depth: 3}", "names depth: no stack_outlier finding has such a fact"),
        ("{ranks: [1], in_collective: maybe}", "fact in_collective: 'maybe' is not a bool"),
        ("{ranks: one}", "`ranks` must be a list of rank numbers"),
    ],
)
def test_a_finding_example_is_read_into_the_typed_facts_or_reported(
    tmp_path: Path, facts: str, wrong: str
) -> None:
    said = _problem(
        tmp_path,
        f"""
- id: team-outlier
  title: An outlier
  match:
    finding: stack_outlier
{CONCLUDES}
  examples:
    match: [{{finding: stack_outlier, facts: {facts}}}]
    no_match: [{{finding: hang}}]
""",
    )
    assert "team-outlier" in said and wrong in said


def test_a_hang_shape_in_an_example_is_one_of_the_shapes(tmp_path: Path) -> None:
    said = _problem(
        tmp_path,
        f"""
- id: team-hang-sideways
  title: A sideways hang
  match:
    finding: {{kind: hang, where: {{shape: '^sideways$'}}}}
{CONCLUDES}
  examples:
    match: [{{finding: hang, facts: {{shape: sideways}}}}]
    no_match: [{{finding: hang, facts: {{shape: behind}}}}]
""",
    )
    assert "team-hang-sideways" in said and "'sideways' is not a HangShape" in said


def test_a_playbook_entry_naming_no_job_fact_is_reported(tmp_path: Path) -> None:
    said = _problem(
        tmp_path,
        """
kind: playbook
causes:
  R09:
    F3: "Raise the timeout above {timeout_ms} ms on {stuck_host}."
""",
        name="playbook.yaml",
    )
    assert "playbook.yaml" in said and "cause R09 / F3" in said and "{stuck_host}" in said


def test_every_kind_has_facts_whose_names_do_not_hide_their_methods() -> None:
    assert set(FACTS_OF) == set(FindingKind)
    for kind, cls in FACTS_OF.items():
        assert not cls.names() & {"names", "value", "values"}, kind
        assert cls.names() == {f.name for f in fields(cls)}


def test_a_finding_carries_its_kinds_facts_and_nothing_else() -> None:
    assert isinstance(Finding(kind="hang", summary="s").facts, HangFacts)
    with pytest.raises(TypeError, match="HangFacts"):
        Finding(kind="hang", summary="s", facts=StackOutlierFacts(stack_top="f"))


def _stack_outlier_advice(user_frame: str | None) -> list[str]:
    analysis = Analysis(
        findings=(
            Finding(
                kind=FindingKind.STACK_OUTLIER,
                summary="py-spy: rank(s) 1 stopped in a different place than the majority",
                ranks=(1,),
                facts=StackOutlierFacts(
                    stack_top="sleep", majority_top="all_reduce", user_frame=user_frame
                ),
            ),
        ),
        # the frame the first failure raised at: not where the outlier stood
        facts=AnalysisFacts(user_frame="load (data.py:7)"),
    )
    hits = [h for h in engine.match_events([], analysis) if h.rule_id == "finding-stack-outlier"]
    return [a.text for h in hits for acts in h.actions.values() for a in acts]


def test_a_findings_unknown_fact_is_never_filled_from_the_jobs() -> None:
    assert any("upload (train.py:54)" in a for a in _stack_outlier_advice("upload (train.py:54)"))
    assert not any("data.py:7" in a for a in _stack_outlier_advice(None))


def test_rules_test_the_typed_facts_the_analysis_made() -> None:
    def hit(shape: HangShape, detected: bool) -> set[str]:
        finding = Finding(
            kind="hang",
            summary="",  # rules read the facts, never the sentence
            ranks=(2,),
            facts=HangFacts(detected=detected, op="barrier", shape=shape),
        )
        return {h.rule_id for h in engine.match_events([], Analysis(findings=(finding,)))}

    assert {"finding-hang", "hang-shape-diverged"} <= hit(HangShape.DIVERGED, True)
    assert "finding-hang" not in hit(HangShape.FAILED, False)
    assert "hang-shape-diverged" not in hit(HangShape.LEFT_LOOP, True)


def test_conditions_read_the_jobs_facts_never_a_rules_capture(tmp_path: Path) -> None:
    # the pattern captures a `device` group: the `device` condition still reads the job's
    kb = _load(
        tmp_path,
        """
- id: team-tensor-device
  title: A tensor on the CPU
  match:
    any: ['tensor is on (?P<device>cpu)']
  concludes:
    symptom: {S12: 0.5}
    fix: {F6: 0.5}
  actions:
    F6:
      - {text: "Move the CPU job's tensor ({device}).", when: {device: cpu}}
      - "Move the tensor to the GPU ({device})."
  examples:
    match: ["RuntimeError: tensor is on cpu"]
    no_match: ["RuntimeError: tensor is on cuda:0"]
""",
    )
    parsed = parse_text("RuntimeError: tensor is on cpu", kb=kb)
    ruleset = engine.load([tmp_path / "team"])  # its examples run too

    def advice(facts: AnalysisFacts) -> list[str]:
        hits = engine.match_events(parsed.events, Analysis(facts=facts), rules=ruleset)
        return [a.text for h in hits if h.rule_id == "team-tensor-device" for a in h.actions["F6"]]

    assert advice(AnalysisFacts()) == ["Move the tensor to the GPU (cpu)."]
    assert advice(AnalysisFacts(device="cpu")) == ["Move the CPU job's tensor (cpu)."]
    assert JobConditions.of(AnalysisFacts(device="cpu", culprit_rank=0)) == JobConditions(
        culprit_known=True, device="cpu"
    )


def test_collect_next_advice_names_only_what_the_situation_knows(tmp_path: Path) -> None:
    said = _problem(
        tmp_path,
        """
kind: collect_next
advice:
  - situation: no stacks
    when: {missing: pyspy}
    ask: ["`py-spy dump` of {stuck_host}", "`py-spy dump` of every rank"]
""",
        name="collect.yaml",
    )
    assert "collect.yaml" in said and "{stuck_host}" in said
    kb = knowledge.shipped()
    asked = kb.collect_next.asks(knowledge.Situation(stuck_rank=3))
    assert any("rank 3" in a for a in asked)
    assert not any("{" in a for a in kb.collect_next.asks(knowledge.Situation()))


@pytest.mark.parametrize(
    "bundle", ["skip_collective_empty_val_shard", "second_node_never_joins", "raise_mid_step"]
)
def test_the_names_the_loader_accepts_are_the_names_the_engines_fill(bundle: str) -> None:
    """`JOB_FACT_NAMES` is what the loader lets an action name: every fact recommend and the
    rule engine fill is among them (one filled but not accepted could never be used)."""
    from triage import pipeline, recommend
    from triage.analysis import correlate
    from triage.knowledge.actions import JOB_FACT_NAMES

    root = Path(__file__).resolve().parent.parent / "corpus_samples" / bundle / "bundle"
    analysis = correlate(pipeline.read_inputs([str(root)]))
    for filled in (recommend.job_facts(analysis), engine.job_facts(analysis)):
        assert filled and set(filled) <= JOB_FACT_NAMES, set(filled) - JOB_FACT_NAMES
