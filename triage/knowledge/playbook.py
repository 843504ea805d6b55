"""The fix playbook (`kind: playbook`): per root cause, per fix pattern, one action.

    kind: playbook
    causes:
      R01:                                  # a root cause of the taxonomy
        F1:                                 # a fix pattern: alternatives, most specific first
          - "Pin `torch=={torch}` with its bundled NCCL {nccl} on every node ..."
          - text: "Pin the DeepSpeed release built for your torch ..."
            when: {framework: deepspeed}    # only for a job that runs on DeepSpeed
          - "Align versions: ..."           # names no fact and holds no condition
        F6: "Or adapt the code ..."         # one template
    fallback:                               # what a fix pattern means, when no cause says more
      F1: "Align versions: ..."
    same_advice:                            # one idea said in other words by several rules
      same-collectives:
        said: ['(?i)\\bsame collectives\\b']  # regexes: two actions that both match say it once
        examples: ["Make every rank issue the same collectives in the same order."]
        located: true   # optional: the wording that names a file:line is the one kept

An entry is an action of triage.knowledge.actions: the first alternative that applies to the
job (its conditions hold, its `{facts}` are known) is the one given, and none may be. The
shipped playbook needs a fallback for every fix pattern; a team's playbook adds alternatives
that come first.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import regex

from triage import taxonomy
from triage.knowledge.actions import (
    JOB_FACT_NAMES,
    Action,
    Filled,
    JobConditions,
    parse_action,
)
from triage.knowledge.problems import compile_alternation

KIND = "playbook"


@dataclass(frozen=True)
class Playbook:
    causes: Mapping[str, Mapping[str, Action]] = field(default_factory=dict)  # cause -> fix
    fallback: Mapping[str, str] = field(default_factory=dict)
    # idea -> how actions say it: two actions that both say one idea are one step for the user
    same_advice: Mapping[str, regex.Pattern[str]] = field(default_factory=dict)
    # ideas whose wording that names a file:line is kept over an earlier one that names none
    located_ideas: frozenset[str] = frozenset()

    def same_idea(self, a: str, b: str) -> bool:
        """Do these two actions give one piece of advice of `same_advice`?"""
        return any(p.search(a) and p.search(b) for p in self.same_advice.values())

    def keeps_located(self, a: str, b: str) -> bool:
        """Do these two actions say one idea whose located wording is the one to keep?"""
        return any(
            self.same_advice[idea].search(a) and self.same_advice[idea].search(b)
            for idea in self.located_ideas
            if idea in self.same_advice
        )

    def advice(
        self, cause: str, fix: str, facts: Mapping[str, Any], job: JobConditions
    ) -> str | None:
        """The action for (cause, fix) filled with this job's facts, or None when none of its
        alternatives applies to the job."""
        chosen = self.choose(cause, fix, facts, job)
        return chosen.text if chosen is not None else None

    def choose(
        self, cause: str, fix: str, facts: Mapping[str, Any], job: JobConditions
    ) -> Filled | None:
        """`advice`, with the alternative it was filled from and the facts it names."""
        action = self.causes.get(cause, {}).get(fix)
        return action.choose(facts, job) if action is not None else None

    def entries(self) -> int:
        """(cause, fix) pairs with advice."""
        return sum(len(per_fix) for per_fix in self.causes.values())


def build(body: Mapping[str, Any], report: Callable[[str, str], None], team: bool) -> Playbook:
    """One playbook file; every problem goes to `report(item, message)`."""
    tax = taxonomy.load()
    unknown = set(body) - {"kind", "causes", "fallback", "same_advice"}
    if unknown:
        report("", f"unknown key(s) {sorted(unknown)}; allowed: causes, fallback, same_advice")
    causes: dict[str, dict[str, Action]] = {}
    raw_causes = body.get("causes") or {}
    if not isinstance(raw_causes, dict):
        report("causes", "must map root-cause ids to {fix id: template(s)}")
        raw_causes = {}
    for cause, per_fix in raw_causes.items():
        item = f"cause {cause}"
        if cause not in tax.root_causes:
            report(item, f"unknown root cause id; known: {', '.join(tax.root_causes)}")
            continue
        if not isinstance(per_fix, dict):
            report(item, "must map fix pattern ids to a template or a list of alternatives")
            continue
        for fix, raw in per_fix.items():
            action = parse_action(raw, f"{item} / {fix}", report)
            if fix not in tax.fix_patterns:
                report(
                    f"{item} / {fix}",
                    f"unknown fix pattern id; known: {', '.join(tax.fix_patterns)}",
                )
            elif action is not None and _names_known(action, f"{item} / {fix}", report):
                causes.setdefault(cause, {})[fix] = action
    fallback: dict[str, str] = {}
    raw_fallback = body.get("fallback") or {}
    if not isinstance(raw_fallback, dict):
        report("fallback", "must map fix pattern ids to one template")
        raw_fallback = {}
    for fix, template in raw_fallback.items():
        if fix not in tax.fix_patterns:
            report(f"fallback {fix}", "unknown fix pattern id")
        elif not isinstance(template, str) or "{" in template.replace("{{", ""):
            # shown when nothing about the job is known: it may name no fact
            report(f"fallback {fix}", "must be one template that names no {fact}")
        else:
            fallback[fix] = template
    if not team:
        missing = [f for f in tax.fix_patterns if f not in fallback]
        if missing:
            report(
                "fallback", f"needs an entry for every fix pattern; missing {', '.join(missing)}"
            )
    return Playbook(
        causes=causes,
        fallback=fallback,
        same_advice=_same_advice(body.get("same_advice"), report),
        located_ideas=frozenset(
            str(idea)
            for idea, spec in (body.get("same_advice") or {}).items()
            if isinstance(spec, dict) and spec.get("located") is True
        ),
    )


def _names_known(action: Action, item: str, report: Callable[[str, str], None]) -> bool:
    """Playbook advice is filled with the job's facts alone: any other `{name}` is a problem."""
    unknown = sorted({n for alt in action.alternatives for n in alt.needs} - JOB_FACT_NAMES)
    if unknown:
        report(item, f"names {{{unknown[0]}}}, which is no job fact (see AnalysisFacts)")
    return not unknown


def _same_advice(raw: Any, report: Callable[[str, str], None]) -> dict[str, regex.Pattern[str]]:
    """`same_advice: {idea: {said: [regex, ...], examples: [action, ...]}}`; every example
    must say the idea, and an idea needs two examples (two wordings of it) or more."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        report("same_advice", "must map idea names to {said: [regexes], examples: [actions]}")
        return {}
    out: dict[str, regex.Pattern[str]] = {}
    for idea, spec in raw.items():
        item = f"same_advice {idea}"
        if not isinstance(spec, dict) or set(spec) - {"said", "examples", "located"}:
            report(item, "must be a mapping of `said` (regexes), `examples` (actions), `located`")
            continue
        said, examples = spec.get("said"), spec.get("examples")
        if not _texts(said) or not _texts(examples) or len(examples) < 2:
            report(item, "needs `said` (regexes) and two or more `examples` that say the idea")
            continue
        pattern = compile_alternation(said, f"{item} said", report)
        if pattern is None:
            continue
        for example in examples:
            if not pattern.search(example):
                report(item, f"example does not say the idea: {example!r}")
        out[str(idea)] = pattern
    return out


def _texts(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, str) for v in value)


def merge(playbooks: Sequence[Playbook]) -> Playbook:
    """Shipped first, then each team's: a team's alternatives for a (cause, fix) go first, and
    its fallback text replaces the shipped one."""
    causes: dict[str, dict[str, Action]] = {}
    fallback: dict[str, str] = {}
    same: dict[str, regex.Pattern[str]] = {}
    located: set[str] = set()
    for book in playbooks:
        same.update(book.same_advice)
        located |= book.located_ideas
        for cause, per_fix in book.causes.items():
            for fix, action in per_fix.items():
                mine = causes.setdefault(cause, {})
                before = mine[fix].alternatives if fix in mine else ()
                mine[fix] = Action(action.alternatives + before)
        fallback.update(book.fallback)
    return Playbook(
        causes=causes, fallback=fallback, same_advice=same, located_ideas=frozenset(located)
    )
