"""Classify stage: events + findings -> ranked, calibrated symptoms, root causes and fixes.

Three classifiers are fused (`fusion.py`): the YAML rule engine (`rules.py`), a
nearest-neighbour vote over labeled reference failures (`neighbours.py`, index in `models/`)
and a learned linear model over the case's words, embedding and rule hits (`learned.py`).
When the evidence is weak the stage abstains: empty label lists and an `abstain_reason` that
says what to collect next.

Speed: the rules, the TF-IDF neighbour index and the default similarity model (MiniLM
distilled into a static embedding, `embedding.py`) need numpy and a tokenizer only. The full
MiniLM model (torch; `TRIAGE_EMBEDDING=minilm`) loads on first need, and is not needed at all
when the rules decide with high confidence.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import regex

from triage import knowledge, taxonomy
from triage.analysis.cascade import handled_after
from triage.analysis.ranks import outermost_frame
from triage.classify import (
    abstention,
    embedding,
    fix_prior,
    fusion,
    learned,
    neighbours,
    places,
    rules,
)
from triage.classify import atlas as atlas_mod
from triage.classify import calibration as calibration_mod
from triage.classify import evidence as evidence_mod
from triage.classify.calibration import Calibration
from triage.classify.learned import LearnedClassifier
from triage.classify.neighbours import NeighbourIndex
from triage.classify.rules import RuleSet
from triage.classify.signature import initiating_events, signature
from triage.classify.standing import ANCHOR_WEIGHT, standing
from triage.classify.types import NeighbourVote, RuleHit
from triage.knowledge import fusion_settings
from triage.knowledge.routine import Routine
from triage.model import (
    Analysis,
    Classification,
    Event,
    HangShape,
    OutcomeKind,
    ParsedSource,
    RuleAction,
    ScoredLabel,
    SimilarCase,
    SourceKind,
)

__all__ = [
    "Prepared",
    "case_signature",
    "classify",
    "classify_many",
    "load_calibration",
    "load_learned",
    "model_probs",
    "prepare",
    "rules_decide",
    "should_abstain",
]

# The rules decide (no embedding model needed) when the top symptom is rule-backed at least
# this strongly and its calibrated score reaches DECIDED_SCORE. Chosen by measurement on the
# corpus (bench/eval_corpus.py reports accuracy of both paths on these cases). The generic
# layer settles a paste when no specific rule names a symptom and one generic label leads
# (fusion.generic_settles): neighbours then add no symptom labels, so the embedding cannot change
# the answer's symptom and is not loaded for it.
DECIDED_RULE = 0.7
DECIDED_SCORE = 0.8
MAX_SIMILAR = 5
# below: not shown as a similar case (the embedding's floor is its space's: `embedding.SPACES`)
MIN_SIMILARITY = {"tfidf": 0.15}
# Without a rule, a neighbour vote counts only when the nearest reference case is at least
# this close: below it, leave-one-out on the corpus found the nearest case's symptom right
# in under one case in five (bench/eval_corpus.py prints the table).
NEAREST_FLOOR = {"tfidf": 0.3}  # the embedding's: `embedding.SPACES`
MIN_RULE_SUPPORT = 0.2
# ... or when the learned model gives the symptom at least this probability (it reads the
# words and frames no single reference case shares); 0.2, 0.3 and 0.5 were within a point
# of each other in cross-validation (bench/eval_corpus.py).
MIN_MODEL_SUPPORT = 0.3
DEFAULT_ABSTAIN_BELOW = 0.25


@dataclass(frozen=True)
class Prepared:
    """What classification needs from one job, computed once."""

    hits: tuple[RuleHit, ...]
    signature: str
    lead: Event | None  # the initiating event the signature starts from
    hashes: frozenset[str]
    analysis: Analysis
    parsed: tuple[ParsedSource, ...]


def rule_hits(
    parsed: Sequence[ParsedSource],
    analysis: Analysis,
    extra_rules_dirs: Sequence[str] = (),
    ruleset: RuleSet | None = None,
    *,
    layered: bool = True,
    routine: Routine | None = None,
    hang_deaths: regex.Pattern[str] | None = None,
    kb: knowledge.Knowledge | None = None,
) -> list[RuleHit]:
    """Rule hits over all events and correlate's findings (rules match findings too), and
    over a paste's own text where a specific rule's message spans lines or stands on a line
    no event holds (`paste_hits`: what `triage rules check` reads).

    `ruleset` is the rules to run (the pipeline loads them once, for classify and recommend
    alike); without it, the rules of `kb`, else the shipped rules plus `extra_rules_dirs`. A
    rule set that cannot be loaded is an error (KnowledgeError), never an empty answer.
    `layered=False` keeps the generic hits that a specific rule would override (to measure
    the generic layer alone). `routine`: what healthy jobs print; given for a job's logs (not
    a paste), a hit on such a line is dropped unless its rule says why it is still a fault
    (`routine_fault`).
    """
    events = [ev for ps in parsed for ev in ps.events]
    kinds = {ps.source.path: ps.source.kind for ps in parsed}
    if ruleset is None:
        ruleset = rules.ruleset(kb) if kb is not None else rules.load(extra_rules_dirs)
    kb = kb if kb is not None else knowledge.load(extra_rules_dirs)
    try:
        hits = list(rules.match_events(events, analysis, rules=ruleset, source_kinds=kinds))
        pasted = paste_hits(parsed, hits, analysis, ruleset, kinds, kb.routine)
    except Exception as exc:  # noqa: BLE001 - a matching bug must not stop the run
        warnings.warn(f"rule engine failed: {type(exc).__name__}: {exc}", stacklevel=2)
        return []
    known_places = kb.places
    hits += places.frame_hits(events, known_places, kinds, analysis.cascade_events)
    hits = places.refine_priors(hits, known_places)
    if routine is not None:
        hits = drop_routine(hits, ruleset, routine)
        hits = quiet_preamble(hits, parsed, analysis)
        hits = [_evidence_only(h) if _printed_and_ignored(h.event, kb) else h for h in hits]
    # a paste's span is read from the user's text as an event is, not concluded by correlate
    spans = [h.event for h in pasted if h.event is not None]
    hits = demote_consequences([*hits, *pasted], [*events, *spans], analysis, hang_deaths, kb)
    return fusion.yield_generic(hits) if layered else hits


def paste_hits(
    parsed: Sequence[ParsedSource],
    hits: Sequence[RuleHit],
    analysis: Analysis,
    ruleset: RuleSet,
    kinds: Mapping[str, SourceKind],
    routine: Routine,
) -> list[RuleHit]:
    """The rules that hit none of a paste's events, read over its whole text where what they
    match lies outside every single event (`rules.paste_hits`): what `triage rules check`
    sees. A line the parser kept no event of is the paste's background, not the line the
    user quoted as the problem: a hit whose every line is one healthy jobs print is dropped,
    unless its rule says why such a line is a fault (`routine_fault`). A routine line that
    only gives a fault its context (`Saving FSDP model` before a watchdog timeout) stays."""
    seen = {h.rule_id for h in hits}
    says_why = {r.id for r in ruleset.rules if r.routine_fault}
    out: list[RuleHit] = []
    for ps in parsed:
        # a paste with no event of its own was read whole already (`with_whole_text`)
        if not ps.paste or ps.whole_text:
            continue
        found = rules.paste_hits(
            ps.paste,
            ps.events,
            seen,
            analysis,
            rules=ruleset,
            source=ps.source.path,
            source_kinds=kinds,
        )
        out += [h for h in found if h.rule_id in says_why or not _all_routine(h, routine)]
    return out


def _all_routine(hit: RuleHit, routine: Routine) -> bool:
    """Is every line a hit stands on one that healthy jobs print?"""
    return _routine_only(hit.event.text if hit.event is not None else hit.evidence_text, routine)


def _printed_and_ignored(ev: Event | None, kb: knowledge.Knowledge) -> bool:
    """A traceback Python printed and went on from (`rules/outcome.yaml` printed_and_ignored:
    an exception in `__del__`, multiprocessing's exit-time finalizers): in a job's logs it
    names no failure, however its exception reads."""
    return ev is not None and kb.ends.ignored_traceback(outermost_frame(ev))


def _routine_only(text: str, routine: Routine) -> bool:
    """Is every non-blank line of `text` one that healthy jobs print (rules/routine.yaml)?"""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return bool(lines) and all(routine.which(ln) is not None for ln in lines)


def _without_routine(
    parsed: Sequence[ParsedSource], routine: Routine | None
) -> Sequence[ParsedSource]:
    """A job's sources less the events whose every line healthy jobs print (rules/routine.yaml):
    the neighbours compare what went wrong, and such a line never is by itself. A paste
    (`routine` None) keeps every line: its user quotes it as the problem."""
    if routine is None:
        return parsed
    out = []
    for ps in parsed:
        kept = tuple(ev for ev in ps.events if not _routine_only(ev.text, routine))
        out.append(replace(ps, events=kept) if len(kept) < len(ps.events) else ps)
    return out


def quiet_preamble(
    hits: Sequence[RuleHit], parsed: Sequence[ParsedSource], analysis: Analysis
) -> list[RuleHit]:
    """The hits on a job's launch preamble kept as evidence that votes for no label.

    Where a file's lines carry the ranks' tags (`srun -l`'s `12: `, torchrun's `[rank3]:`)
    and correlate placed the failure on a rank, what the file shows untagged before its first
    tagged line is the batch script's own output from before the launch (a `wandb` command
    under the login node's Python, a `module load` that complained), and the job went on to
    start its ranks after it. The ranks' own failure is the job's."""
    if not any(ev.rank is not None for ev in analysis.initiating_events):
        return list(hits)
    preamble: set[tuple[str, int]] = set()
    for ps in parsed:
        first_tagged = min(
            (ev.line for ev in ps.events if ev.rank is not None and ev.line is not None),
            default=None,
        )
        if first_tagged is None:
            continue
        preamble |= {
            (ev.source, ev.line)
            for ev in ps.events
            if ev.rank is None and ev.line is not None and ev.line < first_tagged
        }
    if not preamble:
        return list(hits)
    return [
        _evidence_only(h)
        if h.event is not None and (h.event.source, h.event.line) in preamble
        else h
        for h in hits
    ]


def drop_routine(hits: Sequence[RuleHit], ruleset: RuleSet, routine: Routine) -> list[RuleHit]:
    """The hits that do not rest on a line healthy jobs print (rules/routine.yaml), or whose
    rule says why that line is a fault all the same."""
    says_why = {r.id for r in ruleset.rules if r.routine_fault}
    return [
        h
        for h in hits
        if h.rule_id in says_why
        or h.event is None
        or routine.which(h.evidence_text or h.event.text) is None
    ]


def _about_the_culprit(hit: RuleHit, culprits: set[int]) -> bool:
    """A finding about the rank that started it, and no consequence of another's failure (the
    NaN its own loss showed first): it says more of the initiating failure, not what followed."""
    f = hit.finding
    return f is not None and not f.consequence_of and bool(culprits & set(f.ranks))


def demote_consequences(
    hits: Sequence[RuleHit],
    events: Sequence[Event],
    analysis: Analysis,
    hang_deaths: regex.Pattern[str] | None = None,
    kb: knowledge.Knowledge | None = None,
) -> list[RuleHit]:
    """The initiating failure outranks what it caused.

    * A hit on a later link of a chained traceback whose first exception is the rank's own
      (the ValueError, then the `finally:` barrier that timed out) counts as cascade: the rank
      raised the first, the rest happened while it handled it.
    * A hit on a finding correlate marked as a consequence of a rank's own failure (`behind`,
      `never entered`, `odd one out`, `took another collective` about a rank that had raised)
      counts as cascade.
    * Once a rule confidently explains an initiating event, hits on correlate's findings (the
      hang, the missing rank, the exits that followed) count as cascade. A job that hung
      because rank 3 failed an import is an import case.
    * When correlate found that the ranks the others waited for had failed by themselves (the
      hang's shape is `failed`), the cascade says nothing about why: its hits stay as evidence
      of what the others suffered, without weight for any label. Otherwise a wall of
      timeouts outvotes the one exception that caused them.
    * A task the launcher killed while it ended the step (`Analysis.launcher_victims`) backs
      no label: its `Killed` is the launcher's doing.
    * A fault of a later job step after an earlier step had failed
      (`Analysis.later_step_faults`) is quoted but backs no label: the job failed first there.
    """
    initiating = set(analysis.initiating_events)
    parsed_events = set(events)
    hits = [
        replace(h, from_cascade=True)
        if not h.from_cascade
        and (
            _while_handling(h, initiating, kb)
            or (
                # a consequence finding without a line of its own; one that quotes a record
                # is weighed as that record (marking those too moves two bundles' evidence)
                h.finding is not None
                and bool(h.finding.consequence_of)
                and not h.finding.evidence
                and (h.event is None or h.event not in parsed_events)
            )
        )
        else h
        for h in hits
    ]
    anchored = bool(initiating) and any(
        h.event is not None
        and h.event in initiating
        and not h.from_cascade
        and max(h.symptom.values(), default=0.0) >= ANCHOR_WEIGHT
        for h in hits
    )
    if anchored:
        culprits = set(analysis.culprit_ranks)
        hits = [
            replace(h, from_cascade=True)
            if not h.from_cascade
            and (h.event is None or h.event not in parsed_events)
            and not _about_the_culprit(h, culprits)
            else h
            for h in hits
        ]
    if analysis.hang is not None and analysis.hang.shape is HangShape.FAILED:
        hits = [_evidence_only(h) if h.from_cascade else h for h in hits]
    if analysis.launcher_victims:
        # a task the launcher killed while it ended the step died of that kill, whatever its
        # report reads like (a bare `Killed` is no OOM kill here): quoted, backing no label
        victims = set(analysis.launcher_victims)
        hits = [_evidence_only(h) if h.event in victims else h for h in hits]
    if analysis.later_step_faults:
        # a later job step failed after the first had: the job started failing in the first
        later = set(analysis.later_step_faults)
        hits = [_evidence_only(h) if h.event in later else h for h in hits]
    if (
        hang_deaths is not None
        and analysis.outcome is not None
        and (analysis.outcome.id is OutcomeKind.HUNG)
    ):
        # the job hung: a process the watchdog aborted, or the launcher then stopped, died of
        # the wait; the timeout is the symptom (rules/outcome.yaml, hang_deaths)
        hits = [_evidence_only(h) if hang_deaths.search(h.evidence_text or "") else h for h in hits]
    if analysis.outcome is not None and analysis.outcome.id is OutcomeKind.STOPPED:
        # the lines that say the job was stopped on purpose are the outcome, not a symptom
        stop_lines = {(e.source, e.line) for e in analysis.outcome.evidence}
        hits = [
            _evidence_only(h)
            if h.event is not None and (h.event.source, h.event.line) in stop_lines
            else h
            for h in hits
        ]
    return list(hits)


def _evidence_only(hit: RuleHit) -> RuleHit:
    """The hit as a quoted line of evidence that backs no label, fix or stage."""
    return replace(hit, symptom={}, root_cause={}, fix={}, stage={}, actions={})


def _while_handling(hit: RuleHit, initiating: set[Event], kb: knowledge.Knowledge | None) -> bool:
    """A hit quoting a line that its chained traceback raised after the rank's own first
    exception (see `triage.analysis.cascade.handled_after`)."""
    ev = hit.event
    if ev is None or ev not in initiating:
        return False
    if hit.evidence_line is not None and ev.line is not None:
        offset = hit.evidence_line - ev.line
    else:
        at = ev.text.find(hit.evidence_text) if hit.evidence_text else -1
        if at < 0:
            return False
        offset = ev.text.count("\n", 0, at)
    return handled_after(ev, offset, kb)


def case_signature(
    parsed: Sequence[ParsedSource], analysis: Analysis, kb: knowledge.Knowledge | None = None
) -> str:
    """The failure signature of a job or a paste, as its neighbours are looked up by (and as
    a reference case is indexed); `kb`: the run's knowledge, None: the shipped one."""
    return signature(neighbours.with_whole_text(parsed), analysis, kb)


def prepare(
    parsed: Sequence[ParsedSource],
    analysis: Analysis,
    extra_rules_dirs: Sequence[str] = (),
    ruleset: RuleSet | None = None,
    routine: Routine | None = None,
    hang_deaths: regex.Pattern[str] | None = None,
    kb: knowledge.Knowledge | None = None,
) -> Prepared:
    """What classification needs from what the parsers read (nothing is read again here).
    `routine`: given for a job's logs, see `rule_hits`. `kb`: the run's knowledge (None: the
    shipped one plus `extra_rules_dirs`)."""
    parsed = neighbours.with_whole_text(parsed)
    lead = initiating_events(parsed, analysis, kb)
    hits = rule_hits(
        parsed,
        analysis,
        extra_rules_dirs,
        ruleset,
        routine=routine,
        hang_deaths=hang_deaths,
        kb=kb,
    )
    # a library's own message, matched and sure of what it means, explains its lines as a
    # specific rule does: the generic family priors on them give way to it too
    atlas_hits = atlas_mod.job_hits(parsed, analysis, lead, kb)
    return Prepared(
        hits=tuple(fusion.yield_generic([*hits, *atlas_hits])),
        signature=signature(_without_routine(parsed, routine), analysis, kb),
        lead=lead[0] if lead else None,
        hashes=frozenset(neighbours.query_hashes(parsed)),
        analysis=analysis,
        parsed=tuple(parsed),
    )


def classify(
    parsed: Sequence[ParsedSource],
    analysis: Analysis,
    *,
    use_embeddings: bool = True,
    extra_rules_dirs: Sequence[str] = (),
) -> Classification:
    """Labels for one job (or one pasted text). See `classify_many` for batches."""
    return classify_many(
        [(parsed, analysis)], use_embeddings=use_embeddings, extra_rules_dirs=extra_rules_dirs
    )[0]


def classify_many(
    jobs: Sequence[tuple[Sequence[ParsedSource], Analysis]],
    *,
    use_embeddings: bool = True,
    extra_rules_dirs: Sequence[str] = (),
    index: NeighbourIndex | None = None,
    calibration: Calibration | None = None,
    kb: knowledge.Knowledge | None = None,
    pasted: bool = False,
) -> list[Classification]:
    """Labels for many jobs; every signature that needs the model is embedded in one call.
    `kb` is the knowledge to use (the pipeline loads it once for classify and recommend);
    without it, the shipped knowledge plus `extra_rules_dirs`. `pasted`: the jobs are pasted
    errors (the user quotes a routine line as the problem: its rules still count)."""
    kb = kb if kb is not None else knowledge.load(extra_rules_dirs)
    ruleset = rules.ruleset(kb)
    routine = None if pasted else kb.routine
    deaths = kb.ends.hang_deaths
    # the index first: a models/ without one is an error that says how to build it, before
    # anything else of models/ (the fusion's settings) is read
    idx = index if index is not None else neighbours.load_index()
    prepared = [
        prepare(p, a, ruleset=ruleset, routine=routine, hang_deaths=deaths, kb=kb) for p, a in jobs
    ]
    cal = calibration if calibration is not None else load_calibration()
    sigs = [p.signature for p in prepared]
    hashes = [p.hashes for p in prepared]
    empty: list[list[NeighbourVote]] = [[] for _ in prepared]
    tf_votes = idx.query(sigs, "tfidf", query_hashes=hashes) if idx is not None else empty
    votes: list[dict[str, list[NeighbourVote]]] = [{"tfidf": v} for v in tf_votes]
    tf_model = model_probs(prepared, "tfidf")
    # a job's own initiating failure leads its labels; a paste keeps the calibrated order but
    # for a remedy a library's message prescribes
    leads: list[dict[str, dict[str, float]]] = [
        standing(p.hits, p.analysis, pasted=pasted) for p in prepared
    ]
    # a failed job known only from its launcher's report: nothing of its own to classify
    unlogged = [None if pasted else abstention.failure_unlogged(p, kb) for p in prepared]
    usual = load_cause_fixes()
    settings = fusion_settings.shipped()
    results = [
        fusion.fuse(p.hits, v, cal, "tfidf", m, lead, usual, settings)
        for p, v, m, lead in zip(prepared, votes, tf_model, leads, strict=True)
    ]
    modes = ["tfidf"] * len(prepared)
    if use_embeddings and idx is not None:
        # a job that ended well with no fault in its logs needs no neighbours to name one
        need = [
            i
            for i, r in enumerate(results)
            if prepared[i].signature
            and not rules_decide(r)
            and not _ended_well(prepared[i])
            and unlogged[i] is None
        ]
        if need:
            # one embedding per signature, for the neighbours and the learned model alike
            vectors = neighbours.embed([sigs[i] for i in need])
            embedded = idx.query(
                [sigs[i] for i in need],
                "embed",
                query_hashes=[hashes[i] for i in need],
                vectors=vectors,
            )
            em_model = model_probs([prepared[i] for i in need], "embed", vectors)
            for i, v, m in zip(need, embedded, em_model, strict=True):
                votes[i]["embed"] = v
                results[i] = fusion.fuse(
                    prepared[i].hits, votes[i], cal, "embed", m, leads[i], usual, settings
                )
                modes[i] = "embed"
    abstain_below = cal.abstain_below if cal is not None else DEFAULT_ABSTAIN_BELOW
    return [
        assemble(p, r, v[m], m, abstain_below, kb.collect_next, unlogged)
        for p, r, v, m, unlogged in zip(prepared, results, votes, modes, unlogged, strict=True)
    ]


def _ended_well(prep: Prepared) -> bool:
    out = prep.analysis.outcome
    return out is not None and out.clean


def rules_decide(result: dict[str, list[fusion.Scored]]) -> bool:
    """True when the rules alone settle the symptom: the model need not load."""
    symptoms = result["symptom"]
    if not symptoms:
        return False
    top = symptoms[0]
    if top.features.get("rule", 0.0) >= DECIDED_RULE and top.score >= DECIDED_SCORE:
        return True
    # the generic layer settles it: no specific rule names a symptom, one generic label leads
    generic = {s.label: s.features.get("rule_generic", 0.0) for s in symptoms}
    runner_up = max((w for label, w in generic.items() if label != top.label), default=0.0)
    settle = fusion_settings.shipped().generic_settle
    return (
        fusion.generic_settles({s.label for s in symptoms if s.features.get("rule", 0.0)}, generic)
        and generic[top.label] >= settle
        and generic[top.label] > runner_up
    )


def _floor(table: Mapping[str, float], method: str) -> float:
    """A similarity threshold of a method; the embedding's depends on its space."""
    if method == "embed":
        space = embedding.active()
        return space.min_similarity if table is MIN_SIMILARITY else space.nearest_floor
    return table[method]


def load_calibration(directory: Path | None = None) -> Calibration | None:
    """The calibration fitted for the active embedding space."""
    root = directory or neighbours.models_dir()
    return calibration_mod.load(root / embedding.active().calibration_file)


def load_cause_fixes(directory: Path | None = None) -> fix_prior.FixPrior:
    """What resolved the reference cases of each root cause (`fix_prior.CAUSE_FIXES_FILE`),
    else the calibration's P(fix | root cause), else the taxonomy's lists."""
    root = directory or neighbours.models_dir()
    fitted = fix_prior.load(root / fix_prior.CAUSE_FIXES_FILE)
    if fitted is not None:
        return fitted
    cal = load_calibration(root)
    return cal.fix_prior if cal is not None and cal.fix_prior is not None else fix_prior.listed()


def load_learned(variant: str, directory: Path | None = None) -> LearnedClassifier | None:
    """The learned model of one variant (`embed`: in the active embedding space; `tfidf`),
    or None when none is shipped."""
    root = directory or neighbours.models_dir()
    return LearnedClassifier.load(root / learned.file_name(variant, embedding.active()))


def model_inputs(
    prepared: Sequence[Prepared], vectors: np.ndarray | None = None
) -> list[learned.ModelInput]:
    return [
        learned.model_input(
            p.signature,
            p.hits,
            p.parsed,
            p.analysis,
            vectors[i] if vectors is not None else None,
        )
        for i, p in enumerate(prepared)
    ]


def model_probs(
    prepared: Sequence[Prepared], variant: str, vectors: np.ndarray | None = None
) -> list[dict[str, dict[str, float]]]:
    """The learned model's probabilities per job (field -> label -> p); empty when no model
    of this variant is shipped."""
    model = load_learned(variant)
    if model is None or not prepared:
        return [{} for _ in prepared]
    return model.label_probs(model_inputs(prepared, vectors))


# --------------------------------------------------------------------------- assembly


def _labels(
    scored: Sequence[fusion.Scored], table: dict, limit: int = 5
) -> tuple[ScoredLabel, ...]:
    out = []
    for s in scored[:limit]:
        cat = table.get(s.label)
        if cat is not None:
            out.append(ScoredLabel(cat.id, cat.slug, cat.name, round(s.score, 4)))
    return tuple(out)


def should_abstain(
    result: Mapping[str, Sequence[fusion.Scored]], abstain_below: float, mode: str
) -> bool:
    """Weak evidence: neither the top symptom nor the top root cause reaches the calibrated
    threshold, or no rule fired, the learned model is unsure of the symptom and even the
    nearest reference case is far away."""
    tops = [result[f][0] for f in ("symptom", "root_cause") if result[f]]
    if not tops or max(t.score for t in tops) < abstain_below:
        return True
    # the symptom is what the evidence itself must show: a root cause's probability alone can
    # be the base rate of the commonest cause (R25 for a paste that says nothing)
    if result["symptom"] and result["symptom"][0].score < abstain_below and not _rule_backed(tops):
        return True
    rule_support = max(
        t.features.get("rule", 0.0)
        + t.features.get("rule_cascade", 0.0)
        + t.features.get("rule_generic", 0.0)
        + t.features.get("atlas", 0.0)
        for t in tops
    )
    # the symptom is what the evidence itself must show: a root cause's probability alone can
    # be the base rate of the commonest cause
    model_support = result["symptom"][0].features.get("model", 0.0) if result["symptom"] else 0.0
    nearest = max(t.features.get(f"{mode}_nearest", 0.0) for t in tops)
    return (
        rule_support < MIN_RULE_SUPPORT
        and model_support < MIN_MODEL_SUPPORT
        and nearest < _floor(NEAREST_FLOOR, mode)
    )


def _rule_backed(tops: Sequence[fusion.Scored]) -> bool:
    return any(
        t.features.get("rule", 0.0)
        + t.features.get("rule_cascade", 0.0)
        + t.features.get("rule_generic", 0.0)
        + t.features.get("atlas", 0.0)
        >= MIN_RULE_SUPPORT
        for t in tops
    )


def assemble(
    prep: Prepared,
    result: dict[str, list[fusion.Scored]],
    votes: Sequence[NeighbourVote],
    method: str,
    abstain_below: float,
    advice: knowledge.CollectNext | None = None,
    unlogged: str | None = None,
) -> Classification:
    """`unlogged`: the launcher's report that is all a failed job's logs say of its failure
    (`abstention.failure_unlogged`): no label is claimed from its words."""
    advice = advice if advice is not None else knowledge.shipped().collect_next
    tax = taxonomy.load()
    # Bundles from corpus_samples vote but are not shown: a similar case is a public issue
    # the user can read.
    similar = tuple(
        SimilarCase(v.case_id, v.url, round(v.similarity, 4))
        for v in votes
        if v.url and v.similarity >= _floor(MIN_SIMILARITY, method)
    )[:MAX_SIMILAR]
    if unlogged is not None:
        return Classification(
            similar_cases=similar,
            abstain_reason=abstention.unlogged_reason(prep, unlogged, advice),
            collect_next=tuple(advice.steps(abstention.situation(prep, unlogged=True))),
        )
    if should_abstain(result, abstain_below, method):
        return Classification(
            similar_cases=similar,
            abstain_reason=abstention.abstain_reason(prep, result, abstain_below, advice),
            collect_next=tuple(advice.steps(abstention.situation(prep))),
        )
    symptoms = _labels(result["symptom"], tax.symptoms)
    stages = fusion.stage_scores(result["symptom"], prep.hits, votes)
    stage = None
    if stages and stages[0].label in tax.stages:
        cat = tax.stages[stages[0].label]
        stage = ScoredLabel(cat.id, cat.slug, cat.name, round(stages[0].score, 4))
    return Classification(
        symptoms=symptoms,
        root_causes=_labels(result["root_cause"], tax.root_causes),
        cause_open=bool(result["root_cause"]) and not fusion.cause_stated(result["root_cause"]),
        fix_lead=_fix_lead(result["fix"], tax),
        stage=stage,
        fix_scores={
            s.label: round(s.score, 4) for s in result["fix"] if s.label in tax.fix_patterns
        },
        actions=rule_actions(prep.hits),
        evidence=evidence_mod.evidence(prep, result, votes),
        similar_cases=similar,
    )


def _fix_lead(fixes: Sequence[fusion.Scored], tax: taxonomy.Taxonomy) -> tuple[str, str] | None:
    """The first fix and what put it first, when more than its score did."""
    if fixes and fixes[0].led_by and fixes[0].label in tax.fix_patterns:
        return (fixes[0].label, fixes[0].led_by)
    return None


def rule_actions(hits: Sequence[RuleHit]) -> dict[str, tuple[RuleAction, ...]]:
    """Per fix: the actions of the rules that back it most strongly first; among equals,
    initiating hits before cascade ones (their actions name the failing rank's facts). One
    text given by several rules is one action, advice for the causes of them all."""
    ranked: dict[str, list[tuple[float, bool, int, RuleAction]]] = {}
    for order, hit in enumerate(hits):
        for fix, acts in hit.actions.items():
            weight = hit.fix.get(fix, 0.0)
            ranked.setdefault(fix, []).extend((-weight, hit.from_cascade, order, a) for a in acts)
    out: dict[str, tuple[RuleAction, ...]] = {}
    for fix, rows in ranked.items():
        by_text: dict[str, RuleAction] = {}
        for *_, a in sorted(rows, key=lambda r: r[:3]):
            seen = by_text.get(a.text)
            by_text[a.text] = a if seen is None else replace(seen, causes=seen.causes | a.causes)
        out[fix] = tuple(by_text.values())
    return out
