"""A rule that refines a more general one (`overrides`) speaks alone where both match, and a
callable the script handed to a library is the script's to fix."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.cli_runs import assert_top, explained
from triage import knowledge
from triage.cli import main

_TRANSFORM = (
    "Traceback (most recent call last):\n"
    '  File "/opt/conda/lib/python3.8/site-packages/lhotse/dataset/speech_recognition.py", '
    "line 109, in __getitem__\n"
    "    cuts = tnfm(cuts)\n"
    "TypeError: __call__() missing 1 required positional argument: 'sampling_rate'"
)

_PROVIDER = (
    "[rank4]: Traceback (most recent call last):\n"
    '[rank4]:   File "/work/megatron-rl/examples/rl/benchmark_refit.py", line 386, in '
    "benchmark_refit_non_collocated\n"
    "[rank4]:     my_model = get_training_model(\n"
    '[rank4]:   File "/work/megatron-rl/megatron/training/training.py", line 1231, in build_model\n'
    "[rank4]:     model = model_provider_func(\n"
    "[rank4]: TypeError: benchmark_refit_non_collocated.<locals>.<lambda>() got an unexpected "
    "keyword argument 'config'"
)


def _rules_that_match(text: str) -> str:
    result = CliRunner().invoke(main, ["rules", "check", text])
    assert result.exit_code == 0, result.output
    return result.output


def test_a_transform_a_data_pipeline_calls_is_not_also_a_version_mismatch() -> None:
    said = _rules_that_match(_TRANSFORM)
    assert "data-transform-signature" in said
    assert "signature-changed" not in said


def test_a_lambda_megatron_calls_with_another_argument_is_the_scripts_to_fix() -> None:
    # Megatron's build_model calls the model provider with `config=`; the script's lambda
    # does not take it (a real Megatron-RL benchmark's failure)
    said = _rules_that_match(_PROVIDER)
    assert "user-callback-signature" in said
    d = explained(_PROVIDER, "--no-embed")
    assert_top(d, "root_causes", "R26")
    assert d["fix_patterns"][0]["id"] == "F6"
    assert "benchmark_refit_non_collocated.<locals>.<lambda>" in d["fix_patterns"][0]["actions"][0]


def test_a_closure_the_script_calls_itself_is_not_a_library_callback() -> None:
    own = (
        "Traceback (most recent call last):\n"
        '  File "/home/me/train.py", line 40, in main\n'
        "    step(batch, model)\n"
        "TypeError: main.<locals>.step() takes 1 positional argument but 2 were given"
    )
    assert "user-callback-signature" not in _rules_that_match(own)


def test_a_team_rule_that_overrides_an_unknown_rule_is_refused(tmp_path: Path) -> None:
    (tmp_path / "mine.yaml").write_text(
        "- id: team-refines-nothing\n"
        "  title: x\n"
        "  overrides: [no-such-rule]\n"
        "  match: {any: ['team marker line']}\n"
        "  concludes: {symptom: {S18: 0.5}}\n"
        "  examples: {match: ['team marker line'], no_match: ['other']}\n",
        encoding="utf-8",
    )
    with pytest.raises(knowledge.RuleError) as err:
        knowledge.load([tmp_path])
    assert any("overrides unknown rule 'no-such-rule'" in p.message for p in err.value.problems)
