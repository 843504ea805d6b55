"""Where the CPU time of reading a flight-recorder dump whole goes, stage by stage, beside a
bare `pickle.loads` of the same bytes in the same run.

    python bench/fr_whole_stages.py /tmp/fr1024_p4 [--dumps 32] [--rounds 5] [--root DIR]

FOLDER holds `nccl_trace_rank_*` dumps (as `bench/fr_scale.py` writes them). Each stage
runs over the first `--dumps` dumps, `--rounds` times; the figure is the fastest round's CPU
time per dump (the least disturbed by other processes on a shared machine), with the cyclic
GC paused as `decode.load_dump` pauses it (the bare load too, so the two compare like for
like). `--root`: the checkout whose triage is measured (default: this one), e.g. an earlier
version's `git archive`, run right before or after this one.

* `bare pickle.loads`: unsafe, builds the raw dicts and nothing else (run first and last);
  and once more with the cyclic GC on, as a user's `pickle.load` runs (and as
  `bench/fr_scale.py`'s baseline does): the collections its fresh containers trigger;
* `safety scan`: `safe_pickle.scan`, the exact opcode walk;
* `scan + restricted load`: `safe_pickle.loads`, what a whole decode reads a pickle with;
* `entry table`: `schema.build` of the raw dicts already loaded (every entry's columns);
* `load_dump whole`: all of it, as `--fr-entries 0` reads a dump where no child contains it;
* `load_dump whole, contained`: the same as a decoding child or a pool worker reads it (the
  load first, the scan only where it fails; `decode.contain_decoding`), where the checkout
  has it.
"""

from __future__ import annotations

import argparse
import gc
import os
import pickle
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def per_dump_ms(
    step: Callable[[bytes], Any], blobs: list[bytes], rounds: int, gc_on: bool = False
) -> float:
    """The fastest round's CPU time per dump, in ms; the cyclic GC paused unless `gc_on`."""
    best = float("inf")
    for _ in range(rounds):
        gc.collect()
        if not gc_on:
            gc.disable()
        try:
            started = time.process_time()
            for blob in blobs:
                step(blob)
            best = min(best, (time.process_time() - started) / len(blobs))
        finally:
            gc.enable()
    return best * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--dumps", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    args = parser.parse_args()
    paths = sorted(p for p in args.folder.iterdir() if p.name.startswith("nccl_trace_rank_"))
    blobs = [p.read_bytes() for p in paths[: args.dumps]]
    # as a user calls it, the GC on: the baseline of bench/fr_scale.py's ratios; first, while
    # this process holds as few objects as that baseline's (each collection walks them all)
    gc_on = per_dump_ms(pickle.loads, blobs, args.rounds, gc_on=True)

    sys.path.insert(0, str(args.root))
    from triage.parsers.flight_recorder import decode, safe_pickle
    from triage.parsers.flight_recorder.schema import build

    def whole(blob: bytes) -> None:
        dump, why = decode.load_dump(blob, rank=0)
        if dump is None:
            raise SystemExit(f"a dump could not be read: {why}")

    raws = iter([pickle.loads(b) for b in blobs] * args.rounds)  # our own files: trusted
    steps: list[tuple[str, Callable[[bytes], Any]]] = [
        ("bare pickle.loads", pickle.loads),
        ("safety scan", safe_pickle.scan),
        ("scan + restricted load", lambda b: safe_pickle.loads(b, check_depth=False)),
        ("entry table", lambda b: build(next(raws), 0, [])),
        ("load_dump whole", whole),
    ]
    if hasattr(decode, "contain_decoding"):  # once set, for the rest of this process
        steps.append(
            ("load_dump whole, contained", lambda b: (decode.contain_decoding(), whole(b)))
        )
    steps.append(("bare pickle.loads again", pickle.loads))
    got = [(name, per_dump_ms(step, blobs, args.rounds)) for name, step in steps]
    got.append(("bare pickle.loads, GC on", gc_on))
    bare = (got[0][1] + got[-2][1]) / 2
    size = sum(map(len, blobs)) / len(blobs)
    print(
        f"triage from {args.root}; {len(blobs)} dumps of {size / 1e3:,.0f} KB from "
        f"{args.folder}; CPU ms per dump, "
        f"fastest of {args.rounds} rounds; load {tuple(round(x, 1) for x in os.getloadavg())}"
    )
    for name, ms in got:
        print(f"  {name:24s} {ms:6.2f} ms  {ms / bare:5.2f}x the bare load")
    print(f"time: {time.strftime('%Y-%m-%d %H:%M')}")


if __name__ == "__main__":
    main()
