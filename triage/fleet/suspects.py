"""Which hosts (and GPUs) keep hosting the culprit: counts, a test, the evidence behind a flag.

For each host, n = jobs it took part in and k = jobs in which one of its ranks started the
failure (the diagnosis's culprit ranks). Under the null hypothesis every host is as likely as
the fleet as a whole to host the culprit: p0 = sum(k) / sum(n). A host is flagged when the
one-sided binomial tail P(X >= k | n, p0) is below `alpha` after Holm's step-down correction
over every host with at least `min_jobs` jobs, and k >= `min_culprit_jobs` (rules/fleet/
fleet.yaml). A host seen in few jobs is listed with its counts, never flagged: a failure or two
on a host that ran three jobs is what chance gives.

GPUs are named only where the logs say which (Xid PCI addresses, NCCL busIds): their signals
and culprit jobs are shown under their host; the test is per host, where the count is.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Sequence

from triage.fleet.knowledge import FleetKnowledge
from triage.fleet.model import GpuStat, HostStat, SignalCount, SignalHit, StoredJob

EVIDENCE_LINES = 8  # per flagged host: the lines shown behind the flag
LINES_PER_JOB = 2


def binomial_tail(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p), summed in log space (no overflow for large n)."""
    if k <= 0:
        return 1.0
    if k > n or p <= 0.0:
        return 0.0
    if p >= 1.0:
        return 1.0
    log_p, log_q = math.log(p), math.log1p(-p)
    terms = [
        math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * log_p
        + (n - i) * log_q
        for i in range(k, n + 1)
    ]  # fmt: skip
    top = max(terms)
    return min(1.0, math.exp(top) * sum(math.exp(t - top) for t in terms))


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (same order as given): family-wise error control
    that holds whatever the dependence between hosts."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [1.0] * m
    running = 0.0
    for position, i in enumerate(order):
        running = max(running, min(1.0, (m - position) * p_values[i]))
        adjusted[i] = running
    return adjusted


def _evidence(lines: list[tuple[SignalHit, str, bool]]) -> list[tuple[SignalHit, str, bool]]:
    """The lines behind a flag: from as many jobs as fit, the jobs this host started first,
    at most LINES_PER_JOB distinct lines of each (one line can carry two signals: Xid 48 is
    also an ECC error)."""
    by_job: dict[str, list[tuple[SignalHit, str, bool]]] = defaultdict(list)
    for item in lines:
        texts = {s.text for s, _, _ in by_job[item[1]]}
        if item[0].text not in texts:
            by_job[item[1]].append(item)
    jobs = sorted(by_job, key=lambda job: (not by_job[job][0][2], job))
    out: list[tuple[SignalHit, str, bool]] = []
    for job in jobs:
        out += by_job[job][:LINES_PER_JOB]
        if len(out) >= EVIDENCE_LINES:
            break
    return out[:EVIDENCE_LINES]


def host_stats(
    jobs: Sequence[StoredJob], knowledge: FleetKnowledge
) -> tuple[list[HostStat], float, int]:
    """Every host, flagged ones first; also the base rate p0 and how many hosts were tested."""
    rules = knowledge.suspects
    took_part: Counter[str] = Counter()
    culprit: Counter[str] = Counter()
    group_of: dict[str, Counter[str]] = defaultdict(Counter)
    signal_jobs: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    labels: dict[str, str] = {}
    gpu_jobs: dict[tuple[str, str], set[str]] = defaultdict(set)
    gpu_culprit: dict[tuple[str, str], set[str]] = defaultdict(set)
    gpu_signals: dict[tuple[str, str], dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    lines: dict[str, list[tuple[SignalHit, str, bool]]] = defaultdict(list)
    from triage.fleet.aggregate import group_key

    for job in jobs:
        r = job.record
        culprit_hosts = {h.host for h in r.hosts if h.culprit}
        for part in r.hosts:
            took_part[part.host] += 1
            if part.culprit:
                culprit[part.host] += 1
                group_of[part.host][group_key(r.outcome, r.symptom, r.root_cause, r.mechanism)] += 1
        culprit_ranks = set(r.culprit_ranks)
        for s in r.signals:
            key = s.signal if s.signal == "silent_rank" else f"{s.signal}:{s.label}"
            labels[key] = s.label
            signal_jobs[s.host][key].add(r.digest)
            lines[s.host].append((s, r.name, s.host in culprit_hosts))
            if s.gpu:
                gpu_jobs[(s.host, s.gpu)].add(r.digest)
                gpu_signals[(s.host, s.gpu)][key].add(r.digest)
                # a kernel line names the GPU but no rank: its host's part decides
                if (s.rank in culprit_ranks) if s.rank is not None else s.host in culprit_hosts:
                    gpu_culprit[(s.host, s.gpu)].add(r.digest)
    total_n = sum(took_part.values())
    base = sum(culprit.values()) / total_n if total_n else 0.0
    tested = sorted(h for h, n in took_part.items() if n >= rules.min_jobs)
    p_values = {h: binomial_tail(culprit[h], took_part[h], base) for h in tested}
    adjusted = dict(zip(tested, holm([p_values[h] for h in tested]), strict=True))

    def counts(by_signal: dict[str, set[str]]) -> tuple[SignalCount, ...]:
        return tuple(
            SignalCount(key.split(":", 1)[0], labels[key], len(d))
            for key, d in sorted(by_signal.items(), key=lambda kv: (-len(kv[1]), kv[0]))
        )

    out = []
    for host in took_part:
        flagged = (
            host in adjusted
            and adjusted[host] < rules.alpha
            and culprit[host] >= rules.min_culprit_jobs
        )
        gpus = tuple(
            GpuStat(gpu, len(gpu_jobs[(h, gpu)]), len(gpu_culprit[(h, gpu)]),
                    counts(gpu_signals[(h, gpu)]))
            for (h, gpu) in sorted(gpu_jobs)
            if h == host
        )  # fmt: skip
        shown = _evidence(lines[host])
        out.append(
            HostStat(
                host=host,
                jobs=took_part[host],
                culprit_jobs=culprit[host],
                rate=culprit[host] / took_part[host],
                p_value=p_values.get(host),
                adjusted_p=adjusted.get(host),
                flagged=flagged,
                signals=counts(signal_jobs[host]),
                gpus=gpus,
                evidence=tuple(s for s, _, _ in shown),
                evidence_jobs=tuple(name for _, name, _ in shown),
                groups=tuple(group_of[host].most_common()),
            )
        )
    out.sort(
        key=lambda h: (
            not h.flagged,
            h.adjusted_p if h.adjusted_p is not None else 2.0,
            -h.culprit_jobs,
            h.host,
        )
    )
    return out, base, len(tested)
