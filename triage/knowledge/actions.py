"""Actions: what a rule or the playbook tells the user to do, and when it applies.

An action is one step given to the user. It is written as one template or as alternatives,
most specific first; each alternative is a text or a mapping with conditions:

    "Raise the timeout above {timeout_ms} ms."                      # one template
    - text: "Offload less to CPU in the ZeRO config."               # given only when the job
      when: {framework: deepspeed}                                  # runs on DeepSpeed
    - "Lower host memory per node: fewer DataLoader workers."       # for every other job

The first alternative that applies to the job is the one given: its conditions hold and every
`{fact}` it names is known. A `{fact}` is one the engine fills: the job's facts
(`JOB_FACT_NAMES`), a rule pattern's named groups, a finding rule's finding facts; the loader
reports any other name with its file and rule. A fact the job did not reveal may sit in a
parenthesised clause, `(segment {segment} needed {size} bytes)`: that clause is then left out
and the rest is given. A fact outside parentheses that is not known rules the alternative out;
when no alternative is left, the action is not given at all. So no action ever shows `<rank>`
or "rank the failing rank", and none assumes a framework, launcher or situation the job does
not have.

An alternative may also say which root causes it addresses (`for: [R21]`, taxonomy ids) when
that is narrower than what its rule concludes: recommend then leads with the advice for the
most likely cause.

Conditions (`when`), all of which must hold, test the job's `JobConditions` (built once per
job from correlate's facts, never from what a rule captured):

    framework: deepspeed | [deepspeed, fsdp]   # the job runs on one of them (rules/frameworks.yaml)
    launcher: torchrun | [deepspeed, slurm]    # it was started by one of them
    culprit: known | unknown                   # correlate named the rank that started it, or not
    hang: true | false                         # a hang was detected, or not
    missing: pyspy | [pyspy, flight_recorder]  # the job's inputs hold none of these kinds: an
                                               # action never asks for what is already there
    device: gpu | cpu                          # gpu: not for a job its evidence shows ran on
                                               # CPUs only (unknown counts as gpu); cpu: only
                                               # for such a job
    native: named | unnamed                    # the job's C++ exception names where in native
                                               # code it was thrown (a native stack would add
                                               # little), or nothing does
    setup: passed | stuck                      # stuck: no rank is known to have got past
                                               # process-group setup (advice about its
                                               # collectives has none to speak of)
"""

from __future__ import annotations

import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

import regex

from triage import regex_cache
from triage.model import AnalysisFacts

CONDITIONS = ("framework", "launcher", "culprit", "hang", "missing", "device", "native", "setup")
# What every action may name: the job's facts, and what the engines derive from the analysis
# for any action (the ranks it is about, one of them, its host, the hang's lagging ranks and
# process group, a timeout to suggest; triage.recommend.job_facts, triage.classify.rules)
JOB_FACT_NAMES = frozenset(f.name for f in fields(AnalysisFacts)) | {
    "ranks",
    "rank",
    "host",
    "lagging_ranks",
    "process_group",
    "timeout_suggest_min",
}
# the input kinds `missing` may name (triage.model.SourceKind values)
INPUT_KINDS = (
    "rank_log",
    "nccl",
    "pyspy",
    "flight_recorder",
    "elastic_error",
    "env_report",
    "text",
)

# The facts that name a place in the job's code (`user_frame`: `main (train.py:46)`): advice
# filled with one says where to look (`Filled.located`; the playbook's `located` ideas).
PLACE_FACTS = frozenset({"user_frame", "raising_user_frame"})

# A parenthesised clause that holds no other parentheses, with the space before it.
_CLAUSE = regex_cache.compile(r"\s?\([^()`]*\)")
_CODE = regex_cache.compile(r"(`+[^`]*`+)")
_SEVERAL = regex_cache.compile(r"\d\s*(?:,|-|and)\s*\d")  # `0, 1`, `2-3`
_CAUSE_ID = regex_cache.compile(r"R\d+")
_NAME = regex_cache.compile(r"[A-Za-z_]\w*")


@dataclass(frozen=True)
class JobConditions:
    """What `when` conditions test about one job, read by field."""

    frameworks: frozenset[str] = frozenset()  # what its lines name (rules/frameworks.yaml)
    launchers: frozenset[str] = frozenset()
    culprit_known: bool = False  # correlate named the rank that started it
    hang: bool = False  # a hang was detected
    input_kinds: frozenset[str] = frozenset()  # the kinds of input the user gave
    device: str | None = None  # "gpu" | "cpu" where the evidence says
    native_named: bool = False  # a C++ exception of the job names where it was thrown
    stuck_in_setup: bool = False  # no rank is known to have got past process-group setup

    @classmethod
    def of(cls, facts: AnalysisFacts) -> JobConditions:
        """The conditions of the job correlate described."""
        return cls(
            frameworks=frozenset(facts.frameworks),
            launchers=frozenset(facts.launchers),
            culprit_known=facts.culprit_rank is not None,
            hang=bool(facts.hang),
            input_kinds=frozenset(facts.input_kinds),
            device=facts.device,
            native_named=facts.native_origin is not None,
            stuck_in_setup=bool(facts.stuck_in_setup),
        )


@dataclass(frozen=True)
class Alternative:
    template: str
    needs: tuple[str, ...]  # every {fact} the template names
    when: Mapping[str, Any] = field(default_factory=dict)
    # `for: [R21]`: the root causes this advice addresses, when narrower than what its rule
    # concludes ("lower the learning rate" answers a numeric NaN, not a bad sample's NaN);
    # recommend leads with advice for the most likely cause
    causes: tuple[str, ...] = ()
    # the frameworks its wording names (rules/frameworks.yaml `named`), set when the knowledge
    # is loaded: advice that names only frameworks a job does not run on is not for that job
    frameworks: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Filled:
    """An action as given to one job: the alternative chosen and its text, filled."""

    alternative: Alternative
    text: str
    facts: frozenset[str]  # the `{facts}` its text was filled with

    @property
    def located(self) -> bool:
        """Does it say where in the job's code (filled with one of `PLACE_FACTS`)?"""
        return bool(self.facts & PLACE_FACTS)


@dataclass(frozen=True)
class Action:
    """One step, as alternatives most specific first."""

    alternatives: tuple[Alternative, ...]

    @property
    def template(self) -> str:
        """The most specific wording (what `triage rules list` and reviewers read)."""
        return self.alternatives[0].template

    def fill(self, facts: Mapping[str, Any], job: JobConditions) -> str | None:
        """The text for this job, filled with `facts`, or None when no alternative applies to
        it."""
        chosen = self.choose(facts, job)
        return chosen.text if chosen is not None else None

    def choose(self, facts: Mapping[str, Any], job: JobConditions) -> Filled | None:
        """The first alternative that applies to this job, filled with `facts`."""
        for alt in self.alternatives:
            if not applies(alt.when, job):
                continue
            filled = _fill(alt, facts)
            if filled is not None:
                return filled
        return None

    def naming(self, frameworks: Callable[[str], frozenset[str]]) -> Action:
        """This action with each alternative's `frameworks`: those `frameworks(wording)`
        finds in the words it writes itself (its `{facts}` left out: they are the job's)."""
        alternatives = tuple(
            replace(alt, frameworks=found) if (found := frameworks(wording(alt.template))) else alt
            for alt in self.alternatives
        )
        return self if alternatives == self.alternatives else Action(alternatives)


def wording(template: str) -> str:
    """A template's own words, its `{facts}` left out (`{{` read as `{`)."""
    if "{" not in template and "}" not in template:
        return template
    return "".join(text for text, _, _, _ in string.Formatter().parse(template))


def template_fields(template: str) -> list[str]:
    """The `{names}` a template fills (ValueError when it is malformed)."""
    return [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]


def known(facts: Mapping[str, Any], name: str) -> bool:
    """Is this fact something a sentence can name? A mapping or an object (a collective's
    record, a finding) is not: its repr would be quoted to the user."""
    value = facts.get(name)
    if value in (None, "", [], (), {}):
        return False
    if isinstance(value, (list, tuple, set, frozenset)):
        return all(isinstance(v, _SCALARS) for v in value)
    return isinstance(value, _SCALARS)


_SCALARS = (str, int, float)


def plain(value: Any) -> str:
    """How a fact reads inside a sentence: lists as `3, 5` (runs of ranks as `0-3`),
    everything else as str()."""
    if isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(value) if isinstance(value, (set, frozenset)) else list(value)
        consecutive = all(isinstance(v, int) for v in items) and items == list(
            range(items[0], items[0] + len(items))
        )
        if len(items) > 2 and consecutive:
            return f"{items[0]}-{items[-1]}"
        return ", ".join(str(v) for v in items)
    return str(value)


def _many(value: Any) -> bool:
    """Does the fact name more than one thing (`0, 1`, `2-3`, a list of two)?"""
    if isinstance(value, (list, tuple, set, frozenset)):
        return len(value) > 1
    return isinstance(value, str) and bool(_SEVERAL.search(value))


# "rank {ranks}" read with two ranks is "rank 0, 1": the noun agrees with the value.
_RANK_NOUN = regex_cache.compile(r"\b([Rr])ank \{(\w+)\}")


def _fill(alt: Alternative, facts: Mapping[str, Any]) -> Filled | None:
    missing = [n for n in alt.needs if not known(facts, n)]
    template = alt.template
    used = frozenset(alt.needs)
    if missing:
        template = _drop_clauses(template, missing)
        try:
            left = template_fields(template)
        except ValueError:
            return None
        if any(not known(facts, n) for n in left):
            return None
        used = frozenset(left)
    template = _RANK_NOUN.sub(
        lambda m: (
            f"{m.group(1)}anks {{{m.group(2)}}}" if _many(facts.get(m.group(2))) else m.group()
        ),
        template,
    )
    try:
        text = template.format_map({n: plain(facts[n]) for n in alt.needs if known(facts, n)})
    except (KeyError, ValueError, IndexError, AttributeError):
        return None
    return Filled(alt, text, used)


def _drop_clauses(template: str, missing: list[str]) -> str:
    """The template without the parenthesised prose clauses that name a missing fact.

    Parentheses inside a code span are code (`timedelta(minutes={m})`), never a clause: a
    missing fact there rules the alternative out.
    """
    marks = tuple("{" + name + "}" for name in missing)

    def keep(m: regex.Match[str]) -> str:
        return "" if any(mark in m.group() for mark in marks) else m.group()

    pieces = _CODE.split(template)  # odd indices: the code spans, kept as they are
    return "".join(p if i % 2 else _CLAUSE.sub(keep, p) for i, p in enumerate(pieces))


def applies(when: Mapping[str, Any], job: JobConditions) -> bool:
    """Do the conditions (checked on load: `check_when`) hold for this job?"""
    for key, value in when.items():
        if key == "framework" and not _any_of(value, job.frameworks):
            return False
        if key == "launcher" and not _any_of(value, job.launchers):
            return False
        if key == "culprit" and job.culprit_known != (value == "known"):
            return False
        if key == "hang" and job.hang != bool(value):
            return False
        if key == "missing" and _any_of(value, job.input_kinds):
            return False
        # unknown counts as a GPU job: most pasted errors say nothing of the device
        if key == "device" and (job.device == "cpu") != (value == "cpu"):
            return False
        if key == "native" and job.native_named != (value == "named"):
            return False
        if key == "setup" and job.stuck_in_setup != (value == "stuck"):
            return False
    return True


def _any_of(wanted: str | list[str], have: frozenset[str]) -> bool:
    wanted_set = {wanted} if isinstance(wanted, str) else set(wanted)
    return bool(wanted_set & have)


# --------------------------------------------------------------------------- reading


def parse_action(raw: Any, item: str, report: Callable[[str, str], None]) -> Action | None:
    """One action: a template, a {text, when} mapping, or a list of those (alternatives)."""
    options = raw if isinstance(raw, list) else [raw]
    if not options:
        report(item, "needs at least one template")
        return None
    alternatives = []
    for option in options:
        alt = _alternative(option, item, report)
        if alt is None:
            return None
        alternatives.append(alt)
    return Action(tuple(alternatives))


def _alternative(raw: Any, item: str, report: Callable[[str, str], None]) -> Alternative | None:
    when: Mapping[str, Any] = {}
    causes: tuple[str, ...] = ()
    if isinstance(raw, dict):
        bad = set(raw) - {"text", "when", "for"}
        if bad or not isinstance(raw.get("text"), str):
            report(item, "an alternative is a text or a mapping {text:, when: {...}, for: [...]}")
            return None
        when = raw.get("when") or {}
        if not check_when(when, item, report):
            return None
        wanted = raw.get("for") or []
        wanted = [wanted] if isinstance(wanted, str) else wanted
        if not isinstance(wanted, list) or not all(
            isinstance(c, str) and _CAUSE_ID.fullmatch(c) for c in wanted
        ):
            report(item, "`for` must be a root cause id or a list of them (R21, [R21, R27])")
            return None
        causes = tuple(wanted)
        raw = raw["text"]
    if not isinstance(raw, str) or not raw.strip():
        report(item, "an action template must be a non-empty text")
        return None
    try:
        needs = template_fields(raw)
    except ValueError as exc:
        report(item, f"malformed template ({exc}): {raw!r}")
        return None
    bad_names = [n for n in needs if not _NAME.fullmatch(n)]
    if bad_names:
        report(item, f"template uses {{{bad_names[0]}}}; only plain {{names}} are allowed")
        return None
    return Alternative(raw, tuple(dict.fromkeys(needs)), dict(when), causes)


def check_when(when: Any, item: str, report: Callable[[str, str], None]) -> bool:
    if not isinstance(when, dict):
        report(item, f"`when` must map conditions ({', '.join(CONDITIONS)}) to values")
        return False
    ok = True
    for key, value in when.items():
        if key not in CONDITIONS:
            report(item, f"unknown condition {key!r}; known: {', '.join(CONDITIONS)}")
            ok = False
        elif key in ("framework", "launcher"):
            names = [value] if isinstance(value, str) else value
            if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
                report(item, f"`{key}` must be a name or a list of names")
                ok = False
        elif key == "culprit" and value not in ("known", "unknown"):
            report(item, "`culprit` must be `known` or `unknown`")
            ok = False
        elif key == "hang" and not isinstance(value, bool):
            report(item, "`hang` must be true or false")
            ok = False
        elif key == "missing":
            kinds = [value] if isinstance(value, str) else value
            if not isinstance(kinds, list) or not kinds or set(kinds) - set(INPUT_KINDS):
                report(item, f"`missing` names input kinds: {', '.join(INPUT_KINDS)}")
                ok = False
        elif key == "device" and value not in ("gpu", "cpu"):
            report(item, "`device` must be `gpu` or `cpu`")
            ok = False
        elif key == "native" and value not in ("named", "unnamed"):
            report(item, "`native` must be `named` or `unnamed`")
            ok = False
        elif key == "setup" and value not in ("passed", "stuck"):
            report(item, "`setup` must be `passed` or `stuck`")
            ok = False
    return ok


def names_used(action: Action, condition: str) -> set[str]:
    """The framework or launcher names an action's conditions mention (checked on load)."""
    out: set[str] = set()
    for alt in action.alternatives:
        value = alt.when.get(condition)
        if value is not None:
            out.update([value] if isinstance(value, str) else value)
    return out
