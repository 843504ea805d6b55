"""Throughput and memory of `triage` on big bundles, next to grep (and rg) on the same files.

    python bench/make_big_bundle.py /tmp/big --ranks 1024 --gib 1
    python bench/make_real_logs.py /tmp/real --ranks 64 --mib 1500
    python bench/throughput.py /tmp/big /tmp/real/*      # one row per bundle

triage, grep and rg run back to back on each bundle, --repeat rounds, and each shows its
median: on a shared machine the load changes between rounds, not within one. grep and rg
write their counts to a file (with output to /dev/null GNU grep stops at the first match).

Every file is read once first, so the page cache is warm for every command. Prints, as the
median of --repeat runs: wall time, MB/s, CPU time (with worker processes; on a shared
machine the steadier figure, since wall time is mostly the share of the cores a run got),
the largest process's peak RSS and the whole process tree's peak RSS of an end-to-end
`triage BUNDLE --format json` run with default settings (and, with --no-embed, without the
similarity model too), and the same for `grep -c -E` and `rg -c` over the same files, with
the ratio. Each triage it runs (this checkout's, --before's) is byte-compiled first, as
`pip install` does: where PYTHONDONTWRITEBYTECODE is set (a fresh checkout, some sandboxes)
every run would otherwise compile its ~130 modules from source again, ~0.2-0.3 s of fixed
cost no installed triage pays.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

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


def timed(
    cmd: list[str], env: dict[str, str] | None = None
) -> tuple[float, float, int, int, subprocess.CompletedProcess[bytes]]:
    """Wall s, CPU s (the command and its worker processes), largest process's peak RSS MiB
    and the peak of the whole process tree's RSS, both sampled every 20 ms, in MiB."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        # from a folder holding no triage/: `-m` puts the current folder first on the path
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env, cwd=tempfile.gettempdir())
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


def byte_compile(env: dict[str, str] | None) -> Path:
    """Compile the triage package that `env` imports to bytecode, as `pip install` does (a
    .pyc is read whatever PYTHONDONTWRITEBYTECODE says; it only stops writing one)."""
    found = subprocess.run(
        [sys.executable, "-c", "import triage; print(triage.__file__)"],
        env=env,
        cwd=tempfile.gettempdir(),  # where `timed` runs it from
        capture_output=True,
        text=True,
        check=True,
    )
    package = Path(found.stdout.strip()).parent
    compileall.compile_dir(package, quiet=1)
    return package


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("bundles", type=Path, nargs="+")
    parser.add_argument(
        "--no-embed",
        action="store_true",
        help="also time `--no-embed` (the default run loads the similarity model)",
    )
    parser.add_argument(
        "--repeat", type=int, default=3, help="rounds of the commands; the median is shown"
    )
    parser.add_argument(
        "--before",
        type=Path,
        help="a checkout of an earlier triage (its folder holding triage/, rules/, models/): "
        "timed in the same rounds, from its own source",
    )
    args = parser.parse_args()
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    print(f"cores: {os.cpu_count()}  load: {os.getloadavg()}  {time.strftime('%Y-%m-%d %H:%M')}")
    print(
        f"{'bundle':22s} {'MB':>7s} {'triage s':>9s} {'MB/s':>6s} {'grep s':>7s} {'rg s':>6s} "
        f"{'ratio':>6s} {'cpu s':>6s} {'grep cpu':>8s} {'RSS MiB':>8s} {'tree':>5s}  "
        "culprit (truth) hang"
    )
    for bundle in args.bundles:
        measure(bundle, args.repeat, args.no_embed, args.before)
    print(f"median of {max(args.repeat, 1)} rounds; load after: {os.getloadavg()}")


def measure(bundle: Path, repeat: int, no_embed: bool, before: Path | None) -> None:
    bundle = bundle.resolve()
    size = bundle_bytes(bundle)
    mb = size / 1e6
    # default settings, as the issue times it: `triage FOLDER --format json`
    triage = [sys.executable, "-m", "triage", str(bundle), "--format", "json", "-q"]
    runs = {"triage": triage}
    if no_embed:
        runs["triage+no-embed"] = [*triage, "--no-embed"]
    # Each version keeps its own cache folder (compiled patterns and scan databases), made
    # warm by a first run that is not timed: a run's cache is its own, as a user's is, and
    # no other process on a shared machine rewrites it between rounds.
    caches = Path(tempfile.mkdtemp(prefix="throughput-cache-"))
    envs: dict[str, dict[str, str]] = {
        "triage": {**os.environ, "TRIAGE_CACHE_DIR": str(caches / "now")},
        "triage+no-embed": {**os.environ, "TRIAGE_CACHE_DIR": str(caches / "now")},
    }
    if before is not None:
        runs["triage+before"] = triage
        old = before.resolve()
        # its own source and its own knowledge folders (the installed triage maps them
        # into the package only for itself)
        envs["triage+before"] = {
            **os.environ,
            "PYTHONPATH": str(old),
            "TRIAGE_RULES_DIR": str(old / "rules"),
            "TRIAGE_MODELS_DIR": str(old / "models"),
            "TRIAGE_CACHE_DIR": str(caches / "before"),
        }
    runs["grep"] = ["grep", "-r", "-c", "-E", GREP_PATTERN, str(bundle)]
    if shutil.which("rg"):
        runs["rg"] = ["rg", "-c", "--no-ignore", GREP_PATTERN, str(bundle)]
    # Read every file once before timing anything: whoever runs first would otherwise pay
    # for the disk and the others would read from the page cache.
    subprocess.run(runs["grep"], capture_output=True)
    for name, cmd in runs.items():
        if name.startswith("triage"):
            byte_compile(envs.get(name))
            subprocess.run(cmd, capture_output=True, env=envs.get(name), cwd=tempfile.gettempdir())
    tries: dict[str, list[Any]] = {name: [] for name in runs}
    for _ in range(max(repeat, 1)):
        for name, cmd in runs.items():
            tries[name].append(timed(cmd, envs.get(name)))
    shutil.rmtree(caches, ignore_errors=True)
    got = {name: sorted(t, key=lambda r: r[0])[len(t) // 2] for name, t in tries.items()}
    wall, cpu, rss, tree, proc = got["triage"]
    verdict = "triage failed"
    if proc.returncode == 0:
        diag = json.loads(proc.stdout)
        truth_file = bundle / "truth.json"
        truth = json.loads(truth_file.read_text())["culprit_ranks"] if truth_file.exists() else "?"
        hang = (diag.get("hang") or {}).get("detected")
        verdict = f"{diag['culprit_ranks']} ({truth}) {hang}"
    grep, grep_cpu = got["grep"][0], got["grep"][1]
    rg = f"{got['rg'][0]:6.2f}" if "rg" in got else f"{'-':>6s}"
    print(
        f"{bundle.name[:22]:22s} {mb:7,.0f} {wall:9.2f} {mb / wall:6.0f} {grep:7.2f} {rg} "
        f"{grep / wall:6.2f} {cpu:6.2f} {grep_cpu:8.2f} {rss:8d} {tree:5d}  {verdict}"
    )
    # CPU figures are each command's own median (the round of its median wall time may differ)
    cpus = {name: sorted(t[1] for t in tries[name])[len(tries[name]) // 2] for name in tries}
    print(
        f"  load {os.getloadavg()[0]:.1f}; median CPU s: "
        + ", ".join(f"{name} {c:.2f}" for name, c in cpus.items())
    )
    for name in runs:
        if name.startswith("triage+"):
            w, c, r, t, _p = got[name]
            print(
                f"  {name}: {w:.2f} s, {mb / w:.0f} MB/s, ratio {grep / w:.2f}, CPU {c:.2f} s, "
                f"RSS {r}/{t} MiB"
            )


if __name__ == "__main__":
    main()
