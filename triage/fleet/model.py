"""The fleet's data: one record per job (what a worker sends back and the store keeps), and
what the aggregation makes of many (groups, host statistics, the report).

A job record is small on purpose: the aggregation reads only these, never a bundle again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SCHEMA = "triage.fleet/1"


@dataclass(frozen=True)
class Label:
    id: str
    name: str
    score: float = 0.0


@dataclass(frozen=True)
class HostPart:
    """One host's part in a job: its ranks, and whether one of them started the failure."""

    host: str
    ranks: tuple[int, ...] = ()
    culprit: bool = False


@dataclass(frozen=True)
class SignalHit:
    """A hardware-ish line of a job, on a host (and a GPU when the logs say which)."""

    signal: str  # the signal's id in rules/fleet/fleet.yaml, or "silent_rank"
    label: str
    host: str
    gpu: str | None = None
    rank: int | None = None
    source: str = ""
    line: int | None = None
    text: str = ""


@dataclass(frozen=True)
class JobRecord:
    """What the fleet keeps of one job."""

    job: str  # the path it was read from
    digest: str = ""
    error: str | None = None  # why the bundle could not be read; then nothing else is known
    outcome: str = "unknown"
    outcome_why: str = ""
    summary: str = ""
    symptom: Label | None = None
    root_cause: Label | None = None
    mechanism: str = ""  # the rule that names the mechanism, or the message's template
    fix: Label | None = None
    fix_action: str = ""
    culprit_ranks: tuple[int, ...] = ()
    hosts: tuple[HostPart, ...] = ()
    signals: tuple[SignalHit, ...] = ()
    job_time: float | None = None  # when it happened (its logs' clock; else the files' mtime)
    first_line: str = ""  # the first failure's line, for the example jobs

    @property
    def name(self) -> str:
        import os

        return os.path.basename(self.job.rstrip("/")) or self.job

    def to_row(self) -> dict[str, Any]:
        """JSON-ready (what travels from a worker and what the store keeps)."""

        def label(x: Label | None) -> dict[str, Any] | None:
            return None if x is None else {"id": x.id, "name": x.name, "score": x.score}

        return {
            "job": self.job,
            "digest": self.digest,
            "error": self.error,
            "outcome": self.outcome,
            "outcome_why": self.outcome_why,
            "summary": self.summary,
            "symptom": label(self.symptom),
            "root_cause": label(self.root_cause),
            "mechanism": self.mechanism,
            "fix": label(self.fix),
            "fix_action": self.fix_action,
            "culprit_ranks": list(self.culprit_ranks),
            "hosts": [
                {"host": h.host, "ranks": list(h.ranks), "culprit": h.culprit} for h in self.hosts
            ],
            "signals": [
                {
                    "signal": s.signal,
                    "label": s.label,
                    "host": s.host,
                    "gpu": s.gpu,
                    "rank": s.rank,
                    "source": s.source,
                    "line": s.line,
                    "text": s.text,
                }
                for s in self.signals
            ],
            "job_time": self.job_time,
            "first_line": self.first_line,
        }

    @staticmethod
    def from_row(row: dict[str, Any]) -> JobRecord:
        def label(x: Any) -> Label | None:
            if not isinstance(x, dict) or not x.get("id"):
                return None
            return Label(str(x["id"]), str(x.get("name") or ""), float(x.get("score") or 0.0))

        return JobRecord(
            job=str(row.get("job") or ""),
            digest=str(row.get("digest") or ""),
            error=row.get("error"),
            outcome=str(row.get("outcome") or "unknown"),
            outcome_why=str(row.get("outcome_why") or ""),
            summary=str(row.get("summary") or ""),
            symptom=label(row.get("symptom")),
            root_cause=label(row.get("root_cause")),
            mechanism=str(row.get("mechanism") or ""),
            fix=label(row.get("fix")),
            fix_action=str(row.get("fix_action") or ""),
            culprit_ranks=tuple(int(r) for r in row.get("culprit_ranks") or ()),
            hosts=tuple(
                HostPart(str(h["host"]), tuple(h.get("ranks") or ()), bool(h.get("culprit")))
                for h in row.get("hosts") or ()
            ),
            signals=tuple(
                SignalHit(
                    signal=str(s["signal"]),
                    label=str(s.get("label") or s["signal"]),
                    host=str(s["host"]),
                    gpu=s.get("gpu"),
                    rank=s.get("rank"),
                    source=str(s.get("source") or ""),
                    line=s.get("line"),
                    text=str(s.get("text") or ""),
                )
                for s in row.get("signals") or ()
            ),
            job_time=row.get("job_time"),
            first_line=str(row.get("first_line") or ""),
        )


@dataclass(frozen=True)
class StoredJob:
    """A record as the store holds it: with the run that first read it."""

    record: JobRecord
    run: int
    seen_at: float


@dataclass(frozen=True)
class ExampleJob:
    name: str
    path: str
    when: float | None
    line: str


@dataclass(frozen=True)
class Group:
    """Failures that share a mechanism: outcome, symptom, root cause, rule or template."""

    key: str
    outcome: str
    symptom: Label | None
    root_cause: Label | None
    mechanism: str
    count: int
    first_seen: float | None
    last_seen: float | None
    examples: tuple[ExampleJob, ...]
    fix: Label | None
    fix_action: str
    new: bool  # no job of it was known before this run
    hosts: tuple[tuple[str, int], ...] = ()  # culprit hosts, most often first
    jobs: tuple[str, ...] = ()  # every job's name, latest first (the JSON lists them)


@dataclass(frozen=True)
class SignalCount:
    signal: str
    label: str
    jobs: int  # jobs in which it showed on this host (or GPU)


@dataclass(frozen=True)
class GpuStat:
    gpu: str
    jobs: int  # jobs in which a line named this GPU with a signal
    culprit_jobs: int
    signals: tuple[SignalCount, ...]


@dataclass(frozen=True)
class HostStat:
    """A host against the fleet: culprit in `culprit_jobs` of the `jobs` it took part in."""

    host: str
    jobs: int
    culprit_jobs: int
    rate: float
    p_value: float | None  # None: too few jobs to test
    adjusted_p: float | None
    flagged: bool
    signals: tuple[SignalCount, ...] = ()
    gpus: tuple[GpuStat, ...] = ()
    evidence: tuple[SignalHit, ...] = ()  # the lines behind a flag, with their jobs
    evidence_jobs: tuple[str, ...] = ()  # job name of each evidence line
    groups: tuple[tuple[str, int], ...] = ()  # group key -> culprit jobs here


@dataclass(frozen=True)
class DayCount:
    day: str  # YYYY-MM-DD (UTC)
    jobs: int
    failures: int
    by_outcome: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class Unreadable:
    name: str
    path: str
    error: str


@dataclass(frozen=True)
class RunInfo:
    run: int
    jobs_dir: str
    found: int  # entries in the folder
    new: int  # read this run
    known: int  # already in the store, not read again
    errors: int


@dataclass(frozen=True)
class FleetReport:
    run: RunInfo
    db: str
    total_jobs: int
    outcomes: tuple[tuple[str, int], ...]  # outcome -> jobs, every job in the store
    groups: tuple[Group, ...]
    hosts: tuple[HostStat, ...]
    base_rate: float
    test: str
    alpha: float
    min_jobs: int
    tested_hosts: int
    days: tuple[DayCount, ...]
    unreadable: tuple[Unreadable, ...]
    generated: float = 0.0
    failure_outcomes: tuple[str, ...] = field(default=("failed", "hung"))

    @property
    def flagged(self) -> tuple[HostStat, ...]:
        return tuple(h for h in self.hosts if h.flagged)
