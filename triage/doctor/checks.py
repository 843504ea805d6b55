"""Checks of one process's facts (see facts.py): pure functions of the facts and the knowledge.

Each check returns findings; `CHECKS` lists them (the runner knows no check by name). Rank 0
runs them on every rank's facts in a distributed run, so they must not look at this machine.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from triage.doctor.knowledge import EnvSpec, Knowledge, KnownBad, matches, version_tuple
from triage.doctor.report import PreflightFinding

Facts = Mapping[str, Any]
Check = Callable[[Facts, Knowledge], list[PreflightFinding]]

GIB = 2**30
MIB = 2**20


def _mib(n: float) -> str:
    return f"{n / GIB:.1f} GiB" if n >= GIB else f"{n / MIB:.0f} MiB"


def _cuda_tag(cuda: str) -> str:
    return cuda.replace(".", "")


# --------------------------------------------------------------------------- versions


def check_torch_import(facts: Facts, k: Knowledge) -> list[PreflightFinding]:
    error = facts.get("torch_import_error")
    if not error:
        return []
    if error.startswith("ModuleNotFoundError: No module named 'torch'"):
        # triage's default install has no torch of its own: the job's environment has one
        return [k.finding("torch-missing", evidence=(error,))]
    return [k.finding("torch-broken", evidence=(error,))]


def check_release_table(facts: Facts, k: Knowledge) -> list[PreflightFinding]:
    versions = facts.get("versions", {})
    torch, cuda, nccl = versions.get("torch"), versions.get("cuda"), versions.get("nccl")
    if not torch:
        return []
    out: list[PreflightFinding] = []
    gpus = facts.get("gpus") or []
    if not cuda and gpus:
        out.append(
            k.finding(
                "torch-cpu-build-on-gpus",
                torch=torch,
                gpus=len(gpus),
                release=torch.split("+")[0],
                evidence=(f"torch {torch}", f"GPUs: {', '.join(g['name'] for g in gpus)}"),
            )
        )
        return out
    expects = _expects_gpus(facts)
    if not cuda and expects and (facts.get("local_world_size") or 0) > 1:
        ranks = facts["local_world_size"]
        out.append(
            k.finding(
                "torch-cpu-build-expecting-gpus",
                torch=torch,
                per_node=ranks,
                expects=expects,
                release=torch.split("+")[0],
                evidence=(f"torch {torch}", f"LOCAL_WORLD_SIZE={ranks}", expects),
            )
        )
        return out
    if not cuda:
        return out
    release = k.release(torch)
    if release is None:
        newest = max(k.releases, key=lambda r: version_tuple(r.torch)).torch
        out.append(k.finding("torch-not-in-table", torch=torch, newest=newest))
        return out
    cuda_minor = ".".join(cuda.split(".")[:2])
    expected = release.nccl_by_cuda.get(cuda_minor)
    source = release.sources[0]
    if expected is None:
        out.append(
            k.finding(
                "no-nccl-pin",
                torch=release.torch,
                cuda=cuda_minor,
                known=", ".join(sorted(release.nccl_by_cuda)),
                source=source,
            )
        )
    elif nccl and version_tuple(nccl) != version_tuple(expected):
        major = cuda.split(".")[0]
        out.append(
            k.finding(
                "nccl-not-bundled",
                nccl=nccl,
                torch=torch,
                cuda=cuda_minor,
                expected=expected,
                major=major,
                evidence=(
                    f"torch {torch}, CUDA {cuda}",
                    f"NCCL {nccl} (from {facts.get('nccl_from', 'torch')})",
                    f"compatibility table: {release.checked}",
                ),
                source=source,
            )
        )
    packages = facts.get("packages", {})
    major = cuda.split(".")[0]
    for name in packages:
        if name.startswith("nvidia-nccl-cu") and name != f"nvidia-nccl-cu{major}":
            out.append(
                k.finding(
                    "nccl-cuda-major",
                    package=name,
                    version=packages[name],
                    cuda=cuda,
                    major=major,
                    evidence=(f"torch {torch} (CUDA {cuda})", f"{name}=={packages[name]}"),
                )
            )
    return out


def _expects_gpus(facts: Facts) -> str:
    """What says this node's job is meant to run on GPUs, though torch sees none ('' when
    nothing does: a CPU job with gloo is a job too)."""
    env = facts.get("env", {})
    said = []
    if env.get("CUDA_VISIBLE_DEVICES") not in (None, "", "-1"):
        said.append(f"CUDA_VISIBLE_DEVICES={env['CUDA_VISIBLE_DEVICES']}")
    nccl = sorted(n for n in env if n.startswith("NCCL_"))
    if nccl:
        said.append(f"{nccl[0]} is set")
    if facts.get("versions", {}).get("nvcc"):
        said.append(f"CUDA toolkit {facts['versions']['nvcc']} installed")
    if facts.get("device_files"):
        said.append("/dev/nvidia* present")
    return ", ".join(said)


def check_driver(facts: Facts, k: Knowledge) -> list[PreflightFinding]:
    versions = facts.get("versions", {})
    cuda, driver = versions.get("cuda"), versions.get("driver")
    if not cuda or not driver:
        return []
    major = cuda.split(".")[0]
    need = next((d for d in k.driver_minimum if d.cuda_major == major), None)
    if need is None or version_tuple(driver) >= version_tuple(need.driver):
        return []
    return [
        k.finding(
            "driver-too-old",
            driver=driver,
            cuda=cuda,
            major=major,
            need=need.driver,
            evidence=(f"torch {versions.get('torch')} built with CUDA {cuda}", f"driver {driver}"),
            source=need.source,
        )
    ]


def _when_holds(row: KnownBad, facts: Facts) -> tuple[bool, list[str]]:
    versions = facts.get("versions", {})
    env = facts.get("env", {})
    evidence: list[str] = []
    for key, cond in row.when.items():
        if key in ("torch", "cuda", "nccl", "driver", "nvcc"):
            have = versions.get(key)
            if not have or not matches(cond, have):
                return False, []
            evidence.append(f"{key} {have}")
        elif key == "gpu":
            names = [g["name"] for g in facts.get("gpus") or [] if cond in g["name"]]
            if not names:
                return False, []
            evidence.append(f"GPU {names[0]}")
        elif key == "installed":
            present = [p for p in cond if p in facts.get("packages", {})]
            if not present:
                return False, []
            evidence.append(f"installed: {', '.join(present)}")
        elif key == "env":
            for name, value in cond.items():
                if env.get(name) != value:
                    return False, []
                evidence.append(f"{name}={value}" if value is not None else f"{name} not set")
        elif key == "nvcc_major_differs":
            nvcc, cuda = versions.get("nvcc"), versions.get("cuda")
            if not nvcc or not cuda or nvcc.split(".")[0] == cuda.split(".")[0]:
                return False, []
            evidence.append(f"nvcc {nvcc} vs torch's CUDA {cuda}")
    return True, evidence


def check_known_bad(facts: Facts, k: Knowledge) -> list[PreflightFinding]:
    out: list[PreflightFinding] = []
    for row in k.known_bad:
        holds, evidence = _when_holds(row, facts)
        if holds:
            out.append(
                PreflightFinding(
                    check=f"known-bad:{row.id}",
                    severity=row.severity,
                    title=row.title,
                    action=row.action,
                    root_cause=row.root_cause,
                    fix_pattern=row.fix,
                    evidence=tuple(evidence),
                    source=row.source,
                )
            )
    return out


def check_requirements(facts: Facts, k: Knowledge) -> list[PreflightFinding]:
    out: list[PreflightFinding] = []
    for broken in facts.get("broken_requirements") or []:
        pkg, req, have = broken["package"], broken["requires"], broken["installed"]
        core = pkg == "torch" or req.startswith(("torch", "nvidia-nccl"))
        out.append(
            k.finding(
                "requirements",
                severity="error" if core else None,
                package=pkg,
                requires=req,
                installed=have,
                evidence=(f"{pkg} {facts.get('packages', {}).get(pkg, '?')} requires {req}",),
            )
        )
    return out


# --------------------------------------------------------------------------- devices, memory


def check_devices(facts: Facts, k: Knowledge) -> list[PreflightFinding]:
    out: list[PreflightFinding] = []
    env = facts.get("env", {})
    gpus = facts.get("gpus") or []
    visible_env = env.get("CUDA_VISIBLE_DEVICES")
    count = len(gpus) or int(facts.get("device_count") or 0)
    if visible_env is None and not count:
        return out  # a CPU job
    visible = [v.strip() for v in (visible_env or "").split(",") if v.strip()]
    if visible_env is None:
        visible = [g["index"] for g in gpus] or [str(i) for i in range(count)]
    dupes = sorted({v for v in visible if visible.count(v) > 1})
    if dupes:
        out.append(
            k.finding(
                "cuda-visible-duplicate",
                gpus=", ".join(dupes),
                evidence=(f"CUDA_VISIBLE_DEVICES={visible_env}",),
            )
        )
    if gpus and visible_env is not None:
        known = {g["index"] for g in gpus} | {g["uuid"] for g in gpus}
        missing = [v for v in visible if v not in known and not any(u.startswith(v) for u in known)]
        if missing:
            out.append(
                k.finding(
                    "cuda-visible-missing",
                    gpus=", ".join(missing),
                    count=len(gpus),
                    evidence=(f"CUDA_VISIBLE_DEVICES={visible_env}",),
                )
            )
    local_ws = facts.get("local_world_size")
    # a GPU listed twice is one GPU: `0,0` gives two ranks the same device, not two devices
    distinct = len(dict.fromkeys(visible))
    if local_ws is not None and local_ws > distinct:
        where = f"CUDA_VISIBLE_DEVICES={visible_env}" if visible_env is not None else "GPUs"
        twice = len(visible) > distinct
        out.append(
            k.finding(
                "gpus-per-node-listed-twice" if twice else "gpus-per-node",
                per_node=local_ws,
                distinct=distinct,
                listed=len(visible),
                evidence=(f"LOCAL_WORLD_SIZE={local_ws}", f"{where}: {distinct} distinct"),
            )
        )
    for g in gpus:
        total, free = g.get("memory_total_mib"), g.get("memory_free_mib")
        if total and free is not None and free < 0.1 * total:
            out.append(
                k.finding(
                    "gpu-memory-free",
                    gpu=g["index"],
                    free=free,
                    total=total,
                    evidence=(f"GPU {g['index']} {g['name']}: {free}/{total} MiB free",),
                )
            )
    return out


def check_shm(facts: Facts, k: Knowledge) -> list[PreflightFinding]:
    if "shm_size" not in facts:
        return []
    size = facts["shm_size"]
    if size is None:
        return [k.finding("shm-missing")]
    if size >= GIB:
        return []
    return [
        k.finding(
            "shm-small",
            severity="error" if size < 256 * MIB else None,
            size=_mib(size),
            evidence=(f"/dev/shm size {_mib(size)}, free {_mib(facts.get('shm_free') or 0)}",),
        )
    ]


def check_memlock(facts: Facts, k: Knowledge) -> list[PreflightFinding]:
    limit = facts.get("memlock")
    if limit is None or limit == "unlimited" or limit >= 64 * GIB:
        return []
    if facts.get("infiniband"):
        return [
            k.finding(
                "memlock-infiniband",
                limit=_mib(limit),
                evidence=(f"RLIMIT_MEMLOCK {limit} bytes", "/sys/class/infiniband has devices"),
            )
        ]
    return [k.finding("memlock-low", limit=_mib(limit))]


def check_host_memory(facts: Facts, k: Knowledge) -> list[PreflightFinding]:
    total, avail = facts.get("mem_total"), facts.get("mem_available")
    if not total or avail is None or avail >= 0.1 * total:
        return []
    return [
        k.finding(
            "host-memory",
            available=_mib(avail),
            total=_mib(total),
            evidence=(f"MemAvailable {_mib(avail)}, MemTotal {_mib(total)}",),
        )
    ]


# --------------------------------------------------------------------------- environment


def check_env_vars(facts: Facts, k: Knowledge) -> list[PreflightFinding]:
    env = facts.get("env", {})
    out: list[PreflightFinding] = []
    names = sorted(n for n in env if n.startswith(k.checked_prefixes))
    known = sorted(k.known_vars | set(k.checked))
    for name in names:
        value = env[name]
        if name in k.deprecated:
            use, source = k.deprecated[name]
            if use and use in env and env[use] != value:
                out.append(
                    k.finding(
                        "env-contradiction",
                        var=name,
                        name=name,
                        value=value,
                        use=use,
                        use_value=env[use],
                        evidence=(f"{name}={value}", f"{use}={env[use]}"),
                        source=source if source.startswith("http") else None,
                    )
                )
                continue
            out.append(
                k.finding(
                    "env-renamed" if use else "env-dropped",
                    var=name,
                    name=name,
                    use=use,
                    value=value,
                    evidence=(f"{name}={value}", source),
                )
            )
            continue
        if name not in k.known_vars and name not in k.checked:
            close = difflib.get_close_matches(name, known, n=1, cutoff=0.85)
            if close:
                out.append(
                    k.finding(
                        "env-misspelled",
                        var=name,
                        name=name,
                        close=close[0],
                        value=value,
                        evidence=(f"{name}={value}",),
                    )
                )
            else:
                out.append(
                    k.finding(
                        "env-unknown",
                        name=name,
                        evidence=(f"{name}={value}",),
                    )
                )
            continue
        spec = k.checked.get(name)
        if spec is not None and spec.kind != "interfaces":
            problem = value_problem(spec, value)
            if problem:
                out.append(
                    k.finding(
                        "env-value",
                        var=name,
                        name=name,
                        value=value,
                        problem=problem,
                        accepted=_accepted(spec),
                        evidence=(f"{name}={value}",),
                        source=k.sources.get("nccl" if name.startswith("NCCL_") else "torch"),
                    )
                )
    for rule in k.contradictions:
        holds = all(
            name in env and (want == "set" or env[name] == want) for name, want in rule.when.items()
        )
        if holds:
            out.append(
                k.finding(
                    "env-rule",
                    var=next(iter(rule.when)),
                    rule=rule.id,
                    title=rule.title,
                    action=rule.action,
                    evidence=tuple(f"{n}={env[n]}" for n in rule.when),
                    source=rule.source if rule.source.startswith("http") else None,
                )
            )
    return out


def _accepted(spec: EnvSpec) -> str:
    if spec.kind == "bool":
        return "0 or 1"
    if spec.kind == "int":
        lo = "" if spec.min is None else f">= {spec.min}"
        hi = "" if spec.max is None else f"<= {spec.max}"
        return "a whole number " + " and ".join(x for x in (lo, hi) if x)
    joined = ", ".join(spec.values)
    return f"one of {joined}" if spec.kind == "choice" else f"a comma list of {joined}"


def value_problem(spec: EnvSpec, value: str) -> str | None:
    """Why a value is not one the variable accepts, or None."""
    v = value.strip()
    if spec.kind == "bool":
        return None if v in ("0", "1") else "expected 0 or 1"
    if spec.kind == "int":
        try:
            n = int(v)
        except ValueError:
            return "expected a whole number"
        if spec.min is not None and n < spec.min:
            return f"below the minimum {spec.min}"
        if spec.max is not None and n > spec.max:
            return f"above the maximum {spec.max}"
        return None
    if spec.kind == "choice":
        if v.upper() in (x.upper() for x in spec.values):
            return None
        return f"not one of {', '.join(spec.values)}"
    if spec.kind == "list":
        body = v[1:] if v.startswith("^") else v
        # NCCL_ALGO/NCCL_PROTO also take per-collective forms (`allreduce:tree,ring;...`)
        items = [i.split(":")[-1] for part in body.split(";") for i in part.split(",")]
        wanted = {x.upper() for x in spec.values}
        bad = [i for i in (i.strip() for i in items) if i and i.upper() not in wanted]
        return f"unknown item(s) {', '.join(bad)}" if bad else None
    return None


def interface_problem(spec: EnvSpec, value: str, present: Sequence[str]) -> str | None:
    """Why an interface list matches nothing here (NCCL: prefixes, `=` exact, `^` exclude)."""
    if not value.strip():
        return None
    if spec.exact:  # gloo: exact names, each must exist
        missing = [n.strip() for n in value.split(",") if n.strip() and n.strip() not in present]
        return f"no interface named {', '.join(missing)}" if missing else None
    if value.startswith("^"):
        return None  # an exclusion list leaves the rest: nothing to check
    items = [i.strip() for i in value.split(",") if i.strip()]
    for item in items:
        if item.startswith("="):
            if item[1:] in present:
                return None
        elif any(name.startswith(item) for name in present):
            return None
    return "matches no interface"


def check_interfaces(facts: Facts, k: Knowledge) -> list[PreflightFinding]:
    env = facts.get("env", {})
    present = facts.get("interfaces") or []
    out: list[PreflightFinding] = []
    for name, spec in k.checked.items():
        if spec.kind != "interfaces" or name not in env:
            continue
        problem = interface_problem(spec, env[name], present)
        if problem:
            out.append(
                k.finding(
                    "socket-ifname",
                    name=name,
                    value=env[name],
                    problem=problem,
                    host=facts.get("hostname", "this host"),
                    interfaces=", ".join(present),
                    evidence=(f"{name}={env[name]}", f"interfaces: {', '.join(present)}"),
                    source=k.sources.get("nccl"),
                )
            )
    return out


def check_master(facts: Facts, k: Knowledge) -> list[PreflightFinding]:
    out: list[PreflightFinding] = []
    addr = facts.get("master_addr")
    if addr and addr.get("error"):
        out.append(
            k.finding(
                "master-addr",
                addr=addr["addr"],
                host=facts.get("hostname", "this host"),
                error=addr["error"],
                evidence=(f"MASTER_ADDR={addr['addr']}: {addr['error']}",),
            )
        )
    port = facts.get("master_port")
    if port and port.get("state") == "invalid":
        out.append(
            k.finding(
                "master-port-invalid",
                port=port["port"],
                evidence=(f"MASTER_PORT={port['port']}",),
            )
        )
    elif port and port.get("state") == "in_use":
        holder = port.get("holder")
        out.append(
            k.finding(
                "master-port-in-use-by" if holder else "master-port-in-use",
                port=port["port"],
                holder=holder,
                evidence=(
                    f"bind({port.get('addr') or '*'}:{port['port']}) failed: address in use",
                ),
            )
        )
    return out


CHECKS: tuple[Check, ...] = (
    check_torch_import,
    check_release_table,
    check_driver,
    check_known_bad,
    check_requirements,
    check_devices,
    check_shm,
    check_memlock,
    check_host_memory,
    check_env_vars,
    check_interfaces,
    check_master,
)


def run_checks(facts: Facts, k: Knowledge) -> list[PreflightFinding]:
    out: list[PreflightFinding] = []
    for check in CHECKS:
        out += check(facts, k)
    return out
