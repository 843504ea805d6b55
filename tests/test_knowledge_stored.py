"""The built knowledge kept on disk (`triage.knowledge.stored`): a run after the first loads
it instead of building it, and never gets knowledge older than its files, or from a file
somebody else could have written, or from a damaged one."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import triage
from triage import knowledge
from triage.knowledge import rules_dir

ROOT = str(Path(triage.__file__).resolve().parents[1])
OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
    "GPU 0 has a total capacity of 79.15 GiB of which 1.2 GiB is free."
)
OLD_ADVICE = "Stop replicating the whole model on every GPU"
NEW_ADVICE = "Stop copying the whole model onto each GPU"


@pytest.fixture
def rules_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the shipped rules folder, read instead of it."""
    folder = tmp_path / "rules"
    shutil.copytree(rules_dir(), folder)
    monkeypatch.setenv(knowledge.RULES_ENV, str(folder))
    return folder


def _edit_keeping_mtime(path: Path, old: str, new: str) -> None:
    """Change a file's text but not its modification time: only its content tells."""
    st = path.stat()
    text = path.read_text(encoding="utf-8")
    assert old in text
    path.write_text(text.replace(old, new), encoding="utf-8")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def _next_run() -> None:
    """What a new process starts with: no knowledge in memory."""
    knowledge._load_cached.cache_clear()


def _advice(kb: knowledge.Knowledge) -> str:
    (rule,) = [r for r in kb.rules if r.id == "cuda-oom"]
    return repr(rule.actions)


def _told(rule: knowledge.Rule) -> tuple[Any, ...]:
    """What a rule says (compiled patterns compare by identity: by their text here)."""
    patterns = [(p.pattern, p.flags) for p in (*rule.any, *rule.all, *rule.not_)]
    return (rule.id, rule.title, rule.actions, rule.symptom, rule.root_cause, patterns)


def _kept(cache_dir: Path) -> list[Path]:
    return sorted(cache_dir.glob("knowledge-*/*.pickle"))


def _building_counted(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    built: list[int] = []
    real = knowledge._build

    def counted(*args: Any, **kwargs: Any) -> knowledge.Knowledge:
        built.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(knowledge, "_build", counted)
    return built


def test_the_next_run_loads_the_same_knowledge_without_building_it(
    cache_dir: Path, rules_copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = knowledge.load()
    assert len(_kept(cache_dir)) == 1
    _next_run()
    built = _building_counted(monkeypatch)
    again = knowledge.load()
    assert built == []
    assert again is not first
    assert [_told(r) for r in again.rules] == [_told(r) for r in first.rules]
    assert again.playbook.causes == first.playbook.causes
    assert again.folders == first.folders


def test_an_edited_rule_file_is_seen_by_the_next_run(cache_dir: Path, rules_copy: Path) -> None:
    assert OLD_ADVICE in _advice(knowledge.load())
    _next_run()
    _edit_keeping_mtime(rules_copy / "memory.yaml", OLD_ADVICE, NEW_ADVICE)
    advice = _advice(knowledge.load())
    assert NEW_ADVICE in advice and OLD_ADVICE not in advice
    assert len(_kept(cache_dir)) == 2  # each version of the folder has its own file


def test_a_new_triage_version_builds_its_own(
    cache_dir: Path, rules_copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    knowledge.load()
    _next_run()
    monkeypatch.setattr(triage, "__version__", triage.__version__ + ".post1")
    built = _building_counted(monkeypatch)
    knowledge.load()
    assert built == [1]


def test_a_file_others_can_write_is_not_read(
    cache_dir: Path, rules_copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    knowledge.load()
    (kept,) = _kept(cache_dir)
    kept.chmod(0o666)  # unpickling runs code: only this user's own file is trusted
    _next_run()
    built = _building_counted(monkeypatch)
    assert OLD_ADVICE in _advice(knowledge.load())
    assert built == [1]


def test_a_damaged_file_is_built_again_and_rewritten(
    cache_dir: Path, rules_copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    knowledge.load()
    (kept,) = _kept(cache_dir)
    blob = bytearray(kept.read_bytes())
    blob[len(blob) // 2] ^= 0xFF
    kept.write_bytes(bytes(blob))
    _next_run()
    built = _building_counted(monkeypatch)
    assert OLD_ADVICE in _advice(knowledge.load())
    assert built == [1]
    assert kept.read_bytes() != bytes(blob)


def test_a_cache_folder_that_cannot_be_written_still_gives_the_knowledge(
    tmp_path: Path, rules_copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("TRIAGE_CACHE_DIR", str(blocker / "cache"))
    _next_run()
    assert OLD_ADVICE in _advice(knowledge.load())
    _next_run()
    assert OLD_ADVICE in _advice(knowledge.load())


def _explain_oom(rules: Path, cache: Path) -> dict[str, Any]:
    env = {
        **os.environ,
        "PYTHONPATH": ROOT,
        knowledge.RULES_ENV: str(rules),
        "TRIAGE_CACHE_DIR": str(cache),
        "HF_HUB_OFFLINE": "1",
    }
    env.pop("TRIAGE_NO_CACHE", None)
    done = subprocess.run(
        [sys.executable, "-m", "triage", "explain", OOM, "--format", "json", "--no-embed"],
        env=env,
        capture_output=True,
        text=True,
        cwd=rules.parent,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_triage_explain_gives_the_edited_advice_in_the_run_after_the_edit(
    tmp_path: Path, rules_copy: Path
) -> None:
    cache = tmp_path / "cache"

    def actions(d: dict[str, Any]) -> str:
        return " ".join(a for f in d["fix_patterns"] for a in f["actions"])

    assert OLD_ADVICE in actions(_explain_oom(rules_copy, cache))
    assert _kept(cache)  # the first run kept what it built
    _edit_keeping_mtime(rules_copy / "memory.yaml", OLD_ADVICE, NEW_ADVICE)
    told = actions(_explain_oom(rules_copy, cache))
    assert NEW_ADVICE in told and OLD_ADVICE not in told
