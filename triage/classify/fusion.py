"""Fusion: rule hits, neighbour votes and correlate findings -> calibrated, ranked labels.

Correlate's findings arrive as rule hits: rules match findings (`finding:` in rules/*.yaml),
so the weights of a hang or a SIGKILL exit are data next to the text rules.

For each label field (symptom, root cause, fix) every label that any evidence names becomes a
candidate with a few features; a logistic calibrator (`calibration.py`, fitted out-of-fold on
the labeled corpus) turns the features into the probability that the label is right.

The initiating failure outranks the cascade: a rule hit on a cascade event (another rank's
watchdog timeout, connection reset) enters as its own, weaker feature, so a cascade-only label
ranks below a label the initiating event supports.

The learned model (`learned.py`: a linear classifier over the case's words, its embedding and
the rules' weights) adds its probability per label as the features `model` and `model_top`,
and its few most likely labels as candidates.

Two layers of rules: specific rules name a mechanism (a message a library prints); generic rules
(`layer: generic`) give a whole family its prior (an exception class, an OOM, a signal). A
generic hit yields to a specific one that explains the same failure (`yield_generic`), and what
is left of the generic layer enters as its own feature, `rule_generic`, which the calibrator
weighs apart from the mechanisms.

In a job (not a paste), the labels its own initiating failure names lead their field
(`standing.py`, `lead_with`): the calibrator is fitted on pastes and cannot weigh what only a
job's logs show (which rank started it, the frames it raised in, correlate's findings).

The fixes follow the root cause (`follow_the_cause`): when the report states the most likely
cause (not a guess) and the best-scored fix is no advice for it, the fix that resolved most
cases of that cause (P(fix | root cause), `fix_prior.py`) leads instead, unless a rule that
matched chose the other fix for its own message; the job's initiating failure, or a remedy its
message prescribes, still leads before it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace

from triage import taxonomy
from triage.classify import contradicted
from triage.classify import fix_prior as fix_prior_mod
from triage.classify.calibration import Calibration
from triage.classify.fix_prior import FixPrior
from triage.classify.standing import Standing
from triage.classify.types import NeighbourVote, RuleHit
from triage.knowledge import fusion_settings
from triage.knowledge.fusion_settings import FusionSettings
from triage.model import Event

FIELDS = ("symptom", "root_cause", "fix")
# The weights and thresholds below (a cascade hit's weight, when the generic layer yields or
# settles, which of the learned model's labels become candidates, when the fixes follow the
# cause) are data: `models/fusion.json`, read by `fusion_settings.py`, each with its why.
RULE_FEATURES = (
    "rule",  # noisy-OR of the weights of initiating (or unattributed) rule hits
    "rule_cascade",  # noisy-OR of the weights of cascade hits
    "rule_top",  # 1 when the label has the best rule score of the field
    "rule_generic",  # noisy-OR of the weights of generic-layer hits (initiating)
)
# Per neighbour method (embed = the similarity model's space, tfidf = TF-IDF), prefixed with
# the method's name.
VOTE_FEATURES = (
    "share",  # similarity-weighted share of the neighbours voting for the label
    "share_x_sim",  # ... times the nearest neighbour's similarity (how close they are)
    "top_sim",  # similarity of the closest neighbour voting for the label
    "top",  # 1 when the label wins the neighbour vote
    "nearest",  # similarity of the nearest neighbour, whatever its label (how reliable)
)
# The libraries' own messages (`atlas.py`): the labels of the templates a line instantiates.
ATLAS_FEATURES = (
    "atlas",  # noisy-OR of the matched templates' weights for the label
    "atlas_top",  # 1 when the label has the best atlas weight of the field
)
MODEL_FEATURES = (
    "model",  # the learned model's probability of the label
    "model_top",  # 1 when the label is the learned model's most likely one
)
# Which neighbour sets each mode reads: the embedding mode also keeps the TF-IDF votes (both are
# computed anyway and they err on different cases).
MODE_SOURCES: Mapping[str, tuple[str, ...]] = {"embed": ("embed", "tfidf"), "tfidf": ("tfidf",)}


def _settings(settings: FusionSettings | None) -> FusionSettings:
    """The settings given, else the shipped ones (read on first need, never at import)."""
    return settings if settings is not None else fusion_settings.shipped()


def features(mode: str, fieldname: str) -> tuple[str, ...]:
    names = [*RULE_FEATURES, *ATLAS_FEATURES]
    for src in MODE_SOURCES[mode]:
        names += [f"{src}_{f}" for f in VOTE_FEATURES]
    names += MODEL_FEATURES
    if fieldname == "fix":
        names.append("rc_prior")
    if fieldname == "root_cause":
        names.append("generic_open")
    return tuple(names)


@dataclass(frozen=True)
class Candidate:
    label: str
    features: Mapping[str, float]


@dataclass(frozen=True)
class Scored:
    label: str
    score: float
    features: Mapping[str, float] = field(default_factory=dict, compare=False)
    # what put it first when its score alone did not: "standing" (the job's initiating
    # failure names it), "remedy" (the matched message prescribes it) or "cause" (the most
    # likely root cause's usual fix); for a root cause "mechanism" (a specific rule chose it)
    led_by: str = field(default="", compare=False)


def _noisy_or(weights: Sequence[float]) -> float:
    miss = 1.0
    for w in weights:
        miss *= 1.0 - min(max(w, 0.0), 1.0)
    return 1.0 - miss


def _vote_labels(vote: NeighbourVote, fieldname: str) -> tuple[str, tuple[str, ...]]:
    return getattr(vote, fieldname), tuple(getattr(vote, f"{fieldname}_alt", ()))


def candidates(
    fieldname: str,
    hits: Sequence[RuleHit],
    votes: Mapping[str, Sequence[NeighbourVote]],
    rc_probs: Mapping[str, float] | None = None,
    model: Mapping[str, float] | None = None,
    prior_table: FixPrior | None = None,
    settings: FusionSettings | None = None,
) -> list[Candidate]:
    """One candidate per label named by any evidence, with the features the calibrator reads.
    `model` is the learned model's probability per label of this field. For fixes, `rc_probs`
    are the likely root causes and `prior_table` P(fix | root cause) (None: the taxonomy's
    lists); every fix the likely causes were resolved by is a candidate."""
    cfg = _settings(settings)
    # One rule firing on many ranks is one piece of evidence, not many: keep each rule's
    # strongest weight per label, then combine distinct rules.
    init: dict[str, dict[str, float]] = {}
    casc: dict[str, dict[str, float]] = {}
    gen: dict[str, dict[str, float]] = {}
    atl: dict[str, dict[str, float]] = {}
    for hit in hits:
        weights: Mapping[str, float] = getattr(hit, fieldname)
        table = atl if hit.atlas else casc if hit.from_cascade else gen if hit.generic else init
        for label, w in weights.items():
            per_rule = table.setdefault(label, {})
            per_rule[hit.rule_id] = max(per_rule.get(hit.rule_id, 0.0), w)
    rule = {k: _noisy_or(list(v.values())) for k, v in init.items()}
    rule_casc = {k: _noisy_or(list(v.values())) for k, v in casc.items()}
    rule_gen = {k: _noisy_or(list(v.values())) for k, v in gen.items()}
    atlas = {k: _noisy_or(list(v.values())) for k, v in atl.items()}
    best_atlas = max(atlas.values(), default=0.0)
    effective = {
        k: 1
        - (1 - rule.get(k, 0.0))
        * (1 - cfg.cascade_factor * rule_casc.get(k, 0.0))
        * (1 - cfg.generic_factor * rule_gen.get(k, 0.0))
        for k in {*rule, *rule_casc, *rule_gen}
    }
    best_rule = max(effective.values(), default=0.0)

    vote_feats = {src: _vote_features(fieldname, v) for src, v in votes.items()}
    model = model or {}
    model_best = max(model.values(), default=0.0)
    labels = {*effective, *atlas}
    if not (fieldname == "symptom" and generic_settles(rule, rule_gen, cfg)):
        for feats in vote_feats.values():
            labels.update(feats)
        ranked = sorted(model, key=lambda k: -model[k])[: cfg.model_candidates]
        labels.update(k for k in ranked if model[k] >= cfg.model_min_prob)

    # the generic layer left the cause open (below): a feature of every cause, so the
    # calibrator weighs such guesses apart (`left_open`)
    open_cause = fieldname == "root_cause" and cause_left_open(rule, rule_gen, cfg)
    prior: dict[str, float] = {}
    if fieldname == "fix" and rc_probs:
        table = prior_table if prior_table is not None else fix_prior_mod.listed()
        prior = table.given(rc_probs)

    out = []
    for label in sorted(labels | set(prior)):
        feats = {
            "rule": rule.get(label, 0.0),
            "rule_cascade": rule_casc.get(label, 0.0),
            "rule_top": float(best_rule > 0 and effective.get(label, 0.0) >= best_rule),
            "rule_generic": rule_gen.get(label, 0.0),
            "atlas": atlas.get(label, 0.0),
            "atlas_top": float(best_atlas > 0 and atlas.get(label, 0.0) >= best_atlas),
            "rc_prior": prior.get(label, 0.0),
            "model": model.get(label, 0.0),
            "model_top": float(model_best > 0 and model.get(label, 0.0) >= model_best),
        }
        if fieldname == "root_cause":
            feats["generic_open"] = float(open_cause)
        for src, table in vote_feats.items():
            for name, value in table.get(label, {}).items():
                feats[f"{src}_{name}"] = value
        out.append(Candidate(label, feats))
    return out


def left_open(root_causes: Sequence[Scored]) -> bool:
    """Did the generic layer leave these (scored) causes open? The answer still names the
    neighbours' and the learned model's best guess (on the held-out threads hiding it cost 3
    to 7 points of root cause@1) and says it is one."""
    return bool(root_causes) and root_causes[0].features.get("generic_open", 0.0) > 0


def cause_left_open(
    specific: Mapping[str, float],
    generic: Mapping[str, float],
    settings: FusionSettings | None = None,
) -> bool:
    """No specific rule names a root cause and the generic layer weighs `open_ties` causes
    alike at its top (the README: a bare `KeyError`, the user's code, the framework's logic or
    a wrong call, a SIGTERM or a lost connection says nothing of why)."""
    if any(w > 0 for w in specific.values()) or not generic:
        return False
    best = max(generic.values())
    ties = sum(1 for g in generic.values() if g >= best - 1e-9)
    return best > 0 and ties >= _settings(settings).open_ties


def generic_settles(
    specific: Collection[str], generic: Mapping[str, float], settings: FusionSettings | None = None
) -> bool:
    """No specific rule names a symptom and the generic layer names one at `generic_settle`:
    neighbour votes may reorder the labels the rules name but add none of their own (a
    ZeroDivisionError is never called an import error because a similar case was one)."""
    return not specific and max(generic.values(), default=0.0) >= _settings(settings).generic_settle


def yield_generic(hits: Sequence[RuleHit], settings: FusionSettings | None = None) -> list[RuleHit]:
    """The generic layer under the specific one: a generic hit is dropped when a specific rule
    sure of a symptom (not a cascade message) matched the same lines. What the family prior
    says (`KeyError` -> runtime exception) then gives way to what the mechanism says (the
    `KeyError` a checkpoint loader raises for a missing state-dict key -> checkpoint load).
    Sure of a symptom: at least `yield_weight`."""
    sure = _settings(settings).yield_weight
    anchors = [
        h.event
        for h in hits
        if not h.generic
        and not h.from_cascade
        and h.event is not None
        and max(h.symptom.values(), default=0.0) >= sure
    ]
    if not anchors:
        return list(hits)
    return [
        h
        for h in hits
        if not (h.generic and h.event is not None and any(same_lines(h.event, a) for a in anchors))
    ]


def same_lines(a: Event, b: Event) -> bool:
    """Do two events stand on (some of) the same lines of one source?"""
    if a == b:
        return True
    if a.source != b.source or a.line is None or b.line is None:
        return False
    a_end = a.end_line if a.end_line is not None else a.line
    b_end = b.end_line if b.end_line is not None else b.line
    return a.line <= b_end and b.line <= a_end


def _vote_features(fieldname: str, votes: Sequence[NeighbourVote]) -> dict[str, dict[str, float]]:
    """label -> VOTE_FEATURES for one neighbour set (alt labels count half)."""
    share: dict[str, float] = {}
    top_sim: dict[str, float] = {}
    total = 0.0
    for vote in votes:
        w = max(vote.similarity, 0.0) ** 2
        total += w
        primary, alts = _vote_labels(vote, fieldname)
        share[primary] = share.get(primary, 0.0) + w
        top_sim[primary] = max(top_sim.get(primary, 0.0), vote.similarity)
        for alt in alts:
            if alt != primary:
                share[alt] = share.get(alt, 0.0) + 0.5 * w
    if total > 0:
        share = {k: v / total for k, v in share.items()}
    nearest = max((v.similarity for v in votes), default=0.0)
    best = max((share[k] for k in top_sim), default=0.0)
    return {
        label: {
            "share": share[label],
            "share_x_sim": share[label] * max(nearest, 0.0),
            "top_sim": max(top_sim.get(label, 0.0), 0.0),
            "top": float(label in top_sim and share[label] >= best),
            "nearest": max(nearest, 0.0),
        }
        for label in share
    }


def uncalibrated(features: Mapping[str, float], settings: FusionSettings | None = None) -> float:
    """The fused score when no calibration was fitted (a fresh checkout): rules first."""
    cfg = _settings(settings)
    rule = 1 - (1 - features["rule"]) * (1 - cfg.cascade_factor * features["rule_cascade"])
    rule = 1 - (1 - rule) * (1 - cfg.generic_factor * features.get("rule_generic", 0.0))
    rule = 1 - (1 - rule) * (1 - cfg.atlas_factor * features.get("atlas", 0.0))
    knn = max(
        (
            features[f"{src}_share"] * features[f"{src}_top_sim"]
            for src in ("embed", "tfidf")
            if f"{src}_share" in features
        ),
        default=0.0,
    )
    return max(rule, knn, 0.5 * features.get("rc_prior", 0.0))


def score(
    fieldname: str,
    cands: Sequence[Candidate],
    calibration: Calibration | None,
    mode: str,
    settings: FusionSettings | None = None,
) -> list[Scored]:
    """Calibrated scores of the candidates, best first. A missing feature reads as 0."""
    calibrator = calibration.get(mode, fieldname) if calibration is not None else None
    if calibrator is not None:
        probs = calibrator.predict([c.features for c in cands])
    else:
        cfg = _settings(settings)
        probs = [uncalibrated(c.features, cfg) for c in cands]
    ranked = [Scored(c.label, p, c.features) for c, p in zip(cands, probs, strict=True)]
    # Ties (equal features) keep a stable order: rule-backed labels first, then by id.
    ranked.sort(key=lambda s: (-s.score, -s.features.get("rule", 0.0), s.label))
    return ranked


def fuse(
    hits: Sequence[RuleHit],
    votes: Mapping[str, Sequence[NeighbourVote]],
    calibration: Calibration | None,
    mode: str,
    model: Mapping[str, Mapping[str, float]] | None = None,
    standing: Standing | None = None,
    cause_fixes: FixPrior | None = None,
    settings: FusionSettings | None = None,
) -> dict[str, list[Scored]]:
    """All three fields, root causes before fixes (a fix's prior comes from the causes).
    `model`: the learned model's probabilities, field -> label -> p (absent: not used).
    `standing`: the labels a job's initiating failure names (`standing.py`), which lead.
    `cause_fixes`: what resolved each cause's cases (`fix_prior.py`; None: the calibration's
    table, else the taxonomy's lists), whose first fix follows a stated cause. `settings`:
    the fusion's weights and thresholds (None: `models/fusion.json`). Labels a matched
    fact of the job rules out (`contradicted.py`) are left out."""
    cfg = _settings(settings)
    model = model or {}
    standing = standing or {}
    # labels the job's own facts contradict leave the lists before the causes choose a fix
    ruled = contradicted.ruled_out(hits)
    out: dict[str, list[Scored]] = {}
    for fieldname in ("symptom", "root_cause"):
        cands = candidates(fieldname, hits, votes, model=model.get(fieldname), settings=cfg)
        scored = score(fieldname, cands, calibration, mode, cfg)
        if fieldname == "root_cause":
            scored = mechanism_leads(scored, hits, cfg)
        out_of = ruled.get(fieldname, frozenset())
        led = lead_with(scored, standing.get(fieldname, {}))
        out[fieldname] = [s for s in led if s.label not in out_of]
    rc_probs = {s.label: s.score for s in out["root_cause"][:3]}
    table = calibration.fix_prior if calibration is not None else None
    cands = candidates(
        "fix", hits, votes, rc_probs, model=model.get("fix"), prior_table=table, settings=cfg
    )
    fixes = score("fix", cands, calibration, mode, cfg)
    usual = cause_fixes or table or fix_prior_mod.listed()
    fixes = follow_the_cause(fixes, out["root_cause"], usual, hits, cfg)
    named = standing.get("fix", {})
    # a remedy the matched message prescribes, or the job's initiating failure's own fix
    told = any(h.prescribes in named for h in hits)
    out["fix"] = lead_with(fixes, named, led_by="remedy" if told else "standing")
    return out


def mechanism_cause(hits: Sequence[RuleHit], settings: FusionSettings | None = None) -> str | None:
    """The root cause the specific rules chose for a mechanism they recognised: a rule that
    matched a line (no cascade, no family prior, no atlas template) names it at
    `mechanism_weight` or more, `mechanism_margin` above any other cause a specific rule
    names; None when they name none, or two alike."""
    cfg = _settings(settings)
    best: dict[str, float] = {}
    for h in hits:
        if h.generic or h.from_cascade or h.atlas:
            continue
        for label, w in h.root_cause.items():
            best[label] = max(best.get(label, 0.0), w)
    ranked = sorted(best.items(), key=lambda kv: -kv[1])
    if not ranked or ranked[0][1] < cfg.mechanism_weight:
        return None
    if len(ranked) > 1 and ranked[1][1] > ranked[0][1] - cfg.mechanism_margin:
        return None
    return ranked[0][0]


def mechanism_leads(
    causes: Sequence[Scored], hits: Sequence[RuleHit], settings: FusionSettings | None = None
) -> list[Scored]:
    """The scored root causes, led by the cause a recognised mechanism names
    (`mechanism_cause`, which the specific rules name well above any other) when the
    calibrated first is another: the learned model's and the neighbours' prior for a frequent
    cause (a framework bug, R25) does not outvote the version skew or the misuse a library's
    own message states. It keeps its own score; those it outranks are capped to it."""
    chosen = mechanism_cause(hits, settings)
    if chosen is None or not causes or causes[0].label == chosen:
        return list(causes)
    if chosen not in {s.label for s in causes}:
        return list(causes)
    return lead_with(causes, {chosen: 0.0}, led_by="mechanism")


def lead_with(
    scored: Sequence[Scored], labels: Mapping[str, float], led_by: str = "standing"
) -> list[Scored]:
    """The scored labels (best first) with those that have standing (label -> its rule's
    weight) first. Such a label scores at least its rule's weight (what the rule says where
    nothing is fitted), and the labels it outranks at most what it does: the list still reads
    top-down."""
    led = [
        replace(s, score=max(s.score, labels[s.label]), led_by=led_by)
        for s in scored
        if s.label in labels
    ]
    if not led:
        return list(scored)
    cap = min(s.score for s in led)
    return led + [replace(s, score=min(s.score, cap)) for s in scored if s.label not in labels]


def cause_stated(causes: Sequence[Scored], settings: FusionSettings | None = None) -> bool:
    """Does the report state the most likely root cause as the cause (scored at least
    `stated_cause` and not left open by the generic layer), rather than call it a guess?"""
    stated = _settings(settings).stated_cause
    return bool(causes) and causes[0].score >= stated and not left_open(causes)


def cause_fix(
    causes: Sequence[Scored], table: FixPrior, settings: FusionSettings | None = None
) -> str | None:
    """The usual fix of the most likely root cause (the one that resolved most of its
    reference cases), when the report states that cause (`cause_stated`); else None."""
    if not cause_stated(causes, settings):
        return None
    ranked = table.ranked(causes[0].label)
    return ranked[0][0] if ranked else None


def follow_the_cause(
    fixes: Sequence[Scored],
    causes: Sequence[Scored],
    table: FixPrior,
    hits: Sequence[RuleHit],
    settings: FusionSettings | None = None,
) -> list[Scored]:
    """The scored fixes, led by the stated cause's usual fix (`cause_fix`) when the fix the
    scores put first is no advice for that cause (it resolved under `not_its_fix` of its
    cases: a watchdog timeout the report puts down to too short a timeout is not told to fix
    the code first), unless evidence specific to that first fix outweighs the cause: a rule
    that matched a line (no cascade, no family prior) chose it for its message, or the
    specific rules (the feature `rule`) back it `rule_margin` more. Cross-validated on the
    reference cases, leading with the cause's usual fix whenever it was not first flipped as
    many right answers as it fixed."""
    cfg = _settings(settings)
    best = cause_fix(causes, table, cfg)
    by_label = {s.label: s for s in fixes}
    if best is None or best not in by_label:
        return list(fixes)
    first = fixes[0].label
    if first != best:
        if table.table.get(causes[0].label, {}).get(first, 0.0) >= cfg.not_its_fix:
            return list(fixes)  # advice for the cause too: the evidence orders them
        if chosen_by_a_rule(hits, cfg) - {best}:
            return list(fixes)
        rule_of = {label: s.features.get("rule", 0.0) for label, s in by_label.items()}
        if rule_of[first] >= rule_of[best] + cfg.rule_margin:
            return list(fixes)
    # it keeps its own score (the calibrated probability); those it outranks are capped to it
    return lead_with(fixes, {best: 0.0}, led_by="cause")


def chosen_by_a_rule(hits: Sequence[RuleHit], settings: FusionSettings | None = None) -> set[str]:
    """The fixes specific rules chose for the lines they matched (not cascade, not atlas): a
    rule chose a fix when it gives it at least `chosen_weight`, and `chosen_margin` more than
    any other fix (standing.py's notion of a rule's choice)."""
    cfg = _settings(settings)
    out: set[str] = set()
    for h in hits:
        if h.generic or h.from_cascade or h.atlas:
            continue
        ranked = sorted(h.fix.values(), reverse=True)
        if (
            ranked
            and ranked[0] >= cfg.chosen_weight
            and (len(ranked) < 2 or ranked[1] <= ranked[0] - cfg.chosen_margin)
        ):
            out.add(max(h.fix, key=lambda f: h.fix[f]))
    return out


def stage_scores(
    symptoms: Sequence[Scored],
    hits: Sequence[RuleHit],
    votes: Sequence[NeighbourVote],
    settings: FusionSettings | None = None,
) -> list[Scored]:
    """Stage: the symptoms' stages weighted by their scores, moved by rule stage evidence and
    the stages of the neighbours (`votes`: those of the mode's main method)."""
    cfg = _settings(settings)
    tax = taxonomy.load()
    scores: dict[str, float] = {}
    for s in symptoms[:3]:
        cat = tax.symptoms.get(s.label)
        if cat is not None and cat.stage:
            scores[cat.stage] = scores.get(cat.stage, 0.0) + s.score
    rule_stage: dict[str, dict[str, float]] = {}
    for hit in hits:
        for st, w in hit.stage.items():
            per_rule = rule_stage.setdefault(st, {})
            w *= cfg.cascade_factor if hit.from_cascade else cfg.atlas_factor if hit.atlas else 1.0
            per_rule[hit.rule_id] = max(per_rule.get(hit.rule_id, 0.0), w)
    for st, ws in rule_stage.items():
        scores[st] = scores.get(st, 0.0) + _noisy_or(list(ws.values()))
    total = sum(max(v.similarity, 0.0) ** 2 for v in votes) or 1.0
    for v in votes:
        share = max(v.similarity, 0.0) ** 2 / total
        scores[v.stage] = scores.get(v.stage, 0.0) + cfg.stage_vote_weight * share
    norm = sum(scores.values()) or 1.0
    return sorted(
        (Scored(st, sc / norm) for st, sc in scores.items()), key=lambda s: (-s.score, s.label)
    )
