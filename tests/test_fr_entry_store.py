"""Reading every flight-recorder entry (`--fr-entries 0`) keeps the entries field by field
(EntryTable) and tells what reading a window tells where both can see it: the same lagging
rank and stuck collective; and what only the whole ring buffer holds, such as a mismatch
far from its end."""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path
from typing import Any

from click.testing import CliRunner
from fr_samples import fr_entry
from hypothesis import given, settings
from hypothesis import strategies as st

from triage.cli import main
from triage.model import EntryTable, FlightRecorderEntry, StackFrame

SAMPLES = Path(__file__).resolve().parent.parent / "bench" / "samples" / "fr"
ENTRIES = 3000  # well past the 128 entries a window reads


def _diagnose(folder: Path, fr_entries: int) -> dict[str, Any]:
    args = [str(folder), "--format", "json", "--no-embed", "-q", "--fr-entries", str(fr_entries)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def _fr_findings(report: dict[str, Any]) -> dict[str, list[int]]:
    fr = ("lagging_rank", "missing_rank", "collective_mismatch")
    return {f["kind"]: f["ranks"] for f in report["findings"] if f["kind"] in fr}


def test_a_real_gloo_job_read_whole_or_in_a_window_blames_the_rank_that_fell_behind(
    tmp_path: Path,
) -> None:
    # bench/samples/fr: a 2-rank gloo job of 200 mixed collectives on two groups, rank 1 one
    # all_reduce ahead (fr_real.py)
    for rank in (0, 1):
        shutil.copy(SAMPLES / f"torch_rank_{rank}.pkl", tmp_path / f"nccl_trace_rank_{rank}")
    whole, window = _diagnose(tmp_path, 0), _diagnose(tmp_path, 16)
    for report in (whole, window):
        assert report["hang"]["lagging_ranks"] == [0]
        assert report["hang"]["collective"]["seq"] == 198
        assert report["hang"]["collective"]["op"] == "all_reduce"
        assert _fr_findings(report) == {"lagging_rank": [0]}
    kinds = {f["kind"] for f in window["findings"]} - {f["kind"] for f in whole["findings"]}
    assert kinds == {"fr_window"}  # only the window says it read in part


Odd = dict[int, dict[tuple[str, int], dict[str, Any]]]


def _job(folder: Path, ranks: int, odd: Odd, behind: int) -> None:
    """A job's dumps, each `ENTRIES` all_reduces on the default group "0" with every fifth
    one on group "1", and a coalesced pair every 50 records on "0"; `odd[rank][(pg, seq)]`
    changes that rank's record of collective `seq` of group `pg`; rank `behind` did not
    enqueue the last one."""
    folder.mkdir()
    for rank in range(ranks):
        entries = []
        seq = {"0": 0, "1": 0}
        for i in range(ENTRIES - (1 if rank == behind else 0)):
            pg = "1" if i % 5 == 4 else "0"
            seq[pg] += 0 if i % 50 == 11 else 1  # records 10 and 11 of 50: one coalesced id
            entry = fr_entry(
                seq[pg],
                record_id=i,
                process_group=(pg, "default_pg" if pg == "0" else "sub"),
                state="completed" if i < ENTRIES - 2 else "scheduled",
                frames=[{"name": "step", "filename": "/workspace/train.py", "line": 40 + i % 3}],
            )
            entry.update(odd.get(rank, {}).get((pg, seq[pg]), {}))
            entries.append(entry)
        dump = {
            "version": "2.10",
            "pg_config": {
                "0": {"name": "0", "desc": "default_pg", "ranks": str(list(range(ranks)))},
                "1": {"name": "1", "desc": "sub", "ranks": str(list(range(ranks)))},
            },
            "pg_status": {},
            "entries": entries,
        }
        (folder / f"nccl_trace_rank_{rank}").write_bytes(pickle.dumps(dump, protocol=2))


def test_a_big_job_read_whole_finds_the_rank_behind_as_its_window_does(tmp_path: Path) -> None:
    _job(tmp_path / "job", ranks=6, odd={}, behind=4)
    whole, window = _diagnose(tmp_path / "job", 0), _diagnose(tmp_path / "job", 128)
    assert whole["hang"] == window["hang"]
    assert whole["hang"]["lagging_ranks"] == [4]
    assert _fr_findings(whole) == _fr_findings(window) == {"lagging_rank": [4]}


def test_a_big_job_read_whole_finds_a_mismatch_its_window_cannot_see(tmp_path: Path) -> None:
    # far before the last 128 entries, so only the whole read holds them: on group "1" (one
    # record per id) rank 2 sent another dtype at #300, and rank 3 another shape at #500; on
    # group "0" (coalesced ids) rank 5 another shape at #1500
    odd: Odd = {
        2: {("1", 300): {"input_dtypes": ["Float"]}},
        3: {("1", 500): {"input_sizes": [[7]]}},
        5: {("0", 1500): {"input_sizes": [[7]]}},
    }
    _job(tmp_path / "job", ranks=6, odd=odd, behind=-1)
    whole, window = _diagnose(tmp_path / "job", 0), _diagnose(tmp_path / "job", 128)
    found = sorted(
        (f["ranks"], f["summary"]) for f in whole["findings"] if f["kind"] == "collective_mismatch"
    )
    assert len(found) == 2
    (ranks_1, said_1), (ranks_0, said_0) = found
    assert ranks_1 == [2] and "group 1 (sub): collective #300 differs in dtype" in said_1
    assert ranks_0 == [5] and "group 0 (default_pg): collective #1500 differs in size" in said_0
    assert "collective_mismatch" not in _fr_findings(window)


_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),  # past 64 bits too
    st.floats(allow_nan=True),  # NaN, -0.0, inf
    st.sampled_from(["nccl:all_reduce", "gloo:send 0->1", ""]),
    st.sampled_from([(), ((1024, 4096),), ((7,), (2, 3))]),
)


@settings(max_examples=200, deadline=None)
@given(rows=st.lists(st.lists(_VALUES, min_size=20, max_size=20), max_size=40))
def test_an_entry_table_gives_back_exactly_the_entries_it_holds(rows: list[list[Any]]) -> None:
    frames = (StackFrame("step", "/workspace/train.py", 40),)
    entries = [tuple.__new__(FlightRecorderEntry, [*row[:-1], frames]) for row in rows]
    table = EntryTable.of(entries)
    # repr tells NaN, -0.0, True and 1 apart, which == does not
    assert [repr(e) for e in table] == [repr(e) for e in entries]
    assert [repr(e) for e in table[3:-2]] == [repr(e) for e in entries[3:-2]]
    assert [repr(table[i]) for i in range(-len(table), 0)] == [repr(e) for e in entries]
    moved = pickle.loads(pickle.dumps(table))  # as a worker process hands it back
    assert [repr(e) for e in moved] == [repr(e) for e in entries]
    for i, name in enumerate(FlightRecorderEntry._fields):
        assert repr(table.field(name)) == repr([e[i] for e in entries])
