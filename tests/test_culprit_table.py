"""The culprit vote reads its signals, weights and reasons from `rules/culprit.yaml`: a team
that edits the table sees the report follow it, and a broken table is named item by item."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from triage import knowledge
from triage.cli import main

SAMPLES = Path(__file__).resolve().parent.parent / "corpus_samples"
NEVER_JOINS = SAMPLES / "second_node_never_joins" / "bundle"


def _edited_rules(tmp_path: Path, edit: dict[str, object]) -> Path:
    """A copy of the shipped rules folder whose culprit table has `edit` applied."""
    rules = tmp_path / "rules"
    shutil.copytree(knowledge.rules_dir(), rules)
    table = yaml.safe_load((rules / "culprit.yaml").read_text(encoding="utf-8"))
    for key, value in edit.items():
        where = table
        *path, last = key.split(".")
        for part in path:
            where = where[part]
        if value is None:
            del where[last]
        else:
            where[last] = value
    (rules / "culprit.yaml").write_text(yaml.safe_dump(table), encoding="utf-8")
    return rules


def _first_failure(rules: Path | None, monkeypatch: pytest.MonkeyPatch) -> dict:
    if rules is not None:
        monkeypatch.setenv(knowledge.RULES_ENV, str(rules))
    result = CliRunner().invoke(main, [str(NEVER_JOINS), "--format", "json", "--no-embed"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    return next(f for f in out["findings"] if f["kind"] == "first_failure")


def test_the_reason_a_report_gives_for_the_culprit_is_the_tables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shipped = _first_failure(None, monkeypatch)
    assert "its node never joined the rendezvous" in shipped["summary"]
    said = "its host was never seen by the launcher"
    rules = _edited_rules(tmp_path, {"signals.never_joined.reason": said})
    edited = _first_failure(rules, monkeypatch)
    assert said in edited["summary"]
    assert "its node never joined the rendezvous" not in edited["summary"]


def test_a_weight_in_the_table_decides_who_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = json.loads((NEVER_JOINS.parent / "expected.json").read_text(encoding="utf-8"))
    assert sorted(_first_failure(None, monkeypatch)["ranks"]) == expected["culprit_ranks"]
    # without the rendezvous signal the ranks that never started are no longer the culprits
    rules = _edited_rules(tmp_path, {"signals.never_joined.weight": 0.0})
    assert sorted(_first_failure(rules, monkeypatch)["ranks"]) != expected["culprit_ranks"]


def test_every_problem_of_a_broken_table_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rules = _edited_rules(
        tmp_path,
        {
            "co_culprit": 1.5,
            "signals.never_joined": None,
            "signals.misread_signal": {"weight": 1.0, "reason": "x", "why": "y"},
            "signals.peer_host.reason": "{n} messages name {rank}",
            "signals.fr_missing_dump.group": "no_such_group",
        },
    )
    monkeypatch.setenv(knowledge.RULES_ENV, str(rules))
    with pytest.raises(knowledge.KnowledgeError) as err:
        knowledge.load()
    found = {(Path(p.file).name, p.item): p.message for p in err.value.problems}
    assert "between 0.0 and 1.0" in found[("culprit.yaml", "co_culprit")]
    assert "does not weigh it" in found[("culprit.yaml", "signal 'never_joined'")]
    assert "unknown signal" in found[("culprit.yaml", "signal 'misread_signal'")]
    assert "['rank']" in found[("culprit.yaml", "signal 'peer_host'")]
    assert "no_such_group" in found[("culprit.yaml", "signal 'fr_missing_dump'")]
