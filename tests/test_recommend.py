"""The recommender as a user meets it: what to do first, with this job's ranks and values."""

from __future__ import annotations

from pathlib import Path

from triage import knowledge, taxonomy
from triage.classify import load_cause_fixes, rules
from triage.classify import rule_actions as classify_actions
from triage.knowledge.actions import JobConditions
from triage.model import (
    Analysis,
    AnalysisFacts,
    Classification,
    CollectiveRef,
    Evidence,
    FailureRef,
    Finding,
    HangReport,
    LaggingRankFacts,
    ScoredLabel,
)
from triage.parsers import parse_text
from triage.pipeline import Options, explain
from triage.recommend import recommend


def _label(table: str, label_id: str, score: float) -> ScoredLabel:
    cat = getattr(taxonomy.load(), table)[label_id]
    return ScoredLabel(cat.id, cat.slug, cat.name, score)


def _classified(text: str, root_causes: dict[str, float], fix_scores: dict[str, float]):
    """A classification the way classify builds one: rule actions merged per fix."""
    hits = rules.match_text(text, parse_text(text).events)
    evidence = tuple(
        Evidence("<pasted>", h.evidence_line, None, h.evidence_text, h.rule_id) for h in hits
    )
    return Classification(
        root_causes=tuple(_label("root_causes", r, s) for r, s in root_causes.items()),
        fix_scores=fix_scores,
        actions=classify_actions(hits),
        evidence=evidence,
    )


def test_an_oom_asks_for_sharding_or_smaller_batches_first() -> None:
    text = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total "
        "capacity of 79.19 GiB of which 1.02 GiB is free."
    )
    fixes = recommend(_classified(text, {"R16": 0.85}, {"F2": 0.6, "F5": 0.55}), Analysis())
    assert [f.id for f in fixes[:2]] in (["F2", "F5"], ["F5", "F2"])
    words = " ".join(a for f in fixes[:2] for a in f.actions)
    assert "PYTORCH_CUDA_ALLOC_CONF" in words and "batch size" in words
    assert "2.00 GiB" in words  # the rule's captured request size reaches the user
    assert all(0.0 <= f.score <= 1.0 for f in fixes)
    assert [f.score for f in fixes] == sorted((f.score for f in fixes), reverse=True)


def test_a_hang_behind_lagging_rank_3_names_rank_3_and_drop_last() -> None:
    analysis = Analysis(
        culprit_ranks=(3,),
        hang=HangReport(
            detected=True,
            lagging_ranks=(3,),
            process_group="0",
            collective=CollectiveRef(op="all_reduce", seq=42, timeout_ms=600000),
        ),
    )
    classification = Classification(
        root_causes=(_label("root_causes", "R09", 0.7), _label("root_causes", "R08", 0.2))
    )
    fixes = recommend(classification, analysis)
    assert fixes[0].id == "F3"
    first = " ".join(fixes[0].actions)
    assert "rank 3" in first and "drop_last=True" in first
    assert "R09" in fixes[0].why


def test_a_timeout_during_setup_suggests_a_longer_timeout_sized_from_the_job() -> None:
    analysis = Analysis(
        facts=AnalysisFacts(collective="ALLREDUCE", timeout_ms=1800000),
        first_failure=FailureRef(2, "node3", None, "rank2.log", 10, "Watchdog caught ..."),
    )
    classification = Classification(root_causes=(_label("root_causes", "R11", 0.8),))
    fixes = recommend(classification, analysis)
    assert fixes[0].id == "F4"
    text = " ".join(fixes[0].actions)
    assert "timedelta(minutes=60)" in text and "1800000 ms" in text and "ALLREDUCE" in text


def test_a_version_mismatch_pins_the_torch_the_env_report_found() -> None:
    analysis = Analysis(facts=AnalysisFacts(torch="2.3.1+cu121", nccl="2.20.5"))
    classification = Classification(root_causes=(_label("root_causes", "R01", 0.9),))
    fixes = recommend(classification, analysis)
    assert fixes[0].id == "F1"
    assert "torch==2.3.1+cu121" in fixes[0].actions[0] and "2.20.5" in fixes[0].actions[0]


def test_network_and_container_causes_name_the_exact_settings() -> None:
    net = recommend(Classification(root_causes=(_label("root_causes", "R07", 0.8),)), Analysis())
    assert net[0].id == "F4" and "NCCL_SOCKET_IFNAME" in net[0].actions[0]
    shm = recommend(Classification(root_causes=(_label("root_causes", "R05", 0.8),)), Analysis())
    assert shm[0].id == "F5" and "--shm-size" in shm[0].actions[0]


def test_evidence_can_reorder_the_taxonomy_prior() -> None:
    # R16's usual first fix is F5, but the fused evidence says F2 fixed cases like this one.
    classification = Classification(
        root_causes=(_label("root_causes", "R16", 0.6),), fix_scores={"F2": 0.9, "F5": 0.2}
    )
    fixes = recommend(classification, Analysis())
    assert [f.id for f in fixes[:2]] == ["F2", "F5"]


def test_a_faulty_node_is_named_in_the_drain_action() -> None:
    analysis = Analysis(facts=AnalysisFacts(culprit_host="gpu-node-17"), culprit_ranks=(12,))
    fixes = recommend(Classification(root_causes=(_label("root_causes", "R28", 0.9),)), analysis)
    assert fixes[0].id == "F5" and "gpu-node-17" in fixes[0].actions[0]


def test_an_abstention_recommends_nothing() -> None:
    assert recommend(Classification(abstain_reason="no evidence"), Analysis()) == ()


def test_every_root_cause_yields_a_concrete_first_action() -> None:
    # with nothing else to go on, the fix that resolved most reference cases of the cause
    usual = load_cause_fixes()
    for rc in taxonomy.load().root_causes:
        fixes = recommend(Classification(root_causes=(_label("root_causes", rc, 0.7),)), Analysis())
        assert fixes and fixes[0].actions and fixes[0].why, rc
        assert fixes[0].id == usual.ranked(rc)[0][0], rc
        assert not any("{" in a for f in fixes for a in f.actions), rc


def test_the_playbook_is_knowledge_with_advice_for_every_root_cause() -> None:
    book = knowledge.load().playbook
    assert set(book.causes) == set(taxonomy.load().root_causes)
    assert set(book.fallback) == set(taxonomy.load().fix_patterns)
    # with no fact known, every cause's usual fix still gives advice; none names a placeholder
    tax = taxonomy.load()
    for rc, per_fix in book.causes.items():
        assert book.advice(rc, tax.root_causes[rc].fixes[0], {}, JobConditions()), rc
        for fix in per_fix:
            advice = book.advice(rc, fix, {}, JobConditions())
            assert advice is None or "{" not in advice, (rc, fix)


def test_a_plain_ddp_job_killed_for_host_memory_is_not_told_about_zero() -> None:
    causes = Classification(root_causes=(_label("root_causes", "R17", 0.9),))
    ddp = recommend(causes, Analysis(facts=AnalysisFacts(frameworks=("ddp",))))
    said = " ".join(a for f in ddp for a in f.actions)
    assert "ZeRO" not in said and "DeepSpeed" not in said
    assert ddp[0].id == "F5" and "DataLoader workers" in ddp[0].actions[0]
    deepspeed = recommend(causes, Analysis(facts=AnalysisFacts(frameworks=("deepspeed",))))
    assert any("ZeRO config" in a for f in deepspeed for a in f.actions)


TEAM_RULE = """
- id: team-scratch-quota
  title: Scratch quota exceeded on the shared file system
  match:
    any: ['Disk quota exceeded: .(?P<path>/scratch/\\S+?).$']
  concludes:
    symptom: {S28: 0.9}
    root_cause: {R05: 0.9}
    fix: {F5: 1.0}
  actions:
    F5: "Ask #hpc-support to raise the scratch quota for {path} (team runbook 7)"
  examples:
    match: ["OSError: [Errno 122] Disk quota exceeded: '/scratch/ckpt/step_9.pt'"]
    no_match: ["saved /scratch/ckpt/step_9.pt"]
"""
TEAM_PLAYBOOK = """
kind: playbook
causes:
  R05:
    F5: "Team runbook: move checkpoints to /lustre/ckpt (quota 50 TB)."
"""


def test_a_team_rules_action_and_playbook_reach_the_fix_advice(tmp_path: Path) -> None:
    team = tmp_path / "team"
    team.mkdir()
    (team / "quota.yaml").write_text(TEAM_RULE, encoding="utf-8")
    (team / "playbook.yaml").write_text(TEAM_PLAYBOOK, encoding="utf-8")
    text = (
        'Traceback (most recent call last):\n  File "train.py", line 9, in <module>\n'
        "OSError: [Errno 122] Disk quota exceeded: '/scratch/ckpt/step_9.pt'"
    )
    options = Options(use_embeddings=False, extra_rules_dirs=(str(team),))
    diagnosis = explain(text, options)
    f5 = next(f for f in diagnosis.fix_patterns if f.id == "F5")
    assert f5.actions[0] == (
        "Ask #hpc-support to raise the scratch quota for /scratch/ckpt/step_9.pt (team runbook 7)"
    )
    assert "Team runbook: move checkpoints to /lustre/ckpt (quota 50 TB)." in f5.actions
    assert f5.why.startswith("scratch quota exceeded on the shared file system")
    # without the team folder neither is there
    shipped = explain(text, Options(use_embeddings=False))
    assert not any("hpc-support" in a for f in shipped.fix_patterns for a in f.actions)


def test_the_rule_that_backs_a_fix_most_speaks_first() -> None:
    # Slow setup on rank 0: the generic "capture the hang" advice and the specific "rank 0 was
    # still preparing, raise the timeout" both back F4; the specific one must come first.
    analysis = Analysis(
        findings=(
            Finding(kind="hang", summary="hang: rank(s) 0 never reached barrier #2", ranks=(0,)),
            Finding(
                kind="lagging_rank",
                summary="rank(s) 0 stopped at collective #1 while rank(s) 1-2 went on to #2",
                ranks=(0,),
                facts=LaggingRankFacts(seq=2, op="barrier"),
            ),
        )
    )
    hits = rules.match_events([], analysis)
    # the classifier orders each fix's actions by how strongly their rule backs it
    classification = Classification(
        root_causes=(_label("root_causes", "R11", 0.9),),
        fix_scores={"F4": 0.8},
        actions=classify_actions(hits),
        evidence=tuple(Evidence("analysis", None, 0, h.evidence_text, h.rule_id) for h in hits),
    )
    f4 = recommend(classification, analysis)[0]
    assert f4.id == "F4"
    assert f4.actions[0].startswith("Rank 0 was still preparing")
    assert f4.why.startswith("a rank was still in setup work when the others reached")


TEAM_VAGUE_RULE = """
- id: team-labels-missing
  title: The batch lacks its labels
  match:
    any: ["KeyError: 'labels'"]
  concludes:
    symptom: {S18: 0.9}
    root_cause: {R26: 0.9}
    fix: {F6: 0.9}
  actions:
    F6: "Fix the training script: the error comes from user code (team runbook 3)."
  examples:
    match: ["KeyError: 'labels'"]
    no_match: ["KeyError: 'input_ids'"]
"""


def test_the_wording_that_says_where_replaces_the_same_advice_that_does_not(
    tmp_path: Path,
) -> None:
    """A team rule says "fix the training script" without saying where; the shipped rule says
    the same step at the line that raised: the user reads it once, with the line."""
    team = tmp_path / "team"
    team.mkdir()
    (team / "labels.yaml").write_text(TEAM_VAGUE_RULE, encoding="utf-8")
    text = (
        "Traceback (most recent call last):\n"
        '  File "/workspace/train.py", line 88, in <module>\n'
        "    main()\n"
        '  File "/workspace/train.py", line 46, in main\n'
        "    y = batch['labels']\n"
        "KeyError: 'labels'"
    )
    options = Options(use_embeddings=False, extra_rules_dirs=(str(team),))
    f6 = next(f for f in explain(text, options).fix_patterns if f.id == "F6")
    located = [a for a in f6.actions if "(/workspace/train.py:46)" in a]
    assert len(located) == 1 and " at main (" in located[0], f6.actions
    assert not any("team runbook 3" in a for a in f6.actions), f6.actions


def test_a_fix_with_nothing_concrete_to_say_does_not_lead_one_that_has() -> None:
    # a Megatron job's learned votes scored "resources" (F5) above the missing package's fix
    # (F1); F5 had no advice for this job, so the report led with the playbook's general line
    # "Give the job the resources it needs ..." above `pip install` of the missing module
    book = knowledge.load().playbook
    fixes = recommend(
        Classification(
            root_causes=(_label("root_causes", "R02", 0.35), _label("root_causes", "R17", 0.15)),
            fix_scores={"F5": 0.62, "F1": 0.53},
        ),
        Analysis(),
    )
    assert fixes and fixes[0].id == "F1", [(f.id, f.actions) for f in fixes]
    assert all(book.fallback[f.id] not in f.actions for f in fixes), fixes
