"""The start-up cache: what it gives back is what deriving again gives; a changed, broken or
missing cache costs time only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from triage import diskcache, literals
from triage.knowledge import _build, _folder_signature, documents, rules_dir
from triage.knowledge.problems import Problems


def _shipped() -> object:
    knowledge = _build((_folder_signature(rules_dir()),), lazy=True)
    return [(r.id, r.file, [p.pattern for p in r.any], r.keywords) for r in knowledge.rules]


def test_a_run_from_the_cache_builds_the_same_knowledge_and_derives_nothing(
    cache_dir: Path,
) -> None:
    first = _shipped()
    cache = cache_dir / "knowledge-v1.json"
    assert cache.is_file()
    before = cache.stat()
    diskcache.clear_memory()  # the next run: loaded from the file
    assert _shipped() == first
    # every pattern's literals came from the file: a literal derived again would be added to
    # the cache, and saving would replace the file
    diskcache.save()
    after = cache.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert json.loads(cache.read_text())["literals"]  # the file does hold them


def test_a_broken_or_foreign_cache_file_is_ignored(cache_dir: Path) -> None:
    expected = _shipped()
    for content in ("{not json", json.dumps({"version": 99, "yaml": {}}), "[1, 2]"):
        (cache_dir / "knowledge-v1.json").write_text(content)
        diskcache.clear_memory()
        assert _shipped() == expected


def test_a_changed_file_is_read_again_not_served_from_the_cache(
    cache_dir: Path, tmp_path: Path
) -> None:
    path = tmp_path / "team.yaml"
    path.write_text("- id: a\n  x: 1\n")
    assert documents.read(path, frozenset({"rules"}), Problems()).body == [{"id": "a", "x": 1}]
    diskcache.save()
    diskcache.clear_memory()
    path.write_text("- id: a\n  x: 2\n")
    assert documents.read(path, frozenset({"rules"}), Problems()).body == [{"id": "a", "x": 2}]


def test_cached_documents_are_fresh_objects_each_read(cache_dir: Path, tmp_path: Path) -> None:
    path = tmp_path / "team.yaml"
    path.write_text("- id: a\n  x: [1]\n")
    documents.read(path, frozenset({"rules"}), Problems())
    diskcache.save()
    diskcache.clear_memory()
    first = documents.read(path, frozenset({"rules"}), Problems()).body
    first[0]["x"].append(5)  # a caller changing what it got changes no later read
    assert documents.read(path, frozenset({"rules"}), Problems()).body == [{"id": "a", "x": [1]}]


def test_what_json_cannot_give_back_is_not_kept(cache_dir: Path, tmp_path: Path) -> None:
    path = tmp_path / "team.yaml"
    path.write_text("- id: a\n  when: 2026-01-01\n  1: int key\n")
    body = documents.read(path, frozenset({"rules"}), Problems()).body
    assert 1 in body[0]
    assert diskcache.section("yaml") == {}


def test_literals_from_the_cache_equal_deriving_them(cache_dir: Path) -> None:
    patterns = [r"(?i)address already in use", r"foo|bar[0-9]+baz", r"plain text here", r"a.b"]
    fresh = [literals._required_literals(p) for p in patterns]
    assert [literals.required_literals(p) for p in patterns] == fresh
    diskcache.save()
    diskcache.clear_memory()
    assert [literals.required_literals(p) for p in patterns] == fresh


def test_turned_off_nothing_is_written(cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRIAGE_NO_CACHE", "1")
    diskcache.clear_memory()
    _shipped()
    assert not cache_dir.exists()


def test_what_a_run_derives_after_the_knowledge_load_is_kept_for_the_next_run(
    cache_dir: Path,
) -> None:
    """The rule screen reads the literals of rules' `not` and `all` patterns after the load
    has saved its cache: the run's exit writes them, or every run derives them again."""
    pattern = r"NCCL WARN (?P<what>\w+) timed out"
    derive = f"from triage import literals; literals.required_literals({pattern!r})"
    env = {**os.environ, "TRIAGE_CACHE_DIR": str(cache_dir)}
    subprocess.run([sys.executable, "-c", derive], env=env, check=True)
    saved = json.loads((cache_dir / "knowledge-v1.json").read_text(encoding="utf-8"))
    assert saved["literals"] == {f"4\0{pattern}": list(literals.required_literals(pattern) or ())}
