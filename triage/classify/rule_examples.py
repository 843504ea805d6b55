"""A rule's examples read the ways triage reads a user's evidence: as a file, inside a big log,
as a paste, and (for a finding example) as correlate's conclusion. The shipped rules' examples
are the tests'; a team folder's (`--rules DIR`) run once per load, and a failing one is named
with its file and rule."""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

from triage import knowledge
from triage.classify.rules import RuleSet
from triage.knowledge import Problem
from triage.knowledge.finding_examples import finding_example
from triage.knowledge.rules import Rule, RuleError
from triage.model import Analysis, ParsedSource, SourceKind


def example_readings(
    rule: Rule, example: object, kb: knowledge.Knowledge, workdir: Path
) -> dict[str, bool]:
    """Whether `rule` hits one of its examples, per way triage reads a user's evidence (the
    real parser and correlate of `kb`, never a bare text event; files go under `workdir`).

    A text is read as a file of its own (ingest sniffs it: a py-spy dump is read as one),
    buried in a big log of healthy progress output (the marker scan must find its lines: the
    needles), and as a paste (`triage explain`); a `paste: true` example (a trimmed fragment,
    lines that mean something only together) as a paste only. A finding example is
    correlate's conclusion, matched as one.
    """
    if isinstance(example, dict) and example.get("finding"):
        return {"finding": _example_hit(rule, [], kb, finding_example(example))}
    from triage import parsers

    text = example if isinstance(example, str) else example["text"]  # type: ignore[index]
    if isinstance(example, dict) and example.get("paste"):
        return {"as a paste": _example_hit(rule, [parsers.parse_text(text, kb=kb)], kb)}
    from triage.parsers.rank_log import SCAN_ALL_BELOW

    out: dict[str, bool] = {}
    alone = workdir / "alone.log"
    alone.write_text(text + "\n", encoding="utf-8")
    parsed = _read_file(alone, kb)
    out["as a file"] = _example_hit(rule, parsed, kb)
    if parsed and parsed[0].source.kind in (SourceKind.RANK_LOG, SourceKind.TEXT):
        filler = "\n".join(kb.templates.healthy) + "\n"
        healthy = filler * (SCAN_ALL_BELOW // len(filler) + 1)
        big = workdir / "big.log"
        big.write_text(healthy + text + "\n" + healthy, encoding="utf-8")
        out["in a big log"] = _example_hit(rule, _read_file(big, kb), kb)
    out["as a paste"] = _example_hit(rule, [parsers.parse_text(text, kb=kb)], kb)
    return out


def example_problems(rules: Sequence[Rule], kb: knowledge.Knowledge) -> list[Problem]:
    """Every example of these rules that reads wrong one way or more, with its file and rule."""
    found: list[Problem] = []
    with tempfile.TemporaryDirectory(prefix="triage-examples-") as tmp:
        for rule in rules:
            for should, examples in ((True, rule.examples_match), (False, rule.examples_no_match)):
                for example in examples:
                    readings = example_readings(rule, example, kb, Path(tmp))
                    wrong = [way for way, hit in readings.items() if hit is not should]
                    if wrong:
                        verb = "should match" if should else "must not match"
                        found.append(
                            Problem(
                                rule.file,
                                f"rule {rule.id!r}",
                                f"{verb} its example {example!r} read {', '.join(wrong)}",
                            )
                        )
            found.extend(remedy_problems(rule, kb))
    return found


def remedy_problems(rule: Rule, kb: knowledge.Knowledge) -> list[Problem]:
    """A rule's `remedy` is shown by its examples: one it matches (read as a paste) prints the
    remedy, so the hit prescribes the remedy's fix."""
    if rule.remedy is None:
        return []
    from triage import parsers

    for example in rule.examples_match:
        if isinstance(example, dict) and example.get("finding"):
            continue
        text = example if isinstance(example, str) else example["text"]
        if _prescribes(rule, [parsers.parse_text(text, kb=kb)], kb) == rule.remedy.fix:
            return []
    return [
        Problem(
            rule.file,
            f"rule {rule.id!r}",
            "remedy.says matches none of its match examples (one must print the remedy)",
        )
    ]


def check_team_examples(kb: knowledge.Knowledge) -> None:
    """Run the examples of the team folders' rules (`--rules DIR`), once per load: a RuleError
    names each failing example's file and rule. The shipped rules' examples are the tests'."""
    problems = _team_example_problems(kb)
    if problems:
        raise RuleError(problems)


@lru_cache(maxsize=8)  # a Knowledge hashes by its identity: once per load
def _team_example_problems(kb: knowledge.Knowledge) -> tuple[Problem, ...]:
    teams = kb.folders[1:]
    if not teams:
        return ()
    theirs = [r for r in kb.rules if any(Path(r.file).is_relative_to(d) for d in teams)]
    return tuple(example_problems(theirs, kb))


def _read_file(path: Path, kb: knowledge.Knowledge) -> list[ParsedSource]:
    """One file read as `triage PATH` reads it: sniffed by ingest, parsed with `kb`."""
    from triage import budget, ingest, parsers

    with budget.job():
        return [parsers.parse(source, kb=kb) for source in ingest.discover([str(path)])]


def _prescribes(rule: Rule, parsed: list[ParsedSource], kb: knowledge.Knowledge) -> str | None:
    from triage.analysis import correlate
    from triage.classify import prepare

    prep = prepare(
        parsed, correlate(parsed, kb), ruleset=RuleSet(rules=(rule,), frames=kb.frames), kb=kb
    )
    return next((h.prescribes for h in prep.hits if h.prescribes is not None), None)


def _example_hit(
    rule: Rule,
    parsed: list[ParsedSource],
    kb: knowledge.Knowledge,
    analysis: Analysis | None = None,
) -> bool:
    from triage.analysis import correlate
    from triage.classify import prepare

    found = analysis if analysis is not None else correlate(parsed, kb)
    prep = prepare(parsed, found, ruleset=RuleSet(rules=(rule,), frames=kb.frames), kb=kb)
    return any(h.rule_id == rule.id for h in prep.hits)
