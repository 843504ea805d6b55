"""Reading a knowledge folder: every YAML file, sorted, told apart by its `kind`.

A rule file is a list of rules (or `rules: [...]`, or one rule per `---` document). Every
other kind of knowledge is one mapping whose `kind:` names it (`kind: playbook`), so a file's
kind never depends on its name and a team folder can hold any of the kinds it may add.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from triage import yaml_docs
from triage.knowledge.problems import Problems

RULES = "rules"


@dataclass(frozen=True)
class Document:
    """One knowledge file: its kind and its YAML content (a rule file: the list of rules)."""

    path: Path
    kind: str
    body: Any


def knowledge_files(folder: Path) -> list[Path]:
    """The YAML files of a folder, in name order (the order rules are matched in)."""
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())


def read(path: Path, kinds: frozenset[str], problems: Problems) -> Document | None:
    """One file as a Document; an unreadable file or an unknown `kind` is a problem."""
    try:
        docs = yaml_docs.documents(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml_docs.YamlError) as exc:
        problems.add(path, "", f"cannot read knowledge file: {exc}")
        return None
    docs = [d for d in docs if d is not None]
    if len(docs) == 1 and isinstance(docs[0], dict) and "kind" in docs[0] and "id" not in docs[0]:
        kind = docs[0]["kind"]
        if kind not in kinds:
            problems.add(path, "", f"unknown kind {kind!r}; known: {', '.join(sorted(kinds))}")
            return None
        return Document(path, str(kind), docs[0])
    rules: list[Any] = []
    for doc in docs:
        if isinstance(doc, list):
            rules.extend(doc)
        elif isinstance(doc, dict) and "rules" in doc and "id" not in doc:
            rules.extend(doc["rules"] or [])
        else:
            rules.append(doc)
    return Document(path, RULES, rules)
