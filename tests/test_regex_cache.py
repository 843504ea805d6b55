"""Compiled regexes kept on disk: a pattern loaded from the cache finds what a fresh compile
finds, and a damaged, foreign or missing cache costs a compile, never a wrong match."""

from __future__ import annotations

import marshal
import pickle
import re
from pathlib import Path
from typing import Any

import pytest
import regex

from triage import diskcache, regex_cache
from triage.knowledge.rules import FLAGS

# named groups, caseless text, a lookbehind, alternation, classes: what rule patterns hold
PATTERNS = [
    (r"CUDA out of memory\. Tried to allocate (?P<size>[\d.]+ [KMG]iB)", FLAGS),
    (r"(?i)watchdog caught collective operation timeout", FLAGS),
    (r"(?<=rank )(?P<rank>\d+)\b|NCCL (?:WARN|INFO) \w+", regex.I),
    (r"^\s*File \"(?P<file>[^\"]+)\", line (?P<line>\d+)", regex.M),
]
TEXT = (
    "[rank 3] ok\nTorch: CUDA out of memory. Tried to allocate 2.50 GiB (GPU 0)\n"
    "[Rank 7] WATCHDOG caught collective operation timeout: WorkNCCL(SeqNum=9)\n"
    '  File "/x/train.py", line 42, in step\nnccl warn Net/IB : retry\n'
)


def _found(compiled: list[regex.Pattern[str]]) -> list[list[tuple[int, int, dict[str, Any]]]]:
    return [[(m.start(), m.end(), m.groupdict()) for m in p.finditer(TEXT)] for p in compiled]


def _compile_all() -> list[regex.Pattern[str]]:
    return [regex_cache.compile(p, f) for p, f in PATTERNS]


def _no_parser(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("parsed although a verified copy was on disk")

    monkeypatch.setattr(regex, "compile", refuse)


def _next_run() -> None:
    regex_cache.save()
    regex_cache.clear_memory()


def test_a_second_run_loads_the_patterns_and_finds_the_same_matches(
    cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fresh = [regex.compile(p, f) for p, f in PATTERNS]
    expected = _found(fresh)
    assert _found(_compile_all()) == expected
    _next_run()
    assert len(list(cache_dir.glob("regex-*.bin"))) == 1
    _no_parser(monkeypatch)
    loaded = _compile_all()
    assert _found(loaded) == expected
    assert [p.groupindex for p in loaded] == [p.groupindex for p in fresh]
    assert expected[0][0][2] == {"size": "2.50 GiB"} and len(expected[1]) == 1


def test_a_damaged_cache_is_compiled_again_and_rewritten(cache_dir: Path) -> None:
    expected = _found(_compile_all())
    _next_run()
    (path,) = cache_dir.glob("regex-*.bin")
    blob = bytearray(path.read_bytes())
    blob[len(blob) // 2] ^= 0xFF
    path.write_bytes(bytes(blob))
    assert _found(_compile_all()) == expected
    _next_run()
    assert path.read_bytes() != bytes(blob)


def test_a_cache_others_can_write_is_not_read(
    cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = _found(_compile_all())
    _next_run()
    (path,) = cache_dir.glob("regex-*.bin")
    path.chmod(0o666)  # the engine trusts the opcodes: only this user's own file is read
    parsed: list[str] = []
    real = regex.compile

    def counted(pattern: str, *args: Any, **kwargs: Any) -> Any:
        parsed.append(pattern)
        return real(pattern, *args, **kwargs)

    monkeypatch.setattr(regex, "compile", counted)
    assert _found(_compile_all()) == expected
    assert parsed == [p for p, _ in PATTERNS]


def test_a_bad_pattern_raises_as_regex_does(cache_dir: Path) -> None:
    with pytest.raises(regex.error):
        regex_cache.compile(r"unbalanced (", FLAGS)


def test_no_cache_writes_nothing(cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRIAGE_NO_CACHE", "1")
    expected = _found([regex.compile(p, f) for p, f in PATTERNS])
    assert _found(_compile_all()) == expected
    _next_run()
    assert not cache_dir.exists()


def test_patterns_pickle_for_another_process(cache_dir: Path) -> None:
    expected = _found([regex.compile(p, f) for p, f in PATTERNS])
    _compile_all()
    _next_run()
    loaded = _compile_all()  # from the disk
    assert _found([pickle.loads(pickle.dumps(p)) for p in loaded]) == expected
    other = regex.compile(r"any (?P<other>pattern)")  # every pattern, once the cache is in use
    assert pickle.loads(pickle.dumps(other)).search("is any pattern")["other"] == "pattern"


# --------------------------------------------------------------------------- the stdlib's `re`
# the atlas's templates, the redaction, line templates and log shapes compile with `re`

STD_PATTERNS: list[tuple[Any, int]] = [
    (r"(?i)watchdog caught collective operation timeout: WorkNCCL\(SeqNum=(?P<seq>\d+)", 0),
    (r"(?i)nccl\s+warn\s+(?P<what>[^\n]{0,400}?)\s+:", 0),
    (r"^\s*File \"(?P<file>[^\"]+)\", line (?P<line>\d+)[ \t]*$", re.M),
    (rb"(?:\x80\x02|\x94)(?:[^.]{2})*+\.", re.DOTALL),  # the pickle scan's bytes patterns
]


def _std_found(compiled: list[re.Pattern[Any]]) -> list[list[tuple[int, int, dict[str, Any]]]]:
    out = []
    for p in compiled:
        text = TEXT.encode() + b"\x80\x02ab." if isinstance(p.pattern, bytes) else TEXT
        out.append([(m.start(), m.end(), m.groupdict()) for m in p.finditer(text)])  # type: ignore[arg-type]
    return out


def _std_compile_all() -> list[re.Pattern[Any]]:
    return [regex_cache.compile_std(p, f) for p, f in STD_PATTERNS]


def _no_std_parser(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("parsed although a verified copy was on disk")

    monkeypatch.setattr(re._parser, "parse", refuse)  # type: ignore[attr-defined]


def test_stdlib_patterns_load_from_disk_and_find_the_same_matches(
    cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fresh = [re.compile(p, f) for p, f in STD_PATTERNS]
    expected = _std_found(fresh)
    assert _std_found(_std_compile_all()) == expected
    _next_run()
    assert len(list(cache_dir.glob("re-*.bin"))) == 1
    _no_std_parser(monkeypatch)
    loaded = _std_compile_all()
    assert _std_found(loaded) == expected
    assert [(p.groupindex, p.groups, p.flags) for p in loaded] == [
        (p.groupindex, p.groups, p.flags) for p in fresh
    ]
    assert [m[2] for m in expected[1]] == [{"what": "Net/IB"}] and expected[0] and expected[3]


def test_a_stdlib_entry_the_engine_refuses_is_compiled_again(cache_dir: Path) -> None:
    expected = _std_found(_std_compile_all())
    _next_run()
    (path,) = cache_dir.glob("re-*.bin")
    body = marshal.loads(diskcache.read_verified(path))  # type: ignore[arg-type]
    for key, (flags, code, *rest) in body["entries"].items():
        body["entries"][key] = (flags, [255] * len(code), *rest)  # no such opcode
    diskcache.write_verified(path, marshal.dumps(body))
    assert _std_found(_std_compile_all()) == expected


def test_a_stdlib_cache_others_can_write_is_not_read(
    cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = _std_found(_std_compile_all())
    _next_run()
    (path,) = cache_dir.glob("re-*.bin")
    path.chmod(0o666)
    parsed: list[Any] = []
    real = re._parser.parse  # type: ignore[attr-defined]

    def counted(pattern: Any, *args: Any, **kwargs: Any) -> Any:
        parsed.append(pattern)
        return real(pattern, *args, **kwargs)

    monkeypatch.setattr(re._parser, "parse", counted)  # type: ignore[attr-defined]
    assert _std_found(_std_compile_all()) == expected
    assert parsed == [p for p, _ in STD_PATTERNS]


def test_a_bad_stdlib_pattern_raises_as_re_does(cache_dir: Path) -> None:
    with pytest.raises(re.error):
        regex_cache.compile_std(r"unbalanced (")


# --------------------------------------------------------------------------- across versions


def _stored_patterns(path: Path) -> set[Any]:
    body = marshal.loads(diskcache.read_verified(path))  # type: ignore[arg-type]
    return {pattern for pattern, _flags in body["entries"]}


@pytest.mark.parametrize("std", [False, True], ids=["regex", "re"])
def test_an_upgrade_does_not_keep_loading_the_patterns_only_an_older_version_used(
    cache_dir: Path, std: bool
) -> None:
    compile_one = regex_cache.compile_std if std else regex_cache.compile
    # an older triage's run: its own patterns, kept on disk
    old = [rf"older version's pattern {i}: (?P<n>\d+)" for i in range(40)]
    for pattern in old:
        compile_one(pattern, 0)
    _next_run()
    (path,) = cache_dir.glob("re-*.bin" if std else "regex-*.bin")
    assert set(old) <= _stored_patterns(path)
    # the new version's runs: each compiles the shipped patterns and one its job brings
    # (an atlas template, a team folder's rule), so each writes the file back
    for run in range(12):
        for pattern, _flags in PATTERNS:
            compile_one(pattern, 0)
        compile_one(rf"job {run}'s own pattern (?P<n>\d+)", 0)
        _next_run()
    stored = _stored_patterns(path)
    assert not set(old) & stored, "an older version's patterns are still loaded by every run"
    assert {p for p, _ in PATTERNS} <= stored  # what every run uses stays
    assert "job 11's own pattern (?P<n>\\d+)" in stored


def test_a_std_pattern_made_again_from_its_engine_args_finds_the_same(cache_dir: Path) -> None:
    # the built knowledge is kept with its stdlib patterns as the engine's code (no parse)
    compiled = [re.compile(p, f) for p, f in STD_PATTERNS]
    again = [
        pickle.loads(pickle.dumps(regex_cache.std_engine_args(p)))  # as the knowledge keeps them
        for p in compiled
    ]
    made = [regex_cache.std_from_engine_args(*args) for args in again]
    assert _std_found(made) == _std_found(compiled)
    assert [(p.pattern, p.flags, p.groupindex) for p in made] == [
        (p.pattern, p.flags, p.groupindex) for p in compiled
    ]
