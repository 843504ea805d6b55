"""How often two labellers agree: the corpus's labels against a second, independent labelling.

    python bench/label_agreement.py [--second bench/expert/second_labels.jsonl]
    python bench/label_agreement.py --mined

The second labeller read the same public threads (found for most cases; the rest from the
evidence alone, `thread_found: false`) without seeing the corpus's labels, and labelled them
by the same guide (shared/corpus/README.md). Per field it prints:

- `top = top`: both labellers' first labels are the same;
- `accepted`: the second labeller's first label is among the corpus's label and its
  alternatives: the second labeller scored exactly as shared/corpus/score.py scores triage;
- Cohen's kappa of the first labels (chance-corrected agreement).

`--mined` compares instead the two labellings every case mined since the third round keeps
(`first_labels`, `second_labels`, made independently before any disagreement was settled),
over every case file that holds them, reference and held out alike (in aggregate only).

The `accepted` row is the ceiling the labels themselves set: a figure for triage above it
measures the labeller it was fitted to, not the failure.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from sklearn.metrics import cohen_kappa_score

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from triage.knowledge import corpus  # noqa: E402

FIELDS = ("symptom", "root_cause", "fix", "stage")
SECOND = Path(__file__).resolve().parent / "expert" / "second_labels.jsonl"


def accepted(row: Mapping[str, object], field: str) -> set[str]:
    alts = row.get(f"{field}_alt") or []
    return {str(row[field]), *(str(a) for a in alts)}  # type: ignore[union-attr]


def agreement(
    first: Sequence[Mapping[str, object]], second: Sequence[Mapping[str, object]]
) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for f in FIELDS:
        pairs = [(a, b) for a, b in zip(first, second, strict=True) if f in a and f in b]
        if not pairs:
            continue
        n = len(pairs)
        same = sum(a[f] == b[f] for a, b in pairs)
        scored = sum(str(b[f]) in accepted(a, f) for a, b in pairs)
        kappa = cohen_kappa_score([str(a[f]) for a, _ in pairs], [str(b[f]) for _, b in pairs])
        out[f] = {"n": n, "top = top": same / n, "accepted": scored / n, "kappa": kappa}
    return out


def print_table(subsets: Mapping[str, tuple[list, list]]) -> None:
    print("| cases | field | n | top = top | accepted (scored as triage) | Cohen's kappa |")
    print("|---|---|---|---|---|---|")
    for name, (first, second) in subsets.items():
        for f, m in agreement(first, second).items():
            print(
                f"| {name} | {f} | {m['n']:.0f} | {m['top = top']:.0%} | "
                f"{m['accepted']:.0%} | {m['kappa']:.2f} |"
            )


def mined_agreement() -> int:
    pairs = [
        (row["first_labels"], row["second_labels"])
        for p in corpus.reference_files() + corpus.held_out_files()
        for row in corpus.read_cases(p)
        if "first_labels" in row and "second_labels" in row
    ]
    found = [(a, b) for a, b in pairs if b.get("thread_found", True)]
    print(f"# two independent labellings of {len(pairs)} cases mined from the third round on\n")
    print_table(
        {
            "all": ([a for a, _ in pairs], [b for _, b in pairs]),
            "second read the thread": ([a for a, _ in found], [b for _, b in found]),
        }
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--second", type=Path, default=SECOND)
    ap.add_argument(
        "--mined", action="store_true", help="the two labellings kept since the third round"
    )
    args = ap.parse_args(argv)
    if args.mined:
        return mined_agreement()
    second = {r["id"]: r for r in map(json.loads, args.second.read_text().splitlines()) if r}
    held = {r["id"] for p in corpus.held_out_files() for r in corpus.read_cases(p)}
    if held & second.keys():
        ap.error("the second labelling names held-out cases; agreement is measured on reference")
    first = {
        r["id"]: r
        for p in corpus.reference_files()
        for r in corpus.read_cases(p)
        if r["id"] in second
    }
    missing = sorted(second.keys() - first.keys())
    if missing:
        ap.error(f"not reference cases: {', '.join(missing[:5])}")
    ids = sorted(first)
    subsets = {
        "all": ids,
        "thread found": [i for i in ids if second[i].get("thread_found", True)],
    }
    print(f"# two labellers on {len(ids)} reference cases ({args.second.name})\n")
    print_table(
        {name: ([first[i] for i in ids], [second[i] for i in ids]) for name, ids in subsets.items()}
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
