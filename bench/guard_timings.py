"""The speed guards the tests used to hold: each scenario timed, against the limit it had.

Wall-clock limits fail at random on a busy machine, so the default test tier checks only what
these scenarios produce (`tests/`), and this script times them (best of `--repeat`, after a
warm-up) next to the limit each test held, on the same machine in the same run:

* the flight-recorder analysis of 256 ranks x 2,000 records (was < 3 s) and 1,024 x 2,000
  (< 5 s, the slow tier);
* a 2,000-entry flight-recorder pickle loaded (CPU time, < 0.5 s);
* a 10-byte pickle memo bomb refused (< 0.5 s);
* a zip holding 24 MiB of zeros and a gzip of 200 MiB of zeros sniffed (< 1 s each);
* four pathological issue posts split into pieces (< 1 s each);
* six pathological events matched by every rule (CPU time, < 10 s together);
* the HTML report of a 1,024-rank job (< 5 s).

Usage: python bench/guard_timings.py [--repeat 3] [--skip-1024]
"""

from __future__ import annotations

import argparse
import io
import os
import pickle
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from report_samples import big_job  # noqa: E402
from test_analysis import entry, fr_source  # noqa: E402
from test_ingest import RANK_TRACEBACK, gzip_of_zeros  # noqa: E402
from test_parsers_structured import _big_dump, source  # noqa: E402
from test_rules import PATHOLOGICAL_TEXTS  # noqa: E402

from triage.analysis import correlate  # noqa: E402
from triage.bot.extract import split_post  # noqa: E402
from triage.classify import rules as engine  # noqa: E402
from triage.ingest import discover  # noqa: E402
from triage.parsers import flight_recorder  # noqa: E402
from triage.parsers.flight_recorder import safe_pickle  # noqa: E402
from triage.report import render  # noqa: E402


def best_of(run: Callable[[], object], repeat: int, clock: Callable[[], float]) -> float:
    run()  # warm-up: imports, regex compiles
    best = float("inf")
    for _ in range(repeat):
        started = clock()
        run()
        best = min(best, clock() - started)
    return best


def fr_job(ranks: int, behind: int) -> list:
    if ranks <= 256:
        shared = [entry(s, backend="nccl", state="completed") for s in range(1, 2001)]
        return [
            fr_source(r, shared if r != behind else shared[:-1], pg_config={"0": tuple(range(256))})
            for r in range(ranks)
        ]
    sizes = ((1024, 4096),)
    return [
        fr_source(
            r,
            [
                entry(s, backend="nccl", state="completed", sizes=sizes, t_ns=s * 1000 + r)
                for s in range(1, 2001 if r != behind else 1998)
            ],
            pg_config={"0": tuple(range(ranks))},
        )
        for r in range(ranks)
    ]


def memo_bomb() -> None:
    try:
        safe_pickle.loads(b"\x80\x02]r\x00\xca\x9a\x3b.")
    except safe_pickle.PickleRefused:
        return
    raise AssertionError("the memo bomb was not refused")


def bombs(folder: Path) -> tuple[Callable[[], object], Callable[[], object]]:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
        zf.writestr("rank_0.log", RANK_TRACEBACK)
        zf.writestr("zeros.log", b"\x00" * (24 << 20))
        zf.writestr("rank_1.log", RANK_TRACEBACK)
    (folder / "b.zip").write_bytes(buf.getvalue())
    (folder / "rank_0.log.gz").write_bytes(gzip_of_zeros(200))
    (folder / "rank_1.log").write_text(RANK_TRACEBACK, encoding="utf-8")
    zip_path, gz = (
        str(folder / "b.zip"),
        [str(folder / "rank_0.log.gz"), str(folder / "rank_1.log")],
    )
    return (lambda: list(discover([zip_path]))), (lambda: list(discover(gz)))


POSTS = {
    "'[' x 200,000": "[" * 200_000,
    "'[a](' x 100,000": "[a](" * 100_000,
    "'*a ' x 100,000": "*a " * 100_000,
    "5,000 quotes 60 deep": "\n".join("> " * 60 + "- x" for _ in range(5000)),
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--skip-1024", action="store_true", help="skip the 1,024-rank analysis")
    args = ap.parse_args()
    wall, cpu = time.perf_counter, time.process_time
    rows: list[tuple[str, float, float, str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        zip_bomb, gzip_bomb = bombs(Path(tmp))
        dump = pickle.dumps(_big_dump(2000), protocol=2)
        job = big_job()
        small = fr_job(256, 77)
        large = [] if args.skip_1024 else fr_job(1024, 500)
        scenarios: list[tuple[str, Callable[[], object], float, Callable[[], float]]] = [
            (
                "flight recorder, 256 ranks x 2,000",
                lambda: correlate(small),
                3.0,
                wall,
            ),
            (
                "2,000-entry dump loaded (CPU)",
                lambda: flight_recorder.parse(source(dump)),
                0.5,
                cpu,
            ),
            ("pickle memo bomb refused", memo_bomb, 0.5, wall),
            ("zip with 24 MiB of zeros sniffed", zip_bomb, 1.0, wall),
            ("gzip of 200 MiB of zeros sniffed", gzip_bomb, 1.0, wall),
            *(
                (f"issue post {name} split", lambda b=body: split_post(b, "issue"), 1.0, wall)
                for name, body in POSTS.items()
            ),
            (
                "six pathological events matched (CPU)",
                lambda: [
                    engine.match_events([engine.whole_text_event(t)]) for t in PATHOLOGICAL_TEXTS
                ],
                10.0,
                cpu,
            ),
            ("HTML report of 1,024 ranks", lambda: render(job, "html"), 5.0, wall),
        ]
        if not args.skip_1024:
            scenarios.insert(
                1,
                (
                    "flight recorder, 1,024 ranks x 2,000",
                    lambda: correlate(large),
                    5.0,
                    wall,
                ),
            )
        for name, run, limit, clock in scenarios:
            took = best_of(run, args.repeat, clock)
            rows.append((name, took, limit, "yes" if took < limit else "NO"))
    print(f"load average {os.getloadavg()[0]:.1f}; best of {args.repeat} after a warm-up\n")
    print("| scenario | seconds | limit the test held | within |")
    print("|---|---|---|---|")
    for name, took, limit, ok in rows:
        print(f"| {name} | {took:.3f} | {limit:g} | {ok} |")
    return 0 if all(ok == "yes" for *_, ok in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
