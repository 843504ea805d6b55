"""Flight-recorder dumps in every layout users have: torch's own pickle (real gloo dumps in
bench/samples/fr/), Python's pickler at protocols 2-5 (a dump re-saved) and torch's JSON. Each
reads to the same entries, and a big job's tail read engages on every pickle layout."""

from __future__ import annotations

import pickle
import sys
from pathlib import Path
from typing import Any

import pytest

from triage.parsers import flight_recorder

SAMPLES = Path(__file__).resolve().parent.parent / "bench" / "samples" / "fr"
sys.path.insert(0, str(SAMPLES.parent.parent))
import fr_pickle  # noqa: E402  (bench/fr_pickle.py)

TORCH = sorted(SAMPLES.glob("torch_*.pkl"))
RANK1 = [
    "torch_rank_1.pkl",
    *(f"python_p{p}_rank_1.pkl" for p in (2, 3, 4, 5)),
    "torch_rank_1.json",
]


def _read(name: str, tail: int | None = None) -> Any:
    dump, why = flight_recorder.load_dump((SAMPLES / name).read_bytes(), tail=tail)
    assert dump is not None, why
    return dump


def test_real_dumps_of_every_layout_are_there() -> None:
    assert len(TORCH) >= 5 and all((SAMPLES / name).is_file() for name in RANK1)
    assert all(p.read_bytes()[:2] == b"\x80\x02" for p in TORCH)


@pytest.mark.parametrize("path", TORCH, ids=lambda p: p.name)
def test_the_bench_writer_gives_torchs_bytes_for_the_same_object(path: Path) -> None:
    data = path.read_bytes()
    assert fr_pickle.dumps(pickle.loads(data)) == data  # our own sample: stdlib load is fine


def test_a_dump_rebuilt_without_shared_frames_gets_them_shared_back() -> None:
    data = (SAMPLES / "torch_rank_1.pkl").read_bytes()
    copied = pickle.loads(pickle.dumps(pickle.loads(data), protocol=2))  # a copy per frame...
    for entry in copied["entries"]:
        entry["frames"] = [dict(f) for f in entry["frames"]]
    assert fr_pickle.dumps(fr_pickle.share_frames(copied)) == data  # ...shared as torch did


def _essence(dump: Any) -> list[tuple[Any, ...]]:
    # JSON dumps carry no stacks: compare what every layout holds
    return [e._replace(frames=()) for e in dump.entries]


@pytest.mark.parametrize("name", RANK1[1:])
def test_every_layout_reads_to_the_same_entries(name: str) -> None:
    torch_dump = _read("torch_rank_1.pkl")
    other = _read(name)
    assert _essence(other) == _essence(torch_dump)
    assert other.pg_status == torch_dump.pg_status
    if not name.endswith(".json"):
        assert other.entries == torch_dump.entries


@pytest.mark.parametrize("name", RANK1 + ["torch_nostack_rank_1.pkl", "torch_rank_0.pkl"])
@pytest.mark.parametrize("keep", [1, 7, 128])
def test_the_tail_of_every_layout_is_the_end_of_its_whole_read(name: str, keep: int) -> None:
    whole = _read(name)
    part = _read(name, tail=keep)
    assert part.entries == whole.entries[-keep:]
    assert part.entries_total == len(whole.entries)
    assert part.pg_status == whole.pg_status and part.version == whole.version


@pytest.mark.parametrize(
    "name",
    [
        "torch_rank_1.pkl",
        "torch_nostack_rank_1.pkl",
        *(f"python_p{p}_rank_1.pkl" for p in (2, 3, 4, 5)),
    ],
)
def test_the_tail_read_cuts_every_pickle_layout_without_decoding_it_whole(name: str) -> None:
    whole = _read(name)
    # whole=False: what a job too big to decode does; a dump the cut fails on is not read
    part, why = flight_recorder.load_dump((SAMPLES / name).read_bytes(), tail=16, whole=False)
    assert why is None and part is not None
    assert part.entries == whole.entries[-16:] and part.entries_total == 200


def test_an_empty_ring_buffer_in_torchs_layout_reads_as_no_entries() -> None:
    for name in ("torch_empty_rank_0.pkl", "torch_nocoll_rank_0.pkl"):
        for tail in (None, 5):
            assert _read(name, tail=tail).entries == ()


def test_a_call_spliced_into_the_kept_tail_of_torchs_layout_is_refused() -> None:
    data = (SAMPLES / "torch_rank_1.pkl").read_bytes()
    end = data.rindex(b"eu")  # APPENDS (entries), SETITEMS (top dict), its PUT, STOP
    assert data[end:] == b"eu" + data[end + 2 : end + 4] + b"." and data[end + 2] == ord("q")
    spliced = data[:end] + b"cos\nsystem\n(X\x02\x00\x00\x00idtR0" + data[end:]
    dump, why = flight_recorder.load_dump(spliced, tail=5)
    assert dump is None
    assert why is not None and "refused" in why


def test_a_memo_bomb_in_the_kept_tail_of_torchs_layout_is_refused() -> None:
    data = (SAMPLES / "torch_rank_1.pkl").read_bytes()
    end = data.rindex(b"eu")
    bomb = data[:end] + b"Nr\x00\x00\x00\x400" + data[end:]  # LONG_BINPUT slot 2**30
    dump, why = flight_recorder.load_dump(bomb, tail=5)
    assert dump is None
    assert why is not None and "memo slot" in why


CORPUS_DUMPS = sorted(
    p
    for p in (SAMPLES.parent.parent.parent / "corpus_samples").glob("*/bundle/**/*")
    if p.is_file() and p.read_bytes()[:2] == b"\x80\x02"
)


@pytest.mark.parametrize("path", CORPUS_DUMPS, ids=lambda p: f"{p.parts[-4]}/{p.name}")
def test_shipped_bundles_hold_dumps_in_torchs_own_layout(path: Path) -> None:
    # corpus_samples/make.py scrubs real dumps and writes them again: in torch's layout, so a
    # reader is tested on the bytes real jobs leave (a shared frame is one memo reference)
    data = path.read_bytes()
    assert fr_pickle.dumps(pickle.loads(data)) == data
