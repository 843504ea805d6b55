"""Is the culprit table right? Its accuracy on every real bundle, beside baselines and variants.

The culprit vote's signals and weights are `rules/culprit.yaml`. This script reads every bundle
that names its culprit and prints, per set:

* `corpus_samples/*/expected.json` (19 real torchrun jobs): right when the named ranks are
  exactly `culprit_ranks`;
* the reference part of `corpus_samples/third_party` (real third-party logs whose truth names a
  `culprit_rank`; the held-out part is skipped before any of its files is read): right when
  the truth's rank is among those named (as `bench/eval_jobs.py` counts it);

for the shipped table, torchrun's "Root Cause (first observed failure)" and "the rank of the
earliest initiating error" (no vote), then the table with each weight halved, doubled and
dropped (a signal no bundle
responds to is one the bundles do not check). Bundles are ingested and parsed once;
only the vote is run again per variant.

Usage: python bench/culprit_table.py [--quiet]   (--quiet: only the summary table)
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from culprit_vs_baselines import torchrun_root_cause  # noqa: E402
from eval_jobs import cases as third_party_cases  # noqa: E402
from eval_jobs import held_out, torchrun_verdict  # noqa: E402

from triage import knowledge  # noqa: E402
from triage.analysis import correlate  # noqa: E402
from triage.ingest import discover  # noqa: E402
from triage.knowledge.culprit import CulpritTable  # noqa: E402
from triage.model import ParsedSource  # noqa: E402
from triage.parsers import parse  # noqa: E402


@dataclass(frozen=True)
class Bundle:
    name: str
    set: str  # "corpus_samples" | "third_party reference"
    parsed: tuple[ParsedSource, ...]
    want: tuple[int, ...]
    exact: bool  # right only when exactly `want` is named (else: `want[0]` among those named)
    torchrun: tuple[int, ...]


def load(kb: knowledge.Knowledge) -> list[Bundle]:
    out: list[Bundle] = []
    for spec in sorted((ROOT / "corpus_samples").glob("*/expected.json")):
        exp = json.loads(spec.read_text(encoding="utf-8"))
        folder = spec.parent / "bundle" if (spec.parent / "bundle").is_dir() else spec.parent
        parsed = tuple(parse(s, kb=kb) for s in discover([str(folder)]))
        want = tuple(sorted(exp["culprit_ranks"]))
        out.append(
            Bundle(
                spec.parent.name,
                "corpus_samples",
                parsed,
                want,
                True,
                tuple(torchrun_root_cause(folder)),
            )
        )
    for case in third_party_cases([ROOT / "corpus_samples" / "third_party"]):
        if held_out(case.url) or case.truth.get("culprit_rank") is None:
            continue  # held-out logs are read by bench/eval_jobs.py alone, in aggregate
        parsed = tuple(parse(s, kb=kb) for s in discover(list(case.files)))
        out.append(
            Bundle(
                case.id,
                "third_party reference",
                parsed,
                (int(case.truth["culprit_rank"]),),
                False,
                torchrun_verdict(case).culprits,
            )
        )
    return out


def right(b: Bundle, got: Sequence[int]) -> bool:
    return tuple(sorted(got)) == b.want if b.exact else b.want[0] in got


Namer = Callable[[Bundle], Sequence[int]]


def with_table(kb: knowledge.Knowledge, table: CulpritTable) -> Namer:
    variant = replace(kb, culprit=table)
    return lambda b: correlate(b.parsed, variant).culprit_ranks


def earliest_error(kb: knowledge.Knowledge) -> Namer:
    def name(b: Bundle) -> Sequence[int]:
        first = correlate(b.parsed, kb).initiating_events
        return (first[0].rank,) if first and first[0].rank is not None else ()

    return name


def scaled(table: CulpritTable, signal: str, factor: float) -> CulpritTable:
    spec = table.signals[signal]
    cap = spec.cap * factor if spec.cap is not None else None
    changed = replace(spec, weight=spec.weight * factor, per=spec.per * factor, cap=cap)
    return replace(table, signals={**table.signals, signal: changed})


def main(argv: list[str]) -> int:
    kb = knowledge.load()
    bundles = load(kb)
    sets = sorted({b.set for b in bundles})
    systems: list[tuple[str, Namer]] = [
        ("triage, rules/culprit.yaml", with_table(kb, kb.culprit)),
        ("torchrun first observed failure", lambda b: b.torchrun),
        ("rank of the earliest initiating error", earliest_error(kb)),
    ]

    def row(name: str, namer: Namer) -> tuple[str, dict[str, int], list[str]]:
        hits: dict[str, int] = dict.fromkeys(sets, 0)
        missed = []
        for b in bundles:
            if right(b, namer(b)):
                hits[b.set] += 1
            else:
                missed.append(b.name)
        return name, hits, missed

    totals = {s: sum(b.set == s for b in bundles) for s in sets}
    print("| system | " + " | ".join(f"{s} ({totals[s]})" for s in sets) + " |")
    print("|---|" + "---|" * len(sets))
    for name, namer in systems:
        label, hits, missed = row(name, namer)
        print(f"| {label} | " + " | ".join(f"{hits[s]}/{totals[s]}" for s in sets) + " |")
        if "--quiet" not in argv and missed:
            print(f"|   missed: {', '.join(missed)} |" + " |" * len(sets))
    print("\nEach weight halved, doubled, dropped (only variants that change a bundle's answer):\n")
    print("| variant | " + " | ".join(sets) + " | bundles that change |")
    print("|---|" + "---|" * (len(sets) + 1))
    base = {b.name: tuple(sorted(systems[0][1](b))) for b in bundles}
    steady = []
    for signal in kb.culprit.signals:
        moved = False
        for factor, word in ((0.5, "halved"), (2.0, "doubled"), (0.0, "dropped")):
            namer = with_table(kb, scaled(kb.culprit, signal, factor))
            got = {b.name: tuple(sorted(namer(b))) for b in bundles}
            changed = [n for n in got if got[n] != base[n]]
            if not changed:
                continue
            moved = True
            hits = dict.fromkeys(sets, 0)
            for b in bundles:
                hits[b.set] += right(b, got[b.name])
            print(
                f"| {signal} {word} | "
                + " | ".join(f"{hits[s]}/{totals[s]}" for s in sets)
                + f" | {', '.join(changed[:4])}{' …' if len(changed) > 4 else ''} |"
            )
        if not moved:
            steady.append(signal)
    print(f"\nNo bundle changes when any of these is halved, doubled or dropped: {steady}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
