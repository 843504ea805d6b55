"""The first action agrees with what the report says: the fix that resolved the cases of the
cause it states, or the remedy the library's own message prescribes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.cli_runs import explained
from triage import knowledge
from triage.classify import load_cause_fixes, rule_examples
from triage.cli import main
from triage.knowledge.rules import RuleError

WATCHDOG = (
    "    Watchdog caught collective operation timeout\n"
    "    checkTimeout at ProcessGroupNCCL.cpp:733\n"
)
# torch 2.6's refusal of a checkpoint that pickles an argparse.Namespace; the message says how
# to load it (a trusted file: weights_only=False; else allow-list the global)
WEIGHTS_ONLY = (
    "_pickle.UnpicklingError: Weights only load failed. This file can still be loaded, to do so "
    "you have two options, do those steps only if you trust the source of the checkpoint.\n"
    "\t(1) In PyTorch 2.6, we changed the default value of the `weights_only` argument in "
    "`torch.load` from `False` to `True`. Re-running `torch.load` with `weights_only` set to "
    "`False` will likely succeed, but it can result in arbitrary code execution. Do it only if "
    "you got the file from a trusted source.\n"
    "\t(2) Alternatively, to load with `weights_only=True` please check the recommended steps in "
    "the following error message.\n"
    "\tWeightsUnpickler error: Unsupported global: GLOBAL argparse.Namespace was not an allowed "
    "global by default. Please use `torch.serialization.add_safe_globals([argparse.Namespace])` "
    "or the `torch.serialization.safe_globals([argparse.Namespace])` context manager to "
    "allowlist this global if you trust this class/function."
)


def test_a_stated_cause_leads_with_the_fix_that_resolved_its_cases() -> None:
    d = explained(WATCHDOG)
    cause = d["root_causes"][0]
    assert "most likely cause" in d["summary"] and cause["id"] in d["summary"]
    usual = load_cause_fixes().ranked(cause["id"])[0][0]
    first = d["fix_patterns"][0]
    assert first["id"] == usual, (first, cause)
    # the reason given is the cause the report states
    assert f"most likely root cause, {cause['id']}" in first["why"]


def test_a_message_that_prescribes_its_remedy_leads_with_it_in_a_paste() -> None:
    d = explained(WEIGHTS_ONLY)
    first = d["fix_patterns"][0]
    assert first["id"] == "F3", d["fix_patterns"]
    assert "weights_only=False" in first["actions"][0]
    assert "add_safe_globals([argparse.Namespace])" in first["actions"][0]
    assert "prescribes" in first["why"]


def test_a_distributed_call_before_init_process_group_is_told_to_call_it_where_it_ran(
    tmp_path: Path,
) -> None:
    # torch's message names its own remedy (call init_process_group): the first action says
    # that, at the line of the job's script that made the distributed call, for its GPUs
    (tmp_path / "rank_0.log").write_text(
        "[rank0]: Traceback (most recent call last):\n"
        '[rank0]:   File "/workspace/train.py", line 52, in <module>\n'
        "[rank0]:     main()\n"
        '[rank0]:   File "/workspace/train.py", line 31, in main\n'
        "[rank0]:     model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model).cuda()\n"
        '[rank0]:   File "/usr/local/lib/python3.11/site-packages/torch/distributed/'
        'distributed_c10d.py", line 1147, in _get_default_group\n'
        "[rank0]:     raise ValueError(\n"
        "[rank0]: ValueError: Default process group has not been initialized, please make sure "
        "to call init_process_group.\n",
        encoding="utf-8",
    )
    result = CliRunner().invoke(main, [str(tmp_path), "--no-embed", "-q", "--format", "json"])
    assert result.exit_code == 0, result.output
    first = json.loads(result.output)["fix_patterns"][0]
    assert first["id"] == "F6" and "prescribes" in first["why"], first
    action = first["actions"][0]
    assert "init_process_group(backend='nccl')" in action, action
    assert "main (/workspace/train.py:31)" in action, action


TEAM_RULE = """
- id: team-scratch-full
  title: Scratch disk full
  match:
    any: ['No space left on device']
  concludes:
    symptom: {{S28: 0.8}}
    root_cause: {{R05: 0.7}}
    fix: {{F5: 0.8, F3: 0.3}}
  actions:
    F3: "Write checkpoints elsewhere."
  remedy:
    fix: F5
    says: {says}
  examples:
    match: ["OSError: [Errno 28] No space left on device. Free some space on /scratch."]
    no_match: ["saved checkpoint to /scratch/ckpt"]
"""


def _team(tmp_path: Path, body: str) -> Path:
    folder = tmp_path / "team_rules"
    folder.mkdir()
    (folder / "team.yaml").write_text(body, encoding="utf-8")
    return folder


def test_a_remedy_needs_the_rules_own_action_for_its_fix(tmp_path: Path) -> None:
    folder = _team(tmp_path, TEAM_RULE.format(says="'Free some space'"))
    with pytest.raises(RuleError) as err:
        knowledge.load([folder])
    assert "remedy.fix F5 needs an action" in str(err.value)
    assert "team-scratch-full" in str(err.value)


def test_a_remedy_its_examples_never_print_is_reported(tmp_path: Path) -> None:
    body = TEAM_RULE.format(says="'Delete old checkpoints'").replace(
        '    F3: "Write checkpoints elsewhere."',
        '    F3: "Write checkpoints elsewhere."\n    F5: "Free space on the scratch disk."',
    )
    kb = knowledge.load([_team(tmp_path, body)])
    rule = next(r for r in kb.rules if r.id == "team-scratch-full")
    problems = rule_examples.example_problems([rule], kb)
    assert [p for p in problems if "remedy.says matches none" in p.message], problems


def test_every_shipped_remedy_is_printed_by_one_of_its_rules_examples() -> None:
    kb = knowledge.shipped()
    with_remedy = [r for r in kb.rules if r.remedy is not None]
    assert with_remedy
    for rule in with_remedy:
        assert not rule_examples.remedy_problems(rule, kb), rule.id
