"""YAML through the disk cache: a warm read gives exactly what PyYAML gives, without
parsing; what JSON cannot keep (a date) is parsed every time."""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from triage import diskcache, yaml_docs

TEXT = """\
kind: exits
codes:
  -9: {meaning: SIGKILL, role: self_inflicted}
  2: {meaning: error}
  true: yes-key
  null: none-key
"\\0pairs": a key like the cache's own
---
- {id: a, weights: {S01: 0.5}, pattern: 'x\\d+'}
"""


def _next_run() -> None:
    diskcache.save()
    diskcache.clear_memory()


def _no_parse(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("parsed although the documents were in the cache")

    monkeypatch.setattr(yaml, "load_all", refuse)
    monkeypatch.setattr(yaml, "load", refuse)


def test_a_warm_read_gives_the_same_documents_with_their_int_keys(
    cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = list(yaml.load_all(TEXT, Loader=yaml.SafeLoader))
    assert yaml_docs.documents(TEXT) == expected
    _next_run()
    _no_parse(monkeypatch)
    warm = yaml_docs.documents(TEXT)
    assert warm == expected
    codes = warm[0]["codes"]
    assert list(codes) == [-9, 2, True, None] and type(list(codes)[1]) is int
    assert warm[0]["\0pairs"] == "a key like the cache's own"


def test_one_document_reads_as_yaml_load(cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    one = "secrets: [{id: token, pattern: 'ghp_\\w+'}]\nhosts: [{id: h, kind: host}]\n"
    expected = yaml.load(one, Loader=yaml.SafeLoader)
    assert yaml_docs.document(one) == expected
    _next_run()
    _no_parse(monkeypatch)
    assert yaml_docs.document(one) == expected


def test_a_date_is_parsed_every_time(cache_dir: Path) -> None:
    text = "released: 2024-05-01\n"
    assert yaml_docs.document(text) == {"released": datetime.date(2024, 5, 1)}
    _next_run()
    assert yaml_docs.document(text) == {"released": datetime.date(2024, 5, 1)}


def test_text_that_is_not_yaml_raises_its_error(cache_dir: Path) -> None:
    with pytest.raises(yaml_docs.YamlError):
        yaml_docs.documents("a: [unclosed\n")


def test_a_second_run_with_a_warm_cache_folder_never_imports_pyyaml(tmp_path: Path) -> None:
    # The redaction patterns are read after start-up's own save: a run that did not keep
    # them parsed redact.yaml, PyYAML's import included, on every run.
    probe = (
        "import sys\n"
        "from triage.cli import main\n"
        "from click.testing import CliRunner\n"
        "r = CliRunner().invoke(main, ['explain', '--no-embed', '-q', "
        "'torch.OutOfMemoryError: CUDA out of memory.'])\n"
        "assert r.exit_code == 0, r.output\n"
        "print('yaml' in sys.modules)\n"
    )
    env = {**os.environ, "TRIAGE_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("TRIAGE_NO_CACHE", None)
    runs = [
        subprocess.run(
            [sys.executable, "-c", probe],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
            env=env,
        ).stdout.strip()
        for _ in range(2)
    ]
    assert runs == ["True", "False"], runs
