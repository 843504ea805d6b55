"""The fix playbook (`kind: playbook`): per root cause, per fix pattern, action templates.

    kind: playbook
    causes:
      R01:                                  # a root cause of the taxonomy
        F1:                                 # a fix pattern: alternatives, most specific first
          - "Pin `torch=={torch}` with its bundled NCCL {nccl} on every node ..."
          - "Align versions: ..."           # the last needs no fact
        F6: "Or adapt the code ..."         # one template
    fallback:                               # what a fix pattern means, when no cause says more
      F1: "Align versions: ..."
    stand_ins:                              # how a fact the job did not reveal reads
      rank: the failing rank

The first alternative whose `{facts}` are all known is the one given. The shipped playbook
needs a fallback for every fix pattern; a team's playbook adds alternatives that come first.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from triage import taxonomy
from triage.knowledge.rules import template_fields

KIND = "playbook"


@dataclass(frozen=True)
class Playbook:
    # cause -> fix -> alternatives (template, the facts it needs), most specific first
    causes: Mapping[str, Mapping[str, tuple[tuple[str, tuple[str, ...]], ...]]] = field(
        default_factory=dict
    )
    fallback: Mapping[str, str] = field(default_factory=dict)
    stand_ins: Mapping[str, str] = field(default_factory=dict)  # fact -> readable stand-in

    def advice(self, cause: str, fix: str, facts: Mapping[str, Any]) -> str | None:
        """The first alternative for (cause, fix) whose facts are all known, or None."""
        for template, needs in self.causes.get(cause, {}).get(fix, ()):
            if all(facts.get(k) not in (None, "", []) for k in needs):
                return template
        return None

    def entries(self) -> int:
        """(cause, fix) pairs with advice."""
        return sum(len(per_fix) for per_fix in self.causes.values())


def build(body: Mapping[str, Any], report: Callable[[str, str], None], team: bool) -> Playbook:
    """One playbook file; every problem goes to `report(item, message)`."""
    tax = taxonomy.load()
    unknown = set(body) - {"kind", "causes", "fallback", "stand_ins"}
    if unknown:
        report("", f"unknown key(s) {sorted(unknown)}; allowed: causes, fallback, stand_ins")
    causes: dict[str, dict[str, tuple[tuple[str, tuple[str, ...]], ...]]] = {}
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
            options = _options(raw, f"{item} / {fix}", report)
            if fix not in tax.fix_patterns:
                report(
                    f"{item} / {fix}",
                    f"unknown fix pattern id; known: {', '.join(tax.fix_patterns)}",
                )
            elif options:
                causes.setdefault(cause, {})[fix] = options
    fallback: dict[str, str] = {}
    raw_fallback = body.get("fallback") or {}
    if not isinstance(raw_fallback, dict):
        report("fallback", "must map fix pattern ids to one template")
        raw_fallback = {}
    for fix, template in raw_fallback.items():
        if fix not in tax.fix_patterns:
            report(f"fallback {fix}", "unknown fix pattern id")
        elif not isinstance(template, str) or template_fields(template):
            # shown when nothing about the job is known: it may name no fact
            report(f"fallback {fix}", "must be one template that names no {fact}")
        else:
            fallback[fix] = template
    stand_ins = body.get("stand_ins") or {}
    if not isinstance(stand_ins, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and v for k, v in stand_ins.items()
    ):
        report("stand_ins", "must map fact names to the words that stand in for them")
        stand_ins = {}
    if not team:
        missing = [f for f in tax.fix_patterns if f not in fallback]
        if missing:
            report(
                "fallback", f"needs an entry for every fix pattern; missing {', '.join(missing)}"
            )
    return Playbook(causes=causes, fallback=fallback, stand_ins=dict(stand_ins))


def _options(
    raw: Any, item: str, report: Callable[[str, str], None]
) -> tuple[tuple[str, tuple[str, ...]], ...]:
    templates = [raw] if isinstance(raw, str) else raw
    if (
        not isinstance(templates, list)
        or not templates
        or not all(isinstance(t, str) for t in templates)
    ):
        report(item, "must be a template or a non-empty list of templates")
        return ()
    out = []
    for template in templates:
        try:
            needs = template_fields(template)
        except ValueError as exc:
            report(item, f"malformed template ({exc}): {template!r}")
            return ()
        bad = [f for f in needs if not f.isidentifier()]
        if bad:
            report(item, f"template uses {{{bad[0]}}}; only plain {{names}} are allowed")
            return ()
        out.append((template, tuple(dict.fromkeys(needs))))
    if out[-1][1]:
        # when the job revealed none of the facts, advice must still be given
        report(item, "the last alternative must name no {fact}")
    return tuple(out)


def merge(playbooks: Sequence[Playbook]) -> Playbook:
    """Shipped first, then each team's: a team's alternatives for a (cause, fix) go first, and
    its fallback text replaces the shipped one."""
    causes: dict[str, dict[str, tuple[tuple[str, tuple[str, ...]], ...]]] = {}
    fallback: dict[str, str] = {}
    stand_ins: dict[str, str] = {}
    for book in playbooks:
        for cause, per_fix in book.causes.items():
            for fix, options in per_fix.items():
                mine = causes.setdefault(cause, {})
                mine[fix] = tuple(options) + mine.get(fix, ())
        fallback.update(book.fallback)
        stand_ins.update(book.stand_ins)
    return Playbook(causes=causes, fallback=fallback, stand_ins=stand_ins)
