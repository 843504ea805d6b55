"""Failures grouped by mechanism, outcomes counted, jobs per day: from the stored rows only.

A group is the jobs that failed the same way: the same outcome, top symptom, top root cause
and the same rule (or, with no rule, the same message template). A GPU fault on a host the
fleet flagged is grouped by that host's fault (`groups.flagged_host`). Jobs whose outcome is
not a failure (`failure_outcomes`; both in rules/fleet/fleet.yaml: healthy, stopped on
purpose, logs that end early, no evidence) are counted, never grouped.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Collection, Sequence
from datetime import datetime, timezone

from triage import taxonomy
from triage.fleet.knowledge import FleetKnowledge
from triage.fleet.model import (
    DayCount,
    ExampleJob,
    Group,
    JobRecord,
    Label,
    SignalHit,
    StoredJob,
)

OUTCOME_ORDER = ("failed", "hung", "incomplete", "stopped", "succeeded", "unknown")


def group_key(outcome: str, symptom: Label | None, root: Label | None, mechanism: str) -> str:
    return " | ".join(
        (outcome, symptom.id if symptom else "-", root.id if root else "-", mechanism or "-")
    )


def when(job: StoredJob) -> float:
    """When a job happened: its logs' clock, else when the fleet first read it."""
    return job.record.job_time if job.record.job_time is not None else job.seen_at


def flagged_host_signal(
    record: JobRecord, knowledge: FleetKnowledge, flagged: Collection[str]
) -> SignalHit | None:
    """The hardware signal (`groups.flagged_host` in rules/fleet/fleet.yaml, most specific
    first) the job showed on a flagged host its culprit ran on; None when there is none."""
    rule = knowledge.flagged_host
    if rule is None or not flagged:
        return None
    hosts = {h.host for h in record.hosts if h.culprit and h.host in flagged}
    shown = [s for s in record.signals if s.host in hosts and s.signal in rule.signals]
    return min(shown, key=lambda s: rule.signals.index(s.signal), default=None)


def job_labels(
    record: JobRecord, knowledge: FleetKnowledge, flagged: Collection[str]
) -> tuple[Label | None, str]:
    """The root cause and mechanism a job is grouped by: its own, or the flagged host's
    hardware fault when the fleet has seen it repeat there."""
    rule = knowledge.flagged_host
    signal = flagged_host_signal(record, knowledge, flagged)
    if rule is None or signal is None:
        return record.root_cause, record.mechanism
    name = taxonomy.load().root_causes[rule.root_cause].name
    score = record.root_cause.score if record.root_cause is not None else 0.0
    return Label(rule.root_cause, name, score), rule.mechanism.replace("{signal}", signal.label)


def groups(
    jobs: Sequence[StoredJob],
    run: int,
    knowledge: FleetKnowledge,
    flagged: Collection[str] = (),
) -> list[Group]:
    """The failure groups, most jobs first; `new` when no job of it was read before `run`.
    `flagged`: the hosts the fleet flagged (their repeated GPU faults group together)."""
    members: dict[str, list[StoredJob]] = defaultdict(list)
    labels: dict[str, tuple[Label | None, str]] = {}  # the key's root cause and mechanism
    for job in jobs:
        r = job.record
        if r.outcome in knowledge.failure_outcomes:
            root, mechanism = labels_of = job_labels(r, knowledge, flagged)
            key = group_key(r.outcome, r.symptom, root, mechanism)
            members[key].append(job)
            labels[key] = labels_of
    out = []
    for key, group in members.items():
        group.sort(key=when)
        top = group[-1].record  # the latest job speaks for the group (labels, fix)
        fixes = Counter((j.record.fix.id, j.record.fix.name) for j in group if j.record.fix)
        fix_id, fix_name = fixes.most_common(1)[0][0] if fixes else (None, "")
        action = next(
            (j.record.fix_action for j in reversed(group)
             if j.record.fix and j.record.fix.id == fix_id and j.record.fix_action),
            "",
        )  # fmt: skip
        culprit_hosts = Counter(h.host for j in group for h in j.record.hosts if h.culprit)
        examples = tuple(
            ExampleJob(j.record.name, j.record.job, when(j), j.record.first_line)
            for j in reversed(group[-knowledge.group_examples :])
        )
        out.append(
            Group(
                key=key,
                outcome=top.outcome,
                symptom=top.symptom,
                root_cause=labels[key][0],
                mechanism=labels[key][1],
                count=len(group),
                first_seen=when(group[0]),
                last_seen=when(group[-1]),
                examples=examples,
                fix=Label(fix_id, fix_name) if fix_id else None,
                fix_action=action,
                new=min(j.run for j in group) == run and run > 1,
                hosts=tuple(culprit_hosts.most_common()),
                jobs=tuple(j.record.name for j in reversed(group)),
            )
        )
    out.sort(key=lambda g: (-g.count, -(g.last_seen or 0.0), g.key))
    return out


def outcomes(jobs: Sequence[StoredJob]) -> list[tuple[str, int]]:
    counts = Counter(j.record.outcome for j in jobs)
    known = [(o, counts[o]) for o in OUTCOME_ORDER if counts.get(o)]
    return known + sorted((o, n) for o, n in counts.items() if o not in OUTCOME_ORDER)


def days(jobs: Sequence[StoredJob], knowledge: FleetKnowledge) -> list[DayCount]:
    """Jobs and failures per day (UTC), oldest first: the trend over days."""
    by_day: dict[str, Counter[str]] = defaultdict(Counter)
    for job in jobs:
        day = datetime.fromtimestamp(when(job), tz=timezone.utc).strftime("%Y-%m-%d")
        by_day[day][job.record.outcome] += 1
    return [
        DayCount(
            day=day,
            jobs=sum(c.values()),
            failures=sum(n for o, n in c.items() if o in knowledge.failure_outcomes),
            by_outcome=tuple((o, c[o]) for o in OUTCOME_ORDER if c.get(o)),
        )
        for day, c in sorted(by_day.items())
    ]
