"""Cross-validated accuracy of the classifier on the labeled corpus, next to baselines.

    python bench/eval_corpus.py [--cases ../shared/corpus/dev.jsonl] [--folds 5]
                                [--write-calibration] [--details OUT.jsonl]

No case is ever scored against a neighbour set that contains it: neighbours are
leave-one-out (the case's own row, and any row with the same evidence, is masked), and the
calibrators are fitted on the other folds only (5-fold), so their scores and the abstention
are out-of-fold too. Scoring follows ../shared/corpus/score.py: the top answer counts when it
is the label or one of its *_alt; an abstention counts as wrong.

Systems: ours (rules + neighbours, fused and calibrated; `shipped` = what `classify()` does:
TF-IDF neighbours when the rules decide, MiniLM otherwise), and baselines: a naive keyword
table, TF-IDF nearest neighbours alone, MiniLM embeddings alone, rules alone.

`--write-calibration` fits the shipped calibrators on all out-of-fold rows and writes
models/calibration.json.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import regex

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from triage.classify import (  # noqa: E402
    Prepared,
    fusion,
    neighbours,
    prepare,
    rule_hits,
    should_abstain,  # noqa: E402
)
from triage.classify import rules_decide as decided  # noqa: E402
from triage.classify.calibration import (  # noqa: E402
    CALIBRATION_FILE,
    Calibration,
    LogisticCalibrator,
    expected_calibration_error,
    fit,
    reliability,
)
from triage.classify.types import NeighbourVote  # noqa: E402

FIELDS = ("symptom", "root_cause", "fix")
METHODS = ("embed", "tfidf")
K = neighbours.K_NEIGHBOURS

# What a person would try first: the first matching keyword names the answer.
KEYWORDS: list[tuple[str, str, str, str]] = [
    (r"out of memory|OutOfMemoryError|CUDA OOM", "S14", "R16", "F5"),
    (r"\bKilled\b|exitcode: -9|SIGKILL|oom", "S15", "R17", "F5"),
    (r"time[d ]?out|Watchdog|hang|stuck", "S17", "R11", "F4"),
    (r"shm|shared memory", "S12", "R05", "F5"),
    (r"rendezvous|init_process_group|MASTER_ADDR|MASTER_PORT", "S10", "R06", "F4"),
    (r"NCCL", "S12", "R07", "F4"),
    (r"No module named|ImportError|ModuleNotFoundError|undefined symbol", "S02", "R02", "F1"),
    (r"illegal memory access|CUDA error|device-side assert", "S26", "R28", "F5"),
    (r"\bnan\b|overflow|\binf\b", "S19", "R21", "F2"),
    (r"checkpoint|state_dict|load_state", "S29", "R20", "F3"),
    (r"nvcc|ninja|compil|build|gcc|cmake", "S01", "R03", "F1"),
    (r"version|mismatch", "S03", "R01", "F1"),
    (r"shape|size of tensor|size mismatch", "S07", "R19", "F6"),
    (r"unused param|find_unused_parameters|marked as ready", "S25", "R14", "F3"),
]


@dataclass
class Case:
    row: dict
    prep: Prepared
    accepted: dict[str, set[str]]


def load_cases(path: Path) -> list[Case]:
    cases = []
    for row in neighbours.read_cases(path):
        parsed = [neighbours.text_parsed(row["evidence"])]
        prep = prepare(parsed, neighbours.text_analysis(parsed))
        accepted = {f: {row[f], *row.get(f"{f}_alt", [])} for f in FIELDS}
        cases.append(Case(row, prep, accepted))
    return cases


def loo_votes(
    cases: Sequence[Case], index: neighbours.NeighbourIndex, method: str
) -> list[list[NeighbourVote]]:
    """Each case's neighbours with itself (and any identical evidence) masked out."""
    sims = index.similarities([c.prep.signature for c in cases], method)
    out = []
    for i, case in enumerate(cases):
        exclude = np.array(
            [
                ref.id == case.row["id"]
                or ref.evidence_sha == neighbours.evidence_hash(case.row["evidence"])
                for ref in index.cases
            ]
        )
        out.append(index.votes(sims[i], k=K, exclude=exclude))
    return out


def folds_of(n: int, k: int, seed: int = 7) -> list[int]:
    order = list(range(n))
    random.Random(seed).shuffle(order)
    fold = [0] * n
    for pos, i in enumerate(order):
        fold[i] = pos % k
    return fold


def oof_scores(
    cands: Sequence[Sequence[fusion.Candidate]],
    accepted: Sequence[set[str]],
    features: Sequence[str],
    fold: Sequence[int],
    k: int,
) -> list[list[fusion.Scored]]:
    """Calibrated scores of each case's candidates from a calibrator fitted on other folds."""
    out: list[list[fusion.Scored]] = [[] for _ in cands]
    for f in range(k):
        rows, ys = [], []
        for i, cs in enumerate(cands):
            if fold[i] != f:
                for c in cs:
                    rows.append(c.features)
                    ys.append(c.label in accepted[i])
        cal = fit(rows, ys, features)
        for i, cs in enumerate(cands):
            if fold[i] == f:
                out[i] = _rank(cs, cal.predict([c.features for c in cs]))
    return out


def _rank(cs: Sequence[fusion.Candidate], probs: Sequence[float]) -> list[fusion.Scored]:
    ranked = [fusion.Scored(c.label, p, c.features) for c, p in zip(cs, probs, strict=True)]
    ranked.sort(key=lambda s: (-s.score, -s.features.get("rule", 0.0), s.label))
    return ranked


def fused_oof(
    cases: Sequence[Case],
    votes: Sequence[Mapping[str, Sequence[NeighbourVote]]],
    mode: str,
    fold: Sequence[int],
    k: int,
) -> tuple[list[dict[str, list[fusion.Scored]]], dict[str, list[tuple[Mapping, bool]]]]:
    """Out-of-fold fused results for one neighbour method, and all candidate rows."""
    results: list[dict[str, list[fusion.Scored]]] = [{} for _ in cases]
    rows: dict[str, list[tuple[Mapping, bool]]] = {}
    for field in ("symptom", "root_cause"):
        cands = [
            fusion.candidates(field, c.prep.hits, v) for c, v in zip(cases, votes, strict=True)
        ]
        acc = [c.accepted[field] for c in cases]
        scored = oof_scores(cands, acc, fusion.features(mode, field), fold, k)
        for i, s in enumerate(scored):
            results[i][field] = s
        rows[field] = [(c.features, c.label in acc[i]) for i, cs in enumerate(cands) for c in cs]
    cands = [
        fusion.candidates(
            "fix", c.prep.hits, v, {s.label: s.score for s in results[i]["root_cause"][:3]}
        )
        for i, (c, v) in enumerate(zip(cases, votes, strict=True))
    ]
    acc = [c.accepted["fix"] for c in cases]
    for i, s in enumerate(oof_scores(cands, acc, fusion.features(mode, "fix"), fold, k)):
        results[i]["fix"] = s
    rows["fix"] = [(c.features, c.label in acc[i]) for i, cs in enumerate(cands) for c in cs]
    return results, rows


# --------------------------------------------------------------------------- baselines


def keyword_answer(text: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {f: [] for f in FIELDS}
    for pattern, s, r, f in KEYWORDS:
        if regex.search(pattern, text, regex.IGNORECASE):
            for field, label in zip(FIELDS, (s, r, f), strict=True):
                if label not in out[field]:
                    out[field].append(label)
    return out


def vote_answer(votes: Sequence[NeighbourVote]) -> dict[str, list[str]]:
    out = {}
    for field in FIELDS:
        share: dict[str, float] = {}
        for v in votes:
            label = getattr(v, field)
            share[label] = share.get(label, 0.0) + max(v.similarity, 0.0) ** 2
        out[field] = sorted(share, key=lambda k: -share[k])
    return out


def rules_answer(
    prep: Prepared,
    votes: Mapping[str, Sequence[NeighbourVote]] | None = None,
    layer: str | None = None,
) -> dict[str, list[str]]:
    """Rules ranked by their own weights (uncalibrated); with `votes`, the hand-weighted
    fusion `fusion.uncalibrated` (what classify() does when calibration.json is missing).
    `layer` keeps only the hits of one layer ("specific" or "generic")."""
    votes = votes or {}
    hits = list(prep.hits)
    if layer == "generic":  # the whole generic layer, before specific rules override it
        hits = [h for h in rule_hits(prep.parsed, prep.analysis, layered=False) if h.generic]
    elif layer == "specific":
        hits = [h for h in hits if not h.generic]
    out = {}
    for field in ("symptom", "root_cause"):
        cands = fusion.candidates(field, hits, votes)
        out[field] = [s.label for s in fusion.score(field, cands, None, "rules") if s.score > 0]
    top_rc = {r: 1.0 for r in out["root_cause"][:1]}
    fix_cands = fusion.candidates("fix", hits, votes, top_rc)
    out["fix"] = [s.label for s in fusion.score("fix", fix_cands, None, "rules") if s.score > 0]
    return out


# --------------------------------------------------------------------------- scoring


def accuracy(
    cases: Sequence[Case], answers: Sequence[Mapping[str, Sequence[str]]]
) -> dict[str, float]:
    n = len(cases)
    out = {}
    for field in FIELDS:
        for k in (1, 3):
            ok = sum(
                bool(set(a[field][:k]) & c.accepted[field])
                for c, a in zip(cases, answers, strict=True)
            )
            out[f"{field}@{k}"] = ok / n
    out["abstain"] = sum(not a["symptom"] and not a["root_cause"] for a in answers) / n
    return out


def labels_of(
    result: Mapping[str, list[fusion.Scored]], abstain_below: float, mode: str
) -> dict[str, list[str]]:
    if should_abstain(result, abstain_below, mode):
        return {f: [] for f in FIELDS}
    return {f: [s.label for s in result[f]] for f in FIELDS}


def choose_abstain(
    cases: Sequence[Case],
    results: Sequence[Mapping[str, list[fusion.Scored]]],
    modes: Sequence[str],
) -> float:
    """The highest score threshold below which at most one abstention in five drops an answer
    that was right (top symptom or top root cause): abstain only where the answer is mostly
    wrong anyway, since score.py counts an abstention as wrong."""
    best = 0.0
    for t in [x / 100 for x in range(5, 50)]:
        dropped = right = 0
        for c, r, m in zip(cases, results, modes, strict=True):
            if should_abstain(r, t, m):
                dropped += 1
                right += any(
                    r[f] and r[f][0].label in c.accepted[f] for f in ("symptom", "root_cause")
                )
        if dropped and right / dropped > 0.2:
            break
        best = t
    return best


def table(rows: Sequence[tuple[str, Mapping[str, float]]]) -> str:
    cols = ["symptom@1", "symptom@3", "root_cause@1", "root_cause@3", "fix@1", "fix@3", "abstain"]
    lines = [f"| system | {' | '.join(cols)} |", "|---" * (len(cols) + 1) + "|"]
    for name, m in rows:
        lines.append(f"| {name} | " + " | ".join(f"{m[c]:.1%}" for c in cols) + " |")
    return "\n".join(lines)


def reliability_table(pairs: Sequence[tuple[float, bool]], title: str) -> str:
    scores, right = [p for p, _ in pairs], [r for _, r in pairs]
    lines = [
        f"{title}: ECE {expected_calibration_error(scores, right):.3f}",
        "| score bin | n | mean score | observed accuracy |",
        "|---|---|---|---|",
    ]
    for lo, hi, n, mean_p, acc in reliability(scores, right):
        if n:
            lines.append(f"| {lo:.1f}-{hi:.1f} | {n} | {mean_p:.2f} | {acc:.2f} |")
        else:
            lines.append(f"| {lo:.1f}-{hi:.1f} | 0 | - | - |")
    return "\n".join(lines)


def rules_hash() -> str:
    import hashlib

    digest = hashlib.sha256()
    for path in sorted((Path(__file__).resolve().parents[1] / "rules").glob("*.yaml")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def bundle_table(root: Path) -> str:
    """classify() on every corpus_samples bundle (real jobs' evidence, read by the pipeline's
    own stages), its own index entry excluded; top symptom and top-3 root causes vs
    expected.json."""
    import os

    from triage.analysis import correlate
    from triage.classify import classify

    lines = ["| bundle | expected S / R | got symptoms | got root causes | S@1 | R@3 |"]
    lines.append("|---|---|---|---|---|---|")
    n = ok_s = ok_r = 0
    for exp_path in sorted(root.glob("*/expected.json")):
        exp = json.loads(exp_path.read_text(encoding="utf-8"))
        parsed = neighbours.bundle_evidence(exp_path.parent)  # without its truth files
        os.environ[neighbours.EXCLUDE_ENV] = neighbours.bundle_case_id(exp_path.parent)
        try:
            result = classify(parsed, correlate(parsed))
        finally:
            os.environ.pop(neighbours.EXCLUDE_ENV, None)
        got_s = [x.id for x in result.symptoms[:3]]
        got_r = [x.id for x in result.root_causes[:3]]
        s_ok = bool(got_s) and got_s[0] in {exp["symptom"], *exp.get("symptom_alt", [])}
        r_ok = bool(set(got_r) & {exp["root_cause"], *exp.get("root_cause_alt", [])})
        n, ok_s, ok_r = n + 1, ok_s + s_ok, ok_r + r_ok
        lines.append(
            f"| {exp_path.parent.name} | {exp['symptom']} / {exp['root_cause']} | "
            f"{' '.join(got_s) or '-'} | {' '.join(got_r) or '-'} | "
            f"{'ok' if s_ok else 'MISS'} | {'ok' if r_ok else 'MISS'} |"
        )
    lines.append(f"\n{n} bundles: symptom@1 {ok_s}/{n}, root_cause@3 {ok_r}/{n}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--cases", type=Path, default=neighbours.default_corpus())
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--write-calibration", action="store_true")
    ap.add_argument("--details", type=Path)
    ap.add_argument(
        "--bundles", type=Path, default=Path(__file__).resolve().parents[1] / "corpus_samples"
    )
    args = ap.parse_args(argv)

    t0 = time.perf_counter()
    cases = load_cases(args.cases)
    index = neighbours.load_index()
    if index is None or neighbours.stale_reasons(cases_path=args.cases):
        index = neighbours.load_index(neighbours.build_index(cases_path=args.cases))
    assert index is not None
    print(
        f"{len(cases)} cases from {args.cases}; index of {len(index)} cases; "
        f"prepared in {time.perf_counter() - t0:.1f}s",
        file=sys.stderr,
    )
    fold = folds_of(len(cases), args.folds)
    votes = {m: loo_votes(cases, index, m) for m in METHODS}
    fused = {}
    cand_rows = {}
    for m in METHODS:
        mode_votes = [
            {src: votes[src][i] for src in fusion.MODE_SOURCES[m]} for i in range(len(cases))
        ]
        fused[m], cand_rows[m] = fused_oof(cases, mode_votes, m, fold, args.folds)
    # What classify() ships: TF-IDF first; MiniLM only where the rules do not decide.
    shipped = [
        fused["tfidf"][i] if decided(fused["tfidf"][i]) else fused["embed"][i]
        for i in range(len(cases))
    ]
    modes = ["tfidf" if decided(fused["tfidf"][i]) else "embed" for i in range(len(cases))]
    abstain_below = choose_abstain(cases, shipped, modes)
    plain = [{f: [s.label for s in r[f]] for f in FIELDS} for r in shipped]

    rows = [
        (
            "ours (shipped: rules + MiniLM, TF-IDF when rules decide)",
            accuracy(
                cases,
                [labels_of(r, abstain_below, m) for r, m in zip(shipped, modes, strict=True)],
            ),
        ),
        (
            "ours, rules + MiniLM neighbours",
            accuracy(cases, [labels_of(r, abstain_below, "embed") for r in fused["embed"]]),
        ),
        (
            "ours, rules + TF-IDF neighbours (--no-embed)",
            accuracy(cases, [labels_of(r, abstain_below, "tfidf") for r in fused["tfidf"]]),
        ),
        ("ours, no abstention", accuracy(cases, plain)),
        (
            "baseline: keyword table",
            accuracy(cases, [keyword_answer(c.row["evidence"]) for c in cases]),
        ),
        (
            f"baseline: TF-IDF nearest neighbours (k={K})",
            accuracy(cases, [vote_answer(v) for v in votes["tfidf"]]),
        ),
        (
            f"baseline: MiniLM embeddings alone (k={K})",
            accuracy(cases, [vote_answer(v) for v in votes["embed"]]),
        ),
        (
            "baseline: rules alone (specific + generic layer)",
            accuracy(cases, [rules_answer(c.prep) for c in cases]),
        ),
        (
            "baseline: specific rules alone",
            accuracy(cases, [rules_answer(c.prep, layer="specific") for c in cases]),
        ),
        (
            "baseline: generic layer alone",
            accuracy(cases, [rules_answer(c.prep, layer="generic") for c in cases]),
        ),
        (
            "ours without calibration (hand-weighted fusion)",
            accuracy(
                cases,
                [
                    rules_answer(c.prep, {m: votes[m][i] for m in METHODS})
                    for i, c in enumerate(cases)
                ],
            ),
        ),
    ]
    print(
        f"\n## Cross-validated accuracy on {args.cases.name} (n={len(cases)}, leave-one-out "
        f"neighbours, {args.folds}-fold calibration, abstain below {abstain_below:.2f})\n"
    )
    print(table(rows))
    by_quality: dict[str, list[int]] = {}
    for i, c in enumerate(cases):
        by_quality.setdefault(c.row.get("evidence_quality", "?"), []).append(i)
    print("\nours (shipped) by evidence quality:")
    for q, idx in sorted(by_quality.items()):
        sub = [cases[i] for i in idx]
        m = accuracy(sub, [labels_of(shipped[i], abstain_below, modes[i]) for i in idx])
        print(
            f"  {q:8s} n={len(idx):3d}  S@1 {m['symptom@1']:.0%}  "
            f"R@3 {m['root_cause@3']:.0%}  F@1 {m['fix@1']:.0%}  abstain {m['abstain']:.0%}"
        )
    print("\nnearest reference case (leave-one-out): is its symptom right? (sets NEAREST_FLOOR)")
    for m in METHODS:
        pairs = [
            (v[0].similarity, v[0].symptom in c.accepted["symptom"])
            for c, v in zip(cases, votes[m], strict=True)
            if v
        ]
        edges = (0.0, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 1.01)
        cells = [
            f"{lo:.1f}-{min(hi, 1.0):.1f}: {acc:.0%} of {n}"
            for lo, hi, n, _, acc in reliability(
                [p for p, _ in pairs], [r for _, r in pairs], edges
            )
            if n
        ]
        print(f"  {m:6s} " + "; ".join(cells))
    stage_ok = 0
    for i, c in enumerate(cases):
        stages = fusion.stage_scores(shipped[i]["symptom"], c.prep.hits, votes[modes[i]][i])
        stage_ok += bool(stages) and stages[0].label == c.row["stage"]
    print(f"\nstage@1 (ours, shipped, no abstention): {stage_ok / len(cases):.1%}")
    n_decided = sum(decided(fused["tfidf"][i]) for i in range(len(cases)))
    ok_fast = sum(
        bool(fused["tfidf"][i]["symptom"])
        and fused["tfidf"][i]["symptom"][0].label in cases[i].accepted["symptom"]
        for i in range(len(cases))
        if decided(fused["tfidf"][i])
    )
    ok_embed = sum(
        bool(fused["embed"][i]["symptom"])
        and fused["embed"][i]["symptom"][0].label in cases[i].accepted["symptom"]
        for i in range(len(cases))
        if decided(fused["tfidf"][i])
    )
    print(
        f"\nrules decide (no model load) on {n_decided}/{len(cases)} cases; symptom@1 there: "
        f"TF-IDF path {ok_fast}/{n_decided}, MiniLM path {ok_embed}/{n_decided}"
    )

    print()
    for field in ("symptom", "root_cause", "fix"):
        pairs = [
            (r[field][0].score, r[field][0].label in c.accepted[field])
            for c, r in zip(cases, shipped, strict=True)
            if r[field]
        ]
        print(
            reliability_table(
                pairs, f"reliability of the top {field} score (ours, shipped, out-of-fold)"
            )
        )
        print()

    if args.details:
        with open(args.details, "w", encoding="utf-8") as fh:
            for c, r in zip(cases, shipped, strict=True):
                fh.write(
                    json.dumps(
                        {
                            "id": c.row["id"],
                            "truth": [c.row["symptom"], c.row["root_cause"], c.row["fix"]],
                            "got": [
                                [(s.label, round(s.score, 2)) for s in r[f][:3]] for f in FIELDS
                            ],
                            "rules": sorted({h.rule_id for h in c.prep.hits}),
                            "signature": c.prep.signature,
                        }
                    )
                    + "\n"
                )

    if args.write_calibration:
        cals: dict[str, dict[str, LogisticCalibrator]] = {}
        for m in METHODS:
            cals[m] = {
                field: fit(
                    [f for f, _ in cand_rows[m][field]],
                    [y for _, y in cand_rows[m][field]],
                    fusion.features(m, field),
                )
                for field in FIELDS
            }
        out = neighbours.models_dir() / CALIBRATION_FILE
        Calibration(
            cals,
            abstain_below,
            {
                "cases": len(cases),
                "source": args.cases.name,
                "index_inputs": index.manifest.get("inputs", {}),
                "folds": args.folds,
                "fitted_by": "bench/eval_corpus.py --write-calibration",
                "taxonomy_version": 1,
                # the calibrators read the rules' weights: refit when this no longer matches
                "rules_sha256": rules_hash(),
            },
        ).save(out)
        print(f"calibration written to {out}", file=sys.stderr)
    if args.bundles.is_dir():
        print(f"\n## corpus_samples bundles ({args.bundles})\n")
        print(bundle_table(args.bundles))
    print(f"total {time.perf_counter() - t0:.1f}s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
