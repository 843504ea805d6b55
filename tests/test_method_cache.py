"""The methods `dataclasses` writes, kept compiled on disk: a record class defined from the
cache behaves as one compiled afresh, and a damaged, foreign or missing cache costs a
compile, never a wrong class."""

from __future__ import annotations

import builtins
import dataclasses
from pathlib import Path
from typing import Any

import pytest

from triage import method_cache


def _record_class() -> type:
    """A frozen record with a default and a factory, as the model's records are."""

    @dataclasses.dataclass(frozen=True)
    class Exit:
        __module__ = method_cache.__name__  # the cache serves triage's own records only
        rank: int
        code: int = 1
        hosts: tuple[str, ...] = dataclasses.field(default_factory=tuple)

    return Exit


def _behaviour(cls: type) -> tuple[Any, ...]:
    a, b = cls(3), cls(3, 9, ("node01",))
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.rank = 4
    return repr(a), repr(b), a == cls(3), a == b, hash(a) == hash(cls(3)), b.hosts


def _refuse_compiles(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("compiled although a verified copy was on disk")

    monkeypatch.setattr(builtins, "compile", refuse)


def _next_run() -> None:
    method_cache.save()
    method_cache.clear_memory()


def test_a_second_run_defines_the_records_from_disk_and_they_behave_the_same(
    cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = _behaviour(_record_class())
    assert expected[0].endswith("Exit(rank=3, code=1, hosts=())")
    assert expected[2:] == (True, False, True, ("node01",))
    _next_run()
    assert len(list(cache_dir.glob("dataclass-code-*.bin"))) == 1
    _refuse_compiles(monkeypatch)
    assert _behaviour(_record_class()) == expected


def test_a_damaged_cache_is_compiled_again_and_rewritten(
    cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = _behaviour(_record_class())
    _next_run()
    (path,) = cache_dir.glob("dataclass-code-*.bin")
    body = bytearray(path.read_bytes())
    body[len(body) // 2] ^= 0xFF
    path.write_bytes(bytes(body))
    assert _behaviour(_record_class()) == expected
    _next_run()
    _refuse_compiles(monkeypatch)  # the rewritten file is whole again
    assert _behaviour(_record_class()) == expected


def test_a_cache_another_user_could_have_written_is_not_run(
    cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _record_class()
    _next_run()
    (path,) = cache_dir.glob("dataclass-code-*.bin")
    path.chmod(0o666)
    compiled: list[str] = []
    real_compile = builtins.compile

    def counting(source: Any, *args: Any, **kwargs: Any) -> Any:
        compiled.append(source)
        return real_compile(source, *args, **kwargs)

    monkeypatch.setattr(builtins, "compile", counting)
    _behaviour(_record_class())
    assert any("__init__" in str(s) for s in compiled)


def test_a_users_own_dataclass_is_compiled_as_always_and_never_kept(cache_dir: Path) -> None:
    method_cache.install()

    @dataclasses.dataclass
    class Batch:  # a class of the user's module, triage imported as a library
        size: int

    assert Batch(3) == Batch(3)
    method_cache.save()
    assert not any(cache_dir.glob("dataclass-code-*.bin"))
