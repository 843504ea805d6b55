"""A flight-recorder dump read field by field (the fast path) says exactly what reading it
entry by entry says, whatever is wrong with its entries."""

from __future__ import annotations

import json
import pickle
import re
from typing import Any

import pytest
from fr_samples import fr_entry
from hypothesis import given, settings
from hypothesis import strategies as st

from triage.parsers import flight_recorder


def _entry(seq: int) -> dict[str, Any]:
    return fr_entry(
        seq,
        time_discovered_completed_ns=0,
        duration_ms=1,
        frames=[{"name": "all_reduce", "filename": "c10d.py", "line": 9}],
    )


_FIELDS = sorted(_entry(1))
_ODD = [None, 0, -1, 2.5, True, "x", "", [], [[]], [[1, "a"]], [1], ("0",), ("0", 1), {}, [{}]]
_ODD_VALUES = st.sampled_from(_ODD)


# Not a dict: any such entry makes the reader go entry by entry, and is skipped by itself
_ODD_ONE_OUT = "not an entry"
_SKIPPED = re.compile(r"skipped (\d+) of (\d+) flight-recorder entries with bad fields: (.*)")


def _read(raw: list[Any], via_json: bool) -> tuple[Any, dict[str, int]]:
    """(entries, skip reasons) of a dump holding `raw`, as it arrives: JSON turns tuples into
    lists, pickle keeps them."""
    top = {"version": "2.10", "entries": raw}
    data = json.dumps(top).encode() if via_json else pickle.dumps(top, protocol=2)
    warnings: list[str] = []
    dump, why = flight_recorder.load_dump(data, warnings=warnings)
    assert dump is not None, why
    reasons: dict[str, int] = {}
    for warning in warnings:
        m = _SKIPPED.fullmatch(warning)
        assert m is not None, warning
        for part in m[3].split("; "):
            reason, count = part.rsplit(" (", 1)
            reasons[reason] = int(count.rstrip("x)"))
    return dump.entries, reasons


def _both(raw: list[Any], via_json: bool) -> tuple[Any, Any]:
    """The dump read as it is, and with one entry added that makes the reader go entry by
    entry (the added one's skip taken out again)."""
    fast = _read(raw, via_json)
    entries, reasons = _read([*raw, _ODD_ONE_OUT], via_json)
    assert reasons.pop("entry is not a dict") == 1
    return fast, (entries, reasons)


@settings(max_examples=300, deadline=None)
@given(
    changes=st.lists(
        st.tuples(
            st.integers(min_value=0, max_value=5),
            st.sampled_from(_FIELDS),
            _ODD_VALUES | st.just("<drop>"),
        ),
        max_size=3,
    ),
    via_json=st.booleans(),
)
def test_odd_fields_give_the_same_entries_and_skips_either_way(
    changes: list[tuple[int, str, Any]], via_json: bool
) -> None:
    raw = [_entry(seq) for seq in range(1, 7)]
    for index, field, value in changes:
        if value == "<drop>":
            raw[index].pop(field, None)
        else:
            raw[index][field] = value
    # Round-trip as a dump would arrive: JSON turns tuples into lists, pickle keeps them.
    fast, slow = _both(raw, via_json)
    entries, reasons = fast
    assert fast == slow
    assert len(entries) + sum(reasons.values()) == len(raw)


@pytest.mark.parametrize("via_json", [False, True])
def test_every_odd_value_in_every_field_gives_the_same_entries_either_way(
    via_json: bool,
) -> None:
    for field in _FIELDS:
        for value in [*_ODD, "<drop>"]:
            raw = [_entry(seq) for seq in range(1, 4)]
            if value == "<drop>":
                raw[1].pop(field)
            else:
                raw[1][field] = value
            fast, slow = _both(raw, via_json)
            assert fast == slow, (field, value)


@pytest.mark.parametrize("via_json", [False, True])
def test_a_clean_dump_shares_its_shapes_and_stacks_between_entries(via_json: bool) -> None:
    entries, reasons = _read([_entry(seq) for seq in range(1, 2001)], via_json)
    assert not reasons and len(entries) == 2000
    assert entries[0].input_sizes is entries[-1].input_sizes
    assert entries[0].frames is entries[-1].frames
    assert entries[5].time_completed_ns is None  # JSON's 0: not discovered
    assert entries[5].duration_ms == 1.0 and type(entries[5].duration_ms) is float


@pytest.mark.parametrize("dim", [True, 1.0], ids=["bool", "float"])
def test_an_output_shape_equal_to_the_input_but_not_of_ints_skips_its_entry(dim: Any) -> None:
    # [[1]] == [[True]] == [[1.0]]: the output shapes are read as the input's only when their
    # dims are integers too, as they would be read on their own
    raw = [_entry(seq) for seq in range(1, 5)]
    for entry in raw:
        entry["input_sizes"], entry["output_sizes"] = [[1, 8]], [[1, 8]]
    raw[2]["output_sizes"] = [[dim, 8]]
    fast, slow = _both(raw, via_json=False)
    assert fast == slow
    entries, reasons = fast
    assert [e.collective_seq_id for e in entries] == [1, 2, 4]
    assert reasons == {"output_sizes not a list of integer shapes": 1}
    first = entries[0]
    assert first.output_sizes == ((1, 8),) and first.output_sizes is first.input_sizes


_STACK_A = [
    {"name": "all_reduce", "filename": "c10d.py", "line": 9},
    {"name": "step", "filename": "train.py", "line": 1},
]
_STACK_B = [
    {"name": "barrier", "filename": "c10d.py", "line": 4},
    {"name": "save", "filename": "ckpt.py", "line": 2},
]


@pytest.mark.parametrize(
    ("field", "values"),
    [
        # an integer field's None stand-in is its array's lowest value: these must stay numbers
        ("record_id", [-128, 5, 6, 7, 8, 9, 10, 11]),
        ("record_id", [-(1 << 63), 5, 6, 7, 8, 9, 10, 11]),
        ("time_created_ns", [-32768, 1, 2, 3, 4, 5, 6, 7]),
        # one value throughout, or a few: a constant or coded column, not a typed array
        ("timeout_ms", [0] * 8),
        ("op_id", [3, 3, 3, 4, 4, 4, 3, 4]),
        # one shape list throughout but for one dim that only equals an int
        ("input_sizes", [[[1, 8]]] * 7 + [[[1.0, 8]]]),
        ("input_sizes", [[[1, 8]]] * 7 + [[[True, 8]]]),
        ("input_dtypes", [["BFloat16"]] * 7 + [("BFloat16",)]),
        # stacks of one depth: one throughout, two taking turns, one frame's line not an int
        ("frames", [_STACK_A] * 8),
        ("frames", [_STACK_A, _STACK_B] * 4),
        ("frames", [_STACK_A] * 7 + [[_STACK_A[0], {**_STACK_A[1], "line": 1.0}]]),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
@pytest.mark.parametrize("via_json", [False, True])
def test_fields_read_at_once_give_what_entry_by_entry_reading_gives(
    field: str, values: list[Any], via_json: bool
) -> None:
    raw = [_entry(seq) for seq in range(1, 9)]
    for entry, value in zip(raw, values, strict=True):
        entry[field] = value
    fast, slow = _both(raw, via_json)
    assert fast == slow
    entries, _ = fast
    if field in ("record_id", "time_created_ns", "timeout_ms", "op_id"):
        assert [getattr(e, field) for e in entries] == values
    if field == "frames" and values[1] is _STACK_B:
        assert [e.frames[0].function for e in entries] == ["all_reduce", "barrier"] * 4
