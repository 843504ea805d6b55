"""A team's own rules (`--rules DIR`) are read exactly as the shipped ones: their lines are
found in log files of every size as in a paste, and their examples run when they load."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from triage import knowledge, pipeline
from triage.classify import rule_examples, rules
from triage.cli import main
from triage.parsers import rank_log

RULE_ID = "team-objstore-throttled"
# An INFO line: no error word, no warning level. Only the team's rule makes it matter.
LINE = (
    "[2026-01-05 10:12:08,123] [INFO] [ckpt.py:42:upload] objstore throttled upload of "
    "s3://bucket/ckpt/step_100.pt (retry 3/10)"
)
TEAM_RULE = f"""
- id: {RULE_ID}
  title: The object store throttles checkpoint uploads
  match:
    any: ['objstore throttled upload of (?P<object>\\S+)']
  concludes:
    symptom: {{S28: 0.9}}
    root_cause: {{R05: 0.7}}
    fix: {{F5: 0.8}}
  actions:
    F5: "Upload {{object}} less often, or ask for a higher request rate on the bucket"
  examples:
    match: ["{LINE}"]
    no_match: ["[2026-01-05 10:12:09,001] [INFO] [ckpt.py:48:upload] objstore upload done"]
"""


def _team(tmp_path: Path, body: str = TEAM_RULE) -> Path:
    folder = tmp_path / "team_rules"
    folder.mkdir()
    (folder / "team.yaml").write_text(body, encoding="utf-8")
    return folder


# The job then fails: a job whose log ends in the middle of healthy training is reported as
# still running, with no symptom (the outcome comes first).
FAILURE = (
    "Traceback (most recent call last):\n"
    '  File "train.py", line 88, in <module>\n'
    "    save_checkpoint(step)\n"
    "RuntimeError: checkpoint upload gave up after 10 retries\n"
)


def _log_of_size(size: int) -> str:
    """Healthy progress output around LINE, `size` bytes or more (0: LINE and one step), then
    the job's failure."""
    if size == 0:
        return f"step 10 loss 2.1\n{LINE}\n{FAILURE}"
    filler = "\n".join(knowledge.shipped().templates.healthy) + "\n"
    half = filler * (size // (2 * len(filler)) + 1)
    return f"{half}{LINE}\n{half}{FAILURE}"


def _quoted(report: dict) -> list[str]:
    return [e["text"] for e in report["evidence"] if e["why"] == RULE_ID]


@pytest.mark.parametrize(
    "size",
    [0, 100 << 10, 9 << 20],  # the last one's line is in its second chunk (lines.CHUNK_SIZE)
    ids=["tiny file", "past the full-read limit", "several chunks"],
)
def test_a_team_rule_on_an_info_line_finds_it_in_a_log_file_of_any_size(
    tmp_path: Path, size: int
) -> None:
    team = _team(tmp_path)
    job = tmp_path / "job"
    job.mkdir()
    text = _log_of_size(size)
    (job / "rank0.log").write_text(text, encoding="utf-8")
    assert len(text) > size and (size == 0 or len(text) > rank_log.SCAN_ALL_BELOW)

    result = CliRunner().invoke(
        main, [str(job), "--rules", str(team), "--format", "json", "--no-embed"]
    )

    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert any("objstore throttled upload of" in q for q in _quoted(report)), report["evidence"]
    assert report["symptoms"][0]["id"] == "S28"


def test_the_same_line_pasted_matches_the_team_rule_too(tmp_path: Path) -> None:
    team = _team(tmp_path)
    result = CliRunner().invoke(
        main, ["explain", "--rules", str(team), "--format", "json", "--no-embed", LINE]
    )
    assert result.exit_code == 0, result.output
    assert _quoted(json.loads(result.output))


def test_rules_check_names_the_team_rule_in_a_small_file(tmp_path: Path) -> None:
    team = _team(tmp_path)
    log = tmp_path / "rank0.log"
    log.write_text(_log_of_size(0), encoding="utf-8")
    result = CliRunner().invoke(main, ["rules", "check", str(log), "--rules", str(team)])
    assert result.exit_code == 0, result.output
    assert RULE_ID in result.output


def test_without_the_team_folder_the_info_line_is_no_evidence(tmp_path: Path) -> None:
    job = tmp_path / "job"
    job.mkdir()
    (job / "rank0.log").write_text(_log_of_size(100 << 10), encoding="utf-8")
    parsed = pipeline.read_inputs([str(job)], workers=1)
    assert not [e for p in parsed for e in p.events if "objstore" in e.text]


def test_worker_processes_parse_with_the_team_rules(tmp_path: Path) -> None:
    """A bundle big enough for the parse pool: the workers read with the run's knowledge,
    handed to them when they start, not with the shipped rules alone."""
    kb = knowledge.load([_team(tmp_path)])
    job = tmp_path / "job"
    job.mkdir()
    for rank in range(2):  # past the size at which the pool starts (tens of MB)
        (job / f"rank{rank}.log").write_text(_log_of_size(18 << 20), encoding="utf-8")

    parsed = pipeline.read_inputs([str(job)], workers=2, kb=kb)

    found = {p.source.path: [e for e in p.events if "objstore throttled" in e.text] for p in parsed}
    assert sorted(found) == sorted(str(job / f"rank{r}.log") for r in range(2))
    assert all(len(events) == 1 for events in found.values()), found


def test_a_team_rule_that_misses_its_own_example_is_reported_with_file_and_rule(
    tmp_path: Path,
) -> None:
    broken = TEAM_RULE.replace("objstore throttled upload of (?P", "objstore throttled put of (?P")
    team = _team(tmp_path, broken)
    job = tmp_path / "job"
    job.mkdir()
    (job / "rank0.log").write_text(_log_of_size(0), encoding="utf-8")

    result = CliRunner().invoke(main, [str(job), "--rules", str(team), "--format", "json"])

    assert result.exit_code == 2
    assert "Traceback" not in result.output
    message = " ".join(result.output.split())  # click wraps long lines
    assert "team.yaml" in message and RULE_ID in message
    assert "should match its example" in message and "as a file" in message


def test_a_team_rule_that_matches_what_it_must_not_is_reported(tmp_path: Path) -> None:
    # `objstore (?P<object>\S+)` also matches the upload that went through
    loose = TEAM_RULE.replace("objstore throttled upload of (?P", "objstore (?:throttled )?(?P")
    kb = knowledge.load([_team(tmp_path, loose)])

    with pytest.raises(rules.RuleError, match=f"{RULE_ID}.*must not match its example"):
        rule_examples.check_team_examples(kb)


def test_the_scan_tables_are_derived_once_per_load_of_the_knowledge(tmp_path: Path) -> None:
    shipped = knowledge.shipped()
    team = _team(tmp_path)
    with_team = knowledge.load([team])
    # repeated runs (and `explain --jsonl`) load the same knowledge and reuse its tables
    assert rank_log.scan_tables(shipped) is rank_log.scan_tables(knowledge.shipped())
    assert rank_log.scan_tables(with_team) is rank_log.scan_tables(knowledge.load([team]))
    line = LINE.encode()
    assert rank_log.scan_tables(with_team).rule_markers.contains(line)
    assert not rank_log.scan_tables(shipped).rule_markers.contains(line)


def test_importing_the_stages_reads_no_knowledge(tmp_path: Path) -> None:
    """Knowledge is loaded by a run and handed to the stages: a module that read it at import
    would fail here, with no rules folder to read."""
    env = {**os.environ, "TRIAGE_RULES_DIR": str(tmp_path / "no-rules-here")}
    code = (
        "import triage.parsers.rank_log, triage.parsers.nccl, triage.analysis, triage.classify, "
        "triage.pipeline, triage.report.view"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr


def test_a_team_rule_on_a_finding_kind_that_does_not_exist_is_reported(tmp_path: Path) -> None:
    # correlate never reports a `lagging_ranks` finding (it is `lagging_rank`): the rule could
    # never fire, so loading it says so instead of leaving it silent
    rule = f"""
- id: {RULE_ID}
  title: A rank behind the others
  match:
    finding: lagging_ranks
  concludes:
    symptom: {{S17: 0.5}}
  examples:
    match: [{{finding: lagging_ranks}}]
"""
    job = tmp_path / "job"
    job.mkdir()
    (job / "rank0.log").write_text(_log_of_size(0), encoding="utf-8")

    result = CliRunner().invoke(
        main, [str(job), "--rules", str(_team(tmp_path, rule)), "--format", "json"]
    )

    assert result.exit_code == 2
    message = " ".join(result.output.split())
    assert "team.yaml" in message and RULE_ID in message
    assert "'lagging_ranks'" in message and "lagging_rank," in message


# A team's rule asks where an exception was raised as the shipped ones do: the frames
# knowledge (rules/frames.yaml) answers, so a Megatron-LM clone's package is the library and
# the team's own entry script next to it is theirs.
def _raised_at(file: str) -> str:
    return f'  File "{file}", line 1, in f\n    g()\nRuntimeError: grad sync failed'


RAISED_RULE = f"""
- id: team-grad-sync-in-library
  title: The team's gradient sync fails inside the framework
  match:
    any: ['^RuntimeError: grad sync failed']
    raised_in: WHERE
  concludes:
    symptom: {{S18: 0.9}}
    root_cause: {{R25: 0.8}}
    fix: {{F1: 0.8}}
  examples:
    match: [{json.dumps(_raised_at("/opt/venv/lib/python3.11/site-packages/torch/x.py"))}]
    no_match: [{json.dumps(_raised_at("/workspace/train.py"))}]
"""


def _megatron_lm_raising_in(file: str) -> str:
    return (
        "Traceback (most recent call last):\n"
        '  File "/root/Megatron-LM/pretrain_gpt.py", line 278, in <module>\n'
        "    pretrain(\n"
        f'  File "/root/Megatron-LM/{file}", line 40, in finish_grad_sync\n'
        "    raise RuntimeError('grad sync failed')\n"
        "RuntimeError: grad sync failed\n"
    )


def test_a_team_rule_asks_the_frames_knowledge_where_an_exception_was_raised(
    tmp_path: Path,
) -> None:
    team = _team(tmp_path, RAISED_RULE.replace("WHERE", "library"))

    def fired(text: str) -> bool:
        result = CliRunner().invoke(
            main, ["explain", "--no-embed", "--rules", str(team), "--format", "json", text]
        )
        assert result.exit_code == 0, result.output
        return any(
            e["why"] == "team-grad-sync-in-library" for e in json.loads(result.output)["evidence"]
        )

    assert fired(_megatron_lm_raising_in("megatron/core/distributed/sync.py"))
    assert not fired(_megatron_lm_raising_in("team_sync.py"))


def test_a_team_rule_with_an_unknown_raised_in_is_reported(tmp_path: Path) -> None:
    team = _team(tmp_path, RAISED_RULE.replace("WHERE", "framework"))
    result = CliRunner().invoke(main, ["explain", "--rules", str(team), "KeyError: 'x'"])
    assert result.exit_code == 2
    message = " ".join(result.output.split())
    assert "raised_in must be one of ['library', 'user']" in message, message
