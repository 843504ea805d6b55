"""Where the exception happened decides: the frames of the whole traceback (a cut one too, a
faulthandler dump, a pasted py-spy stack) place a failure in its stage (`rules/places.yaml`)."""

from __future__ import annotations

from tests.cli_runs import explained
from triage.knowledge import places

# faulthandler's format (`line N in f`, most recent call first), the paste cut before any
# exception line: a rank that waited inside DeepSpeed's checkpoint-tag all-reduce
SAVE_TAG_WAIT = """\
  File "/opt/py/site-packages/deepspeed/runtime/engine.py", line 3021 in _checkpoint_tag_validation
  File "/opt/py/site-packages/deepspeed/runtime/engine.py", line 3050 in save_checkpoint
  File "/opt/py/site-packages/transformers/trainer.py", line 2389 in _save_checkpoint
  File "/opt/py/site-packages/transformers/trainer.py", line 2302 in _maybe_log_save_evaluate"""

# the last frame is torch's writer, not a save function: the outer frames place it
SAVE_DEEP_CUT = """Traceback (most recent call last):
  File "/home/u/run_clm.py", line 88, in <module>
    trainer.train()
  File "/opt/py/site-packages/transformers/trainer.py", line 2745, in _save_checkpoint
    self._save_optimizer_and_scheduler(output_dir)
  File "/opt/py/site-packages/torch/serialization.py", line 618, in save
    with _open_zipfile_writer(f) as opened_zipfile:
  File "/opt/py/site-packages/torch/serialization.py", line 492, in __init__
    super().__init__(torch._C.PyTorchFileWriter(self.name))"""

# a pasted py-spy stack cut mid-path: the main thread waits in backward
BACKWARD_WAIT = 'Thread 2211 (idle): "MainThread"\n    backward (torch/autograd/__ini'

# the same save frames, but the exception was raised by the user's call: not the tag wait
SAVE_RAISED = """Traceback (most recent call last):
  File "/home/u/train.py", line 41, in <module>
    engine.save_checkpoint(args.out)
  File "/opt/py/site-packages/deepspeed/runtime/engine.py", line 3050, in save_checkpoint
    self._checkpoint_tag_validation(tag)
  File "/opt/py/site-packages/deepspeed/runtime/engine.py", line 3021, in _checkpoint_tag_validation
    bhash = torch.ByteTensor([s_hash.digest()]).flatten().to(self.device)
TypeError: can only concatenate str (not "int") to str"""


def test_a_stack_cut_inside_deepspeeds_checkpoint_tag_check_is_a_hang_of_the_save() -> None:
    d = explained(SAVE_TAG_WAIT, "--no-embed")
    assert d["stage"]["id"] == "ST5"
    assert d["root_causes"][0]["id"] == "R08", d["summary"]
    fix = d["fix_patterns"][0]
    assert fix["id"] == "F6" and "every rank" in fix["actions"][0]


def test_a_traceback_cut_below_save_checkpoint_is_a_checkpoint_save() -> None:
    d = explained(SAVE_DEEP_CUT, "--no-embed")
    assert d["symptoms"][0]["id"] == "S28", d["summary"]
    assert d["stage"]["id"] == "ST5"


def test_a_pasted_stack_waiting_in_backward_points_at_uneven_batches() -> None:
    d = explained(BACKWARD_WAIT, "--no-embed")
    assert d["root_causes"][0]["id"] == "R09", d["summary"]
    assert "drop_last=True" in d["fix_patterns"][0]["actions"][0]


def test_a_stack_of_no_known_rank_is_not_said_to_be_this_ranks() -> None:
    action = explained(BACKWARD_WAIT, "--no-embed")["fix_patterns"][0]["actions"][0]
    assert action.startswith("If one rank ran an extra or missing step"), action
    assert "rank {rank}" not in action.lower() and "rank None" not in action


def test_an_exception_raised_inside_the_save_is_not_read_as_a_wait() -> None:
    d = explained(SAVE_RAISED, "--no-embed")
    assert d["root_causes"][0]["id"] != "R08", d["summary"]
    assert d["symptoms"][0]["id"] == "S28" and d["stage"]["id"] == "ST5", d["summary"]


def test_a_place_whose_example_does_not_match_is_refused() -> None:
    problems: list[tuple[str, str]] = []
    body = {
        "places": [
            {
                "id": "checkpoint-save",
                "title": "t",
                "sources": ["s"],
                "frames": [{"function": "save_checkpoint"}],
                "concludes": {"symptom": {"S28": 0.6}, "stage": {"ST5": 0.8}},
                "examples": {
                    "match": ["x/trainer.py:_load_from_checkpoint"],
                    "no_match": ["x/engine.py:save_checkpoint"],
                },
            },
            {
                "id": "no-stage",
                "title": "t",
                "sources": ["s"],
                "frames": [{"file": "a"}],
                "concludes": {"symptom": {"S99": 0.5}},
                "examples": {"match": ["a:f"]},
            },
        ]
    }
    places.build(body, lambda item, msg: problems.append((item, msg)), False)
    said = " | ".join(f"{i}: {m}" for i, m in problems)
    assert "example does not match" in said and "no_match example matches" in said
    assert "S99 is not a taxonomy id" in said and "a place says which stage" in said


def test_an_action_given_as_a_list_is_refused_not_printed_as_one() -> None:
    """An action written as a YAML list used to reach the report as "['check ...', '...']"."""
    problems: list[tuple[str, str]] = []
    body = {
        "places": [
            {
                "id": "checkpoint-save",
                "title": "t",
                "sources": ["s"],
                "frames": [{"function": "save_checkpoint"}],
                "concludes": {"symptom": {"S28": 0.6}, "stage": {"ST5": 0.8}},
                "actions": {"F5": ["free disk space", "then resume"]},
                "examples": {"match": ["x/engine.py:save_checkpoint"]},
            }
        ]
    }
    built = places.build(body, lambda item, msg: problems.append((item, msg)), False)
    said = " | ".join(f"{i}: {m}" for i, m in problems)
    assert "actions.F5: must be one sentence (a string), not list" in said
    assert not any("[" in a for p in built.places for a in p.actions.values())
