"""The reference corpus: labeled failures in `models/corpus/`, and what each file may be used for.

`models/corpus/manifest.yaml` lists the case files. Only files listed there are read, and a
file's `use` decides what for:

- `reference`: indexed as neighbours and used to fit and score the calibration;
- `held_out`: scored only, never indexed and never used to fit anything.

`$TRIAGE_CORPUS` names one cases file that replaces the reference files (to build or score
an index from another set). Every case keeps the URL of the public issue it comes from.
"""

from __future__ import annotations

import json
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from triage import taxonomy
from triage.knowledge.locate import models_dir
from triage.knowledge.problems import KnowledgeError, Problem, Problems

CORPUS_ENV = "TRIAGE_CORPUS"
MANIFEST = "manifest.yaml"
REFERENCE = "reference"
HELD_OUT = "held_out"
USES = (REFERENCE, HELD_OUT)
LABELS = ("symptom", "root_cause", "fix", "stage")
REQUIRED = ("id", "url", "evidence", *LABELS)


@dataclass(frozen=True)
class CaseFile:
    path: Path
    use: str  # reference | held_out
    origin: str = ""


def corpus_dir() -> Path:
    return models_dir() / "corpus"


def case_files() -> list[CaseFile]:
    """Every case file the manifest lists (KnowledgeError when the manifest is unusable)."""
    found = Problems()
    files = _manifest(corpus_dir(), found)
    found.raise_if_any()
    return files


def reference_files() -> list[Path]:
    """The files the index and the calibration are built from (`$TRIAGE_CORPUS` replaces them)."""
    env = os.environ.get(CORPUS_ENV)
    if env:
        return [Path(env)]
    return [f.path for f in case_files() if f.use == REFERENCE]


def held_out_files() -> list[Path]:
    """Files for scoring only: never indexed, never used for calibration."""
    return [f.path for f in case_files() if f.use == HELD_OUT]


def read_cases(path: Path) -> list[dict[str, Any]]:
    """The labeled cases of one file; a line that is not a labeled case is skipped, with a
    warning (`problems()` reports it as a problem)."""
    rows = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            warnings.warn(f"{path}:{n}: not JSON, skipped", stacklevel=2)
            continue
        if isinstance(row, dict) and all(k in row for k in ("id", "evidence", *LABELS)):
            rows.append(row)
        else:
            warnings.warn(f"{path}:{n}: case without labels, skipped", stacklevel=2)
    return rows


def problems(folder: Path | None = None) -> list[Problem]:
    """Everything wrong with the manifest and the cases it lists: unknown files or uses, lines
    that are not cases, missing fields or URLs, unknown taxonomy ids, a case id used twice
    (a held-out case that is also a reference case would leak into the index)."""
    folder = folder or corpus_dir()
    found = Problems()
    files = _manifest(folder, found)
    tax = taxonomy.load()
    tables = {
        "symptom": tax.symptoms,
        "root_cause": tax.root_causes,
        "fix": tax.fix_patterns,
        "stage": tax.stages,
    }
    seen: dict[str, str] = {}
    for case_file in files:
        try:
            lines = case_file.path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            found.add(case_file.path, "", f"cannot read: {exc}")
            continue
        for n, line in enumerate(lines, 1):
            if line.strip():
                _check_case(line, f"line {n}", case_file, tables, seen, found)
    return found.found


def _check_case(
    line: str,
    where: str,
    case_file: CaseFile,
    tables: dict[str, Any],
    seen: dict[str, str],
    found: Problems,
) -> None:
    path = case_file.path
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        found.add(path, where, f"not JSON: {exc}")
        return
    if not isinstance(row, dict):
        found.add(path, where, "is not a JSON object")
        return
    item = f"case {row['id']!r}" if isinstance(row.get("id"), str) else where
    missing = [k for k in REQUIRED if not row.get(k)]
    if missing:
        found.add(path, item, f"missing {', '.join(missing)}")
    for label, table in tables.items():
        for value in [row.get(label), *(row.get(f"{label}_alt") or [])]:
            if value is not None and value not in table:
                found.add(path, item, f"`{label}`: unknown taxonomy id {value!r}")
    case_id = row.get("id")
    if isinstance(case_id, str):
        if case_id in seen:
            found.add(path, item, f"id also used in {seen[case_id]}")
        seen[case_id] = f"{path.name} ({case_file.use})"


def _manifest(folder: Path, found: Problems) -> list[CaseFile]:
    path = folder / MANIFEST
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        found.add(path, "", f"cannot read the corpus manifest: {exc}")
        return []
    if not isinstance(data, dict) or data.get("kind") != "corpus":
        found.add(path, "", "must be a mapping with `kind: corpus` and `files`")
        return []
    files: list[CaseFile] = []
    for n, entry in enumerate(data.get("files") or [], 1):
        item = f"files #{n}"
        if not isinstance(entry, dict) or not isinstance(entry.get("file"), str):
            found.add(path, item, "needs `file` (a name in this folder) and `use`")
            continue
        item = f"file {entry['file']!r}"
        unknown = set(entry) - {"file", "use", "origin"}
        if unknown:
            found.add(path, item, f"unknown key(s) {sorted(unknown)}")
        if entry.get("use") not in USES:
            found.add(path, item, f"`use` must be one of {', '.join(USES)}")
            continue
        target = folder / entry["file"]
        if Path(entry["file"]).name != entry["file"] or not target.is_file():
            found.add(path, item, "no such file in the corpus folder")
            continue
        files.append(CaseFile(target, entry["use"], str(entry.get("origin") or "")))
    if not any(f.use == REFERENCE for f in files) and not found:
        found.add(path, "", "lists no `use: reference` file: nothing to build the index from")
    return files


__all__ = [
    "CORPUS_ENV",
    "HELD_OUT",
    "REFERENCE",
    "CaseFile",
    "KnowledgeError",
    "case_files",
    "corpus_dir",
    "held_out_files",
    "problems",
    "read_cases",
    "reference_files",
]
