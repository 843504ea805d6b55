"""The correlate stage on events built by hand: who started it, who merely suffered, where it hangs.

Each test tells one story a user meets in a real job and checks what they would read in the
report: the culprit rank, the hang flag, the finding that explains it.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from triage import knowledge
from triage.analysis import analyse, correlate
from triage.analysis.timeline import estimate_offsets
from triage.model import (
    EnvReport,
    Event,
    EventKind,
    FlightRecorderDump,
    FlightRecorderEntry,
    Level,
    LineNotice,
    NcclLineFacts,
    ParsedSource,
    ProgressFacts,
    PySpyDump,
    PySpyThread,
    RankExit,
    Source,
    SourceKind,
    StackFrame,
)
from triage.parsers import parse_text

T0 = 1_764_664_800.0  # 2025-12-02 08:40:00 UTC


def source(
    path: str,
    kind: SourceKind = SourceKind.RANK_LOG,
    rank: int | None = None,
    host: str | None = None,
    attempt: int | None = None,
) -> Source:
    return Source(
        path=path,
        kind=kind,
        size=1,
        open=lambda: io.BytesIO(b""),
        rank=rank,
        host=host,
        attempt=attempt,
    )


def ps(src: Source, events: Iterable[Event]) -> ParsedSource:
    return ParsedSource(source=src, events=tuple(events))


def ev(
    kind: EventKind,
    text: str,
    *,
    src: str = "console.log",
    rank: int | None = None,
    t: float | None = None,
    line: int | None = 1,
    host: str | None = None,
    pid: int | None = None,
    level: Level = Level.ERROR,
    payload: object = None,
) -> Event:
    return Event(
        source=src,
        kind=kind,
        text=text,
        line=line,
        rank=rank,
        host=host,
        pid=pid,
        time=t,
        level=level,
        payload=payload,  # type: ignore[arg-type]
    )


def _progress(step: int, non_finite: bool = False) -> ProgressFacts:
    """A rank's last progress line as the log parser reads it."""
    return ProgressFacts(step=step, total_steps=None, epoch=None, non_finite=non_finite)


def rank_exit(
    rank: int | None,
    code: int,
    *,
    pid: int | None = None,
    root: bool = False,
    host: str = "node01",
    t: float | None = None,
) -> Event:
    payload = RankExit(
        rank=rank,
        local_rank=rank,
        host=host,
        pid=pid,
        exitcode=code,
        signal=None,
        time=t,
        error_file=None,
        message=None,
        is_root_cause_block=root,
    )
    return ev(EventKind.RANK_EXIT, f"exitcode {code}", rank=rank, payload=payload)


CLOSED = (
    'Traceback (most recent call last):\n  File "train.py", line 93, in main\n'
    "    loss.backward()\nRuntimeError: [../gloo/transport/tcp/pair.cc:553] Connection closed "
    "by peer [127.0.0.1]:5006. This is typically caused by a remote worker crashing."
)
WATCHDOG = (
    "[Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=42, "
    "OpType=ALLREDUCE, NumelIn=4096, NumelOut=4096, Timeout(ms)=600000) ran for 600010 "
    "milliseconds before timing out."
)


def watchdog(r: int, t: float) -> Event:
    """Rank r's watchdog timeout line as the log parser reads it (with its WorkNCCL fields)."""
    (parsed,) = parse_text(WATCHDOG.format(r=r), kind=SourceKind.RANK_LOG).events
    return replace(parsed, source="console.log", rank=r, time=t)


# ------------------------------------------------------------------ initiating vs cascade


def test_rank_that_raised_is_blamed_even_when_the_victims_print_first() -> None:
    victims = [
        ev(EventKind.TRACEBACK, CLOSED, rank=r, t=T0 + 1.0 + r / 10, line=10 * r) for r in (0, 1, 3)
    ]
    culprit = ev(
        EventKind.TRACEBACK,
        'Traceback (most recent call last):\n  File "train.py", line 46, in collate\n'
        "RuntimeError: stack expects each tensor to be equal size, but got [17] at entry 0",
        rank=2,
        t=T0 + 1.5,
        line=99,
    )
    exits = [
        rank_exit(0, -15, pid=100),
        rank_exit(1, -15, pid=101),
        rank_exit(2, 1, pid=102),
        rank_exit(3, -15, pid=103, root=True),
    ]
    a = correlate([ps(source("console.log"), [*victims, culprit, *exits])])

    assert a.culprit_ranks == (2,)
    assert a.first_failure is not None and a.first_failure.rank == 2
    assert "stack expects" in a.first_failure.text
    assert a.hang is None
    assert {e.rank for e in a.cascade_events} == {0, 1, 3}
    first = next(f for f in a.findings if f.kind == "first_failure")
    assert "torchrun" in first.summary and "rank 3" in first.summary  # we say why we disagree
    assert a.facts.torchrun_root_cause_rank == 3
    assert a.facts.culprit_rank == 2


def test_silent_rank_is_the_culprit_of_a_hang_when_everyone_else_times_out() -> None:
    comm = [
        ev(
            EventKind.NCCL_COMM,
            f"ncclCommInitRank comm 0x55 rank {r} nranks 4 cudaDev {r} busId 3b000 - Init COMPLETE",
            rank=r,
            level=Level.INFO,
            payload=NcclLineFacts(None, 500 + r, None, rank=r, nranks=4),
        )
        for r in range(4)
    ]
    timeouts = [watchdog(r, T0 + 600 + r) for r in range(3)]
    exits = [rank_exit(r, -6, pid=500 + r, root=(r == 0)) for r in range(3)]
    a = correlate([ps(source("console.log"), [*comm, *timeouts, *exits])])

    assert a.culprit_ranks == (3,)
    assert a.hang is not None and a.hang.detected
    assert a.hang.collective and a.hang.collective.op == "allreduce"
    assert a.hang.collective.timeout_ms == 600000
    assert any(f.kind == "missing_rank" and f.ranks == (3,) for f in a.findings)
    assert a.facts.world_size == 4


def test_oom_killed_rank_is_blamed_and_the_sigterm_survivors_are_not() -> None:
    events = [
        rank_exit(0, -15, pid=10),
        rank_exit(1, -9, pid=11),
        rank_exit(2, -15, pid=12, root=True),
        rank_exit(3, -15, pid=13),
        *[ev(EventKind.TRACEBACK, CLOSED, rank=r, t=T0 + r) for r in (0, 2, 3)],
    ]
    a = correlate([ps(source("console.log"), events)])
    assert a.culprit_ranks == (1,)
    assert a.hang is None
    killed = next(f for f in a.findings if f.kind == "rank_exit" and f.facts.exitcode == -9)
    assert killed.ranks == (1,)
    assert "OOM killer" in killed.facts.meaning
    assert a.facts.exitcode == -9 and a.facts.signal == "SIGKILL"
    survivors = next(f for f in a.findings if f.kind == "rank_exit" and f.facts.exitcode == -15)
    assert survivors.ranks == (0, 2, 3) and "stopped by the launcher" in survivors.summary


def test_remote_error_lines_point_at_the_rank_that_died() -> None:
    events = [
        ev(
            EventKind.ERROR_LINE,
            f"[Rank {r}] NCCL communicator encountered error set by ProcessGroupNCCL: remote "
            "error detected from rank: 5",
            rank=r,
            t=T0 + r,
        )
        for r in range(8)
        if r != 5
    ]
    a = correlate([ps(source("console.log"), events)])
    assert a.culprit_ranks == (5,)
    assert len(a.cascade_events) == 7


def test_thousand_identical_cascade_lines_fold_into_one_timeline_entry() -> None:
    events = [
        ev(EventKind.ERROR_LINE, WATCHDOG.format(r=r), rank=r, t=T0 + 600 + r / 1000)
        for r in range(1, 1024)
    ]
    events.append(
        ev(
            EventKind.TRACEBACK,
            "Traceback (most recent call last):\ntorch.OutOfMemoryError: CUDA out of memory. "
            "Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB",
            rank=0,
            t=T0 + 5,
        )
    )
    a = correlate([ps(source("console.log"), events)])
    assert a.culprit_ranks == (0,)
    # the others waited until their watchdog fired: a hang, started by rank 0's crash
    assert a.hang is not None and a.hang.detected
    assert "had already hit an error" in a.hang.explanation
    cascade = [t for t in a.timeline if t.role == "cascade"]
    assert len(cascade) == 1 and "x1023" in cascade[0].text
    assert [t.role for t in a.timeline][0] == "initiating"  # OOM first, in time order


def test_every_rank_hitting_the_same_bug_blames_them_all() -> None:
    bug = "Traceback (most recent call last):\nKeyError: 'labels'"
    a = correlate(
        [ps(source("console.log"), [ev(EventKind.TRACEBACK, bug, rank=r, t=T0) for r in range(4)])]
    )
    assert a.culprit_ranks == (0, 1, 2, 3)


def test_nothing_to_go_on_names_nobody_and_does_not_crash() -> None:
    assert correlate([]).culprit_ranks == ()
    odd = ev(EventKind.INPUT_WARNING, "could not read this", rank=None)
    a = correlate([ps(source("x.bin", SourceKind.TEXT), [odd])])
    assert a.culprit_ranks == () and a.hang is None and a.first_failure is None


# ------------------------------------------------------------------ clocks


def test_skewed_host_clock_is_aligned_on_shared_init_events() -> None:
    # node02's clock runs 30 s ahead; NCCL Init COMPLETE of one communicator is the anchor
    inits = [
        ev(
            EventKind.NCCL_COMM,
            f"ncclCommInitRank comm 0x1 rank {r} nranks 4 cudaDev 0 busId 1 commId 0xabc "
            "- Init COMPLETE",
            rank=r,
            host=host,
            t=T0 + (30 if host == "node02" else 0),
            level=Level.INFO,
            # as the NCCL parser reads it
            payload=NcclLineFacts(host, None, None, rank=r, nranks=4, comm_id="0xabc"),
        )
        for r, host in ((0, "node01"), (1, "node01"), (2, "node02"), (3, "node02"))
    ]
    # rank 2 (node02) fails at true time T0+100, printed as T0+130; node01 reacts at T0+101
    culprit = ev(
        EventKind.ERROR_LINE,
        "RuntimeError: CUDA error: an illegal memory access",
        rank=2,
        host="node02",
        t=T0 + 130,
    )
    victim = ev(
        EventKind.ERROR_LINE,
        "socketProgress: Connection closed by remote peer node02<4242>",
        rank=0,
        host="node01",
        t=T0 + 101,
    )
    other = ev(
        EventKind.ERROR_LINE,
        "RuntimeError: illegal instruction in kernel",
        rank=3,
        host="node02",
        t=T0 + 133,
    )
    a = correlate([ps(source("all.log"), [*inits, culprit, victim, other])])
    order = [t.rank for t in a.timeline if t.role != "context"]
    assert order[0] == 2  # aligned: the culprit is first, though its raw stamp is the latest
    assert a.culprit_ranks[0] == 2
    assert estimate_offsets({"a": {"node01": 0.0, "node02": 30.0}})["node02"] == pytest.approx(30.0)


# ------------------------------------------------------------------ flight recorder


def entry(
    seq: int,
    op: str = "all_reduce",
    *,
    pg: str = "0",
    desc: str = "default_pg",
    sizes: tuple[tuple[int, ...], ...] = ((1024,),),
    dtype: str = "Float",
    state: str = "scheduled",
    backend: str = "gloo",
    t_ns: int | None = None,
    p2p: bool = False,
) -> FlightRecorderEntry:
    return FlightRecorderEntry(
        record_id=seq,
        pg_name=pg,
        pg_desc=desc,
        collective_seq_id=0 if p2p else seq,
        p2p_seq_id=seq if p2p else 0,
        op_id=seq,
        is_p2p=p2p,
        profiling_name=f"{backend}:{op}",
        input_sizes=sizes,
        output_sizes=sizes,
        input_dtypes=(dtype,),
        output_dtypes=(dtype,),
        state=state,
        time_created_ns=t_ns,
        time_started_ns=None,
        time_completed_ns=None,
        duration_ms=None,
        timeout_ms=600000,
        retired=False,
    )


def fr_source(
    rank: int, entries: Sequence[FlightRecorderEntry], *, pg_config=None, version="2.10"
) -> ParsedSource:
    dump = FlightRecorderDump(
        rank=rank,
        version=version,
        pg_config=pg_config if pg_config is not None else {"": (0, 1)},
        pg_desc={},
        pg_status={},
        comm_lib_version="",
        entries=tuple(entries),
    )
    path = f"fr/nccl_trace_rank_container-node02_{rank}"
    src = source(path, SourceKind.FLIGHT_RECORDER, rank=rank)
    return ps(
        src,
        [
            ev(
                EventKind.FLIGHT_RECORDER,
                f"FR dump rank {rank}",
                src=path,
                rank=rank,
                payload=dump,
                level=Level.INFO,
            )
        ],
    )


def test_rank_behind_in_the_flight_recorder_is_the_hang_culprit() -> None:
    dumps = [
        fr_source(
            r, [entry(s) for s in range(1, 43 if r != 3 else 42)], pg_config={"0": (0, 1, 2, 3)}
        )
        for r in range(4)
    ]
    a = correlate(dumps)
    assert a.culprit_ranks == (3,)
    assert a.hang is not None and a.hang.detected
    assert a.hang.lagging_ranks == (3,)
    assert a.hang.process_group == "0 (default_pg)"
    assert (
        a.hang.collective and a.hang.collective.seq == 42 and a.hang.collective.op == "all_reduce"
    )
    lag = next(f for f in a.findings if f.kind == "lagging_rank")
    assert "stopped at collective #41" in lag.summary


def test_rank_without_a_dump_is_reported_missing_and_blamed() -> None:
    # 4 ranks, rank 1 left no dump; gloo's broken pg_config ({'': ...}) must not stop us
    dumps = [
        fr_source(r, [entry(s) for s in range(1, 8)], pg_config={"": (0, 1, 2, 3)})
        for r in (0, 2, 3)
    ]
    a = correlate(dumps)
    missing = next(f for f in a.findings if f.kind == "missing_rank")
    assert missing.ranks == (1,)
    assert a.culprit_ranks == (1,)


def test_mismatch_inside_wrapped_buffers_is_still_found() -> None:
    # different wrap points, and rank 1 disagrees at 180, inside the shared window
    d0 = fr_source(0, [entry(s) for s in range(100, 201)], pg_config={"0": (0, 1, 2)})
    d1 = fr_source(
        1,
        [entry(s, sizes=((7,),) if s == 180 else ((1024,),)) for s in range(150, 201)],
        pg_config={"0": (0, 1, 2)},
    )
    d2 = fr_source(2, [entry(s) for s in range(120, 201)], pg_config={"0": (0, 1, 2)})
    a = correlate([d0, d1, d2])
    mm = next(f for f in a.findings if f.kind == "collective_mismatch")
    assert mm.ranks == (1,) and mm.facts.seq == 180 and mm.facts.mismatch == "size"


def test_first_dtype_mismatch_names_the_odd_rank_and_the_collective() -> None:
    dumps = []
    for r in range(4):
        es = [entry(s) for s in range(1, 10)]
        es.append(entry(10, dtype="Int" if r == 2 else "Float"))
        es.append(entry(11, op="broadcast" if r == 2 else "all_reduce"))  # later: not the first
        dumps.append(fr_source(r, es, pg_config={"0": (0, 1, 2, 3)}))
    a = correlate(dumps)
    mm = next(f for f in a.findings if f.kind == "collective_mismatch")
    assert mm.ranks == (2,)
    assert mm.facts.seq == 10 and mm.facts.mismatch == "dtype"
    assert mm.facts.dtypes[2] == ("Int",)
    assert a.culprit_ranks == (2,)


def test_ring_buffers_that_wrapped_at_different_points_are_not_a_mismatch() -> None:
    # rank 0 kept 100..200, rank 1 kept 150..200: only the shared window is compared, so
    # rank 0's older records (a different dtype, long ago) are not held against rank 1
    d0 = fr_source(
        0,
        [entry(s, dtype="Int" if s < 150 else "Float") for s in range(100, 201)],
        pg_config={"0": (0, 1)},
    )
    d1 = fr_source(1, [entry(s) for s in range(150, 201)], pg_config={"0": (0, 1)})
    a = correlate([d0, d1])
    assert not [f for f in a.findings if f.kind in ("collective_mismatch", "lagging_rank")]
    assert a.culprit_ranks == ()


def test_nccl_rank_that_never_started_the_collective_is_behind() -> None:
    dumps = []
    for r in range(4):
        es = [entry(s, backend="nccl", state="completed") for s in range(1, 42)]
        es.append(entry(42, backend="nccl", state="scheduled" if r == 1 else "started"))
        dumps.append(fr_source(r, es, pg_config={"0": (0, 1, 2, 3)}))
    a = correlate(dumps)
    assert a.culprit_ranks == (1,)
    assert a.hang is not None and a.hang.detected and a.hang.lagging_ranks == (1,)
    assert any("never started" in f.summary for f in a.findings)


def test_p2p_sends_and_coalesced_ops_do_not_confuse_the_matcher() -> None:
    dumps = []
    for r in range(2):
        es = [
            entry(1),
            entry(2, op="send 0->1" if r == 0 else "recv 1<-0", p2p=True, sizes=((4,),)),
        ]
        es += [
            entry(3, op="all_gather_into_tensor_coalesced"),
            entry(3, op="all_gather_into_tensor_coalesced"),
        ]
        dumps.append(fr_source(r, es, pg_config={"0": (0, 1)}))
    a = correlate(dumps)
    assert not [f for f in a.findings if f.kind in ("collective_mismatch", "lagging_rank")]


def test_a_big_jobs_flight_recorder_names_the_one_rank_behind() -> None:
    # its time is measured by bench/guard_timings.py (wall-clock limits stay out of the tests)
    shared = [entry(s, backend="nccl", state="completed") for s in range(1, 2001)]
    dumps = [
        fr_source(r, shared if r != 77 else shared[:-1], pg_config={"0": tuple(range(256))})
        for r in range(256)
    ]
    assert correlate(dumps).culprit_ranks == (77,)


@pytest.mark.slow
def test_a_1024_rank_flight_recorder_names_the_rank_two_records_short() -> None:
    # distinct records per rank (as parsed from 1,024 files), sharing only small field values
    sizes = ((1024, 4096),)
    dumps = [
        fr_source(
            r,
            [
                entry(s, backend="nccl", state="completed", sizes=sizes, t_ns=s * 1000 + r)
                for s in range(1, 2001 if r != 500 else 1998)
            ],
            pg_config={"0": tuple(range(1024))},
        )
        for r in range(1024)
    ]
    assert correlate(dumps).culprit_ranks == (500,)


# ------------------------------------------------------------------ py-spy


def stack(*frames: tuple[str, str]) -> tuple[StackFrame, ...]:
    return tuple(
        StackFrame(function=f, filename=fi, line=i + 1) for i, (f, fi) in enumerate(frames)
    )


def spy_source(pid: int, frames: tuple[StackFrame, ...]) -> ParsedSource:
    dump = PySpyDump(
        pid=pid,
        command="python train.py",
        python_version="3.11.7",
        threads=(
            PySpyThread("1", "pt_autograd_0", "idle", False, stack(("run", "threading.py"))),
            PySpyThread(str(pid), "MainThread", "idle", False, frames),
        ),
    )
    path = f"pyspy/{pid}.txt"
    src = source(path, SourceKind.PYSPY)
    return ps(
        src,
        [
            ev(
                EventKind.PYSPY,
                f"py-spy dump of {pid}",
                src=path,
                pid=pid,
                payload=dump,
                level=Level.INFO,
            )
        ],
    )


def test_rank_saving_a_checkpoint_while_the_others_wait_in_barrier_is_the_suspect() -> None:
    waiting = stack(
        ("barrier", "torch/distributed/distributed_c10d.py"),
        ("wrapper", "torch/distributed/c10d_logger.py"),
        ("train_step", "/workspace/train.py"),
        ("<module>", "/workspace/train.py"),
    )
    saving = stack(
        ("write", "/usr/lib/python3.11/shutil.py"),
        ("save", "torch/serialization.py"),
        ("save_checkpoint", "/workspace/train.py"),
        ("<module>", "/workspace/train.py"),
    )
    # py-spy knows pids, not ranks: the torchrun summary maps them
    console = ps(source("console.log"), [rank_exit(r, -15, pid=4000 + r) for r in range(4)])
    spies = [spy_source(4000 + r, saving if r == 1 else waiting) for r in range(4)]
    a = correlate([console, *spies])
    assert a.culprit_ranks == (1,)
    outlier = next(f for f in a.findings if f.kind == "stack_outlier")
    assert outlier.ranks == (1,)
    assert "save_checkpoint" in outlier.summary and "/workspace/train.py" in outlier.summary
    assert a.facts.user_frame.startswith("save_checkpoint")
    assert a.hang is not None and a.hang.detected and a.hang.lagging_ranks == (1,)


def test_py_spy_dump_without_a_known_pid_is_not_guessed_onto_a_rank() -> None:
    waiting = stack(("all_reduce", "torch/distributed/distributed_c10d.py"), ("main", "train.py"))
    a = correlate([spy_source(1, waiting), spy_source(2, waiting)])
    assert a.culprit_ranks == ()


# ------------------------------------------------------------------ progress


def test_rank_whose_last_logged_step_is_behind_is_a_suspect() -> None:
    events = [
        ev(EventKind.PROGRESS, f"step {s}", rank=r, level=Level.INFO, payload=_progress(s))
        for r, s in ((0, 120), (1, 120), (2, 119), (3, 120))
    ]
    events += [ev(EventKind.ERROR_LINE, WATCHDOG.format(r=r), rank=r, t=T0) for r in range(4)]
    a = correlate([ps(source("console.log"), events)])
    div = next(f for f in a.findings if f.kind == "progress_divergence")
    assert div.ranks == (2,) and "behind" in div.summary
    assert a.culprit_ranks == (2,)


# ------------------------------------------------------------------ consistency


def env_source(rank: int, host: str, nccl: str, env: dict[str, str]) -> ParsedSource:
    report = EnvReport(
        report_kind="collect_env", facts={"torch": "2.13.0+cu124", "nccl": nccl}, env_vars=env
    )
    path = f"{host}/rank{rank}/collect_env.txt"
    src = source(path, SourceKind.ENV_REPORT, rank=rank, host=host)
    return ps(
        src,
        [
            ev(
                EventKind.ENV_REPORT,
                "collect_env",
                src=path,
                rank=rank,
                host=host,
                payload=report,
                level=Level.INFO,
            )
        ],
    )


def test_one_node_with_a_different_nccl_and_transport_is_flagged() -> None:
    envs = [
        env_source(
            r,
            "node01" if r < 2 else "node02",
            "2.18.1" if r == 3 else "2.21.5",
            {"NCCL_IB_DISABLE": "1" if r >= 2 else "0", "WORLD_SIZE": "4"},
        )
        for r in range(4)
    ]
    # node02 fell back to sockets: each node's NCCL_DEBUG lines name the network it uses
    transports = parse_text(
        "node01:100:101 [0] NCCL INFO Using network IB\n"
        "node02:200:201 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.2<0>\n",
        "nccl.log",
        SourceKind.NCCL,
    )
    a = correlate([*envs, transports])
    kinds = {f.kind: f for f in a.findings}
    assert "2.18.1 on rank 3" in kinds["version_mismatch"].summary
    assert kinds["version_mismatch"].ranks == (3,)
    assert "NCCL_IB_DISABLE" in kinds["env_mismatch"].summary
    assert "Socket" in kinds["transport_mismatch"].summary
    assert a.facts.nccl == "2.21.5" and a.facts.torch == "2.13.0+cu124"


def test_a_variable_each_rank_sets_for_itself_is_no_mismatch() -> None:
    # NCCL_DEBUG_FILE names each rank's own file (rules/agreement.yaml, per_rank): that the
    # ranks' values differ is by design; NCCL_IB_HCA differing is a node set up differently
    envs = [
        env_source(
            r,
            "node01",
            "2.21.5",
            {"NCCL_DEBUG_FILE": f"/tmp/nccl.{r}.log", "NCCL_IB_HCA": "mlx5_0" if r else "mlx5_1"},
        )
        for r in range(2)
    ]
    a = correlate(envs)
    mismatched = [f.summary for f in a.findings if f.kind == "env_mismatch"]
    assert len(mismatched) == 1 and "NCCL_IB_HCA" in mismatched[0]


# ------------------------------------------------------------------ exits and restarts


def test_elastic_restarts_are_counted_from_attempt_folders() -> None:
    parsed = [
        ps(
            source(f"logs/attempt_{k}/0/stderr.log", rank=0, attempt=k),
            [rank_exit(0, 1, pid=10 + k)],
        )
        for k in range(3)
    ]
    a = correlate(parsed)
    restart = next(f for f in a.findings if f.kind == "restart")
    assert restart.facts.attempts == 3
    assert len(a.rank_exits) == 3


def test_rank_whose_own_loss_went_nan_is_blamed_when_every_rank_raises_the_same_error() -> None:
    raised = "Traceback (most recent call last):\nFloatingPointError: loss became nan at step 23"
    events = [ev(EventKind.TRACEBACK, raised, rank=r, t=T0 + 5) for r in range(4)]
    events += [
        ev(
            EventKind.PROGRESS,
            f"step 23 local_loss {'nan' if r == 1 else '0.51'}",
            rank=r,
            level=Level.INFO,
            payload=_progress(23, non_finite=r == 1),
        )
        for r in range(4)
    ]
    a = correlate([ps(source("train.log"), events)])
    assert a.culprit_ranks == (1,)
    # the failure quoted is the error rank 1 raised; its loss going nan is its first sign,
    # on the timeline
    assert a.first_failure is not None and a.first_failure.rank == 1
    assert "FloatingPointError" in a.first_failure.text
    assert any("local_loss nan" in t.text and t.rank == 1 for t in a.timeline)
    # the copies of the same error on the other ranks are consequences, not causes
    assert {e.rank for e in a.initiating_events} == {1}
    assert {e.rank for e in a.cascade_events} == {0, 2, 3}


def test_ranks_of_a_node_that_never_joined_the_rendezvous_are_the_culprits() -> None:
    agent = PySpyDump(
        pid=900,
        command="/venv/bin/python3 /venv/bin/torchrun --nnodes=2 --nproc-per-node=2 "
        "--node-rank=0 --master-port=29500 train.py",
        python_version="3.11.7",
        threads=(),
    )
    store = ev(
        EventKind.TRACEBACK,
        "Traceback (most recent call last):\ntorch.distributed.DistStoreError: Timed out after "
        "21 seconds waiting for clients. 1/2 clients joined.",
        t=T0 + 21,
    )
    parsed = [
        ps(source("node01.log"), [store]),
        ps(
            source("pyspy/torchrun.txt", SourceKind.PYSPY),
            [ev(EventKind.PYSPY, "agent", src="pyspy/torchrun.txt", pid=900, payload=agent)],
        ),
    ]
    a = correlate(parsed)
    assert a.culprit_ranks == (2, 3)
    assert a.facts.world_size == 4
    assert a.hang is not None and a.hang.detected
    joined = next(f for f in a.findings if f.kind == "missing_rank")
    assert "never started" in joined.summary and "1/2 agents joined" in joined.summary


def test_a_readme_beside_the_logs_never_becomes_the_first_failure() -> None:
    note = ps(
        source("README.md", SourceKind.TEXT),
        [
            ev(
                EventKind.ERROR_LINE,
                "RuntimeError: CUDA error: an illegal memory access",
                src="README.md",
            )
        ],
    )
    log = ps(
        source("rank1.log", rank=1),
        [ev(EventKind.TRACEBACK, "Traceback:\nValueError: bad row", rank=1, t=T0)],
    )
    a = correlate([note, log])
    assert a.culprit_ranks == (1,)
    assert all(t.source != "README.md" for t in a.timeline)


def test_peer_closed_messages_point_at_the_host_that_went_away() -> None:
    comm = [
        ev(
            EventKind.NCCL_COMM,
            f"ncclCommInitRank comm 0x7 rank {r} nranks 4 cudaDev {r % 2} busId 1 - Init COMPLETE",
            rank=r,
            host=host,
            pid=700 + r,
            level=Level.INFO,
            payload=NcclLineFacts(host, 700 + r, None, rank=r, nranks=4),
        )
        for r, host in ((0, "node01"), (1, "node01"), (2, "node02"), (3, "node02"))
    ]
    closed = [
        ev(
            EventKind.NCCL_WARN,
            "misc/socket.cc:49 NCCL WARN socketProgress: Connection closed by remote peer "
            "node02<42830>",
            rank=r,
            host="node01",
            t=T0 + r,
        )
        for r in (0, 1)
    ]
    a = correlate([ps(source("node01.log", SourceKind.NCCL), [*comm, *closed])])
    assert a.culprit_ranks == (2, 3)
    assert a.hang is None  # they got an error at once: the node died, nothing waited


def test_desync_report_names_the_rank_that_never_joined() -> None:
    report = (
        "[Rank 0] Timeout at NCCL work: 42, last enqueued NCCL work: 42, last completed NCCL work: "
        "41.\n\t - To our best knowledge, the lagging/dead/mismatched ranks that caused the desync "
        "are:\n\t - [Rank 6] finished collective #41, but didn't join collective #42 (count from 1)"
    )
    events = [ev(EventKind.ERROR_LINE, WATCHDOG.format(r=r), rank=r, t=T0 + 600) for r in range(8)]
    events.append(ev(EventKind.ERROR_LINE, report, rank=0, t=T0 + 601))
    a = correlate([ps(source("console.log"), events)])
    assert a.culprit_ranks == (6,)
    assert a.hang is not None and a.hang.detected


# ------------------------------------------------------------------ robustness

_KINDS = [k for k in EventKind if k not in (EventKind.FLIGHT_RECORDER, EventKind.PYSPY)]
_TEXTS = [
    "",
    "Traceback (most recent call last):\nValueError: x",
    WATCHDOG.format(r=3),
    "Connection closed by peer [10.0.0.7]:4242",
    "remote error detected from rank: 99",
    "step nan",
    "\x00\ufffd weird bytes",
]


_ODD_INT = st.one_of(st.none(), st.integers(-3, 10))


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(_KINDS),
            st.sampled_from(_TEXTS),
            st.one_of(st.none(), st.integers(-5, 2000)),
            st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True)),
            st.one_of(
                st.none(),
                st.builds(
                    NcclLineFacts,
                    st.one_of(st.none(), st.text(max_size=5)),
                    _ODD_INT,
                    _ODD_INT,
                    rank=_ODD_INT,
                    nranks=_ODD_INT,
                    comm_id=st.one_of(st.none(), st.text(max_size=5)),
                ),
                st.builds(ProgressFacts, _ODD_INT, _ODD_INT, st.one_of(st.none(), st.floats())),
            ),
            st.one_of(st.none(), st.builds(LineNotice, world_size=_ODD_INT, exitcode=_ODD_INT)),
        ),
        max_size=25,
    )
)
def test_odd_events_never_crash_the_analysis(rows: list) -> None:
    events = [
        replace(ev(k, t, rank=r, t=time_, payload=payload), notice=notice)
        for k, t, r, time_, payload, notice in rows
    ]
    a = analyse([ps(source("x.log"), events)])  # the unguarded core: bugs show up here
    assert all(isinstance(r, int) for r in a.culprit_ranks)


def test_after_an_elastic_restart_only_the_last_attempts_dumps_count() -> None:
    def attempt_dump(rank: int, attempt: int, last: int) -> ParsedSource:
        parsed = fr_source(rank, [entry(s) for s in range(1, last + 1)], pg_config={"0": (0, 1)})
        src = replace(parsed.source, attempt=attempt, path=f"attempt_{attempt}/fr/rank_{rank}")
        return replace(parsed, source=src)

    # attempt 0: rank 1 was behind; attempt 1 (the final failure): rank 0 is behind
    parsed = [
        attempt_dump(0, 0, 9),
        attempt_dump(1, 0, 8),
        attempt_dump(0, 1, 3),
        attempt_dump(1, 1, 4),
    ]
    a = correlate(parsed)
    assert a.culprit_ranks == (0,)


def test_hang_report_names_the_line_of_user_code_that_issued_the_collective() -> None:
    frames = (
        StackFrame(
            "all_reduce",
            "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py",
            2950,
        ),
        StackFrame("sync_metrics", "/workspace/train.py", 88),
    )
    dumps = []
    for r in range(2):
        es = [entry(s) for s in range(1, 5 if r == 0 else 4)]
        es[-1] = es[-1]._replace(frames=frames)
        dumps.append(fr_source(r, es, pg_config={"0": (0, 1)}))
    a = correlate(dumps)
    assert a.hang is not None and a.hang.collective
    assert a.hang.collective.call_site == "sync_metrics (/workspace/train.py:88)"


def test_flight_recorder_records_of_one_collective_line_up_skewed_host_clocks() -> None:
    # node02's clock is 45 s ahead: its FR records of the same collectives say so
    parsed = []
    for r, host in ((0, "node01"), (1, "node02")):
        skew = 45_000_000_000 if host == "node02" else 0
        es = [entry(s, t_ns=int(T0 * 1e9) + s * 1_000_000 + skew) for s in range(1, 30)]
        p = fr_source(r, es, pg_config={"0": (0, 1)})
        parsed.append(replace(p, source=replace(p.source, host=host)))
    # node02's rank 1 really failed first (T0+10 true, printed T0+55); node01 reacted at T0+11
    parsed.append(
        ps(
            source("node02.log", rank=1, host="node02"),
            [
                ev(
                    EventKind.ERROR_LINE,
                    "RuntimeError: CUDA error: unspecified launch failure",
                    rank=1,
                    host="node02",
                    t=T0 + 55,
                )
            ],
        )
    )
    parsed.append(
        ps(
            source("node01.log", rank=0, host="node01"),
            [ev(EventKind.TRACEBACK, CLOSED, rank=0, host="node01", t=T0 + 11)],
        )
    )
    a = correlate(parsed)
    stamped = [t for t in a.timeline if t.role in ("initiating", "cascade")]
    assert [t.rank for t in stamped] == [1, 0]
    assert stamped[0].time == pytest.approx(T0 + 10, abs=0.5)


def test_rank_missing_below_the_complaining_ones_is_blamed_without_a_stated_world_size() -> None:
    # a pasted console: ranks 1-3 time out in allreduce #2; rank 0 (tokenizing) says nothing
    text_lines = [
        f"Running tokenizer:  9%|███| [E ProcessGroupNCCL.cpp:475] {WATCHDOG.format(r=r)}"
        for r in (1, 2, 3)
    ]
    pasted = parse_text("\n".join(text_lines))
    # the progress bar glued before the prefix hides it; the parser still reads each tag
    assert [e.tagged_rank for e in pasted.events if e.kind is EventKind.ERROR_LINE] == [1, 2, 3]
    a = correlate([pasted])
    assert a.culprit_ranks == (0,)
    assert a.first_failure is not None and a.first_failure.rank == 0
    assert a.hang is not None and a.hang.detected


def test_one_pasted_timeout_line_does_not_blame_a_rank_it_never_mentions() -> None:
    a = correlate(
        [ps(source("<pasted>", SourceKind.TEXT), [ev(EventKind.ERROR_LINE, WATCHDOG.format(r=1))])]
    )
    assert a.culprit_ranks == ()
    assert a.hang is not None and a.hang.detected


def test_a_bug_in_the_analysis_becomes_a_finding_instead_of_a_crash() -> None:
    # knowledge built by hand past the validator: the culprit vote meets a signal it cannot weigh
    kb = knowledge.shipped()
    broken = replace(kb, culprit=replace(kb.culprit, signals={}))
    raised = "RuntimeError: CUDA error: an illegal memory access was encountered"
    a = correlate(
        [ps(source("rank_1.log", rank=1), [ev(EventKind.TRACEBACK, raised, rank=1)])], broken
    )
    assert a.culprit_ranks == () and a.findings[0].kind == "analysis_error"
    assert "KeyError" in a.findings[0].summary


def test_a_difference_inside_a_coalesced_group_is_a_mismatch() -> None:
    dumps = []
    for r in range(3):
        second = ((8,),) if r == 2 else ((16,),)
        es = [entry(1), entry(2)]
        es += [
            entry(3, op="reduce_scatter_tensor_coalesced", backend="nccl"),
            entry(3, op="reduce_scatter_tensor_coalesced", backend="nccl", sizes=second),
        ]
        dumps.append(fr_source(r, es, pg_config={"0": (0, 1, 2)}))
    a = correlate(dumps)
    mm = next(f for f in a.findings if f.kind == "collective_mismatch")
    assert mm.ranks == (2,) and mm.facts.seq == 3


def test_pip_and_collect_env_spellings_of_one_torch_are_not_a_mismatch() -> None:
    def report(kind: str, torch: str) -> ParsedSource:
        payload = EnvReport(report_kind=kind, facts={"torch": torch, "cuda_build": "12.1"})
        path = f"node01/{kind}.txt"
        src = source(path, SourceKind.ENV_REPORT, host="node01")
        return ps(src, [ev(EventKind.ENV_REPORT, kind, src=path, host="node01", payload=payload)])

    a = correlate([report("pip", "2.3.0"), report("collect_env", "2.3.0+cu121")])
    assert not [f for f in a.findings if f.kind == "version_mismatch"]
    assert a.facts.torch == "2.3.0+cu121" and a.facts.cuda == "12.1"


def test_two_rank_job_the_rank_that_only_got_sigterm_is_the_one_the_other_waited_for() -> None:
    gloo = (
        "RuntimeError: [../gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 10000ms "
        "for recv operation to complete"
    )
    events = [
        ev(EventKind.TRACEBACK, f"Traceback (most recent call last):\n{gloo}", rank=1, t=T0 + 10),
        rank_exit(1, 1, pid=11, root=True),
        rank_exit(0, -15, pid=10),
    ]
    a = correlate([ps(source("console.log"), events)])
    assert a.culprit_ranks == (0,)
    assert a.hang is not None and a.hang.detected
    assert a.facts.torchrun_root_cause_rank == 1


# ------------------------------------------------------------------ through the real log parser

# written for this test in the torch 2.6+ / torchrun formats of research/formats.md
NCCL_CONSOLE = Path(__file__).parent / "fixtures" / "analysis" / "nccl_oom_rank3_console.log"


def test_nccl_console_oom_on_rank_3_is_blamed_over_torchruns_root_cause_of_rank_0() -> None:
    from triage.parsers import parse_text

    a = correlate([parse_text(NCCL_CONSOLE.read_text(), "console.log")])
    assert a.culprit_ranks == (3,)
    assert a.facts.torchrun_root_cause_rank == 0
    assert a.hang is not None and a.hang.detected  # the others sat 10 minutes in allreduce #42
    assert a.hang.collective and a.hang.collective.seq == 42
    story = [t for t in a.timeline if t.role != "context"]
    assert story[0].rank == 3 and "out of memory" in story[0].text
    assert all(t.role == "cascade" for t in story[1:])
