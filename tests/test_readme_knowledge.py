"""The README's "How it works" table says how much the tool knows; a reader trusts those numbers,
so they are checked against what `triage.knowledge` actually loads."""

from __future__ import annotations

import json
from pathlib import Path

import regex

from triage import knowledge

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _row(name: str) -> str:
    match = regex.search(rf"^\| {regex.escape(name)} \|.*$", README, flags=regex.M)
    assert match, f"README has no knowledge row '{name}'"
    return match.group(0)


def test_the_rule_counts_in_the_readme_are_the_shipped_ones() -> None:
    kb = knowledge.load()
    row = _row("rules")
    files = {Path(rule.file).name for rule in kb.rules}
    generic = sum(1 for rule in kb.rules if rule.layer == "generic")
    numbers = regex.search(r"\((\d+) files of rules\) \| (\d+) rules \((\d+) of them", row)
    assert numbers, row
    assert [int(n) for n in numbers.groups()] == [len(files), len(kb.rules), generic]


def test_the_corpus_sizes_in_the_readme_are_the_shipped_files() -> None:
    row = _row("reference corpus")
    corpus = ROOT / "models" / "corpus"
    for name, count in regex.findall(r"`(\w+\.jsonl)` \((\d+)\)", row):
        lines = [line for line in (corpus / name).read_text().splitlines() if line.strip()]
        assert all(json.loads(line)["url"] for line in lines), name
        assert len(lines) == int(count), name


def test_the_atlas_counts_in_the_readme_are_the_shipped_ones() -> None:
    kb = knowledge.load()
    manifest = kb.atlas.manifest
    row = _row("message atlas")
    numbers = regex.search(
        r"(\d+) templates from (\d+) libraries' source .*?, (\d+) labelled by (\d+) label "
        r"rules, (\d+) reviewed by hand",
        row,
    )
    assert numbers, row
    assert [int(n) for n in numbers.groups()] == [
        manifest["templates"],
        len(manifest["releases"]),
        manifest["labelled"],
        len(kb.atlas_labels.rules),
        manifest["reviewed"],
    ]
    unlabelled = sum(1 for review in kb.atlas_labels.reviewed.values() if not review.labels)
    prose = f"{manifest['reviewed']} templates that the reference pastes and the public jobs'"
    assert prose in README.replace("\n", " ")
    assert f"; {unlabelled} of them on purpose carry" in README.replace("\n", " ")
    assert f"{manifest['labelled']:,} templates carry a symptom" in README.replace("\n", " ")
    assert f"{manifest['templates']:,} templates" in README.replace("\n", " ")
