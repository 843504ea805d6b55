"""Throughput and memory of `triage` on a big bundle, next to grep (and rg) on the same files.

    python bench/make_big_bundle.py /tmp/big --ranks 1024 --gib 1
    python bench/throughput.py /tmp/big

Every file is read once first, so the page cache is warm for every command. Prints, as the
median of --repeat runs: wall time, MB/s, CPU time (with worker processes), the largest
process's peak RSS and the whole process tree's peak RSS of an end-to-end
`triage BUNDLE --format json` run (rules only and, with --with-embed, with embeddings too),
and the same for `grep -c -E` and `rg -c` over the same files, with the ratio. Run it with
bytecode caching on (PYTHONDONTWRITEBYTECODE unset), as an installed tool runs: otherwise
every module is compiled again on each run.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# What a person would grep for after a crash.
GREP_PATTERN = r"Error|error|WARN|Traceback|Killed|exitcode|timeout"


def bundle_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def _tree(pid: int) -> list[int]:
    """`pid` and all its descendants (Linux /proc)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return out


def _rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def timed(cmd: list[str]) -> tuple[float, float, int, int, subprocess.CompletedProcess[bytes]]:
    """Wall s, CPU s (the command and its worker processes), largest process's peak RSS MiB
    and the peak of the whole process tree's RSS, both sampled every 20 ms, in MiB."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err)
        tree_peak = one_peak = 0
        while proc.poll() is None:
            sizes = [_rss_kib(p) for p in _tree(proc.pid)]
            tree_peak = max(tree_peak, sum(sizes))
            one_peak = max(one_peak, *sizes)
            time.sleep(0.02)
        wall = time.perf_counter() - started
        out.seek(0)
        err.seek(0)
        done = subprocess.CompletedProcess(cmd, proc.returncode, out.read(), err.read()[-2000:])
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, one_peak // 1024, tree_peak // 1024, done


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("bundle", type=Path)
    parser.add_argument("--with-embed", action="store_true", help="also time the embedding path")
    parser.add_argument(
        "--repeat", type=int, default=3, help="runs of each command; the median is shown"
    )
    args = parser.parse_args()
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    size = bundle_bytes(args.bundle)
    mb = size / 1e6
    print(f"bundle {args.bundle}: {mb:,.0f} MB in {sum(1 for _ in args.bundle.rglob('*'))} paths")
    triage = [sys.executable, "-m", "triage", str(args.bundle), "--format", "json", "-q"]
    runs = [("triage --no-embed", [*triage, "--no-embed"])]
    if args.with_embed:
        runs.append(("triage (embeddings)", triage))
    runs.append(("grep -r -c -E", ["grep", "-r", "-c", "-E", GREP_PATTERN, str(args.bundle)]))
    if shutil.which("rg"):
        runs.append(("rg -c", ["rg", "-c", "--no-ignore", GREP_PATTERN, str(args.bundle)]))

    # Read every file once before timing anything: whoever runs first would otherwise pay
    # for the disk and the others would read from the page cache.
    subprocess.run(["grep", "-r", "-c", "-E", GREP_PATTERN, str(args.bundle)], capture_output=True)
    results = {}
    print(
        f"{'command':24s} {'wall s':>8s} {'MB/s':>8s} {'CPU s':>8s} {'peak RSS MiB':>13s} "
        f"{'tree RSS MiB':>13s}"
    )
    for name, cmd in runs:
        # interleaving would be fairer still; the median of a few runs already hides the odd
        # slow one (another process, a page-cache hiccup)
        tries = sorted((timed(cmd) for _ in range(max(args.repeat, 1))), key=lambda t: t[0])
        wall, cpu, rss, tree, proc = tries[len(tries) // 2]
        results[name] = wall
        print(f"{name:24s} {wall:8.2f} {mb / wall:8.0f} {cpu:8.2f} {rss:13d} {tree:13d}")
        if name.startswith("triage"):
            if proc.returncode != 0:
                print(f"  triage failed rc={proc.returncode}: {proc.stderr[-500:]!r}")
            else:
                diag = json.loads(proc.stdout)
                print(
                    f"  culprit_ranks={diag['culprit_ranks']} "
                    f"symptom={[s['id'] for s in diag['symptoms'][:1]]}"
                )
    grep = results.get("grep -r -c -E")
    if grep:
        ratio = grep / results["triage --no-embed"]
        print(f"triage speed as a fraction of grep's: {ratio:.2f}")
    print(
        f"median of {max(args.repeat, 1)} runs; cores: {os.cpu_count()}  "
        f"time: {time.strftime('%Y-%m-%d %H:%M')}"
    )


if __name__ == "__main__":
    main()
