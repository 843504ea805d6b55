"""What one process can learn about its node and itself, as plain JSON-able data.

Ranks send these facts to rank 0 over the process group's store, so everything is a str, int,
float, bool, list or dict. Every probe is bounded (a timeout on each tool run, a thread with a
deadline for DNS) and a probe that fails leaves its fact out and says why in `probe_problems`.
"""

from __future__ import annotations

import contextlib
import glob
import importlib.metadata as md
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from triage.snapshot.capture import allowed_env

# Distribution names of the frameworks whose versions matter, as pip knows them.
FRAMEWORKS = (
    "deepspeed",
    "megatron-core",
    "colossalai",
    "transformer-engine",
    "transformer-engine-torch",
    "apex",
    "flash-attn",
    "accelerate",
    "transformers",
)
_TOOL_TIMEOUT = 10.0


def _dist_version(name: str) -> str | None:
    with contextlib.suppress(md.PackageNotFoundError, ValueError):
        return md.version(name)
    return None


def installed_packages() -> dict[str, str]:
    """torch, its nvidia-* runtime packages and the frameworks: normalised name -> version."""
    out: dict[str, str] = {}
    for dist in md.distributions():
        try:
            raw = dist.metadata["Name"]
        except (KeyError, TypeError):
            continue
        if not raw:
            continue
        name = re.sub(r"[-_.]+", "-", raw).lower()
        if name == "torch" or name.startswith(("nvidia-", "cuda-")) or name in FRAMEWORKS:
            out.setdefault(name, dist.version)  # the first on sys.path is the one imported
    return out


def broken_requirements(packages: dict[str, str]) -> list[dict[str, str]]:
    """Requirements of the packages above on each other that the installed versions miss
    (`pip check` for the packages that matter): torch pinning its NCCL, a framework pinning
    torch."""
    try:
        from packaging.requirements import InvalidRequirement, Requirement
    except ImportError:  # packaging is everywhere pip is, but not a dependency of ours
        return []
    broken: list[dict[str, str]] = []
    for name in sorted(packages):
        try:
            requires = md.requires(name) or []
        except md.PackageNotFoundError:
            continue
        for line in requires:
            try:
                req = Requirement(line)
            except InvalidRequirement:
                continue
            if req.marker is not None:
                try:
                    if not req.marker.evaluate({"extra": ""}):
                        continue
                except Exception:  # noqa: BLE001 - an odd marker: skip that requirement
                    continue
            dep = re.sub(r"[-_.]+", "-", req.name).lower()
            have = packages.get(dep)
            if have is None or not str(req.specifier):
                continue
            if not req.specifier.contains(have, prereleases=True):
                broken.append(
                    {"package": name, "requires": f"{dep}{req.specifier}", "installed": have}
                )
    return broken


def _torch_facts(facts: dict[str, Any]) -> None:
    try:
        import torch
    except Exception as exc:  # noqa: BLE001 - a broken install is a finding, not a crash
        facts["torch_import_error"] = f"{type(exc).__name__}: {exc}"[:500]
        return
    facts["versions"]["torch"] = torch.__version__
    if torch.version.cuda:
        facts["versions"]["cuda"] = torch.version.cuda
    with contextlib.suppress(Exception):
        nccl = torch.cuda.nccl.version()
        facts["versions"]["nccl"] = ".".join(str(p) for p in nccl)
        facts["nccl_from"] = "torch.cuda.nccl.version()"
    try:
        facts["cuda_available"] = bool(torch.cuda.is_available())
        facts["device_count"] = int(torch.cuda.device_count()) if facts["cuda_available"] else 0
        if facts["cuda_available"] and torch.cuda.is_initialized():
            index = torch.cuda.current_device()
            props = torch.cuda.get_device_properties(index)
            uuid = str(getattr(props, "uuid", "") or "")
            # nvidia-smi's form (`GPU-<uuid>`), so ranks that learnt it either way compare
            facts["device"] = (
                (uuid if uuid.startswith("GPU-") else f"GPU-{uuid}") if uuid else (f"cuda:{index}")
            )
            facts["device_from"] = "torch.cuda.current_device()"
    except Exception as exc:  # noqa: BLE001 - a driver problem is a fact to report
        facts["probe_problems"].append(f"CUDA query failed: {type(exc).__name__}: {exc}"[:300])


def _nvidia_smi(facts: dict[str, Any]) -> None:
    if not shutil.which("nvidia-smi"):
        return
    query = "index,uuid,name,memory.total,memory.free,driver_version"
    try:
        done = subprocess.run(
            ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=_TOOL_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired:
        facts["probe_problems"].append(
            f"nvidia-smi did not answer within {_TOOL_TIMEOUT:g} s (a hung GPU or driver)"
        )
        return
    except OSError as exc:
        facts["probe_problems"].append(f"nvidia-smi could not run: {exc.strerror}")
        return
    if done.returncode != 0:
        facts["probe_problems"].append(f"nvidia-smi failed: {done.stdout.strip()[:200]}")
        return
    gpus = []
    for line in done.stdout.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != 6:
            continue
        index, uuid, name, total, free, driver = cells
        gpus.append(
            {
                "index": index,
                "uuid": uuid,
                "name": name,
                "memory_total_mib": int(total) if total.isdigit() else None,
                "memory_free_mib": int(free) if free.isdigit() else None,
            }
        )
        facts["versions"].setdefault("driver", driver)
    facts["gpus"] = gpus


def _nvcc_version() -> str | None:
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    nvcc = str(Path(home) / "bin" / "nvcc") if home else shutil.which("nvcc")
    if not nvcc or not os.path.exists(nvcc):
        return None
    try:
        out = subprocess.run(
            [nvcc, "--version"], capture_output=True, text=True, timeout=_TOOL_TIMEOUT, check=False
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"release (\d+\.\d+)", out)
    return m.group(1) if m else None


def _memory(facts: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            name, _, rest = line.partition(":")
            if name in ("MemTotal", "MemAvailable") and rest.split():
                facts["mem_total" if name == "MemTotal" else "mem_available"] = (
                    int(rest.split()[0]) * 1024
                )
    try:
        shm = os.statvfs("/dev/shm")
        facts["shm_size"] = shm.f_blocks * shm.f_frsize
        facts["shm_free"] = shm.f_bavail * shm.f_frsize
    except OSError:
        facts["shm_size"] = None  # not mounted: NCCL's SHM transport and DataLoader fail
    with contextlib.suppress(ImportError, ValueError, OSError):
        import resource

        soft, _hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
        facts["memlock"] = "unlimited" if soft == resource.RLIM_INFINITY else int(soft)


def _machine_id() -> str:
    # boot_id tells two machines that share a hostname apart (and the same machine from itself)
    for path in ("/proc/sys/kernel/random/boot_id", "/etc/machine-id"):
        with contextlib.suppress(OSError):
            value = Path(path).read_text().strip()
            if value:
                return value
    return socket.gethostname()


def interfaces() -> list[str]:
    with contextlib.suppress(OSError):
        return sorted(name for _index, name in socket.if_nameindex())
    with contextlib.suppress(OSError):
        return sorted(os.listdir("/sys/class/net"))
    return []


def resolve(host: str, timeout: float = 5.0) -> tuple[list[str], str | None]:
    """Addresses of `host`, or why not. getaddrinfo cannot be interrupted: it runs in a daemon
    thread that is abandoned at the deadline (a pool's thread would hold up the exit)."""
    found: list[Any] = []

    def ask() -> None:
        try:
            found.append(socket.getaddrinfo(host, None))
        except (OSError, UnicodeError) as exc:
            found.append(exc)

    worker = threading.Thread(target=ask, daemon=True)
    worker.start()
    worker.join(timeout)
    if not found:
        return [], f"no answer from the resolver within {timeout:g} s"
    answer = found[0]
    if isinstance(answer, Exception):
        return [], getattr(answer, "strerror", None) or str(answer)
    return sorted({str(info[4][0]) for info in answer}), None


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value not in (None, "") else None
    except ValueError:
        return None


def collect(with_packages: bool = True) -> dict[str, Any]:
    """This process's facts: identity, versions, devices, memory, network, environment."""
    env = os.environ
    facts: dict[str, Any] = {
        "hostname": socket.gethostname(),
        "machine": _machine_id(),
        "pid": os.getpid(),
        "rank": _int(env.get("RANK")),
        "local_rank": _int(env.get("LOCAL_RANK")),
        "world_size": _int(env.get("WORLD_SIZE")),
        "local_world_size": _int(env.get("LOCAL_WORLD_SIZE")),
        "group_rank": _int(env.get("GROUP_RANK") or env.get("NODE_RANK")),
        "versions": {"python": platform.python_version()},
        "env": allowed_env(env),
        "interfaces": interfaces(),
        "infiniband": bool(
            os.path.isdir("/sys/class/infiniband") and os.listdir("/sys/class/infiniband")
        ),
        "probe_problems": [],
        "executable": sys.executable,
        # GPU device nodes: the node has GPUs even when this torch cannot use them
        "device_files": bool(glob.glob("/dev/nvidia[0-9]*")),
    }
    packages = installed_packages() if with_packages else {}
    facts["packages"] = packages
    for name in FRAMEWORKS:
        if name in packages:
            facts["versions"][name] = packages[name]
    _torch_facts(facts)
    if "nccl" not in facts["versions"]:
        nccl_dist = next((n for n in sorted(packages) if n.startswith("nvidia-nccl-cu")), None)
        if nccl_dist:
            facts["versions"]["nccl"] = packages[nccl_dist]
            facts["nccl_from"] = f"the {nccl_dist} package"
    _nvidia_smi(facts)
    nvcc = _nvcc_version()
    if nvcc:
        facts["versions"]["nvcc"] = nvcc
    _memory(facts)
    facts["broken_requirements"] = broken_requirements(packages)
    _assigned_device(facts)
    return facts


def _assigned_device(facts: dict[str, Any]) -> None:
    """The GPU this rank will use, by the launchers' convention `cuda:LOCAL_RANK` among the
    visible devices, named by UUID when nvidia-smi tells them (so two CUDA_VISIBLE_DEVICES
    orders that land on one GPU are seen as one)."""
    if facts.get("device") or facts.get("local_rank") is None:
        return
    visible_env = facts["env"].get("CUDA_VISIBLE_DEVICES")
    gpus = facts.get("gpus") or []
    if visible_env is not None:
        visible = [v.strip() for v in visible_env.split(",") if v.strip()]
    else:
        # no nvidia-smi (some containers): torch's device count still says how many
        visible = [g["index"] for g in gpus] or [
            str(i) for i in range(facts.get("device_count", 0))
        ]
    facts["visible_devices"] = visible
    local = facts["local_rank"]
    if local >= len(visible):
        return
    chosen = visible[local]
    for g in gpus:
        if chosen in (g["index"], g["uuid"]) or (
            chosen.startswith("GPU-") and g["uuid"].startswith(chosen)
        ):
            chosen = g["uuid"]
            break
    facts["device"] = chosen
    facts["device_from"] = (
        "CUDA_VISIBLE_DEVICES[LOCAL_RANK]" if visible_env is not None else "LOCAL_RANK"
    )


# --------------------------------------------------------------------------- network probes


def probe_master_addr(facts: dict[str, Any], timeout: float = 5.0) -> None:
    addr = facts["env"].get("MASTER_ADDR")
    if not addr:
        return
    resolved, error = resolve(addr, timeout)
    facts["master_addr"] = {"addr": addr, "resolved": resolved, "error": error}


def probe_master_port(facts: dict[str, Any]) -> None:
    """Whether MASTER_PORT can be bound here: only meaningful before the job starts, on the
    node MASTER_ADDR names (the rendezvous store listens there once the job runs)."""
    raw = facts["env"].get("MASTER_PORT")
    if raw is None:
        return
    port = _int(raw)
    if port is None or not 0 < port < 65536:
        facts["master_port"] = {"port": raw, "state": "invalid"}
        return
    addr = facts["env"].get("MASTER_ADDR") or ""
    family = socket.AF_INET6 if ":" in addr else socket.AF_INET
    state, holder = "free", None
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        # as the c10d store does: a port in TIME_WAIT is not "in use"
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("" if addr in ("", "localhost") else addr, port))
        except OSError as exc:
            if exc.errno == 98:  # EADDRINUSE
                state, holder = "in_use", port_holder(port)
            elif exc.errno == 99:  # EADDRNOTAVAIL: MASTER_ADDR is another machine
                state = "remote"
            else:
                state = f"unusable: {exc.strerror}"
        except (socket.gaierror, UnicodeError):
            state = "remote"  # not resolvable here: the MASTER_ADDR probe says so
    facts["master_port"] = {"port": port, "addr": addr, "state": state, "holder": holder}


def port_holder(port: int) -> str | None:
    """`pid N (name)` of the process listening on a TCP port, when /proc lets us see it."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                parts = line.split()
                if (
                    len(parts) > 9
                    and parts[3] == "0A"
                    and int(parts[1].rsplit(":", 1)[1], 16) == port
                ):
                    inodes.add(parts[9])
    if not inodes:
        return None
    wanted = {f"socket:[{i}]" for i in inodes}
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            with contextlib.suppress(OSError):
                for fd in os.scandir(f"/proc/{entry.name}/fd"):
                    with contextlib.suppress(OSError):
                        if os.readlink(fd.path) in wanted:
                            name = Path(f"/proc/{entry.name}/comm").read_text().strip()
                            return f"pid {entry.name} ({name})"
    return None
