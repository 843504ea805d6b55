"""What hostile bundles cost triage: time, peak memory, peak temp space, and what it says.

    python bench/hostile_inputs.py [--scale 1.0] [--only NAME ...]

Each case builds one crafted input in a temp folder (deterministic), then runs
`python -m triage INPUT --no-embed --format json` in a fresh process and reports wall time,
the process's peak RSS, the most temp space its spool files held at once (read from
/proc/PID/fd while it runs), whether it finished, and the warnings it gave that input. To
compare with another checkout, run the same script with that checkout first on PYTHONPATH:

    PYTHONPATH=/path/to/other/checkout python bench/hostile_inputs.py

`--scale` shrinks or grows every input (the figures in SECURITY.md are at 1.0).
"""

from __future__ import annotations

import argparse
import bz2
import io
import json
import lzma
import os
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

OOM = (
    b"[rank0]: Traceback (most recent call last):\n"
    b'[rank0]:   File "/workspace/train.py", line 40, in <module>\n'
    b"[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
)
LINES = b"[rank0]: step 5 loss 1.0 lr 0.0001\n" * 30_000  # 1 MiB of one repeated line


def json_empty_entries(folder: Path, scale: float) -> Path:
    """A JSON flight-recorder dump of empty entries: 3 bytes each, ~64 bytes decoded."""
    n = int(20_000_000 * scale)
    path = folder / "fr" / "nccl_trace_rank_0.json"
    path.parent.mkdir()
    path.write_text('{"version": "2.10", "pg_config": {}, "entries": [' + "{}," * n + "{}]}")
    (folder / "rank_0.log").write_bytes(OOM)
    return folder


def pickle_list_openings(folder: Path, scale: float) -> Path:
    """A pickled dump whose entries list holds millions of empty lists (one byte each)."""
    n = int(48_000_000 * scale)
    head = b"X\x07\x00\x00\x00versionX\x04\x00\x00\x002.10X\t\x00\x00\x00pg_config}"
    data = b"\x80\x02}(" + head + b"X\x07\x00\x00\x00entries](" + b"]" * n + b"eu."
    (folder / "fr").mkdir()
    (folder / "fr" / "nccl_trace_rank_0").write_bytes(data)
    (folder / "rank_0.log").write_bytes(OOM)
    return folder


def tgz_spool(folder: Path, scale: float) -> Path:
    """Three .tar.gz files, each a log (~15:1) and a core dump (incompressible): the temp
    spool. Every member used to be copied out before being looked at, and never given back."""
    size = int(200 * scale)
    lines = b"".join(
        b"[rank0]: step %d loss %.2f lr 0.0001\n" % (i, i % 97 / 10) for i in range(30_000)
    )
    core = os.urandom(1 << 20)
    for n in range(3):
        with tarfile.open(folder / f"node{n}.tar.gz", "w:gz", compresslevel=1) as tf:
            log = lines * size + OOM
            info = tarfile.TarInfo(f"rank_{n}.log")
            info.size = len(log)
            tf.addfile(info, io.BytesIO(log))
            info = tarfile.TarInfo("core")
            info.size = size << 20
            tf.addfile(info, _Repeat(core, info.size))
    return folder


def compressed_logs(folder: Path, scale: float) -> Path:
    """Logs of one repeated line and the OOM at the end: .bz2 (pbzip2-style) and .xz."""
    n = max(int(200 * scale), 17)
    (folder / "rank_0.log.bz2").write_bytes(bz2.compress(LINES) * n + bz2.compress(OOM))
    (folder / "rank_1.log.xz").write_bytes(lzma.compress(LINES * n + OOM, preset=0))
    return folder


def fr_stall(folder: Path, scale: float) -> Path:
    """A dump laid out for the tail read whose kept entries name thousands of list slots."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from test_fr_tail import _stalling_dump

    (folder / "fr").mkdir()
    for rank in range(2):  # two of them: over 16 MiB of dumps, so the tail read is used
        (folder / "fr" / f"nccl_trace_rank_{rank}").write_bytes(
            _stalling_dump(int(9_000_000 * scale), int(15_000 * scale))
        )
    (folder / "rank_0.log").write_bytes(OOM)
    return folder


class _Repeat(io.RawIOBase):
    def __init__(self, block: bytes, size: int) -> None:
        self.block, self.left, self.done = block, size, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buf: bytearray | memoryview) -> int:  # type: ignore[override]
        at = self.done % len(self.block)
        n = min(len(buf), self.left, len(self.block) - at)
        buf[:n] = self.block[at : at + n]
        self.left -= n
        self.done += n
        return n


CASES: dict[str, Callable[[Path, float], Path]] = {
    "json-empty-entries": json_empty_entries,
    "pickle-list-openings": pickle_list_openings,
    "tgz-spool": tgz_spool,
    "compressed-logs": compressed_logs,
    "fr-tail-stall": fr_stall,
}


def _spool_watch(tmp: str, peak: list[int], stop: threading.Event) -> None:
    """The most bytes that files under `tmp` (the run's TMPDIR) held at once, deleted ones
    too (the spool is an unlinked temp file), across every process that has one open."""
    while not stop.is_set():
        total = 0
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                fds = os.listdir(f"/proc/{pid}/fd")
            except OSError:
                continue
            for fd in fds:
                try:
                    if os.readlink(f"/proc/{pid}/fd/{fd}").startswith(tmp):
                        total += os.stat(f"/proc/{pid}/fd/{fd}").st_blocks * 512
                except OSError:
                    continue
        peak[0] = max(peak[0], total)
        stop.wait(0.05)


def run(name: str, scale: float, timeout: float) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix=f"triage-{name}-") as tmp:
        target = CASES[name](_mkdir(Path(tmp) / "in"), scale)
        spool_dir = _mkdir(Path(tmp) / "spool")
        env = {**os.environ, "TMPDIR": str(spool_dir)}
        out_path, err_path = Path(tmp) / "out.json", Path(tmp) / "err.txt"
        rss_path = Path(tmp) / "rss.txt"
        # GNU time measures the peak RSS: a child forked from this (big) process would carry
        # this process's own peak in its rusage across the exec.
        cmd = ["/usr/bin/time", "-o", str(rss_path), "-f", "%M"]
        cmd += [sys.executable, "-m", "triage", str(target), "--no-embed", "-q", "--format", "json"]
        started = time.perf_counter()
        with out_path.open("wb") as out, err_path.open("wb") as err:
            proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=err)
        peak, stop = [0], threading.Event()
        watcher = threading.Thread(target=_spool_watch, args=(str(spool_dir), peak, stop))
        watcher.start()
        killer = threading.Timer(timeout, proc.kill)
        killer.start()
        proc.wait()
        killer.cancel()
        stop.set()
        watcher.join()
        wall = time.perf_counter() - started
        said: list[str] = []
        summary = ""
        rss = rss_path.read_text().split()[-1] if rss_path.exists() else "0"
        if proc.returncode == 0:
            report = json.loads(out_path.read_text())
            summary = report["summary"]
            said = [w for i in report["inputs"] for w in i["warnings"]]
        return {
            "case": name,
            "exit": proc.returncode,  # -9: killed at the timeout
            "wall_s": round(wall, 2),
            "peak_rss_mib": round(int(rss) / 1024) if rss.isdigit() else rss,
            "peak_spool_mib": round(peak[0] / 2**20),
            "summary": summary[:100],
            "warnings": [w[:160] for w in said],
            "stderr": err_path.read_text(errors="replace")[-300:] if proc.returncode else "",
        }


def _mkdir(path: Path) -> Path:
    path.mkdir()
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--only", nargs="+", choices=sorted(CASES))
    args = parser.parse_args()
    for name in args.only or CASES:
        print(json.dumps(run(name, args.scale, args.timeout)), flush=True)


if __name__ == "__main__":
    main()
