# ruff: noqa: E501  (sample log lines keep their real length)
"""Ingest: what a user hands triage (folders, archives, odd files) becomes Sources.

Samples are written here from the formats in shared/research/formats.md; archives are built in
tmp_path inside each test.
"""

from __future__ import annotations

import gzip
import importlib
import io
import json
import os
import pickle
import tarfile
import tracemalloc
import uuid
import zipfile
import zlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from triage.ingest import Limits, attribute, detect_kind, discover, reopen_plain, stream_problem
from triage.ingest.attribution import strip_extensions
from triage.model import Source, SourceKind

K = SourceKind

# --------------------------------------------------------------------------- samples

RANK_TRACEBACK = """\
[rank1]: Traceback (most recent call last):
[rank1]:   File "/workspace/train.py", line 8, in <module>
[rank1]:     dist.broadcast(x, src=1)
[rank1]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:129] Timed out waiting 4000ms for send operation to complete
"""

TORCHRUN_AGENT = """\
W1202 08:30:29.539000 5442 torch/distributed/elastic/multiprocessing/api.py:1028] Sending process 5455 closing signal SIGTERM
E1202 08:30:29.640000 5442 torch/distributed/elastic/multiprocessing/api.py:1000] failed (exitcode: -6) local_rank: 0 (pid: 5454) of binary: /venv/bin/python3
"""

TRAINING_STDOUT = """\
loading dataset shard 3 of 8
[2025-01-05 10:12:08] iteration      120/  500000 | consumed samples:        61440 | lm loss: 6.123456E+00 |
node01:1234:1300 [0] NCCL INFO NCCL version 2.21.5+cuda12.4
[2025-01-05 10:12:09] iteration      121/  500000 | consumed samples:        61952 | lm loss: 6.120001E+00 |
"""

DEEPSPEED_LAUNCHER = (
    "[2025-12-18 20:27:22,783] [INFO] [launch.py:319:sigkill_handler] Killing subprocess 748089\n"
)

SLURM_TAIL = (
    "slurmstepd: error: *** JOB 494583 ON node12 CANCELLED AT 2024-04-20T09:09:37 "
    "DUE TO TIME LIMIT ***\n"
)

NCCL_DEBUG_FILE = """\
node01:1234:1300 [0] NCCL INFO NCCL version 2.21.5+cuda12.4
node01:1234:1300 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.5<0>
node01:1234:1300 [0] NCCL INFO comm 0x5581d2c0 rank 3 nRanks 16 nNodes 2 localRanks 8 localRank 3 MNNVL 0

node01:1234:1302 [0] misc/socket.cc:49 NCCL WARN socketProgress: Connection closed by remote peer node02<42830>
node01:1234:1302 [0] NCCL INFO transport/net.cc:288 -> 6
"""

NCCL_DEBUG_FILE_2_30 = """\
node07:2201:2260 [3] NCCL INFO ncclCommInitRank comm 0x5581d2c0 rank 3 nranks 16 cudaDev 3 nvmlDev 3 busId 3b000 commId 0x9e17999afaa87dbb - Init COMPLETE

[2026-01-05 10:12:08] node07:2201:2260 [3] misc/socket.cc:518 (socketProgressOpt) NCCL WARN Net : Call to recv from 10.0.0.7<58355> failed : Broken pipe
"""

PYSPY_TEXT = """\
Process 7712: /venv/bin/python3 -u train.py
Python v3.11.7 (/usr/bin/python3.11)

Thread 7712 (idle): "MainThread"
    all_reduce (torch/distributed/distributed_c10d.py:3252)
    train_step (train.py:8)
    <module> (train.py:10)
Thread 7790 (active): "pt_autograd_0"
    ncclGroupEnd (libnccl.so.2)
"""

# A dump pasted from a terminal often loses its header; the thread blocks remain.
PYSPY_THREADS_ONLY = """\
Thread 0x7F3A2B1C4740 (active+gil)
    load_batch (hang.py:6)
    <module> (hang.py:11)
"""

PYSPY_JSON = json.dumps(
    [
        {
            "pid": 7712,
            "thread_id": 139741632539520,
            "thread_name": "MainThread",
            "os_thread_id": 7712,
            "active": False,
            "owns_gil": False,
            "frames": [
                {
                    "name": "all_reduce",
                    "filename": "/venv/lib/python3.11/site-packages/torch/distributed/c10d.py",
                    "module": None,
                    "short_filename": "torch/distributed/c10d.py",
                    "line": 3252,
                }
            ],
            "process_info": None,
        }
    ]
)

PYSPY_NO_PTRACE = """\
Permission Denied: Try running again with elevated permissions by going 'sudo env "PATH=$PATH" !!'
It looks like you are running in a docker container. Please make sure you started your container with the SYS_PTRACE capability.
"""


def fr_entry(seq: int, **extra: object) -> dict[str, object]:
    entry: dict[str, object] = {
        "record_id": seq,
        "pg_id": 0,
        "process_group": ("0", "default_pg"),
        "collective_seq_id": seq,
        "p2p_seq_id": 0,
        "op_id": seq,
        "is_p2p": False,
        "profiling_name": "nccl:all_reduce",
        "time_created_ns": 1767607928123456789,
        "input_sizes": [[1024, 4096]],
        "input_dtypes": ["BFloat16"],
        "output_sizes": [[1024, 4096]],
        "output_dtypes": ["BFloat16"],
        "state": "scheduled",
        "retired": False,
        "timeout_ms": 600000,
    }
    entry.update(extra)
    return entry


FR_V2_10 = {
    "version": "2.10",
    "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3]"}},
    "pg_status": {"0": {"last_enqueued_collective": 12, "last_completed_collective": 11}},
    "comm_lib_version": "2.21.5",
    "entries": [fr_entry(i) for i in range(1, 4)],
}

ELASTIC_ERROR = json.dumps(
    {
        "message": {
            "message": "OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
            "extraInfo": {
                "py_callstack": "Traceback (most recent call last):\n  File ...",
                "timestamp": "1767607928",
            },
        }
    }
)
ELASTIC_ERROR_LEGACY = json.dumps({"message": "RuntimeError: boom", "timestamp": 1767607928})
ELASTIC_ERROR_AGENT_COPY = json.dumps(
    {
        "message": {
            "message": "RuntimeError: boom",
            "extraInfo": {"py_callstack": "Traceback ...", "timestamp": "1767607928"},
            "errorCode": 1,
        }
    },
    indent=2,
)

COLLECT_ENV = """\
Collecting environment information...
PyTorch version: 2.13.0+cpu
Is debug build: False
CUDA used to build PyTorch: Could not collect
ROCM used to build PyTorch: N/A

OS: Debian GNU/Linux 12 (bookworm) (x86_64)
Python version: 3.11.7 (main, ...) [GCC 12.2.0] (64-bit runtime)
Python platform: Linux-6.18.44-x86_64-with-glibc2.36
Is CUDA available: False

Versions of relevant libraries:
[pip3] numpy==2.4.6
[pip3] torch==2.13.0+cpu
[pip3] nvidia-nccl-cu12==2.21.5
"""

DS_REPORT = """\
[2025-01-05 10:00:00,000] [INFO] [real_accelerator.py:203:get_accelerator] Setting ds_accelerator to cuda (auto detect)
--------------------------------------------------
DeepSpeed C++/CUDA extension op report
--------------------------------------------------
async_io ............... [NO] ....... [NO]
fused_adam ............. [NO] ....... [OKAY]
--------------------------------------------------
DeepSpeed general environment info:
torch version .................... 2.3.0+cu121
shared memory (/dev/shm) size .... 125.77 GB
"""

PIP_LIST = """\
Package                  Version
------------------------ ------------
deepspeed                0.15.5
nvidia-nccl-cu12         2.21.5
torch                    2.3.0+cu121
"""

PIP_FREEZE = """\
accelerate==0.34.2
deepspeed==0.15.5
nvidia-nccl-cu12==2.21.5
torch @ file:///wheels/torch-2.3.0-cp311-linux_x86_64.whl
-e git+https://example.invalid/repo.git@abc#egg=mytrainer
"""

NVIDIA_SMI = """\
Mon Jan  5 10:12:08 2026
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 550.54.15              Driver Version: 550.54.15      CUDA Version: 12.4     |
|-----------------------------------------+------------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |
|   0  NVIDIA H100 80GB HBM3          On  |   00000000:18:00.0 Off |                    0 |
+-----------------------------------------+------------------------+----------------------+
"""

ENV_DUMP = """\
HOSTNAME=node01
MASTER_ADDR=10.0.0.5
MASTER_PORT=29500
NCCL_DEBUG=INFO
NCCL_SOCKET_IFNAME=eth0
WORLD_SIZE=16
"""

EXPORT_P = """\
declare -x CUDA_VISIBLE_DEVICES="0,1,2,3"
declare -x NCCL_IB_DISABLE="1"
declare -x PATH="/usr/local/bin:/usr/bin"
"""

NVIDIA_TOPO = """\
\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity
GPU0\t X \tNV18\t0-55\t0
GPU1\tNV18\t X \t0-55\t0
"""

PROSE = """\
Notes for the next run
We moved the dataset to the new bucket and bumped the batch size.
Remember to ask the cluster team about the maintenance window.
"""


def pickle_bytes(obj: object) -> bytes:
    return pickle.dumps(obj, protocol=2)


# --------------------------------------------------------------------------- sniffing


@pytest.mark.parametrize(
    ("name", "content", "kind"),
    [
        ("rank traceback", RANK_TRACEBACK, K.RANK_LOG),
        ("torchrun agent log", TORCHRUN_AGENT, K.RANK_LOG),
        ("training stdout with an NCCL line", TRAINING_STDOUT, K.RANK_LOG),
        ("deepspeed launcher", DEEPSPEED_LAUNCHER, K.RANK_LOG),
        ("slurm output", SLURM_TAIL, K.RANK_LOG),
        ("NCCL_DEBUG_FILE", NCCL_DEBUG_FILE, K.NCCL),
        ("NCCL 2.30 with timestamps", NCCL_DEBUG_FILE_2_30, K.NCCL),
        ("py-spy dump", PYSPY_TEXT, K.PYSPY),
        ("py-spy threads without header", PYSPY_THREADS_ONLY, K.PYSPY),
        ("py-spy --json", PYSPY_JSON, K.PYSPY),
        ("py-spy without ptrace rights", PYSPY_NO_PTRACE, K.PYSPY),
        ("elastic error.json", ELASTIC_ERROR, K.ELASTIC_ERROR),
        ("legacy elastic error", ELASTIC_ERROR_LEGACY, K.ELASTIC_ERROR),
        ("agent copy of error.json", ELASTIC_ERROR_AGENT_COPY, K.ELASTIC_ERROR),
        (
            "error file, keys reordered",
            '{"timestamp": 1767607928, "message": "boom"}',
            K.ELASTIC_ERROR,
        ),
        ("a message that is not an error file", '{"message": "hello", "user": "x"}', K.TEXT),
        ("collect_env", COLLECT_ENV, K.ENV_REPORT),
        ("ds_report", DS_REPORT, K.ENV_REPORT),
        ("pip list", PIP_LIST, K.ENV_REPORT),
        ("pip freeze", PIP_FREEZE, K.ENV_REPORT),
        ("nvidia-smi", NVIDIA_SMI, K.ENV_REPORT),
        ("env dump", ENV_DUMP, K.ENV_REPORT),
        ("export -p", EXPORT_P, K.ENV_REPORT),
        ("prose", PROSE, K.TEXT),
        ("notes in markdown", "# What happened\n\nThe job died after a RuntimeError.\n", K.TEXT),
        ("nvidia-smi topo -m", NVIDIA_TOPO, K.ENV_REPORT),
        ("unrelated json", '{"lr": 0.001, "batch_size": 32}', K.TEXT),
        ("json of a failed run", '{"status": "Error", "detail": "CUDA out of memory"}', K.TEXT),
        (
            "json lines log",
            '{"level": "ERROR", "msg": "NCCL timeout"}\n{"level": "INFO", "msg": "x"}\n',
            K.RANK_LOG,
        ),
    ],
)
def test_each_text_format_is_recognised_by_its_content(name: str, content: str, kind: SourceKind):
    found, warnings = detect_kind(content.encode())
    assert (found, warnings) == (kind, []), name


def test_flight_recorder_dumps_of_every_era_are_recognised_without_unpickling():
    v2_10 = pickle_bytes(FR_V2_10)
    bare_list = pickle_bytes([fr_entry(1), fr_entry(2)])  # torch 2.2: no version, no pg info
    v1_seq_id = pickle_bytes(
        {"version": "1.5", "entries": [{"seq_id": 4, "profiling_name": "nccl:broadcast"}]}
    )
    as_json = json.dumps({**FR_V2_10, "nccl_comm_state": {}}, sort_keys=True).encode()
    for blob in (v2_10, bare_list, v1_seq_id, as_json):
        assert detect_kind(blob) == (K.FLIGHT_RECORDER, [])


def test_a_pickle_that_is_not_a_dump_is_listed_but_not_read():
    kind, warnings = detect_kind(pickle_bytes({"weights": [1.0, 2.0], "epoch": 3}))
    assert kind is K.TEXT
    assert warnings == ["Python pickle that is not a flight-recorder dump, not read"]


def test_a_log_whose_head_is_a_wall_of_nccl_init_lines_but_prefixed_by_torchrun_is_a_rank_log():
    lines = [
        f"[default0]:node01:1234:1300 [0] NCCL INFO Channel {i:02d} : 0 -> 1" for i in range(50)
    ]
    assert detect_kind("\n".join(lines).encode())[0] is K.RANK_LOG


def test_collect_env_at_the_top_of_a_crashing_job_log_keeps_it_a_rank_log():
    assert detect_kind((COLLECT_ENV + RANK_TRACEBACK).encode())[0] is K.RANK_LOG


@pytest.mark.parametrize(
    ("blob", "warning"),
    [
        (b"", "empty file"),
        (bytes(range(256)) * 40, "binary file, not read"),
        (b"\x7fELF\x02\x01\x01\x00" + b"\x00" * 200, "binary file, not read"),
        (
            "rank 3 crashed\n".encode("utf-16"),
            "UTF-16 encoded text, not read (convert it to UTF-8)",
        ),
    ],
)
def test_files_that_are_not_readable_text_say_why(blob: bytes, warning: str):
    assert detect_kind(blob) == (K.TEXT, [warning])


def test_a_log_with_a_few_latin1_bytes_is_still_a_log():
    blob = "[rank0]: RuntimeError: caf\xe9 au lait\n".encode("latin-1") * 20
    assert detect_kind(blob)[0] is K.RANK_LOG


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=4096))
def test_random_bytes_never_break_the_sniffer(blob: bytes):
    kind, warnings = detect_kind(blob)
    assert isinstance(kind, SourceKind)
    assert all(isinstance(w, str) for w in warnings)


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from([b"\x80\x02", b"{", b"[", b"Process 1: x\n", b"\x1f\x8b", b"PK\x03\x04"]),
    st.binary(max_size=2048),
)
def test_random_bytes_behind_a_familiar_prefix_never_break_the_sniffer(prefix: bytes, tail: bytes):
    kind, _ = detect_kind(prefix + tail)
    assert isinstance(kind, SourceKind)


# --------------------------------------------------------------------------- attribution


@pytest.mark.parametrize(
    ("path", "rank", "host"),
    [
        ("logs/rank_3.log", 3, None),
        ("logs/rank3.txt", 3, None),
        ("logs/node-1-rank12.out", 12, "node-1"),
        ("pyspy/trn-node-2.rank0.pid19821.txt", 0, "trn-node-2"),
        ("logs/worker-0.log", 0, None),
        ("logs/stderr_rank_5", 5, None),
        ("fr/nccl_trace_rank_3", 3, None),
        ("fr/comm_lib_trace_rank_container-node02_5", 5, "container-node02"),
        ("fr/trace_7.pkl", 7, None),
        ("stacks/pyspy_rank2.txt", 2, None),
        ("stacks/rank2.pyspy.json", 2, None),
        ("out/stdout_4.log", 4, None),
        ("host-node01/rank_1.log", 1, "node01"),
        ("node01/train.log", None, "node01"),
        ("gpu-node-3/rank_0.log", 0, "gpu-node-3"),
        ("10.0.0.5/rank_0.log", 0, "10.0.0.5"),
        ("node07.tar.gz/logs/rank_6.log", 6, "node07"),
        ("nccl/nccl.node01.12345.log", None, "node01"),
        ("rank_9/stdout.log", 9, None),
        ("logs/node01.log", None, "node01"),
        ("logs/host-a7.txt", None, "a7"),
    ],
)
def test_rank_and_host_come_from_explicit_names(path: str, rank: int | None, host: str | None):
    facts = attribute(path.split("/"))
    assert (facts.rank, facts.host) == (rank, host)


@pytest.mark.parametrize(
    "path",
    [
        "slurm-494583.out",  # a job id, not a rank
        "train-2024-01-05.log",  # a date
        "log_20240105_1230.txt",
        "train.log.1",  # log rotation
        "job_12.log",
        "epoch_3.txt",
        "checkpoint-2000/trainer_state.json",
        "run42/output.txt",
        "gpu0/stdout.txt",  # a device, not a rank (nor a host)
        "pyspy/torchrun-node01.txt",  # which part is the host is a guess: none is made
    ],
)
def test_numbers_that_are_not_ranks_are_left_alone(path: str):
    facts = attribute(path.split("/"))
    assert facts.rank is None
    assert facts.host is None


def test_torchrun_log_dir_gives_local_rank_and_attempt_but_not_a_guessed_global_rank():
    facts = attribute(["logs", "none_x7k2", "attempt_1", "3", "stderr.log"])
    assert (facts.local_rank, facts.attempt, facts.rank) == (3, 1, None)
    facts = attribute(["node02", "run", "attempt_0", "0", "error.json"])
    assert (facts.local_rank, facts.attempt, facts.host) == (0, 0, "node02")


def test_local_rank_names_are_not_taken_for_global_ranks():
    facts = attribute(["local_rank3.log"])
    assert (facts.rank, facts.local_rank) == (None, 3)


def test_path_traversal_parts_do_not_influence_attribution():
    assert attribute(["..", "..", "etc", "rank_2.log"]).rank == 2
    assert attribute(["", "/", ".", ""]).rank is None


def test_extensions_are_stripped_but_numbers_are_not():
    assert strip_extensions("rank2.pyspy.json") == "rank2"
    assert strip_extensions("nccl.node01.12345.log") == "nccl.node01.12345"
    assert strip_extensions("train.log.1") == "train.log.1"


# --------------------------------------------------------------------------- discovery helpers


def write(path: Path, content: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    return path


def read_all(source: Source) -> bytes:
    with source.open() as f:
        return f.read()


def by_path(sources: list[Source]) -> dict[str, Source]:
    return {s.path: s for s in sources}


def tar_bytes(members: dict[str, bytes], mode: str = "w:gz") -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode) as tf:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = 1767607928
            tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def zip_bytes(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return buf.getvalue()


BUNDLE = {
    "job/attempt_0/0/stderr.log": RANK_TRACEBACK.encode(),
    "job/attempt_0/1/error.json": ELASTIC_ERROR.encode(),
    "job/nccl.node01.1234.log": NCCL_DEBUG_FILE.encode(),
    "job/env.txt": COLLECT_ENV.encode(),
}


def snapshot(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


# --------------------------------------------------------------------------- discovery


def test_a_folder_is_walked_in_natural_order_with_kinds_and_ranks(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for rank in (10, 2, 1):
        write(tmp_path / "logs" / f"rank_{rank}.log", RANK_TRACEBACK)
    write(tmp_path / "logs" / "fr" / "nccl_trace_rank_3", pickle_bytes(FR_V2_10))
    sources = list(discover(["logs"]))
    assert [s.path for s in sources] == [
        "logs/fr/nccl_trace_rank_3",
        "logs/rank_1.log",
        "logs/rank_2.log",
        "logs/rank_10.log",
    ]
    assert [(s.kind, s.rank) for s in sources] == [
        (K.FLIGHT_RECORDER, 3),
        (K.RANK_LOG, 1),
        (K.RANK_LOG, 2),
        (K.RANK_LOG, 10),
    ]
    assert read_all(sources[1]) == RANK_TRACEBACK.encode()


@pytest.mark.parametrize("fmt", ["tar", "tgz", "tar.bz2", "tar.xz", "zip"])
def test_archive_members_are_read_in_place_with_kinds_and_layout(tmp_path, monkeypatch, fmt):
    monkeypatch.chdir(tmp_path)
    if fmt == "zip":
        blob = zip_bytes(BUNDLE)
    else:
        blob = tar_bytes(
            BUNDLE, {"tar": "w", "tgz": "w:gz", "tar.bz2": "w:bz2", "tar.xz": "w:xz"}[fmt]
        )
    # The name says nothing: formats are found from magic bytes.
    write(tmp_path / "node01.bundle", blob)
    before = snapshot(tmp_path)

    sources = by_path(list(discover(["node01.bundle"])))

    assert snapshot(tmp_path) == before  # nothing extracted
    stderr = sources["node01.bundle!job/attempt_0/0/stderr.log"]
    assert (stderr.kind, stderr.local_rank, stderr.attempt, stderr.rank) == (K.RANK_LOG, 0, 0, None)
    assert sources["node01.bundle!job/attempt_0/1/error.json"].kind is K.ELASTIC_ERROR
    assert sources["node01.bundle!job/nccl.node01.1234.log"].host == "node01"
    assert sources["node01.bundle!job/env.txt"].kind is K.ENV_REPORT
    for name, data in BUNDLE.items():
        source = sources[f"node01.bundle!{name}"]
        assert source.size == len(data)
        assert source.warnings == ()
        # open() gives a fresh stream every time, even after discovery has moved on.
        assert read_all(source) == data
        assert read_all(source) == data


def test_two_streams_of_one_member_can_be_read_side_by_side(tmp_path):
    write(tmp_path / "b.tgz", tar_bytes(BUNDLE))
    source = next(s for s in discover([str(tmp_path / "b.tgz")]) if s.path.endswith("env.txt"))
    with source.open() as a, source.open() as b:
        assert a.read(10) == b.read(10) == COLLECT_ENV.encode()[:10]
        assert a.read() == COLLECT_ENV.encode()[10:]


def test_a_gzipped_log_is_read_as_the_log_inside(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "rank_4.log.gz", gzip.compress(RANK_TRACEBACK.encode()))
    (source,) = discover(["rank_4.log.gz"])
    assert (source.path, source.kind, source.rank) == ("rank_4.log.gz", K.RANK_LOG, 4)
    assert source.size == len(RANK_TRACEBACK.encode())
    assert read_all(source) == RANK_TRACEBACK.encode()


def test_archives_inside_folders_and_archives_are_opened(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    inner = tar_bytes({"rank_5.log": RANK_TRACEBACK.encode()})
    write(tmp_path / "bundle" / "all.zip", zip_bytes({"node03.tgz": inner}))
    (source,) = discover(["bundle"])
    assert source.path == "bundle/all.zip!node03.tgz!rank_5.log"
    assert (source.kind, source.rank, source.host) == (K.RANK_LOG, 5, "node03")
    assert read_all(source) == RANK_TRACEBACK.encode()


def test_member_names_that_climb_out_of_the_archive_are_only_names(tmp_path, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    absolute = f"/tmp/triage-escape-{uuid.uuid4().hex}.log"
    members = {
        "../../escaped_rank_1.log": RANK_TRACEBACK.encode(),
        absolute: RANK_TRACEBACK.encode(),
        "ok/../../../escaped_rank_2.log": RANK_TRACEBACK.encode(),
    }
    write(work / "evil.tar", tar_bytes(members, "w"))
    write(work / "evil.zip", zip_bytes(members))
    before = snapshot(tmp_path)

    sources = list(discover(["evil.tar", "evil.zip"]))

    assert snapshot(tmp_path) == before
    assert not os.path.exists(absolute)
    assert not (tmp_path.parent / "escaped_rank_1.log").exists()
    assert "evil.tar!../../escaped_rank_1.log" in {s.path for s in sources}
    assert {s.rank for s in sources} == {1, 2, None}
    assert all(read_all(s) == RANK_TRACEBACK.encode() for s in sources)


def test_control_characters_in_member_names_are_shown_escaped(tmp_path):
    write(tmp_path / "a.tar", tar_bytes({"rank_1\x1b[2J.log": b"x RuntimeError: y\n"}, "w"))
    (source,) = discover([str(tmp_path / "a.tar")])
    assert source.path.endswith("!rank_1\\x1b[2J.log")


def test_a_zip_bomb_member_is_judged_by_its_first_bytes_not_inflated(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
        zf.writestr("rank_0.log", RANK_TRACEBACK)
        zf.writestr("zeros.log", b"\x00" * (24 << 20))  # ~24 KB compressed, 1000:1
        zf.writestr("rank_1.log", RANK_TRACEBACK)
    write(tmp_path / "b.zip", buf.getvalue())
    sources = list(discover(["b.zip"]))  # its time: bench/guard_timings.py
    paths = [s.path.rsplit("!", 1)[-1] for s in sources]
    assert paths == ["rank_0.log", "zeros.log", "rank_1.log"]
    assert read_all(sources[2]) == RANK_TRACEBACK.encode()
    zeros = sources[1]
    assert zeros.kind is K.TEXT and read_all(zeros) == b""
    assert "only NUL bytes" in zeros.warnings[0]


def gzip_of_zeros(mib: int) -> bytes:
    """A gzip file of `mib` MiB of zeros, built in milliseconds: one fully flushed deflate
    segment of 1 MiB repeated (a full flush makes each copy independent of the last)."""
    block = b"\x00" * (1 << 20)
    comp = zlib.compressobj(9, zlib.DEFLATED, -15)
    segment = comp.compress(block) + comp.flush(zlib.Z_FULL_FLUSH)
    crc = 0
    for _ in range(mib):
        crc = zlib.crc32(block, crc)
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\x03"
    trailer = crc.to_bytes(4, "little") + ((mib << 20) & 0xFFFFFFFF).to_bytes(4, "little")
    return header + segment * mib + b"\x03\x00" + trailer


def test_the_zero_bomb_builder_makes_a_valid_gzip():
    assert gzip.decompress(gzip_of_zeros(3)) == b"\x00" * (3 << 20)


@pytest.mark.timeout(30)
def test_a_gzip_bomb_is_judged_by_its_first_bytes_without_being_inflated(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "rank_0.log.gz", gzip_of_zeros(200))
    write(tmp_path / "rank_1.log", RANK_TRACEBACK)
    bomb, log = discover(["rank_0.log.gz", "rank_1.log"])  # its time: bench/guard_timings.py
    assert "only NUL bytes" in bomb.warnings[0]
    assert read_all(bomb) == b""
    assert (log.kind, read_all(log)) == (K.RANK_LOG, RANK_TRACEBACK.encode())


@pytest.mark.timeout(60)
def test_a_bomb_inside_a_tgz_is_listed_not_copied_and_the_members_after_it_are_read(tmp_path):
    zeros = tarfile.TarInfo("zeros.bin")
    zeros.size = 48 << 20
    raw = tmp_path / "b.tar.gz"
    with tarfile.open(raw, "w:gz", compresslevel=9) as tf:
        info = tarfile.TarInfo("rank_0.log")
        info.size = len(RANK_TRACEBACK)
        tf.addfile(info, io.BytesIO(RANK_TRACEBACK.encode()))
        tf.addfile(zeros, _Zeros(zeros.size))
        info = tarfile.TarInfo("rank_1.log")
        info.size = len(RANK_TRACEBACK)
        tf.addfile(info, io.BytesIO(RANK_TRACEBACK.encode()))
    sources = list(discover([str(raw)]))
    names = [s.path.rsplit("!", 1)[-1] for s in sources]
    assert names == ["rank_0.log", "zeros.bin", "rank_1.log"]
    assert [sources[0].rank, sources[2].rank] == [0, 1]
    assert read_all(sources[2]) == RANK_TRACEBACK.encode()
    assert "only NUL bytes" in sources[1].warnings[0]


class _Zeros(io.RawIOBase):
    def __init__(self, size: int) -> None:
        self.left = size

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:  # type: ignore[override]
        n = min(len(buf), self.left)
        buf[:n] = b"\x00" * n
        self.left -= n
        return n


def test_too_many_members_stops_listing_with_a_warning(tmp_path):
    write(
        tmp_path / "many.zip", zip_bytes({f"rank_{i}.log": b"RuntimeError: x\n" for i in range(30)})
    )
    sources = list(discover([str(tmp_path / "many.zip")], limits=Limits(max_members=10)))
    assert len(sources) == 11
    assert "only the first 10" in sources[-1].warnings[0]


def test_a_truncated_tgz_yields_what_came_before_the_cut(tmp_path):
    log = ("[rank0]: step 1 loss 2.0\n" * 4000).encode()
    blob = tar_bytes({"rank_0.log": RANK_TRACEBACK.encode(), "rank_1.log": log})
    write(tmp_path / "cut.tgz", blob[: len(blob) * 2 // 3])
    sources = list(discover([str(tmp_path / "cut.tgz")]))
    first, partial, archive = sources
    assert read_all(first) == RANK_TRACEBACK.encode()
    assert partial.rank == 1
    assert "the archive ends inside this member" in partial.warnings[0]
    assert log.startswith(read_all(partial))
    assert "truncated or corrupt" in archive.warnings[0]


def test_a_truncated_zip_is_reported_not_raised(tmp_path):
    blob = zip_bytes(BUNDLE)
    write(tmp_path / "cut.zip", blob[: len(blob) // 2])
    (source,) = discover([str(tmp_path / "cut.zip")])
    assert source.kind is K.TEXT
    assert "not a readable zip archive" in source.warnings[0]


def test_a_truncated_gzip_log_ends_early_and_says_why(tmp_path):
    blob = gzip.compress(("[rank2]: RuntimeError: x\n" * 20000).encode())
    write(tmp_path / "rank_2.log.gz", blob[: len(blob) // 2])
    (source,) = discover([str(tmp_path / "rank_2.log.gz")])
    assert source.kind is K.RANK_LOG
    with source.open() as f:
        data = f.read()
        assert stream_problem(f) == "the compressed data ends early (truncated file)"
    assert data.startswith(b"[rank2]: RuntimeError: x\n")


def test_random_bytes_named_like_an_archive_are_reported_as_binary(tmp_path):
    write(tmp_path / "logs.tgz", os.urandom(4096))
    (source,) = discover([str(tmp_path / "logs.tgz")])
    assert (source.kind, source.warnings) == (K.TEXT, ("binary file, not read",))
    assert read_all(source) == b""


def test_symlink_loops_are_reported_and_the_walk_goes_on(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "logs" / "rank_0.log", RANK_TRACEBACK)
    os.symlink("loop_b", tmp_path / "logs" / "loop_a")
    os.symlink("loop_a", tmp_path / "logs" / "loop_b")
    write(tmp_path / "logs" / "sub" / "rank_1.log", RANK_TRACEBACK)
    os.symlink("..", tmp_path / "logs" / "sub" / "up")  # a folder inside itself
    sources = by_path(list(discover(["logs"])))
    assert sources["logs/loop_a"].warnings == ("symbolic link loop (to loop_b), not followed",)
    assert "links back" in sources["logs/sub/up"].warnings[0]
    assert sources["logs/rank_0.log"].kind is K.RANK_LOG
    assert sources["logs/sub/rank_1.log"].rank == 1
    assert len(sources) == 5


@pytest.mark.timeout(10)
def test_a_fifo_is_skipped_without_hanging(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    os.mkfifo(tmp_path / "rank_0.log")
    (source,) = discover(["rank_0.log"])
    assert source.warnings == ("a named pipe (FIFO), not read",)


def test_an_unreadable_file_is_reported_and_the_rest_is_read(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    locked = write(tmp_path / "logs" / "rank_0.log", RANK_TRACEBACK)
    write(tmp_path / "logs" / "rank_1.log", RANK_TRACEBACK)
    if os.geteuid() == 0:
        # root reads through chmod 000: make the open itself fail the way it would for a user.
        real_open = open

        def refusing_open(file, *args, **kwargs):
            if os.fspath(file) == "logs/rank_0.log":
                raise PermissionError(13, "Permission denied", os.fspath(file))
            return real_open(file, *args, **kwargs)

        monkeypatch.setattr("builtins.open", refusing_open)
    else:
        locked.chmod(0)
    try:
        first, second = discover(["logs"])
    finally:
        locked.chmod(0o644)
    assert (first.path, first.warnings) == ("logs/rank_0.log", ("permission denied, not read",))
    assert first.rank == 0
    assert second.kind is K.RANK_LOG


def test_empty_inputs_are_listed_so_the_user_sees_them(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "job" / "rank_0.log", RANK_TRACEBACK)
    write(tmp_path / "job" / "rank_1.log", b"")
    (tmp_path / "job" / "rank_2").mkdir()
    (tmp_path / "nothing" / "deeper").mkdir(parents=True)
    sources = by_path(list(discover(["job", "nothing", "missing.log"])))
    assert sources["job/rank_1.log"].warnings == ("empty file",)
    assert sources["job/rank_2"].warnings == ("empty directory: nothing to read",)
    assert sources["job/rank_2"].rank == 2
    assert sources["nothing"].warnings == ("empty directory: nothing to read",)
    assert "nothing/deeper" not in sources  # one line for a wholly empty tree
    assert "no such file" in sources["missing.log"].warnings[0]
    assert all(s.kind is K.TEXT for p, s in sources.items() if p != "job/rank_0.log")


def test_a_single_path_may_be_given_bare(tmp_path):
    path = write(tmp_path / "rank_0.log", RANK_TRACEBACK)
    assert [s.rank for s in discover(path)] == [0]  # type: ignore[arg-type]
    assert [s.rank for s in discover(str(path))] == [0]


def test_the_same_file_given_twice_is_read_once(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "logs" / "rank_0.log", RANK_TRACEBACK)
    os.symlink("logs", tmp_path / "latest")
    sources = list(discover(["logs", "logs/rank_0.log", "latest"]))
    assert [s.path for s in sources] == ["logs/rank_0.log"]


def test_a_big_member_is_streamed_not_held_in_memory(tmp_path):
    # 1 MiB of hex lines (compresses ~2:1, like a real log, not like a bomb), 24 times over.
    block = b"".join(
        b"[rank0]: step " + os.urandom(16).hex().encode() + b"\n" for _ in range(23832)
    )
    log_size = 24 * len(block)
    info = tarfile.TarInfo("rank_0.log")
    info.size = log_size
    with tarfile.open(tmp_path / "big.tgz", "w:gz", compresslevel=1) as tf:
        tf.addfile(info, io.BytesIO(block * 24))
    tracemalloc.start()
    try:
        (source,) = discover([str(tmp_path / "big.tgz")])
        total = 0
        with source.open() as f:
            while chunk := f.read(1 << 16):
                total += len(chunk)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert total == source.size == log_size
    assert peak < 8 * 1024 * 1024


def test_a_zip_whose_entries_share_compressed_bytes_is_refused(tmp_path):
    blob = bytearray(zip_bytes({"rank_0.log": b"RuntimeError: x\n" * 1000, "rank_1.log": b"y\n"}))
    # Point the second central-directory entry at the first entry's data, as bombs do.
    second = blob.rfind(b"PK\x01\x02")
    blob[second + 42 : second + 46] = (0).to_bytes(4, "little")
    write(tmp_path / "overlap.zip", bytes(blob))
    (source,) = discover([str(tmp_path / "overlap.zip")])
    assert "entries overlap" in source.warnings[0]


def test_a_corrupt_zip_member_becomes_a_warning_not_an_exception(tmp_path):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr("rank_0.log", RANK_TRACEBACK)
        zf.writestr("rank_1.log", RANK_TRACEBACK)
    blob = bytearray(buf.getvalue())
    spot = blob.find(b"RuntimeError")
    blob[spot] ^= 0xFF  # the first member's CRC no longer matches
    write(tmp_path / "crc.zip", bytes(blob))
    first, second = discover([str(tmp_path / "crc.zip")])
    assert "zip member is corrupt" in first.warnings[0]
    assert "CRC" in first.warnings[0]
    assert read_all(second) == RANK_TRACEBACK.encode()


def test_file_names_that_are_not_utf8_are_shown_escaped_and_still_read(tmp_path):
    folder = os.fsencode(tmp_path / "logs")
    os.mkdir(folder)
    with open(os.path.join(folder, b"rank_1\xff.log"), "wb") as f:
        f.write(RANK_TRACEBACK.encode())
    (source,) = discover([str(tmp_path / "logs")])
    assert source.path.endswith("rank_1\\xff.log")
    source.path.encode("utf-8")  # a report can print it
    assert (source.rank, read_all(source)) == (1, RANK_TRACEBACK.encode())


def test_a_file_that_disappears_after_discovery_reads_as_empty_with_a_reason(tmp_path):
    path = write(tmp_path / "rank_0.log", RANK_TRACEBACK)
    (source,) = discover([str(path)])
    path.unlink()
    with source.open() as f:
        assert f.read() == b""
        assert "could not be opened" in (stream_problem(f) or "")


@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from(
        [
            b"",
            b"PK\x03\x04",
            b"PK\x05\x06",
            b"\x1f\x8b\x08\x00",
            b"BZh9",
            b"\xfd7zXZ\x00",
            b"\x80\x02",
        ]
    ),
    st.binary(max_size=3000),
    st.booleans(),
)
def test_random_archive_like_files_never_break_discovery(prefix: bytes, tail: bytes, as_tar: bool):
    import tempfile

    blob = prefix + tail
    if as_tar:  # a valid tar header followed by junk, or a tar cut anywhere
        whole = tar_bytes({"rank_0.log": tail or b"x"}, "w")
        blob = whole[: len(tail) % len(whole) + 1] if tail else whole
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "input")
        with open(path, "wb") as f:
            f.write(blob)
        for source in discover([path]):
            assert isinstance(source.kind, SourceKind)
            read_all(source)


def test_a_torch_checkpoint_in_the_bundle_is_one_line_not_hundreds(tmp_path):
    members = {"model/data.pkl": pickle_bytes({"w": 1}), "model/version": b"3\n"}
    members.update({f"model/data/{i}": os.urandom(64) for i in range(200)})
    write(tmp_path / "job" / "model.pt", zip_bytes(members))
    write(tmp_path / "job" / "rank_0.log", RANK_TRACEBACK)
    checkpoint, log = discover([str(tmp_path / "job")])
    assert checkpoint.warnings == ("a PyTorch checkpoint (torch.save zip), not read",)
    assert log.kind is K.RANK_LOG


def test_version_control_and_bytecode_folders_are_not_walked(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "job" / ".git" / "objects" / "ab" / "cdef", zlib.compress(b"blob 3\0abc"))
    write(tmp_path / "job" / "__pycache__" / "train.cpython-311.pyc", b"\xa7\r\r\n" + bytes(64))
    write(tmp_path / "job" / "rank_0.log", RANK_TRACEBACK)
    assert [s.path for s in discover(["job"])] == ["job/rank_0.log"]


@pytest.mark.parametrize("compress", [False, True])
def test_sparse_tar_members_are_listed_but_not_expanded(tmp_path, compress):
    sparse = tarfile.TarInfo("rank_9.log")
    sparse.type = tarfile.GNUTYPE_SPARSE  # holes could expand to any size
    data = RANK_TRACEBACK.encode()
    normal = tarfile.TarInfo("rank_1.log")
    normal.size = len(data)
    padding = b"\0" * (-len(data) % 512)
    blob = (
        sparse.tobuf(format=tarfile.GNU_FORMAT)
        + normal.tobuf(format=tarfile.GNU_FORMAT)
        + data
        + padding
        + b"\0" * 1024
    )
    write(tmp_path / "s.tar", gzip.compress(blob) if compress else blob)
    sparse_source, log = discover([str(tmp_path / "s.tar")])
    assert sparse_source.warnings == ("sparse tar member, not read",)
    assert read_all(log) == data


NCCL_INIT_LINE = "node01:1234:1300 [0] NCCL INFO Channel {i:02d}/0 : 0[0] -> 1[1] via P2P/IPC\n"


def test_a_big_nccl_debug_file_is_nccl_and_a_stdout_that_only_starts_like_one_is_a_log(tmp_path):
    wall = "".join(NCCL_INIT_LINE.format(i=i % 100) for i in range(2000)).encode()
    assert len(wall) > 64 * 1024
    write(tmp_path / "debug" / "nccl.node01.1234.log", wall + NCCL_DEBUG_FILE.encode())
    write(tmp_path / "stdout" / "rank_0.log", wall + RANK_TRACEBACK.encode())
    write(tmp_path / "zipped.zip", zip_bytes({"rank_0.log": wall + RANK_TRACEBACK.encode()}))
    (debug,) = discover([str(tmp_path / "debug")])
    (stdout,) = discover([str(tmp_path / "stdout")])
    (zipped,) = discover([str(tmp_path / "zipped.zip")])
    assert debug.kind is K.NCCL
    assert stdout.kind is K.RANK_LOG  # the traceback at the end must reach the log parser
    assert zipped.kind is K.RANK_LOG  # no cheap tail: the log parser reads NCCL lines too


def test_an_absurdly_deep_folder_tree_is_cut_with_a_warning(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    deep = Path("d")
    for _ in range(80):
        deep = deep / "d"
    write(tmp_path / deep / "rank_0.log", RANK_TRACEBACK)
    write(tmp_path / "d" / "rank_1.log", RANK_TRACEBACK)
    sources = list(discover(["d"]))
    assert [s.path for s in sources][-1] == "d/rank_1.log"
    assert "nested more than 64 deep" in sources[0].warnings[0]


def test_a_worker_reopens_a_plain_file_as_discovered_and_leaves_the_rest_to_discover(
    tmp_path: Path,
) -> None:
    plain = tmp_path / "rank_0.log"
    plain.write_bytes(b"[rank0]: RuntimeError: boom\n")
    (source,) = discover([str(plain)])
    opener = reopen_plain(str(plain), source.size)
    assert opener is not None
    with opener() as again, source.open() as first:
        assert again.read() == first.read()

    packed = tmp_path / "rank_1.log.gz"
    packed.write_bytes(gzip.compress(b"[rank1]: RuntimeError: boom\n"))
    assert reopen_plain(str(packed), packed.stat().st_size) is None  # decompressed by discover
    assert reopen_plain(str(plain), source.size + 1) is None  # changed since discovery
    assert reopen_plain(str(tmp_path / "gone.log"), 10) is None


_STRONG_BITS = [
    "[rank3]: boom",
    "[default0]:x",
    "I1130 10:00:00.123456  77 c.cpp:1] hi",
    "W2345 10:00:00.123 77 odd month",
    "[E1130 10:00:00.1 x",
    "[W socket.cpp:9] y",
    "Traceback (most recent call last):",
    "torch.distributed.elastic",
    "ProcessGroupNCCL",
]
_WEAK_BITS = [
    "E9 ",
    "[2026-01-01 10:00:00,000] [INFO] step=1",
    "NCCL INFO x",
    "words",
    "",
    "[",
    "I",
]


@settings(max_examples=300, deadline=None)
@given(
    weak=st.lists(st.sampled_from(_WEAK_BITS), max_size=6),
    strong=st.none() | st.sampled_from(_STRONG_BITS),
    at=st.integers(min_value=0, max_value=6),
    sep=st.sampled_from(["\n", " ", ""]),
)
def test_the_strong_log_prefilter_says_what_the_regex_says(
    weak: list[str], strong: str | None, at: int, sep: str
) -> None:
    # the module, not the `sniff` function the package exports under the same name
    module = importlib.import_module("triage.ingest.sniff")
    bits = list(weak)
    if strong is not None:
        bits.insert(min(at, len(bits)), strong)
    text = sep.join(bits)
    assert module._strong_log(text) == (module._STRONG_LOG.search(text) is not None)


def test_notes_beside_a_jobs_logs_are_listed_but_never_read_as_its_evidence(tmp_path: Path):
    """A README or a labels file beside the logs says what someone expects, not what the job
    printed: it must not steer the diagnosis (here it claims an OOM the log never shows)."""
    from triage import pipeline
    from triage.report import render

    (tmp_path / "rank0.log").write_text(
        "[rank0]: Traceback (most recent call last):\n"
        '[rank0]:   File "/workspace/train.py", line 12, in <module>\n'
        "[rank0]: ValueError: batch 7 has no labels\n"
    )
    (tmp_path / "README.md").write_text(
        "# What happened\n\nRank 3 ran out of GPU memory (CUDA out of memory) at step 9.\n"
    )
    (tmp_path / "expected.json").write_text('{"symptom": "S14", "story": "CUDA out of memory"}')
    d = pipeline.diagnose([str(tmp_path)])
    out = json.loads(render(d, "json"))
    assert out["symptoms"][0]["id"] != "S14"
    assert "out of memory" not in json.dumps(out["fix_patterns"]).lower()
    notes = {i["path"].rsplit("/", 1)[-1]: i for i in out["inputs"]}
    for name in ("README.md", "expected.json"):
        assert any("not read as the job's evidence" in w for w in notes[name]["warnings"])
    quoted = {e["source"] for f in out["fix_patterns"] for e in f.get("evidence", [])}
    assert not any(s.endswith(("README.md", "expected.json")) for s in quoted)


def test_notes_set_aside_are_not_reported_as_inputs_that_could_not_be_read(tmp_path: Path):
    from triage import pipeline
    from triage.report import render

    (tmp_path / "rank0.log").write_text(
        "[rank0]: Traceback (most recent call last):\n"
        '[rank0]:   File "/workspace/train.py", line 12, in <module>\n'
        "[rank0]: ValueError: batch 7 has no labels\n"
    )
    (tmp_path / "NOTES.md").write_text("# What we tried\n\nRestarted it twice.\n")
    d = pipeline.diagnose([str(tmp_path)])
    for fmt in ("text", "md", "html"):
        out = render(d, fmt)
        assert "could not be read" not in out, fmt
        assert "set aside" in out, fmt


def test_a_ranks_own_short_stdout_under_torchruns_log_dir_is_read_not_set_aside(
    tmp_path: Path,
):
    """torchrun --log-dir writes each local rank's streams to attempt_N/<rank>/: one line of
    a rank's own output (here the version it imported) is that rank's evidence, not a note."""
    from triage import pipeline
    from triage.report import render

    run = tmp_path / "logs" / "none_abc" / "attempt_0"
    for r in (0, 1):
        (run / str(r)).mkdir(parents=True)
        (run / str(r) / "stdout.log").write_text(f"node01 pid {2500 + r}: fastkernels 0.4.1\n")
    (run / "1" / "stderr.log").write_text(
        "Traceback (most recent call last):\n"
        '  File "/workspace/train.py", line 3, in <module>\n'
        "ImportError: cannot import name 'fused_rmsnorm' from 'fastkernels'\n"
    )
    out = json.loads(render(pipeline.diagnose([str(tmp_path)]), "json"))
    stdout = [i for i in out["inputs"] if i["path"].endswith("stdout.log")]
    assert len(stdout) == 2
    assert not any("not read as the job's evidence" in w for i in stdout for w in i["warnings"])


def test_a_note_alone_is_read_it_is_the_evidence_the_user_gave(tmp_path: Path):
    from triage import pipeline

    (tmp_path / "error.md").write_text(
        "# crash\n\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
    )
    d = pipeline.diagnose([str(tmp_path)])
    assert d.symptoms and d.symptoms[0].id == "S14"


def test_a_rank_the_name_only_suggests_stands_when_the_lines_name_it_most() -> None:
    from triage.ingest.attribution import confirmed

    guess = attribute(["logs", "log-5.txt"])
    assert (guess.rank, guess.rank_guessed) == (5, True)
    assert confirmed(guess, b"[rank5]: step 1\n[rank5]: step 2\n").rank == 5
    assert confirmed(guess, b"Rank 4 ready\nRank 5 ready\nRank 6 ready\n").rank is None
    assert confirmed(guess, b"local_rank=5 starting\n").rank is None
    assert confirmed(attribute(["rank_5.log"]), b"nothing\n").rank == 5
