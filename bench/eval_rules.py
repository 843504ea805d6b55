"""Rules alone on labeled cases: how often the summed rule weights name the right label.

usage: python bench/eval_rules.py [CASES.jsonl] [--whole] [-v]
       python bench/eval_rules.py --bundles corpus_samples [-v]

Each case's `evidence` goes through `rules.match_text` (the log parser's events, then the
paste's text for the specific rules that hit no event, kept where the match spans events or
stands on a line no event holds: what `triage explain` reads too); `--whole` reads the paste as
one event only. The answer
for a field is the id with the highest summed rule weight; hits of cascade rules count half
when a non-cascade rule also hit (what fusion does).
A case is right when that id is the label or one of its accepted alternatives.
"""

from __future__ import annotations

import json
import sys
import time
from collections import defaultdict
from pathlib import Path

from triage.classify import rules as engine
from triage.classify.types import RuleHit
from triage.parsers import parse_text


def default_cases() -> Path:
    from triage.knowledge import corpus

    return corpus.reference_files()[0]


FIELDS = ("symptom", "root_cause", "fix", "stage")


def ranked(hits: list[RuleHit], field: str) -> list[tuple[str, float]]:
    has_primary = any(not h.from_cascade for h in hits)
    totals: dict[str, float] = defaultdict(float)
    seen: set[tuple[str, str]] = set()
    for h in hits:
        for label, w in getattr(h, field).items():
            # One vote per rule and label: a rule repeated on many lines is one piece of evidence.
            if (h.rule_id, label) in seen:
                continue
            seen.add((h.rule_id, label))
            totals[label] += w * (0.5 if h.from_cascade and has_primary else 1.0)
    return sorted(totals.items(), key=lambda kv: -kv[1])


def bundle_cases(root: Path) -> list[tuple[dict, list[RuleHit]]]:
    """Each corpus_samples bundle (a folder with expected.json) through ingest/parse/correlate."""
    from triage.analysis import correlate
    from triage.train.references import bundle_evidence

    out = []
    for expected in sorted(root.glob("*/expected.json")):
        case = json.loads(expected.read_text())
        case["id"] = expected.parent.name
        for field in FIELDS:
            case.setdefault(f"{field}_alt", [])
        parsed = bundle_evidence(expected.parent)
        analysis = correlate(parsed)
        events = [ev for ps in parsed for ev in ps.events]
        kinds = {ps.source.path: ps.source.kind for ps in parsed}
        out.append((case, engine.match_events(events, analysis, source_kinds=kinds)))
    return out


def main(argv: list[str]) -> int:
    if "--bundles" in argv:
        return main_bundles(Path(argv[argv.index("--bundles") + 1]), "-v" in argv)
    args = [a for a in argv if not a.startswith("-")]
    whole, verbose = "--whole" in argv, "-v" in argv
    cases = [
        json.loads(x)
        for x in Path(args[0] if args else default_cases()).read_text().splitlines()
        if x.strip()
    ]
    ruleset = engine.load()
    n = len(cases)
    ok = defaultdict(int)
    covered = 0
    t0 = time.perf_counter()
    for case in cases:
        text = case["evidence"]
        if whole:
            hits = engine.match_events([engine.whole_text_event(text)], rules=ruleset)
        else:
            hits = engine.match_text(text, parse_text(text).events)
        if hits:
            covered += 1
        row = {}
        for field in FIELDS:
            top = ranked(hits, field)
            truth = {case[field], *case.get(f"{field}_alt", [])}
            got1 = top[0][0] if top else None
            got3 = [k for k, _ in top[:3]]
            ok[f"{field}@1"] += got1 in truth
            ok[f"{field}@3"] += bool(truth & set(got3))
            if hits:
                ok[f"{field}@1|hit"] += got1 in truth
            row[field] = (case[field], got3)
        if verbose and (
            not hits
            or row["symptom"][1][:1] != [case["symptom"]]
            or row["root_cause"][1][:1] != [case["root_cause"]]
        ):
            rid = sorted({h.rule_id for h in hits})
            s_, r_, f_ = row["symptom"], row["root_cause"], row["fix"]
            print(f"{case['id']:8s} S {s_[0]}->{s_[1]} R {r_[0]}->{r_[1]} F {f_[0]}->{f_[1]} {rid}")
    wall = time.perf_counter() - t0
    print(f"cases {n}, rules {len(ruleset)}, mode {'whole text' if whole else 'parsed'}")
    print(f"coverage (>=1 hit)   {covered / n:6.1%}  ({covered})")
    for key in (
        "symptom@1",
        "symptom@3",
        "root_cause@1",
        "root_cause@3",
        "fix@1",
        "fix@3",
        "stage@1",
    ):
        print(f"{key:20s} {ok[key] / n:6.1%}")
    for key in ("symptom@1|hit", "root_cause@1|hit", "fix@1|hit"):
        print(f"{key:20s} {ok[key] / max(covered, 1):6.1%}  (of cases with a hit)")
    print(f"ms/case              {1000 * wall / n:6.1f}")
    return 0


def main_bundles(root: Path, verbose: bool) -> int:
    rows = bundle_cases(root)
    ok: dict[str, int] = defaultdict(int)
    for case, hits in rows:
        got = {}
        for field in FIELDS:
            top = ranked(hits, field)
            truth = {case[field], *case.get(f"{field}_alt", [])}
            got[field] = [k for k, _ in top[:3]]
            ok[f"{field}@1"] += bool(top) and top[0][0] in truth
        if verbose:
            print(
                f"{case['id']:40s} S {case['symptom']}->{got['symptom']} "
                f"R {case['root_cause']}->{got['root_cause']} F {case['fix']}->{got['fix']} "
                f"{sorted({h.rule_id for h in hits})}"
            )
    n = len(rows)
    print(f"bundles {n}")
    for key in ("symptom@1", "root_cause@1", "fix@1", "stage@1"):
        print(f"{key:20s} {ok[key] / max(n, 1):6.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
