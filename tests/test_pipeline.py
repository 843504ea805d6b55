"""The whole pipeline on the real bundles: every input listed with its kind, rank and host."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from triage.model import SourceKind
from triage.pipeline import Options, diagnose

SAMPLES = Path(__file__).resolve().parents[1] / "corpus_samples"
SCENARIOS = sorted(p.parent for p in SAMPLES.glob("*/expected.json"))
RULES_ONLY = Options(use_embeddings=False)
_LOG_DIR = re.compile(r"attempt_\d+/(?P<local>\d+)/(?:stdout|stderr)\.log$")


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_every_per_rank_input_is_attributed_to_a_rank_of_the_job(scenario: Path) -> None:
    expected = json.loads((scenario / "expected.json").read_text(encoding="utf-8"))
    diagnosis = diagnose([str(scenario / "bundle")], RULES_ONLY)
    assert diagnosis.inputs, "nothing was read"
    for item in diagnosis.inputs:
        # (a py-spy dump may be of the launcher itself, which is no rank)
        per_rank = item.kind is SourceKind.FLIGHT_RECORDER or _LOG_DIR.search(item.path)
        if per_rank and not item.warnings and item.events:
            assert item.rank is not None, item.path
        if item.rank is not None:
            assert 0 <= item.rank < expected["world_size"], item.path


def test_second_nodes_log_dir_files_carry_global_ranks_not_local_ones() -> None:
    """torchrun's --log-dir on node02 says 0 and 1; the job's ranks there are 2 and 3."""
    diagnosis = diagnose([str(SAMPLES / "import_error_on_one_node" / "bundle")], RULES_ONLY)
    by_node: dict[str, set[int]] = {}
    for item in diagnosis.inputs:
        m = _LOG_DIR.search(item.path)
        if m and item.rank is not None:
            by_node.setdefault(item.host or "?", set()).add(item.rank)
    assert by_node == {"node01": {0, 1}, "node02": {2, 3}}
