"""Reading a big bundle with worker processes gives exactly what reading it serially gives."""

from __future__ import annotations

import gc
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

from triage import budget, ingest, knowledge, pipeline, pool
from triage.budget import JobLimits
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
            events.append(
                (e, dict(e.attrs), payload, e.exception, e.c10d, e.notice, e.line_numbers)
            )
        out.append((p.source.path, p.source.kind, p.source.rank, p.warnings, p.lines, events))
    return out


def test_a_bundle_read_by_workers_matches_a_serial_read(tmp_path: Path) -> None:
    root = _bundle(tmp_path)
    serial = pipeline.read_inputs([str(root)])
    progress: list[tuple[int, int, str]] = []
    # two workers whatever threads earlier tests left in this process (default_workers()
    # would read here then), started however small the bundle
    pooled = pipeline.read_inputs(
        [str(root)], lambda *a: progress.append(a), workers=2, parallel_from_bytes=0
    )

    assert _fingerprint(pooled) == _fingerprint(serial)
    assert gc.isenabled()  # paused while results arrive, and given back
    assert any(isinstance(e.payload, FlightRecorderDump) for p in pooled for e in p.events)
    # Progress counts up to every input and ends with an empty path.
    assert progress[-1] == (len(serial), sum(p.source.size for p in serial), "")
    assert [n for n, _, _ in progress] == sorted(n for n, _, _ in progress)


def test_the_workers_parse_every_file_on_disk_and_leave_archive_members_here(
    tmp_path: Path,
) -> None:
    root = _bundle(tmp_path)
    sources = list(ingest.discover([str(root)]))
    kb = knowledge.shipped()
    on_disk = [i for i, s in enumerate(sources) if pool.poolable(s)]
    member = [s.path for s in sources if not pool.poolable(s)]
    results: list[ParsedSource | None] = [None] * len(sources)
    with budget.job(JobLimits(), shared=True) as job_budget:
        workers = pool.ParsePool(job_budget, workers=2, kb=kb, from_bytes=0)
        try:
            for i in on_disk:
                workers.offer(i, sources[i], None)
            workers.flush()
            assert workers.running
            workers.collect(sources, results, pool.ReadProgress(None))
        finally:
            workers.close()
    # The archive member is parsed by the main process (its temp copy is not shared).
    assert member == [f"{root}/extra.tar.gz!node1/rank_3.log"]
    assert len(on_disk) > 20 and all(workers.took(i) for i in on_disk)
    # Every file on disk came back from a worker, as the serial read makes it.
    serial = {p.source.path: p for p in pipeline.read_inputs([str(root)], workers=1)}
    came_back = [r for r in results if r is not None]
    assert len(came_back) == len(on_disk)
    assert _fingerprint(came_back) == _fingerprint([serial[r.source.path] for r in came_back])


def test_a_small_bundle_is_read_here_and_later_work_overlaps_only_with_workers(
    tmp_path: Path,
) -> None:
    root = _bundle(tmp_path)
    calls: list[int] = []
    serial = pipeline.read_inputs(
        [str(root)], while_workers_parse=lambda: calls.append(1), workers=2
    )
    assert calls == []  # a small bundle: no workers started, nothing to overlap
    pooled = pipeline.read_inputs(
        [str(root)], while_workers_parse=lambda: calls.append(1), workers=2, parallel_from_bytes=0
    )
    assert calls == [1]
    assert _fingerprint(pooled) == _fingerprint(serial)


def test_one_worker_means_every_input_is_read_here(tmp_path: Path) -> None:
    root = _bundle(tmp_path)
    pooled = pipeline.read_inputs([str(root)], workers=2, parallel_from_bytes=0)
    calls: list[int] = []
    alone = pipeline.read_inputs(
        [str(root)], while_workers_parse=lambda: calls.append(1), workers=1, parallel_from_bytes=0
    )
    assert calls == []  # no workers were started
    assert _fingerprint(alone) == _fingerprint(pooled)


def test_a_diagnosis_reads_the_same_with_or_without_workers(tmp_path: Path) -> None:
    root = _bundle(tmp_path)
    here = pipeline.diagnose([str(root)], pipeline.Options(use_embeddings=False, workers=1))
    pooled = pipeline.diagnose(
        [str(root)], pipeline.Options(use_embeddings=False, workers=2, parallel_from_bytes=0)
    )
    assert pooled.to_dict() == here.to_dict()


def test_a_job_of_logs_alone_never_imports_the_dump_decoder() -> None:
    # Workers pack and the parent unpacks every result: for logs alone, neither needs the
    # flight-recorder decoder (its import is ~10-30 ms of each process's CPU).
    code = (
        "import sys\n"
        "from triage import parsers, pool\n"
        "from triage.ingest import discover\n"
        f"source = next(iter(discover([{str(FIXTURES / 'logs' / 'torchrun_watchdog.log')!r}])))\n"
        "parsed = parsers.parse(source)\n"
        "back = pool.unpack(source, pool.pack(parsed))\n"
        "assert back.events == parsed.events\n"
        "print('triage.parsers.flight_recorder' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_while_workers_parse_the_models_classify_reads_for_any_job_are_loaded() -> None:
    # what classify would otherwise load after the last file: the neighbour index, the
    # TF-IDF model, the calibration, the atlas's anchor table
    from triage.classify import atlas, calibration, learned, neighbours

    for cached in (neighbours._load_cached, learned._load_cached, calibration._load_cached):
        cached.cache_clear()
    kb = knowledge.shipped()
    atlas._MATCHERS.pop(kb.atlas, None)
    pipeline.warm_later_stages(pipeline.Options(use_embeddings=False), kb)
    assert neighbours._load_cached.cache_info().currsize == 1
    assert learned._load_cached.cache_info().currsize == 1
    assert calibration._load_cached.cache_info().currsize == 1
    assert kb.atlas in atlas._MATCHERS
