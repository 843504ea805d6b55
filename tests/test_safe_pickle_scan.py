"""The fast opcode scan of `safe_pickle` reads every pickle exactly as pickletools does."""

from __future__ import annotations

import pickle
import pickletools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from triage.parsers.flight_recorder import safe_pickle


def _stop_end(data: bytes) -> int:
    """Where pickletools says the pickle ends (one past STOP)."""
    last = 0
    for op, _arg, pos in pickletools.genops(data):
        last = pos + 1
        if op.name == "STOP":
            break
    return last


_value = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=300)
    | st.binary(max_size=300),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=40,
)


@settings(max_examples=200, deadline=None)
@given(value=_value, protocol=st.integers(min_value=3, max_value=pickle.HIGHEST_PROTOCOL))
def test_the_scan_ends_where_pickletools_ends(value: Any, protocol: int) -> None:
    data = pickle.dumps(value, protocol=protocol) + b"trailing junk"
    assert safe_pickle.scan(data) == _stop_end(data)


@pytest.mark.parametrize("length", [0, 1, 9, 82, 126, 127, 128, 255, 300])
def test_a_call_hidden_behind_a_string_of_any_length_is_still_seen(length: int) -> None:
    # The payload is made of opcode bytes: a scan that misjudged the length would read
    # them as opcodes (and might miss the REDUCE that follows).
    payload = ("R" * length).encode()
    for head in (b"X" + length.to_bytes(4, "little"), b"C" + bytes([min(length, 255)])):
        if head[:1] == b"C" and length > 255:
            continue
        data = b"\x80\x03" + head + payload[: len(payload)] + b"]R."
        with pytest.raises(safe_pickle.PickleRefused, match="REDUCE"):
            safe_pickle.scan(data)


def test_memo_slots_are_bounded_by_the_pickle_length_exactly() -> None:
    body = b"\x80\x02]r" + (64).to_bytes(4, "little") + b"." + b"N" * 55
    assert len(body) == 64
    assert safe_pickle.scan(body) == 9  # slot 64 in a 64-byte pickle: allowed
    over = body.replace((64).to_bytes(4, "little"), (65).to_bytes(4, "little"))
    with pytest.raises(safe_pickle.PickleRefused, match="memo slot 65"):
        safe_pickle.scan(over)


def test_a_big_dump_full_of_memo_puts_scans_to_its_end_and_loads_exactly() -> None:
    t0 = 1_700_000_000_000_000_000
    rows = [{"seq": i, "time": t0 + i, "name": f"op{i}"} for i in range(3000)]
    data = pickle.dumps({"entries": rows}, protocol=2)
    assert b"r" in data and safe_pickle.scan(data) == len(data)
    assert safe_pickle.loads(data) == {"entries": rows}


def test_a_piece_may_read_only_the_memo_slots_below_its_bound_exactly() -> None:
    # BINGET (1-byte slot) and LONG_BINGET (4-byte slot) of slots 0..299 in turn
    gets = b"".join(
        (b"h" + bytes((s,))) if s < 256 else (b"j" + s.to_bytes(4, "little")) for s in range(300)
    )
    data = b"\x80\x04(" + gets + b"l."
    assert safe_pickle.scan(data, get_bound=300) == len(data)
    for bound in (0, 1, 100, 128, 255, 256, 299):
        with pytest.raises(safe_pickle.MemoMissing, match=f"slot {bound} ") as missing:
            safe_pickle.scan(data, get_bound=bound)
        assert missing.value.slot == bound
    assert safe_pickle.scan(data) == len(data)  # a whole pickle: any slot may be read


def test_a_frame_is_read_only_as_far_as_the_input_goes() -> None:
    body = b"N."
    fits = b"\x80\x04\x95" + len(body).to_bytes(8, "little") + body
    assert safe_pickle.scan(fits) == len(fits)
    longer = b"\x80\x04\x95" + (len(body) + 1).to_bytes(8, "little") + body
    with pytest.raises(safe_pickle.PickleCorrupt, match="FRAME at byte 2 claims 3 bytes"):
        safe_pickle.scan(longer)
    cut: list[int] = []  # a pickle joined from parts: the frame is trimmed, not refused
    assert safe_pickle.scan(longer, cut_frames=cut) == len(longer) and cut == [2]
