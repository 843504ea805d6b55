"""The start-up cache: what it gives back is what deriving again gives; a changed, broken or
missing cache costs time only."""

from __future__ import annotations

import hashlib
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
    files = sorted(cache_dir.glob("startup-v*.json"))
    cache = cache_dir / diskcache.section_file("literals")
    assert cache in files and len(files) >= 2  # the literals and the YAML documents
    before = [f.stat() for f in files]
    diskcache.clear_memory()  # the next run: loaded from the files
    assert _shipped() == first
    # every pattern's literals and every document came from the files: a value derived again
    # would be added to the cache, and saving would replace its file
    diskcache.save()
    after = [f.stat() for f in files]
    assert [(a.st_ino, a.st_mtime_ns) for a in after] == [(b.st_ino, b.st_mtime_ns) for b in before]
    assert json.loads(cache.read_text())["values"]  # the file does hold them


def test_a_broken_or_foreign_cache_file_is_ignored(cache_dir: Path) -> None:
    expected = _shipped()
    files = sorted(cache_dir.glob("startup-v*.json"))
    assert files
    for content in ("{not json", json.dumps({"version": 99, "values": {}}), "[1, 2]"):
        for file in files:
            file.write_text(content)
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
    dated = "- id: a\n  when: 2026-01-01\n  1: int key\n"
    plain = "- id: b\n  title: kept\n"
    for name, text in (("team.yaml", dated), ("plain.yaml", plain)):
        (tmp_path / name).write_text(text)
    body = documents.read(tmp_path / "team.yaml", frozenset({"rules"}), Problems()).body
    assert 1 in body[0]
    documents.read(tmp_path / "plain.yaml", frozenset({"rules"}), Problems())
    kept = diskcache.section("yaml-v2")
    # the plain document is kept, the one with a date (JSON cannot give it back) is not
    assert hashlib.sha256(plain.encode()).hexdigest() in kept
    assert hashlib.sha256(dated.encode()).hexdigest() not in kept


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
    literals_file = cache_dir / diskcache.section_file("literals")
    saved = json.loads(literals_file.read_text(encoding="utf-8"))["values"]
    assert saved == {f"4\0{pattern}": list(literals.required_literals(pattern) or ())}


def test_a_run_that_asks_for_literals_alone_reads_no_other_section(cache_dir: Path) -> None:
    """Each kind of value has its file: the literals a run's scan tables need are read
    without the YAML documents (~1 MB) only a knowledge build needs."""
    _shipped()
    diskcache.save()
    documents_file = cache_dir / diskcache.section_file("yaml-v2")
    assert documents_file.is_file()
    documents_file.write_text("{not json")  # were it read, its documents would be gone
    diskcache.clear_memory()
    assert literals.required_literals(r"NCCL WARN (?P<what>\w+) timed out")
    assert set(diskcache._sections) == {"literals"}
