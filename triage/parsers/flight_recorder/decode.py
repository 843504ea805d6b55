"""Decoding a dump's bytes: pickle (through the safety scan) or JSON, whole or its tail."""

from __future__ import annotations

import gc
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from triage.model import FlightRecorderDump
from triage.parsers.flight_recorder import safe_pickle
from triage.parsers.flight_recorder.schema import build
from triage.parsers.flight_recorder.tail import read_tail

__all__ = ["MOST_PER_BYTE", "contain_decoding", "format_of", "load_dump"]

# Most a byte of a dump can cost decoded: its own 8 and one container (80) or string (60).
MOST_PER_BYTE = 88
# Address space a contained load may take beyond that (allocator slack, the memo table)
_LOAD_HEADROOM = 64 << 20

# True in a process whose crash or hang costs only the dumps it decodes (`contain_decoding`)
_CONTAINED = False


def contain_decoding() -> None:
    """In a forked process whose death or deadline costs only the dumps it decodes (the
    decoding child of `triage.isolated`, a pool worker): pickles read whole are loaded
    before they are scanned (`safe_pickle.loads_contained`), and scanned only when the load
    fails or what it built is not what a dump holds."""
    global _CONTAINED
    _CONTAINED = True


def format_of(data: bytes) -> str:
    """Sniff by content (formats.md §4.5): pickles start with PROTO 0x80, JSON with { or [."""
    first = data[:1]
    if first.isspace():  # only then a copy of the bytes without their leading whitespace
        first = data.lstrip()[:1]
    return "json" if first in (b"{", b"[") else "pickle"


def load_dump(
    data: bytes,
    *,
    rank: int | None = None,
    warnings: list[str] | None = None,
    tail: int | None = None,
    whole: bool = True,
) -> tuple[FlightRecorderDump | None, str | None]:
    """Decode pickle or JSON bytes into a FlightRecorderDump.

    With `tail`, a pickle holding more entries than that gives only its last `tail` entries
    (`entries_total` says how many it holds). Returns (dump, None) or (None, why-not).
    Non-fatal problems are appended to `warnings`. `whole=False`: never decode the whole
    dump (it would not fit in memory); a dump the tail read cannot cut is not read.
    """
    if warnings is None:
        warnings = []
    if not data or data.isspace():  # `not data.strip()` without copying the dump
        return None, "flight-recorder dump is empty (0 bytes of data)"
    with _gc_paused():
        if tail is not None and format_of(data) == "pickle":
            try:
                cut = read_tail(data, max(tail, 1))
            except Exception:  # noqa: BLE001 - a layout no guard foresaw: read whole below
                cut = None
            if cut is not None:
                raw, total = cut
                try:
                    # a dump without record ids numbers entries by place: the kept ones are
                    # the last of `total`
                    dump = build(raw, rank, warnings, first_index=total - len(raw["entries"]))
                except Exception:  # noqa: BLE001 - read whole below, which says what is wrong
                    dump = None
                if dump is not None:
                    return replace(dump, entries_total=total), None
        if not whole:
            return None, "its last entries could not be cut out of it"
        return _decode(data, rank, warnings, tail)


@contextmanager
def _gc_paused() -> Iterator[None]:
    # A dump is ~20k freshly allocated containers, none of them in a cycle; letting the cyclic
    # GC run meanwhile re-scans every dump already loaded (30-40% of the time at 1,024 ranks).
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _decode(
    data: bytes, rank: int | None, warnings: list[str], tail: int | None = None
) -> tuple[FlightRecorderDump | None, str | None]:
    """Decode the whole dump; with `tail`, build only its last `tail` entries (a dump the
    tail read cannot cut, JSON or one at protocol 4-5 whose last entries name an object
    first written among them, costs the big job only the decoding: the same entries and the
    same memory as a cut)."""
    contained = _CONTAINED and format_of(data) == "pickle"
    try:
        if format_of(data) == "json":
            raw: Any = json.loads(data)
        elif contained:
            raw = safe_pickle.loads_contained(data, len(data) * MOST_PER_BYTE + _LOAD_HEADROOM)
        else:
            # No nesting walk: build reads known fields at known depths and never recurses.
            raw = safe_pickle.loads(data, check_depth=False)
    except safe_pickle.PickleRefused as exc:
        return None, f"flight-recorder pickle refused: {exc}"
    except safe_pickle.PickleError as exc:
        return None, f"flight-recorder dump is truncated or corrupt ({len(data)} bytes): {exc}"
    except (ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError
        return None, f"flight-recorder JSON is truncated or corrupt ({len(data)} bytes): {exc}"
    except Exception as exc:  # the promise is "never raises"
        return None, f"flight-recorder dump unreadable: {type(exc).__name__}: {exc}"
    total = None
    if tail is not None:
        entries = raw.get("entries") if isinstance(raw, dict) else raw
        if type(entries) is list and len(entries) > max(tail, 1):
            total = len(entries)
            kept = entries[-max(tail, 1) :]
            raw = {**raw, "entries": kept} if isinstance(raw, dict) else kept
    said = len(warnings)
    try:
        first = 0 if total is None else total - max(tail or 1, 1)
        dump = build(raw, rank, warnings, first_index=first)
    except Exception as exc:  # a shape no era had; say so rather than crash the run
        dump, why = None, f"flight-recorder dump has an unknown layout: {type(exc).__name__}: {exc}"
    if contained and (dump is None or len(warnings) > said):
        # Loaded unscanned, and something in it is not what a dump holds: what the scan
        # refuses (a set, an integer over 64 bytes, a memo slot past the end) is refused
        # whole, as it is where the scan runs first.
        refused = _scan_refusal(data)
        if refused is not None:
            del warnings[said:]
            return None, refused
    if dump is None:
        return None, why
    return (dump if total is None else replace(dump, entries_total=total)), None


def _scan_refusal(data: bytes) -> str | None:
    """What `_decode` says of a pickle the scan fails, or None where it passes."""
    try:
        safe_pickle.scan(data)
    except safe_pickle.PickleRefused as exc:
        return f"flight-recorder pickle refused: {exc}"
    except safe_pickle.PickleError as exc:
        return f"flight-recorder dump is truncated or corrupt ({len(data)} bytes): {exc}"
    return None
