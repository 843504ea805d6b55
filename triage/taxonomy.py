"""The failure taxonomy: the label contract (`taxonomy.yaml`, a copy of shared/taxonomy.yaml).

Every label triage prints, every rule and every reference case uses these ids. Ids never change.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

from triage import yaml_docs


@dataclass(frozen=True)
class Category:
    id: str
    slug: str
    name: str
    stage: str | None = None  # symptoms: the stage they belong to
    fixes: tuple[str, ...] = ()  # root causes: fix patterns that usually resolve them, best first
    desc: str = ""
    dist: bool | None = None


@dataclass(frozen=True)
class Taxonomy:
    stages: dict[str, Category]
    symptoms: dict[str, Category]
    root_causes: dict[str, Category]
    fix_patterns: dict[str, Category]

    def get(self, label_id: str) -> Category:
        for table in (self.symptoms, self.root_causes, self.fix_patterns, self.stages):
            if label_id in table:
                return table[label_id]
        raise KeyError(f"unknown taxonomy id {label_id!r}")


_FIELDS = {"id", "slug", "name", "stage", "fixes", "desc", "dist"}


def _full_name(row: dict) -> str:
    """The name, mended where an unquoted comma split it inside a YAML flow mapping.

    `{..., name: Container or OS limits (shm, memlock, IPC, P2P)}` loads as name
    "Container or OS limits (shm" plus keys "memlock", "IPC", "P2P)" with no value; the
    file is a contract copied verbatim, so the loader puts the pieces back in order.
    """
    pieces = [str(row["name"])]
    pieces += [str(key) for key, value in row.items() if key not in _FIELDS and value is None]
    return ", ".join(pieces)


def _categories(rows: list[dict]) -> dict[str, Category]:
    return {
        row["id"]: Category(
            id=row["id"],
            slug=row["slug"],
            name=_full_name(row),
            stage=row.get("stage"),
            fixes=tuple(row.get("fixes", ())),
            desc=row.get("desc", ""),
            dist=row.get("dist"),
        )
        for row in rows
    }


@lru_cache(maxsize=1)
def load() -> Taxonomy:
    text = resources.files("triage").joinpath("taxonomy.yaml").read_text(encoding="utf-8")
    data = yaml_docs.document(text)
    return Taxonomy(
        stages=_categories(data["stages"]),
        symptoms=_categories(data["symptoms"]),
        root_causes=_categories(data["root_causes"]),
        fix_patterns=_categories(data["fix_patterns"]),
    )


@dataclass(frozen=True)
class LabelNote:
    """When to use one label of a pair people confuse, and when not."""

    id: str
    use: str
    avoid: str  # the note's `not`: when another label of the pair fits instead
    versus: tuple[str, ...]  # the other ids of the pair


class NotesError(ValueError):
    """taxonomy_notes.yaml names an id the taxonomy lacks, or misses a field."""


@lru_cache(maxsize=1)
def notes() -> tuple[LabelNote, ...]:
    """The disambiguation notes (`taxonomy_notes.yaml`), checked against the taxonomy."""
    text = resources.files("triage").joinpath("taxonomy_notes.yaml").read_text(encoding="utf-8")
    data = yaml_docs.document(text)
    tax = load()
    problems: list[str] = []
    out: list[LabelNote] = []
    for n, group in enumerate(data or []):
        ids = tuple(group.get("ids") or ())
        if len(ids) < 2:
            problems.append(f"note {n + 1}: needs two or more ids")
        for label_id in ids:
            try:
                tax.get(label_id)
            except KeyError:
                problems.append(f"note {n + 1}: unknown id {label_id}")
                continue
            entry = group.get(label_id) or {}
            if not entry.get("use") or not entry.get("not"):
                problems.append(f"note {n + 1}: {label_id} needs both `use` and `not`")
                continue
            others = tuple(i for i in ids if i != label_id)
            out.append(LabelNote(label_id, entry["use"], entry["not"], others))
    if problems:
        raise NotesError("taxonomy_notes.yaml: " + "; ".join(problems))
    return tuple(out)
