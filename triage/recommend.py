"""Recommend: ranked fix patterns, each with concrete actions filled with the job's own facts.

A fix pattern's score combines two things:

* evidence: `classification.fix_scores`, what the rules and neighbour cases say fixed failures
  like this one (already fused and calibrated by the classifier);
* the taxonomy prior: each likely root cause lists the fix patterns that usually resolve it,
  best first (`taxonomy.root_causes[R].fixes`); a fix earns the root cause's score, halved for
  each place further down the list.

Actions come from the rules that matched (filled with captured groups: the exact env var, the
rank, the requested bytes) and then from the per-root-cause playbook (`rules/playbook.yaml`,
plus a team's playbook), filled with the analysis facts (culprit ranks, the collective, the
timeout, versions from env reports). Only actions that apply to the job are given (its
framework, launcher, what was seen: triage.knowledge.actions); a fix pattern with nothing to
say for this job is left out, except the best one, which then says what the pattern means.
The knowledge is the one classify used: the shipped rules and playbook plus the team folders
of `Options.extra_rules_dirs`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from triage import knowledge, taxonomy
from triage.knowledge.playbook import Playbook
from triage.model import Analysis, Classification, Evidence, FixRecommendation, ScoredLabel

# Share of the score from the classifier's fix_scores when it gave some. Those scores already
# fold in the root-cause prior (the calibrator reads it), so the prior here mostly breaks
# near-ties and brings in fixes no evidence named; on dev.jsonl a larger prior share flipped
# right evidence-backed answers (AutoTP -> F3, fp16 scale -> F3) to the prior's first fix
# (fix@1 on dev: 0.75 at a 0.5 share, 0.78 at 0.9).
EVIDENCE_WEIGHT = 0.9
PRIOR_DECAY = (1.0, 0.5, 0.25)  # weight of a root cause's 1st, 2nd, 3rd listed fix
MAX_ACTIONS = 5
MIN_SCORE = 0.02
TOP_CAUSES = 3  # playbook actions come from the best few root causes only
MIN_CAUSE_SCORE = 0.15
CAUSE_RATIO = 0.35  # ... and only those scoring at least this share of the best one


def recommend(
    classification: Classification,
    analysis: Analysis,
    kb: knowledge.Knowledge | None = None,
) -> tuple[FixRecommendation, ...]:
    """Fix patterns for this classification, best first, scores in [0, 1]. `kb` is the
    knowledge classify used (default: the shipped knowledge alone)."""
    kb = kb if kb is not None else knowledge.load()
    rules_by_id = {rule.id: rule for rule in kb.rules}
    tax = taxonomy.load()
    evidence = {
        f: _clip(s) for f, s in (classification.fix_scores or {}).items() if f in tax.fix_patterns
    }
    causes = [rc for rc in classification.root_causes if rc.id in tax.root_causes]
    prior, prior_cause = _prior(causes, tax)
    candidates = set(evidence) | set(prior)
    if not candidates:
        return ()
    w = EVIDENCE_WEIGHT if evidence else 0.0
    scores = {f: w * evidence.get(f, 0.0) + (1.0 - w) * prior.get(f, 0.0) for f in candidates}
    rule_backed = {f for f, acts in (classification.actions or {}).items() if acts}
    # Scores that agree to two places are a tie a user cannot see: the fix a matched rule gives
    # its own advice for (the most specific) goes first, then the root causes' prior.
    order = sorted(
        candidates,
        key=lambda f: (-round(scores[f], 2), f not in rule_backed, -prior.get(f, 0.0), f),
    )
    facts = job_facts(analysis)
    out: list[FixRecommendation] = []
    for f in order:
        if scores[f] < MIN_SCORE and out:
            continue
        actions = _actions(f, classification, causes, facts, kb.playbook)
        if not actions:
            if out:
                continue  # nothing this job can act on: filler, not advice
            actions = (kb.playbook.fallback[f],)
        cat = tax.fix_patterns[f]
        out.append(
            FixRecommendation(
                id=f,
                slug=cat.slug,
                name=cat.name,
                score=round(_clip(scores[f]), 2),  # shown as a percentage; ties are ordered above
                actions=actions,
                why=_why(
                    f, evidence.get(f, 0.0), prior_cause.get(f), classification, tax, rules_by_id
                ),
            )
        )
    return tuple(out)


def _clip(x: float) -> float:
    return min(max(float(x), 0.0), 1.0)


def _prior(
    causes: Sequence[ScoredLabel], tax: taxonomy.Taxonomy
) -> tuple[dict[str, float], dict[str, tuple[ScoredLabel, int]]]:
    """fix -> prior score from the ranked root causes, and the cause that gave the most."""
    prior: dict[str, float] = {}
    source: dict[str, tuple[ScoredLabel, int]] = {}
    for rc in causes:
        for i, f in enumerate(tax.root_causes[rc.id].fixes):
            value = _clip(rc.score) * PRIOR_DECAY[min(i, len(PRIOR_DECAY) - 1)]
            if value > prior.get(f, 0.0):
                prior[f] = value
                source[f] = (rc, i)
    return prior, source


def job_facts(analysis: Analysis) -> dict[str, Any]:
    """The facts actions may name, from the analysis (ranks, collective, timeout, versions)."""
    facts: dict[str, Any] = {k: v for k, v in (analysis.facts or {}).items() if v not in (None, "")}
    ranks = list(analysis.culprit_ranks)
    hang = analysis.hang
    if hang is not None and hang.detected and hang.lagging_ranks:
        ranks = list(hang.lagging_ranks)
    if not ranks and analysis.first_failure is not None and analysis.first_failure.rank is not None:
        ranks = [analysis.first_failure.rank]
    if ranks:
        facts["ranks"] = ", ".join(str(r) for r in ranks)
        facts.setdefault("rank", ranks[0])
    if hang is not None and hang.collective:
        op = hang.collective.get("op") or hang.collective.get("profiling_name")
        if op:
            facts.setdefault("collective", op)
        if hang.collective.get("timeout_ms"):
            facts.setdefault("timeout_ms", hang.collective["timeout_ms"])
    if "host" not in facts:
        host = facts.get("culprit_host") or (
            analysis.first_failure.host if analysis.first_failure is not None else None
        )
        if host:
            facts["host"] = host
    try:
        minutes = int(facts["timeout_ms"]) // 60000
        # Twice the timeout that fired, at least an hour: setup work is rarely just over it.
        facts["timeout_suggest_min"] = max(60, 2 * minutes)
    except (KeyError, TypeError, ValueError):
        pass
    return facts


def _actions(
    fix: str,
    classification: Classification,
    causes: Sequence[ScoredLabel],
    facts: Mapping[str, Any],
    playbook: Playbook,
) -> tuple[str, ...]:
    """Rule actions (most specific) first, then the playbook's, without near-repeats; only
    those that apply to this job (none, possibly)."""
    # classify orders them: the rules that back this fix most strongly first
    from_rules = list(dict.fromkeys((classification.actions or {}).get(fix, ())))
    # Playbook advice only from causes that are still plausible next to the best one.
    floor = max(MIN_CAUSE_SCORE, CAUSE_RATIO * (causes[0].score if causes else 0.0))
    from_playbook = [
        advice
        for rc in causes[:TOP_CAUSES]
        if rc.score >= floor and (advice := playbook.advice(rc.id, fix, facts)) is not None
    ]
    # Two rule actions, then the playbook (it carries the job's ranks and values), then the rest.
    ordered = from_rules[:2] + from_playbook + from_rules[2:]
    actions: list[str] = []
    for text in ordered:
        if not any(_similar(text, kept) for kept in actions):
            actions.append(text)
    if actions and actions[0].startswith("Or "):
        # "Or ..." follows another step of its rule; listed first here, it follows nothing
        actions[0] = actions[0][3:4].upper() + actions[0][4:]
    return tuple(actions[:MAX_ACTIONS])


def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z_][a-z0-9_]{3,}", text.lower())}


def _main_command(text: str) -> str:
    """An action's longest code span: the command it asks the user to run or write."""
    spans = re.findall(r"`([^`]+)`", text)
    return max(spans, key=len) if spans else ""


def _similar(a: str, b: str) -> bool:
    """Two actions saying the same thing in other words: the same main command, or most of the
    shorter one's words."""
    command = _main_command(a)
    if len(command) >= 12 and command == _main_command(b):
        return True
    wa, wb = _words(a), _words(b)
    if not wa or not wb:
        return a == b
    return len(wa & wb) / min(len(wa), len(wb)) >= 0.6


def _why(
    fix: str,
    evidence: float,
    cause: tuple[ScoredLabel, int] | None,
    classification: Classification,
    tax: taxonomy.Taxonomy,
    rules_by_id: Mapping[str, knowledge.Rule],
) -> str:
    parts: list[str] = []
    if evidence > 0:
        quote = _evidence_for(fix, classification, rules_by_id)
        if quote is not None:
            text = " ".join(quote.text.split())
            text = text if len(text) <= 90 else text[:87] + "..."
            title = rules_by_id[quote.why].title
            first = title.split(" ", 1)[0]
            if not (len(first) > 1 and first.isupper()):  # "NCCL cannot ..." keeps its capitals
                title = title[:1].lower() + title[1:]
            parts.append(f"{title} (“{text}”)")
    if cause is not None:
        rc, i = cause
        place = "the usual fix" if i == 0 else "a common fix"
        parts.append(f"{place} for root cause {rc.id} {rc.name} ({rc.score:.0%})")
    if not parts:
        parts.append(f"similar failures were resolved by: {tax.fix_patterns[fix].name}")
    return "; ".join(parts)


def _evidence_for(
    fix: str, classification: Classification, rules_by_id: Mapping[str, knowledge.Rule]
) -> Evidence | None:
    """The quoted line of the rule that backs this fix most (None when no rule backs it)."""
    index = rules_by_id
    best: tuple[float, Evidence] | None = None
    for ev in classification.evidence:
        rule = index.get(ev.why)
        weight = rule.fix.get(fix, 0.0) if rule is not None else 0.0
        if weight > 0 and (best is None or weight > best[0]):
            best = (weight, ev)
    return best[1] if best is not None else None
