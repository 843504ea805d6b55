"""What the doctor says for each problem (`rules/doctor/findings.yaml`): check, severity,
title and action templates, root cause and fix pattern, per finding id. The checks decide
when a finding holds and pass its facts; the words and the taxonomy ids are data."""

from __future__ import annotations

import string
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from triage import taxonomy
from triage.doctor.report import PreflightFinding

FINDINGS_FILE = "findings.yaml"
SEVERITIES = ("error", "warning", "info")
_KEYS = {"check", "severity", "title", "action", "root_cause", "fix_pattern"}
# what a check passes beside a template's facts: a template cannot name them
_RESERVED = frozenset({"severity", "var", "evidence", "ranks", "hosts", "source"})


@dataclass(frozen=True)
class FindingSpec:
    id: str
    check: str  # a template: `env-contradiction:{rule}`
    severity: str
    title: str
    action: str
    root_cause: str | None = None
    # one fix pattern, or variable-name prefix -> fix pattern ("" for the rest)
    fix_pattern: str | Mapping[str, str] | None = None

    def make(
        self,
        *,
        severity: str | None = None,
        var: str | None = None,
        evidence: tuple[str, ...] = (),
        ranks: tuple[int, ...] = (),
        hosts: tuple[str, ...] = (),
        source: str | None = None,
        **facts: Any,
    ) -> PreflightFinding:
        """The finding, its templates filled with `facts`; `var`: the variable whose name's
        prefix picks the fix pattern, where the entry maps prefixes."""
        fix = self.fix_pattern
        if isinstance(fix, Mapping):
            name = var or ""
            fix = fix[max((p for p in fix if name.startswith(p)), key=len)]
        return PreflightFinding(
            check=self.check.format(**facts),
            severity=severity or self.severity,
            title=self.title.format(**facts),
            action=self.action.format(**facts),
            root_cause=self.root_cause,
            fix_pattern=fix,
            evidence=evidence,
            ranks=ranks,
            hosts=hosts,
            source=source,
        )


def validate(doc: Mapping[str, Any], name: str = FINDINGS_FILE) -> list[str]:
    """Every problem of a findings.yaml document, as `file: item: what`."""
    problems: list[str] = []
    for key in set(doc) - {"findings"}:
        problems.append(f"{name}: unknown key {key!r}")
    rows = doc.get("findings")
    if not isinstance(rows, dict) or not rows:
        return [*problems, f"{name}: findings: needs a mapping of finding id to its wording"]
    tax = taxonomy.load()
    for fid, row in rows.items():
        where = f"{name}: findings.{fid}"
        if not isinstance(row, dict):
            problems.append(f"{where}: must be a mapping")
            continue
        for key in sorted(set(row) - _KEYS):
            problems.append(f"{where}: unknown field {key!r}")
        for key in ("check", "title", "action"):
            text = row.get(key)
            if not isinstance(text, str) or not text.strip():
                problems.append(f"{where}: {key} must be a text")
                continue
            try:
                names = {f for _, f, _, _ in string.Formatter().parse(text) if f}
            except ValueError as exc:
                problems.append(f"{where}: {key} is not a template ({exc})")
                continue
            for taken in sorted(names & _RESERVED):
                problems.append(f"{where}: {key} names {{{taken}}}, a field of the finding")
        if row.get("severity") not in SEVERITIES:
            problems.append(f"{where}: severity must be one of {', '.join(SEVERITIES)}")
        cause = row.get("root_cause")
        if cause is not None and cause not in tax.root_causes:
            problems.append(f"{where}: root_cause {cause!r} is not a taxonomy id")
        fix = row.get("fix_pattern")
        fixes = list(fix.values()) if isinstance(fix, dict) else [fix] if fix else []
        if isinstance(fix, dict) and "" not in fix:
            problems.append(f'{where}: fix_pattern by prefix needs a "" entry for the rest')
        for f in fixes:
            if f not in tax.fix_patterns:
                problems.append(f"{where}: fix_pattern {f!r} is not a taxonomy id")
    return problems


def build(doc: Mapping[str, Any]) -> dict[str, FindingSpec]:
    return {
        str(fid): FindingSpec(
            id=str(fid),
            check=row["check"],
            severity=row["severity"],
            title=row["title"],
            action=row["action"],
            root_cause=row.get("root_cause"),
            fix_pattern=dict(row["fix_pattern"])
            if isinstance(row.get("fix_pattern"), dict)
            else row.get("fix_pattern"),
        )
        for fid, row in doc["findings"].items()
    }
