"""A flight-recorder pickle that crashes or hangs CPython's own unpickler (inside
`pickle.load`, before any check of ours) costs that dump alone: the run goes on, says which
dump was not read and why, and reports the rest of the job's evidence.

Each run happens in a child process with a timeout, so that a crash or a hang fails the test
instead of taking pytest down. The decoder's deadline is cut to a few seconds there
(`triage.pool.DECODE_SECONDS`), as the default is far above what a test can wait.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import pytest

from tests.cli_runs import run_elsewhere
from tests.fr_samples import fr_entry

_HEADER = pickle.dumps({"version": "2.4", "pg_config": {}, "pg_status": {}, "entries": []}, 2)
# The dump's dict gets one more key, a tuple that hashing it takes down: nested 2 million
# deep (C recursion: SIGSEGV), or holding one tuple twice at each of 64 levels (2**64 hashes).
DEEP = _HEADER[:-2] + b")" + b"\x85" * 2_000_000 + b"K\x01u."
SHARED = _HEADER[:-2] + b")" + b"2\x86" * 64 + b"K\x01u."

_LOG = "[rank0]: RuntimeError: boom in the training step\n"


def _job(folder: Path, hostile: bytes) -> Path:
    folder.mkdir()
    (folder / "rank0.log").write_text(_LOG)
    (folder / "nccl_trace_rank_0").write_bytes(hostile)
    good = {"version": "2.4", "pg_config": {}, "pg_status": {}, "entries": [fr_entry(1)]}
    (folder / "nccl_trace_rank_1").write_bytes(pickle.dumps(good, protocol=2))
    return folder


# the decoder's deadline cut to 2 s, so a hang costs the test seconds
_SHORT_DEADLINE = "import triage.pool\ntriage.pool.DECODE_SECONDS = 2.0\n"


def _said(report: dict[str, Any], name: str) -> list[str]:
    return [w for i in report["inputs"] if Path(i["path"]).name == name for w in i["warnings"]]


@pytest.mark.parametrize(
    ("hostile", "said"),
    [
        (DEEP, "pickle decoder crashed (segmentation fault, signal 11) on this dump"),
        (SHARED, "pickle decoder did not finish within 2 s on this dump"),
    ],
    ids=["deep", "shared"],
)
def test_a_small_job_with_a_hostile_dump_is_diagnosed_from_the_rest(
    tmp_path: Path, hostile: bytes, said: str
) -> None:
    job = _job(tmp_path / "job", hostile)
    code = "from triage.cli import main\nmain([sys.argv[1], '--format', 'json'])\n"
    done = run_elsewhere(code, str(job), prelude=_SHORT_DEADLINE)
    assert done.returncode == 0, done.stderr[-800:]
    report = json.loads(done.stdout)
    assert "RuntimeError: boom in the training step" in [e["text"] for e in report["evidence"]]
    assert any(said in w for w in _said(report, "nccl_trace_rank_0")), report["inputs"]
    assert _said(report, "nccl_trace_rank_1") == []  # the other dump is read
    # the decoder's crash is no evidence of the job's (a rule on signal deaths)
    assert [e for e in report["evidence"] if Path(e["source"]).name == "nccl_trace_rank_0"] == []


@pytest.mark.parametrize(
    ("hostile", "said"),
    [
        (DEEP, "pickle decoder crashed (segmentation fault, signal 11) on this dump"),
        (SHARED, "pickle decoder did not finish within 2 s on this dump"),
    ],
    ids=["deep", "shared"],
)
def test_a_hostile_dump_in_the_worker_pool_costs_that_dump_alone(
    tmp_path: Path, hostile: bytes, said: str
) -> None:
    job = _job(tmp_path / "job", hostile)
    code = (
        "import json\n"
        "from triage import pipeline\n"
        "d = pipeline.diagnose([sys.argv[1]],"
        " pipeline.Options(workers=2, parallel_from_bytes=0, use_embeddings=False))\n"
        "print(json.dumps({'warnings': {i.path: list(i.warnings) for i in d.inputs},"
        " 'evidence': [e.text for e in d.evidence],"
        " 'events': {i.path: i.events for i in d.inputs}}))\n"
    )
    done = run_elsewhere(code, str(job), prelude=_SHORT_DEADLINE)
    assert done.returncode == 0, done.stderr[-800:]
    got = json.loads(done.stdout)
    warnings = {Path(path).name: said for path, said in got["warnings"].items()}
    assert any(said in w for w in warnings["nccl_trace_rank_0"]), warnings
    assert warnings["nccl_trace_rank_1"] == []
    events = {Path(path).name: n for path, n in got["events"].items()}
    assert events["nccl_trace_rank_1"] == 1  # the other dump is read
    assert "RuntimeError: boom in the training step" in got["evidence"]
