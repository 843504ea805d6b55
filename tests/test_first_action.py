"""The first action is the one that works, in every report a user reads.

The user reads the verdict and the first action; `--brief`, the bot's comment and chat read
nothing else. Every shipped bundle states the first action it must get (`first_action` in its
`expected.json`: the fix pattern and a phrase the action contains), and so does every pasted
error of `first_action_pastes.yaml`, each from a public thread whose fix the thread
established (reference corpus cases, never the held-out ones). Each is checked in the JSON,
the terminal text, Markdown and HTML reports, and in both brief forms.
"""

from __future__ import annotations

import html
import json
import re
from functools import cache
from pathlib import Path

import pytest
import yaml

from triage import knowledge, pipeline, taxonomy
from triage.knowledge.actions import JobConditions
from triage.model import Analysis, Classification, Diagnosis, ScoredLabel
from triage.recommend import recommend
from triage.report import render

ROOT = Path(__file__).resolve().parent.parent
BUNDLES = sorted(p.parent for p in (ROOT / "corpus_samples").glob("*/expected.json"))
PASTES_FILE = Path(__file__).resolve().parent / "first_action_pastes.yaml"
FORMATS = ("json", "text", "md", "html", "brief-text", "brief-md")


def _pastes() -> list[dict]:
    return yaml.safe_load(PASTES_FILE.read_text(encoding="utf-8"))["cases"]


PASTES = _pastes()


@cache
def _bundle(name: str) -> Diagnosis:
    return pipeline.diagnose([str(ROOT / "corpus_samples" / name / "bundle")])


@cache
def _pasted() -> dict[str, Diagnosis]:
    # one batch: the similarity model loads once for all of them
    diagnoses = pipeline.explain_many([c["text"] for c in PASTES])
    return {c["id"]: d for c, d in zip(PASTES, diagnoses, strict=True)}


def _flat(text: str) -> str:
    """One line, single spaces: the terminal wraps long actions and indents the rest."""
    return " ".join(text.split())


def first_action(d: Diagnosis, fmt: str) -> tuple[str, str]:
    """(fix pattern id, first action) as the rendered report shows them first."""
    brief = fmt.startswith("brief-")
    out = render(d, fmt.removeprefix("brief-"), brief)
    if fmt == "json":
        fix = json.loads(out)["fix_patterns"][0]
        return fix["id"], fix["actions"][0]
    if fmt == "brief-text":
        m = re.search(r"^fix:\s+(.*?)\((F\d+)\s[^()]*\d+%\)\s*(?:^\S|\Z)", out, re.S | re.M)
        assert m, out
        return m.group(2), _flat(m.group(1))
    if fmt == "brief-md":
        m = re.search(r"^- \*\*fix:\*\* (.*) \((F\d+) [^()]*\d+%\)$", out, re.M)
        assert m, out
        return m.group(2), m.group(1)
    if fmt == "text":
        m = re.search(
            r"^\s+1\. (F\d+) .*?\n\s+- (.*?)(?=\n\s+(?:- |\+ |why:|\d+\. )|\n\n)", out, re.S | re.M
        )
        assert m, out
        return m.group(1), _flat(m.group(2))
    if fmt == "md":
        m = re.search(r"^1\. \*\*(F\d+) .*?\n\s+- (.*)$", out, re.M)
        assert m, out
        return m.group(1), m.group(2)
    m = re.search(
        r'<ol class="fixes">\s*<li><h3><span class="mono">(F\d+)</span>.*?<ul><li>(.*?)<button',
        out,
        re.S,
    )
    assert m, "no fix list in the HTML report"
    return m.group(1), _flat(html.unescape(re.sub(r"<[^>]+>", "", m.group(2))))


def _unmarked(text: str) -> str:
    """Markdown's escapes and code marks off: what a reader reads."""
    return html.unescape(re.sub(r"\\([\\`*_{}\[\]()#+.!-])", r"\1", text)).replace("`", "")


def _check(d: Diagnosis, fmt: str, fix: str, phrase: str) -> None:
    shown_fix, action = first_action(d, fmt)
    assert shown_fix == fix, f"{fmt}: first fix {shown_fix}, expected {fix}: {action}"
    assert _unmarked(phrase) in _unmarked(action), f"{fmt}: {phrase!r} not in {action!r}"
    # a fact is never a Python repr, and no rank count reads "rank 0, 1"
    assert not re.search(r"\{'\w+':|\[\{", action), action
    assert not re.search(r"\brank \d+, \d+", action), action


def _known_miss(why: str | None) -> tuple[pytest.MarkDecorator, ...]:
    """A case we get wrong today, said where it is expected (`known_miss`): shown as an
    expected failure that must keep failing until it is fixed (strict), never left out."""
    return (pytest.mark.xfail(reason=why, strict=True),) if why else ()


def _first_action_of(bundle: Path) -> dict:
    return json.loads((bundle / "expected.json").read_text(encoding="utf-8"))["first_action"]


@pytest.mark.parametrize(
    "bundle",
    [
        pytest.param(b, id=b.name, marks=_known_miss(_first_action_of(b).get("known_miss")))
        for b in BUNDLES
    ],
)
@pytest.mark.parametrize("fmt", FORMATS)
def test_every_bundle_leads_with_its_expected_first_action(bundle: Path, fmt: str) -> None:
    want = _first_action_of(bundle)
    _check(_bundle(bundle.name), fmt, want["fix"], want["contains"])


@pytest.mark.parametrize(
    "case",
    [pytest.param(c, id=c["id"], marks=_known_miss(c.get("known_miss"))) for c in PASTES],
)
@pytest.mark.parametrize("fmt", FORMATS)
def test_every_pasted_error_leads_with_the_fix_its_thread_established(case: dict, fmt: str) -> None:
    _check(_pasted()[case["id"]], fmt, case["fix"], case["contains"])


def test_every_bundle_states_its_first_action_as_a_fix_pattern_and_a_phrase() -> None:
    tax = taxonomy.load()
    for bundle in BUNDLES:
        want = json.loads((bundle / "expected.json").read_text(encoding="utf-8"))["first_action"]
        assert set(want) - {"known_miss"} == {"fix", "contains"}, bundle.name
        assert want["fix"] in tax.fix_patterns and want["contains"].strip(), bundle.name


def test_the_pasted_table_is_wide_and_every_case_keeps_its_thread() -> None:
    tax = taxonomy.load()
    assert len(PASTES) >= 60
    assert len({c["id"] for c in PASTES}) == len(PASTES)
    reference: dict[str, dict] = {}
    for name in ("dev.jsonl", "mined.jsonl", "mined2.jsonl"):  # the reference side only
        for line in (ROOT / "models" / "corpus" / name).read_text(encoding="utf-8").splitlines():
            if line.strip():
                row = json.loads(line)
                reference[f"{name}:{row['id']}"] = row
    for c in PASTES:
        assert c["url"].startswith("https://"), c["id"]
        assert c["fix"] in tax.fix_patterns and c["contains"].strip() and c["thread_fix"], c["id"]
        if c["source"] != "issue thread":
            row = reference[c["source"]]  # a case of the reference corpus, as it is there
            assert row["url"] == c["url"] and row["evidence"] == c["text"], c["id"]


def _cause(label_id: str, score: float) -> ScoredLabel:
    cat = taxonomy.load().root_causes[label_id]
    return ScoredLabel(cat.id, cat.slug, cat.name, score)


def test_playbook_advice_comes_only_from_causes_that_are_probable() -> None:
    """A SIGKILL told to "fix the training script" because user code scored 17%: advice for an
    improbable cause is advice for another failure."""
    kb = knowledge.load()
    host_oom = kb.playbook.advice("R17", "F5", {}, JobConditions())
    user_code = kb.playbook.advice("R26", "F6", {}, JobConditions())
    assert host_oom and user_code

    def actions(user_code_score: float) -> list[str]:
        labels = Classification(
            root_causes=(_cause("R17", 0.7), _cause("R26", user_code_score)),
            fix_scores={"F5": 0.7, "F6": 0.3},
        )
        return [a for f in recommend(labels, Analysis(), kb) for a in f.actions]

    assert host_oom in actions(0.17) and user_code not in actions(0.17)
    assert user_code in actions(0.45)  # a cause still plausible next to the best one


def test_a_bare_exception_line_leaves_the_cause_open() -> None:
    """The README: an exception line with no frame at all leaves the cause open (whose code
    raised it, the user's or the framework's, nothing says)."""
    d = pipeline.explain_many(["KeyError: x"])[0]
    assert d.symptoms and d.symptoms[0].id == "S18"
    assert "most likely cause" not in d.summary
    if d.root_causes:  # the neighbours' and the model's guess, said to be one
        assert "cause unsettled, best guess" in d.summary
