"""Reading a big bundle with worker processes gives exactly what reading it serially gives."""

from __future__ import annotations

import gc
import shutil
import tarfile
from pathlib import Path

import pytest

from triage import pipeline, pool
from triage.knowledge import Knowledge
from triage.model import FlightRecorderDump, ParsedSource

FIXTURES = Path(__file__).parent / "fixtures"


def _bundle(tmp_path: Path) -> Path:
    root = tmp_path / "job"
    shutil.copytree(FIXTURES / "logs", root / "logs")
    shutil.copytree(FIXTURES / "structured" / "fr_gloo" / "type", root / "fr")
    shutil.copytree(FIXTURES / "structured" / "pyspy", root / "pyspy")
    with tarfile.open(root / "extra.tar.gz", "w:gz") as tar:
        tar.add(FIXTURES / "logs" / "nccl_debug.log", arcname="node1/rank_3.log")
    return root


def _fingerprint(parsed: list[ParsedSource]) -> list[object]:
    out: list[object] = []
    for p in parsed:
        events = []
        for e in p.events:
            payload = e.payload
            if isinstance(payload, FlightRecorderDump):
                # Entries and frames are NamedTuples, equal to plain tuples: check the types too.
                types = {type(x) for en in payload.entries for x in (en, *en.frames)}
                payload = (payload.pg_config, payload.pg_status, payload.entries, types)
            events.append((e, dict(e.attrs), payload))
        out.append((p.source.path, p.source.kind, p.source.rank, p.warnings, p.lines, events))
    return out


def test_a_bundle_read_by_workers_matches_a_serial_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _bundle(tmp_path)
    serial = pipeline.read_inputs([str(root)])

    here: list[str] = []
    parse_here = pipeline._parse_here

    def spy(source: pipeline.Source, fr_tail: int | None, kb: Knowledge) -> ParsedSource:
        here.append(source.path)
        return parse_here(source, fr_tail, kb)

    monkeypatch.setattr(pool, "_POOL_MIN_BYTES", 0)
    monkeypatch.setattr(pipeline, "_parse_here", spy)
    progress: list[tuple[int, int, str]] = []
    # two workers whatever threads earlier tests left in this process (default_workers()
    # would read here then)
    pooled = pipeline.read_inputs([str(root)], lambda *a: progress.append(a), workers=2)

    assert _fingerprint(pooled) == _fingerprint(serial)
    assert gc.isenabled()  # paused while results arrive, and given back
    # Only the archive member was read in this process; every file on disk went to a worker.
    assert here == [f"{root}/extra.tar.gz!node1/rank_3.log"]
    assert any(isinstance(e.payload, FlightRecorderDump) for p in pooled for e in p.events)
    # Progress counts up to every input and ends with an empty path.
    assert progress[-1] == (len(serial), sum(p.source.size for p in serial), "")
    assert [n for n, _, _ in progress] == sorted(n for n, _, _ in progress)


def test_a_small_bundle_is_read_without_starting_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_pool(*args: object, **kwargs: object) -> None:
        raise AssertionError("a worker pool was started for a small bundle")

    monkeypatch.setattr(pool.ParsePool, "_start", no_pool)
    parsed = pipeline.read_inputs([str(_bundle(tmp_path))], workers=2)
    assert len(parsed) > 20


def test_the_main_process_gets_on_with_later_work_only_while_workers_parse(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _bundle(tmp_path)
    calls: list[int] = []
    serial = pipeline.read_inputs(
        [str(root)], while_workers_parse=lambda: calls.append(1), workers=2
    )
    assert calls == []  # a small bundle: no workers, nothing to overlap
    monkeypatch.setattr(pool, "_POOL_MIN_BYTES", 0)
    pooled = pipeline.read_inputs(
        [str(root)], while_workers_parse=lambda: calls.append(1), workers=2
    )
    assert calls == [1]
    assert _fingerprint(pooled) == _fingerprint(serial)


def test_one_worker_means_every_input_is_read_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _bundle(tmp_path)
    monkeypatch.setattr(pool, "_POOL_MIN_BYTES", 0)
    pooled = pipeline.read_inputs([str(root)], workers=2)
    here: list[str] = []
    parse_here = pipeline._parse_here

    def spy(source: pipeline.Source, fr_tail: int | None, kb: Knowledge) -> ParsedSource:
        here.append(source.path)
        return parse_here(source, fr_tail, kb)

    monkeypatch.setattr(pipeline, "_parse_here", spy)
    alone = pipeline.read_inputs([str(root)], workers=1)
    assert len(here) == len(alone)
    assert _fingerprint(alone) == _fingerprint(pooled)
