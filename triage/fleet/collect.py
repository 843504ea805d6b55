"""One job of a fleet: its content digest (in the driver) and its record (in a worker).

`fleet_job(path, options, knowledge=...)` is the unit `triage.batch.run_batch` runs per job,
locally or on Dask or Ray, like `diagnose_job`: it reads the job once, diagnoses it, and
sends back only the small `JobRecord` row (outcome, labels, mechanism, hosts, signals), so
the aggregation never reads a bundle again. It never raises: a job that cannot be read is a
row with its reason.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from triage.fleet.knowledge import FleetKnowledge
from triage.fleet.model import HostPart, JobRecord, Label
from triage.pipeline import Options

_CHUNK = 1 << 20


@dataclass(frozen=True)
class Fingerprint:
    """What `stat` says of a job without reading it: a job whose fingerprint is unchanged since
    the last run keeps its digest (the way git's index skips unchanged files)."""

    files: int
    size: int
    mtime_ns: int

    def key(self) -> str:
        return f"{self.files}:{self.size}:{self.mtime_ns}"


def fingerprint(path: str) -> Fingerprint:
    """Files, bytes and the newest mtime under `path` (a folder or one archive)."""
    files = size = newest = 0
    for file, st in _files(path):
        del file
        files += 1
        size += st.st_size
        newest = max(newest, st.st_mtime_ns)
    return Fingerprint(files, size, newest)


def content_digest(path: str) -> str:
    """sha256 over every file's path (relative to the job) and bytes, in name order: the same
    job copied or moved elsewhere has the same digest."""
    h = hashlib.sha256()
    root = path.rstrip(os.sep)
    for file, _st in _files(path):
        rel = os.path.relpath(file, root) if file != root else os.path.basename(root)
        h.update(rel.encode("utf-8", "surrogateescape") + b"\0")
        with open(file, "rb") as fh:
            while chunk := fh.read(_CHUNK):
                h.update(chunk)
        h.update(b"\0")
    return h.hexdigest()


def _files(path: str) -> list[tuple[str, os.stat_result]]:
    """Regular files under `path`, in name order; links are not followed (as the ingest does
    not by default), unreadable folders are left out."""
    st = os.stat(path)
    if not stat.S_ISDIR(st.st_mode):
        return [(path, st)]
    out: list[tuple[str, os.stat_result]] = []
    for dirpath, dirnames, filenames in os.walk(path):
        dirnames.sort()
        for name in sorted(filenames):
            file = os.path.join(dirpath, name)
            try:
                fst = os.lstat(file)
            except OSError:
                continue
            if stat.S_ISREG(fst.st_mode):
                out.append((file, fst))
    return out


# --------------------------------------------------------------------------- the unit


class Unreadable(Exception):
    """Nothing in the bundle could be read: its row says why, it is not counted as a job."""


def _nothing_read(parsed: Sequence[Any]) -> str:
    from triage.model import EventKind

    warnings = [w for ps in parsed for w in (*ps.source.warnings, *ps.warnings)]
    warnings += [ev.text for ps in parsed for ev in ps.events if ev.kind is EventKind.INPUT_WARNING]
    if not parsed:
        return "no file in it could be read"
    if warnings:
        more = f" (+{len(warnings) - 1} more)" if len(warnings) > 1 else ""
        return f"nothing in it could be read: {warnings[0]}{more}"
    return f"none of its {len(parsed)} file(s) holds a log line, traceback or dump triage reads"


def fleet_job(
    path: str, options: Options = Options(), *, knowledge: FleetKnowledge
) -> dict[str, Any]:
    """Read and diagnose one job; its `JobRecord` row, or `{"job", "error"}`. Never raises."""
    from triage.redact import redact_text

    try:
        return job_record(path, options, knowledge).to_row()
    except Unreadable as exc:  # its warnings quote the bundle's own words: masked too
        return {"job": path, "error": redact_text(str(exc))}
    except Exception as exc:  # noqa: BLE001 - one bad job must not stop the fleet
        return {"job": path, "error": redact_text(f"{type(exc).__name__}: {exc}")}


def job_record(path: str, options: Options, knowledge: FleetKnowledge) -> JobRecord:
    from triage import pipeline
    from triage.fleet import signals
    from triage.redact import redact_events

    parsed = pipeline.read_inputs(
        [path],
        fr_entries=options.fr_entries,
        follow_links=options.follow_links,
        limits=options.limits,
        workers=options.workers,
    )
    if not pipeline.has_evidence(parsed):
        raise Unreadable(_nothing_read(parsed))
    diagnosis = pipeline.diagnose_parsed(parsed, options).to_dict()
    record = record_of(path, diagnosis, knowledge, _rules_by_id(options))
    rank_hosts = {h_rank: h.host for h in record.hosts for h_rank in h.ranks}
    masked = redact_events(parsed)
    hits = [
        replace(h, source=_inside(h.source, path))
        for h in signals.scan(masked, knowledge, rank_hosts)
    ]
    lagging = (diagnosis.get("hang") or {}).get("lagging_ranks") or ()
    gpus = signals.gpu_map(masked, knowledge, rank_hosts)
    hits += signals.silent_ranks(lagging, rank_hosts, knowledge.silent_label, gpus)
    return replace(record, signals=tuple(hits))


def _inside(source: str, job: str) -> str:
    """A file's path within its job (`gpu-node05/dmesg.txt`): the report names the job too."""
    root = job.rstrip(os.sep) + os.sep
    return source[len(root) :] if source.startswith(root) else source


def _rules_by_id(options: Options) -> Mapping[str, Any]:
    from triage import knowledge

    return {r.id: r for r in knowledge.load(options.extra_rules_dirs).rules}


def outcome_of(diagnosis: Mapping[str, Any]) -> tuple[str, str]:
    """The job's outcome id and why; a diagnosis from before `outcome` existed is "failed"
    when it names a symptom, else "unknown"."""
    outcome = diagnosis.get("outcome") or {}
    if isinstance(outcome, Mapping) and outcome.get("id"):
        return str(outcome["id"]), str(outcome.get("why") or "")
    if diagnosis.get("symptoms"):
        return "failed", "a symptom was named (no outcome in this diagnosis)"
    return "unknown", "no symptom named (no outcome in this diagnosis)"


def record_of(
    path: str,
    diagnosis: Mapping[str, Any],
    knowledge: FleetKnowledge,
    rules: Mapping[str, Any],
) -> JobRecord:
    """The fleet's record of a diagnosis (the ★ JSON), signals aside."""
    outcome, why = outcome_of(diagnosis)
    symptom = _label(diagnosis.get("symptoms"))
    root = _label(diagnosis.get("root_causes"))
    fixes = diagnosis.get("fix_patterns") or []
    fix = _label(fixes)
    action = ""
    if fixes and fixes[0].get("actions"):
        action = str(fixes[0]["actions"][0])
    first = diagnosis.get("first_failure") or {}
    culprits = tuple(int(r) for r in diagnosis.get("culprit_ranks") or ())
    hosts = _hosts(diagnosis, culprits, first)
    return JobRecord(
        job=path,
        outcome=outcome,
        outcome_why=why,
        summary=str(diagnosis.get("summary") or ""),
        symptom=symptom,
        root_cause=root,
        mechanism=mechanism(diagnosis, rules, root, symptom),
        fix=fix,
        fix_action=action,
        culprit_ranks=culprits,
        hosts=hosts,
        job_time=_job_time(diagnosis),
        first_line=_first_line(first.get("text")),
    )


def _label(items: Any) -> Label | None:
    if not items:
        return None
    top = items[0]
    return Label(str(top["id"]), str(top.get("name") or ""), float(top.get("score") or 0.0))


def _hosts(
    diagnosis: Mapping[str, Any], culprits: Sequence[int], first: Mapping[str, Any]
) -> tuple[HostPart, ...]:
    ranks: dict[str, set[int]] = {}
    for item in diagnosis.get("inputs") or ():
        host = item.get("host")
        if host:
            ranks.setdefault(host, set())
            if item.get("rank") is not None:
                ranks[host].add(int(item["rank"]))
    culprit_hosts = {h for h, rs in ranks.items() if rs & set(culprits)}
    if not culprit_hosts and first.get("host") and (culprits or first.get("rank") is not None):
        culprit_hosts = {str(first["host"])}  # a culprit named, its inputs' hosts unknown
        ranks.setdefault(str(first["host"]), set())
    return tuple(HostPart(h, tuple(sorted(ranks[h])), h in culprit_hosts) for h in sorted(ranks))


def mechanism(
    diagnosis: Mapping[str, Any], rules: Mapping[str, Any], root: Label | None, sym: Label | None
) -> str:
    """What names the mechanism: of the rules quoted as evidence, the one that weighs the top
    root cause (else symptom) most, a consequence rule (cascade) only when nothing else
    matched; without a rule, the first failure's line as a template (numbers, ids and paths
    masked, as the neighbour index does)."""
    best: tuple[float, int, str] | None = None
    for n, ev in enumerate(diagnosis.get("evidence") or ()):
        rule = rules.get(str(ev.get("why") or ""))
        if rule is None:
            continue
        weight = rule.root_cause.get(root.id, 0.0) if root else 0.0
        weight += 0.5 * (rule.symptom.get(sym.id, 0.0) if sym else 0.0)
        if rule.cascade:
            weight -= 10.0
        candidate = (weight, -n, rule.id)
        if best is None or candidate > best:
            best = candidate
    if best is not None:
        return f"rule:{best[2]}"
    text = _first_line((diagnosis.get("first_failure") or {}).get("text"))
    if not text:
        return ""
    from triage.classify.signature import mask

    return "template:" + mask(text)[:160]


def _first_line(text: Any) -> str:
    if not text:
        return ""
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
    # A traceback's last line says what was raised; its first says only "Traceback".
    line = lines[-1] if lines and lines[0].startswith("Traceback") else (lines[0] if lines else "")
    return line[:300]


def _job_time(diagnosis: Mapping[str, Any]) -> float | None:
    """When the job failed (its first failure), else its last dated line."""
    first = (diagnosis.get("first_failure") or {}).get("time")
    if first:
        return _epoch(first)
    times = [t.get("time") for t in diagnosis.get("timeline") or () if t.get("time")]
    return max((e for e in (_epoch(t) for t in times) if e is not None), default=None)


def _epoch(iso: str) -> float | None:
    try:
        return datetime.fromisoformat(iso).timestamp()
    except (TypeError, ValueError):
        return None
