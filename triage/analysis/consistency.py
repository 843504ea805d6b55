"""Consistency across ranks and hosts: versions, key env vars, NCCL transports, world sizes.

A job whose nodes run different torch/NCCL/CUDA builds, or where one node falls back to the
Socket transport while the others use InfiniBand, fails in ways no single rank's log explains.
Each value is keyed by where it was seen (rank, else host, else the file), so the report can
say "rank 3 on node07 has NCCL 2.18.1, the other 15 have 2.21.5".
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from triage import regex_cache
from triage.analysis.ranks import RankIndex, event_rank, ranks_named
from triage.knowledge.agreement import AgreedSettings
from triage.model import (
    EnvReport,
    EventKind,
    EvidenceRef,
    Finding,
    FindingKind,
    FlightRecorderDump,
    NcclLineFacts,
    ParsedSource,
    SettingFacts,
)

_NCCL_KINDS = (EventKind.NCCL_INFO, EventKind.NCCL_COMM, EventKind.NCCL_WARN)


@dataclass
class Observed:
    """name -> value -> where it was seen (ranks or hosts) and one evidence line."""

    values: dict[str, dict[str, set[str]]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(set))
    )
    evidence: dict[tuple[str, str], EvidenceRef] = field(default_factory=dict)
    ranks: dict[tuple[str, str], set[int]] = field(default_factory=lambda: defaultdict(set))

    def add(self, name: str, value: str, where: str, rank: int | None, ev: EvidenceRef) -> None:
        value = value.strip()
        if not value:
            return
        self.values[name][value].add(where)
        self.evidence.setdefault((name, value), ev)
        if rank is not None:
            self.ranks[(name, value)].add(rank)


@dataclass
class ConsistencyAnalysis:
    findings: list[Finding] = field(default_factory=list)
    facts: dict[str, str] = field(default_factory=dict)  # majority versions: torch, nccl, cuda
    transports: dict[str, str] = field(default_factory=dict)  # where -> transport
    # rank -> the culprit signal it gave (`rules/culprit.yaml`, group settings)
    suspects: dict[int, set[str]] = field(default_factory=dict)


def analyze(
    parsed: Sequence[ParsedSource], index: RankIndex, agreed: AgreedSettings
) -> ConsistencyAnalysis:
    """Every setting `agreed` names, compared across the ranks and hosts that report it."""
    out = ConsistencyAnalysis()
    versions = Observed()
    env = Observed()
    transport = Observed()
    comm_sizes: dict[str, Counter[int]] = defaultdict(Counter)
    for ps in parsed:
        for ev in ps.events:
            payload = ev.payload
            if not (
                isinstance(payload, EnvReport)
                or (isinstance(payload, FlightRecorderDump) and payload.comm_lib_version)
                or ev.kind in _NCCL_KINDS
            ):
                continue  # nothing below reads it: skip the per-event bookkeeping
            rank = event_rank(ev, index, ps.source.rank)
            host = (
                ev.host
                or ps.source.host
                or (index.host_of_rank.get(rank) if rank is not None else None)
            )
            where = (
                f"rank {rank}" if rank is not None else (f"host {host}" if host else ps.source.path)
            )
            eref = EvidenceRef(
                ev.source, ev.line, rank, ev.text.splitlines()[0][:200] if ev.text else ""
            )
            if isinstance(payload, EnvReport):
                for key in agreed.versions:
                    v = payload.facts.get(key) or payload.packages.get(key)
                    if v:
                        versions.add(key, _normalise(key, v), where, rank, eref)
                for key, v in payload.env_vars.items():
                    if agreed.compares_env(key):
                        env.add(key, v, where, rank, eref)
                continue
            if isinstance(payload, FlightRecorderDump) and payload.comm_lib_version:
                versions.add("nccl", payload.comm_lib_version, where, rank, eref)
                continue
            if isinstance(payload, NcclLineFacts):
                # what the NCCL parser read from the line
                if payload.nccl_version:
                    # NCCL prints the version once per process: key it by the process
                    versions.add(
                        "nccl", _normalise("nccl", payload.nccl_version), where, rank, eref
                    )
                if payload.network:
                    twhere = f"host {host}" if host else where
                    transport.add("NCCL transport", payload.network, twhere, rank, eref)
                    out.transports[twhere] = payload.network
                if ev.kind is EventKind.NCCL_COMM and payload.nranks and payload.comm_id:
                    # the communicator's size and id
                    comm_sizes[payload.comm_id][payload.nranks] += 1
    for name, by_value in versions.values.items():
        _merge_spellings(by_value, versions, name)
        majority = max(by_value.items(), key=lambda kv: len(kv[1]))[0]
        out.facts[name] = majority
        if _places_disagree(by_value):
            out.findings.append(
                _mismatch(FindingKind.VERSION_MISMATCH, name, by_value, versions, out)
            )
    for name, by_value in env.values.items():
        if _places_disagree(by_value):
            out.findings.append(_mismatch(FindingKind.ENV_MISMATCH, name, by_value, env, out))
    if _places_disagree(transport.values.get("NCCL transport", {})):
        out.findings.append(
            _mismatch(
                FindingKind.TRANSPORT_MISMATCH,
                "NCCL transport",
                transport.values["NCCL transport"],
                transport,
                out,
            )
        )
    for comm, sizes in comm_sizes.items():
        if len(sizes) > 1:
            out.findings.append(
                Finding(
                    kind=FindingKind.ENV_MISMATCH,
                    summary=f"communicator {comm}: ranks disagree on its size ({dict(sizes)})",
                    facts=SettingFacts(
                        name="nranks", by_value={str(k): v for k, v in sizes.items()}
                    ),
                )
            )
    ws = index.world_sizes
    real = {k: v for k, v in ws.items() if v > 0}
    if len(real) > 1 and "WORLD_SIZE" not in env.values:
        out.findings.append(
            Finding(
                kind=FindingKind.ENV_MISMATCH,
                summary=f"the inputs claim different world sizes: {sorted(real)}",
                facts=SettingFacts(
                    name="world_size", by_value={str(k): v for k, v in real.items()}
                ),
            )
        )
    return out


def _places_disagree(by_value: Mapping[str, set[str]]) -> bool:
    """Do two ranks or hosts report different values? Values that every place reporting one
    also reports (one process printing its NCCL transport under two names) are no mismatch."""
    per_place: dict[str, set[str]] = defaultdict(set)
    for value, wheres in by_value.items():
        for where in wheres:
            per_place[where].add(value)
    return len({frozenset(values) for values in per_place.values()}) > 1


def _merge_spellings(by_value: dict[str, set[str]], seen: Observed, name: str) -> None:
    """`2.3.0` (pip) and `2.3.0+cu121` (collect_env) of one install are one version."""
    for bare in [v for v in by_value if "+" not in v]:
        builds = [v for v in by_value if v.startswith(bare + "+")]
        if len(builds) == 1:
            by_value[builds[0]] |= by_value.pop(bare)
            seen.ranks[(name, builds[0])] |= seen.ranks.pop((name, bare), set())


def _mismatch(
    kind: FindingKind,
    name: str,
    by_value: dict[str, set[str]],
    seen: Observed,
    out: ConsistencyAnalysis,
) -> Finding:
    ordered = sorted(by_value.items(), key=lambda kv: -len(kv[1]))
    parts = []
    minority_ranks: set[int] = set()
    for i, (value, wheres) in enumerate(ordered):
        ranks = seen.ranks.get((name, value), set())
        who = ranks_named(ranks) if ranks else ", ".join(sorted(wheres)[:3])
        parts.append(f"{value} on {who}")
        if i > 0:
            minority_ranks |= ranks
    if len(ordered) > 1 and len(ordered[0][1]) > len(ordered[1][1]):
        for r in minority_ranks:
            out.suspects.setdefault(r, set()).add("settings_minority")
    label = {
        FindingKind.VERSION_MISMATCH: "versions",
        FindingKind.ENV_MISMATCH: "settings",
        FindingKind.TRANSPORT_MISMATCH: "transports",
    }[kind]
    return Finding(
        kind=kind,
        summary=f"{name} differs across ranks/hosts ({label}): " + "; ".join(parts[:4]),
        ranks=tuple(sorted(minority_ranks)),
        evidence=tuple(seen.evidence[(name, v)] for v, _ in ordered[:3]),
        facts=SettingFacts(name=name, by_value={v: sorted(w) for v, w in ordered}),
    )


_DOTTED = regex_cache.compile(r"\d+(?:\.\d+)+(?:\+\w+)?")


def _normalise(name: str, v: str) -> str:
    """`2.13.0+cu124 (built ...)` -> `2.13.0+cu124`; NCCL `2.21.5+cuda12.4` -> `2.21.5`.

    Different reports spell one version differently; compare the builds, not the prose.
    """
    m = _DOTTED.search(v)
    if not m:
        return v.strip()
    got = m.group(0)
    return got.split("+", 1)[0] if name == "nccl" else got
