"""The failure taxonomy: the label contract (`taxonomy.yaml`, a copy of shared/taxonomy.yaml).

Every label triage prints, every rule and every reference case uses these ids. Ids never change.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

import yaml


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
    # libyaml's loader where PyYAML was built with it (wheels are): ~10x faster, same data
    data = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    return Taxonomy(
        stages=_categories(data["stages"]),
        symptoms=_categories(data["symptoms"]),
        root_causes=_categories(data["root_causes"]),
        fix_patterns=_categories(data["fix_patterns"]),
    )
