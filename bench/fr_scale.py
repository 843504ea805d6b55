"""Flight-recorder loading and hang analysis at scale: N ranks x M entries.

    python bench/fr_scale.py /tmp/fr1024 --ranks 1024 --entries 2000 [--no-fr-trace]

Writes the dumps once (the same `nccl_trace_rank_<R>` pickles as make_big_bundle.py, one
rank behind the others), then runs each measurement in a fresh process and prints wall
time, CPU time and peak RSS:

* `triage load`: `pipeline.read_inputs` on the dump folder (safe unpickler, entry objects,
  a worker pool when the folder is big);
* `triage load serial`: the same in one process;
* `triage analyze`: `analysis.correlate` on dumps already loaded (load time not counted);
* `triage load+analyze`: both, as a user waits for them (the issue's "analyzed in <= 5 s");
  a big job's dumps are read in part (header, pg_status and the last 128 entries of each);
* `triage load whole`: every entry of every dump (`--fr-entries 0`), for comparison;
* `triage whole+analyze`: every entry read and analysed, as `triage --fr-entries 0` does
  (the issue's target: under 400 MB);
* `pickle.load baseline`: plain, unsafe `pickle.load` of every dump, nothing built;
* `torch fr_trace`: torch's own analyzer (`torchfrtrace DIR -p nccl_trace_rank_`), when it
  runs here.

`--previous DIR`: a checkout of an earlier version (e.g. `git archive` of its commit): each
triage step is run with it right before this version's, in the same run, against the same
bare load (on a shared machine CPU times drift with the load from one run to the next).

Every dump is read once before the steps (page cache warm for all). Peak RSS is the largest
single process; with workers, `tree` adds up the workers' peaks too.
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

# the triage a child measures: this checkout's, or the one `--previous` names
_ROOT = os.environ.get("FR_SCALE_TRIAGE_ROOT") or str(Path(__file__).resolve().parent.parent)
sys.path.insert(0, _ROOT)
sys.path.insert(0, str(Path(__file__).resolve().parent))

PREFIX = "nccl_trace_rank_"
# the flight recorder's own findings, whose list the steps print to compare
_FR_FINDINGS = {"lagging_rank", "missing_rank", "collective_mismatch", "fr_window"}


def make_dumps(folder: Path, ranks: int, entries: int, layout: str = "torch") -> None:
    from make_big_bundle import write_fr_dump

    stamp = folder / ".made"
    want = f"{ranks} {entries} {layout}"
    if stamp.exists() and stamp.read_text() == want:
        return
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    behind = ranks // 3
    for rank in range(ranks):
        write_fr_dump(
            folder / f"{PREFIX}{rank}", rank, ranks, entries, behind=rank == behind, layout=layout
        )
    stamp.write_text(want)


def child(mode: str, folder: Path) -> dict[str, object]:
    """One measurement, run in its own process; returns what it found."""
    started, cpu = time.perf_counter(), time.process_time()
    files = sorted(p for p in folder.iterdir() if p.name.startswith(PREFIX))
    found: dict[str, object] = {"mode": mode}
    whole = mode in ("load-whole", "whole-analyze")
    if mode in ("load", "load-serial", "analyze", "load-analyze", "load-whole", "whole-analyze"):
        from triage import pipeline

        parsed = pipeline.read_inputs(
            [str(folder)],
            fr_entries=0 if whole else None,
            workers=1 if mode == "load-serial" else None,
        )
        found["entries"] = sum(
            len(e.payload.entries) for p in parsed for e in p.events if e.payload is not None
        )
        if mode in ("analyze", "load-analyze", "whole-analyze"):
            from triage import analysis

            if mode == "analyze":
                started, cpu = time.perf_counter(), time.process_time()
            result = analysis.correlate(parsed)
            found["culprit_ranks"] = list(result.culprit_ranks)
            hang = result.hang
            if hang is not None and hang.detected:
                seq = hang.collective.seq if hang.collective else None
                found["hang"] = f"#{seq} lagging {list(hang.lagging_ranks)}"
            found["fr_findings"] = sorted(
                str(getattr(f.kind, "value", f.kind))
                for f in result.findings
                if f.kind in _FR_FINDINGS
            )
    elif mode == "pickle":
        import pickle

        total = 0
        for path in files:
            with path.open("rb") as fh:
                if fh.peek(1)[:1] == b"{":
                    total += len(json.load(fh)["entries"])  # bare json.load of a JSON dump
                else:
                    total += len(pickle.load(fh)["entries"])  # our own files: trusted
        found["entries"] = total
    found["wall"] = time.perf_counter() - started
    found["cpu"] = time.process_time() - cpu
    found["rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    found["workers_cpu"] = kids.ru_utime + kids.ru_stime
    found["worker_rss_mib"] = kids.ru_maxrss // 1024
    return found


def run_child(mode: str, folder: Path, root: Path | None = None) -> dict[str, object]:
    env = {**os.environ, "FR_SCALE_TRIAGE_ROOT": str(root)} if root is not None else None
    done = subprocess.run(
        [sys.executable, __file__, str(folder), "--child", mode],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1:] or [f"rc {done.returncode}"]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_fr_trace(folder: Path, timeout: float) -> dict[str, object]:
    tool = shutil.which("torchfrtrace") or str(Path(sys.executable).parent / "torchfrtrace")
    if not Path(tool).exists():
        return {"error": ["torchfrtrace not installed"]}
    # The wrapper measures the tool's own peak RSS and kills it if it runs past the timeout.
    wrapper = (
        "import resource,subprocess,sys,time,json;t=time.perf_counter()\n"
        "try:\n p=subprocess.run(sys.argv[2:],capture_output=True,timeout=float(sys.argv[1]))\n"
        "except subprocess.TimeoutExpired:\n print(json.dumps({'timeout':1}));sys.exit()\n"
        "u=resource.getrusage(resource.RUSAGE_CHILDREN)\n"
        "print(json.dumps({'wall':time.perf_counter()-t,'cpu':u.ru_utime+u.ru_stime,"
        "'rss_mib':u.ru_maxrss//1024,'rc':p.returncode,"
        "'tail':(p.stdout+p.stderr).decode('utf-8','replace')[-300:]}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", wrapper, str(timeout), tool, str(folder), "-p", PREFIX],
        capture_output=True,
        text=True,
        check=False,
    )
    if not done.stdout.strip():
        return {"error": [f"no result: {done.stderr[-200:]!r}"]}
    info = json.loads(done.stdout.strip().splitlines()[-1])
    if info.get("timeout"):
        return {"error": [f"did not finish in {timeout:.0f} s"]}
    if info.pop("rc") != 0:
        return {"error": [f"failed: {info.get('tail', '')[-200:]!r}"]}
    return info


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--ranks", type=int, default=1024)
    parser.add_argument("--entries", type=int, default=2000)
    parser.add_argument("--no-fr-trace", action="store_true")
    parser.add_argument(
        "--layout",
        default="torch",
        choices=["torch", "p2", "p3", "p4", "p5", "json"],
        help="torch's own pickle layout, Python's pickler at a protocol, or torch's JSON",
    )
    parser.add_argument(
        "--steps",
        default="load-analyze,load,load-serial,analyze,load-whole,whole-analyze,pickle",
        help=(
            "comma-separated: load-analyze, load, load-serial, analyze, load-whole, "
            "whole-analyze, pickle"
        ),
    )
    parser.add_argument("--fr-trace-timeout", type=float, default=600)
    parser.add_argument(
        "--previous",
        type=Path,
        help="a checkout of an earlier version, each triage step run with it too (same run)",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.folder)))
        return

    make_dumps(args.folder, args.ranks, args.entries, args.layout)
    size = 0
    for path in args.folder.iterdir():  # read once: every step finds the page cache warm
        size += len(path.read_bytes())
    print(
        f"{args.ranks} ranks x {args.entries} entries, {args.layout} layout: {size / 1e6:,.0f} MB "
        f"in {args.folder}; {os.cpu_count()} cores; load {os.getloadavg()}"
    )
    print(f"{'step':22s} {'wall s':>7s} {'cpu s':>7s} {'RSS MiB':>8s} {'tree MiB':>9s}  notes")
    runs = [
        ("triage load+analyze", "load-analyze"),
        ("triage load", "load"),
        ("triage load serial", "load-serial"),
        ("triage analyze", "analyze"),
        ("triage load whole", "load-whole"),
        ("triage whole+analyze", "whole-analyze"),
        ("bare load baseline", "pickle"),
    ]
    results = []
    for name, mode in runs:
        if mode not in args.steps.split(","):
            continue
        if args.previous is not None and mode != "pickle":
            earlier = run_child(mode, args.folder, args.previous)
            show(f"previous: {name[len('triage ') :]}", earlier)
            results.append((f"previous: {name[len('triage ') :]}", earlier))
        got = run_child(mode, args.folder)
        show(name, got)
        results.append((name, got))
    ratios(results)
    if not args.no_fr_trace:
        show("torch fr_trace", run_fr_trace(args.folder, args.fr_trace_timeout))
    print(f"time: {time.strftime('%Y-%m-%d %H:%M')}")


def ratios(results: list[tuple[str, dict[str, object]]]) -> None:
    """Each triage step's wall and CPU time over the bare load's, from this run (the issue's
    target for Python's protocols 4-5: within 1.2x), and its peak RSS beside the bare load's
    (the target for every entry read and analysed: under 400 MB)."""
    base = dict(results).get("bare load baseline")
    if base is None or "error" in base:
        return
    base_cpu = _cpu(base)
    print(f"against the bare load of this run ({float(base['wall']):.2f} s wall):")  # type: ignore[arg-type]
    for name, got in results:
        if name == "bare load baseline" or "error" in got or got.get("mode") == "analyze":
            continue
        wall = float(got["wall"]) / float(base["wall"])  # type: ignore[arg-type]
        cpu = _cpu(got) / base_cpu if base_cpu else float("nan")
        target = ""
        if got.get("mode") == "whole-analyze":  # the target: under 400 MB
            mb = int(got["rss_mib"]) * (1 << 20) / 1e6  # type: ignore[call-overload]
            target = f"; {mb:.0f} MB, target under 400 MB: {'met' if mb < 400 else 'NOT met'}"
        print(
            f"  {name:22s} {wall:5.2f}x wall, {cpu:5.2f}x CPU; peak RSS {got['rss_mib']} MiB "
            f"(bare load {base['rss_mib']} MiB){target}"
        )


def _cpu(got: dict[str, object]) -> float:
    return float(got["cpu"]) + float(got.get("workers_cpu", 0.0))  # type: ignore[arg-type]


def show(name: str, got: dict[str, object]) -> None:
    if "error" in got:
        print(f"{name:22s} {'-':>7s} {'-':>7s} {'-':>8s} {'-':>9s}  {'; '.join(got['error'])}")  # type: ignore[arg-type]
        return
    cpu = float(got["cpu"])  # type: ignore[arg-type]
    if got.get("mode") != "analyze":  # the analyze step times correlate alone, not the load
        cpu += float(got.get("workers_cpu", 0.0))  # type: ignore[arg-type]
    rss = int(got["rss_mib"])  # type: ignore[call-overload]
    workers = int(got.get("worker_rss_mib", 0))  # type: ignore[call-overload]
    # Worker peaks are the largest worker's; two workers of one pool run at once.
    tree = rss + workers * min(os.cpu_count() or 1, 8) if workers else rss
    notes = ", ".join(
        f"{k}={got[k]}"
        for k in ("entries", "culprit_ranks", "hang", "fr_findings")
        if k in got and got[k] is not None
    )
    print(f"{name:22s} {float(got['wall']):7.2f} {cpu:7.2f} {rss:8d} {tree:9d}  {notes}")  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
