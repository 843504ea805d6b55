"""Harvest the message atlas (`models/atlas/`) from the source of the releases users run.

    python bench/harvest_atlas.py --cache ~/.cache/triage-atlas \
        --git nccl=/path/to/nccl.git --git gloo=/path/to/gloo.git --git apex=/path/to/apex.git
    python bench/harvest_atlas.py --relabel      # labels again from rules/atlas_labels.yaml
    python bench/harvest_atlas.py --add --tree torch-csrc=DIR   # one source, the rest kept

Python releases come from PyPI (`pip download --no-deps`, torch's CPU wheel from PyTorch's
index) into the cache folder, never into the repository; C/C++ libraries (NCCL, gloo) and
NVIDIA apex (PyPI's `apex` is another project) are read from a git directory (`git archive
HEAD`). torch's own C++ (`torch/csrc/distributed/c10d`, `c10/cuda`), which the wheel does not
ship and whose repository is too large to mirror, is read from a folder of its files copied at
their repository paths (`--tree torch-csrc=DIR`), with `SOURCE.json` naming the repository,
each file's commit and what was copied; the manifest keeps all of it. `--add` harvests only the
sources named and keeps every other library's templates as the shipped atlas has them. Each
template is labelled by `rules/atlas_labels.yaml`. `triage` itself downloads nothing: it reads
what this script wrote.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tarfile
import zipfile
from collections import Counter, defaultdict
from dataclasses import dataclass, replace
from pathlib import Path

from triage import knowledge
from triage.knowledge import atlas
from triage.train.harvest import CXX_SUFFIXES, PY_SUFFIXES, harvest_tree
from triage.train.harvest.found import Found

ROOT = Path(__file__).resolve().parent.parent
TORCH_INDEX = "https://download.pytorch.org/whl/cpu"


@dataclass(frozen=True)
class Release:
    lib: str
    spec: str  # what pip downloads; "" for a git source
    include: tuple[str, ...]  # path prefixes inside the release that are harvested


TORCH_PARTS = (
    "torch/distributed/",
    "torch/nn/parallel/",
    "torch/utils/data/",
    "torch/utils/checkpoint.py",
    "torch/utils/cpp_extension.py",
    "torch/cuda/",
    "torch/multiprocessing/",
    "torch/serialization.py",
    "torch/optim/",
    "torch/amp/",
    "torch/_dynamo/exc.py",
    "torch/_inductor/exc.py",
    "torch/nn/modules/module.py",
    "torch/include/torch/csrc/distributed/",
)
TRANSFORMERS_PARTS = (
    "transformers/trainer",
    "transformers/training_args.py",
    "transformers/modeling_utils.py",
    "transformers/configuration_utils.py",
    "transformers/integrations/",
    "transformers/utils/import_utils.py",
    "transformers/utils/hub.py",
    "transformers/utils/versions.py",
    "transformers/tokenization_utils_base.py",
    "transformers/generation/utils.py",
    "transformers/data/",
    "transformers/optimization.py",
    "transformers/quantizers/",
)
# vLLM: the engine, its workers, executors, scheduler, configuration, parallel state and model
# loading (its model zoo's and kernels' per-model checks are thousands of lines nobody pastes)
VLLM_PARTS = (
    "vllm/engine/",
    "vllm/v1/engine/",
    "vllm/v1/worker/",
    "vllm/v1/core/",
    "vllm/v1/executor/",
    "vllm/executor/",
    "vllm/worker/",
    "vllm/distributed/parallel_state.py",
    "vllm/distributed/device_communicators/",
    "vllm/distributed/utils.py",
    "vllm/config/",
    "vllm/config.py",
    "vllm/platforms/",
    "vllm/model_executor/model_loader/",
    "vllm/entrypoints/llm.py",
    "vllm/entrypoints/cli/",
    "vllm/utils/",
    "vllm/envs.py",
    "vllm/transformers_utils/config.py",
)
# Newest release first (a template's file and function are the newest's); an older release
# users still run adds the messages that have changed since.
PYPI = (
    # torch: the parts a distributed job runs through (its other modules' checks are about
    # single ops, which the generic layer covers), and its C++ headers of c10d
    # torch: the parts a distributed job runs through (its other modules' checks are about
    # single ops, which the generic layer covers), and its C++ headers of c10d
    Release("torch", "torch==2.13.0", TORCH_PARTS),
    Release("torch", "torch==2.4.1", TORCH_PARTS),
    Release("deepspeed", "deepspeed==0.19.8", ("deepspeed/", "op_builder/")),
    Release("deepspeed", "deepspeed==0.14.4", ("deepspeed/", "op_builder/")),
    Release("megatron-core", "megatron-core==0.16.1", ("megatron/",)),
    Release("megatron-core", "megatron-core==0.9.0", ("megatron/",)),
    Release("transformers", "transformers==5.25.0", TRANSFORMERS_PARTS),
    Release("transformers", "transformers==4.46.3", TRANSFORMERS_PARTS),
    Release("accelerate", "accelerate==1.16.0", ("accelerate/",)),
    Release("accelerate", "accelerate==0.34.2", ("accelerate/",)),
    Release("lightning", "lightning==2.6.6", ("lightning/fabric/", "lightning/pytorch/")),
    Release("lightning", "lightning==2.4.0", ("lightning/fabric/", "lightning/pytorch/")),
    Release("peft", "peft==0.21.2", ("peft/",)),
    Release("peft", "peft==0.13.2", ("peft/",)),
    Release("trl", "trl==1.16.0", ("trl/",)),
    Release("trl", "trl==0.12.0", ("trl/",)),
    Release("vllm", "vllm==0.34.0", VLLM_PARTS),
    Release("transformer-engine", "transformer-engine==2.20.2", ("transformer_engine/",)),
)
GIT_SOURCES = {
    "nccl": "github:NVIDIA/nccl",
    "gloo": "github:pytorch/gloo",
    "apex": "github:NVIDIA/apex",
}
GIT = {
    "nccl": Release("nccl", "", ("src/",)),
    "gloo": Release("gloo", "", ("gloo/",)),
    "apex": Release("apex", "", ("apex/", "csrc/")),
}
# Folders of files copied from a repository too large to mirror (`--tree LIB=DIR`): DIR holds
# each file at its repository path and SOURCE.json ({"repo", "files": {path: commit},
# "copied"}: what of each file was copied)
TREE_SOURCES = {"torch-csrc": "github:pytorch/pytorch"}
TREE = {"torch-csrc": Release("torch-csrc", "", ("torch/csrc/", "c10/"))}
SOURCE_FILE = "SOURCE.json"
SUFFIXES = PY_SUFFIXES + CXX_SUFFIXES


def download(release: Release, cache: Path) -> Path:
    """The release's wheel or sdist in the cache (pip download, once)."""
    folder = cache / "dl" / release.lib
    folder.mkdir(parents=True, exist_ok=True)
    have = sorted(
        p for p in folder.iterdir() if p.suffix in (".whl", ".gz") and _matches(p, release)
    )
    if have:
        return have[0]
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-d", str(folder), release.spec]
    if release.lib == "torch":
        cmd[4:4] = ["--extra-index-url", TORCH_INDEX]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    have = sorted(
        p for p in folder.iterdir() if p.suffix in (".whl", ".gz") and _matches(p, release)
    )
    if not have:
        raise RuntimeError(f"pip downloaded no archive of {release.spec}")
    return have[0]


def _matches(path: Path, release: Release) -> bool:
    version = release.spec.split("==")[1]
    return f"-{version}" in path.name or f"-{version}+" in path.name


def unpack(archive: Path, release: Release, cache: Path) -> Path:
    """The harvested members of a wheel or sdist under cache/src/<name> (sources only)."""
    dest = cache / "src" / archive.name
    if dest.is_dir():
        return dest
    tmp = dest.with_suffix(".partial")
    tmp.mkdir(parents=True, exist_ok=True)
    if archive.suffix == ".whl":
        with zipfile.ZipFile(archive) as zf:
            for name in zf.namelist():
                if name.endswith(SUFFIXES) and name.startswith(release.include):
                    zf.extract(name, tmp)
    else:
        with tarfile.open(archive) as tf:
            for member in tf.getmembers():
                inner = member.name.split("/", 1)[-1]
                if (
                    member.isfile()
                    and inner.endswith(SUFFIXES)
                    and inner.startswith(release.include)
                ):
                    member.name = inner
                    tf.extract(member, tmp, filter="data")
    tmp.rename(dest)
    return dest


def git_tree(lib: str, git_dir: Path, cache: Path) -> tuple[Path, str]:
    """HEAD of a git directory under cache/src, and the release it is (version or commit)."""
    commit = subprocess.run(
        ["git", "--git-dir", str(git_dir), "rev-parse", "HEAD"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    dest = cache / "src" / f"{lib}-{commit[:12]}"
    if not dest.is_dir():
        tmp = dest.with_suffix(".partial")
        tmp.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(
            ["git", "--git-dir", str(git_dir), "archive", "HEAD", *GIT[lib].include],
            check=True,
            capture_output=True,
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(tmp)], input=archive, check=True)
        tmp.rename(dest)
    return dest, _git_version(lib, git_dir, commit)


def _git_version(lib: str, git_dir: Path, commit: str) -> str:
    if lib == "nccl":  # makefiles/version.mk: NCCL_MAJOR := 2 ...
        text = subprocess.run(
            ["git", "--git-dir", str(git_dir), "show", "HEAD:makefiles/version.mk"],
            capture_output=True,
            text=True,
        ).stdout
        nums = dict(
            line.replace(" ", "").split(":=", 1) for line in text.splitlines() if ":=" in line
        )
        if {"NCCL_MAJOR", "NCCL_MINOR", "NCCL_PATCH"} <= set(nums):
            return f"{nums['NCCL_MAJOR']}.{nums['NCCL_MINOR']}.{nums['NCCL_PATCH']} ({commit[:12]})"
    return f"git {commit[:12]}"


def tree_source(lib: str, folder: Path) -> tuple[Path, str, dict[str, object]]:
    """A folder of copied files: its root, the release it is, and its SOURCE.json (every file
    it names must be there, and every harvested file must be named)."""
    source = json.loads((folder / SOURCE_FILE).read_text(encoding="utf-8"))
    files: dict[str, str] = source["files"]
    missing = sorted(path for path in files if not (folder / path).is_file())
    if missing:
        raise OSError(f"{folder}: {SOURCE_FILE} names files that are not there: {missing}")
    unnamed = sorted(
        path.relative_to(folder).as_posix()
        for path in folder.rglob("*")
        if path.is_file()
        and path.name != SOURCE_FILE
        and path.relative_to(folder).as_posix() not in files
    )
    if unnamed:
        raise OSError(f"{folder}: files not named in {SOURCE_FILE}: {unnamed}")
    commits = sorted(set(files.values()))
    version = f"git, {len(files)} files at {len(commits)} commits ({SOURCE_FILE})"
    return folder, version, source


def template_id(lib: str, f: Found) -> str:
    key = "\0".join((lib, f.kind, f.type, *f.parts, str(f.leading), str(f.trailing)))
    return hashlib.sha1(key.encode("utf-8")).hexdigest()[:12]


def collect(
    lib: str, release: str, root: Path, include: tuple[str, ...]
) -> dict[str, atlas.Template]:
    """The templates of one release, one per distinct message (its sites counted)."""
    sites: dict[str, list[Found]] = defaultdict(list)
    for f in harvest_tree(root):
        if f.file.startswith(include):
            sites[template_id(lib, f)].append(f)
    out = {}
    for tid, found in sites.items():
        first = min(found, key=lambda f: (f.file, f.function))
        out[tid] = atlas.Template(
            id=tid,
            lib=lib,
            kind=first.kind,
            type=first.type,
            parts=first.parts,
            leading=first.leading,
            trailing=first.trailing,
            file=first.file,
            function=first.function,
            condition=first.condition,
            releases=(release,),
            sites=len(found),
        )
    return out


def merge(found: dict[str, atlas.Template], more: dict[str, atlas.Template]) -> None:
    """Another release's templates: one already known gains the release."""
    for tid, t in more.items():
        have = found.get(tid)
        if have is None:
            found[tid] = t
        else:
            found[tid] = replace(have, releases=(*have.releases, *t.releases))


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--cache", type=Path, help="where downloads and unpacked sources go (not the repo)"
    )
    ap.add_argument("--git", action="append", default=[], help="LIB=GIT_DIR for nccl, gloo, apex")
    ap.add_argument(
        "--tree",
        action="append",
        default=[],
        help="LIB=DIR for torch-csrc: files copied at their repository paths, with SOURCE.json",
    )
    ap.add_argument(
        "--add",
        action="store_true",
        help="harvest only the --git/--tree sources named; keep the other libraries' templates",
    )
    ap.add_argument("--out", type=Path, default=ROOT / "models" / "atlas")
    ap.add_argument("--only", action="append", default=[], help="harvest only these libraries")
    ap.add_argument(
        "--relabel", action="store_true", help="label the shipped atlas again, no download"
    )
    ap.add_argument(
        "--review",
        type=int,
        metavar="N",
        help="list the N templates the reference cases and real job logs instantiate most",
    )
    args = ap.parse_args()
    rules = knowledge.load().atlas_labels
    if args.review:
        review_list(args.review)
        return 0
    if args.relabel:
        kept = atlas.Atlas(args.out)
        templates = atlas.relabel(kept.templates, rules)
        manifest = dict(kept.manifest)
        manifest.update(_counts(templates))
        atlas.write(args.out, templates, manifest)
        print(f"relabelled {len(templates)} templates in {args.out}")
        return 0
    if args.add:
        return add_sources(args, rules)
    if args.cache is None or ROOT in args.cache.resolve().parents or args.cache.resolve() == ROOT:
        ap.error("--cache must name a folder outside the repository")
    cache = args.cache.resolve()
    releases: dict[str, str] = {}
    failed: dict[str, str] = {
        "apex (PyPI)": (
            "PyPI's `apex` is another project; NVIDIA apex is read from its git repository"
        ),
    }
    found: dict[str, atlas.Template] = {}
    trees: dict[str, dict[str, object]] = {}
    for item in args.tree:
        lib, _, folder = item.partition("=")
        if lib not in TREE or (args.only and lib not in args.only):
            continue
        root, releases[lib], trees[lib] = tree_source(lib, Path(folder))
        merge(found, collect(lib, releases[lib], root, TREE[lib].include))
        print(f"{lib} {releases[lib]}: {sum(t.lib == lib for t in found.values())} templates")
    for rel in PYPI:
        if args.only and rel.lib not in args.only:
            continue
        try:
            root = unpack(download(rel, cache), rel, cache)
        except (subprocess.CalledProcessError, RuntimeError, OSError) as exc:
            detail = getattr(exc, "stderr", "") or str(exc)
            failed[rel.lib] = detail.strip().splitlines()[-1] if detail.strip() else repr(exc)
            continue
        version = rel.spec.split("==")[1]
        releases[rel.lib] = f"{releases[rel.lib]}, {version}" if rel.lib in releases else version
        merge(found, collect(rel.lib, version, root, rel.include))
        print(
            f"{rel.lib} {version}: {sum(t.lib == rel.lib for t in found.values())} templates",
            flush=True,
        )
    for item in args.git:
        lib, _, git_dir = item.partition("=")
        if lib not in GIT or (args.only and lib not in args.only):
            continue
        try:
            root, version = git_tree(lib, Path(git_dir), cache)
        except (subprocess.CalledProcessError, OSError) as exc:
            failed[lib] = str(exc)
            continue
        releases[lib] = version
        merge(found, collect(lib, version, root, GIT[lib].include))
        print(f"{lib} {version}: {sum(t.lib == lib for t in found.values())} templates", flush=True)
    templates = atlas.relabel(sorted(found.values(), key=lambda t: (t.lib, t.file, t.id)), rules)
    manifest = {
        "schema": 1,
        "releases": releases,
        "not_harvested": failed,
        "git_sources": {lib: GIT_SOURCES[lib] for lib in releases if lib in GIT_SOURCES},
        "tree_sources": {lib: _tree_entry(lib, source) for lib, source in trees.items()},
        "command": f"python bench/harvest_atlas.py {_argv(args)}",
        **_counts(templates),
    }
    atlas.write(args.out, templates, manifest)
    print(f"{len(templates)} templates written to {args.out}")
    return 0


def _argv(args: argparse.Namespace) -> str:
    """This run's command line with its machine's folders named by what they are."""
    out = []
    for a in sys.argv[1:]:
        lib = a.split("=")[0]
        if args.cache is not None and a == str(args.cache):
            out.append("CACHE")
        elif "=" in a and lib in GIT:
            out.append(f"{lib}=GIT_DIR")
        elif "=" in a and lib in TREE:
            out.append(f"{lib}=DIR")
        else:
            out.append(a)
    return " ".join(out)


def _tree_entry(lib: str, source: dict[str, object]) -> dict[str, object]:
    files = source["files"]
    assert isinstance(files, dict)
    return {
        "repo": source.get("repo", TREE_SOURCES[lib]),
        "files": dict(sorted(files.items())),
        "copied": source.get("copied", ""),
        "reproduce": (
            "git clone --filter=blob:none --no-checkout https://github.com/pytorch/pytorch "
            "DIR.git, then for each path and commit above `git -C DIR.git show COMMIT:PATH > "
            "DIR/PATH` (a sparse checkout of those paths at their commits); the harvest of "
            "whole files holds these templates and the few that the copied excerpts left out"
        ),
    }


def add_sources(args: argparse.Namespace, rules: atlas.AtlasLabels) -> int:
    """Harvest only the --git/--tree sources named, replacing their library's templates in
    the shipped atlas; every other library's templates, releases and counts are kept."""
    kept = atlas.Atlas(args.out)
    manifest = dict(kept.manifest)
    found: dict[str, atlas.Template] = {}
    releases = dict(manifest.get("releases", {}))
    trees = dict(manifest.get("tree_sources", {}))
    for item in args.tree:
        lib, _, folder = item.partition("=")
        if lib not in TREE:
            raise SystemExit(f"unknown --tree source {lib!r}; known: {', '.join(TREE)}")
        root, releases[lib], source = tree_source(lib, Path(folder))
        trees[lib] = _tree_entry(lib, source)
        merge(found, collect(lib, releases[lib], root, TREE[lib].include))
    for item in args.git:
        lib, _, git_dir = item.partition("=")
        if lib not in GIT or args.cache is None:
            raise SystemExit(f"--git {lib} needs a known library ({', '.join(GIT)}) and --cache")
        root, releases[lib] = git_tree(lib, Path(git_dir), args.cache.resolve())
        merge(found, collect(lib, releases[lib], root, GIT[lib].include))
    added = {t.lib for t in found.values()}
    others = [t for t in kept.templates if t.lib not in added]
    templates = atlas.relabel(
        sorted([*others, *found.values()], key=lambda t: (t.lib, t.file, t.id)), rules
    )
    manifest["releases"] = dict(sorted(releases.items()))
    manifest["tree_sources"] = trees
    manifest.pop("not_harvested_note", None)
    rebuild = str(manifest.get("command", "python bench/harvest_atlas.py"))
    for item in args.tree:
        flag = f"--tree {item.split('=')[0]}=DIR"
        if flag not in rebuild:
            rebuild += f" {flag}"
    manifest["command"] = rebuild
    manifest["added_by"] = f"python bench/harvest_atlas.py {_argv(args)}"
    manifest.update(_counts(templates))
    atlas.write(args.out, templates, manifest)
    for lib in sorted(added):
        print(f"{lib}: {sum(t.lib == lib for t in templates)} templates")
    print(f"{len(templates)} templates written to {args.out}")
    return 0


# Logs of real jobs that may be read for the review list: the public jobs' logs of
# corpus_samples/third_party/ (their reference part: bench/eval_jobs.py's split), the bundles
# of corpus_samples/, the healthy runs of bench/samples/logs/ and the tests' fixtures
LOG_FOLDERS = ("corpus_samples", "bench/samples", "tests/fixtures")
LOG_SUFFIXES = ("", ".log", ".txt", ".out", ".err")
HEALTHY_LOGS = "bench/samples/logs"  # tiny runs that trained and exited 0
MAX_LOG_BYTES = 5_000_000


def _instantiated(m: object, text: str) -> set[str]:
    """Ids of the templates a text instantiates, read in windows of lines (a log can be long;
    a message of several lines stays in one window)."""
    lines = text.splitlines()
    ids: set[str] = set()
    for start in range(0, max(len(lines), 1), 150):
        window = "\n".join(lines[max(0, start - 10) : start + 150])
        ids.update(t.id for t, _, _ in m.matches(window))  # type: ignore[attr-defined]
    return ids


def _review_sources() -> list[tuple[str, str, bool, tuple[str, ...]]]:
    """(name, text, healthy, labels) of every text the review list counts: each reference
    case's paste, each reference job of corpus_samples/third_party/ (held-out ones are not
    read), each log file of the other folders."""
    from triage.knowledge import corpus

    sys.path.insert(0, str(ROOT / "bench"))
    import eval_jobs

    out: list[tuple[str, str, bool, tuple[str, ...]]] = []
    for path in corpus.reference_files():
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                case = json.loads(line)
                labels = tuple(case[f] for f in atlas.FIELDS)
                out.append((f"case:{case['id']}", case["evidence"][:20_000], False, labels))
    for job in eval_jobs.cases([eval_jobs.CASES]):
        if eval_jobs.held_out(job.url):
            continue
        text = "\n".join(
            Path(f).read_text(encoding="utf-8", errors="replace")
            for f in job.files
            if Path(f).suffix in LOG_SUFFIXES
        )
        healthy = job.truth["outcome"] not in eval_jobs.FAILURES
        out.append((f"job:{job.id}", text, healthy, (str(job.truth.get("symptom")),)))
    for folder in LOG_FOLDERS:
        for path in sorted((ROOT / folder).rglob("*")):
            rel = path.relative_to(ROOT).as_posix()
            if (
                not path.is_file()
                or "third_party" in path.parts
                or "atlas_src" in path.parts
                or path.suffix not in LOG_SUFFIXES
                or path.stat().st_size > MAX_LOG_BYTES
            ):
                continue
            text = path.read_text(encoding="utf-8", errors="replace")
            out.append((f"log:{rel}", text, rel.startswith(HEALTHY_LOGS), ()))
    return out


def review_list(n: int) -> None:
    """The templates that the text we may read instantiates, most often first: the reference
    cases (never the held-out ones) and the logs of real jobs, healthy and failed. Each with
    its labels, the cases' labels beside them and how many healthy runs print it (those must
    carry no failure label): what to review by hand."""
    from triage.classify import atlas as matching

    kb = knowledge.load()
    m = matching.matcher(kb.atlas)
    by_id = {t.id: t for t in kb.atlas.templates}
    count: Counter[str] = Counter()
    kinds: dict[str, Counter[str]] = defaultdict(Counter)
    healthy: Counter[str] = Counter()
    seen_labels: dict[str, Counter[tuple[str, ...]]] = defaultdict(Counter)
    for name, text, is_healthy, labels in _review_sources():
        for tid in _instantiated(m, text):
            count[tid] += 1
            kinds[tid][name.split(":")[0]] += 1
            healthy[tid] += is_healthy
            if labels:
                seen_labels[tid][labels] += 1
    for tid, times in count.most_common(n):
        t = by_id[tid]
        mark = "reviewed" if t.reviewed else t.labelled_by or "-"
        where = ", ".join(f"{k} {v}" for k, v in kinds[tid].most_common())
        print(f"{tid} {times}x ({where}; healthy {healthy[tid]}) {t.lib} {t.type} {t.function}")
        print(f"    {t.text[:150]!r}")
        print(f"    {mark} {dict(t.labels)}  cases: {seen_labels[tid].most_common(3)}")


def _counts(templates: list[atlas.Template]) -> dict[str, object]:
    per_lib: dict[str, Counter[str]] = defaultdict(Counter)
    for t in templates:
        per_lib[t.lib][t.kind] += 1
    return {
        "templates": len(templates),
        "labelled": sum(
            bool(t.labels.get("symptom") or t.labels.get("root_cause")) for t in templates
        ),
        "reviewed": sum(t.reviewed for t in templates),
        "per_library": {lib: dict(sorted(c.items())) for lib, c in sorted(per_lib.items())},
    }


if __name__ == "__main__":
    sys.exit(main())
