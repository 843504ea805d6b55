"""Make the corpus sample bundles by running real distributed jobs that fail.

Each scenario launches a training script from ``jobs/`` under ``torchrun`` (gloo on CPU, 2-4 ranks),
captures what a user has after the crash (launcher console, ``--log-dir`` files, flight-recorder
dumps, py-spy dumps of hung ranks, error files, ``collect_env``), scrubs this machine's paths and
host name, and writes the bundle with its ``expected.json`` truth.

    python corpus_samples/make.py raise_mid_step            # one scenario, into corpus_samples/
    python corpus_samples/make.py --all --out /tmp/bundles  # every scenario elsewhere
    python corpus_samples/make.py --list
    python corpus_samples/make.py --check                   # shipped bundles still hold
    python corpus_samples/make.py --rewrite-fr              # shipped dumps in torch's layout
"""

from __future__ import annotations

import argparse
import io
import json
import os
import pickle
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from corpus_scenarios import SCENARIOS, Node, Scenario  # noqa: E402
from fr_pickle import dumps as torch_pickle  # noqa: E402
from fr_pickle import share_frames  # noqa: E402

HERE = Path(__file__).resolve().parent
JOBS = HERE / "jobs"
VENV = Path(sys.prefix)
BASE_PYTHON = Path(sys.base_prefix)
CHECKOUT = HERE.parent
TORCHRUN = Path(sys.executable).parent / "torchrun"

# Neutral paths that replace this machine's in everything shipped.
SHIP_WORKSPACE = "/workspace"
SHIP_VENV = "/opt/venv"
SHIP_BASE_PYTHON = "/usr/local"
SHIP_HOME = "/home/mluser"


# A scenario folder holds the truth (expected.json, README.md) beside the evidence folder
# `bundle/`, so that running triage on the evidence never reads the answer.
EVIDENCE = "bundle"


def evidence_dir(scenario_dir: Path) -> Path:
    """The folder a user would have after the crash: what triage is run on."""
    return scenario_dir / EVIDENCE


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def clean_env() -> dict[str, str]:
    """This process's environment without what would leak into a job's launcher (the test
    runner's, torchrun's and a caller's rank and master settings, this venv)."""
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TORCH", "PYTEST", "VIRTUAL_ENV", "RANK", "MASTER"))
    }


# ---------------------------------------------------------------------------------------------
# Scrubbing: nothing of this machine leaves in a bundle.


def _scrubber(run_root: Path, host: str, extra: dict[str, str]) -> Callable[[str], str]:
    pairs = {
        str(run_root / "workspace"): SHIP_WORKSPACE,
        **{str(run_root / k): v for k, v in extra.items()},
        str(run_root): "/tmp/job",
        str(VENV): SHIP_VENV,
        str(CHECKOUT): SHIP_WORKSPACE,
        str(BASE_PYTHON): SHIP_BASE_PYTHON,
        str(Path.home()): SHIP_HOME,
    }
    ordered = sorted(pairs.items(), key=lambda kv: -len(kv[0]))
    this_host = re.escape(socket.gethostname())
    host_line = re.compile(r"^(\s*host\s*: )(?:localhost|" + this_host + r")\s*$", re.M)
    bare_host = re.compile(r"(?<![\w.-])" + this_host + r"(?![\w-])")

    def scrub(text: str) -> str:
        for old, new in ordered:
            text = text.replace(old, new)
        text = host_line.sub(lambda m: m.group(1) + host, text)
        return bare_host.sub(host, text)

    return scrub


def _rewrite(obj: Any, scrub: Callable[[str], str], done: dict[int, Any] | None = None) -> Any:
    """`obj` with every string scrubbed; a container held twice (torch's shared frame dicts)
    stays one object, so the dump keeps torch's memo layout when written again."""
    if isinstance(obj, str):
        return scrub(obj)
    if not isinstance(obj, (dict, list, tuple)):
        return obj
    done = {} if done is None else done
    if id(obj) in done:
        return done[id(obj)]
    if isinstance(obj, dict):
        new: Any = {_rewrite(k, scrub, done): _rewrite(v, scrub, done) for k, v in obj.items()}
    elif isinstance(obj, list):
        new = [_rewrite(v, scrub, done) for v in obj]
    else:
        new = tuple(_rewrite(v, scrub, done) for v in obj)
    done[id(obj)] = new
    return new


class _PlainUnpickler(pickle.Unpickler):
    """Flight-recorder pickles hold only containers and scalars; refuse anything else."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}")


def load_fr(path: Path) -> Any:
    data = path.read_bytes()
    if data[:1] == b"{":
        return json.loads(data)
    return _PlainUnpickler(io.BytesIO(data)).load()


def _copy_text(src: Path, dst: Path, scrub: Callable[[str], str]) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_text(scrub(src.read_text(encoding="utf-8", errors="replace")), encoding="utf-8")


def _copy_fr(src: Path, dst: Path, scrub: Callable[[str], str]) -> None:
    try:
        data = load_fr(src)
    except (pickle.UnpicklingError, EOFError, ValueError) as exc:
        # A dump cut short by the launcher's kill: it cannot be scrubbed, so it is not shipped.
        print(f"skipping unreadable flight-recorder dump {src.name}: {exc!r}", file=sys.stderr)
        return
    dst.parent.mkdir(parents=True, exist_ok=True)
    if src.read_bytes()[:1] == b"{":
        dst.write_text(json.dumps(_rewrite(data, scrub)), encoding="utf-8")
    else:
        # In torch's own layout (bench/fr_pickle.py), so readers see the bytes a real dump has:
        # Python's pickler lays the same object out otherwise.
        dst.write_bytes(torch_pickle(_rewrite(data, scrub)))


def rewrite_fr_layout(bundle: Path) -> list[Path]:
    """Write the bundle's pickled dumps again in torch's layout, content unchanged (dumps
    shipped before make.py wrote that layout were re-pickled by Python's pickler, each frame
    a copy: equal frames are shared again, as torch's frame table held them). The rewritten."""
    done = []
    for f in sorted(p for p in evidence_dir(bundle).rglob("*") if p.is_file()):
        data = f.read_bytes()
        if data[:2] != b"\x80\x02":
            continue
        dump = load_fr(f)
        new = torch_pickle(share_frames(dump))
        if new != data:
            if _PlainUnpickler(io.BytesIO(new)).load() != dump:
                raise AssertionError(f"{f}: rewriting changed the dump's content")
            f.write_bytes(new)
            done.append(f)
    return done


# ---------------------------------------------------------------------------------------------
# Running a scenario.


def _worker_pids(agent_pid: int) -> dict[int, int]:
    """rank -> pid of the workers a torchrun agent started (read from /proc)."""
    found: dict[int, int] = {}
    try:
        tasks = os.listdir(f"/proc/{agent_pid}/task")
    except OSError:
        return found
    for tid in tasks:
        try:
            children = Path(f"/proc/{agent_pid}/task/{tid}/children").read_text().split()
        except OSError:
            continue
        for child in children:
            try:
                environ = Path(f"/proc/{child}/environ").read_bytes().split(b"\0")
            except OSError:
                continue
            for item in environ:
                if item.startswith(b"RANK="):
                    found[int(item[5:])] = int(child)
    return found


def _rss_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _pyspy(pid: int, dst: Path) -> None:
    pyspy = Path(sys.executable).parent / "py-spy"
    dst.parent.mkdir(parents=True, exist_ok=True)
    for suffix, extra in ((".txt", []), (".json", ["--json"])):
        res = subprocess.run(
            [str(pyspy), "dump", "--pid", str(pid), *extra],
            capture_output=True,
            text=True,
            timeout=30,
        )
        Path(str(dst) + suffix).write_text(res.stdout, encoding="utf-8")


def _stack_functions(pid: int) -> tuple[str, ...]:
    res = subprocess.run(
        [str(Path(sys.executable).parent / "py-spy"), "dump", "--pid", str(pid)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    return tuple(ln.split(" (")[0].strip() for ln in res.stdout.splitlines() if ln[:4] == "    ")


def _wait_until_stacks_settle(pids: list[int], deadline: float, tries: int = 8) -> None:
    """Wait until two samples a second apart show every process in the same functions: then the
    hang is established (start-up imports and the last steps are over)."""
    before = None
    for _ in range(tries):
        if time.time() > deadline:
            return
        now = [_stack_functions(pid) for pid in pids]
        if now == before:
            return
        before = now
        time.sleep(1.0)


def _wait_for(pattern: str, files: list[Path], deadline: float) -> bool:
    rx = re.compile(pattern, re.M)
    while time.time() < deadline:
        for f in files:
            if f.exists() and rx.search(f.read_text(encoding="utf-8", errors="replace")):
                return True
        time.sleep(0.3)
    return False


def run_scenario(sc: Scenario, out_root: Path, keep_run: bool = False) -> Path:
    run_root = Path(tempfile.mkdtemp(prefix=f"corpus-{sc.name}-"))
    workspace = run_root / "workspace"
    shutil.copytree(JOBS, workspace, ignore=shutil.ignore_patterns("__pycache__"))
    port = _free_port()
    blocker: socket.socket | None = None
    if sc.occupy_port:
        # A leftover process from an earlier run still holds the master port.
        blocker = socket.socket()
        blocker.bind(("127.0.0.1", port))
        blocker.listen(1)
    nnodes = len(sc.nodes) if sc.world_size is None else sc.world_size // sc.nodes[0].nproc
    agents: list[tuple[Node, subprocess.Popen[bytes], Path]] = []
    t0 = time.time()
    for node_rank, node in enumerate(sc.nodes):
        if node.start_delay_s:
            time.sleep(max(0.0, t0 + node.start_delay_s - time.time()))
        console = run_root / "console" / f"{node.host}.log"
        console.parent.mkdir(parents=True, exist_ok=True)
        env = clean_env()
        env.update(
            PYTHONUNBUFFERED="1",
            TORCH_FR_BUFFER_SIZE="2000",
            TORCH_FR_DUMP_TEMP_FILE=str(run_root / "fr" / sc.fr_prefix.format(host=node.host)),
            FR_DUMP_FORMATS="pickle,json" if sc.fr_json else "pickle",
            CORPUS_HOST=node.host,
        )
        env.update(sc.env)
        env.update(node.env)
        if node.site:
            env["PYTHONPATH"] = str(workspace / "sites" / node.site)
        cmd = [
            str(TORCHRUN),
            f"--nnodes={nnodes}",
            f"--nproc-per-node={node.nproc}",
            f"--node-rank={node_rank}",
            "--master-addr=127.0.0.1",
            f"--master-port={port}",
            "--tee=3",
            f"--log-dir={run_root / 'logs' / node.host}",
            *sc.launcher_args,
            sc.script,
            *sc.args,
        ]
        with console.open("wb") as fh:
            proc = subprocess.Popen(
                cmd,
                cwd=workspace,
                env=env,
                stdout=fh,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        agents.append((node, proc, console))

    deadline = t0 + sc.wall_limit_s
    stop = threading.Event()
    if sc.oom_kill is not None:
        threading.Thread(target=_oom_killer, args=(sc.oom_kill, agents, stop), daemon=True).start()
    if sc.hang_marker is not None:
        if _wait_for(sc.hang_marker, [c for _, _, c in agents], deadline):
            time.sleep(sc.hang_settle_s)
            targets: dict[str, int] = {}
            for node, proc, _ in agents:
                if sc.pyspy_agent:
                    targets[sc.pyspy_agent.format(host=node.host)] = proc.pid
                for rank, pid in sorted(_worker_pids(proc.pid).items()):
                    targets[sc.pyspy_name.format(rank=rank, pid=pid)] = pid
            _wait_until_stacks_settle(list(targets.values()), deadline)
            for name, pid in targets.items():
                _pyspy(pid, run_root / "pyspy" / name)
        else:
            print(f"[{sc.name}] hang marker never showed: {sc.hang_marker!r}", file=sys.stderr)
    for _, proc, _ in agents:
        try:
            proc.wait(timeout=max(1.0, deadline - time.time()))
        except subprocess.TimeoutExpired:
            print(f"[{sc.name}] wall limit hit; killing the launcher", file=sys.stderr)
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    stop.set()
    if blocker is not None:
        blocker.close()

    bundle = out_root / sc.name
    try:
        _write_bundle(sc, run_root, agents, bundle)
    finally:
        if not keep_run:
            shutil.rmtree(run_root, ignore_errors=True)
    print(f"[{sc.name}] {time.time() - t0:.0f}s -> {bundle}")
    return bundle


def _oom_killer(
    target: tuple[int, int],
    agents: list[tuple[Node, subprocess.Popen[bytes], Path]],
    stop: threading.Event,
) -> None:
    """SIGKILL a rank once its resident memory passes the limit, as the kernel OOM killer does."""
    rank, limit_mib = target
    while not stop.is_set():
        for _, proc, _ in agents:
            pid = _worker_pids(proc.pid).get(rank)
            if pid is not None and _rss_mib(pid) > limit_mib:
                os.kill(pid, signal.SIGKILL)
                return
        time.sleep(0.05)


def _write_bundle(
    sc: Scenario,
    run_root: Path,
    agents: list[tuple[Node, subprocess.Popen[bytes], Path]],
    bundle: Path,
) -> None:
    hand_written = _hand_written(bundle / "expected.json")
    if bundle.exists():
        shutil.rmtree(bundle)
    evidence = evidence_dir(bundle)
    evidence.mkdir(parents=True)
    first_host = sc.nodes[0].host
    moved = {f"logs/{n.host}": f"{SHIP_WORKSPACE}/{n.logs}" for n in sc.nodes}
    moved["fr"] = sc.fr_ship_dir or f"{SHIP_WORKSPACE}/{sc.fr_dir}"
    site_packages = f"{SHIP_VENV}/lib/python3.11/site-packages"
    moved.update({f"workspace/sites/{n.site}": site_packages for n in sc.nodes if n.site})
    for node, _, console in agents:
        scrub = _scrubber(run_root, node.host, moved)
        _copy_text(console, evidence / node.console, scrub)
        logs = run_root / "logs" / node.host
        for f in sorted(p for p in logs.rglob("*") if p.is_file()):
            _copy_text(f, evidence / node.logs / f.relative_to(logs), scrub)
    scrub = _scrubber(run_root, first_host, moved)
    fr = run_root / "fr"
    if fr.exists():
        for f in sorted(fr.iterdir()):
            _copy_fr(f, evidence / sc.fr_dir / f.name, scrub)
    spy = run_root / "pyspy"
    if spy.exists():
        for f in sorted(p for p in spy.rglob("*") if p.is_file()):
            _copy_text(f, evidence / f.relative_to(spy), scrub)
    report = subprocess.run(
        [sys.executable, "-m", "torch.utils.collect_env"],
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    (evidence / sc.env_report).write_text(scrub(report), encoding="utf-8")
    expected = {
        "scenario": sc.name,
        **sc.expected,
        "world_size": sc.ranks,
        "made_with": _made_with(),
        "command": f"python corpus_samples/make.py {sc.name}",
        # the first action a report must give is judged by hand, not made by the job: a
        # remake keeps it (tests/test_first_action.py)
        **hand_written,
    }
    (bundle / "expected.json").write_text(json.dumps(expected, indent=2) + "\n", encoding="utf-8")
    (bundle / "README.md").write_text(
        f"# {sc.name}\n\n{sc.readme.strip()}\n\nRemake it with `{expected['command']}`.\n",
        encoding="utf-8",
    )


def _hand_written(path: Path) -> dict[str, Any]:
    try:
        old = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {k: old[k] for k in ("first_action",) if k in old}


def _made_with() -> str:
    import torch

    pyspy = subprocess.run(
        [str(Path(sys.executable).parent / "py-spy"), "--version"], capture_output=True, text=True
    ).stdout.strip()
    return f"torch {torch.__version__} gloo, {pyspy}, torchrun --tee 3"


# ---------------------------------------------------------------------------------------------
# Facts a bundle must keep showing when it is made again.


def _normalise(rel: str) -> str:
    # torchrun names its log folder <run_id>_<random>; the random part changes every run.
    return re.sub(r"(^|/)([^/]+)_[a-z0-9_]{8}(?=/attempt_)", r"\1\2_*", rel)


def bundle_files(bundle: Path) -> set[str]:
    return {_normalise(str(p.relative_to(bundle))) for p in bundle.rglob("*") if p.is_file()}


def fr_last_entries(bundle: Path, fr_dir: str) -> dict[str, tuple[Any, ...]]:
    """Per FR dump: what its rank was doing last (process group, op, sizes, dtypes, seq)."""
    out: dict[str, tuple[Any, ...]] = {}
    folder = evidence_dir(bundle) / fr_dir
    if not folder.is_dir():
        return out
    for f in sorted(folder.iterdir()):
        entries = load_fr(f).get("entries") or []
        if not entries:
            out[f.name] = ()
            continue
        e = entries[-1]
        out[f.name] = (
            tuple(e["process_group"]),
            e["profiling_name"],
            json.dumps(e["input_sizes"]),
            json.dumps(e["input_dtypes"]),
            e["collective_seq_id"],
        )
    return out


def pyspy_dumps(bundle: Path) -> list[Path]:
    """py-spy text dumps in a bundle, found by their first line, whatever they are called."""
    rx = re.compile(r"Process \d+: ")
    found = []
    for f in sorted(p for p in evidence_dir(bundle).rglob("*") if p.is_file()):
        with f.open("rb") as fh:
            if rx.match(fh.read(64).decode("utf-8", "replace")):
                found.append(f)
    return found


def rank_logs(bundle: Path, rank: int, sc: Scenario) -> str:
    """Everything a rank wrote: its --log-dir files plus its prefixed lines on the console."""
    text = []
    offset = 0
    for node in sc.nodes:
        local = rank - offset
        if 0 <= local < node.nproc:
            for f in sorted((evidence_dir(bundle) / node.logs).rglob(f"attempt_*/{local}/*.log")):
                text.append(f.read_text(encoding="utf-8", errors="replace"))
        offset += node.nproc
    return "\n".join(text)


def check_bundle(bundle: Path, sc: Scenario) -> list[str]:
    """Problems with a bundle: missing truth, culprit evidence that is not there."""
    problems = []
    expected = json.loads((bundle / "expected.json").read_text(encoding="utf-8"))
    for key in ("symptom", "root_cause", "fix", "stage", "culprit_ranks", "hang", "story"):
        if key not in expected:
            problems.append(f"expected.json lacks {key}")
    rx = re.compile(sc.culprit_pattern, re.M)
    culprits = expected.get("culprit_ranks") or []
    started = sum(n.nproc for n in sc.nodes)
    logged = [r for r in culprits if r < started]
    consoles = "\n".join(
        (evidence_dir(bundle) / n.console).read_text(encoding="utf-8", errors="replace")
        for n in sc.nodes
    )
    # The culprit's own words, or (when it died silently or never started) the launcher's.
    evidence = [rank_logs(bundle, r, sc) for r in logged] + [consoles]
    if not any(rx.search(text) for text in evidence):
        problems.append(f"neither culprit logs nor console match {sc.culprit_pattern!r}")
    fr_folder = evidence_dir(bundle) / sc.fr_dir
    dumped = sorted(
        {int(re.findall(r"\d+", f.name.removesuffix(".json"))[-1]) for f in fr_folder.glob("*")}
        if fr_folder.is_dir()
        else set()
    )
    if dumped != sorted(sc.fr_ranks):
        problems.append(f"flight-recorder dumps of ranks {dumped}, expected {list(sc.fr_ranks)}")
    if expected.get("hang") and not pyspy_dumps(bundle):
        problems.append("hang without py-spy dumps")
    return problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("scenarios", nargs="*", help="scenario names (see --list)")
    ap.add_argument("--all", action="store_true", help="make every scenario, one after another")
    ap.add_argument("--out", type=Path, default=HERE, help="folder that receives the bundles")
    ap.add_argument("--list", action="store_true", help="list scenarios and exit")
    ap.add_argument("--check", action="store_true", help="check bundles in --out instead of making")
    ap.add_argument("--keep-run", action="store_true", help="keep the raw run folder in /tmp")
    ap.add_argument(
        "--rewrite-fr",
        action="store_true",
        help="write the pickled flight-recorder dumps of bundles in --out again in torch's layout",
    )
    args = ap.parse_args(argv)
    if args.list:
        for name, sc in SCENARIOS.items():
            print(f"{name:28s} {sc.ranks} ranks  {sc.expected['story']}")
        return 0
    names = (
        list(SCENARIOS)
        if args.all or ((args.check or args.rewrite_fr) and not args.scenarios)
        else args.scenarios
    )
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown or not names:
        ap.error(f"unknown scenario(s) {unknown}; try --list" if unknown else "name a scenario")
    if args.rewrite_fr:
        for name in names:
            for f in rewrite_fr_layout(args.out / name):
                print(f"rewrote {f.relative_to(args.out)}")
        return 0
    failed = 0
    for name in names:
        sc = SCENARIOS[name]
        bundle = args.out / name if args.check else run_scenario(sc, args.out, args.keep_run)
        problems = check_bundle(bundle, sc)
        for p in problems:
            print(f"[{name}] {p}", file=sys.stderr)
        failed += bool(problems)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
