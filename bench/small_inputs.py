"""Wall time and peak memory of `triage` on every small job: the corpus bundles and the
reference third-party job logs, default settings, one fresh process each.

    python bench/small_inputs.py [--repeat 3] [--limit-s 1.0] [--limit-mib 200]

Each input runs as a user runs it (`python -m triage INPUT --format json -q`, the similarity
model as the default has it), --repeat times; the median wall time and the largest peak RSS
of the process tree are kept. Beside each, from the same round: a bare interpreter start
(`python -c pass`, what any Python tool pays) and `grep -c -E` over the same files. Only
the reference part of corpus_samples/third_party is run (the held-out part is for
bench/eval_jobs.py alone). Inputs over 10 MB are left out (the issue's limits are for
inputs under 10 MB). Prints the slowest inputs and how many are over the limits.

The triage it runs is byte-compiled first, as `pip install` does: where
PYTHONDONTWRITEBYTECODE is set (a fresh checkout, some sandboxes), every run would otherwise
compile its ~130 modules from source again, ~0.15-0.2 s a run that no installed triage pays.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from eval_jobs import CASES, cases, held_out  # noqa: E402
from throughput import GREP_PATTERN, bundle_bytes, byte_compile, timed  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MAX_BYTES = 10 * 1000 * 1000


def inputs() -> list[tuple[str, Path]]:
    found = [
        (p.parent.name, p.parent / "bundle")
        for p in sorted((ROOT / "corpus_samples").glob("*/expected.json"))
        if (p.parent / "bundle").is_dir()
    ]
    found += [(c.id, c.folder) for c in cases([CASES]) if not held_out(c.url)]
    return [(name, path) for name, path in found if bundle_bytes(path) < MAX_BYTES]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--limit-s", type=float, default=1.0)
    ap.add_argument("--limit-mib", type=int, default=200)
    ap.add_argument("--slowest", type=int, default=8)
    ap.add_argument(
        "--before",
        type=Path,
        help="a checkout of an earlier triage (the folder holding its triage/, rules/, "
        "models/): run in the same rounds, from its own source",
    )
    args = ap.parse_args()
    print(f"cores: {os.cpu_count()}  load: {os.getloadavg()}  {time.strftime('%Y-%m-%d %H:%M')}")
    env = {**os.environ, "PYTHONPATH": str(args.before.resolve())} if args.before else None
    print(f"byte-compiled: {byte_compile(None)}" + (f", {byte_compile(env)}" if env else ""))
    rows = []
    bare_runs: list[float] = []
    for name, path in inputs():
        triage = [sys.executable, "-m", "triage", str(path.resolve()), "--format", "json", "-q"]
        grep = ["grep", "-r", "-c", "-E", GREP_PATTERN, str(path.resolve())]
        walls, trees, greps, befores = [], [], [], []
        for _ in range(max(args.repeat, 1)):
            wall, _cpu, _one, tree, proc = timed(triage)
            if proc.returncode not in (0, 3):  # 3: nothing found, still an answer
                print(f"{name}: triage failed ({proc.returncode}): {proc.stderr[-300:]!r}")
            walls.append(wall)
            trees.append(tree)
            greps.append(timed(grep)[0])
            if env is not None:
                befores.append(timed(triage, env)[:4:3])
            bare_runs.append(timed([sys.executable, "-c", "pass"])[0])
        before = (
            (statistics.median(w for w, _ in befores), max(t for _, t in befores))
            if befores
            else None
        )
        rows.append(
            (statistics.median(walls), max(trees), statistics.median(greps), name, path, before)
        )
    bare = statistics.median(bare_runs)
    rows.sort(reverse=True)
    print(
        f"{'input':58s} {'KB':>7s} {'triage s':>9s} {'tree MiB':>9s} {'grep s':>7s}"
        + ("  before s / MiB" if args.before else "")
    )
    for wall, tree, grep_s, name, path, before in rows[: args.slowest]:
        kb = bundle_bytes(path) / 1000
        then = f"  {before[0]:8.2f} / {before[1]}" if before else ""
        print(f"{name[:58]:58s} {kb:7,.0f} {wall:9.2f} {tree:9d} {grep_s:7.3f}{then}")
    walls = [r[0] for r in rows]
    slow = sum(1 for w in walls if w > args.limit_s)
    big = sum(1 for r in rows if r[1] > args.limit_mib)
    print(
        f"{len(rows)} inputs: wall median {statistics.median(walls):.2f} s, max {max(walls):.2f} s;"
        f" peak tree RSS max {max(r[1] for r in rows)} MiB; over {args.limit_s} s: {slow}; "
        f"over {args.limit_mib} MiB: {big}"
    )
    print(
        f"baselines, same rounds: bare `python -c pass` {bare:.3f} s; grep -c -E median "
        f"{statistics.median(r[2] for r in rows):.3f} s"
    )
    if args.before:
        then = [r[5] for r in rows]
        print(
            f"before ({args.before}): wall median {statistics.median(b[0] for b in then):.2f} s, "
            f"max {max(b[0] for b in then):.2f} s; peak tree RSS max {max(b[1] for b in then)} "
            f"MiB; over {args.limit_s} s: {sum(1 for b in then if b[0] > args.limit_s)}"
        )
    print(f"load after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
