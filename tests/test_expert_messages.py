"""Messages where an expert reading only the paste beat triage, because the message's mechanism
decides and not its words (the issue on root cause and fix): each gets its symptom and root
cause through `triage explain`."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from triage.cli import main

SAVE_CUT = """Traceback (most recent call last):
  File "train.py", line 120, in <module>
    trainer.train()
  File "/opt/py/site-packages/transformers/trainer.py", line 1859, in train
    return inner_training_loop(
  File "/opt/py/site-packages/transformers/trainer.py", line 2732, in _maybe_log_save_evaluate
    self._save_checkpoint(model, trial, metrics=metrics)
  File "/opt/py/site-packages/transformers/trainer.py", line 2811, in _save_checkpoint
    self.save_model(output_dir, _internal_call=True)"""

CASES = [
    # a resume with another parallel layout than the checkpoint's, not a config error
    (
        "AssertionError: tensor_model_parallel_size value from checkpoint (1) is not equal to "
        "the input argument value (2).",
        "S29",
        "R20",
    ),
    # an extension that was never built, not a version mismatch
    ("ModuleNotFoundError: No module named 'colossalai._C.cpu_adam_x86'", "S02", "R03"),
    (
        "make: *** [Makefile:9: helpers] Error 1\n"
        "Exception: Making C++ dataset helpers module failed, exiting.",
        "S01",
        "R03",
    ),
    # the loss itself went NaN: numerics, not a hang
    ("Loss is nan, stopping training", "S19", "R21"),
    # DDP names the parameter that got no gradient (TORCH_DISTRIBUTED_DEBUG=DETAIL)
    ("Parameter model.head.weight did not get gradient in backwards pass.", "S25", "R14"),
]


@pytest.mark.parametrize(("text", "symptom", "cause"), CASES, ids=[c[1] + c[2] for c in CASES])
def test_the_mechanism_decides_the_symptom_and_the_root_cause(
    text: str, symptom: str, cause: str
) -> None:
    result = CliRunner().invoke(main, ["explain", "--no-embed", "--format", "json", text])
    assert result.exit_code == 0, result.output
    d = json.loads(result.output)
    assert d["symptoms"][0]["id"] == symptom, d["summary"]
    assert d["root_causes"][0]["id"] == cause, d["summary"]


def test_a_traceback_cut_inside_save_checkpoint_is_a_checkpoint_save() -> None:
    result = CliRunner().invoke(main, ["explain", "--no-embed", "--format", "json", SAVE_CUT])
    assert result.exit_code == 0, result.output
    d = json.loads(result.output)
    assert d["symptoms"][0]["id"] == "S28" and d["stage"]["id"] == "ST5"
