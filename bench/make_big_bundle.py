"""Make a large, realistic failure bundle for the throughput and memory benchmarks.

    python bench/make_big_bundle.py OUT_DIR --ranks 1024 --gib 1 [--seed 7] [--fr-entries 2000]

Layout (8 ranks per host): OUT_DIR/node###/rank_<R>.log per rank (DeepSpeed-style log lines:
progress, NCCL INFO init spam, periodic warnings), one initiating failure (a CUDA OOM
traceback on one rank), then the cascade every other rank prints (watchdog timeout,
connection closed, SIGABRT), a torchrun summary in OUT_DIR/launcher.log, flight-recorder
dumps OUT_DIR/fr/nccl_trace_rank_<R> (schema "2.10") where the failing rank is behind,
and py-spy dumps of a few ranks. Deterministic for a given seed.

The FR dumps are written in torch's own pickle layout (fr_pickle.py, byte-identical to torch's
writer for the same object), or with --fr-layout in Python's (protocol 2 or 4) or as torch's
JSON: they are our own, trusted data.
"""

from __future__ import annotations

import argparse
import json
import pickle
import random
from datetime import datetime, timedelta, timezone
from functools import lru_cache
from pathlib import Path

from fr_pickle import dumps as torch_pickle
from fr_pickle import share_frames

RANKS_PER_HOST = 8
START = datetime(2026, 11, 30, 10, 0, 0, tzinfo=timezone.utc)


def host_of(rank: int) -> str:
    return f"node{rank // RANKS_PER_HOST:03d}"


def ds_time(t: datetime) -> str:
    return t.strftime("%Y-%m-%d %H:%M:%S,") + f"{t.microsecond // 1000:03d}"


def nccl_init_lines(rank: int, world: int, pid: int, rng: random.Random) -> list[str]:
    host, dev = host_of(rank), rank % RANKS_PER_HOST
    prefix = f"{host}:{pid}:{pid + 71} [{dev}] NCCL INFO"
    lines = [
        f"{prefix} NCCL version 2.21.5+cuda12.4",
        f"{prefix} cudaDriverVersion 12040",
        f"{prefix} Bootstrap : Using eth0:10.1.{rank // 256}.{rank % 256}<0>",
        f"{prefix} NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB eth0:10.1.0.1<0>",
        f"{prefix} Using network IB",
        f"{prefix} comm 0x55{rank:06x} rank {rank} nRanks {world} nNodes {world // 8} "
        f"localRanks 8 localRank {dev} MNNVL 0",
    ]
    for channel in range(rng.randint(24, 48)):
        peer = (rank + 1) % world
        via = "P2P/IPC" if peer // 8 == rank // 8 else "NET/IB/0/GDRDMA"
        lines.append(
            f"{prefix} Channel {channel:02d}/0 : {rank}[{dev}] -> {peer}[{peer % 8}] via {via}"
        )
    lines += [
        f"{prefix} Connected all rings",
        f"{prefix} Connected all trees",
        f"{prefix} ncclCommInitRank comm 0x55{rank:06x} rank {rank} nranks {world} cudaDev "
        f"{dev} nvmlDev {dev} busId {0x18 + dev * 0x10:x}000 commId 0x9e17999afaa87dbb "
        "- Init COMPLETE",
    ]
    return lines


def progress_line(t: datetime, rank: int, step: int, rng: random.Random) -> str:
    loss = 2.0 + 4.0 / (1 + step / 500) + rng.random() * 0.05
    return (
        f"[{ds_time(t)}] [INFO] [logging.py:96:log_dist] [Rank {rank}] step={step}, "
        f"skipped=0, lr=[0.00015], mom=[(0.9, 0.95)] loss={loss:.4f} "
        f"samples/sec={rng.uniform(180, 190):.2f}"
    )


def oom_traceback(rank: int, t: datetime) -> list[str]:
    gpu = rank % RANKS_PER_HOST
    return [
        f"[rank{rank}]: Traceback (most recent call last):",
        f'[rank{rank}]:   File "/workspace/pretrain.py", line 212, in <module>',
        f"[rank{rank}]:     main()",
        f'[rank{rank}]:   File "/workspace/pretrain.py", line 198, in main',
        f"[rank{rank}]:     loss = engine(batch)",
        f'[rank{rank}]:   File "/opt/venv/lib/python3.11/site-packages/torch/nn/modules/'
        'module.py", line 1773, in _call_impl',
        f"[rank{rank}]:     return forward_call(*args, **kwargs)",
        f"[rank{rank}]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.50 GiB. "
        f"GPU {gpu} has a total capacity of 79.19 GiB of which 1.02 GiB is free. Including "
        "non-PyTorch memory, this process has 78.15 GiB memory in use. Of the allocated memory "
        "74.90 GiB is allocated by PyTorch, and 2.31 GiB is reserved by PyTorch but "
        "unallocated. If reserved but unallocated memory is large try setting "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.",
    ]


def cascade_lines(rank: int, t: datetime, seq: int, culprit: int, pid: int) -> list[str]:
    c10 = f"[rank{rank}]:[E{t.month}{t.day:02d} {t:%H:%M:%S}.{t.microsecond:06d}123"
    pg = f"[PG ID 0 PG GUID 0(default_pg) Rank {rank}]"
    host = host_of(rank)
    return [
        f"{host}:{pid}:{pid + 90} [{rank % 8}] misc/socket.cc:49 NCCL WARN socketProgress: "
        f"Connection closed by remote peer {host_of(culprit)}<{40000 + culprit}>",
        f"{c10} ProcessGroupNCCL.cpp:632] {pg} Watchdog caught collective operation timeout: "
        f"WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn=25165824, NumelOut=25165824, "
        "Timeout(ms)=600000) ran for 600043 milliseconds before timing out.",
        f"{c10} ProcessGroupNCCL.cpp:2168] {pg}  failure detected by watchdog at work sequence "
        f"id: {seq} PG status: last enqueued work: {seq}, last completed work: {seq - 1}",
        f"{c10} ProcessGroupNCCL.cpp:681] {pg} Some NCCL operations have failed or timed out. "
        "Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run on "
        "corrupted/incomplete data.",
        f"{c10} ProcessGroupNCCL.cpp:695] {pg} To avoid data inconsistency, we are taking the "
        "entire process down.",
        "terminate called after throwing an instance of 'c10::DistBackendError'",
        f"  what():  {pg} Process group watchdog thread terminated with exception: [Rank {rank}] "
        f"Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE,"
        " NumelIn=25165824, NumelOut=25165824, Timeout(ms)=600000) ran for 600043 milliseconds "
        "before timing out.",
    ]


def write_rank_log(
    path: Path,
    rank: int,
    world: int,
    target_bytes: int,
    culprit: int,
    fail_step: int,
    rng: random.Random,
) -> None:
    pid = 40000 + rank
    t = START + timedelta(seconds=rng.uniform(0, 2))
    out: list[str] = nccl_init_lines(rank, world, pid, rng)
    written = sum(len(line) + 1 for line in out)
    step = 0
    with path.open("w", encoding="utf-8") as fh:
        fh.write("\n".join(out) + "\n")
        while written < target_bytes and step < fail_step:
            step += 1
            t += timedelta(milliseconds=rng.randint(900, 1100))
            line = progress_line(t, rank, step, rng)
            if step % 997 == rank % 997:
                line += (
                    f"\n[{ds_time(t)}] [WARNING] [stage3.py:1991:step] 4 pytorch allocator cache"
                    " flushes since last step. this happens when there is high memory pressure"
                )
            fh.write(line + "\n")
            written += len(line) + 1
        t += timedelta(seconds=1)
        if rank == culprit:
            tail = oom_traceback(rank, t)
        else:
            tail = cascade_lines(rank, t + timedelta(seconds=600), step + 1, culprit, pid)
        fh.write("\n".join(tail) + "\n")


def write_fr_dump(
    path: Path, rank: int, world: int, entries: int, behind: bool, layout: str = "torch"
) -> None:
    path.write_bytes(fr_dump_bytes(world, entries, behind, layout))


@lru_cache(maxsize=8)
def fr_dump_bytes(world: int, entries: int, behind: bool, layout: str = "torch") -> bytes:
    """Every rank but the one behind holds the same ring buffer: its bytes are made once."""
    base_ns = int(START.timestamp() * 1e9)
    last = entries - (1 if behind else 0)
    records = []
    first_seq = 5000 - entries
    for i in range(last):
        seq = first_seq + i + 1
        records.append(
            {
                "record_id": seq - 1,
                "pg_id": 0,
                # a fresh tuple per entry: torch's pickler never shares a container between
                # entries (a shared constant tuple would be one memo reference)
                "process_group": tuple(["0", "default_pg"]),
                "thread_id": "140001",
                "thread_name": "pt_main_thread",
                "collective_seq_id": seq,
                "p2p_seq_id": 0,
                "op_id": seq,
                "is_p2p": False,
                "profiling_name": "nccl:all_reduce",
                "time_created_ns": base_ns + seq * 10**9,
                "input_sizes": [[25165824]],
                "input_dtypes": ["BFloat16"],
                "output_sizes": [[25165824]],
                "output_dtypes": ["BFloat16"],
                "state": "completed" if i < last - 1 or behind else "scheduled",
                "time_discovered_started_ns": base_ns + seq * 10**9 + 1000,
                "time_discovered_completed_ns": base_ns + seq * 10**9 + 90000,
                "retired": True,
                "timeout_ms": 600000,
                "duration_ms": 0.09,
                "frames": [
                    {
                        "name": "all_reduce",
                        "filename": "torch/distributed/distributed_c10d.py",
                        "line": 2950,
                    },
                    {"name": "step", "filename": "/workspace/pretrain.py", "line": 198},
                ],
            }
        )
    dump = {
        "version": "2.10",
        "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": str(list(range(world)))}},
        "pg_status": {
            "0": {
                "last_enqueued_collective": first_seq + last,
                "last_started_collective": first_seq + last,
                "last_completed_collective": first_seq + last - (0 if behind else 1),
            }
        },
        "comm_lib_version": "2.21.5",
        "entries": records,
    }
    if layout == "json":  # as `_dump_fr_trace_json` writes it: lists for tuples, no frames
        for record in records:
            record["process_group"] = list(record["process_group"])
            del record["frames"]
        return json.dumps(dump).encode()
    if layout.startswith("p"):  # a dump re-saved with Python's pickler
        return pickle.dumps(share_frames(dump), protocol=int(layout[1:]))
    # torch held one dict per distinct frame (its symbolized-frame table): shared, then written
    return torch_pickle(share_frames(dump))


def write_pyspy(path: Path, rank: int, culprit: int) -> None:
    pid = 40000 + rank
    frames = (
        ["    _call_impl (torch/nn/modules/module.py:1773)", "    main (pretrain.py:198)"]
        if rank == culprit
        else [
            "    all_reduce (torch/distributed/distributed_c10d.py:2950)",
            "    wrapper (torch/distributed/c10d_logger.py:83)",
            "    main (pretrain.py:205)",
        ]
    )
    path.write_text(
        f"Process {pid}: /opt/venv/bin/python3 -u pretrain.py --deepspeed\n"
        "Python v3.11.7 (/usr/bin/python3.11)\n\n"
        f'Thread {pid} (idle): "MainThread"\n'
        + "\n".join(frames)
        + "\n    <module> (pretrain.py:212)\n",
        encoding="utf-8",
    )


def write_launcher(path: Path, world: int, culprit: int) -> None:
    t = START + timedelta(minutes=40)
    blocks = []
    for idx, rank in enumerate(r for r in range(world) if r // 8 == 0):
        code = -6
        blocks.append(
            f"[{idx}]:\n  time      : {t:%Y-%m-%d_%H:%M:%S}\n  host      : {host_of(rank)}\n"
            f"  rank      : {rank} (local_rank: {rank % 8})\n  exitcode  : {code} (pid: "
            f"{40000 + rank})  (SIGABRT)\n  error_file: <N/A>\n  traceback : Signal 6 (SIGABRT)"
            f" received by PID {40000 + rank}"
        )
    sep = "-" * 60
    path.write_text(
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
        + "=" * 60
        + "\npretrain.py FAILED\n"
        + sep
        + "\nFailures:\n"
        + f"\n{sep}\n".join(blocks[1:])
        + f"\n{sep}\nRoot Cause (first observed failure):\n"
        + blocks[0]
        + "\n"
        + "=" * 60
        + "\n",
        encoding="utf-8",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--ranks", type=int, default=1024)
    parser.add_argument("--gib", type=float, default=1.0, help="total size of the rank logs")
    parser.add_argument("--fr-entries", type=int, default=2000)
    parser.add_argument("--pyspy", type=int, default=8, help="how many ranks get a py-spy dump")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()

    rng = random.Random(args.seed)
    culprit = rng.randrange(args.ranks)
    fail_step = 10**9  # the failure comes when a rank's log reaches its share of the size
    per_rank = int(args.gib * 2**30 / args.ranks)
    (args.out / "fr").mkdir(parents=True, exist_ok=True)
    (args.out / "pyspy").mkdir(exist_ok=True)
    for rank in range(args.ranks):
        host_dir = args.out / host_of(rank)
        host_dir.mkdir(exist_ok=True)
        rank_rng = random.Random(args.seed * 100003 + rank)
        write_rank_log(
            host_dir / f"rank_{rank}.log", rank, args.ranks, per_rank, culprit, fail_step, rank_rng
        )
        if args.fr_entries:
            write_fr_dump(
                args.out / "fr" / f"nccl_trace_rank_{rank}",
                rank,
                args.ranks,
                args.fr_entries,
                behind=rank == culprit,
            )
    for rank in sorted({culprit, *rng.sample(range(args.ranks), max(0, args.pyspy - 1))}):
        write_pyspy(args.out / "pyspy" / f"rank{rank}.txt", rank, culprit)
    write_launcher(args.out / "launcher.log", args.ranks, culprit)
    (args.out / "truth.json").write_text(
        json.dumps(
            {
                "culprit_ranks": [culprit],
                "symptom": "S14",
                "root_cause": "R16",
                "ranks": args.ranks,
                "seed": args.seed,
            }
        ),
        encoding="utf-8",
    )
    print(f"wrote {args.out} ({args.ranks} ranks, culprit {culprit})")


if __name__ == "__main__":
    main()
