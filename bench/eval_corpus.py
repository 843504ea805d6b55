"""Accuracy of the classifier on the labeled corpus, next to its parts and baselines.

    python bench/eval_corpus.py [--cases FILE ...] [--folds 5] [--held-out]
                                [--write-calibration] [--details OUT.jsonl] [--tune]

Reference cases (the `use: reference` files of models/corpus/manifest.yaml) are scored
cross-validated: no case is ever scored against a neighbour set that contains it
(neighbours are leave-one-out: the case's own row, and any row with the same evidence, is
masked), and the learned model and the calibrators are fitted on the other folds only
(5-fold), so their scores and the abstention are out-of-fold too. Held-out files
(`use: held_out`, with `--held-out`) are scored once, in aggregate, with what ships: the
index, calibration and learned model in models/, never fitted on them; each file, then all of
them together (the figure to quote). Scoring follows
shared/corpus/score.py: the top answer counts when it is the label or one of its *_alt; an
abstention counts as wrong.

Systems, all in one run: triage as shipped (rules + neighbours + learned model, fused and
calibrated: TF-IDF neighbours when the rules decide, the embedding otherwise), triage
--no-embed, triage without the learned model, and its parts alone: rules (specific +
generic), the generic layer, TF-IDF kNN, embedding kNN, the learned model; a naive keyword
table. The embedding is the active space (`TRIAGE_EMBEDDING`: the static default, or
`minilm`), and `--write-calibration` writes that space's calibration and learned model;
bench/embedding_speed.py runs this script once per space and prints them side by side.
Columns: symptom@1/@3, root cause@1/@3, fix@1/@3, abstentions, and for the top symptom's
score: the share of cases answered at >= 0.8 (`cov>=.8`), how many of those are right
(`prec>=.8`) and the expected calibration error (`ECE`). Systems whose score is not a
probability (kNN vote shares, rule weights) are marked `raw`.

`--write-calibration` fits the shipped calibrators on all out-of-fold rows, the learned model
on all reference cases, and writes both to models/. `--tune` prints the learned model's
cross-validated accuracy over a small grid of its settings (reference cases only).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import regex

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from triage.classify import (  # noqa: E402
    Prepared,
    embedding,  # noqa: E402
    fix_prior,  # noqa: E402
    fusion,
    learned,
    load_learned,
    model_inputs,
    neighbours,
    prepare,
    rule_hits,
    should_abstain,
)
from triage.classify import rules_decide as decided  # noqa: E402
from triage.classify.calibration import (  # noqa: E402
    Calibration,
    LogisticCalibrator,
    expected_calibration_error,
    fit,
    reliability,
)
from triage.classify.fix_prior import FixPrior  # noqa: E402
from triage.classify.learned import LearnedClassifier  # noqa: E402
from triage.classify.standing import standing  # noqa: E402
from triage.classify.types import NeighbourVote  # noqa: E402
from triage.knowledge import corpus  # noqa: E402
from triage.train import indexing, references  # noqa: E402

FIELDS = ("symptom", "root_cause", "fix")
METHODS = ("embed", "tfidf")
K = neighbours.K_NEIGHBOURS
# The learned model's settings, chosen by `--tune` (5-fold CV on the reference cases).
MODEL_SETTINGS = {"c": 4.0, "weights": (1.0, 1.0, 1.0), "min_df": 2, "alt_weight": 0.0}

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

# An answer: per field, labels with their scores, best first (empty lists: abstained).
Answer = dict[str, list[tuple[str, float]]]
Fused = dict[str, list[fusion.Scored]]


@dataclass
class Case:
    row: dict
    prep: Prepared
    accepted: dict[str, set[str]]
    vector: np.ndarray | None = None  # the signature's embedding (active space)
    votes: dict[str, list[NeighbourVote]] = field(default_factory=dict)
    model: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)  # variant ->


def load_cases(paths: Sequence[Path]) -> list[Case]:
    """The cases of the files, each read as `triage explain` reads a paste."""
    from triage.analysis import correlate

    cases = []
    for row in (row for path in paths for row in corpus.read_cases(path)):
        parsed = references.paste_evidence(row["evidence"])
        prep = prepare(parsed, correlate(parsed))
        accepted = {f: {row[f], *row.get(f"{f}_alt", [])} for f in FIELDS}
        cases.append(Case(row, prep, accepted))
    vectors = neighbours.embed([c.prep.signature for c in cases])
    for c, v in zip(cases, vectors, strict=True):
        c.vector = v
    return cases


def neighbour_votes(cases: Sequence[Case], index: neighbours.NeighbourIndex) -> None:
    """Each case's neighbours, itself (its id, or the same evidence) masked out."""
    vectors = np.stack([c.vector for c in cases])
    for method in METHODS:
        sims = index.similarities(
            [c.prep.signature for c in cases], method, vectors if method == "embed" else None
        )
        for i, case in enumerate(cases):
            exclude = np.array(
                [
                    ref.id == case.row["id"]
                    or (bool(ref.evidence_sha) and ref.evidence_sha in case.prep.hashes)
                    for ref in index.cases
                ]
            )
            case.votes[method] = index.votes(sims[i], k=K, exclude=exclude)


def folds_of(n: int, k: int, seed: int = 7) -> list[int]:
    order = list(range(n))
    random.Random(seed).shuffle(order)
    fold = [0] * n
    for pos, i in enumerate(order):
        fold[i] = pos % k
    return fold


# --------------------------------------------------------------------------- learned model


def variant_inputs(cases: Sequence[Case], variant: str) -> list[learned.ModelInput]:
    vectors = np.stack([c.vector for c in cases]) if variant == "embed" else None
    return model_inputs([c.prep for c in cases], vectors)


def new_model(variant: str, settings: Mapping | None = None) -> LearnedClassifier:
    s = {**MODEL_SETTINGS, **(settings or {})}
    return LearnedClassifier(
        use_embedding=variant == "embed",
        c=s["c"],
        weights=tuple(s["weights"]),
        min_df=s["min_df"],
        alt_weight=s["alt_weight"],
    )


def fit_model(
    cases: Sequence[Case], variant: str, settings: Mapping | None = None
) -> LearnedClassifier:
    targets = {f: [c.row[f] for c in cases] for f in FIELDS}
    alternatives = {f: [c.row.get(f"{f}_alt", []) for c in cases] for f in FIELDS}
    return new_model(variant, settings).fit(variant_inputs(cases, variant), targets, alternatives)


def model_oof(
    cases: Sequence[Case],
    fold: Sequence[int],
    k: int,
    variant: str,
    settings: Mapping | None = None,
) -> list[dict[str, dict[str, float]]]:
    """Each case's learned-model probabilities from a model fitted on the other folds."""
    out: list[dict[str, dict[str, float]]] = [{} for _ in cases]
    for f in range(k):
        train = [c for c, g in zip(cases, fold, strict=True) if g != f]
        test = [i for i, g in enumerate(fold) if g == f]
        model = fit_model(train, variant, settings)
        probs = model.label_probs(variant_inputs([cases[i] for i in test], variant))
        for i, p in zip(test, probs, strict=True):
            out[i] = p
    return out


def temper(
    cases: Sequence[Case], probs: Sequence[dict[str, dict[str, float]]]
) -> tuple[list[dict[str, dict[str, float]]], dict[str, float]]:
    """Out-of-fold probabilities made honest: per field the temperature fitted on them (the
    shipped model keeps it), and the probabilities recomputed with it."""
    temps = {
        f: learned.fit_temperature([p.get(f, {}) for p in probs], [c.accepted[f] for c in cases])
        for f in FIELDS
    }
    out = [{f: learned.tempered(p.get(f, {}), temps[f]) for f in FIELDS} for p in probs]
    return out, temps


# --------------------------------------------------------------------------- fusion, out of fold


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


def mode_votes(case: Case, mode: str) -> dict[str, list[NeighbourVote]]:
    return {src: case.votes[src] for src in fusion.MODE_SOURCES[mode]}


def fused_oof(
    cases: Sequence[Case], mode: str, fold: Sequence[int], k: int, with_model: bool
) -> tuple[list[Fused], dict[str, list[tuple[Mapping, bool]]]]:
    """Out-of-fold fused results for one mode, and all candidate rows (to fit on)."""
    results: list[Fused] = [{} for _ in cases]
    rows: dict[str, list[tuple[Mapping, bool]]] = {}

    def model_of(c: Case, field_: str) -> dict[str, float] | None:
        return c.model.get(mode, {}).get(field_) if with_model else None

    feats = {f: _features(mode, f, with_model) for f in FIELDS}
    for field_ in ("symptom", "root_cause"):
        cands = [
            fusion.candidates(field_, c.prep.hits, mode_votes(c, mode), model=model_of(c, field_))
            for c in cases
        ]
        acc = [c.accepted[field_] for c in cases]
        for i, s in enumerate(oof_scores(cands, acc, feats[field_], fold, k)):
            # as fusion.fuse does: a cause a recognised mechanism names leads
            results[i][field_] = (
                fusion.mechanism_leads(s, cases[i].prep.hits) if field_ == "root_cause" else s
            )
        rows[field_] = [(c.features, c.label in acc[i]) for i, cs in enumerate(cands) for c in cs]
    # The fix prior, P(fix | root cause), is fitted from labels too: a case's candidates read
    # the prior fitted without its fold, and the calibrator for fold f is fitted on rows whose
    # prior saw neither fold f nor the row's own fold.
    priors: dict[frozenset[int], FixPrior] = {}

    def prior_without(folds: frozenset[int]) -> FixPrior:
        if folds not in priors:
            priors[folds] = fit_fix_prior(
                [c for c, g in zip(cases, fold, strict=True) if g not in folds]
            )
        return priors[folds]

    def fix_candidates(i: int, folds: frozenset[int]) -> list[fusion.Candidate]:
        c = cases[i]
        return fusion.candidates(
            "fix",
            c.prep.hits,
            mode_votes(c, mode),
            {s.label: s.score for s in results[i]["root_cause"][:3]},
            model=model_of(c, "fix"),
            prior_table=prior_without(folds),
        )

    cands = [fix_candidates(i, frozenset({fold[i]})) for i in range(len(cases))]
    acc = [c.accepted["fix"] for c in cases]
    # what resolved each cause's cases, fitted without the case's fold (as shipped:
    # cause_fixes.json, fitted on every reference case)
    usual = {
        g: cause_fixes_of([c for c, h in zip(cases, fold, strict=True) if h != g]) for g in range(k)
    }
    for f in range(k):
        xs, ys = [], []
        for i in range(len(cases)):
            if fold[i] != f:
                for cand in fix_candidates(i, frozenset({f, fold[i]})):
                    xs.append(cand.features)
                    ys.append(cand.label in acc[i])
        cal = fit(xs, ys, feats["fix"])
        for i in range(len(cases)):
            if fold[i] == f:
                ranked = _rank(cands[i], cal.predict([c.features for c in cands[i]]))
                results[i]["fix"] = lead_fixes(cases[i], ranked, results[i]["root_cause"], usual[f])
    rows["fix"] = [(c.features, c.label in acc[i]) for i, cs in enumerate(cands) for c in cs]
    return results, rows


def lead_fixes(
    case: Case, fixes: list[fusion.Scored], causes: list[fusion.Scored], usual: FixPrior
) -> list[fusion.Scored]:
    """What fusion.fuse does after scoring a paste's fixes: the stated cause's usual fix
    first, a remedy the message prescribes before it."""
    fixes = fusion.follow_the_cause(fixes, causes, usual, case.prep.hits)
    named = standing(case.prep.hits, case.prep.analysis, pasted=True).get("fix", {})
    return fusion.lead_with(fixes, named, led_by="remedy")


FITTED_BY = "bench/eval_corpus.py --write-calibration"


def cause_fixes_of(cases: Sequence[Case]) -> FixPrior:
    """What resolved the cases of each root cause (always fitted: `cause_fixes.json`)."""
    rows = ((c.row["root_cause"], c.row["fix"], c.row.get("fix_alt", [])) for c in cases)
    return fix_prior.fit(rows)


# Which P(fix | root cause) the calibrator's `rc_prior` reads: "fitted" (the reference cases'
# labels smoothed toward the lists, what ships: on CV fix@1 +0.9 points over the lists) or
# "listed" (the taxonomy's lists alone; `--fix-prior listed`).
FIX_PRIOR = {"from": "fitted"}


def fit_fix_prior(cases: Sequence[Case]) -> FixPrior:
    """P(fix | root cause) from the cases' labels, smoothed toward the taxonomy's lists (the
    lists alone with `--fix-prior listed`)."""
    if FIX_PRIOR["from"] == "listed":
        return fix_prior.listed()
    rows = ((c.row["root_cause"], c.row["fix"], c.row.get("fix_alt", [])) for c in cases)
    return fix_prior.fit(rows)


def _features(mode: str, field_: str, with_model: bool) -> tuple[str, ...]:
    names = fusion.features(mode, field_)
    return names if with_model else tuple(n for n in names if n not in fusion.MODEL_FEATURES)


def fit_calibration(
    rows: Mapping[str, Mapping[str, list[tuple[Mapping, bool]]]], with_model: bool
) -> dict[str, dict[str, LogisticCalibrator]]:
    return {
        m: {
            f: fit(
                [x for x, _ in rows[m][f]], [y for _, y in rows[m][f]], _features(m, f, with_model)
            )
            for f in FIELDS
        }
        for m in METHODS
    }


def fuse_with(case: Case, cal: Calibration, mode: str, with_model: bool) -> Fused:
    from triage.classify import load_cause_fixes

    model = case.model.get(mode) if with_model else None
    lead = standing(case.prep.hits, case.prep.analysis, pasted=True)
    votes = mode_votes(case, mode)
    return fusion.fuse(case.prep.hits, votes, cal, mode, model, lead, load_cause_fixes())


def shipped_of(by_mode: Mapping[str, Sequence[Fused]]) -> tuple[list[Fused], list[str]]:
    """What classify() ships: TF-IDF first; the embedding only where the rules do not decide."""
    modes = ["tfidf" if decided(r) else "embed" for r in by_mode["tfidf"]]
    return [by_mode[m][i] for i, m in enumerate(modes)], modes


# --------------------------------------------------------------------------- answers


def fused_answer(result: Fused, abstain_below: float, mode: str) -> Answer:
    if should_abstain(result, abstain_below, mode):
        return {f: [] for f in FIELDS}
    return {f: [(s.label, s.score) for s in result[f]] for f in FIELDS}


def keyword_answer(text: str) -> Answer:
    out: Answer = {f: [] for f in FIELDS}
    for pattern, s, r, f in KEYWORDS:
        if regex.search(pattern, text, regex.IGNORECASE):
            for field_, label in zip(FIELDS, (s, r, f), strict=True):
                if label not in [x for x, _ in out[field_]]:
                    out[field_].append((label, 1.0))
    return out


def vote_answer(votes: Sequence[NeighbourVote]) -> Answer:
    out = {}
    for field_ in FIELDS:
        share: dict[str, float] = {}
        for v in votes:
            label = getattr(v, field_)
            share[label] = share.get(label, 0.0) + max(v.similarity, 0.0) ** 2
        total = sum(share.values()) or 1.0
        out[field_] = sorted(((k, w / total) for k, w in share.items()), key=lambda x: -x[1])
    return out


def model_answer(probs: Mapping[str, Mapping[str, float]]) -> Answer:
    return {f: sorted(probs.get(f, {}).items(), key=lambda kv: (-kv[1], kv[0])) for f in FIELDS}


def rules_answer(prep: Prepared, layer: str | None = None) -> Answer:
    """Rules ranked by their own weights (uncalibrated). `layer` keeps only the hits of one
    layer ("specific", or "generic": the whole generic layer, before specific rules
    override it)."""
    hits = list(prep.hits)
    if layer == "generic":
        hits = [h for h in rule_hits(prep.parsed, prep.analysis, layered=False) if h.generic]
    elif layer == "specific":
        hits = [h for h in hits if not h.generic]
    out: Answer = {}
    for field_ in ("symptom", "root_cause"):
        cands = fusion.candidates(field_, hits, {})
        out[field_] = [
            (s.label, s.score) for s in fusion.score(field_, cands, None, "rules") if s.score > 0
        ]
    top_rc = {r: 1.0 for r, _ in out["root_cause"][:1]}
    fix_cands = fusion.candidates("fix", hits, {}, top_rc)
    out["fix"] = [
        (s.label, s.score) for s in fusion.score("fix", fix_cands, None, "rules") if s.score > 0
    ]
    return out


def diagnosis_answer(result: object) -> Answer:
    """A Classification (what classify_many returns) as an answer."""
    return {
        "symptom": [(x.id, x.score) for x in result.symptoms],  # type: ignore[attr-defined]
        "root_cause": [(x.id, x.score) for x in result.root_causes],  # type: ignore[attr-defined]
        "fix": sorted(result.fix_scores.items(), key=lambda kv: -kv[1]),  # type: ignore[attr-defined]
    }


# --------------------------------------------------------------------------- scoring


COLUMNS = (
    "symptom@1",
    "symptom@3",
    "root_cause@1",
    "root_cause@3",
    "fix@1",
    "fix@3",
    "abstain",
    "cov>=.8",
    "prec>=.8",
    "ECE",
)


def accuracy(cases: Sequence[Case], answers: Sequence[Answer]) -> dict[str, float]:
    n = len(cases)
    out = {}
    for field_ in FIELDS:
        for k in (1, 3):
            ok = sum(
                bool({x for x, _ in a[field_][:k]} & c.accepted[field_])
                for c, a in zip(cases, answers, strict=True)
            )
            out[f"{field_}@{k}"] = ok / n
    out["abstain"] = sum(not a["symptom"] and not a["root_cause"] for a in answers) / n
    tops = [
        (a["symptom"][0][1], a["symptom"][0][0] in c.accepted["symptom"])
        for c, a in zip(cases, answers, strict=True)
        if a["symptom"]
    ]
    sure = [right for score, right in tops if score >= 0.8]
    out["cov>=.8"] = len(sure) / n
    out["prec>=.8"] = sum(sure) / len(sure) if sure else float("nan")
    out["ECE"] = expected_calibration_error([s for s, _ in tops], [r for _, r in tops])
    return out


def table(rows: Sequence[tuple[str, Mapping[str, float]]]) -> str:
    lines = [f"| system | {' | '.join(COLUMNS)} |", "|---" * (len(COLUMNS) + 1) + "|"]
    for name, m in rows:
        cells = [
            f"{m[c]:.3f}" if c == "ECE" else ("-" if m[c] != m[c] else f"{m[c]:.1%}")
            for c in COLUMNS
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
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


def choose_abstain(cases: Sequence[Case], results: Sequence[Fused], modes: Sequence[str]) -> float:
    """The highest score threshold below which at most one abstention in five drops an answer
    that was right (top symptom, root cause or fix: an abstention withholds all three, and
    the fix is what the user acts on): abstain only where the answer is mostly wrong anyway,
    since score.py counts an abstention as wrong. Only the abstentions the threshold adds
    count (those for want of any support happen at every threshold)."""
    best = 0.0
    for t in [x / 100 for x in range(5, 50)]:
        dropped = right = 0
        for c, r, m in zip(cases, results, modes, strict=True):
            if should_abstain(r, t, m) and not should_abstain(r, 0.0, m):
                dropped += 1
                right += any(
                    r[f] and r[f][0].label in c.accepted[f]
                    for f in ("symptom", "root_cause", "fix")
                )
        if dropped and right / dropped > 0.2:
            break
        best = t
    return best


def rules_hash() -> str:
    import hashlib

    digest = hashlib.sha256()
    for path in sorted((Path(__file__).resolve().parents[1] / "rules").glob("*.yaml")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def part_systems(cases: Sequence[Case]) -> list[tuple[str, Callable[[Case], Answer]]]:
    """The parts alone and the naive baseline: how each answers one case."""
    return [
        ("rules alone (specific + generic), raw", lambda c: rules_answer(c.prep)),
        ("specific rules alone, raw", lambda c: rules_answer(c.prep, "specific")),
        ("generic layer alone, raw", lambda c: rules_answer(c.prep, "generic")),
        (f"TF-IDF kNN (k={K}), raw", lambda c: vote_answer(c.votes["tfidf"])),
        (
            f"{embedding.active().name} embedding kNN (k={K}), raw",
            lambda c: vote_answer(c.votes["embed"]),
        ),
        ("learned model alone", lambda c: model_answer(c.model.get("embed", {}))),
        ("learned model alone, no embedding", lambda c: model_answer(c.model.get("tfidf", {}))),
        ("keyword table, raw", lambda c: keyword_answer(c.row["evidence"])),
    ]


# --------------------------------------------------------------------------- bundles


def bundle_table(root: Path) -> str:
    """classify() on every corpus_samples bundle (real jobs' evidence, read by the pipeline's
    own stages; its own index entry never votes for it); top symptom and top-3 root causes vs
    expected.json."""
    from triage.analysis import correlate
    from triage.classify import classify

    lines = ["| bundle | expected S / R | got symptoms | got root causes | S@1 | R@3 |"]
    lines.append("|---|---|---|---|---|---|")
    n = ok_s = ok_r = 0
    for exp_path in sorted(root.glob("*/expected.json")):
        exp = json.loads(exp_path.read_text(encoding="utf-8"))
        parsed = references.bundle_evidence(exp_path.parent)  # without its truth files
        result = classify(parsed, correlate(parsed))
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


# --------------------------------------------------------------------------- held out


EXPERT = Path(__file__).resolve().parent / "expert" / "heldout_expert.jsonl"


def expert_answers(cases: Sequence[Case], path: Path = EXPERT) -> list[Answer] | None:
    """The expert's labels of these cases, read from the pasted evidence alone (bench/expert/
    README.md says how they were made), as answers: the top label scores 0.9 when the expert
    was confident and 0.6 when not, each alternative 0.1. None when some case has no label."""
    if not path.is_file():
        return None
    labels = {row["id"]: row for row in map(json.loads, path.read_text().splitlines()) if row}
    if any(c.row["id"] not in labels for c in cases):
        return None
    out = []
    for c in cases:
        row = labels[c.row["id"]]
        top = 0.9 if row.get("confident", True) else 0.6
        out.append(
            {f: [(row[f], top)] + [(x, 0.1) for x in row.get(f"{f}_alt", [])] for f in FIELDS}
        )
    return out


def majority_answer(reference: Sequence[Mapping[str, str]]) -> Answer:
    """The reference cases' most frequent labels, the same answer for every case."""
    out: Answer = {}
    for f in FIELDS:
        counts: dict[str, int] = {}
        for row in reference:
            counts[row[f]] = counts.get(row[f], 0) + 1
        ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        out[f] = [(label, n / len(reference)) for label, n in ranked[:3]]
    return out


def held_out_report(
    paths: Sequence[Path],
    index: neighbours.NeighbourIndex,
    no_model_cal: Calibration,
    reference: Sequence[Mapping[str, str]] = (),
) -> str:
    """Every system on cases nothing was built, fitted or tuned on: aggregate figures only
    (no per-case output is ever written for a held-out file). Beside triage and its parts:
    an expert who read only the pasted evidence (when bench/expert/ labels every case) and
    the majority label of the reference cases."""
    from triage.classify import classify_many, load_calibration

    held = load_cases(paths)
    neighbour_votes(held, index)
    for variant in learned.VARIANTS:
        model = load_learned(variant)
        probs = model.label_probs(variant_inputs(held, variant)) if model else [{}] * len(held)
        for c, p in zip(held, probs, strict=True):
            c.model[variant] = p
    jobs = [(list(c.prep.parsed), c.prep.analysis) for c in held]
    # read as `triage explain` reads a paste (as the cross-validation does): a job's logs are
    # classified otherwise (routine lines dropped, the initiating failure's labels lead)
    shipped = [diagnosis_answer(r) for r in classify_many(jobs, pasted=True)]
    no_embed = [diagnosis_answer(r) for r in classify_many(jobs, use_embeddings=False, pasted=True)]
    # triage without the learned model: the same fusion, calibrated without its features
    by_mode = {m: [fuse_with(c, no_model_cal, m, False) for c in held] for m in METHODS}
    plain, modes = shipped_of(by_mode)
    below = no_model_cal.abstain_below
    without = [fused_answer(r, below, m) for r, m in zip(plain, modes, strict=True)]
    cal = load_calibration()
    rows = [
        ("triage (shipped)", accuracy(held, shipped)),
        ("triage --no-embed", accuracy(held, no_embed)),
        ("triage without the learned model", accuracy(held, without)),
    ]
    rows += [
        (name, accuracy(held, [answer(c) for c in held])) for name, answer in part_systems(held)
    ]
    expert = expert_answers(held)
    if expert is not None:
        rows.append(("an expert reading only the paste", accuracy(held, expert)))
    if reference:
        majority = majority_answer(reference)
        rows.append(("majority label (reference cases)", accuracy(held, [majority] * len(held))))
    out = [f"n={len(held)}; shipped index of {len(index)} cases, calibration of "]
    out[0] += f"{(cal.meta or {}).get('cases', '?') if cal else '?'} cases\n"
    out.append(table(rows))
    tops = [
        (a["symptom"][0][1], a["symptom"][0][0] in c.accepted["symptom"])
        for c, a in zip(held, shipped, strict=True)
        if a["symptom"]
    ]
    out.append("\n" + reliability_table(tops, "reliability of the top symptom score (shipped)"))
    return "\n".join(out)


# --------------------------------------------------------------------------- main


def tune(cases: Sequence[Case], fold: Sequence[int], k: int) -> None:
    grid = [
        {"c": c, "weights": w, "min_df": d, "alt_weight": a}
        for c in (1.0, 4.0, 16.0)
        for w in ((1.0, 1.0, 1.0), (1.0, 2.0, 1.0), (2.0, 1.0, 1.0), (1.0, 1.0, 2.0))
        for d in (1, 2)
        for a in (0.0, 0.5)
    ]
    print("\n## learned model settings (5-fold CV, reference cases)\n")
    print(
        "| variant | C | weights (words, embedding, rules) | min_df | alt_weight "
        "| S@1 | R@1 | R@3 | F@1 |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for variant in learned.VARIANTS:
        for s in grid:
            if variant == "tfidf" and s["weights"][1] != 1.0:
                continue
            probs = model_oof(cases, fold, k, variant, s)
            m = accuracy(cases, [model_answer(p) for p in probs])
            print(
                f"| {variant} | {s['c']} | {s['weights']} | {s['min_df']} | {s['alt_weight']} | "
                f"{m['symptom@1']:.1%} | {m['root_cause@1']:.1%} | {m['root_cause@3']:.1%} | "
                f"{m['fix@1']:.1%} |"
            )


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--cases",
        type=Path,
        action="append",
        help="cases file (repeatable; default: the `use: reference` files of "
        "models/corpus/manifest.yaml)",
    )
    ap.add_argument(
        "--held-out",
        action="store_true",
        help="also score the manifest's `use: held_out` files with what ships (index, "
        "calibration, learned model: never fitted on them); aggregate figures only",
    )
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--write-calibration", action="store_true")
    ap.add_argument(
        "--fix-prior",
        choices=("listed", "fitted"),
        default="fitted",
        help="P(fix | root cause) fitted on the reference cases (default, shipped; inside the "
        "folds) or from the taxonomy's lists alone",
    )
    ap.add_argument("--details", type=Path, help="per-case results of the reference cases")
    ap.add_argument("--tune", action="store_true")
    ap.add_argument(
        "--bundles", type=Path, default=Path(__file__).resolve().parents[1] / "corpus_samples"
    )
    args = ap.parse_args(argv)

    t0 = time.perf_counter()
    FIX_PRIOR["from"] = args.fix_prior
    paths = args.cases or corpus.reference_files()
    held_out = {p.resolve() for p in corpus.held_out_files()}
    if any(p.resolve() in held_out for p in paths):
        ap.error("held-out cases are scored with --held-out, never fitted or indexed")
    cases = load_cases(paths)
    if indexing.stale_reasons(cases_paths=paths):
        indexing.build_index(cases_paths=paths)
    index = neighbours.load_index()
    names = "+".join(p.name for p in paths)
    print(
        f"embedding: {embedding.active().name}; "
        f"{len(cases)} cases from {names}; index of {len(index)} cases; "
        f"prepared in {time.perf_counter() - t0:.1f}s",
        file=sys.stderr,
    )
    fold = folds_of(len(cases), args.folds)
    neighbour_votes(cases, index)
    if args.tune:
        tune(cases, fold, args.folds)
    temperatures: dict[str, dict[str, float]] = {}
    for variant in learned.VARIANTS:
        probs, temperatures[variant] = temper(cases, model_oof(cases, fold, args.folds, variant))
        for c, p in zip(cases, probs, strict=True):
            c.model[variant] = p
    print(f"learned model temperatures: {temperatures}", file=sys.stderr)
    print(f"learned model out of fold: {time.perf_counter() - t0:.1f}s", file=sys.stderr)
    fused: dict[bool, dict[str, list[Fused]]] = {True: {}, False: {}}
    cand_rows: dict[bool, dict[str, dict]] = {True: {}, False: {}}
    for with_model in (True, False):
        for m in METHODS:
            fused[with_model][m], cand_rows[with_model][m] = fused_oof(
                cases, m, fold, args.folds, with_model
            )
    shipped, modes = shipped_of(fused[True])
    abstain_below = choose_abstain(cases, shipped, modes)
    plain, plain_modes = shipped_of(fused[False])
    abstain_plain = choose_abstain(cases, plain, plain_modes)

    def answers(
        results: Sequence[Fused], ms: Sequence[str], below: float = abstain_below
    ) -> list[Answer]:
        return [fused_answer(r, below, m) for r, m in zip(results, ms, strict=True)]

    rows = [
        ("triage (shipped)", accuracy(cases, answers(shipped, modes))),
        (
            "triage --no-embed",
            accuracy(cases, answers(fused[True]["tfidf"], ["tfidf"] * len(cases))),
        ),
        (
            "triage without the learned model",
            accuracy(cases, answers(plain, plain_modes, abstain_plain)),
        ),
        (
            "triage, no abstention",
            accuracy(
                cases, [{f: [(s.label, s.score) for s in r[f]] for f in FIELDS} for r in shipped]
            ),
        ),
    ]
    rows += [
        (name, accuracy(cases, [answer(c) for c in cases])) for name, answer in part_systems(cases)
    ]
    print(
        f"\n## Cross-validated on {names} (n={len(cases)}; leave-one-out neighbours, "
        f"{args.folds}-fold learned model and calibration, abstain below {abstain_below:.2f})\n"
    )
    print(table(rows))
    by_quality: dict[str, list[int]] = {}
    for i, c in enumerate(cases):
        by_quality.setdefault(c.row.get("evidence_quality", "?"), []).append(i)
    print("\ntriage (shipped) by evidence quality:")
    for q, idx in sorted(by_quality.items()):
        sub = [cases[i] for i in idx]
        m = accuracy(sub, [fused_answer(shipped[i], abstain_below, modes[i]) for i in idx])
        print(
            f"  {q:8s} n={len(idx):3d}  S@1 {m['symptom@1']:.0%}  "
            f"R@3 {m['root_cause@3']:.0%}  F@1 {m['fix@1']:.0%}  abstain {m['abstain']:.0%}"
        )
    print("\nnearest reference case (leave-one-out): is its symptom right? (sets NEAREST_FLOOR)")
    for m in METHODS:
        pairs = [
            (c.votes[m][0].similarity, c.votes[m][0].symptom in c.accepted["symptom"])
            for c in cases
            if c.votes[m]
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
    print(f"\nfix from P(fix | root cause) alone ({FIX_PRIOR['from']}, without the case's fold):")
    fold_priors = {
        g: fit_fix_prior([c for c, h in zip(cases, fold, strict=True) if h != g]) for g in set(fold)
    }
    fold_usual = {
        g: cause_fixes_of([c for c, h in zip(cases, fold, strict=True) if h != g])
        for g in set(fold)
    }
    for name, cause_of in (
        ("the true root cause", lambda i: cases[i].row["root_cause"]),
        (
            "triage's top root cause",
            lambda i: shipped[i]["root_cause"][0].label if shipped[i]["root_cause"] else "",
        ),
    ):
        ranked = [
            [f for f, _ in fold_priors[fold[i]].ranked(cause_of(i))] for i in range(len(cases))
        ]
        at = {
            k: sum(bool(set(r[:k]) & c.accepted["fix"]) for r, c in zip(ranked, cases, strict=True))
            / len(cases)
            for k in (1, 3)
        }
        print(f"  given {name}: fix@1 {at[1]:.1%}, fix@3 {at[3]:.1%}")
    usual_at_1 = led = 0
    for i in range(len(cases)):
        r = shipped[i]
        if fused_answer(r, abstain_below, modes[i])["fix"] and r["root_cause"]:
            best = fold_usual[fold[i]].ranked(r["root_cause"][0].label)
            usual_at_1 += bool(best) and r["fix"][0].label == best[0][0]
            led += r["fix"][0].led_by == "cause"
    print(
        f"  triage's fix@1 is its top root cause's usual fix (cause_fixes, without the case's "
        f"fold) on {usual_at_1 / len(cases):.1%}; put first for a stated cause on "
        f"{led / len(cases):.1%}"
    )
    stage_ok = 0
    for i, c in enumerate(cases):
        stages = fusion.stage_scores(shipped[i]["symptom"], c.prep.hits, c.votes[modes[i]])
        stage_ok += bool(stages) and stages[0].label == c.row["stage"]
    print(f"\nstage@1 (triage, shipped, no abstention): {stage_ok / len(cases):.1%}")
    n_decided = modes.count("tfidf")
    ok_fast = sum(
        bool(r["symptom"]) and r["symptom"][0].label in c.accepted["symptom"]
        for c, r, m in zip(cases, shipped, modes, strict=True)
        if m == "tfidf"
    )
    print(
        f"\nrules decide (no model load) on {n_decided}/{len(cases)} cases; "
        f"symptom@1 there {ok_fast}/{n_decided}"
    )
    print()
    for field_ in FIELDS:
        pairs = [
            (r[field_][0].score, r[field_][0].label in c.accepted[field_])
            for c, r in zip(cases, shipped, strict=True)
            if r[field_]
        ]
        print(
            reliability_table(
                pairs, f"reliability of the top {field_} score (shipped, out of fold)"
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
                            "model": [
                                model_answer(c.model.get("embed", {}))[f][:3] for f in FIELDS
                            ],
                            "rules": sorted({h.rule_id for h in c.prep.hits}),
                            # what each part said of the top root causes and the true one
                            "root_cause_features": {
                                s.label: {k: round(v, 3) for k, v in s.features.items() if v}
                                for s in r["root_cause"]
                                if s in r["root_cause"][:3] or s.label in c.accepted["root_cause"]
                            },
                            "led_by": [r[f][0].led_by if r[f] else "" for f in FIELDS],
                            "signature": c.prep.signature,
                        }
                    )
                    + "\n"
                )

    meta = {
        "cases": len(cases),
        "source": names,
        "index_inputs": index.manifest.get("inputs", {}),
        "folds": args.folds,
        "embedding": embedding.active().name,
        "taxonomy_version": 1,
        # the calibrators and the learned model read the rules' weights: refit when this no
        # longer matches
        "rules_sha256": rules_hash(),
    }
    shipped_prior = fit_fix_prior(cases)
    no_model_cal = Calibration(
        fit_calibration(cand_rows[False], False), abstain_plain, {}, shipped_prior
    )
    space = embedding.active()
    if args.write_calibration:
        out = neighbours.models_dir() / space.calibration_file
        Calibration(
            fit_calibration(cand_rows[True], True),
            abstain_below,
            {**meta, "fitted_by": "bench/eval_corpus.py --write-calibration"},
            shipped_prior,
        ).save(out)
        for variant in learned.VARIANTS:
            if variant == "tfidf" and space.name != "static":
                continue  # one TF-IDF model for both spaces: written with the default's
            model = fit_model(cases, variant)
            model.temperature = temperatures[variant]
            model.meta = {
                **meta,
                "fitted_by": "bench/eval_corpus.py --write-calibration",
                "estimator": "scikit-learn LogisticRegression (multinomial, lbfgs), one per field",
                "settings": {**MODEL_SETTINGS, "weights": list(MODEL_SETTINGS["weights"])},
            }
            model.save(neighbours.models_dir() / learned.file_name(variant, space))
        usual = cause_fixes_of(cases)
        usual = FixPrior(usual.table, {**usual.meta, "source": names, "fitted_by": FITTED_BY})
        fix_prior.save(usual, out.parent / fix_prior.CAUSE_FIXES_FILE)
        print(f"calibration and learned model written to {out.parent}", file=sys.stderr)
    if args.bundles.is_dir():
        print(f"\n## corpus_samples bundles ({args.bundles})\n")
        print(bundle_table(args.bundles))
    if args.held_out:
        held_files = corpus.held_out_files()
        for path in held_files:
            print(f"\n## {path.name} (held out: what ships, never fitted on it)\n")
            print(held_out_report([path], index, no_model_cal, [c.row for c in cases]))
        if len(held_files) > 1:
            # the figure to quote: every held-out case at once, not a mean of the files' rates
            names = ", ".join(p.name for p in held_files)
            print(f"\n## all held-out files together ({names})\n")
            print(held_out_report(held_files, index, no_model_cal, [c.row for c in cases]))
    print(f"total {time.perf_counter() - t0:.1f}s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
