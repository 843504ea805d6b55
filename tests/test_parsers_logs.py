"""Text-log parsers: what a user's crashed-job logs turn into.

Fixtures in tests/fixtures/logs/ are hand-written after the formats in
shared/research/formats.md; hosts, pids and numbers are made up.
"""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from scan_engines import ENGINES

from triage.model import (
    CollectiveRef,
    Event,
    EventKind,
    Level,
    LineNotice,
    ParsedSource,
    ProcessGroupTag,
    RankExit,
    Source,
    SourceKind,
    WatchdogTimeout,
)
from triage.parsers import nccl, parse_text, prefixes, rank_log, timestamps
from triage.parsers.common import PARSER_STOPPED
from triage.scan import engines, reader

FIXTURES = Path(__file__).parent / "fixtures" / "logs"


def assert_no_parser_bug(parsed: ParsedSource) -> None:
    """The parser read bad input without an exception: "never raises" must not mean that an
    exception was swallowed into a warning."""
    texts = [
        *parsed.warnings,
        *(e.text for e in parsed.events if e.kind is EventKind.INPUT_WARNING),
    ]
    assert not [t for t in texts if PARSER_STOPPED in t]


def source_of(
    data: bytes, path: str = "job.log", kind: SourceKind = SourceKind.RANK_LOG, **kw: object
) -> Source:
    return Source(path=path, kind=kind, size=len(data), open=lambda: io.BytesIO(data), **kw)


def parse_fixture(
    name: str,
    *,
    scan_all: bool | None = None,
    tables: rank_log.LogScanTables | None = None,
    progress_by_shape: bool = True,
    **kw: object,
) -> ParsedSource:
    data = (FIXTURES / name).read_bytes()
    return rank_log.parse(
        source_of(data, path=name, **kw),
        scan_all=scan_all,
        tables=tables,
        progress_by_shape=progress_by_shape,
    )


def of_kind(parsed: ParsedSource, kind: EventKind) -> list:
    return [e for e in parsed.events if e.kind is kind]


_TABLES: dict[str, rank_log.LogScanTables] = {}


def tables_on(engine: str) -> rank_log.LogScanTables:
    """The log parser's scan tables with every marker scan on `engine`."""
    if engine not in _TABLES:
        _TABLES[engine] = rank_log.scan_tables().using(engine)
    tables = _TABLES[engine]
    assert tables.markers.engine == tables.progress_markers.engine == engine
    return tables


def _facts(e: Event) -> tuple[object, ...]:
    """Everything the parser read from an event's record."""
    return (e.attrs, e.payload, e.exception, e.c10d, e.notice, e.line_numbers, e.time_before) + (
        e.stream_time_before,
        e.time_after,
    )


# --------------------------------------------------------------------------- torchrun + watchdog


def test_watchdog_timeout_on_rank1_is_read_with_its_collective_facts() -> None:
    parsed = parse_fixture("torchrun_watchdog.log")
    timeouts = [e for e in parsed.events if e.c10d is not None and e.c10d.timeout is not None]
    first = timeouts[0]
    assert first.kind is EventKind.ERROR_LINE
    assert first.rank == 1 and first.local_rank == 1
    timeout = first.c10d.timeout
    assert timeout.collective.seq == 243
    assert timeout.collective.op == "allreduce"
    assert timeout.collective.timeout_ms == 600_000
    assert timeout.ran_ms == 600_083
    summary = next(
        e for e in parsed.events if e.c10d is not None and e.c10d.watchdog_progress is not None
    )
    progress = summary.c10d.watchdog_progress
    assert progress.last_enqueued == 243 and progress.last_completed == 242
    assert summary.c10d.process_group.desc == "default_pg" and summary.c10d.rank == 1


def test_a_dump_request_a_stuck_watchdog_and_an_older_timeout_record_are_read() -> None:
    log = (
        "[rank1]:[E1105 10:12:05.100000000 ProcessGroupNCCL.cpp:1595] [PG ID 0 PG GUID "
        "0(default_pg) Rank 1] Observed flight recorder dump signal from another rank via "
        "TCPStore. Received a dump signal due to a collective timeout from rank 3 and we will "
        "try our best to dump the debug info.\n"
        "[rank0]:[E1105 10:12:06.100000000 ProcessGroupNCCL.cpp:1423] [PG ID 0 PG GUID "
        "0(default_pg) Rank 0] Heartbeat monitor timed out! Process will be terminated after "
        "dumping debug info. workMetaList_.size()=1. The watchdog got stuck for 480 seconds "
        "without making progress in monitoring enqueued collectives.\n"
        "[rank2]:[E1105 10:12:07.100000000 ProcessGroupNCCL.cpp:616] [Rank 2] Watchdog caught "
        "collective operation timeout: WorkNCCL(OpType=BROADCAST, Timeout(ms)=1800000) ran for "
        "1800515 milliseconds before timing out.\n"
    )
    asked, stuck, timed_out = parse_text(log).events
    assert asked.c10d.dump_signal_from_rank == 3 and asked.rank == 1
    assert asked.c10d.process_group == ProcessGroupTag(0, "0", "default_pg")
    assert stuck.c10d.stuck_s == 480 and stuck.c10d.dump_signal_from_rank is None
    # a record with no SeqNum and no sizes: the collective is what it names
    assert timed_out.rank == 2 and timed_out.c10d.process_group is None
    assert timed_out.c10d.timeout == WatchdogTimeout(
        CollectiveRef(op="broadcast", timeout_ms=1_800_000), ran_ms=1_800_515
    )


def test_c10_time_takes_its_year_from_the_summary_table() -> None:
    parsed = parse_fixture("torchrun_watchdog.log")
    first = next(e for e in parsed.events if e.c10d is not None and e.c10d.timeout is not None)
    # [E105 10:12:05.426...] with the year learned from `2026-01-05_10:12:08`
    assert first.time == pytest.approx(1767607925.426, abs=0.01)


def test_watchdog_exception_frames_join_the_error_line_they_belong_to() -> None:
    parsed = parse_fixture("torchrun_watchdog.log")
    terminated = next(e for e in parsed.events if e.c10d and e.c10d.watchdog_terminated)
    assert terminated.kind is EventKind.ERROR_LINE
    assert terminated.payload.raised_from.startswith("checkTimeout at ")
    assert terminated.end_line > terminated.line
    assert "frame #0" in terminated.text
    # the frames are not separate error events
    assert not [e for e in parsed.events if e.text.startswith("frame #")]


def test_cpp_terminate_block_is_one_event() -> None:
    parsed = parse_fixture("torchrun_watchdog.log")
    (cpp,) = of_kind(parsed, EventKind.CPP_EXCEPTION)
    assert cpp.payload.exception_class == "c10::DistBackendError"
    assert "Watchdog caught collective operation timeout" in cpp.payload.what
    assert cpp.payload.cpp_frames == 2
    assert cpp.level is Level.FATAL
    assert cpp.rank == 1  # from `[Rank 1]` inside what()
    assert "[default1]" not in cpp.text


def test_agent_lines_name_the_victims_and_the_failed_worker() -> None:
    parsed = parse_fixture("torchrun_watchdog.log")
    (sigterm,) = of_kind(parsed, EventKind.AGENT)
    assert sigterm.notice == LineNotice(target_pid=41210, signal="SIGTERM", role="victim")
    assert sigterm.attrs == {"agent_pid": 41200}
    assert sigterm.pid is None
    failed = next(e for e in of_kind(parsed, EventKind.RANK_EXIT) if "exitcode:" in e.text)
    assert isinstance(failed.payload, RankExit)
    assert failed.payload.exitcode == -6 and failed.payload.signal == "SIGABRT"
    assert failed.payload.pid == 41211 and failed.payload.local_rank == 1
    assert failed.pid == 41211  # the worker that died; the agent that logged it is attrs
    assert failed.attrs["agent_pid"] == 41200
    assert failed.rank == 1  # learned: `[default1]:[rank1]:` lines map local rank 1 to rank 1


def test_torchrun_summary_reads_rank_from_rank_line_not_the_index() -> None:
    parsed = parse_fixture("torchrun_watchdog.log")
    blocks = [e for e in of_kind(parsed, EventKind.RANK_EXIT) if "summary_index" in e.attrs]
    assert len(blocks) == 2
    root = next(e for e in blocks if e.payload.is_root_cause_block)
    other = next(e for e in blocks if not e.payload.is_root_cause_block)
    assert root.attrs["summary_index"] == 0 and root.payload.rank == 1 and root.rank == 1
    assert root.payload.exitcode == -6 and root.payload.signal == "SIGABRT"
    assert root.payload.pid == 41211 and root.payload.host == "gpu-node-3"
    assert root.payload.message == "Signal 6 (SIGABRT) received by PID 41211"
    assert root.payload.error_file is None
    assert other.attrs["summary_index"] == 1 and other.payload.rank == 0
    assert other.payload.signal == "SIGTERM"
    assert other.payload.time < root.payload.time + 2


def test_agent_traceback_before_the_summary_is_kept() -> None:
    parsed = parse_fixture("torchrun_watchdog.log")
    (tb,) = of_kind(parsed, EventKind.TRACEBACK)
    assert tb.exception.exc_type.endswith("ChildFailedError")
    assert tb.payload.frames[0] == ("/venv/bin/torchrun", 8, "<module>")
    assert not tb.payload.truncated


def test_progress_is_one_event_per_rank_with_the_last_step() -> None:
    parsed = parse_fixture("torchrun_watchdog.log")
    progress = {e.local_rank: e for e in of_kind(parsed, EventKind.PROGRESS)}
    assert progress[0].payload.step == 120 and progress[0].payload.total_steps == 1000
    assert progress[1].payload.step == 119
    assert progress[1].rank == 1  # local rank 1 was seen as `[rank1]` in the same file


# --------------------------------------------------------------------------- tracebacks


def test_two_ranks_interleaved_tracebacks_are_told_apart() -> None:
    parsed = parse_fixture("interleaved_tracebacks.log")
    tbs = {e.rank: e for e in of_kind(parsed, EventKind.TRACEBACK)}
    assert set(tbs) == {0, 1}
    r0, r1 = tbs[0], tbs[1]
    assert r0.exception.exc_type == "RuntimeError"
    assert r0.exception.exc_message.endswith("GLHF! 🏖️")  # gloo's emoji decoded
    assert [f[2] for f in r0.payload.frames] == ["<module>", "main", "all_reduce"]
    assert "[rank0]" not in r0.text and "batch = next(loader)" not in r0.text
    assert r1.exception.exc_type == "ValueError"
    assert [link.exc_type for link in r1.traceback.links] == ["KeyError", "ValueError"]
    assert r1.traceback.exception_lines[0] == "KeyError: 'input_ids'"
    assert "During handling of the above exception" in r1.text
    assert (r1.line, r1.end_line) == (2, 26)


def test_traceback_cut_short_is_still_reported() -> None:
    data = (
        b"Traceback (most recent call last):\n"
        b'  File "/workspace/train.py", line 10, in <module>\n'
        b"    model = build()\n"
        b'  File "/workspace/model.py", line 3, in build\n'
    )
    parsed = rank_log.parse(source_of(data))
    (tb,) = of_kind(parsed, EventKind.TRACEBACK)
    assert tb.payload.truncated is True and tb.exception.exc_type is None
    assert tb.payload.frames[-1] == ("/workspace/model.py", 3, "build")


def test_pasted_traceback_without_header_is_recognised() -> None:
    parsed = parse_fixture("pasted_headerless_truncated.txt")
    (tb,) = of_kind(parsed, EventKind.TRACEBACK)
    assert tb.payload.headerless is True
    assert [f[0] for f in tb.payload.frames] == [
        "/workspace/finetune.py",
        "/workspace/opt.py",
        "/venv/lib/python3.10/site-packages/deepspeed/ops/adam/fused_adam.py",
    ]


def test_direct_cause_chain_and_multiline_nccl_message_stay_in_one_event() -> None:
    parsed = parse_fixture("deepspeed_pdsh.log")
    (tb,) = of_kind(parsed, EventKind.TRACEBACK)
    assert tb.exception.exc_type == "torch.distributed.DistBackendError"
    assert "Last error:" in tb.exception.exc_message
    assert tb.c10d.nccl_error.reason == "remote process exited or there was a network error"
    assert tb.host == "node07"

    chained = rank_log.parse(
        source_of(
            b"Traceback (most recent call last):\n"
            b'  File "a.py", line 1, in <module>\n'
            b"OSError: disk full\n"
            b"\n"
            b"The above exception was the direct cause of the following exception:\n"
            b"\n"
            b"Traceback (most recent call last):\n"
            b'  File "a.py", line 3, in <module>\n'
            b"RuntimeError: checkpoint save failed\n"
            b"Loading next shard\n"
        )
    )
    (tb,) = of_kind(chained, EventKind.TRACEBACK)
    first, last = tb.traceback.links
    assert (first.exc_type, first.exc_message) == ("OSError", "disk full")
    assert (last.exc_type, last.exc_message) == ("RuntimeError", "checkpoint save failed")
    (start,) = tb.traceback.later_links_start  # the separator's line in the event's text
    assert tb.text.splitlines()[start].startswith("The above exception was the direct cause")
    assert tb.traceback.raised_at == ("a.py", 1, "<module>")  # the first link's innermost frame
    assert [f.line for f in last.frames] == [3]
    assert tb.exception.exc_type == "RuntimeError" and tb.end_line == 9


def test_long_traceback_keeps_head_and_tail() -> None:
    frames = b"".join(b'  File "/w/r.py", line %d, in f\n    f()\n' % i for i in range(2000))
    data = b"Traceback (most recent call last):\n" + frames + b"RecursionError: too deep\n"
    parsed = rank_log.parse(source_of(data))
    (tb,) = of_kind(parsed, EventKind.TRACEBACK)
    assert tb.exception.exc_type == "RecursionError"
    assert "lines omitted" in tb.text and tb.text.endswith("RecursionError: too deep")
    assert len(tb.payload.frames) <= rank_log.MAX_FRAMES
    assert tb.payload.frames_dropped > 0


# --------------------------------------------------------------------------- NCCL


@pytest.mark.parametrize("engine", ENGINES)
def test_nccl_device_index_is_not_taken_as_rank(engine: str) -> None:
    data = (FIXTURES / "nccl_debug.log").read_bytes()
    parsed = nccl.parse(source_of(data, path="nccl.log"), engine=engine)
    by_pid = {(e.pid, e.rank) for e in parsed.events}
    # pid 41211 runs on CUDA device [1] but is rank 3 (Init COMPLETE), pid 41210 is dev 0, rank 2
    assert (41211, 3) in by_pid and (41210, 2) in by_pid
    assert not [e for e in parsed.events if e.pid == 41211 and e.rank == 1]
    comms = of_kind(parsed, EventKind.NCCL_COMM)
    assert {c.payload.bus_id for c in comms} == {"3b000", "5e000"}
    big = next(c for c in comms if c.payload.rank == 3)
    assert big.payload.nranks == 4 and big.payload.cuda_dev == 1
    assert big.payload.comm_id == "0x9e17999afaa87dbb" and big.payload.host == "gpu-node-3"
    # a process's smaller sub-communicator does not change its rank
    sub = next(c for c in comms if c.payload.nranks == 2)
    assert sub.payload.rank == 0 and sub.rank == 2


@pytest.mark.parametrize("engine", ENGINES)
def test_nccl_warnings_versions_transports_and_error_chains(engine: str) -> None:
    data = (FIXTURES / "nccl_debug.log").read_bytes()
    parsed = nccl.parse(source_of(data, path="nccl.log"), engine=engine)
    warns = of_kind(parsed, EventKind.NCCL_WARN)
    assert len(warns) == 2
    assert warns[0].time == pytest.approx(1767607918.0)
    assert warns[1].payload.func == "proxyServiceInitOp" and warns[1].payload.src == "proxy.cc"
    infos = of_kind(parsed, EventKind.NCCL_INFO)
    assert any(e.payload.nccl_version == "2.21.5+cuda12.4" for e in infos)
    # the network each process uses, from `NET/IB : Using [0]mlx5_0:1/IB ...` and from
    # `Using network IB` alike
    assert [e.line for e in infos if e.payload.network == "IB"] == [4, 5, 6]
    assert {e.payload.transport for e in infos if e.payload.transport} == {"P2P", "NET/IB"}
    chain = [e for e in infos if e.payload.result is not None]
    assert len(chain) == 4 and {e.payload.result_name for e in chain} == {"ncclRemoteError"}
    assert parsed.lines == 26
    env = next(e for e in infos if e.payload.env)
    assert env.payload.env == {"NCCL_SOCKET_IFNAME": "eth0"}


@pytest.mark.parametrize(
    ("line", "host", "pid", "dev", "level", "src", "func"),
    [
        ("node1:42:43 [3] NCCL INFO Using network IB", "node1", 42, 3, "INFO", None, None),
        (
            "node1:42:43 [0] misc/socket.cc:49 NCCL WARN socketProgress: closed",
            "node1",
            42,
            0,
            "WARN",
            "misc/socket.cc",
            None,
        ),
        (
            "[2026-01-05 10:11:58] node1:42:43 [0] proxy.cc:1519 (proxyServiceInitOp) NCCL WARN x",
            "node1",
            42,
            0,
            "WARN",
            "proxy.cc",
            "proxyServiceInitOp",
        ),
        ("node1:42:43 NCCL CALL ncclAllReduce(...)", "node1", 42, None, "CALL", None, None),
        ("NCCL version 2.21.5+cuda12.4", None, None, None, "VERSION", None, None),
    ],
)
def test_nccl_line_generations(
    line: str, host: str, pid: int, dev: int, level: str, src: str, func: str
) -> None:
    got = nccl.parse_nccl_line(line)
    assert got is not None
    assert (got.host, got.pid, got.dev, got.level, got.src, got.func) == (
        host,
        pid,
        dev,
        level,
        src,
        func,
    )


def test_text_that_only_mentions_nccl_is_not_an_nccl_line() -> None:
    assert nccl.parse_nccl_line("RuntimeError: NCCL error in: foo.cpp:12, unhandled") is None


# --------------------------------------------------------------------------- launchers


def test_deepspeed_pdsh_log_names_hosts_exit_and_progress() -> None:
    parsed = parse_fixture("deepspeed_pdsh.log")
    (exit_,) = of_kind(parsed, EventKind.RANK_EXIT)
    assert exit_.payload.exitcode == -6 and exit_.host == "node07"
    assert exit_.time == pytest.approx(1767607540.801)
    # `{cmd} exits with return code` prints the command the launcher spawned *last* (here
    # --local_rank=1), whatever process failed: the line names no rank
    assert exit_.payload.local_rank is None and exit_.rank is None
    (kill,) = of_kind(parsed, EventKind.AGENT)
    assert kill.notice.target_pid == 748089
    (warn,) = of_kind(parsed, EventKind.NCCL_WARN)
    assert warn.host == "node08" and warn.pid == 2231
    (progress,) = of_kind(parsed, EventKind.PROGRESS)
    assert progress.rank == 0 and progress.payload.step == 3000
    assert progress.time == pytest.approx(1767607514.388)


def test_slurm_kills_ooms_and_cancellations_become_signals() -> None:
    parsed = parse_fixture("slurm_srun.log")
    signals = of_kind(parsed, EventKind.SIGNAL)
    reasons = [(e.notice.signal, e.notice.reason) for e in signals]
    assert ("SIGKILL", "oom") in reasons  # oom_kill event, srun Out Of Memory, kernel
    cancel = [e for e in signals if e.notice.slurm == "job"]
    assert cancel[0].notice.reason == "TIME LIMIT" and cancel[0].host == "node12"
    kernel = next(e for e in signals if e.notice.target_pid == 41213)
    assert kernel.notice.process == "python"
    segv = next(e for e in signals if e.notice.signal == "SIGSEGV")
    assert segv.notice.core_dumped is True
    (exit_,) = of_kind(parsed, EventKind.RANK_EXIT)
    assert exit_.payload.exitcode == 1 and exit_.notice.task == 5
    progress = {e.rank: e.payload.step for e in of_kind(parsed, EventKind.PROGRESS)}
    assert progress == {0: 120, 3: 119}  # srun -l labels


def test_progress_bar_overwrites_keep_the_error_printed_over_them() -> None:
    parsed = parse_fixture("tqdm_glued_error.log")
    errors = of_kind(parsed, EventKind.ERROR_LINE)
    watchdog = errors[0]
    assert watchdog.line == 1 and watchdog.rank == 3
    collective = watchdog.c10d.timeout.collective
    assert collective.seq == 96120 and collective.timeout_ms == 1_800_000
    assert errors[1].text == "ERROR: could not load checkpoint shard 3"  # ANSI colours gone
    (progress,) = of_kind(parsed, EventKind.PROGRESS)
    assert progress.payload.step == 380 and progress.payload.total_steps == 1000
    assert progress.payload.epoch == pytest.approx(0.37)


@pytest.mark.parametrize(
    "name",
    [
        "torchrun_watchdog.log",
        "interleaved_tracebacks.log",
        "deepspeed_pdsh.log",
        "slurm_srun.log",
        "tqdm_glued_error.log",
        "nccl_debug.log",
        "elastic_restart_old_torch.log",
        "cuda_error_faulthandler.log",
    ],
)
@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("by_shape", [True, False])
def test_fast_path_finds_what_a_full_read_finds(name: str, engine: str, by_shape: bool) -> None:
    full = parse_fixture(name, scan_all=True)
    tables = tables_on(engine)
    fast = parse_fixture(name, scan_all=False, tables=tables, progress_by_shape=by_shape)
    assert [(e.kind, e.line, e.rank, e.text) for e in fast.events] == [
        (e.kind, e.line, e.rank, e.text) for e in full.events
    ]


# --------------------------------------------------------------------------- robustness


def test_a_50mb_line_is_cut_with_a_warning_and_later_lines_keep_their_numbers() -> None:
    data = b"x" * (50 << 20) + b"\nRuntimeError: boom\n"
    parsed = rank_log.parse(source_of(data))
    assert any("line 1:" in w and "cut" in w for w in parsed.warnings)
    (err,) = of_kind(parsed, EventKind.ERROR_LINE)
    assert err.line == 2 and err.text == "RuntimeError: boom"
    assert parsed.lines == 2


def test_generic_warnings_are_capped_and_the_drop_is_reported() -> None:
    letters = [bytes([a, b]) for a in range(97, 123) for b in range(97, 123)][:600]
    data = b"".join(b"WARNING: option %s is deprecated\n" % w for w in letters)
    parsed = rank_log.parse(source_of(data))
    assert len(of_kind(parsed, EventKind.WARNING_LINE)) == rank_log.MAX_WARNINGS
    assert any("not kept" in w for w in parsed.warnings)


def test_event_cap_is_reported() -> None:
    data = b"".join(b"RuntimeError: failure %s\n" % w.encode() for w in ("abcdefghijklmnop"))
    parsed = rank_log.parse(source_of(data), max_events=10)
    assert len(parsed.events) == 10
    assert any("6 more events dropped after the first 10" in w for w in parsed.warnings)
    assert len(rank_log.parse(source_of(data)).events) == 16  # under the shipped cap: all kept


def test_a_bug_in_the_parser_is_a_warning_that_the_never_raise_tests_catch() -> None:
    # scan tables built wrong (no message shapes): reading the error line fails inside the
    # parser, which reports it and goes on, and the never-raise check sees the swallowed bug
    shipped = rank_log.scan_tables()
    broken = dataclasses.replace(shipped, shapes=dataclasses.replace(shipped.shapes, facts={}))
    data = b"step 1 loss 0.5\nRuntimeError: x\n"
    parsed = rank_log.parse(source_of(data), tables=broken)
    assert [w for w in parsed.warnings if PARSER_STOPPED in w and "KeyError" in w]
    with pytest.raises(AssertionError):
        assert_no_parser_bug(parsed)
    assert_no_parser_bug(rank_log.parse(source_of(data), tables=shipped))


def test_unreadable_stream_becomes_a_warning() -> None:
    class Broken(io.RawIOBase):
        def read(self, n: int = -1) -> bytes:
            raise OSError("member is corrupt")

    src = Source(path="bad.log", kind=SourceKind.RANK_LOG, size=10, open=Broken)
    parsed = rank_log.parse(src)
    assert any("member is corrupt" in w for w in parsed.warnings)


@pytest.mark.parametrize("engine", ENGINES)
def test_marker_scan_agrees_with_plain_search(engine: str) -> None:
    data = b"".join(p.read_bytes() for p in sorted(FIXTURES.iterdir()))
    for markers in (rank_log.scan_tables().markers, rank_log.PROGRESS_MARKERS, nccl.NOTABLE):
        fast = markers.using(engine).find(data)
        plain = markers.find_plain(data)
        # the plain search reports every needle start; the fast one reports the same lines
        line_of = lambda offs: sorted({data.rfind(b"\n", 0, o) for o in offs})  # noqa: E731
        assert line_of(fast) == line_of(plain)
        ends = sorted({e if e >= 0 else len(data) for e in (data.find(b"\n", o) for o in plain)})
        assert markers.using(engine).line_ends(data) == ends


def test_clean_collapses_bars_and_strips_colour() -> None:
    assert reader.clean(b" 10%|#  | 1/10 [00:01<00:09]\r 20%|## | 2/10 [00:02<00:08]") == [
        " 20%|## | 2/10 [00:02<00:08]"
    ]
    assert reader.clean(b"\x1b[91m[FAIL]\x1b[0m x") == ["[FAIL] x"]
    assert reader.clean(b"ok\xff\xfe") == ["ok\ufffd\ufffd"]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            [
                b"\r",
                b"\r\r",
                b" ",
                b"\x00",
                b"\x1b[91m",
                b"\x1b[0m",
                b"\xff",
                b"x",
                b"Error: y",
                b" 10%|#  | 1/10 [00:01<00:09, 1.2it/s]",
                b"[rank0]: loss 1.2",
                b"   ",
            ]
        ),
        max_size=12,
    )
)
@example([b"\r", b"   ", b"\r"])
@example([b" 10%|#  | 1/10 [00:01<00:09]", b"\r", b"Error: y", b"\r", b" 20%|## | 2/10 [0:2]"])
def test_clean_last_is_the_last_text_clean_gives(parts: list[bytes]) -> None:
    # what the progress and stamp readers take of a line: its last shown text, read without
    # testing every earlier redraw of a tqdm line for a bar
    raw = b"".join(parts)
    assert reader.clean_last(raw) == reader.clean(raw)[-1]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=4000))
def test_random_bytes_never_raise(data: bytes) -> None:
    for mod in (rank_log, nccl):
        parsed = mod.parse(source_of(data))
        assert_no_parser_bug(parsed)
        for e in parsed.events:
            assert e.line is None or 1 <= e.line <= max(parsed.lines, 1)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(sorted(p.name for p in FIXTURES.iterdir())),
    st.integers(min_value=0, max_value=10_000),
    st.sampled_from(["utf-8", "latin-1", "utf-16", "cp1252"]),
    st.booleans(),
)
def test_truncated_and_reencoded_logs_never_raise(
    name: str, cut: int, encoding: str, scan_all: bool
) -> None:
    raw = (FIXTURES / name).read_bytes()
    text = raw.decode("utf-8", "replace")
    data = raw[:cut] + text.encode(encoding, "replace")[cut:]
    for parser in (lambda s: rank_log.parse(s, scan_all=scan_all), nccl.parse):
        parsed = parser(source_of(data))
        assert isinstance(parsed, ParsedSource)
        assert_no_parser_bug(parsed)


# --------------------------------------------------------------------------- prefixes


@pytest.mark.parametrize(
    ("line", "expect"),
    [
        ("3: hello", {"task": 3}),
        ("node07: hello", {"host": "node07"}),
        ("gpu-node-3.cluster: hello", {"host": "gpu-node-3.cluster"}),
        ("[1,5]<stderr>:hello", {"rank": 5}),
        ("[default3]:hello", {"local_rank": 3, "role": "default"}),
        ("[trainer2]:hello", {"local_rank": 2, "role": "trainer"}),
        ("[rank7]: hello", {"rank": 7}),
        ("[rank0]:[E1218 20:27:21.4 X.cpp:1] m", {"rank": 0}),
        ("[default1]:[rank9]: hello", {"rank": 9, "local_rank": 1}),
        ("0: node07: [default1]:[rank9]: hello", {"task": 0, "host": "node07", "rank": 9}),
        ("[80746] hello", {}),
        ("(RayWorkerWrapper pid=2376582) hello", {}),
        ("(Worker[rank=8] pid=3294808, ip=10.0.0.9) hello", {"rank": 8}),
        # `docker logs --timestamps` / `kubectl logs --timestamps` put their stamp first
        (
            "2025-11-21T23:37:35.078181367Z [rank0]: hello",
            {"rank": 0, "stamp": "2025-11-21T23:37:35.078181367Z"},
        ),
    ],
)
def test_prefixes_are_peeled_outermost_first(line: str, expect: dict) -> None:
    got = prefixes.peel(line)
    assert got.rest == "hello" or got.rest.startswith("[E1218")
    for key, value in expect.items():
        assert getattr(got, key) == value


@pytest.mark.parametrize(
    "line",
    [
        "RuntimeError: boom",
        "torch.distributed.run: [WARNING] x",
        "WARNING: something",
        "srun: error: node1: task 0: Killed",
        "rank0: loss 1.0",
        "Traceback (most recent call last):",
        "[E1218 20:27:21.426415540 ProcessGroupNCCL.cpp:629] msg",
        "node07:41210:41300 [0] NCCL INFO Using network IB",
        "2025-11-21 23:37:35,078 - INFO - a Python logging stamp is the line's own",
    ],
)
def test_log_text_is_not_mistaken_for_a_prefix(line: str) -> None:
    assert prefixes.peel(line).rest == line


# --------------------------------------------------------------------------- timestamps


@pytest.mark.parametrize(
    ("text", "epoch"),
    [
        ("[2025-12-18 20:27:22,783] [INFO] [launch.py:319:f] x", 1766089642.783),
        ("[2025-01-05 10:00:00] node:1:2 [0] x NCCL WARN y", 1736071200.0),
        ("2025-01-05 10:12:08,123 - train - ERROR - x", 1736071928.123),
        ("2025-01-05T10:12:08.500+02:00 x", 1736064728.5),
        ("2025-01-05T10:12:08Z x", 1736071928.0),
        ("[2025-01-05 10:12:08] iteration 1/ 2 |", 1736071928.0),
        ("[01/05/26 10:12:08] INFO colossalai - x", 1767607928.0),
        ("01/05/2026 10:12:08 - WARNING - datasets.builder - x", 1767607928.0),
        ("  time      : 2026-01-05_10:12:08", 1767607928.0),
    ],
)
def test_dated_timestamps(text: str, epoch: float) -> None:
    assert timestamps.parse_any(text) == pytest.approx(epoch)


def test_yearless_c10_and_glog_times_use_the_hint() -> None:
    hint = timestamps.YearHint(year=2025)
    c10 = timestamps.parse_any("[E1218 20:27:21.426415540 ProcessGroupNCCL.cpp:629] x", hint)
    assert c10 == pytest.approx(1766089641.426, abs=1e-3)
    glog = timestamps.parse_any("E0105 08:35:28.255000 5442 torch/x.py:1] y", hint)
    assert glog == pytest.approx(1736066128.255, abs=1e-3)


def test_year_rolls_over_new_year() -> None:
    learned = timestamps.YearHint(year=2025)
    learned.learn(timestamps.parse_dated("2025-12-31 23:59:00"))
    assert learned.year_for(1) == 2026 and learned.year_for(12) == 2025
    from_mtime = timestamps.YearHint.from_mtime(timestamps.parse_dated("2026-01-02 00:00:00"))
    assert from_mtime.year_for(12) == 2025 and from_mtime.year_for(1) == 2026


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("by_shape", [True, False])
def test_big_interleaved_log_keeps_a_rank_that_stopped_early_and_finds_late_errors(
    engine: str, by_shape: bool
) -> None:
    # ~9 MB: four torchrun ranks print progress; rank 2 hangs at step 40 while the others go on,
    # then rank 0's watchdog fires. Read through the fast path (bigger than SCAN_ALL_BELOW).
    out = []
    for step in range(50_000):
        for r in range(4):
            if r == 2 and step > 40:
                continue
            out.append(b"[default%d]: %d/90000 [01:23<10:00, 1.23it/s, loss=2.3456]" % (r, step))
        if step % 1000 == 0:
            out.append(b"2026-01-05 10:00:00,000 - data - INFO - shard %d loaded in 0.5s" % step)
    out.append(
        b"[default0]:[rank0]:[E105 10:40:00.000000000 ProcessGroupNCCL.cpp:629] [Rank 0] "
        b"Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, "
        b"NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600010 milliseconds before timing out."
    )
    data = b"\n".join(out) + b"\n"
    assert len(data) > 2 * engines.CHUNK_SIZE
    tables = tables_on(engine)
    parsed = rank_log.parse(source_of(data), tables=tables, progress_by_shape=by_shape)
    steps = {e.local_rank: e.payload.step for e in of_kind(parsed, EventKind.PROGRESS)}
    assert steps == {0: 49_999, 1: 49_999, 2: 40, 3: 49_999}
    (watchdog,) = of_kind(parsed, EventKind.ERROR_LINE)
    assert watchdog.rank == 0 and watchdog.line == parsed.lines
    assert watchdog.c10d.timeout.collective.seq == 9


def _mixed_progress_log() -> bytes:
    """~1 MB: torchrun-prefixed tqdm bars, unprefixed DeepSpeed ranks, `srun -l` epochs and
    unique noise lines; DeepSpeed rank 2 and srun task 5 stop early, one stream only prints
    in the middle; a warning holding a progress word (`every iteration`) each step is none."""
    out = []
    for step in range(2500):
        out.append(b"[default0]:%d/9000 [01:23<10:00, 1.23it/s, loss=2.3456]" % step)
        out.append(
            b"[default0]:[W105 10:%02d:00.%09d reducer.cpp:1529] Warning: find_unused_parameters"
            b"=True was specified in DDP constructor, but did not find any unused parameters in "
            b"the forward pass. This flag results in an extra traversal of the autograd graph "
            b"every iteration" % (step % 60, step)
        )
        for r in range(4):
            if r == 2 and step > 700:
                continue
            out.append(
                b"[2026-01-05 10:%02d:00,123] [INFO] [logging.py:96:log_dist] [Rank %d] step=%d, "
                b"skipped=0, lr=[0.0001]" % (step % 60, r, step)
            )
        if step % 3 == 0 and (step < 900 or step % 2):
            out.append(b"%d: epoch %d.%d done" % (5 + step % 2, step // 100, step % 10))
        if 1200 < step < 1210:
            out.append(b"[eval7]: iteration %d/50 | eval loss 1.0" % (step - 1200))
        for n in range(1 if step % 500 > 20 else 40):  # now and then a window of unique lines
            out.append(
                b"noise %x %s" % (step * 7919, bytes(97 + (step * k + n) % 26 for k in range(9)))
            )
    return b"\n".join(out) + b"\n"


@pytest.mark.parametrize("engine", ENGINES)
def test_progress_read_by_shape_or_by_marker_scan_is_the_same(engine: str) -> None:
    data = _mixed_progress_log()
    parsed = {}
    for by_shape in (True, False):
        tables = tables_on(engine)
        parsed[by_shape] = rank_log.parse(
            source_of(data), tables=tables, progress_by_shape=by_shape
        )
    fields = lambda p: [(e.kind, e.line, e.rank, e.text, *_facts(e)) for e in p.events]  # noqa: E731
    assert fields(parsed[True]) == fields(parsed[False])
    steps = {
        (e.rank, e.local_rank): (e.payload.step, e.payload.epoch)
        for e in of_kind(parsed[True], EventKind.PROGRESS)
    }
    assert steps == {
        (0, None): (2499, None),  # DeepSpeed `[Rank 0] step=`
        (1, None): (2499, None),
        (2, None): (700, None),  # stopped early: found from the samples of the chunk
        (3, None): (2499, None),
        (None, 0): (2499, None),  # `[default0]:` tqdm
        (None, 7): (9, None),  # `[eval7]:` printed only for a while
        (5, None): (None, 8.4),  # `srun -l` task 5 stopped early
        (6, None): (None, 24.9),
    }
    full = rank_log.parse(source_of(data), scan_all=True)
    assert fields(full) == fields(parsed[True])


@pytest.mark.parametrize("engine", ENGINES)
def test_the_files_parsed_with_one_set_of_tables_share_what_each_line_shape_is(
    engine: str,
) -> None:
    # a job's rank files print the same shapes: whether a shape is a progress line and where
    # its prefixes end is learnt once per process (the tables'), not again in each file's
    # first windows, and a file reads the same with what others taught as alone
    def rank_file(rank: int) -> bytes:
        out = []
        for step in range(3000):
            out.append(b"[default%d]:%d/9000 [01:23<10:00, 1.23it/s, loss=2.3456]" % (rank, step))
            out.append(
                b"[2026-01-05 10:%02d:00,123] [INFO] [logging.py:96:log_dist] [Rank %d] step=%d, "
                b"skipped=0, lr=[0.0001]" % (step % 60, rank, step)
            )
            out.append(b"[default%d]: every iteration the loader waits %d ms" % (rank, step))
        return b"\n".join(out) + b"\n"

    tables = rank_log.scan_tables().using(engine)
    assert tables.line_shapes == {}
    rank_log.parse(source_of(rank_file(0), "rank_0.log"), tables=tables)
    learnt = dict(tables.line_shapes)
    assert learnt
    second = rank_log.parse(source_of(rank_file(1), "rank_1.log"), tables=tables)
    assert tables.line_shapes == learnt  # nothing new in the same shapes
    alone = rank_log.parse(
        source_of(rank_file(1), "rank_1.log"), tables=rank_log.scan_tables().using(engine)
    )
    fields = lambda p: [(e.kind, e.line, e.rank, e.text, *_facts(e)) for e in p.events]  # noqa: E731
    assert fields(second) == fields(alone)
    assert [e.payload.step for e in of_kind(second, EventKind.PROGRESS)] == [2999, 2999]


def test_older_torch_elastic_restart_and_rendezvous_lines() -> None:
    parsed = parse_fixture("elastic_restart_old_torch.log")
    (exit_,) = of_kind(parsed, EventKind.RANK_EXIT)
    assert exit_.payload.exitcode == -6 and exit_.payload.pid == 1622990
    agent = of_kind(parsed, EventKind.AGENT)
    restart = next(e for e in agent if e.notice.worker_group)
    assert restart.notice == LineNotice(worker_group="FAILED", attempts_left=2, max_attempts=3)
    rendezvous = next(e for e in agent if e.notice.rendezvous)
    assert "RendezvousTimeoutError" in rendezvous.text and rendezvous.level is Level.ERROR
    # mpirun's `[1,1]<stderr>:` names rank 1 for the old-style `[E ProcessGroupNCCL.cpp:456]`
    old_c10 = [e for e in of_kind(parsed, EventKind.ERROR_LINE) if e.payload.src]
    assert {e.rank for e in old_c10} == {1}
    progress = {e.rank: e.payload for e in of_kind(parsed, EventKind.PROGRESS)}
    assert progress[0].step == 700 and progress[1].epoch == 3.0
    assert progress[None].epoch == pytest.approx(2.85)  # HF Trainer's log dict


def test_cuda_error_hints_stay_in_the_exception_and_faulthandler_stacks_are_kept() -> None:
    parsed = parse_fixture("cuda_error_faulthandler.log")
    (tb,) = of_kind(parsed, EventKind.TRACEBACK)
    assert tb.rank == 2 and tb.end_line == 7
    assert tb.exception.exc_message.startswith("CUDA error: an illegal memory access")
    assert "CUDA_LAUNCH_BLOCKING=1" in tb.exception.exc_message
    assert not of_kind(parsed, EventKind.ERROR_LINE)  # the hint lines are not separate errors
    (segv,) = of_kind(parsed, EventKind.SIGNAL)
    assert segv.payload.signal == "SIGSEGV"
    # the faulthandler stack is kept with the signal it explains
    assert segv.payload.frames == (
        ("/w/aug.py", 12, "augment"),
        ("/w/train.py", 30, "main"),
    )


_ALL_FIXTURE_LINES = sorted(
    {line for p in FIXTURES.iterdir() for line in p.read_bytes().splitlines() if line.strip()}
)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("by_shape", [True, False])
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(_ALL_FIXTURE_LINES), min_size=1, max_size=80))
# a torchrun failure table cut above its title: the fast path once missed its rank exit
@example([b"Failures:", b"[0]:", b"  exitcode  : -15 (pid: 41210)  (SIGTERM)"])
def test_fast_path_matches_a_full_read_on_shuffled_log_lines(
    engine: str, by_shape: bool, picked: list[bytes]
) -> None:
    data = b"\n".join(picked) + b"\n"
    full = rank_log.parse(source_of(data), scan_all=True)
    tables = tables_on(engine)
    fast = rank_log.parse(
        source_of(data), scan_all=False, tables=tables, progress_by_shape=by_shape
    )

    def notable(parsed: ParsedSource) -> list:
        return [
            (e.kind, e.line, e.end_line, e.text)
            for e in parsed.events
            if e.kind is not EventKind.PROGRESS
        ]

    assert notable(fast) == notable(full)
    for e in full.events:
        assert e.line is not None and e.end_line is not None and e.line <= e.end_line


def test_a_rank_named_inside_a_message_does_not_move_the_event_to_that_rank() -> None:
    data = (
        b"[E105 10:12:05.426415540 ProcessGroupNCCL.cpp:629] [Rank 3] Timeout at collective: "
        b"ALLREDUCE, #42, lagging ranks: [Rank 5] joined but didn't finish collective #42\n"
        b"RuntimeError: NCCL communicator was aborted; remote error detected from [Rank 5]\n"
    )
    parsed = rank_log.parse(source_of(data, rank=3))
    assert [e.rank for e in of_kind(parsed, EventKind.ERROR_LINE)] == [3, 3]


def test_nccl_warn_message_spanning_lines_is_one_event() -> None:
    data = (
        b"node1:42:43 [0] NCCL INFO Connected all rings\n"
        b"\n"
        b"node1:42:44 [0] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion with error\n"
        b"  opcode 0, len 0, vendor err 129 (Recv)\n"
        b"node1:42:43 [0] NCCL INFO Connected all trees\n"
    )
    parsed = nccl.parse(source_of(data, path="nccl.log"))
    (warn,) = parsed.events
    assert warn.kind is EventKind.NCCL_WARN and (warn.line, warn.end_line) == (3, 4)
    assert warn.text.endswith("vendor err 129 (Recv)")


def test_iter_lines_numbers_physical_lines_and_survives_tiny_chunks() -> None:
    data = b"one\r\ntwo\n 5%|#| 1/20 [00:01]\r[E boom] x\r 10%|#| 2/20 [00:02]\nlast"
    got = list(reader.iter_lines(io.BytesIO(data), chunk_size=64, max_line=64))
    assert got == [
        reader.Line(1, "one"),
        reader.Line(2, "two"),
        reader.Line(3, "[E boom] x"),
        reader.Line(3, " 10%|#| 2/20 [00:02]"),
        reader.Line(4, "last"),
    ]


def test_traceback_pasted_as_an_indented_code_block() -> None:
    text = (
        "I get this error:\n\n"
        "    Traceback (most recent call last):\n"
        '      File "/w/train.py", line 7, in <module>\n'
        "        model.cuda()\n"
        "    RuntimeError: CUDA error: no kernel image is available for execution on the device\n"
    )
    parsed = rank_log.parse(source_of(text.encode()))
    (tb,) = of_kind(parsed, EventKind.TRACEBACK)
    assert tb.exception.exc_type == "RuntimeError"
    assert tb.payload.frames == (("/w/train.py", 7, "<module>"),)


def test_headerless_traceback_pasted_indented() -> None:
    text = (
        '      File "/w/train.py", line 7, in <module>\n'
        "        model.cuda()\n"
        "    AssertionError: Torch not compiled with CUDA enabled\n"
    )
    parsed = rank_log.parse(source_of(text.encode()))
    (tb,) = of_kind(parsed, EventKind.TRACEBACK)
    assert tb.exception.exc_type == "AssertionError" and tb.payload.headerless is True


def test_pasted_traceback_whose_first_frame_was_cut_mid_path_is_a_traceback() -> None:
    # the paste starts inside the first frame's path: its `File "` was cut away
    text = (
        'ckages/deepspeed/runtime/engine.py", line 468, in __getattr__\n'
        '    raise AttributeError(f"no attribute {name}")\n'
        "AttributeError: 'DeepSpeedEngine' object has no attribute 'save_pretrained'\n"
    )
    parsed = rank_log.parse(source_of(text.encode()))
    (tb,) = of_kind(parsed, EventKind.TRACEBACK)
    assert tb.exception.exc_type == "AttributeError" and tb.payload.headerless is True
    assert tb.payload.frames == (("ckages/deepspeed/runtime/engine.py", 468, "__getattr__"),)
    assert tb.line == 1


def test_pasted_traceback_whose_exception_type_was_trimmed_keeps_the_message() -> None:
    text = (
        "Traceback (most recent call last):\n"
        '  File "/w/train.py", line 9, in <module>\n'
        "    plugin.setup()\n"
        "ChunkManager.__init__() takes from 2 to 3 positional arguments but 5 were given\n"
    )
    parsed = rank_log.parse(source_of(text.encode(), kind=SourceKind.TEXT))
    (tb,) = of_kind(parsed, EventKind.TRACEBACK)
    assert tb.exception.exc_type is None and tb.payload.truncated is False
    assert tb.exception.exc_message.startswith("ChunkManager.__init__() takes")
    assert tb.end_line == 4


def test_ordinary_training_output_marks_no_line_for_parsing() -> None:
    # Speed depends on noise never reaching the per-line parser.
    noise = b"".join(
        b"[default%d]: %d/500000 [01:23<10:00, 1.23it/s, loss=2.4687, lr=1.0e-4]\n"
        b"2026-01-05 10:12:08,123 - trainer - INFO - loaded batch %d from shard 7 in 0.1s\n"
        b"[2026-01-05 10:12:08] iteration %8d/  500000 | consumed samples: 1 | elapsed time "
        b"per iteration (ms): 1234.5 | learning rate: 1.5E-04 | lm loss: 6.1E+00 |\n"
        b"[2026-01-05 10:12:08,123] [INFO] [logging.py:96:log_dist] [Rank 0] step=%d, "
        b"skipped=0, lr=[0.0001], mom=[(0.9, 0.999)]\n"
        b"{'loss': 1.8734, 'grad_norm': 0.91, 'learning_rate': 4.9e-05, 'epoch': 0.37}\n"
        % (i % 8, i, i, i, i)
        for i in range(2000)
    )
    for engine in ("numpy", "auto"):
        assert rank_log.scan_tables().markers.using(engine).find(noise) == []


def test_c10_warnings_need_a_telling_word_to_be_kept() -> None:
    data = (
        b"[W1202 08:37:55.611729767 ProcessGroupNCCL.cpp:4715] [PG ID 0 PG GUID 0 Rank 1]  "
        b"Guessing device ID based on global rank. This can cause a hang if rank to GPU mapping "
        b"is heterogeneous. You can specify device_id in init_process_group()\n"
        b"[W1202 08:37:55.700000000 Utils.hpp:110] Environment variable NCCL_BLOCKING_WAIT is "
        b"deprecated; use TORCH_NCCL_BLOCKING_WAIT instead (function operator())\n"
        b"[W1202 08:37:55.700000000 ProcessGroupNCCL.cpp:1001] [PG ID 0 PG GUID 0 Rank 1]  "
        b"using GPU 1 to perform barrier as devices used by this process are currently unknown.\n"
    )
    for scan_all in (True, False):
        parsed = rank_log.parse(source_of(data), scan_all=scan_all)
        # the deprecation notice says nothing; a rule looks for the barrier line's words
        guess, barrier = of_kind(parsed, EventKind.WARNING_LINE)
        assert guess.line == 1 and guess.rank == 1
        assert barrier.line == 3 and "perform barrier" in barrier.text


def test_faulthandler_stack_stays_with_the_segfault_it_explains() -> None:
    """A worker's SIGSEGV and the Python stack faulthandler printed are one event, so a reader
    sees where it crashed (here in the user's own script, innermost frame first)."""
    log = (
        b"[default1]:rank 1 step 8 loss 2.3071\n"
        b"[default1]:Fatal Python error: Segmentation fault\n"
        b"[default1]:\n"
        b"[default1]:Current thread 0x00007f7cfc401b80 (most recent call first):\n"
        b'[default1]:  File "/workspace/train_native_aug.py", line 42 in augment\n'
        b'[default1]:  File "/workspace/train_native_aug.py", line 61 in main\n'
        b"[default1]:\n"
        b"[default1]:Extension modules: numpy._core._multiarray_umath, torch._C (total: 2)\n"
        b"[default0]:rank 0 step 9 loss 2.3065\n"
    )
    parsed = rank_log.parse(source_of(log))
    (fault,) = [e for e in parsed.events if "Fatal Python error" in e.text]
    assert fault.kind is EventKind.SIGNAL
    assert fault.payload.signal == "SIGSEGV"
    assert fault.local_rank == 1
    assert (fault.line, fault.end_line) == (2, 8)
    assert fault.payload.frames[0] == ("/workspace/train_native_aug.py", 42, "augment")
    assert "line 42 in augment" in fault.text
    assert not [e for e in parsed.events if e.kind is EventKind.TRACEBACK]


def test_a_warning_repeated_every_step_is_kept_once_and_is_no_input_warning() -> None:
    log = [
        f"[2026-11-30 10:{i // 60:02d}:{i % 60:02d},000] [WARNING] [stage3.py:1991:step] "
        f"{i % 5 + 1} pytorch allocator cache flushes since last step."
        for i in range(300)
    ]
    parsed = rank_log.parse(source_of(("\n".join(log) + "\n").encode()))
    kept = [e for e in parsed.events if e.kind is EventKind.WARNING_LINE]
    assert len(kept) == 1
    assert parsed.warnings == ()  # nothing was lost: the report must not say otherwise


def test_one_process_log_gives_the_progress_a_full_read_gives() -> None:
    # One stream from the first line to the last: the samples between start and end are
    # skipped, and the answer must not change.
    out = [
        b"[2026-01-05 10:%02d:00,123] [INFO] [logging.py:96:log_dist] [Rank 3] step=%d, "
        b"skipped=0, lr=[0.0001] loss=%d.25" % (step % 60, step, step % 7)
        for step in range(9000)
    ]
    out.insert(4000, b"[2026-01-05 10:11:00,000] [WARNING] [stage3.py:1991:step] cache flush")
    data = b"\n".join(out) + b"\n"
    assert len(data) > 16 * rank_log.PROGRESS_WINDOW
    fast = rank_log.parse(source_of(data))
    full = rank_log.parse(source_of(data), scan_all=True)
    fields = lambda p: [(e.kind, e.line, e.rank, e.text, *_facts(e)) for e in p.events]  # noqa: E731
    assert fields(fast) == fields(full)
    (progress,) = of_kind(fast, EventKind.PROGRESS)
    assert progress.payload.step == 8999 and progress.rank == 3


def test_the_parser_reads_what_later_stages_need_from_an_error_or_progress_line() -> None:
    # later stages read these facts and never the text: a nan metric on a rank's last
    # progress line, gloo's timed-out transport step, a rank tag behind a collector's prefix
    log = (
        "Step 22: loss=0.52\n"
        "Step 23: loss=nan\n"
        "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] "
        "Timed out waiting 10000ms for recv operation to complete\n"
        "collector> host7 | [Rank 2] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=5, OpType=ALLREDUCE, Timeout(ms)=600000)\n"
    )
    events = parse_text(log).events
    (progress,) = [e for e in events if e.kind is EventKind.PROGRESS]
    assert progress.payload.step == 23 and progress.payload.non_finite
    gloo = next(e for e in events if e.c10d is not None and e.c10d.gloo_timeout is not None)
    assert (gloo.c10d.gloo_timeout.step, gloo.c10d.gloo_timeout.timeout_ms) == ("recv", 10000)
    assert [e.tagged_rank for e in events if "Watchdog caught" in e.text] == [2]
    healthy = parse_text("Step 22: loss=0.52\nStep 23: loss=0.50 time=12 nanoseconds\n").events
    assert not healthy[-1].payload.non_finite


def test_gloo_timeout_in_the_first_link_of_a_chained_traceback_is_read() -> None:
    log = (
        "Traceback (most recent call last):\n"
        '  File "train.py", line 60, in main\n'
        "    dist.all_reduce(total)\n"
        "RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out "
        "waiting 12000ms for recv operation to complete\n"
        "\n"
        "During handling of the above exception, another exception occurred:\n"
        "\n"
        "Traceback (most recent call last):\n"
        '  File "train.py", line 62, in main\n'
        "    dist.all_reduce(total)\n"
        "RuntimeError: Application timeout caused pair closure\n"
    )
    (tb,) = [e for e in parse_text(log).events if e.kind is EventKind.TRACEBACK]
    assert tb.c10d is not None and tb.c10d.gloo_timeout is not None
    assert tb.c10d.gloo_timeout.timeout_ms == 12000


def test_a_message_torchs_excepthook_prints_on_several_lines_is_one_error() -> None:
    # DDP's unused-parameter error spans five lines; torch's excepthook puts `[rankN]: ` on each,
    # and the lines after the first start with neither a space nor a known tail word
    data = (
        b"[default1]:[rank1]: Traceback (most recent call last):\n"
        b'[default1]:[rank1]:   File "/workspace/train.py", line 53, in main\n'
        b"[default1]:[rank1]:     logits = model(x)\n"
        b"[default1]:[rank1]: RuntimeError: Expected to have finished reduction in the prior "
        b"iteration before starting a new one. You can enable unused parameter detection by\n"
        b"[default1]:[rank1]: making sure all `forward` function outputs participate in "
        b"calculating loss. \n"
        b"[default1]:[rank1]: Parameter indices which did not receive grad for rank 1: 4 5\n"
        b"[default1]:[rank1]:  In addition, you can set the environment variable "
        b"TORCH_DISTRIBUTED_DEBUG to either INFO or DETAIL to print out information\n"
        b"[default0]:INFO:train:step 1 loss 0.25\n"
        b"[default1]:done waiting\n"
    )
    parsed = rank_log.parse(source_of(data))
    errors = [e for e in parsed.events if e.level in (Level.ERROR, Level.FATAL)]
    assert [(e.kind, e.line, e.end_line) for e in errors] == [(EventKind.TRACEBACK, 1, 7)]
    assert "Parameter indices which did not receive grad for rank 1" in (
        errors[0].exception.exc_message
    )
    # a line of another stream, or of the same rank without the hook's prefix, is not the message
    assert "step 1" not in errors[0].text and "done waiting" not in errors[0].text


def test_a_cpp_message_ends_where_the_next_tagged_log_line_begins() -> None:
    console = (
        "[default2]:terminate called after throwing an instance of 'gloo::EnforceNotMet'\n"
        "[default2]:  what():  [enforce fail at gloo/transport/tcp/pair.cc:456] "
        "op.preamble.length <= op.nbytes. 1336 vs 1328.\n"
        "[default1]:[eval] rank 1 scores samples 334..667 (334)\n"
        "[default2]:[eval] rank=2 world=3 pid=19486\n"
        "[default2]:[eval] rank 2 scores samples 668..999 (332)\n"
        "[default0]:terminate called after throwing an instance of 'c10::DistBackendError'\n"
        "[default0]:  what():  NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error\n"
        "[default0]:ncclSystemError: System call (e.g. socket, malloc) failed.\n"
        "[default0]:[eval] rank 0 scores samples 0..333 (334)\n"
    )
    whats = [e.payload.what for e in of_kind(parse_text(console), EventKind.CPP_EXCEPTION)]
    assert sorted(whats) == [
        "NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error\n"
        "ncclSystemError: System call (e.g. socket, malloc) failed.",
        "[enforce fail at gloo/transport/tcp/pair.cc:456] op.preamble.length <= op.nbytes. "
        "1336 vs 1328.",
    ]


def test_rays_count_of_deduplicated_lines_is_not_part_of_the_traceback() -> None:
    # Ray prints one of many alike worker lines with ` [repeated Nx across cluster]` after it
    suffix = " [repeated 65x across cluster]"
    log = "\n".join(
        [
            "(CursorLoopWorker pid=3388) Traceback (most recent call last):" + suffix,
            '(CursorLoopWorker pid=3388)   File "/app/cursor/env_and_state.py", line 266, in'
            " _extract_action_and_update_cursor" + suffix,
            "(CursorLoopWorker pid=3388)     raise ValueError(msg)" + suffix,
            "(CursorLoopWorker pid=3388) ValueError: step 0 - extract action failed" + suffix,
        ]
    )
    (tb,) = [e for e in parse_text(log + "\n").events if e.kind is EventKind.TRACEBACK]
    assert tb.payload.frames[-1][2] == "_extract_action_and_update_cursor"
    assert tb.exception is not None and tb.exception.exc_type == "ValueError"
    assert tb.exception.exc_message == "step 0 - extract action failed"
