"""What is captured of one rank and of the node, each with a timeout.

Every capture returns the files it wrote and the problems it met, in words a user can act on
(no ptrace permission, the process exited, the job's dump pipe has no reader); none raises.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from triage.snapshot.procs import PROC, Target

# Only these variables are written: what explains a distributed failure, never a credential.
ENV_NAMES = frozenset(
    {
        "RANK",
        "LOCAL_RANK",
        "WORLD_SIZE",
        "LOCAL_WORLD_SIZE",
        "GROUP_RANK",
        "GROUP_WORLD_SIZE",
        "ROLE_RANK",
        "ROLE_WORLD_SIZE",
        "NODE_RANK",
        "MASTER_ADDR",
        "MASTER_PORT",
        "CUDA_VISIBLE_DEVICES",
        "NVIDIA_VISIBLE_DEVICES",
        "CUDA_LAUNCH_BLOCKING",
        "CUDA_DEVICE_MAX_CONNECTIONS",
        "CUDA_MODULE_LOADING",
        "PYTORCH_CUDA_ALLOC_CONF",
        "OMP_NUM_THREADS",
        "SLURM_JOB_ID",
        "SLURM_PROCID",
        "SLURM_LOCALID",
        "SLURM_NODEID",
        "SLURM_NNODES",
        "SLURM_NTASKS",
    }
)
ENV_PREFIXES = ("NCCL_", "TORCH_", "TORCHELASTIC_", "GLOO_")
# A kept prefix can still carry a credential (TORCH_HUB_TOKEN): the name decides.
_SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSW|API_?KEY|CREDENTIAL|PRIVATE|AUTH", re.I)

FR_MAX_BYTES = 512 * 2**20  # a 2,000-entry dump is ~0.5 MB; anything this big is not one
_FR_FILES_PER_RANK = 8


@dataclass
class Captured:
    files: list[str] = field(default_factory=list)  # relative to the snapshot folder
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------- environment


def allowed_env(env: Mapping[str, str]) -> dict[str, str]:
    """The allow-listed variables of an environment, by name."""
    return {
        name: value
        for name, value in sorted(env.items())
        if (name in ENV_NAMES or name.startswith(ENV_PREFIXES)) and not _SECRET_NAME.search(name)
    }


def write_env(target: Target, dest: Path) -> Captured:
    # `export NAME=value` lines only: ingest reads them as an environment report (a leading
    # `# comment` would make the file look like Markdown notes)
    lines = [
        f"export {name}={shlex.quote(value)}" for name, value in allowed_env(target.env).items()
    ]
    dest.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return Captured(files=[dest.name])


# --------------------------------------------------------------------------- py-spy


def find_pyspy() -> str | None:
    # `python -m triage` from a venv does not put the venv's bin/ on PATH
    found = shutil.which("py-spy")
    if found:
        return found
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else None


def _alive(pid: int) -> bool:
    return (PROC / str(pid)).exists()


def pyspy_problem(pid: int, output: str) -> str:
    """Why a py-spy dump of `pid` failed, in words that say what to do."""
    if not _alive(pid):
        return f"pid {pid} exited during the snapshot (no stack captured)"
    low = output.lower()
    if "permission denied" in low or "ptrace" in low or "operation not permitted" in low:
        return (
            f"py-spy may not attach to pid {pid} (ptrace permission denied): run the snapshot "
            "as root or as the job's user; in a container add `--cap-add SYS_PTRACE`; "
            "or set `kernel.yama.ptrace_scope=0`"
        )
    first = next((line.strip() for line in output.splitlines() if line.strip()), "no output")
    return f"py-spy could not dump pid {pid}: {first[:300]}"


def pyspy_dump(
    pyspy: str | None,
    pid: int,
    dest: Path,
    *,
    as_json: bool,
    native: bool,
    timeout: float,
) -> Captured:
    out = Captured()
    if pyspy is None:
        out.problems.append(
            "py-spy not found: `pip install py-spy` (stacks are the best evidence of a hang)"
        )
        return out
    argv = [pyspy, "dump", "--pid", str(pid)]
    if as_json:
        argv.append("--json")
    if native:
        argv.append("--native")
    try:
        done = subprocess.run(argv, capture_output=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        out.problems.append(
            f"py-spy did not finish within {timeout:g} s for pid {pid} (the process may be "
            "blocked in the kernel or a driver call: look at the kernel messages)"
        )
        return out
    except OSError as exc:
        out.problems.append(f"py-spy could not be started: {exc}")
        return out
    text = done.stdout.decode("utf-8", "replace")
    if done.returncode != 0 or not text.strip():
        why = done.stderr.decode("utf-8", "replace") + "\n" + text
        out.problems.append(pyspy_problem(pid, why))
        return out
    dest.write_text(text, encoding="utf-8")
    out.files.append(dest.name)
    return out


# --------------------------------------------------------------------------- flight recorder


def _in_process_root(pid: int, path: str) -> list[Path]:
    """Where a path the job names can be read from here: inside the process's own mount
    namespace first (a container), then as is. Relative paths are relative to its cwd."""
    places: list[Path] = []
    if not os.path.isabs(path):
        with contextlib.suppress(OSError):
            path = os.path.join(os.readlink(PROC / str(pid) / "cwd"), path)
    root = PROC / str(pid) / "root"
    inside = Path(str(root) + path)
    with contextlib.suppress(OSError):
        if os.access(root, os.R_OK | os.X_OK):
            places.append(inside)
    places.append(Path(path))
    return places


def fr_prefixes(env: Mapping[str, str]) -> list[str]:
    """Dump-file prefixes the job's torch may write to (`<prefix><rank>`)."""
    named = env.get("TORCH_FR_DUMP_TEMP_FILE") or env.get("TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
    if named:
        return [named]
    # torch's defaults: older releases /tmp/nccl_trace_rank_, 2.13+ a torch cache folder
    cache = env.get("XDG_CACHE_HOME") or (
        os.path.join(env["HOME"], ".cache") if env.get("HOME") else None
    )
    defaults = ["/tmp/nccl_trace_rank_"]
    if cache:
        defaults.insert(0, os.path.join(cache, "torch", "comm_lib_trace_rank_"))
    return defaults


def _dump_files(prefix: Path, rank: int) -> list[Path]:
    """`<prefix><rank>` and names that go on after the rank (`.json`, a time stamp), never
    `<prefix><rank><digit>` (rank 1 is not rank 12)."""
    base = prefix.name + str(rank)
    try:
        names = sorted(os.listdir(prefix.parent))
    except OSError:
        return []
    found = []
    for name in names:
        if name == base or (name.startswith(base) and not name[len(base)].isdigit()):
            path = prefix.parent / name
            with contextlib.suppress(OSError):
                if stat.S_ISREG(path.stat().st_mode):
                    found.append(path)
    return found[:_FR_FILES_PER_RANK]


def trigger_fr_pipe(target: Target, timeout: float) -> tuple[float | None, str | None]:
    """Write to the job's `TORCH_NCCL_DEBUG_INFO_PIPE_FILE` pipe so that it dumps now.

    Returns (when it was written, problem). torch opens `<stem><rank>.pipe` and reads it in a
    thread; writing one line makes that rank dump to its TORCH_FR_DUMP_TEMP_FILE.
    """
    stem = target.env.get("TORCH_NCCL_DEBUG_INFO_PIPE_FILE")
    if not stem or target.rank is None:
        return None, None
    for pipe in _in_process_root(target.pid, f"{stem}{target.rank}.pipe"):
        try:
            if not stat.S_ISFIFO(pipe.stat().st_mode):
                continue
        except OSError:
            continue
        deadline = time.monotonic() + min(timeout, 5.0)
        while True:
            try:
                # non-blocking: a pipe without a reader must not hang the snapshot
                fd = os.open(pipe, os.O_WRONLY | os.O_NONBLOCK)
            except OSError as exc:
                if exc.errno == 6 and time.monotonic() < deadline:  # ENXIO: reader not yet open
                    time.sleep(0.1)
                    continue
                return None, (
                    f"{target.label}: the job's flight-recorder pipe {pipe} has no reader "
                    f"({exc.strerror}); no dump was triggered"
                )
            break
        try:
            os.write(fd, b"1\n")
        except OSError as exc:
            return None, f"{target.label}: could not write to {pipe}: {exc.strerror}"
        finally:
            os.close(fd)
        return time.time(), None
    return None, (
        f"{target.label}: TORCH_NCCL_DEBUG_INFO_PIPE_FILE is set but {stem}{target.rank}.pipe "
        "does not exist (torch creates it only for NCCL process groups)"
    )


def _settled(path: Path, since: float | None) -> bool:
    try:
        first = path.stat()
    except OSError:
        return False
    if since is not None and first.st_mtime < since - 1:
        return False  # an older dump: wait for the one just asked for
    time.sleep(0.2)
    with contextlib.suppress(OSError):
        second = path.stat()
        return second.st_size == first.st_size and second.st_size > 0
    return False


def collect_fr(
    target: Target, dest_dir: Path, *, triggered_at: float | None, timeout: float
) -> Captured:
    """Copy the rank's flight-recorder dumps; after a pipe trigger, wait for the fresh one."""
    out = Captured()
    if target.rank is None:
        return out
    prefixes = [place for p in fr_prefixes(target.env) for place in _in_process_root(target.pid, p)]
    deadline = time.monotonic() + timeout
    found: list[Path] = []
    while True:
        found = [f for prefix in prefixes for f in _dump_files(prefix, target.rank)]
        if triggered_at is None or any(_settled(f, triggered_at) for f in found):
            break
        if time.monotonic() > deadline:
            out.problems.append(
                f"{target.label}: no flight-recorder dump appeared within {timeout:g} s of the "
                "pipe trigger"
            )
            break
        time.sleep(0.25)
    seen: set[tuple[int, int]] = set()
    for src in found:
        try:
            info = src.stat()
            if (info.st_dev, info.st_ino) in seen:
                continue  # the same file seen through /proc/PID/root and directly
            seen.add((info.st_dev, info.st_ino))
            if info.st_size > FR_MAX_BYTES:
                out.problems.append(f"{target.label}: {src} is {info.st_size} bytes, not copied")
                continue
            name = "fr_dump.json" if src.name.endswith(".json") else "fr_dump"
            if (dest_dir / name).exists():
                # no `_<digits>` ending: ingest would read a trailing number as a rank
                name = f"fr_dump.more{len(out.files)}"
            shutil.copyfile(src, dest_dir / name)
            out.files.append(name)
        except OSError as exc:
            out.problems.append(f"{target.label}: could not copy {src}: {exc.strerror}")
    return out


# --------------------------------------------------------------------------- node facts

_KERNEL_LINE = re.compile(
    r"Out of memory:|oom-kill|oom_reaper|Killed process|invoked oom-killer|NVRM: Xid"
    r"|segfault at|general protection fault|traps: .* trap|hung_task|blocked for more than"
    r"|Memory cgroup out of memory|mce: \[Hardware Error\]|NVRM: GPU .* has fallen off the bus",
)
_KERNEL_KEEP = 200


def run_tool(argv: Sequence[str], timeout: float) -> tuple[str | None, str | None]:
    """(stdout, problem) of a node tool; never raises, never waits past `timeout`."""
    try:
        done = subprocess.run(list(argv), capture_output=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return None, f"`{' '.join(argv)}` did not finish within {timeout:g} s"
    except OSError as exc:
        return None, f"`{argv[0]}` could not be run: {exc.strerror}"
    if done.returncode != 0:
        why = (done.stderr or done.stdout).decode("utf-8", "replace").strip().splitlines()
        return None, f"`{' '.join(argv)}` failed: {why[0] if why else done.returncode}"
    return done.stdout.decode("utf-8", "replace"), None


def _meminfo() -> dict[str, int]:
    out: dict[str, int] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            name, _, rest = line.partition(":")
            parts = rest.split()
            if parts and parts[0].isdigit():
                out[name] = int(parts[0]) * 1024
    return out


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def _memlock(pid: int) -> str | None:
    with contextlib.suppress(OSError):
        for line in (PROC / str(pid) / "limits").read_text().splitlines():
            if line.startswith("Max locked memory"):
                soft = line[len("Max locked memory") :].split()[0]
                return soft if soft == "unlimited" else human_bytes(int(soft))
    return None


def node_facts(
    dest_dir: Path, hostname: str, targets: Sequence[Target], timeout: float
) -> Captured:
    out = Captured()
    lines = [f"# triage snapshot: node facts of {hostname}", f"hostname: {hostname}"]
    with contextlib.suppress(OSError):
        lines.append(f"kernel: {Path('/proc/sys/kernel/osrelease').read_text().strip()}")
    mem = _meminfo()
    if "MemTotal" in mem:
        lines.append(f"memory total: {human_bytes(mem['MemTotal'])}")
    if "MemAvailable" in mem:
        lines.append(f"memory available: {human_bytes(mem['MemAvailable'])}")
    try:
        shm = os.statvfs("/dev/shm")
        size, free = shm.f_blocks * shm.f_frsize, shm.f_bavail * shm.f_frsize
        lines.append(f"/dev/shm size: {human_bytes(size)} ({human_bytes(free)} free)")
    except OSError:
        lines.append("/dev/shm: not mounted")
    limits = {t.label: _memlock(t.pid) for t in targets}
    if limits:
        values = sorted({v or "unknown" for v in limits.values()})
        lines.append(f"max locked memory of the training processes: {', '.join(values)}")
    (dest_dir / "node.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    out.files.append("node.txt")

    if shutil.which("nvidia-smi"):
        text, problem = run_tool(["nvidia-smi"], timeout)
        if text:
            (dest_dir / "nvidia-smi.txt").write_text(text, encoding="utf-8")
            out.files.append("nvidia-smi.txt")
        if problem:
            out.problems.append(problem + " (a GPU or driver that does not answer hangs jobs too)")
    else:
        out.notes.append("nvidia-smi not found: no GPU facts")

    if shutil.which("dmesg"):
        text, problem = run_tool(["dmesg", "-T"], timeout)
        if text is None:
            text, problem = run_tool(["dmesg"], timeout)  # -T is missing in busybox
        if text is None:
            out.notes.append(
                f"kernel messages not readable ({problem}); OOM kills and Xid errors unknown"
            )
        else:
            hits = [line for line in text.splitlines() if _KERNEL_LINE.search(line)]
            if hits:
                (dest_dir / "kernel.txt").write_text(
                    "\n".join(hits[-_KERNEL_KEEP:]) + "\n", encoding="utf-8"
                )
                out.files.append("kernel.txt")
            else:
                out.notes.append("no kernel messages about OOM kills, Xid errors or segfaults")
    return out
