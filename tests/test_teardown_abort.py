"""A peer's teardown abort is not where a job started failing (real torchrun runs)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from triage.cli import main

RUNS = Path(__file__).parent / "fixtures" / "fleet_runs"


@pytest.mark.parametrize("run", ["ecc_rank1_peer_aborts_rank2", "ecc_rank1_peer_aborts_rank0"])
def test_terminate_without_exception_after_peer_closed_is_cascade(run: str) -> None:
    result = CliRunner().invoke(main, [str(RUNS / run), "--no-embed", "--format", "json"])
    assert result.exit_code != 2, result.output
    diagnosis = json.loads(result.output)
    assert diagnosis["culprit_ranks"] == [1]
    assert diagnosis["first_failure"]["host"] == "gpu-node02"
    assert "ECC" in diagnosis["first_failure"]["text"]
    assert diagnosis["root_causes"][0]["id"] == "R28"
