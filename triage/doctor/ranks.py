"""Cross-rank checks: every rank's facts, gathered over the job's store, compared on rank 0.

Facts travel through the c10d store (the one `init_process_group` rendezvoused on), not a
collective: a collective waits for every rank, so one rank that never arrives would hang all of
them and leave nobody able to say which rank it was. Each rank writes its key; rank 0 polls for
all keys until a deadline and names the ranks whose key never came; then it publishes the
verdict, which the other ranks wait for (with a deadline too) to exit with the same code.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from triage.analysis.ranks import format_ranks
from triage.doctor.checks import run_checks
from triage.doctor.knowledge import Knowledge
from triage.doctor.report import PreflightFinding

_POLL_S = 0.05
_calls = 0  # each check() in a process gets its own keys, so a second call never reads the first


def _namespace(env: Mapping[str, str]) -> str:
    global _calls
    _calls += 1
    run = env.get("TORCHELASTIC_RUN_ID", "run")
    restart = env.get("TORCHELASTIC_RESTART_COUNT", "0")
    return f"triage-doctor/{run}/{restart}/{_calls}"


def exchange(
    store: Any,
    rank: int,
    world_size: int,
    facts: Mapping[str, Any],
    timeout: float,
    env: Mapping[str, str],
) -> tuple[str, dict[int, dict[str, Any]]]:
    """Write this rank's facts; on rank 0 return everyone's that arrived before the deadline."""
    ns = _namespace(env)
    store.set(f"{ns}/facts/{rank}", json.dumps(facts))
    if rank != 0:
        return ns, {}
    keys = {r: f"{ns}/facts/{r}" for r in range(world_size)}
    arrived: set[int] = set()
    deadline = time.monotonic() + timeout
    while True:
        for r, key in keys.items():
            if r not in arrived and store.check([key]):
                arrived.add(r)
        if len(arrived) == world_size or time.monotonic() > deadline:
            break
        time.sleep(_POLL_S)
    return ns, {r: json.loads(store.get(keys[r])) for r in sorted(arrived)}


def publish_verdict(store: Any, ns: str, exit_code: int, summary: str) -> None:
    store.set(f"{ns}/verdict", json.dumps({"exit_code": exit_code, "summary": summary}))


def wait_verdict(store: Any, ns: str, timeout: float) -> dict[str, Any] | None:
    deadline = time.monotonic() + timeout
    key = f"{ns}/verdict"
    while time.monotonic() < deadline:
        if store.check([key]):
            return json.loads(store.get(key))
        time.sleep(_POLL_S)
    return None


# --------------------------------------------------------------------------- comparing


def _who(ranks: Sequence[int], facts: Mapping[int, Mapping[str, Any]]) -> str:
    hosts = sorted({str(facts[r].get("hostname")) for r in ranks})
    return f"rank {format_ranks(sorted(ranks))} ({', '.join(hosts)})"


def _groups(values: Mapping[int, str | None]) -> list[tuple[str | None, list[int]]]:
    """Ranks grouped by value, biggest group first (ties: lowest rank first)."""
    by: dict[str | None, list[int]] = defaultdict(list)
    for r, v in sorted(values.items()):
        by[v].append(r)
    return sorted(by.items(), key=lambda kv: (-len(kv[1]), kv[1][0]))


def _shown(value: str | None) -> str:
    return "not installed" if value is None else value


def compare(
    facts: Mapping[int, Mapping[str, Any]],
    world_size: int,
    k: Knowledge,
    timeout: float,
) -> list[PreflightFinding]:
    """Findings about the whole job: ranks missing, versions, env, hosts, devices."""
    out: list[PreflightFinding] = []
    missing = [r for r in range(world_size) if r not in facts]
    if missing:
        out.append(
            k.finding(
                "rank-missing",
                missing=format_ranks(missing),
                timeout=timeout,
                answered=len(facts),
                world_size=world_size,
                evidence=(f"answered: rank {format_ranks(sorted(facts))}",),
                ranks=tuple(missing),
            )
        )
    if not facts:
        return out
    out += _world_size(facts, world_size, k)
    out += _versions(facts, k)
    out += _env(facts, k)
    out += _hosts(facts, k)
    out += _devices(facts, k)
    return out


def _world_size(
    facts: Mapping[int, Mapping[str, Any]], world_size: int, k: Knowledge
) -> list[PreflightFinding]:
    out: list[PreflightFinding] = []
    said = {r: str(f.get("world_size")) for r, f in facts.items()}
    groups = _groups(said)
    if len(groups) > 1:
        parts = "; ".join(f"{_who(rs, facts)}: WORLD_SIZE={v}" for v, rs in groups)
        out.append(
            k.finding(
                "world-size-disagrees",
                evidence=(parts,),
                ranks=tuple(r for _, rs in groups[1:] for r in rs),
            )
        )
    per_machine: dict[str, list[int]] = defaultdict(list)
    for r, f in facts.items():
        per_machine[str(f.get("machine"))].append(r)
    for ranks in per_machine.values():
        declared = {facts[r].get("local_world_size") for r in ranks} - {None}
        if len(declared) == 1 and len(facts) == world_size:
            # only when every rank answered (a missing rank is reported as such already)
            (n,) = declared
            if n != len(ranks):
                out.append(
                    k.finding(
                        "local-world-size",
                        who=_who(ranks, facts),
                        count=len(ranks),
                        declared=n,
                        evidence=(f"ranks on that machine: {format_ranks(sorted(ranks))}",),
                        ranks=tuple(sorted(ranks)),
                    )
                )
    return out


def _versions(facts: Mapping[int, Mapping[str, Any]], k: Knowledge) -> list[PreflightFinding]:
    out: list[PreflightFinding] = []
    keys = sorted({key for f in facts.values() for key in f.get("versions", {})})
    for key in keys:
        values = {r: f.get("versions", {}).get(key) for r, f in facts.items()}
        groups = _groups(values)
        if len(groups) < 2:
            continue
        (want, majority), rest = groups[0], groups[1:]
        odd = [r for _, rs in rest for r in rs]
        parts = [f"{_who(rs, facts)}: {key} {_shown(v)}" for v, rs in groups]
        if want is None:
            fid = "version-missing"
        elif key in ("cuda", "torch"):
            fid = "version-torch"
        elif key == "driver":
            fid = "version-driver"
        else:
            fid = "version-package"
        out.append(
            k.finding(
                fid,
                severity="warning" if key in k.mild_version_skew else None,
                key=key,
                who=_who(odd, facts),
                has="has" if len(rest) == 1 else "have",
                theirs=", ".join(_shown(v) for v, _ in rest),
                n=len(majority),
                majority=_shown(want),
                want=want,
                torch=facts[majority[0]]["versions"].get("torch"),
                evidence=tuple(parts),
                ranks=tuple(sorted(odd)),
            )
        )
    return out


def _env(facts: Mapping[int, Mapping[str, Any]], k: Knowledge) -> list[PreflightFinding]:
    out: list[PreflightFinding] = []
    names = sorted({n for f in facts.values() for n in f.get("env", {})} - k.per_rank)
    for name in names:
        values = {r: f.get("env", {}).get(name) for r, f in facts.items()}
        groups = _groups(values)
        if len(groups) < 2:
            continue
        (want, majority), rest = groups[0], groups[1:]
        odd = [r for _, rs in rest for r in rs]
        launch = name in k.launch_vars or name.startswith(k.launch_prefixes)

        fid = ("launch-env-skew" if launch else "env-skew") + ("" if want is not None else "-unset")
        out.append(
            k.finding(
                fid,
                severity="error" if name in k.must_match else None,
                var=name,
                name=name,
                who=_who(odd, facts),
                theirs=", ".join(_said(name, v) for v, _ in rest),
                n=len(majority),
                want=_said(name, want),
                evidence=tuple(f"{_who(rs, facts)}: {_said(name, v)}" for v, rs in groups),
                ranks=tuple(sorted(odd)),
            )
        )
    return out


def _said(name: str, value: str | None) -> str:
    return f"{name}={value}" if value is not None else f"{name} not set"


def _hosts(facts: Mapping[int, Mapping[str, Any]], k: Knowledge) -> list[PreflightFinding]:
    out: list[PreflightFinding] = []
    machines: dict[str, set[str]] = defaultdict(set)
    for f in facts.values():
        machines[str(f.get("hostname"))].add(str(f.get("machine")))
    for host, ids in sorted(machines.items()):
        if len(ids) > 1:
            ranks = [r for r, f in facts.items() if f.get("hostname") == host]
            out.append(
                k.finding(
                    "hostname-clash",
                    machines=len(ids),
                    host=host,
                    evidence=(f"ranks on machines called {host}: {format_ranks(sorted(ranks))}",),
                    ranks=tuple(sorted(ranks)),
                    hosts=(host,),
                )
            )
    return out


def _devices(facts: Mapping[int, Mapping[str, Any]], k: Knowledge) -> list[PreflightFinding]:
    out: list[PreflightFinding] = []
    used: dict[tuple[str, str], list[int]] = defaultdict(list)
    for r, f in facts.items():
        if f.get("device"):
            used[(str(f.get("machine")), str(f["device"]))].append(r)
    for (_machine, device), ranks in sorted(used.items()):
        if len(ranks) < 2:
            continue
        how = sorted({str(facts[r].get("device_from")) for r in ranks})
        visible = "; ".join(
            f"rank {r}: LOCAL_RANK={facts[r].get('local_rank')} "
            f"CUDA_VISIBLE_DEVICES={facts[r].get('env', {}).get('CUDA_VISIBLE_DEVICES', 'unset')}"
            for r in sorted(ranks)
        )
        out.append(
            k.finding(
                "duplicate-gpu",
                who=_who(ranks, facts),
                device=device,
                evidence=(visible, f"device found by {', '.join(how)}"),
                ranks=tuple(sorted(ranks)),
            )
        )
    return out


def per_rank_findings(
    facts: Mapping[int, Mapping[str, Any]], k: Knowledge
) -> list[PreflightFinding]:
    """The local checks run on every rank's facts, merged: one finding names all its ranks."""
    merged: dict[tuple[str, ...], tuple[PreflightFinding, set[int], set[str]]] = {}
    for r, f in sorted(facts.items()):
        for finding in run_checks(f, k):
            key = (finding.check, finding.severity, finding.title, finding.action)
            _, ranks, hosts = merged.setdefault(key, (finding, set(), set()))
            ranks.add(r)
            hosts.add(str(f.get("hostname")))
    return [
        replace(finding, ranks=tuple(sorted(ranks)), hosts=tuple(sorted(hosts)))
        for finding, ranks, hosts in merged.values()
    ]
