"""The fusion's weights and thresholds are data (`models/fusion.json`): validated at load, and
a bad file is a clear error naming the setting, never a silent default."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from triage import knowledge
from triage.knowledge import fusion_settings

PASTE = "ImportError: cannot import name 'get_dataloader' from 'colossalai.utils'"


def _models_with(tmp_path: Path, settings: object) -> Path:
    """A models folder like the shipped one but for its fusion settings."""
    models = tmp_path / "models"
    models.mkdir()
    for entry in knowledge.models_dir().iterdir():
        if entry.name != fusion_settings.SETTINGS_FILE:
            (models / entry.name).symlink_to(entry)
    (models / fusion_settings.SETTINGS_FILE).write_text(json.dumps(settings), encoding="utf-8")
    return models


def _shipped_document() -> dict:
    path = knowledge.models_dir() / fusion_settings.SETTINGS_FILE
    return json.loads(path.read_text(encoding="utf-8"))


def test_the_shipped_settings_load_and_each_says_why() -> None:
    doc = _shipped_document()
    settings = fusion_settings.parse(doc)
    assert 0 < settings.not_its_fix < 1 and settings.model_candidates >= 1
    assert all(entry["why"].strip() for entry in doc["settings"].values())


@pytest.mark.parametrize(
    ("name", "entry", "said"),
    [
        ("not_its_fix", {"value": 1.5, "why": "x"}, "'not_its_fix': 1.5 is not a number in [0, 1]"),
        ("open_ties", {"value": 0, "why": "x"}, "'open_ties': 0 is not a whole number >= 1"),
        ("rule_margin", {"value": 0.1}, "'rule_margin': must have exactly 'value' and 'why'"),
        ("rule_margn", {"value": 0.1, "why": "x"}, "setting 'rule_margn': unknown setting"),
    ],
)  # fmt: skip
def test_a_bad_setting_is_a_clear_error_naming_it(
    tmp_path: Path, name: str, entry: object, said: str
) -> None:
    doc = _shipped_document()
    doc["settings"][name] = entry
    with pytest.raises(fusion_settings.FusionSettingsError) as exc:
        fusion_settings.parse(doc, "fusion.json")
    assert said in str(exc.value)
    models = _models_with(tmp_path, doc)
    out = subprocess.run(
        [sys.executable, "-m", "triage", "explain", PASTE],
        capture_output=True,
        text=True,
        env={**os.environ, knowledge.MODELS_ENV: str(models)},
        timeout=120,
    )
    assert out.returncode == 1
    assert "knowledge base cannot be used" in out.stderr and said in out.stderr


def test_a_missing_setting_is_named(tmp_path: Path) -> None:
    doc = _shipped_document()
    del doc["settings"]["yield_weight"]
    with pytest.raises(fusion_settings.FusionSettingsError, match="'yield_weight': missing"):
        fusion_settings.load(_models_with(tmp_path, doc) / fusion_settings.SETTINGS_FILE)


def test_the_knowledge_validator_names_a_bad_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`knowledge.problems()` (what the tests and `triage rules` validate) covers the fusion's
    settings too, not only the first explain that loads them."""
    doc = _shipped_document()
    doc["settings"]["rule_margin"] = {"value": 2, "why": "x"}
    monkeypatch.setenv(knowledge.MODELS_ENV, str(_models_with(tmp_path, doc)))
    said = [f"{p.item}: {p.message}" for p in knowledge.problems()]
    assert "setting 'rule_margin': 2 is not a number in [0, 1]" in said
