"""The fleet report as JSON (schema `triage.fleet/1`), Markdown and one self-contained HTML page.

Everything quoted from logs (evidence lines, first-failure lines, actions, paths) is hostile
text: HTML goes through jinja2 autoescape under a Content-Security-Policy that allows no script
at all and nothing remote (SECURITY.md); Markdown puts log text in code spans or escapes it,
with the same helpers the single-job report uses.
"""

from __future__ import annotations

import json
import math
from datetime import datetime, timezone
from typing import Any

from triage.fleet.model import SCHEMA, FleetReport, Group, HostStat, Label, SignalHit
from triage.report import common as c
from triage.report.html import environment
from triage.report.markdown import md_code, md_text

GROUP_ROWS = 100
HOST_ROWS = 500
DAY_ROWS = 120
UNREADABLE_ROWS = 200
FORMATS = ("html", "md", "json")


def render(report: FleetReport, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(to_dict(report), indent=2) + "\n"
    if fmt == "md":
        return render_markdown(report)
    if fmt == "html":
        return render_html(report)
    raise ValueError(f"unknown fleet report format {fmt!r}; one of {FORMATS}")


# --------------------------------------------------------------------------- shared words


def day(epoch: float | None) -> str:
    if epoch is None:
        return "-"
    return datetime.fromtimestamp(epoch, tz=timezone.utc).strftime("%Y-%m-%d %H:%M")


def p_text(p: float | None) -> str:
    if p is None:
        return "not tested"
    if p < 1e-4:
        return f"{p:.1e}"
    return f"{p:.4f}" if p < 0.01 else f"{p:.3f}"


def label_text(x: Label | None) -> str:
    return f"{x.id} {x.name}".strip() if x else "-"


def mechanism_text(mechanism: str) -> str:
    kind, _, what = mechanism.partition(":")
    if kind == "rule":
        return f"rule {what}"
    if kind == "template":
        return what
    return mechanism or "-"


def group_text(key: str) -> str:
    """A group key (`failed | S26 | R28 | rule:gpu-ecc-error`) as a reader says it."""
    parts = key.split(" | ")
    if len(parts) != 4:
        return key
    outcome, symptom, root, mechanism = parts
    return " · ".join(p for p in (symptom, root, mechanism_text(mechanism), outcome) if p != "-")


def headline(r: FleetReport) -> str:
    failures = sum(g.count for g in r.groups)
    head = (
        f"{r.total_jobs} jobs: {failures} failures in {len(r.groups)} groups"
        if r.groups
        else f"{r.total_jobs} jobs, no failures"
    )
    flagged = r.flagged
    if not flagged:
        return head + "; no host stands out"
    named = "; ".join(suspect_line(h) for h in flagged)
    return f"{head}. Drain {', '.join(h.host for h in flagged)}: {named}"


def suspect_line(h: HostStat) -> str:
    signals = ", ".join(f"{s.label} in {s.jobs}" for s in h.signals[:3])
    tail = f", with {signals}" if signals else ""
    return f"{h.host} hosted the culprit in {h.culprit_jobs} of the {h.jobs} jobs it ran{tail}"


def method(r: FleetReport) -> str:
    return (
        f"{r.test}: a host is flagged when P(X >= culprit jobs | its jobs, fleet base rate "
        f"{r.base_rate:.1%}) stays under {r.alpha:g} after Holm's correction over the "
        f"{r.tested_hosts} hosts with at least {r.min_jobs} jobs"
    )


def where(s: SignalHit) -> str:
    return c.where(s.source, s.line) if s.source else "diagnosis (hang)"


# --------------------------------------------------------------------------- JSON


def to_dict(r: FleetReport) -> dict[str, Any]:
    def label(x: Label | None) -> dict[str, Any] | None:
        return None if x is None else {"id": x.id, "name": x.name}

    def group(g: Group) -> dict[str, Any]:
        return {
            "key": g.key,
            "outcome": g.outcome,
            "symptom": label(g.symptom),
            "root_cause": label(g.root_cause),
            "mechanism": g.mechanism,
            "count": g.count,
            "first_seen": _iso(g.first_seen),
            "last_seen": _iso(g.last_seen),
            "new": g.new,
            "fix": label(g.fix),
            "fix_action": g.fix_action,
            "culprit_hosts": [{"host": h, "jobs": n} for h, n in g.hosts],
            "examples": [
                {"job": e.name, "path": e.path, "time": _iso(e.when), "line": e.line}
                for e in g.examples
            ],
            "jobs": list(g.jobs),
        }

    def host(h: HostStat) -> dict[str, Any]:
        return {
            "host": h.host,
            "jobs": h.jobs,
            "culprit_jobs": h.culprit_jobs,
            "rate": round(h.rate, 4),
            "p_value": h.p_value,
            "adjusted_p": h.adjusted_p,
            "flagged": h.flagged,
            "signals": [{"signal": s.signal, "label": s.label, "jobs": s.jobs} for s in h.signals],
            "gpus": [
                {
                    "gpu": g.gpu,
                    "jobs": g.jobs,
                    "culprit_jobs": g.culprit_jobs,
                    "signals": [
                        {"signal": s.signal, "label": s.label, "jobs": s.jobs} for s in g.signals
                    ],
                }  # fmt: skip
                for g in h.gpus
            ],
            "evidence": [
                {
                    "job": job,
                    "signal": s.signal,
                    "gpu": s.gpu,
                    "rank": s.rank,
                    "source": s.source,
                    "line": s.line,
                    "text": s.text,
                }
                for s, job in zip(h.evidence, h.evidence_jobs, strict=True)
            ],
            "groups": [{"key": k, "jobs": n} for k, n in h.groups],
        }

    return {
        "schema": SCHEMA,
        "summary": headline(r),
        "run": {
            "id": r.run.run,
            "jobs_dir": r.run.jobs_dir,
            "found": r.run.found,
            "new": r.run.new,
            "known": r.run.known,
            "errors": r.run.errors,
        },
        "db": r.db,
        "total_jobs": r.total_jobs,
        "outcomes": dict(r.outcomes),
        "failure_outcomes": list(r.failure_outcomes),
        "groups": [group(g) for g in r.groups],
        "suspects": {
            "test": r.test,
            "alpha": r.alpha,
            "min_jobs": r.min_jobs,
            "tested_hosts": r.tested_hosts,
            "base_rate": round(r.base_rate, 4),
            "flagged": [h.host for h in r.flagged],
            "hosts": [host(h) for h in r.hosts],
        },
        "days": [
            {"day": d.day, "jobs": d.jobs, "failures": d.failures, "outcomes": dict(d.by_outcome)}
            for d in r.days
        ],
        "unreadable": [{"job": u.name, "path": u.path, "error": u.error} for u in r.unreadable],
        "generated": _iso(r.generated),
    }


def _iso(epoch: float | None) -> str | None:
    if epoch is None or not math.isfinite(epoch):
        return None
    return datetime.fromtimestamp(epoch, tz=timezone.utc).isoformat(timespec="seconds")


# --------------------------------------------------------------------------- Markdown


def render_markdown(r: FleetReport) -> str:

    out: list[str] = [f"## triage fleet: {md_text(headline(r))}", ""]
    out.append(
        f"This run read {r.run.new} new job(s) of {r.run.found} in {md_code(r.run.jobs_dir)}; "
        f"{r.run.known} already known were not read again; {r.run.errors} could not be read. "
        f"History: {md_code(r.db)}, {r.total_jobs} jobs."
    )
    out += ["", "**Outcomes:** " + ", ".join(f"{o} {n}" for o, n in r.outcomes), ""]
    out += ["### Suspect hosts", "", md_text(method(r)) + ".", ""]
    out += [
        "| host | jobs | culprit | rate | adjusted p | signals | |",
        "|---|---:|---:|---:|---:|---|---|",
    ]
    for h in r.hosts[:HOST_ROWS]:
        signals = ", ".join(f"{s.label} ×{s.jobs}" for s in h.signals) or "-"
        out.append(
            f"| {md_code(h.host, True)} | {h.jobs} | {h.culprit_jobs} | {h.rate:.0%} | "
            f"{p_text(h.adjusted_p)} | {md_text(signals)} | {'**flagged**' if h.flagged else ''} |"
        )
    for h in r.flagged:
        out += ["", f"**{md_text(h.host)}**: {md_text(suspect_line(h))}.", ""]
        for g in h.gpus:
            sig = ", ".join(f"{s.label} ×{s.jobs}" for s in g.signals)
            out.append(
                f"- GPU {md_code(g.gpu)}: signals in {g.jobs} job(s), {g.culprit_jobs} of them "
                f"started on this host; {md_text(sig)}"
            )
        for s, job in zip(h.evidence, h.evidence_jobs, strict=True):
            out.append(f"- {md_text(job)} {md_code(where(s))}: {md_code(s.text)}")
    out += ["", "### Failure groups", ""]
    if not r.groups:
        out.append("No failures.")
    for g in r.groups[:GROUP_ROWS]:
        new = " **new**" if g.new else ""
        out.append(
            f"- **{g.count}×**{new} {md_text(g.outcome)} · {md_text(label_text(g.symptom))} · "
            f"{md_text(label_text(g.root_cause))} · {md_code(mechanism_text(g.mechanism))} "
            f"(first {day(g.first_seen)}, last {day(g.last_seen)})"
        )
        if g.fix:
            out.append(
                f"  - fix: {md_text(label_text(g.fix))}: {md_text(c.one_line(g.fix_action))}"
            )
        hosts = ", ".join(f"{h} ({n})" for h, n in g.hosts[:5])
        if hosts:
            out.append(f"  - culprit hosts: {md_text(hosts)}")
        for e in g.examples:
            out.append(f"  - {md_code(e.name)} {md_code(c.one_line(e.line, 160))}")
    if r.days:
        out += ["", "### By day", "", "| day | jobs | failures | outcomes |", "|---|---:|---:|---|"]
        for d in r.days[-DAY_ROWS:]:
            outs = ", ".join(f"{o} {n}" for o, n in d.by_outcome)
            out.append(f"| {d.day} | {d.jobs} | {d.failures} | {outs} |")
    if r.unreadable:
        out += ["", "### Could not be read", ""]
        for u in r.unreadable[:UNREADABLE_ROWS]:
            out.append(f"- {md_code(u.name)}: {md_text(u.error)}")
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------- HTML


def render_html(r: FleetReport) -> str:
    most = max((g.count for g in r.groups), default=1)
    return (
        environment()
        .get_template("fleet.html.j2")
        .render(
            r=r,
            schema=SCHEMA,
            headline=headline(r),
            method=method(r),
            groups=r.groups[:GROUP_ROWS],
            groups_more=max(0, len(r.groups) - GROUP_ROWS),
            hosts=r.hosts[:HOST_ROWS],
            days=r.days[-DAY_ROWS:],
            day_most=max((d.jobs for d in r.days), default=1),
            unreadable=r.unreadable[:UNREADABLE_ROWS],
            failures=sum(g.count for g in r.groups),
            most=most,
            day=day,
            p_text=p_text,
            label_text=label_text,
            mechanism_text=mechanism_text,
            group_text=group_text,
            suspect_line=suspect_line,
            where=where,
            one_line=c.one_line,
            short=c.short,
            segments=c.segments,
            pct=lambda x: f"{x * 100:.0f}%",
            generated=day(r.generated),
        )
    )
