"""Whole real job logs (corpus_samples/third_party/): triage next to two plain baselines.

Each case is a job's output as a public project committed or pasted it, with a truth file
(`case.json`: outcome, symptom, culprit). The cases are split once by a hash of their URL (the
same rule as the reference corpus): about 30% are held out, and no rule is written from them.
This prints, for each part, from the same run:

* triage (default settings, or `--no-embed`): the outcome; for failed and hung jobs the
  symptom@1 and the culprit where the log shows one; for healthy, stopped and incomplete jobs
  whether any symptom scored 0.3 or more (a failure invented);
* torchrun's "first observed failure": a job is failed when its log holds torchrun's
  `Root Cause (first observed failure)` block, with that block's rank as the culprit, else it
  is taken as succeeded;
* `grep -c -E 'Error|Traceback|WARN'` as a failure detector: any hit means failed.

A case is *right* when its outcome is right and, for a failure, its symptom (where the truth
names one) and culprit (where the truth names one) are too; for a job that did not fail, when
no symptom reached 0.3. Held-out cases are shown only in aggregate (`--show` lists the
reference part case by case).

    python bench/eval_jobs.py [--no-embed] [--show]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CASES = REPO / "corpus_samples" / "third_party"
FAILURES = {"failed", "hung"}
_TORCHRUN_ROOT = re.compile(r"Root Cause \(first observed failure\):")
_TORCHRUN_RANK = re.compile(r"^\s*(?:\[\w+\]:)?\s*rank\s*:\s*(-?\d+)", re.M)
_GREP = re.compile(r"Error|Traceback|WARN")


def held_out(url: str) -> bool:
    """The corpus's split rule: a case is held out iff its URL's hash mod 10 is below 3."""
    digest = hashlib.sha256(url.strip().rstrip("/").lower().encode()).hexdigest()
    return int(digest, 16) % 10 < 3


@dataclass(frozen=True)
class Case:
    id: str
    folder: Path
    url: str
    truth: dict
    files: tuple[str, ...]


def cases(folders: list[Path]) -> list[Case]:
    out = []
    for spec in sorted(p for folder in folders for p in folder.glob("*/case.json")):
        meta = json.loads(spec.read_text(encoding="utf-8"))
        folder = spec.parent
        files = tuple(
            str(p) for p in sorted(folder.rglob("*")) if p.is_file() and p.name != "case.json"
        )
        out.append(Case(meta["id"], folder, meta["url"], meta["truth"], files))
    return out


@dataclass
class Verdict:
    outcome: str
    symptom: str | None = None
    symptom_score: float = 0.0
    culprits: tuple[int, ...] = ()
    seconds: float = 0.0


@dataclass
class Tally:
    n: int = 0
    right: int = 0
    outcome_right: int = 0
    healthy: int = 0  # cases that did not fail (succeeded, stopped, incomplete)
    invented: int = 0  # ... of which got a symptom at 0.3 or more
    stops: int = 0
    stops_called: int = 0
    failures: int = 0
    failure_detected: int = 0  # failed/hung called failed or hung
    symptoms: int = 0
    symptoms_right: int = 0
    culprits: int = 0
    culprits_right: int = 0
    wrong: list[str] = field(default_factory=list)


def triage_verdict(case: Case, use_embeddings: bool) -> Verdict:
    from triage import pipeline

    started = time.perf_counter()
    diagnosis = pipeline.diagnose(list(case.files), pipeline.Options(use_embeddings=use_embeddings))
    took = time.perf_counter() - started
    outcome = diagnosis.outcome.id.value if diagnosis.outcome else "unknown"
    top = diagnosis.symptoms[0] if diagnosis.symptoms else None
    return Verdict(
        outcome,
        top.id if top else None,
        top.score if top else 0.0,
        tuple(diagnosis.culprit_ranks),
        took,
    )


def _text(case: Case) -> str:
    parts = []
    for name in case.files:
        try:
            parts.append(Path(name).read_text(encoding="utf-8", errors="replace"))
        except OSError:
            continue
    return "\n".join(parts)


def torchrun_verdict(case: Case) -> Verdict:
    text = _text(case)
    block = _TORCHRUN_ROOT.search(text)
    if block is None:
        return Verdict("succeeded")
    rank = _TORCHRUN_RANK.search(text, block.end())
    return Verdict("failed", culprits=(int(rank.group(1)),) if rank else ())


def grep_verdict(case: Case) -> Verdict:
    hits = sum(1 for line in _text(case).splitlines() if _GREP.search(line))
    return Verdict("failed" if hits else "succeeded")


def score(tally: Tally, case: Case, got: Verdict) -> None:
    truth = case.truth
    want = truth["outcome"]
    tally.n += 1
    ok_outcome = got.outcome == want
    ok = ok_outcome
    tally.outcome_right += ok_outcome
    if want in FAILURES:
        tally.failures += 1
        tally.failure_detected += got.outcome in FAILURES
        accepted = {truth.get("symptom"), *(truth.get("symptom_alt") or [])} - {None}
        if accepted:
            tally.symptoms += 1
            hit = got.symptom in accepted
            tally.symptoms_right += hit
            ok = ok and hit
        if truth.get("culprit_rank") is not None:
            tally.culprits += 1
            hit = truth["culprit_rank"] in got.culprits
            tally.culprits_right += hit
            ok = ok and hit
    else:
        tally.healthy += 1
        invented = got.symptom is not None and got.symptom_score >= 0.3
        tally.invented += invented
        ok = ok and not invented
        if want == "stopped":
            tally.stops += 1
            tally.stops_called += got.outcome == "stopped"
    tally.right += ok
    if not ok:
        tally.wrong.append(case.id)


def pct(a: int, b: int) -> str:
    return f"{100 * a / b:.0f}% ({a}/{b})" if b else "–"


def table(title: str, tallies: dict[str, Tally]) -> None:
    print(f"\n### {title}\n")
    print(
        "| system | right | outcome | failures found | symptom@1 | culprit | "
        "healthy with a symptom ≥ 0.3 | stops called stopped |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name, t in tallies.items():
        print(
            f"| {name} | {pct(t.right, t.n)} | {pct(t.outcome_right, t.n)} | "
            f"{pct(t.failure_detected, t.failures)} | {pct(t.symptoms_right, t.symptoms)} | "
            f"{pct(t.culprits_right, t.culprits)} | {pct(t.invented, t.healthy)} | "
            f"{pct(t.stops_called, t.stops)} |"
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--no-embed", action="store_true", help="triage without the model")
    ap.add_argument("--show", action="store_true", help="list reference cases one by one")
    ap.add_argument("--cases", action="append", type=Path, help=f"case folders (default {CASES})")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    found = cases(args.cases or [CASES])
    if not found:
        print(f"no cases under {CASES}", file=sys.stderr)
        return 1
    parts = {
        "reference": [c for c in found if not held_out(c.url)],
        "held out": [c for c in found if held_out(c.url)],
    }
    name = "triage --no-embed" if args.no_embed else "triage"
    for part, chosen in parts.items():
        tallies = {
            name: Tally(),
            "torchrun first observed failure": Tally(),
            "grep -c -E 'Error|Traceback|WARN'": Tally(),
        }
        seconds = []
        for case in chosen:
            got = triage_verdict(case, not args.no_embed)
            seconds.append(got.seconds)
            score(tallies[name], case, got)
            score(tallies["torchrun first observed failure"], case, torchrun_verdict(case))
            score(tallies["grep -c -E 'Error|Traceback|WARN'"], case, grep_verdict(case))
            if args.show and part == "reference":
                t = case.truth
                print(
                    f"{case.id}: truth {t['outcome']}/{t.get('symptom')}/"
                    f"{t.get('culprit_rank')} -> {got.outcome}/{got.symptom}"
                    f"@{got.symptom_score:.2f}/{list(got.culprits)} ({got.seconds:.1f}s)"
                )
        outcomes = sorted({c.truth["outcome"] for c in chosen})
        counts = ", ".join(f"{o} {sum(c.truth['outcome'] == o for c in chosen)}" for o in outcomes)
        table(f"{part}: {len(chosen)} cases ({counts})", tallies)
        if seconds:
            seconds.sort()
            print(
                f"\ntriage wall per case: median {seconds[len(seconds) // 2]:.2f} s, "
                f"max {seconds[-1]:.2f} s"
            )
        if part == "reference" and tallies[name].wrong:
            print(f"\nreference cases triage got wrong: {', '.join(tallies[name].wrong)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
