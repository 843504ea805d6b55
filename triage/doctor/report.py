"""Findings and the doctor's report: text for a person, JSON (`triage.doctor/1`) for a script.

Each finding names the check that made it, its severity, the taxonomy root cause it would
lead to and the fix pattern that prevents it, one concrete action, and the evidence (facts as
they were read, with the ranks and hosts they came from).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from triage import taxonomy

SCHEMA = "triage.doctor/1"
EXIT_ERRORS = 3  # an error-level finding: the job would fail; a job script can stop here
_ORDER = {"error": 0, "warning": 1, "info": 2}


@dataclass(frozen=True)
class PreflightFinding:
    """One problem the doctor found before the job starts (not `triage.model.Finding`, what
    correlate says of a job that ran)."""

    check: str  # which check found it (`nccl-socket-ifname`, `version-skew`...)
    severity: str  # error | warning | info
    title: str
    action: str  # the fix, with the job's own facts
    root_cause: str | None = None  # taxonomy id this would cause (R07)
    fix_pattern: str | None = None  # taxonomy id of the fix (F4)
    evidence: tuple[str, ...] = ()
    ranks: tuple[int, ...] = ()
    hosts: tuple[str, ...] = ()
    source: str | None = None  # where the knowledge behind it comes from (a URL)

    def to_dict(self) -> dict[str, Any]:
        tax = taxonomy.load()
        out: dict[str, Any] = {
            "check": self.check,
            "severity": self.severity,
            "title": self.title,
            "action": self.action,
            "root_cause": None,
            "fix_pattern": None,
            "evidence": list(self.evidence),
            "ranks": list(self.ranks),
            "hosts": list(self.hosts),
        }
        if self.root_cause:
            c = tax.root_causes[self.root_cause]
            out["root_cause"] = {"id": c.id, "slug": c.slug, "name": c.name}
        if self.fix_pattern:
            f = tax.fix_patterns[self.fix_pattern]
            out["fix_pattern"] = {"id": f.id, "slug": f.slug, "name": f.name}
        if self.source:
            out["source"] = self.source
        return out


@dataclass(frozen=True)
class Report:
    findings: tuple[PreflightFinding, ...]
    distributed: bool
    hostname: str
    versions: dict[str, str] = field(default_factory=dict)
    ranks_answered: tuple[int, ...] = ()
    world_size: int | None = None
    hosts: dict[str, list[int]] = field(default_factory=dict)  # host -> ranks
    # False on the ranks of a distributed run that only sent their facts (rank 0 reports);
    # they carry rank 0's verdict in exit_override so every rank exits alike
    reporter: bool = True
    exit_override: int | None = None

    @property
    def errors(self) -> list[PreflightFinding]:
        return [f for f in self.findings if f.severity == "error"]

    @property
    def exit_code(self) -> int:
        if self.exit_override is not None:
            return self.exit_override
        return EXIT_ERRORS if self.errors else 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "distributed": self.distributed,
            "host": self.hostname,
            "versions": self.versions,
            "world_size": self.world_size,
            "ranks_answered": list(self.ranks_answered),
            "hosts": self.hosts,
            "counts": {s: sum(f.severity == s for f in self.findings) for s in _ORDER},
            "findings": [f.to_dict() for f in self.findings],
        }


def sort_findings(findings: Sequence[PreflightFinding]) -> tuple[PreflightFinding, ...]:
    return tuple(sorted(findings, key=lambda f: (_ORDER.get(f.severity, 3), f.check, f.title)))


def render(report: Report, fmt: str = "text") -> str:
    if fmt == "json":
        return json.dumps(report.to_dict(), indent=2)
    return render_text(report)


def render_text(report: Report) -> str:
    from triage.analysis.ranks import format_ranks

    tax = taxonomy.load()
    lines: list[str] = []
    where = f"{len(report.ranks_answered)} rank(s)" if report.distributed else report.hostname
    counts = {s: sum(f.severity == s for f in report.findings) for s in _ORDER}
    verdict = (
        f"{counts['error']} error(s), {counts['warning']} warning(s), {counts['info']} note(s)"
        if report.findings
        else "no problems found"
    )
    lines.append(f"triage doctor: {where}: {verdict}")
    if report.versions:
        lines.append("  " + ", ".join(f"{k} {v}" for k, v in report.versions.items()))
    if report.distributed and report.hosts:
        for host, ranks in sorted(report.hosts.items()):
            lines.append(f"  host {host}: ranks {format_ranks(sorted(ranks))}")
    for f in report.findings:
        lines.append("")
        who = ""
        if f.ranks:
            who = f" [rank {format_ranks(sorted(f.ranks))}]"
        elif f.hosts:
            who = f" [{', '.join(f.hosts)}]"
        lines.append(f"{f.severity.upper()} {f.check}{who}: {f.title}")
        if f.root_cause or f.fix_pattern:
            cause = tax.root_causes[f.root_cause].name if f.root_cause else "?"
            fix = tax.fix_patterns[f.fix_pattern].name if f.fix_pattern else "?"
            lines.append(f"  prevents: {f.root_cause} {cause}; fix: {f.fix_pattern} {fix}")
        lines.append(f"  do: {f.action}")
        lines += [f"  evidence: {e}" for e in f.evidence]
        if f.source:
            lines.append(f"  source: {f.source}")
    return "\n".join(lines)
