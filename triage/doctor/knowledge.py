"""The doctor's knowledge, as data: `rules/doctor/compat.yaml`, `rules/doctor/env_vars.yaml` and
`rules/doctor/findings.yaml` (what it says of each problem: `triage.doctor.advice`).

`load()` validates the files and raises `KnowledgeError` listing *every* problem (file, item,
field), the way pySigma's validators do, so one run shows all that is wrong. The files live in
a sub-folder of rules/ so the diagnosis rule loader, which reads rules/*.yaml, leaves them alone.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import regex
import yaml

from triage import taxonomy
from triage.doctor import advice
from triage.doctor.advice import FindingSpec
from triage.doctor.report import PreflightFinding

KNOWLEDGE_ENV = "TRIAGE_DOCTOR_DIR"  # another folder with the doctor's three files
COMPAT_FILE = "compat.yaml"
ENV_FILE = "env_vars.yaml"

SEVERITIES = ("error", "warning", "info")
ENV_KINDS = ("bool", "int", "interfaces", "choice", "list")
# what a known-bad row's `when` may test
WHEN_VERSION_KEYS = ("torch", "cuda", "nccl", "driver", "nvcc")
WHEN_KEYS = (*WHEN_VERSION_KEYS, "gpu", "installed", "env", "nvcc_major_differs")

_VAR_NAME = regex.compile(r"^[A-Z][A-Z0-9_]*$")
_URL = regex.compile(r"^https?://\S+$")
_SPEC = regex.compile(r"^\s*(==|!=|>=|<=|<|>)\s*(\d+(?:\.\d+)*(?:\.\*)?)\s*$")
_MINOR = regex.compile(r"^\d+\.\d+$")
_VERSION = regex.compile(r"^\d+(?:\.\d+)*$")


class KnowledgeError(Exception):
    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        super().__init__(
            f"{len(self.problems)} problem(s) in the doctor's knowledge:\n"
            + "\n".join(f"  {p}" for p in self.problems)
        )


# --------------------------------------------------------------------------- versions


def version_tuple(text: str) -> tuple[int, ...]:
    """`2.14.1+cu130` -> (2, 14, 1); `12.4` -> (12, 4); junk -> ()."""
    m = regex.match(r"\s*v?(\d+(?:\.\d+)*)", text or "")
    return tuple(int(p) for p in m.group(1).split(".")) if m else ()


def spec_problems(spec: str) -> list[str]:
    return [
        f"`{part.strip()}` is not a version condition (like `>=2.25` or `==2.20.*`)"
        for part in str(spec).split(",")
        if not _SPEC.match(part)
    ]


def matches(spec: str, version: str) -> bool:
    """Whether `version` satisfies every comma-joined condition of `spec`."""
    have = version_tuple(version)
    if not have:
        return False
    for part in spec.split(","):
        m = _SPEC.match(part)
        if m is None:
            return False
        op, raw = m.groups()
        if raw.endswith(".*"):
            want = version_tuple(raw[:-2])
            same = have[: len(want)] == want
            if (op == "==" and not same) or (op == "!=" and same):
                return False
            continue
        want = version_tuple(raw)
        width = max(len(have), len(want))
        a, b = have + (0,) * (width - len(have)), want + (0,) * (width - len(want))
        ok = {
            "==": a == b,
            "!=": a != b,
            ">=": a >= b,
            "<=": a <= b,
            "<": a < b,
            ">": a > b,
        }[op]
        if not ok:
            return False
    return True


# --------------------------------------------------------------------------- records


@dataclass(frozen=True)
class TorchRelease:
    torch: str  # "2.14"
    nccl_by_cuda: Mapping[str, str]  # "13.0" -> "2.30.7"
    pypi_default_cuda: str | None
    sources: tuple[str, ...]
    checked: str


@dataclass(frozen=True)
class DriverMinimum:
    cuda_major: str
    driver: str
    source: str


@dataclass(frozen=True)
class KnownBad:
    id: str
    when: Mapping[str, Any]
    severity: str
    root_cause: str
    fix: str
    title: str
    action: str
    source: str


@dataclass(frozen=True)
class EnvSpec:
    name: str
    kind: str
    values: tuple[str, ...] = ()
    min: int | None = None
    max: int | None = None
    exact: bool = False  # interfaces: exact names only (gloo), not NCCL's prefixes


@dataclass(frozen=True)
class Contradiction:
    id: str
    when: Mapping[str, str]
    title: str
    action: str
    source: str


@dataclass(frozen=True)
class Knowledge:
    releases: tuple[TorchRelease, ...]
    driver_minimum: tuple[DriverMinimum, ...]
    known_bad: tuple[KnownBad, ...]
    checked: Mapping[str, EnvSpec]
    known_vars: frozenset[str]
    deprecated: Mapping[str, tuple[str | None, str]]  # name -> (replacement, source)
    contradictions: tuple[Contradiction, ...]
    must_match: frozenset[str]
    per_rank: frozenset[str]
    sources: Mapping[str, str]
    findings: Mapping[str, FindingSpec]  # finding id -> its wording and taxonomy ids
    # the variable prefixes whose names are checked (NCCL_, TORCH_NCCL_, ...)
    checked_prefixes: tuple[str, ...] = ()
    # variables the launcher sets: a difference is a launch problem (R06), not a setting's
    launch_vars: frozenset[str] = frozenset()
    launch_prefixes: tuple[str, ...] = ()
    # versions whose difference across ranks is a warning, not an error
    mild_version_skew: frozenset[str] = frozenset()

    def finding(self, fid: str, **facts: Any) -> PreflightFinding:
        """Finding `fid` of `rules/doctor/findings.yaml`, filled with the check's facts (see
        `FindingSpec.make` for severity, var, evidence, ranks, hosts and source)."""
        return self.findings[fid].make(**facts)

    def release(self, torch_version: str) -> TorchRelease | None:
        v = version_tuple(torch_version)[:2]
        return next((r for r in self.releases if version_tuple(r.torch) == v), None)


# --------------------------------------------------------------------------- loading


def knowledge_dir() -> Path:
    env = os.environ.get(KNOWLEDGE_ENV)
    if env:
        return Path(env)
    here = Path(__file__).resolve().parent
    # package data (a wheel) first, then the repository's rules/ beside the package
    for candidate in (here.parent / "rules" / "doctor", here.parent.parent / "rules" / "doctor"):
        if candidate.is_dir():
            return candidate
    return here.parent.parent / "rules" / "doctor"


def load(directory: str | os.PathLike[str] | None = None) -> Knowledge:
    """Both files, validated; raises KnowledgeError with every problem found."""
    folder = Path(directory) if directory is not None else knowledge_dir()
    return _load_cached(str(folder.resolve()))


@lru_cache(maxsize=4)
def _load_cached(folder: str) -> Knowledge:
    problems: list[str] = []
    compat = _read(Path(folder) / COMPAT_FILE, problems)
    env = _read(Path(folder) / ENV_FILE, problems)
    said = _read(Path(folder) / advice.FINDINGS_FILE, problems)
    if said is not None:
        problems += advice.validate(said, advice.FINDINGS_FILE)
    if compat is not None:
        problems += validate_compat(compat, COMPAT_FILE)
    if env is not None:
        problems += validate_env(env, ENV_FILE)
    if problems:
        raise KnowledgeError(problems)
    assert compat is not None and env is not None and said is not None
    return _build(compat, env, advice.build(said))


def _read(path: Path, problems: list[str]) -> dict[str, Any] | None:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        problems.append(f"{path}: cannot read: {exc.strerror}")
        return None
    except yaml.YAMLError as exc:
        problems.append(f"{path}: not valid YAML: {exc}")
        return None
    if not isinstance(data, dict):
        problems.append(f"{path}: expected a mapping at the top")
        return None
    return data


def _is_url_or_fact(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip())


def validate_compat(doc: Mapping[str, Any], name: str = COMPAT_FILE) -> list[str]:
    """Every problem of a compat.yaml document, as `file: item: what`."""
    problems: list[str] = []
    tax = taxonomy.load()
    for key in doc:
        if key not in ("torch_releases", "driver_minimum", "known_bad", "mild_version_skew"):
            problems.append(f"{name}: unknown section {key!r}")
    mild = doc.get("mild_version_skew")
    if not (isinstance(mild, list) and all(isinstance(v, str) for v in mild)):
        problems.append(f"{name}: mild_version_skew must list version keys (driver, python)")
    seen: set[str] = set()
    for i, row in enumerate(_list(doc, "torch_releases", name, problems)):
        where = f"{name}: torch_releases[{i}]"
        if not isinstance(row, dict):
            problems.append(f"{where}: expected a mapping")
            continue
        where = f"{name}: torch_releases[{i}] (torch {row.get('torch')})"
        torch = row.get("torch")
        if not isinstance(torch, str) or not _MINOR.match(torch):
            problems.append(f"{where}: torch must be a quoted 'MAJOR.MINOR' string")
        elif torch in seen:
            problems.append(f"{where}: torch {torch} is listed twice")
        else:
            seen.add(torch)
        cuda = row.get("cuda")
        if not isinstance(cuda, dict) or not cuda:
            problems.append(f"{where}: cuda must map CUDA versions to the NCCL they bundle")
        else:
            for c, n in cuda.items():
                if not (isinstance(c, str) and _MINOR.match(c)):
                    problems.append(f"{where}: CUDA version {c!r} must be a quoted 'X.Y' string")
                if not (isinstance(n, str) and _VERSION.match(n)):
                    problems.append(f"{where}: NCCL version {n!r} for CUDA {c} is not a version")
        default = row.get("pypi_default_cuda")
        if default is not None and (not isinstance(cuda, dict) or default not in cuda):
            problems.append(f"{where}: pypi_default_cuda {default!r} is not one of its cuda keys")
        sources = row.get("sources")
        if not isinstance(sources, list) or not sources:
            problems.append(f"{where}: sources must list at least one URL")
        elif not any(isinstance(s, str) and _URL.match(s) for s in sources):
            problems.append(f"{where}: sources hold no http(s) URL")
        if not _is_url_or_fact(row.get("checked")):
            problems.append(f"{where}: checked must say how the row was checked")
        _unknown_keys(
            row, {"torch", "cuda", "pypi_default_cuda", "sources", "checked"}, where, problems
        )
    for i, row in enumerate(_list(doc, "driver_minimum", name, problems)):
        where = f"{name}: driver_minimum[{i}]"
        if not isinstance(row, dict):
            problems.append(f"{where}: expected a mapping")
            continue
        if not (isinstance(row.get("cuda"), str) and str(row["cuda"]).isdigit()):
            problems.append(f"{where}: cuda must be a quoted CUDA major version ('12')")
        if not (isinstance(row.get("driver"), str) and _VERSION.match(row["driver"])):
            problems.append(f"{where}: driver must be a quoted driver version ('525.60.13')")
        if not (isinstance(row.get("source"), str) and _URL.match(row["source"])):
            problems.append(f"{where}: source must be a URL")
        _unknown_keys(row, {"cuda", "driver", "source"}, where, problems)
    ids: set[str] = set()
    for i, row in enumerate(_list(doc, "known_bad", name, problems)):
        where = f"{name}: known_bad[{i}]"
        if not isinstance(row, dict):
            problems.append(f"{where}: expected a mapping")
            continue
        rid = row.get("id")
        where = f"{name}: known_bad[{i}] ({rid})"
        if not isinstance(rid, str) or not rid:
            problems.append(f"{where}: id is missing")
        elif rid in ids:
            problems.append(f"{where}: id {rid!r} is used twice")
        else:
            ids.add(rid)
        problems += [f"{where}: {p}" for p in _when_problems(row.get("when"))]
        if row.get("severity") not in SEVERITIES:
            problems.append(f"{where}: severity must be one of {', '.join(SEVERITIES)}")
        if row.get("root_cause") not in tax.root_causes:
            problems.append(f"{where}: root_cause {row.get('root_cause')!r} is not a taxonomy id")
        if row.get("fix") not in tax.fix_patterns:
            problems.append(f"{where}: fix {row.get('fix')!r} is not a taxonomy fix pattern")
        for text_field in ("title", "action", "source"):
            if not _is_url_or_fact(row.get(text_field)):
                problems.append(f"{where}: {text_field} is missing")
        _unknown_keys(
            row,
            {"id", "when", "severity", "root_cause", "fix", "title", "action", "source"},
            where,
            problems,
        )
    return problems


def _when_problems(when: Any) -> list[str]:
    if not isinstance(when, dict) or not when:
        return ["when must be a mapping of conditions"]
    problems: list[str] = []
    for key, value in when.items():
        if key not in WHEN_KEYS:
            problems.append(f"when: unknown condition {key!r} (known: {', '.join(WHEN_KEYS)})")
        elif key in WHEN_VERSION_KEYS:
            problems += [f"when.{key}: {p}" for p in spec_problems(value)]
        elif key == "installed" and not (
            isinstance(value, list) and value and all(isinstance(v, str) for v in value)
        ):
            problems.append("when.installed must list package names")
        elif key == "env" and not (
            isinstance(value, dict)
            and all(
                _VAR_NAME.match(str(k)) and (v is None or isinstance(v, str))
                for k, v in value.items()
            )
        ):
            problems.append("when.env must map variable names to a quoted value or null")
        elif key == "gpu" and not isinstance(value, str):
            problems.append("when.gpu must be a part of a GPU name")
        elif key == "nvcc_major_differs" and value is not True:
            problems.append("when.nvcc_major_differs can only be true")
    return problems


def validate_env(doc: Mapping[str, Any], name: str = ENV_FILE) -> list[str]:
    """Every problem of an env_vars.yaml document, as `file: item: what`."""
    problems: list[str] = []
    allowed = {
        "sources",
        "checked",
        "nccl",
        "torch",
        "deprecated",
        "contradictions",
        "must_match",
        "per_rank",
        "checked_prefixes",
        "launch_vars",
        "launch_prefixes",
    }
    for key in doc:
        if key not in allowed:
            problems.append(f"{name}: unknown section {key!r}")
    known: set[str] = set()
    for family in ("nccl", "torch"):
        section = doc.get(family)
        names = section.get("known") if isinstance(section, dict) else None
        if not isinstance(names, list) or not names:
            problems.append(f"{name}: {family}.known must list variable names")
            continue
        for v in names:
            if not (isinstance(v, str) and _VAR_NAME.match(v)):
                problems.append(f"{name}: {family}.known: {v!r} is not a variable name")
            elif v in known:
                problems.append(f"{name}: {family}.known: {v} is listed twice")
            else:
                known.add(v)
    checked = doc.get("checked")
    if not isinstance(checked, dict):
        problems.append(f"{name}: checked must map variable names to their kind")
        checked = {}
    for var, spec in checked.items():
        where = f"{name}: checked.{var}"
        if not (isinstance(spec, dict) and spec.get("kind") in ENV_KINDS):
            problems.append(f"{where}: kind must be one of {', '.join(ENV_KINDS)}")
            continue
        if var.startswith(("NCCL_", "TORCH_NCCL_", "TORCH_FR_")) and var not in known:
            problems.append(f"{where}: not in the nccl/torch known lists")
        if spec["kind"] in ("choice", "list"):
            values = spec.get("values")
            if not (
                isinstance(values, list) and values and all(isinstance(x, str) for x in values)
            ):
                problems.append(f"{where}: values must list quoted strings")
        for bound in ("min", "max"):
            if bound in spec and not isinstance(spec[bound], int):
                problems.append(f"{where}: {bound} must be a whole number")
        _unknown_keys(spec, {"kind", "values", "min", "max", "exact"}, where, problems)
    deprecated = doc.get("deprecated") or {}
    if not isinstance(deprecated, dict):
        problems.append(f"{name}: deprecated must map old names to {{use, source}}")
        deprecated = {}
    for var, row in deprecated.items():
        where = f"{name}: deprecated.{var}"
        if not isinstance(row, dict) or "use" not in row:
            problems.append(f"{where}: needs `use` (the new name, or null)")
            continue
        if row["use"] is not None and row["use"] not in known and row["use"] not in checked:
            problems.append(f"{where}: replacement {row['use']!r} is not a known variable")
        if var in known:
            problems.append(f"{where}: also listed as known (a current name)")
        if not _is_url_or_fact(row.get("source")):
            problems.append(f"{where}: source is missing")
    ids: set[str] = set()
    for i, row in enumerate(_list(doc, "contradictions", name, problems)):
        where = f"{name}: contradictions[{i}]"
        if not isinstance(row, dict):
            problems.append(f"{where}: expected a mapping")
            continue
        where = f"{name}: contradictions[{i}] ({row.get('id')})"
        if not isinstance(row.get("id"), str) or row["id"] in ids:
            problems.append(f"{where}: id is missing or used twice")
        else:
            ids.add(row["id"])
        when = row.get("when")
        if not (isinstance(when, dict) and len(when) >= 2):
            problems.append(f"{where}: when must name at least two variables")
        else:
            for var, value in when.items():
                if not _VAR_NAME.match(str(var)) or not isinstance(value, str):
                    problems.append(f"{where}: when.{var} must be a quoted value or `set`")
        for text_field in ("title", "action", "source"):
            if not _is_url_or_fact(row.get(text_field)):
                problems.append(f"{where}: {text_field} is missing")
    for key in ("must_match", "per_rank"):
        values = doc.get(key)
        if not (isinstance(values, list) and all(_VAR_NAME.match(str(v)) for v in values)):
            problems.append(f"{name}: {key} must list variable names")
    prefixes = doc.get("checked_prefixes")
    if not (
        isinstance(prefixes, list)
        and prefixes
        and all(isinstance(p, str) and regex.match(r"^[A-Z][A-Z0-9_]*_$", p) for p in prefixes)
    ):
        problems.append(f"{name}: checked_prefixes must list variable-name prefixes (NCCL_)")
    for key in ("launch_vars", "launch_prefixes"):
        values = doc.get(key)
        if not (isinstance(values, list) and values and all(isinstance(v, str) for v in values)):
            problems.append(f"{name}: {key} must list variable names")
    both = set(doc.get("must_match") or ()) & set(doc.get("per_rank") or ())
    if both:
        problems.append(f"{name}: in both must_match and per_rank: {', '.join(sorted(both))}")
    return problems


def _list(doc: Mapping[str, Any], key: str, name: str, problems: list[str]) -> list[Any]:
    value = doc.get(key)
    if not isinstance(value, list) or not value:
        problems.append(f"{name}: {key} must be a non-empty list")
        return []
    return value


def _unknown_keys(
    row: Mapping[str, Any], allowed: set[str], where: str, problems: list[str]
) -> None:
    for key in row:
        if key not in allowed:
            problems.append(f"{where}: unknown field {key!r}")


def _build(
    compat: Mapping[str, Any], env: Mapping[str, Any], findings: Mapping[str, FindingSpec]
) -> Knowledge:
    checked = {
        var: EnvSpec(
            name=var,
            kind=spec["kind"],
            values=tuple(spec.get("values") or ()),
            min=spec.get("min"),
            max=spec.get("max"),
            exact=bool(spec.get("exact")),
        )
        for var, spec in env["checked"].items()
    }
    return Knowledge(
        releases=tuple(
            TorchRelease(
                torch=r["torch"],
                nccl_by_cuda=dict(r["cuda"]),
                pypi_default_cuda=r.get("pypi_default_cuda"),
                sources=tuple(r["sources"]),
                checked=r["checked"],
            )
            for r in compat["torch_releases"]
        ),
        driver_minimum=tuple(
            DriverMinimum(r["cuda"], r["driver"], r["source"]) for r in compat["driver_minimum"]
        ),
        known_bad=tuple(
            KnownBad(
                id=r["id"],
                when=dict(r["when"]),
                severity=r["severity"],
                root_cause=r["root_cause"],
                fix=r["fix"],
                title=r["title"],
                action=r["action"],
                source=r["source"],
            )
            for r in compat["known_bad"]
        ),
        checked=checked,
        known_vars=frozenset(env["nccl"]["known"]) | frozenset(env["torch"]["known"]),
        deprecated={
            var: (row["use"], row["source"]) for var, row in (env.get("deprecated") or {}).items()
        },
        contradictions=tuple(
            Contradiction(r["id"], dict(r["when"]), r["title"], r["action"], r["source"])
            for r in env["contradictions"]
        ),
        must_match=frozenset(env["must_match"]),
        per_rank=frozenset(env["per_rank"]),
        sources=dict(env.get("sources") or {}),
        findings=findings,
        checked_prefixes=tuple(env["checked_prefixes"]),
        launch_vars=frozenset(env["launch_vars"]),
        launch_prefixes=tuple(env["launch_prefixes"]),
        mild_version_skew=frozenset(compat["mild_version_skew"]),
    )
