"""A flight-recorder dump read field by field (the fast path) says exactly what reading it
entry by entry says, whatever is wrong with its entries."""

from __future__ import annotations

import json
import pickle
from typing import Any

import pytest
from fr_samples import fr_entry
from hypothesis import given, settings
from hypothesis import strategies as st

from triage.parsers.flight_recorder import columns, schema


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


def _both(raw: list[Any], monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any]:
    fast = schema._entries(raw)
    with monkeypatch.context() as m:
        m.setattr(schema, "entries_by_column", lambda raw, cache: None)
        slow = schema._entries(raw)
    return fast, slow


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
    raw = json.loads(json.dumps(raw)) if via_json else pickle.loads(pickle.dumps(raw))
    with pytest.MonkeyPatch.context() as monkeypatch:
        fast, slow = _both(raw, monkeypatch)
    entries, skipped, reasons = fast
    assert (entries, skipped, reasons) == slow
    assert len(entries) + skipped == len(raw)


@pytest.mark.parametrize("via_json", [False, True])
def test_every_odd_value_in_every_field_gives_the_same_entries_either_way(
    via_json: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    for field in _FIELDS:
        for value in [*_ODD, "<drop>"]:
            raw = [_entry(seq) for seq in range(1, 4)]
            if value == "<drop>":
                raw[1].pop(field)
            else:
                raw[1][field] = value
            raw = json.loads(json.dumps(raw)) if via_json else pickle.loads(pickle.dumps(raw))
            fast, slow = _both(raw, monkeypatch)
            assert fast == slow, (field, value)


def test_a_clean_dump_takes_the_fast_path_and_shares_its_shapes() -> None:
    raw = [_entry(seq) for seq in range(1, 2001)]
    entries = columns.entries_by_column(raw, {})
    assert entries is not None and len(entries) == 2000
    assert entries[0].input_sizes is entries[-1].input_sizes
    assert entries[0].frames is entries[-1].frames
    assert entries[5].time_completed_ns is None  # JSON's 0: not discovered
    assert entries[5].duration_ms == 1.0 and type(entries[5].duration_ms) is float
