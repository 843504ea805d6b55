"""The knowledge base: everything triage knows about failures, kept as data.

Two folders at the top of the repository ship inside the package (setup.py maps them to the
data packages `triage.rules` and `triage.models`) and are read only through this package:

- `rules/`, written by hand: the rules (`*.yaml` lists of rules) and one file of each other
  kind, named by its `kind:` key (see `KINDS`).
- `models/`, fitted or gathered: the reference corpus (`models/corpus/`), the neighbour index
  and the calibration (read by `triage.classify`; see `locate.models_dir`), and the message
  atlas (`models/atlas/`, `triage.knowledge.atlas`: `Knowledge.atlas` reads it on first use).

`load()` reads every file of `rules/` (or `$TRIAGE_RULES_DIR`) and of each team folder
(`--rules DIR`), checks it against the schema of its kind and reports every problem at once,
each with its file and item (`KnowledgeError.problems`). A run loads it once and hands it to
every stage (the parsers derive their scan from it); nothing reads it at import. A team
folder's rule examples are run by the rule engine (`triage.classify.rules`) when it loads.
A team folder may add rules, playbook entries and collect-next advice; what the parsers and
correlate read besides the rules (line templates, formats, masks, cascade families) comes from
the shipped folder only, which must hold each kind once and at least one rule.

Engines read the knowledge, they never hold it: a new mechanism is a YAML entry with its
examples, not an edit in three modules.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from triage import diskcache, taxonomy
from triage.knowledge import (
    actions,
    advice,
    agreement,
    atlas,
    cascade,
    culprit,
    documents,
    exits,
    frames,
    frameworks,
    log_shapes,
    masks,
    outcome,
    places,
    playbook,
    routine,
    templates,
    topology,
)
from triage.knowledge.advice import CollectNext, Situation
from triage.knowledge.agreement import AgreedSettings
from triage.knowledge.atlas import Atlas, AtlasLabels
from triage.knowledge.cascade import Cascade
from triage.knowledge.culprit import CulpritTable
from triage.knowledge.exits import ExitCodes
from triage.knowledge.frames import LibraryFrames
from triage.knowledge.frameworks import Frameworks
from triage.knowledge.locate import (
    MODELS_ENV,
    RULES_ENV,
    MissingKnowledge,
    models_dir,
    package_dir,
    rules_dir,
)
from triage.knowledge.log_shapes import LogShapes
from triage.knowledge.masks import Masks
from triage.knowledge.outcome import Ends
from triage.knowledge.places import Places
from triage.knowledge.playbook import Playbook
from triage.knowledge.problems import KnowledgeError, Problem, Problems
from triage.knowledge.routine import Routine
from triage.knowledge.rules import Rule, RuleError, build_rules
from triage.knowledge.templates import Templates
from triage.knowledge.topology import Topology

__all__ = [
    "MODELS_ENV",
    "RULES_ENV",
    "Knowledge",
    "KnowledgeError",
    "MissingKnowledge",
    "Problem",
    "Rule",
    "RuleError",
    "Situation",
    "load",
    "models_dir",
    "package_dir",
    "problems",
    "rules_dir",
    "shipped",
]

Report = Callable[[str, str], None]  # (item, message) of one file


@dataclass(frozen=True)
class Kind:
    """One kind of knowledge file besides rules: its schema and how files of it combine."""

    build: Callable[[Any, Report, bool], Any]  # (body, report, from a team folder) -> value
    merge: Callable[[Sequence[Any]], Any]  # the shipped file's value first, then the teams'
    team: bool  # a team folder may hold one


KINDS: dict[str, Kind] = {
    playbook.KIND: Kind(playbook.build, playbook.merge, team=True),
    cascade.KIND: Kind(cascade.build, cascade.merge, team=False),
    advice.KIND: Kind(advice.build, advice.merge, team=True),
    masks.KIND: Kind(masks.build, masks.merge, team=False),
    templates.KIND: Kind(templates.build, templates.merge, team=False),
    frameworks.KIND: Kind(frameworks.build, frameworks.merge, team=False),
    routine.KIND: Kind(routine.build, routine.merge, team=False),
    outcome.KIND: Kind(outcome.build, outcome.merge, team=False),
    culprit.KIND: Kind(culprit.build, culprit.merge, team=False),
    exits.KIND: Kind(exits.build, exits.merge, team=False),
    agreement.KIND: Kind(agreement.build, agreement.merge, team=False),
    frames.KIND: Kind(frames.build, frames.merge, team=False),
    topology.KIND: Kind(topology.build, topology.merge, team=False),
    atlas.KIND: Kind(atlas.build, atlas.merge, team=False),
    places.KIND: Kind(places.build, places.merge, team=False),
    log_shapes.KIND: Kind(log_shapes.build, log_shapes.merge, team=False),
}


@dataclass(frozen=True, eq=False)  # compared and hashed by identity: one per load
class Knowledge:
    """Everything loaded from the shipped folder and the team folders, validated."""

    folders: tuple[Path, ...]
    rules: tuple[Rule, ...]
    playbook: Playbook
    cascade: Cascade
    collect_next: CollectNext
    masks: Masks
    templates: Templates
    frameworks: Frameworks
    routine: Routine  # what healthy jobs print
    ends: Ends  # how jobs end
    culprit: CulpritTable  # the culprit vote's signals and weights
    exits: ExitCodes  # what exit statuses mean
    agreement: AgreedSettings  # the settings every rank must agree on
    frames: LibraryFrames  # which stack frames are library code
    topology: Topology  # a launcher's argv and a rendezvous's wait for nodes
    atlas_labels: AtlasLabels  # how the atlas's templates are labelled (by the harvester)
    atlas: Atlas  # the libraries' own messages (models/atlas/), read on first use
    places: Places  # where a traceback ran: frame patterns -> place and stage
    log_shapes: LogShapes  # the message shapes the log parser reads facts from


def shipped() -> Knowledge:
    """The shipped knowledge alone: what a stage reads when it is handed no Knowledge (a run
    loads one, with its team folders, and hands it to every stage)."""
    return load()


def load(extra_dirs: Sequence[str | os.PathLike[str]] = ()) -> Knowledge:
    """The shipped knowledge plus every team folder, validated (cached until a file changes).

    Raises KnowledgeError listing every problem (RuleError when a team folder is at fault: the
    CLI tells its author, exit code 2).
    Regexes of the shipped rules compile on first use (start-up time); `problems()` compiles
    them all.
    """
    extra = tuple(Path(d) for d in extra_dirs)
    missing = [d for d in extra if not d.is_dir()]
    if missing:
        # a typo in --rules must not silently drop the team's rules
        raise RuleError(Problem(str(d), "", "rules folder not found") for d in missing)
    key = tuple(_folder_signature(d) for d in (rules_dir(), *extra))
    return _load_cached(key, not os.environ.get(RULES_ENV))


def problems(extra_dirs: Sequence[str | os.PathLike[str]] = ()) -> list[Problem]:
    """Every problem of the shipped knowledge, the team folders, the reference corpus and the
    taxonomy notes, every regex compiled: the one validator (the tests run it)."""
    from triage.knowledge import corpus

    found: list[Problem] = []
    try:
        key = tuple(_folder_signature(Path(d)) for d in (rules_dir(), *extra_dirs))
        _build(key, lazy=False)
    except KnowledgeError as exc:
        found.extend(exc.problems)
    found.extend(corpus.problems())
    try:  # the harvested atlas of the libraries' messages, every row checked
        atlas.Atlas(models_dir() / "atlas").templates  # noqa: B018
    except atlas.AtlasError as exc:
        found.extend(exc.problems)
    from triage.knowledge import fusion_settings

    try:  # the fusion's weights and thresholds (models/fusion.json), every setting checked
        fusion_settings.shipped()
    except fusion_settings.FusionSettingsError as exc:
        found.extend(exc.problems)
    from triage import taxonomy

    try:  # the label-disambiguation notes are knowledge about the taxonomy's ids too
        taxonomy.notes()
    except taxonomy.NotesError as exc:
        found.append(Problem("triage/taxonomy_notes.yaml", "", str(exc)))
    return found


_Signature = tuple[str, tuple[tuple[str, float], ...]]


def _folder_signature(folder: Path) -> _Signature:
    files = documents.knowledge_files(folder)
    return (str(folder), tuple((str(f), f.stat().st_mtime) for f in files))


@lru_cache(maxsize=8)
def _load_cached(key: tuple[_Signature, ...], lazy_shipped: bool) -> Knowledge:
    from triage.knowledge import stored

    def fingerprint() -> str:
        folders = [(Path(folder), [Path(f) for f, _ in files]) for folder, files in key]
        return stored.fingerprint(folders, models_dir(), lazy_shipped)

    # built once, then unpickled by the runs after it while no file it depends on changed
    return stored.load_or_build(fingerprint, Knowledge, lambda: _build(key, lazy=lazy_shipped))


def _build(key: tuple[_Signature, ...], lazy: bool) -> Knowledge:
    try:
        return _build_uncached(key, lazy)
    finally:
        diskcache.save()  # what start-up derived, for the next run (`triage.diskcache`)


def _build_uncached(key: tuple[_Signature, ...], lazy: bool) -> Knowledge:
    found = Problems()
    rules: list[Rule] = []
    defined: dict[str, str] = {}
    parts: dict[str, list[Any]] = {kind: [] for kind in KINDS}
    folders = tuple(Path(folder) for folder, _ in key)
    kinds = frozenset({documents.RULES, *KINDS})
    for position, (folder, files) in enumerate(key):
        team = position > 0
        shipped_kinds: dict[str, Path] = {}
        for file, _mtime in files:
            path = Path(file)
            doc = documents.read(path, kinds, found)
            if doc is None:
                continue
            report = _reporter(found, path)
            if doc.kind != documents.RULES:
                spec = KINDS[doc.kind]
                if team and not spec.team:
                    report("", f"a team folder cannot hold `kind: {doc.kind}` (shipped only)")
                    continue
                if not team and doc.kind in shipped_kinds:
                    report("", f"`kind: {doc.kind}` is already in {shipped_kinds[doc.kind].name}")
                    continue
                shipped_kinds[doc.kind] = path
                parts[doc.kind].append(spec.build(doc.body, report, team))
                continue
            # The shipped rules compile their regexes on first use: ~450 patterns cost
            # ~0.3 s of `triage explain`'s start-up, and the keyword prefilter skips most.
            # A team's folder is checked eagerly: its author wants every problem now.
            for rule in build_rules(doc.body, path, lazy and not team, report):
                if rule.id in defined:
                    found.add(
                        path, f"rule {rule.id!r}", f"is already defined in {defined[rule.id]}"
                    )
                    continue
                defined[rule.id] = file
                rules.append(rule)
        if not team:
            if not defined:
                found.add(folder, "", "holds no rules: the install is broken (reinstall triage)")
            for kind in KINDS:
                if kind not in shipped_kinds:
                    found.add(folder, "", f"holds no `kind: {kind}` file")
    # A team folder's problems are its author's to fix (the CLI says so and exits 2); the
    # shipped folder's mean a broken install.
    merged = {kind: KINDS[kind].merge(values) for kind, values in parts.items()}
    rules = _mark_cascade(rules, merged[cascade.KIND], found)
    rules, merged[playbook.KIND], merged[places.KIND] = _name_frameworks(
        rules, merged[playbook.KIND], merged[places.KIND], merged[frameworks.KIND]
    )
    _check_conditions(rules, merged[playbook.KIND], merged[frameworks.KIND], found)
    team_folders = {str(f) for f in folders[1:]}
    theirs = any(
        str(Path(p.file).parent) in team_folders or p.file in team_folders for p in found.found
    )
    found.raise_if_any(RuleError if theirs else KnowledgeError)
    return Knowledge(
        folders=folders,
        rules=tuple(rules),
        playbook=merged[playbook.KIND],
        cascade=merged[cascade.KIND],
        collect_next=merged[advice.KIND],
        masks=merged[masks.KIND],
        templates=merged[templates.KIND],
        frameworks=merged[frameworks.KIND],
        routine=merged[routine.KIND],
        ends=merged[outcome.KIND],
        culprit=merged[culprit.KIND],
        exits=merged[exits.KIND],
        agreement=merged[agreement.KIND],
        frames=merged[frames.KIND],
        topology=merged[topology.KIND],
        atlas_labels=merged[atlas.KIND],
        atlas=Atlas(models_dir() / "atlas"),
        places=merged[places.KIND],
        log_shapes=merged[log_shapes.KIND],
    )


def _mark_cascade(rules: list[Rule], facts: Cascade, found: Problems) -> list[Rule]:
    """A rule is a cascade rule when the cascade file lists it in a family."""
    known = {rule.id for rule in rules}
    for family in facts.families:
        for rule_id in family.rules:
            if rule_id not in known:
                found.add(rules_dir(), f"family {family.name}", f"lists unknown rule {rule_id!r}")
    for rule in rules:
        for other in sorted(rule.overrides - known):
            found.add(rule.file, f"rule {rule.id!r}", f"overrides unknown rule {other!r}")
    return [replace(r, cascade=True) if r.id in facts.rules else r for r in rules]


def _name_frameworks(
    rules: list[Rule], book: Playbook, place_set: Places, known: Frameworks
) -> tuple[list[Rule], Playbook, Places]:
    """Every action with the frameworks its wording names (`named` of rules/frameworks.yaml),
    found once here: recommend leaves out advice that names only frameworks the job does not
    run on, reading these instead of the text it gives."""

    def names(text: str) -> frozenset[str]:
        return frozenset(known.named_in(text))

    def named(rule: Rule) -> Rule:
        acts = {fix: action.naming(names) for fix, action in rule.actions.items()}
        same = all(acts[fix] is action for fix, action in rule.actions.items())
        return rule if same else replace(rule, actions=acts)

    causes = {
        cause: {fix: action.naming(names) for fix, action in per_fix.items()}
        for cause, per_fix in book.causes.items()
    }
    place_list = tuple(
        replace(
            place,
            action_frameworks={fix: names(text) for fix, text in place.actions.items()},
        )
        for place in place_set.places
    )
    return (
        [named(rule) for rule in rules],
        replace(book, causes=causes),
        replace(place_set, places=place_list),
    )


def _check_conditions(
    rules: list[Rule], book: Playbook, known: Frameworks, found: Problems
) -> None:
    """Every framework or launcher an action's `when` names is one the frameworks file knows:
    a misspelt name would silently keep the action from ever being given."""
    names = {
        "framework": {m.id for m in known.frameworks},
        "launcher": {m.id for m in known.launchers},
    }
    located: list[tuple[str, str, actions.Action]] = [
        (rule.file, f"rule {rule.id!r}", action)
        for rule in rules
        for action in rule.actions.values()
    ]
    located += [
        (str(rules_dir()), f"playbook {cause} / {fix}", action)
        for cause, per_fix in book.causes.items()
        for fix, action in per_fix.items()
    ]
    causes = set(taxonomy.load().root_causes)
    for file, item, action in located:
        for alt in action.alternatives:
            for cause in alt.causes:
                if cause not in causes:
                    found.add(file, item, f"`for` names unknown root cause {cause!r}")
        for condition, allowed in names.items():
            for name in sorted(actions.names_used(action, condition) - allowed):
                found.add(
                    file, item, f"`when: {condition}` names {name!r}; known: {sorted(allowed)}"
                )


def _reporter(found: Problems, path: Path) -> Callable[[str, str], None]:
    def report(item: str, message: str) -> None:
        found.add(path, item, message)

    return report
