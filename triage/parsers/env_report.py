"""Environment reports: versions and settings that explain (or rule out) a failure.

One file may hold several reports (a bug report pastes collect_env, then `pip list`, then
`env | grep NCCL`), so each line is offered to every reader and each kind that found something
becomes one ENV_REPORT event with an `EnvReport` payload:

* `python -m torch.utils.collect_env` (formats.md §7.1): `Key: value` lines, `GPU N: model`
  lines, `[pip3] pkg==ver` / `[conda] pkg ver build` library lines;
* `ds_report` (§7.2): ANSI colours stripped, `key ....... value` info lines and the op table;
* `pip list` (two columns under a `Package Version` header), `pip freeze` (`pkg==ver`) and
  `conda list` (under its `# Name Version Build Channel` header);
* `nvidia-smi` (the table, `-L` lines, or `--query-gpu ... --format=csv`);
* environment dumps (`env`, `export X=..`, `declare -x X=".."`): only variables that matter to
  distributed training are kept (NCCL_*, TORCH_*, MASTER_ADDR, ...) so secrets never travel on.

Facts use one vocabulary whatever the report: torch, cuda_build, cuda_runtime, nccl, driver,
gpu_models, gpu_count, python, os, deepspeed, megatron, colossalai, transformers, accelerate,
nvcc, shm_size, gcc; plus cudnn, cuda_available, driver_cuda (the CUDA version nvidia-smi
says the driver supports), gpu_memory and ds_ops_* where the report has them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import regex

from triage import regex_cache
from triage.formats import DS_REPORT_START
from triage.model import EnvReport, Event, EventKind, Level, ParsedSource, Source
from triage.parsers.common import input_warning, parser_stopped

__all__ = ["MAX_BYTES", "parse", "parse_lines"]

MAX_BYTES = 16 * 1024 * 1024  # env reports are kilobytes; a huge file is not one
_MAX_LINE = 8192

_ANSI = regex_cache.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_NOT_KNOWN = {"could not collect", "n/a", "none", "", "unknown"}

# collect_env
_CE_START = regex_cache.compile(r"^(?:Collecting environment information|PyTorch version: )")
_CE_KEY = regex_cache.compile(r"^(?P<key>[A-Za-z][^:]{1,60}): ?(?P<value>.*)$")  # "OS: ..." has 2
_CE_GPU = regex_cache.compile(r"^GPU (?P<index>\d+): (?P<model>.+?)(?: \(UUID: [^)]*\))?\s*$")
_CE_LIB = regex_cache.compile(
    r"^\[(?P<mgr>pip3?|conda)\] (?P<pkg>[A-Za-z0-9][\w.+-]*)(?:==|\s+)(?P<ver>\d\S*)"
)
_CE_FACTS = {
    "PyTorch version": "torch",
    "CUDA used to build PyTorch": "cuda_build",
    "CUDA runtime version": "cuda_runtime",
    "OS": "os",
    "GCC version": "gcc",
    "Python version": "python",
    "Nvidia driver version": "driver",
    "cuDNN version": "cudnn",
    "Is CUDA available": "cuda_available",
    "ROCM used to build PyTorch": "rocm_build",
}

_CE_OTHER_KEYS = frozenset(
    {
        "Is debug build",
        "Clang version",
        "CMake version",
        "Libc version",
        "Python platform",
        "CUDA_MODULE_LOADING set to",
        "HIP runtime version",
        "MIOpen runtime version",
        "Is XNNPACK available",
        "Is XPU available",
        "Caching allocator config",
        "XPU used to build PyTorch",
        "Intel GPU driver version",
        "Intel GPU models onboard",
        "Intel GPU models detected",
    }
)

# ds_report
_DS_START = DS_REPORT_START
_DS_INFO = regex_cache.compile(r"^(?P<key>[a-z][\w ()/.]+?) \.{3,} (?P<value>.*)$")
_DS_OP = regex_cache.compile(
    r"^(?P<op>\w+) \.+ \[(?P<installed>YES|NO)\] \.+ \[(?P<compatible>OKAY|NO|YES|FAIL)\]\s*$"
)
_DS_FACTS = {
    "torch version": "torch",
    "torch cuda version": "cuda_build",
    "nvcc version": "nvcc",
    "deepspeed info": "deepspeed",
    "shared memory (/dev/shm) size": "shm_size",
    "torch hip version": "hip",
}

# pip
_PIP_HEADER = regex_cache.compile(r"^Package\s+Version(?:\s+.*)?$")
_PIP_RULE = regex_cache.compile(r"^-{3,}\s+-{3,}")
_PIP_ROW = regex_cache.compile(r"^(?P<pkg>[A-Za-z0-9][\w.-]*)\s+(?P<ver>\d\S*)(?:\s+\S.*)?$")
_FREEZE = regex_cache.compile(r"^(?P<pkg>[A-Za-z0-9][\w.-]*)\s*==\s*(?P<ver>[^\s;#]+)")
_FREEZE_AT = regex_cache.compile(r"^(?P<pkg>[A-Za-z0-9][\w.-]*) @ \S+")

# nvidia-smi
_SMI_HEAD = regex_cache.compile(
    r"NVIDIA-SMI (?P<smi>[\d.]+)\s+Driver Version: (?P<driver>[\d.]+)"
    r"(?:\s+CUDA Version: (?P<cuda>[\d.]+|N/A))?"
)
_SMI_GPU = regex_cache.compile(r"^\|\s+(?P<index>\d+)\s+(?P<name>\S.*?)\s+(?:On|Off|N/A)\s*\|")
_SMI_MEM = regex_cache.compile(r"\|\s*(?P<used>\d+)MiB\s*/\s*(?P<total>\d+)MiB\s*\|")
_SMI_CSV_HEAD = regex_cache.compile(r"^name\s*,", regex.IGNORECASE)
# A row of nvidia-smi's process table (GI/CI columns on MIG-era drivers): which processes hold
# which GPU, kept as printed so that rules read it (two ranks' processes on one GPU).
_SMI_PROCESS = regex_cache.compile(
    r"^\|\s+\d+\s+(?:\S+\s+\S+\s+)?\d+\s+(?:C|G|C\+G)\s+\S.*?\s+(?:\d+MiB|N/A)\s*\|$"
)
_MAX_PROCESSES = 64

# environment variables
_ENV = regex_cache.compile(
    r"^(?:(?:export |declare -x )?(?P<name>[A-Z][A-Z0-9_]*)=|setenv (?P<name>[A-Z][A-Z0-9_]*) )"
    r"(?P<value>.*)$"
)
_ENV_KEEP = regex_cache.compile(
    r"^(?:NCCL_|TORCH_|TORCHELASTIC_|PYTORCH_|CUDA_|GLOO_|UCX_|FI_|NVSHMEM_|OMPI_|PMI_"
    r"|SLURM_(?:JOB_ID|NNODES|NTASKS|PROCID|LOCALID|NODEID|JOB_NODELIST|STEP_NUM_TASKS)$"
    r"|MASTER_ADDR$|MASTER_PORT$|WORLD_SIZE$|RANK$|LOCAL_RANK$|LOCAL_WORLD_SIZE$|GROUP_RANK$"
    r"|NODE_RANK$|ROLE_RANK$|OMP_NUM_THREADS$|NVIDIA_VISIBLE_DEVICES$|LD_PRELOAD$"
    r"|MEGATRON_|DS_|DEEPSPEED_|ACCELERATE_|HF_HUB_OFFLINE$|TRANSFORMERS_OFFLINE$)"
)
# Even among kept prefixes, never keep values whose name says it is a credential.
_SECRET = regex_cache.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|CREDENTIAL|PRIVATE", regex.I)

# conda list: `# Name  Version  Build  Channel` then `pytorch  2.3.0  py3.10_cuda12.1_0  pytorch`
_CONDA_HEADER = regex_cache.compile(r"^#\s*Name\s+Version\s+Build")
_CONDA_ROW = regex_cache.compile(r"^(?P<pkg>[A-Za-z0-9][\w.-]*)\s+(?P<ver>\d\S*)\s+\S+(?:\s+\S+)?$")

# Package name (normalised: lower case, `_` and `.` -> `-`) -> fact key.
_PACKAGE_FACTS = {
    "torch": "torch",
    "pytorch": "torch",  # conda's name
    "nccl": "nccl",  # conda-forge's NCCL package
    "deepspeed": "deepspeed",
    "megatron-core": "megatron",
    "megatron-lm": "megatron",
    "colossalai": "colossalai",
    "transformers": "transformers",
    "accelerate": "accelerate",
    "nvidia-nccl-cu11": "nccl",
    "nvidia-nccl-cu12": "nccl",
    "nvidia-nccl-cu13": "nccl",
}
_CUDA_TAG = regex_cache.compile(r"\+cu(?P<major>\d{2,3}?)(?P<minor>\d)$")


@dataclass
class _Report:
    kind: str
    first_line: int
    last_line: int = 0
    facts: dict[str, str] = field(default_factory=dict)
    packages: dict[str, str] = field(default_factory=dict)
    env_vars: dict[str, str] = field(default_factory=dict)
    gpus: list[str] = field(default_factory=list)
    gpu_memory: list[str] = field(default_factory=list)
    ds_installed: list[str] = field(default_factory=list)
    ds_incompatible: list[str] = field(default_factory=list)
    processes: list[str] = field(default_factory=list)  # nvidia-smi's process table rows

    def touch(self, number: int) -> None:
        self.last_line = max(self.last_line, number)

    def fact(self, key: str, value: str) -> None:
        value = value.strip()
        if value.lower() not in _NOT_KNOWN:
            self.facts.setdefault(key, value)


def parse(source: Source) -> ParsedSource:
    """Parse one environment report file; never raises."""
    try:
        with source.open() as stream:
            data = stream.read(MAX_BYTES + 1)
    except Exception as exc:
        return _only_warning(source, f"cannot read environment report: {exc}")
    warnings: list[str] = []
    if len(data) > MAX_BYTES:
        warnings.append(f"environment report is over {MAX_BYTES} bytes; only the start was read")
        data = data[:MAX_BYTES]
    text = data.decode("utf-8", errors="replace")
    lines = text.splitlines()
    try:
        events = [_event(source, report) for report in _read(lines)]
    except Exception as exc:  # the promise is "never raises"
        why = parser_stopped("environment report", exc)
        return _only_warning(source, why, len(lines), len(data))
    if not events:
        warnings.append("no versions or settings recognised in this environment report")
        return _only_warning(source, warnings[-1], len(lines), len(data), warnings)
    return ParsedSource(
        source=source,
        events=tuple(events),
        warnings=tuple(warnings),
        lines=len(lines),
        bytes_read=len(data),
    )


def parse_lines(lines: Iterable[str]) -> list[EnvReport]:
    """The reports found in these lines, in the order they start (no Source needed)."""
    return [_freeze(r) for r in _read(lines)]


# --------------------------------------------------------------------------- reading


def _read(lines: Iterable[str]) -> list[_Report]:
    reports: dict[str, _Report] = {}

    def report(kind: str, number: int) -> _Report:
        found = reports.get(kind)
        if found is None:
            found = reports[kind] = _Report(kind=kind, first_line=number)
        found.touch(number)
        return found

    section = ""  # collect_env sub-block: "", "gpus", "cudnn", "cpu", "libs"
    in_pip_table = False
    in_conda_list = False
    smi_csv_columns: list[str] | None = None
    for number, raw in enumerate(lines, start=1):
        line = _ANSI.sub("", raw[:_MAX_LINE]).rstrip("\r\n")
        stripped = line.strip()

        # ---- collect_env
        if _CE_START.match(line):
            report("collect_env", number)
            section = ""
        collect = reports.get("collect_env")
        if collect is not None and section != "done":
            section, consumed = _read_collect_env(collect, line, number, section)
            if consumed:
                continue

        # ---- ds_report
        if _DS_START.search(line):
            report("ds_report", number)
            continue
        ds = reports.get("ds_report")
        if ds is not None or _DS_OP.match(stripped) or _DS_INFO.match(stripped):
            if m := _DS_OP.match(stripped):
                ds = report("ds_report", number)
                if m["installed"] == "YES":
                    ds.ds_installed.append(m["op"])
                if m["compatible"] in ("NO", "FAIL"):
                    ds.ds_incompatible.append(m["op"])
                continue
            if (m := _DS_INFO.match(stripped)) and m["key"] in _DS_FACTS:
                ds = report("ds_report", number)
                value = m["value"]
                if m["key"] == "deepspeed info":
                    value = value.split(",", 1)[0]  # "0.15.5+46d7d0d1, 46d7d0d1, master"
                ds.fact(_DS_FACTS[m["key"]], value)
                continue

        # ---- nvidia-smi
        if m := _SMI_HEAD.search(line):
            smi = report("nvidia_smi", number)
            smi.fact("driver", m["driver"])
            if m["cuda"]:
                smi.fact("driver_cuda", m["cuda"])
            continue
        smi = reports.get("nvidia_smi")
        if smi is not None and line.startswith("|"):
            if _SMI_PROCESS.match(line):
                if len(smi.processes) < _MAX_PROCESSES:
                    smi.processes.append(line.strip())
                smi.touch(number)
            elif m := _SMI_GPU.match(line):
                smi.gpus.append(m["name"])
                smi.touch(number)
            elif (m := _SMI_MEM.search(line)) and len(smi.gpu_memory) < len(smi.gpus):
                smi.gpu_memory.append(f"{m['total']}MiB")
                smi.touch(number)
            continue
        if _SMI_CSV_HEAD.match(stripped) and (
            "driver_version" in stripped or "memory.total" in stripped
        ):
            smi_csv_columns = [c.strip().split(" ")[0].lower() for c in stripped.split(",")]
            report("nvidia_smi", number)
            continue
        if smi_csv_columns is not None:
            if _read_smi_csv(report("nvidia_smi", number), smi_csv_columns, stripped):
                continue
            smi_csv_columns = None
        if collect is None and (m := _CE_GPU.match(stripped)):  # `nvidia-smi -L`
            report("nvidia_smi", number).gpus.append(m["model"])
            continue

        # ---- conda list
        if _CONDA_HEADER.match(stripped):
            in_conda_list = True
            report("conda", number)
            continue
        if in_conda_list:
            if m := _CONDA_ROW.match(stripped):
                report("conda", number).packages[m["pkg"]] = m["ver"]
                continue
            if not stripped.startswith("#"):
                in_conda_list = False

        # ---- pip list / pip freeze
        if _PIP_HEADER.match(stripped):
            in_pip_table = True
            report("pip", number)
            continue
        if in_pip_table:
            if _PIP_RULE.match(stripped):
                continue
            if m := _PIP_ROW.match(stripped):
                report("pip", number).packages[m["pkg"]] = m["ver"]
                continue
            in_pip_table = False
        if m := _FREEZE.match(stripped):
            report("pip", number).packages[m["pkg"]] = m["ver"]
            continue

        # ---- environment variables
        if (m := _ENV.match(stripped)) and "==" not in stripped:
            name, value = m["name"], m["value"].strip()
            if _ENV_KEEP.match(name) and not _SECRET.search(name):
                if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
                    value = value[1:-1]
                report("env_vars", number).env_vars[name] = value
            continue
        if _FREEZE_AT.match(stripped):
            continue  # `pkg @ file:///...`: no version to read
    return sorted(reports.values(), key=lambda r: r.first_line)


def _read_collect_env(report: _Report, line: str, number: int, section: str) -> tuple[str, bool]:
    """Offer one line to the collect_env reader: (new section, whether it consumed the line)."""
    stripped = line.strip()
    if section == "cpu":  # the raw lscpu block: nothing we need, ends at a blank line
        if stripped.startswith("Versions of relevant libraries"):
            report.touch(number)
            return "libs", True
        return ("cpu" if stripped else ""), True
    if section == "libs":
        if (m := _CE_LIB.match(stripped)) and "Could not collect" not in stripped:
            report.packages.setdefault(m["pkg"], m["ver"])
            report.touch(number)
            return "libs", True
        if stripped.startswith("[") or not stripped:
            return "libs", True
        return "done", False
    if section == "gpus" and (m := _CE_GPU.match(stripped)):
        report.gpus.append(m["model"])
        report.touch(number)
        return "gpus", True
    if section == "cudnn" and stripped.startswith("/"):
        return "cudnn", True  # "Probably one of the following:" then .so paths
    if stripped == "CPU:":
        report.touch(number)
        return "cpu", True
    if stripped.startswith("Versions of relevant libraries"):
        report.touch(number)
        return "libs", True
    if not stripped:
        return "", True
    if m := _CE_KEY.match(line):
        key, value = m["key"].strip(), m["value"].strip()
        target = _CE_FACTS.get(key)
        if key == "GPU models and configuration":
            if value.lower() not in _NOT_KNOWN:
                # Single-GPU boxes print the model on the same line.
                report.gpus.append(_CE_GPU.sub(r"\g<model>", value))
            report.touch(number)
            return "gpus", True
        if key == "cuDNN version" and value.startswith("Probably one of the following"):
            report.touch(number)
            return "cudnn", True
        if target is None and not _known_collect_env_key(key):
            return section, False  # someone else's `Key: value` line
        if target is not None:
            report.fact(target, _normalise(target, value))
        report.touch(number)
        return "", True
    return section, False


def _known_collect_env_key(key: str) -> bool:
    # Keys collect_env prints that carry no fact we keep; consumed so no other reader
    # mistakes them (e.g. `CUDA_MODULE_LOADING set to: LAZY` for an env var).
    return key in _CE_OTHER_KEYS


def _read_smi_csv(report: _Report, columns: list[str], line: str) -> bool:
    cells = [c.strip() for c in line.split(",")]
    if len(cells) != len(columns) or not line:
        return False
    row = dict(zip(columns, cells, strict=True))
    if row.get("name"):
        report.gpus.append(row["name"])
    if row.get("driver_version"):
        report.fact("driver", row["driver_version"])
    if row.get("memory.total"):
        report.gpu_memory.append(row["memory.total"].replace(" ", ""))
    return True


def _normalise(key: str, value: str) -> str:
    if key == "python":  # "3.10.14 (main, Apr  6 2024, ...) [GCC 11.4.0] (64-bit runtime)"
        return value.split(" ", 1)[0]
    if key == "gcc":  # "(Ubuntu 11.4.0-1ubuntu1~22.04) 11.4.0"
        return value.rsplit(" ", 1)[-1]
    return value


# --------------------------------------------------------------------------- output


def _freeze(report: _Report) -> EnvReport:
    facts = dict(report.facts)
    if report.gpus:
        facts.setdefault("gpu_models", ", ".join(dict.fromkeys(report.gpus)))
        facts.setdefault("gpu_count", str(len(report.gpus)))
    if report.gpu_memory:
        facts.setdefault("gpu_memory", ", ".join(dict.fromkeys(report.gpu_memory)))
    if report.ds_installed:
        facts["ds_ops_installed"] = ", ".join(report.ds_installed)
    if report.ds_incompatible:
        facts["ds_ops_incompatible"] = ", ".join(report.ds_incompatible)
    for package, version in report.packages.items():
        key = _PACKAGE_FACTS.get(package.lower().replace("_", "-").replace(".", "-"))
        if key is not None:
            facts.setdefault(key, version)
    torch = facts.get("torch", "")
    if "cuda_build" not in facts and (m := _CUDA_TAG.search(torch)):
        facts["cuda_build"] = f"{int(m['major'])}.{m['minor']}"  # 2.3.0+cu121 -> 12.1
    return EnvReport(
        report_kind=report.kind,
        facts=facts,
        packages=dict(report.packages),
        env_vars=dict(report.env_vars),
    )


def _event(source: Source, found: _Report) -> Event:
    report = _freeze(found)
    parts = [f"{key}={value}" for key, value in report.facts.items()]
    parts += [f"{name}={value}" for name, value in report.env_vars.items()]
    if report.packages and not report.facts:
        parts.append(f"{len(report.packages)} packages")
    text = f"{report.report_kind}: " + " ".join(parts)
    if found.processes:
        text += "\n" + "\n".join(found.processes)
    return Event(
        source=source.path,
        kind=EventKind.ENV_REPORT,
        text=text,
        line=found.first_line,
        end_line=max(found.first_line, found.last_line),
        rank=source.rank,
        local_rank=source.local_rank,
        host=source.host,
        level=Level.INFO,
        attrs={"report_kind": report.report_kind, "packages": len(report.packages)},
        payload=report,
    )


def _only_warning(
    source: Source,
    why: str,
    lines: int = 0,
    size: int = 0,
    warnings: list[str] | None = None,
) -> ParsedSource:
    event = input_warning(source, why, "env_report")
    return ParsedSource(
        source=source,
        events=(event,),
        warnings=tuple(warnings or [why]),
        lines=lines,
        bytes_read=size,
    )
