"""Recommend: ranked fix patterns, each with concrete actions filled with the job's own facts.

A fix pattern's score combines two things:

* evidence: `classification.fix_scores`, what the rules and neighbour cases say fixed failures
  like this one (already fused and calibrated by the classifier);
* the fix prior: P(fix | root cause), what resolved the reference cases of each likely root
  cause (`classify.fix_prior`, `cause_fixes.json`; the taxonomy's lists where none is
  shipped); a fix earns the root cause's score times its probability next to the cause's
  best fix.

The fix classify put first (`Classification.fix_lead`: the stated cause's usual fix, a remedy
the message prescribes, the job's initiating failure's fix) stays first.

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
from dataclasses import dataclass
from typing import Any

from triage import knowledge, taxonomy
from triage.classify.fix_prior import FixPrior
from triage.knowledge.actions import JobConditions, plain
from triage.knowledge.playbook import Playbook
from triage.model import (
    LABELS_SHOWN,
    Analysis,
    Classification,
    Evidence,
    FixRecommendation,
    ScoredLabel,
)

# Share of the score from the classifier's fix_scores when it gave some. Those scores already
# fold in the root-cause prior (the calibrator reads it), so the prior here mostly breaks
# near-ties and brings in fixes no evidence named; on dev.jsonl a larger prior share flipped
# right evidence-backed answers (AutoTP -> F3, fp16 scale -> F3) to the prior's first fix
# (fix@1 on dev: 0.75 at a 0.5 share, 0.78 at 0.9).
EVIDENCE_WEIGHT = 0.9
# A fix that resolved fewer than this share of a cause's cases is not that cause's advice.
MIN_PRIOR = 0.1
MAX_ACTIONS = 5
MIN_SCORE = 0.02
TOP_CAUSES = 3  # playbook actions come from the best few root causes only
# ... that are probable: advice for a cause scored below this is advice for another failure
# (a SIGKILL told to "fix the training script" because user code scored 17%)
MIN_CAUSE_SCORE = 0.25
CAUSE_RATIO = 0.5  # ... and only those scoring at least this share of the best one


def recommend(
    classification: Classification,
    analysis: Analysis,
    kb: knowledge.Knowledge | None = None,
    fix_prior: FixPrior | None = None,
) -> tuple[FixRecommendation, ...]:
    """Fix patterns for this classification, best first, scores in [0, 1]. `kb` is the
    knowledge classify used (default: the shipped knowledge alone); `fix_prior` the P(fix |
    root cause) it used (default: the shipped one)."""
    kb = kb if kb is not None else knowledge.load()
    fix_prior = fix_prior if fix_prior is not None else shipped_fix_prior()
    rules_by_id = {rule.id: rule for rule in kb.rules}
    tax = taxonomy.load()
    evidence = {
        f: _clip(s) for f, s in (classification.fix_scores or {}).items() if f in tax.fix_patterns
    }
    causes = [rc for rc in classification.root_causes if rc.id in tax.root_causes]
    prior, _ = _prior(causes, fix_prior)
    # a fix's why names the cause it follows among those the report's table shows: a cause
    # left out of it (R17 at 15%, fourth) is not one the report states
    _, prior_cause = _prior(causes[:LABELS_SHOWN], fix_prior)
    candidates = set(evidence) | set(prior)
    if not candidates:
        return ()
    w = EVIDENCE_WEIGHT if evidence else 0.0
    scores = {f: w * evidence.get(f, 0.0) + (1.0 - w) * prior.get(f, 0.0) for f in candidates}
    rule_backed = {f for f, acts in classification.actions.items() if acts}
    # The fix classify put first for the cause it follows (or a remedy the message prescribes,
    # or the job's initiating failure) stays first: the prior's share here only breaks ties.
    lead, led_by = classification.fix_lead or (None, "")
    lead = lead if lead in candidates else None
    # Scores that agree to two places are a tie a user cannot see: the fix a matched rule gives
    # its own advice for (the most specific) goes first, then the root causes' prior.
    order = sorted(
        candidates,
        key=lambda f: (
            f != lead,
            -round(scores[f], 2),
            f not in rule_backed,
            -prior.get(f, 0.0),
            f,
        ),
    )
    facts = job_facts(analysis)
    job = JobConditions.of(analysis.facts)
    # the advice is ordered by the most likely cause only when that cause is likely at all
    top_cause = causes[0].id if causes and causes[0].score >= LEAD_CAUSE_SCORE else None
    ranked = {f: _actions(f, classification, causes, facts, job, kb, top_cause) for f in order}
    if lead is None:
        order = _lead_with_the_cause(order, scores, ranked)
    else:
        order = [lead, *_lead_with_the_cause(order[1:], scores, ranked)]
    usual = fix_prior.ranked(causes[0].id) if causes else ()
    usual_for_top = usual[0][0] if usual else None
    out: list[FixRecommendation] = []
    said: list[str] = []  # every action already given, under any fix pattern
    for f in order:
        if scores[f] < MIN_SCORE and out:
            continue
        # one action per idea across the whole list: a later fix pattern that only says again
        # what an earlier one said is left out
        actions = _distinct(ranked[f], kb.playbook, said)[:MAX_ACTIONS]
        if not actions:
            if out or (
                f != usual_for_top
                and any(ranked[g] for g in order if g != f and scores[g] >= MIN_SCORE)
            ):
                # nothing this job can act on (or nothing new): filler, not advice. The
                # playbook's general line leads only for the usual fix of the most likely
                # cause, or where no fix pattern has anything concrete to say
                continue
            actions = [kb.playbook.fallback[f]]
        said.extend(actions)
        actions = _no_leading_or(actions)
        cat = tax.fix_patterns[f]
        score = _clip(scores[f])
        if out and score > out[-1].score:
            # it gave way to advice for the likely cause: its score came from advice for
            # another cause, and a list read top-down must not show it above the one before
            score = out[-1].score
        out.append(
            FixRecommendation(
                id=f,
                slug=cat.slug,
                name=cat.name,
                score=round(score, 2),  # shown as a percentage; ties are ordered above
                actions=tuple(actions),
                why=_why(
                    f,
                    evidence.get(f, 0.0),
                    prior_cause.get(f),
                    classification,
                    tax,
                    rules_by_id,
                    led_by if f == lead else "",
                ),
            )
        )
    return tuple(out)


def _clip(x: float) -> float:
    return min(max(float(x), 0.0), 1.0)


def shipped_fix_prior() -> FixPrior:
    """What resolved the reference cases of each root cause (the table classify follows a
    stated cause with), else the calibration's P(fix | root cause), else the taxonomy's
    lists."""
    from triage.classify import load_cause_fixes

    return load_cause_fixes()


def _prior(
    causes: Sequence[ScoredLabel], table: FixPrior
) -> tuple[dict[str, float], dict[str, tuple[ScoredLabel, int]]]:
    """fix -> prior score from the ranked root causes, and the cause that gave the most (with
    the fix's place among that cause's fixes, 0: the one that resolved most of its cases)."""
    prior: dict[str, float] = {}
    source: dict[str, tuple[ScoredLabel, int]] = {}
    for rc in causes:
        ranked = table.ranked(rc.id)
        best = ranked[0][1] if ranked else 0.0
        for i, (f, p) in enumerate(ranked):
            if p < MIN_PRIOR:
                break
            value = _clip(rc.score) * p / best
            if value > prior.get(f, 0.0):
                prior[f] = value
                source[f] = (rc, i)
    return prior, source


# a host name that names whichever machine reads it
_LOOPBACK = re.compile(r"(?i)^(?:localhost(?:\.localdomain)?|127(?:\.\d{1,3}){3}|::1)$")


def names_a_machine(host: str | None) -> bool:
    """Does this host name say which machine? `localhost` (pdsh's and ssh launchers' name for
    the node they run on) names whichever machine reads it."""
    return bool(host) and not _LOOPBACK.match(host or "")


def job_facts(analysis: Analysis) -> dict[str, Any]:
    """The facts actions may name, from the analysis (ranks, collective, timeout, versions)."""
    known = analysis.facts
    facts: dict[str, Any] = {k: v for k, v in known.values().items() if v != ""}
    ranks = list(analysis.culprit_ranks)
    hang = analysis.hang
    first = analysis.first_failure
    if hang is not None and hang.detected and hang.lagging_ranks:
        ranks = list(hang.lagging_ranks)
    if not ranks and first is not None and first.rank is not None:
        ranks = [first.rank]
    if ranks:
        facts["ranks"] = plain(ranks)
        facts["rank"] = ranks[0]
    timeout_ms = known.timeout_ms
    if hang is not None and hang.collective:
        op = hang.collective.op or hang.collective.profiling_name
        if op and not known.collective:
            facts["collective"] = op  # the op's name, never the record it came from
        timeout_ms = timeout_ms or hang.collective.timeout_ms or None
    host = known.culprit_host or (first.host if first is not None else None)
    if names_a_machine(host):
        # pdsh and ssh launchers name the launching node `localhost`: no node to drain by
        facts["host"] = host
    if timeout_ms:
        facts["timeout_ms"] = timeout_ms
        # Twice the timeout that fired, at least an hour: setup work is rarely just over it.
        facts["timeout_suggest_min"] = max(60, 2 * (timeout_ms // 60000))
    return facts


@dataclass(frozen=True)
class _Ranked:
    """One action and whether it speaks to the most likely root cause (its rule concludes
    that cause or none, or says it is `for` it; or the playbook gives it for that cause)."""

    text: str
    on_cause: bool
    by_rule: bool  # written by a rule that matched this job's lines, not the playbook
    frameworks: frozenset[str]  # those its wording names
    located: bool  # it names where in the job's code it failed


# A fix pattern whose first action speaks to the most likely root cause goes before one whose
# first action speaks to another cause, when its score is within this much of the best one:
# "drop_last" (uneven batches) must not lead a NaN that the data caused because a step-count
# rule scored 0.06 higher.
LEAD_MARGIN = 0.1
# ... and only when that cause scores at least this: below it the cause is a guess, and the
# scores' order stands (on the reference corpus, a weak "framework logic bug" pushed right
# specific advice down)
LEAD_CAUSE_SCORE = 0.5


def _lead_with_the_cause(
    order: Sequence[str], scores: Mapping[str, float], ranked: Mapping[str, Sequence[_Ranked]]
) -> list[str]:
    if not order:
        return []
    best = scores[order[0]]

    def tier(f: str) -> int:
        # A fix whose rules all advise it for other causes gives way: its score came from
        # them, not from this cause. A fix with nothing concrete to say, or only the
        # playbook's general advice, keeps its place (on the reference corpus, promoting a
        # specific rule's advice over those flipped as many right answers as it fixed).
        from_rules = [a for a in ranked[f] if a.by_rule]
        return 1 if from_rules and not any(a.on_cause for a in from_rules) else 0

    near = [f for f in order if scores[f] >= best - LEAD_MARGIN]
    rest = [f for f in order if f not in near]
    return sorted(near, key=lambda f: (tier(f), order.index(f))) + rest


def _actions(
    fix: str,
    classification: Classification,
    causes: Sequence[ScoredLabel],
    facts: Mapping[str, Any],
    job: JobConditions,
    kb: knowledge.Knowledge,
    top_cause: str | None,
) -> list[_Ranked]:
    """Rule actions (most specific) first, then the playbook's; only those that apply to this
    job (none, possibly); those that speak to the most likely root cause before the others."""
    # classify orders them: the rules that back this fix most strongly first
    from_rules = classification.actions.get(fix, ())
    # Playbook advice only from causes that are still plausible next to the best one.
    floor = max(MIN_CAUSE_SCORE, CAUSE_RATIO * (causes[0].score if causes else 0.0))
    from_playbook = [
        (rc.id, advice)
        for rc in causes[:TOP_CAUSES]
        if rc.score >= floor and (advice := kb.playbook.choose(rc.id, fix, facts, job)) is not None
    ]
    out: list[_Ranked] = []
    for action in from_rules:
        on_cause = top_cause is None or not action.causes or top_cause in action.causes
        out.append(_Ranked(action.text, on_cause, True, action.frameworks, located=action.located))
    for cause, advice in from_playbook:
        on_cause = top_cause is None or cause == top_cause
        frameworks = advice.alternative.frameworks
        out.append(_Ranked(advice.text, on_cause, False, frameworks, located=advice.located))
    # Advice that names a framework the job does not run on is for another job (a DeepSpeed
    # OOM is not told to move to FSDP); when the job's lines name none, nothing is known.
    if job.frameworks:
        out = [a for a in out if not a.frameworks or a.frameworks & job.frameworks]
    # Two rule actions, then the playbook (it carries the job's ranks and values), then the
    # rest; within that, what speaks to the most likely cause first.
    rules_first = out[: len(from_rules)]
    ordered = rules_first[:2] + out[len(from_rules) :] + rules_first[2:]
    return sorted(ordered, key=lambda a: not a.on_cause)


def _distinct(actions: Sequence[_Ranked], playbook: Playbook, said: Sequence[str]) -> list[str]:
    """The actions' texts without those that say again what an earlier one (here or under an
    earlier fix pattern) said: the same main command, most of the same words, or one idea of
    the playbook's `same_advice` list. Whether two wordings say one thing is read from their
    words by design: that is what the user reads twice."""
    kept: list[_Ranked] = []
    for action in actions:
        text = action.text
        if any(_similar(text, other, playbook) for other in said):
            continue
        same = next(
            (n for n, other in enumerate(kept) if _similar(text, other.text, playbook)), None
        )
        if same is None:
            kept.append(action)
        elif (
            action.located
            and not kept[same].located
            and playbook.keeps_located(text, kept[same].text)
        ):
            # the same step, but this wording says where (file:line): it takes the place
            kept[same] = action
    return [action.text for action in kept]


def _no_leading_or(actions: list[str]) -> list[str]:
    if actions and actions[0].startswith("Or "):
        # "Or ..." follows another step of its rule; listed first here, it follows nothing
        actions[0] = actions[0][3:4].upper() + actions[0][4:]
    return actions


def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z_][a-z0-9_]{3,}", text.lower())}


def _main_command(text: str) -> str:
    """An action's longest code span: the command it asks the user to run or write."""
    spans = re.findall(r"`([^`]+)`", text)
    return max(spans, key=len) if spans else ""


def _similar(a: str, b: str, playbook: Playbook | None = None) -> bool:
    """Two actions saying the same thing in other words: the same main command, most of the
    shorter one's words, or the same idea of the playbook's `same_advice` list."""
    command = _main_command(a)
    if len(command) >= 12 and command == _main_command(b):
        return True
    if playbook is not None and playbook.same_idea(a, b):
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
    led_by: str = "",
) -> str:
    """Why a fix is advised: the rule line that backs it, and the root cause it is the usual
    (or a common) fix for; for the fix classify put first (`led_by`), what it follows."""
    parts: list[str] = []
    if evidence > 0:
        quote = _evidence_for(fix, classification, rules_by_id)
        if quote is not None:
            text = _quoted(" ".join(quote.text.split()), rules_by_id[quote.why])
            title = rules_by_id[quote.why].title
            first = title.split(" ", 1)[0]
            # "NCCL cannot ...", "NaN in ...", "ZeRO-1/2 saw ..." keep their capitals: only a
            # word that is capitalised as a sentence starts is lowered
            if first[:1].isupper() and not any(c.isupper() for c in first[1:]):
                title = title[:1].lower() + title[1:]
            parts.append(f"{title} (“{text}”)")
    if led_by == "remedy":
        parts.append("the remedy the library's message itself prescribes")
    if cause is not None:
        rc, i = cause
        place = "the usual fix" if i == 0 else "a common fix"
        # the fix that leads for the cause the report states says so
        whose = "the most likely root cause," if led_by == "cause" else "root cause"
        # shown as the report's tables show it: a calibrated score is never 100%
        parts.append(f"{place} for {whose} {rc.id} {rc.name} ({min(rc.score, 0.99):.0%})")
    if not parts:
        parts.append(f"similar failures were resolved by: {tax.fix_patterns[fix].name}")
    return "; ".join(parts)


QUOTE_CHARS = 90


def _quoted(text: str, rule: knowledge.Rule) -> str:
    """At most QUOTE_CHARS of `text` around what `rule` matched in it: the line's start alone
    can be a command's arguments where the rule's words (`exits with return code = -11`)
    come last, and the quote would not show what the fix is advised for."""
    if len(text) <= QUOTE_CHARS:
        return text
    start = 0
    for pattern in rule.any + rule.all:
        found = pattern.search(text)
        if found is not None:
            start = found.start()
            break
    room = QUOTE_CHARS - 3
    if start <= room // 2:
        return text[:room] + "..."  # its words begin near the line's start: quoted from there
    shown = text[start : start + room - 3]
    return "..." + shown + ("..." if start + len(shown) < len(text) else "")


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
