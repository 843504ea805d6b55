"""Throughput and memory of `triage` on a big bundle, next to grep (and rg) on the same files.

    python bench/make_big_bundle.py /tmp/big --ranks 1024 --gib 1
    python bench/throughput.py /tmp/big

Prints wall time, MB/s and peak RSS of one end-to-end `triage BUNDLE --format json` run
(rules only and, unless --no-embed-only, with embeddings), and the same for
`grep -c -E` and `rg -c` over the same files, with the ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

# What a person would grep for after a crash.
GREP_PATTERN = r"Error|error|WARN|Traceback|Killed|exitcode|timeout"


def bundle_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def timed(cmd: list[str]) -> tuple[float, int, subprocess.CompletedProcess[bytes]]:
    """Wall seconds and peak RSS (MiB) of one child process."""
    # ru_maxrss of RUSAGE_CHILDREN is the largest child so far: run each command in a
    # fresh intermediate process so earlier runs do not mask this one.
    wrapper = (
        "import resource,subprocess,sys,json,time;t=time.perf_counter();"
        "p=subprocess.run(sys.argv[1:],stdout=subprocess.PIPE,stderr=subprocess.PIPE);"
        "w=time.perf_counter()-t;"
        "r=resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss;"
        "sys.stderr.buffer.write(p.stderr[-2000:]);"
        "print(json.dumps({'wall':w,'rss_kib':r,'rc':p.returncode,'out':p.stdout[-200000:].decode('utf-8','replace')}))"
    )
    done = subprocess.run([sys.executable, "-c", wrapper, *cmd], capture_output=True)
    info = json.loads(done.stdout)
    proc = subprocess.CompletedProcess(cmd, info["rc"], info["out"].encode(), done.stderr)
    return info["wall"], info["rss_kib"] // 1024, proc


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("bundle", type=Path)
    parser.add_argument("--with-embed", action="store_true", help="also time the embedding path")
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

    results = {}
    print(f"{'command':24s} {'wall s':>8s} {'MB/s':>8s} {'peak RSS MiB':>13s}")
    for name, cmd in runs:
        wall, rss, proc = timed(cmd)
        results[name] = wall
        print(f"{name:24s} {wall:8.2f} {mb / wall:8.0f} {rss:13d}")
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
    print(f"cores: {os.cpu_count()}  time: {time.strftime('%Y-%m-%d %H:%M')}")


if __name__ == "__main__":
    main()
