"""Grow the logs real training libraries wrote into GB-sized benchmark bundles, one per format.

    python bench/make_real_logs.py OUT --ranks 64 --mib 400 [--formats megatron,hf_trainer,...]

Each OUT/<format>/ is a job of --ranks rank logs adding up to about --mib MiB: the format's
progress lines repeated until the size is reached, then one initiating failure (a CUDA OOM
traceback on one rank) and the cascade every other rank prints (NCCL WARN, watchdog timeout,
terminate). OUT/<format>/truth.json names the culprit. Deterministic.

Where the lines come from (bench/samples/logs/README.md says how each sample was made):

* hf_trainer, lightning, deepspeed, torchrun_console: the real output of tiny CPU trainings
  with each library's own logging (transformers 5.24 Trainer with tqdm redrawn with `\\r` and
  `{'loss': ...}` dicts; Lightning 2.6 with its TQDM bar, one physical line per epoch;
  DeepSpeed 0.19's logger at INFO; a torchrun --tee console with `[default0]:` prefixes). The
  sample is repeated as it is, every number in it shifted on each repetition, so line shapes,
  lengths and `\\r` runs stay the library's own.
* megatron: Megatron-LM's `training_log` line, written in exactly its format (the library
  needs GPUs): `iteration N/ M | consumed samples: ... | number of nan iterations: ... |`.
* nccl_init: NCCL_DEBUG=INFO init output as formats.md §3 gives it, one communicator after
  another (`NCCL INFO` version, bootstrap, ring channels, `Init COMPLETE`).
* adversarial: every line a near miss of a marker needle (`errors=0`, `failed_steps`,
  `NoWarningsFound`, `timed output`, `NCCL_ASYNC_ERROR_HANDLING=1 ...`): the worst case of
  the scan, lines that hold a needle's letters and must still cost nothing.
"""

from __future__ import annotations

import argparse
import json
import random
import re
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

from make_big_bundle import cascade_lines, host_of, nccl_init_lines, oom_traceback

SAMPLES = Path(__file__).resolve().parent / "samples" / "logs"
START = datetime(2026, 11, 30, 10, 0, 0, tzinfo=timezone.utc)
# Every number but a rank's or a local rank's (`[default0]:`, `[rank0]:`, `[Rank 0]`): a
# process keeps its rank however long it logs. Timestamps (ISO `2026-12-03 07:31:58,598`, c10 and
# glog `W1203 07:29:20.918369198`) are read as times and move on by the sample's own span, so
# the grown log's times stay valid and in order, as a real run's do.
_NUMBER = rb"(?<![Dd]efault)(?<![Rr]ank)(?<![Rr]ank )(?<!\d)\d+"
_ISO = rb"(?P<iso>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})(?P<isofrac>[,.]\d+)?"
_C10 = rb"(?<=[IWEF])(?P<c10>\d{4} \d{2}:\d{2}:\d{2})(?P<c10frac>\.\d+)"
_TOKEN = re.compile(_ISO + b"|" + _C10 + b"|" + _NUMBER)


def _stamp(m: re.Match[bytes]) -> tuple[datetime, bytes, bytes] | None:
    """(time, format, fraction) of a timestamp token, None for a plain number."""
    if m["iso"] is not None:
        when = datetime.strptime(m["iso"].decode(), "%Y-%m-%d %H:%M:%S")
        return when, b"%Y-%m-%d %H:%M:%S", m["isofrac"] or b""
    if m["c10"] is not None:
        when = datetime.strptime("2026" + m["c10"].decode(), "%Y%m%d %H:%M:%S")
        return when, b"%m%d %H:%M:%S", m["c10frac"]
    return None


def shifted(sample: bytes) -> Iterator[bytes]:
    """The sample again and again: its timestamps moved on by the sample's span on each
    repetition, every other number in it (ranks aside) plus the repetition's index, zero
    padding kept: the library's line shapes with values that move, as a run's do."""
    tokens = list(_TOKEN.finditer(sample))
    texts = [sample[: tokens[0].start()] if tokens else sample]
    texts += [sample[a.end() : b.start()] for a, b in zip(tokens, tokens[1:], strict=False)]
    if tokens:
        texts.append(sample[tokens[-1].end() :])
    stamps = [_stamp(m) for m in tokens]
    times = [s[0] for s in stamps if s is not None]
    span = (max(times) - min(times) + timedelta(seconds=1)) if times else timedelta(0)
    k = 0
    while True:
        out = [texts[0]]
        for m, stamp, text in zip(tokens, stamps, texts[1:], strict=True):
            if stamp is not None:
                when, fmt, frac = stamp
                out.append((when + k * span).strftime(fmt.decode()).encode() + frac)
            else:
                digits = m[0]
                width = len(digits) if digits[:1] == b"0" else 0  # `03` stays two digits
                out.append(b"%0*d" % (width, int(digits) + k))
            out.append(text)
        yield b"".join(out)
        k += 1


def from_sample(*names: str) -> Callable[[int, random.Random], Iterator[bytes]]:
    data = b"".join((SAMPLES / name).read_bytes() for name in names)

    def body(rank: int, rng: random.Random) -> Iterator[bytes]:
        del rank, rng
        yield from shifted(data)

    return body


def megatron(rank: int, rng: random.Random) -> Iterator[bytes]:
    """Megatron-LM `training_log` (megatron/training/training.py), its exact format."""
    total = 500000
    t = START
    for it in range(1, 10**9):
        t += timedelta(milliseconds=1520)
        ms = rng.uniform(1400, 1600)
        line = (
            f" [{t:%Y-%m-%d %H:%M:%S}] iteration {it:8d}/{total:8d} |"
            f" consumed samples: {it * 512:12d} |"
            f" elapsed time per iteration (ms): {ms:.1f} |"
            f" learning rate: {1.5e-4 * min(1, it / 2000):.6E} |"
            f" global batch size: {512:5d} |"
            f" lm loss: {2 + 6 / (1 + it / 300) + rng.random() * 0.05:.6E} |"
            f" loss scale: {65536.0:.1f} |"
            f" grad norm: {rng.uniform(0.5, 3):.3f} |"
            f" number of skipped iterations: {0:3d} |"
            f" number of nan iterations: {0:3d} |\n"
        )
        if it % 10 == 0:
            line += (
                f"(min, max) time across ranks (ms):\n"
                f"    forward-backward ...............................: ({ms * 0.9:.2f}, "
                f"{ms * 0.95:.2f})\n"
                f"    optimizer ......................................: (12.31, 12.90)\n"
            )
        yield line.encode()


def nccl_init(rank: int, rng: random.Random) -> Iterator[bytes]:
    """A process's NCCL_DEBUG=INFO init output: the version, driver and network lines once,
    then one communicator after another (its comm line, ring channels, `Init COMPLETE`)."""
    world = 1024
    lines = nccl_init_lines(rank, world, 40000 + rank, rng)
    yield ("\n".join(lines) + "\n").encode()
    per_comm = [line for line in lines if " Channel " in line or "Connected all" in line]
    comm_line = next(line for line in lines if " nRanks " in line)
    done_line = lines[-1]
    for comm in range(1, 10**9):
        cid = f"0x{comm + 0x55:x}"
        block = [comm_line.replace("0x55", cid), *per_comm, done_line.replace("0x55", cid)]
        yield ("\n".join(block) + "\n").encode()


_NEAR_MISSES = [
    "[{t}] [INFO] [engine.py:{n}:step] step={n} errors=0 failed_steps=0 num_warnings=0",
    "{t} metrics | error_rate: 0.{n} | failed_batches_total: 0 | retries_exhausted: 0",
    "[{t}] [INFO] [monitor.py:{n}:report] NoWarningsFound healthcheck_ok=True exceptions_seen=0",
    "{t} data loader: timed output {n} samples, killed_workers=0, aborted_reads=0",
    "[{t}] [INFO] [comm.py:{n}:init] NCCL_ASYNC_ERROR_HANDLING=1 TORCH_NCCL_BLOCKING_WAIT=0",
    "{t} ErrorFeedbackCompressor ready: fatalistic=False criticality=low failures_allowed={n}",
    "[{t}] [INFO] [ckpt.py:{n}:save] non_fatal_errors=0 warnings_suppressed={n} failover=off",
    "{t} eval: top1_error {n}.12 | {n} NCCL buffers pinned | Exceptional samples: none",
]


def adversarial(rank: int, rng: random.Random) -> Iterator[bytes]:
    del rank
    t = START
    while True:
        t += timedelta(milliseconds=997)
        stamp = t.strftime("%Y-%m-%d %H:%M:%S,") + f"{t.microsecond // 1000:03d}"
        yield "".join(
            line.format(t=stamp, n=rng.randrange(10**6)) + "\n" for line in _NEAR_MISSES
        ).encode()


def _times_in(data: bytes) -> list[datetime]:
    """The timestamps `shifted` moves, as UTC times."""
    found = (_stamp(m) for m in _TOKEN.finditer(data))
    return [s[0].replace(tzinfo=timezone.utc) for s in found if s is not None]


FORMATS: dict[str, Callable[[int, random.Random], Iterator[bytes]]] = {
    "megatron": megatron,
    "hf_trainer": from_sample("hf_trainer_rank0_stderr.log", "hf_trainer_rank0_stdout.log"),
    "lightning": from_sample("lightning_rank0_stdout.log"),
    "deepspeed": from_sample("deepspeed_rank0_stdout.log"),
    "torchrun_console": from_sample("hf_trainer_torchrun_console.log"),
    "nccl_init": nccl_init,
    "adversarial": adversarial,
}


def write_job(out: Path, fmt: str, ranks: int, total_bytes: int, seed: int) -> None:
    rng = random.Random(seed)
    culprit = rng.randrange(ranks)
    per_rank = total_bytes // ranks
    out.mkdir(parents=True, exist_ok=True)
    for rank in range(ranks):
        rank_rng = random.Random(seed * 100003 + rank)
        path = out / host_of(rank) / f"rank_{rank}.log"
        path.parent.mkdir(exist_ok=True)
        with path.open("wb") as fh:
            written = 0
            last = b""
            for block in FORMATS[fmt](rank, rank_rng):
                fh.write(block)
                written += len(block)
                last = block
                if written >= per_rank:
                    break
            # the failure comes after the last line the body logged, as in a real run
            times = [START + timedelta(hours=2), *_times_in(last[-65536:])]
            end = max(times) + timedelta(seconds=60)
            if rank == culprit:
                tail = oom_traceback(rank, end)
            else:
                tail = cascade_lines(
                    rank, end + timedelta(seconds=600), 4242, culprit, 40000 + rank
                )
            fh.write(("\n" + "\n".join(tail) + "\n").encode())
    (out / "truth.json").write_text(
        json.dumps({"format": fmt, "culprit_ranks": [culprit], "ranks": ranks, "seed": seed}),
        encoding="utf-8",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--ranks", type=int, default=64)
    parser.add_argument("--mib", type=float, default=400, help="size of each format's job")
    parser.add_argument("--formats", default=",".join(FORMATS))
    parser.add_argument("--seed", type=int, default=11)
    args = parser.parse_args()
    for fmt in args.formats.split(","):
        write_job(args.out / fmt, fmt, args.ranks, int(args.mib * 2**20), args.seed)
        print(f"wrote {args.out / fmt}")


if __name__ == "__main__":
    main()
