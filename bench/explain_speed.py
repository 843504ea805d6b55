"""Speed of `triage explain`: one pasted error from a cold start, and batch throughput.

    python bench/explain_speed.py [--cases models/corpus/dev.jsonl] [--repeat 5]

Cold start (fresh interpreter each time, median of --repeat):
  - import time of the classify stage (`import triage.classify`) next to a bare interpreter;
  - one pasted CUDA OOM (the rules decide: neither torch nor the model may load);
  - one paste no rule settles, an accuracy gap with no error (the similarity model embeds it).
Batch, once the model is loaded (in one process): cases/s of `classify_many` over the corpus
(one encode() call for all signatures) and of one `classify` call per case (what a simple
loop does), and of `triage explain --jsonl` end to end when the CLI is complete.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.50 GiB. GPU 1 has a total "
    "capacity of 79.15 GiB of which 1.21 GiB is free."
)
# No rule, specific or generic, settles this one (accuracy that differs between layouts, no
# error): the similarity model embeds it.
UNDECIDED = (
    "epoch 3 | val_acc 0.612 on 8 GPUs with FSDP\n"
    "epoch 3 | val_acc 0.741 on 1 GPU, same seed and global batch"
)

# Runs in a fresh interpreter: the stages `triage explain` runs, timed, and whether torch loaded.
# (The stages through their public entry points: parse, correlate, classify. A helper the
# classifier once had, `neighbours.text_analysis`, is gone; tests/test_cli_edges.py runs this.)
_CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
from triage import parsers
from triage.analysis import correlate
from triage.classify import classify
t_import = time.perf_counter() - t0
parsed = [parsers.parse_text(sys.argv[1])]
result = classify(parsed, correlate(parsed))
print(json.dumps({
    "import_s": t_import,
    "total_s": time.perf_counter() - t0,
    "torch_loaded": "torch" in sys.modules,
    "symptom": result.symptoms[0].id if result.symptoms else None,
}))
"""


def _child(code: str, *args: str) -> tuple[float, str]:
    t0 = time.perf_counter()
    p = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=True,
    )
    return time.perf_counter() - t0, p.stdout


def explain_once(text: str) -> dict:
    """The stages `triage explain` runs on `text`, in a fresh interpreter: import and total
    seconds, whether torch loaded, the top symptom."""
    wall, out = _child(_CHILD, text)
    return {"wall_s": wall, **json.loads(out)}


def cold(repeat: int) -> None:
    bare = statistics.median(_child("pass")[0] for _ in range(repeat))
    imp = statistics.median(_child("import triage.classify")[0] for _ in range(repeat))
    print(f"bare interpreter                      {bare * 1000:7.0f} ms")
    extra = (imp - bare) * 1000
    print(f"python -c 'import triage.classify'    {imp * 1000:7.0f} ms  (+{extra:.0f} ms)")
    for name, text in (
        ("pasted CUDA OOM (rules decide)", OOM),
        ("pasted accuracy gap (embedded)", UNDECIDED),
    ):
        runs = [explain_once(text) for _ in range(repeat)]
        wall = statistics.median(r["wall_s"] for r in runs)
        info = runs[0]
        print(
            f"{name:37s} {wall * 1000:7.0f} ms wall  (imports {info['import_s'] * 1000:.0f} ms, "
            f"torch loaded: {info['torch_loaded']}, symptom {info['symptom']})"
        )


def cold_cli(repeat: int) -> None:
    """`triage explain` as a user runs it: interpreter, CLI, every stage, text rendering."""
    walls = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        p = subprocess.run(
            [sys.executable, "-m", "triage", "explain"],
            input=OOM,
            capture_output=True,
            text=True,
            cwd=ROOT,
        )
        walls.append(time.perf_counter() - t0)
        if p.returncode != 0:
            print(f"triage explain (CLI): not measured (rc={p.returncode}: {p.stderr[-160:]})")
            return
    print(f"triage explain < OOM (CLI, all stages) {statistics.median(walls) * 1000:7.0f} ms wall")
    t0 = time.perf_counter()
    _child("from triage.classify import rules; rules.load()")
    loaded = time.perf_counter() - t0
    rules_ms = (loaded - _child("import triage.classify.rules")[0]) * 1000
    print(f"  of which: loading + compiling rules/ {rules_ms:6.0f} ms")


def batch(cases_path: Path) -> None:
    from triage.analysis import correlate
    from triage.classify import classify, classify_many, neighbours
    from triage.knowledge import corpus
    from triage.train import references

    rows = corpus.read_cases(cases_path)
    jobs = []
    for row in rows:
        parsed = references.paste_evidence(row["evidence"])
        jobs.append((parsed, correlate(parsed)))
    t0 = time.perf_counter()
    neighbours.embed(["load the model"])
    print(f"similarity model load (in process)    {(time.perf_counter() - t0) * 1000:7.0f} ms")
    t0 = time.perf_counter()
    classify_many(jobs)
    wall = time.perf_counter() - t0
    print(f"classify_many, {len(jobs)} cases              {len(jobs) / wall:7.1f} cases/s")
    t0 = time.perf_counter()
    for parsed, analysis in jobs:
        classify(parsed, analysis)
    wall = time.perf_counter() - t0
    print(f"classify one by one, {len(jobs)} cases        {len(jobs) / wall:7.1f} cases/s")
    t0 = time.perf_counter()
    for row in rows:
        correlate(references.paste_evidence(row["evidence"]))
    wall = time.perf_counter() - t0
    print(f"(parse + correlate alone)             {len(rows) / wall:7.1f} cases/s")


def cli_jsonl(cases_path: Path) -> None:
    rows = [json.loads(x) for x in cases_path.read_text(encoding="utf-8").splitlines() if x.strip()]
    stdin = "".join(json.dumps({"id": r["id"], "text": r["evidence"]}) + "\n" for r in rows)
    t0 = time.perf_counter()
    p = subprocess.run(
        [sys.executable, "-m", "triage", "explain", "--jsonl"],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    wall = time.perf_counter() - t0
    answered = sum(1 for line in p.stdout.splitlines() if line.strip())
    if p.returncode != 0 or answered != len(rows):
        print(
            f"triage explain --jsonl: not measured (rc={p.returncode}: {p.stderr.strip()[-160:]})"
        )
        return
    rate = len(rows) / wall
    print(f"triage explain --jsonl, {len(rows)} cases      {rate:7.1f} cases/s end to end ", end="")
    print(f"({wall:.1f} s incl. start and model load)")


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    from triage.knowledge import corpus

    ap.add_argument("--cases", type=Path, default=corpus.reference_files()[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"## explain speed ({os.cpu_count()} CPUs, load average {load:.1f} at start)\n")
    cold(args.repeat)
    cold_cli(args.repeat)
    print()
    batch(args.cases)
    cli_jsonl(args.cases)
    return 0


if __name__ == "__main__":
    sys.exit(main())
