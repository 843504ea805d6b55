"""Who names the right rank? torchrun's root-cause block, torch's fr_trace and triage, per bundle.

For every `corpus_samples/<bundle>/expected.json`:

* **torchrun**: the rank under `Root Cause (first observed failure):` in the launcher output
  (every text file of the bundle is searched; a multi-node job has one block per agent).
* **fr_trace**: `python -m torch.distributed.flight_recorder.fr_trace` run three times on the
  bundle's flight-recorder dumps: `raw`, on the folder as shipped; `named`, the pickle dumps
  copied to a temp folder as `rank_<N>` (the `<prefix><rank>` naming it needs) with
  `--allow-incomplete-ranks`; `repaired`, as `named` but with gloo's broken `pg_config`
  (`{'': ...}`) rewritten from the entries' process groups (members: the ranks torch wrote under
  `''`, else the expected world size) — the fix torch itself would need. Dumps are read with
  triage's restricted unpickler, never plain `pickle.load`. Its culprits are read from
  `Culprit rank N` and `missing ranks: {..}` lines; a crash is shown as its exception.
* **triage**: `culprit_ranks` of `triage.analysis.correlate` after ingest and parse.

Usage: python bench/culprit_vs_baselines.py [BUNDLE_DIR ...] [--no-fr-trace]
"""

from __future__ import annotations

import json
import pickle
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import regex

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from triage.analysis import correlate  # noqa: E402
from triage.ingest import discover  # noqa: E402
from triage.model import SourceKind  # noqa: E402
from triage.parsers import parse  # noqa: E402
from triage.parsers.flight_recorder.safe_pickle import loads as safe_loads  # noqa: E402

_ROOT_CAUSE = regex.compile(
    r"Root Cause \(first observed failure\):\s*\n\[\d+\]:\s*\n"
    r"(?:.*\n){0,3}?\s*rank\s*:\s*(?P<rank>-?\d+)"
)
_CULPRIT = regex.compile(r"Culprit rank (?P<rank>\d+)")
_MISSING = regex.compile(r"missing ranks: \{(?P<ranks>[\d, ]*)\}")
_EXC = regex.compile(r"^(?P<exc>\w+(?:Error|Exception)):?(?P<msg>.*)$", regex.M)


def torchrun_root_cause(bundle: Path) -> list[int]:
    ranks: list[int] = []
    for path in sorted(bundle.rglob("*")):
        if not path.is_file() or path.stat().st_size > 50_000_000:
            continue
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if "Root Cause (first observed failure)" not in text:
            continue
        ranks.extend(int(m["rank"]) for m in _ROOT_CAUSE.finditer(text))
    return sorted(set(ranks))


def fr_files(bundle: Path) -> list[tuple[Path, int | None]]:
    out = []
    for src in discover([str(bundle)]):
        if src.kind is SourceKind.FLIGHT_RECORDER and "!" not in src.path:
            out.append((Path(src.path), src.rank))
    return out


def run_fr_trace(folder: Path, extra: list[str]) -> tuple[str, str]:
    """(verdict, detail) of one fr_trace run: culprit ranks, 'no culprit' or the crash."""
    cmd = [sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace", str(folder), *extra]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        return "timeout", ""
    out = proc.stdout + proc.stderr
    if proc.returncode != 0:
        excs = _EXC.findall(out)
        exc = excs[-1][0] if excs else f"exit {proc.returncode}"
        detail = (excs[-1][1].strip()[:60]) if excs else out.strip().splitlines()[-1][:60]
        return f"crash ({exc})", detail
    ranks = {int(m["rank"]) for m in _CULPRIT.finditer(out)}
    for m in _MISSING.finditer(out):
        ranks |= {int(x) for x in m["ranks"].replace(" ", "").split(",") if x}
    if ranks:
        return ",".join(str(r) for r in sorted(ranks)), ""
    return "no culprit", ""


def _repair(data: bytes, world_size: int | None) -> bytes | None:
    """gloo's pg_config `{'': {'ranks': '[0, 1]'}}` -> one entry per process group."""
    try:
        dump = safe_loads(data)
    except Exception:  # noqa: BLE001 - a dump we cannot read stays out of the repaired run
        return None
    if not isinstance(dump, dict):
        return None
    config = dict(dump.get("pg_config") or {})
    blank = config.pop("", None)
    ranks = blank.get("ranks") if isinstance(blank, dict) else None
    if not ranks or ranks == "[]":
        ranks = str(list(range(world_size))) if world_size else None
    if ranks is None:
        return None
    for e in dump.get("entries") or ():
        name, desc = tuple(e.get("process_group") or ("", ""))[:2]
        config.setdefault(name, {"name": name, "desc": desc, "ranks": ranks})
    dump["pg_config"] = config
    return pickle.dumps(dump, protocol=2)


def fr_trace(bundle: Path, world_size: int | None) -> tuple[str, str, str]:
    files = fr_files(bundle)
    if not files:
        return "no dumps", "no dumps", "no dumps"
    folders = {p.parent for p, _ in files}
    raw_dir = folders.pop() if len(folders) == 1 else Path(min(str(p) for p, _ in files)).parent
    raw, _ = run_fr_trace(raw_dir, [])
    verdicts = []
    for repaired in (False, True):
        with tempfile.TemporaryDirectory() as tmp:
            n = 0
            for path, rank in files:
                data = path.read_bytes()
                if rank is None or data[:1] != b"\x80":
                    continue  # fr_trace reads only pickles, named <prefix><rank>
                if repaired:
                    fixed = _repair(data, world_size)
                    if fixed is None:
                        continue
                    (Path(tmp) / f"rank_{rank}").write_bytes(fixed)
                else:
                    shutil.copyfile(path, Path(tmp) / f"rank_{rank}")
                n += 1
            flags = ["--allow-incomplete-ranks"]
            verdicts.append("no pickles" if n == 0 else run_fr_trace(Path(tmp), flags)[0])
    return raw, verdicts[0], verdicts[1]


def _ranks(verdict: str) -> list[int] | None:
    if regex.fullmatch(r"[\d,]+", verdict):
        return sorted(int(x) for x in verdict.split(","))
    return None


def triage_culprits(bundle: Path) -> tuple[list[int], bool, float]:
    start = time.perf_counter()
    a = correlate([parse(s) for s in discover([str(bundle)])])
    return list(a.culprit_ranks), bool(a.hang and a.hang.detected), time.perf_counter() - start


def main(argv: list[str]) -> int:
    run_fr = "--no-fr-trace" not in argv
    args = [a for a in argv if not a.startswith("--")]
    bundles = (
        [Path(a) for a in args]
        if args
        else sorted(p.parent for p in (ROOT / "corpus_samples").glob("*/expected.json"))
    )
    rows = []
    score = {"torchrun": 0, "fr_trace": 0, "triage": 0}
    with_dumps = 0
    for b in bundles:
        exp = json.loads((b / "expected.json").read_text())
        want = sorted(exp["culprit_ranks"])
        evidence = b / "bundle" if (b / "bundle").is_dir() else b  # never the truth files
        tr = torchrun_root_cause(evidence)
        skipped = ("skipped", "skipped", "skipped")
        raw, named, fixed = fr_trace(evidence, exp.get("world_size")) if run_fr else skipped
        got, hang, secs = triage_culprits(evidence)

        def mark(ok: bool) -> str:
            return "✓" if ok else "✗"

        tr_ok = tr == want  # no block at all is right only when no rank is to blame
        fr_ok = want in [_ranks(v) for v in (raw, named, fixed)]
        has_dumps = raw != "no dumps"
        with_dumps += has_dumps
        tri_ok = sorted(got) == want and hang == bool(exp["hang"])
        score["torchrun"] += tr_ok
        score["fr_trace"] += fr_ok
        score["triage"] += tri_ok
        rows.append(
            (
                b.name,
                f"{want} {'hang' if exp['hang'] else 'crash'}",
                f"{tr or '-'} {mark(tr_ok)}",
                f"raw: {raw} / named: {named} / repaired: {fixed} {mark(fr_ok)}"
                if has_dumps
                else "no dumps (n/a)",
                f"{got} {'hang' if hang else 'crash'} {mark(tri_ok)} ({secs:.2f}s)",
            )
        )
    head = ("bundle", "expected", "torchrun root cause", "fr_trace", "triage")
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]
    line = " | ".join(h.ljust(w) for h, w in zip(head, widths, strict=True))
    print(line)
    print("-|-".join("-" * w for w in widths))
    for r in rows:
        print(" | ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)))
    n = len(rows)
    print(
        f"\nright rank: torchrun {score['torchrun']}/{n}, "
        f"fr_trace {score['fr_trace']}/{with_dumps} (bundles with dumps), "
        f"triage {score['triage']}/{n} (triage also must get the hang flag right)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
