"""The default similarity model (static) next to the full MiniLM, from the same run.

    python bench/embedding_speed.py [--repeat 3] [--accuracy]

For each embedding space (`TRIAGE_EMBEDDING=static`, the default, and `minilm`, the
`[minilm]` extra), each command a fresh process as a user runs it:

- one vague paste no rule settles (the similarity model must embed it): wall and peak RSS of
  `triage explain`, median of --repeat;
- `triage explain --jsonl` over the reference cases (models/corpus, `use: reference`):
  cases/s end to end, and warm (beyond a run of the vague paste alone: once start-up and
  the model's load are paid);
- a small log folder (a corpus_samples bundle of 3 ranks): wall and peak RSS of `triage DIR`.

`--accuracy` also runs bench/eval_corpus.py --held-out once per space and prints the rows of
triage as shipped (cross-validated reference cases, and each held-out file in aggregate).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SPACES = ("static", "minilm")
# No rule, specific or generic, settles it (accuracy that differs between layouts, no error):
# the similarity model embeds it.
VAGUE = (
    "epoch 3 | val_acc 0.612 on 8 GPUs with FSDP\n"
    "epoch 3 | val_acc 0.741 on 1 GPU, same seed and global batch"
)
BUNDLE = ROOT / "corpus_samples" / "skip_collective_empty_val_shard" / "bundle"


def _env(space: str) -> dict[str, str]:
    return {**os.environ, "TRIAGE_EMBEDDING": space, "PYTHONPATH": str(ROOT)}


def _run(args: list[str], space: str, stdin_text: str = "") -> tuple[float, float, float, int]:
    """Wall seconds, CPU seconds, peak RSS (MiB) and exit code of one fresh `triage` process.
    On a shared machine the wall time grows with the load; the CPU time much less."""
    with tempfile.TemporaryFile("w+", encoding="utf-8") as stdin:
        stdin.write(stdin_text)
        stdin.seek(0)
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-m", "triage", *args],
            stdin=stdin,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=ROOT,
            env=_env(space),
        )
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    cpu = usage.ru_utime + usage.ru_stime
    return wall, cpu, usage.ru_maxrss / 1024, proc.returncode  # ru_maxrss: KiB on Linux


def single(args: list[str], space: str, repeat: int, stdin_text: str = "") -> str:
    runs = [_run(args, space, stdin_text) for _ in range(repeat)]
    if any(rc != 0 for *_, rc in runs):
        return f"failed (exit {runs[0][3]})"
    wall = statistics.median(r[0] for r in runs)
    cpu = statistics.median(r[1] for r in runs)
    rss = statistics.median(r[2] for r in runs)
    return f"{wall:.2f} s wall ({cpu:.2f} s CPU), {rss:.0f} MiB"


def _jsonl_run(space: str, stdin: str, n: int) -> tuple[float, float, str]:
    """Wall and CPU seconds of one `triage explain --jsonl` process over `n` lines."""
    with tempfile.TemporaryFile("w+", encoding="utf-8") as fh:
        fh.write(stdin)
        fh.seek(0)
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-m", "triage", "explain", "--jsonl"],
            stdin=fh,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            cwd=ROOT,
            env=_env(space),
        )
        assert proc.stdout is not None
        answered = sum(1 for line in proc.stdout if line.strip())
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
    rc = os.waitstatus_to_exitcode(status)
    problem = "" if rc == 0 and answered == n else f"exit {rc}, {answered}/{n} answers"
    return wall, usage.ru_utime + usage.ru_stime, problem


def jsonl(space: str, cases: list[dict]) -> str:
    """Cases/s end to end, and warm: n cases over the time a run of n takes beyond a run of
    the vague paste alone (start-up, knowledge and the model's load, paid once)."""
    lines = [json.dumps({"id": r["id"], "text": r["evidence"]}) + "\n" for r in cases]
    one_wall, _, problem = _jsonl_run(space, json.dumps({"id": 0, "text": VAGUE}) + "\n", 1)
    wall, cpu, problem_n = _jsonl_run(space, "".join(lines), len(lines))
    if problem or problem_n:
        return f"failed ({problem or problem_n})"
    warm = len(lines) / max(wall - one_wall, 1e-9)
    return (
        f"{warm:.1f} cases/s warm, {len(lines) / wall:.1f} end to end "
        f"({wall:.1f} s wall, {cpu:.1f} s CPU; the vague paste alone {one_wall:.1f} s)"
    )


def accuracy(space: str) -> list[str]:
    """The rows of triage as shipped from eval_corpus.py --held-out in this space."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "eval_corpus.py"), "--held-out"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=_env(space),
        check=True,
    )
    out, section = [], "cross-validated reference cases"
    for line in proc.stdout.splitlines():
        if line.startswith("## "):
            section = line[3:].split(" (")[0]
        elif line.startswith("| triage (shipped) |"):
            out.append(f"| {space} | {section} " + line[len("| triage (shipped) ") :])
    return out


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--accuracy", action="store_true")
    args = ap.parse_args()
    from triage.knowledge import corpus

    cases = [row for path in corpus.reference_files() for row in corpus.read_cases(path)]
    load = os.getloadavg()[0]
    print(f"## similarity model: static vs MiniLM ({os.cpu_count()} CPUs, load {load:.1f})\n")
    print("| measure | static (default) | MiniLM (`TRIAGE_EMBEDDING=minilm`) |")
    print("|---|---|---|")
    rows = [
        (
            "`triage explain` a vague paste: wall (CPU), peak RSS",
            lambda s: single(["explain", "-q"], s, args.repeat, VAGUE),
        ),
        (
            f"`triage explain --jsonl`, the {len(cases)} reference cases",
            lambda s: jsonl(s, cases),
        ),
        (
            f"`triage {BUNDLE.parent.name}/bundle`: wall (CPU), peak RSS",
            lambda s: single([str(BUNDLE), "--format", "json", "-q"], s, args.repeat),
        ),
    ]
    for name, measure in rows:
        print(f"| {name} | " + " | ".join(measure(s) for s in SPACES) + " |")
    print(f"\nload at the end {os.getloadavg()[0]:.1f}")
    if args.accuracy:
        print("\n## triage as shipped, per space (bench/eval_corpus.py --held-out)\n")
        print(
            "| space | cases | S@1 | S@3 | R@1 | R@3 | F@1 | F@3 | abstain | cov>=.8 "
            "| prec>=.8 | ECE |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for space in SPACES:
            for line in accuracy(space):
                print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
