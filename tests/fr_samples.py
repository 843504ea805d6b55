"""Flight-recorder entries as torch writes them (schema 2.x), for tests that build dumps."""

from __future__ import annotations

from typing import Any


def fr_entry(seq: int, **over: Any) -> dict[str, Any]:
    """Entry `seq` of a healthy all_reduce loop on the default group; `over` replaces fields.

    Containers are fresh for each entry, as torch's pickler writes them: nothing is shared by
    memo reference between entries (which a flight-recorder tail read relies on).
    """
    entry = {
        "record_id": seq - 1,
        "pg_id": 0,
        "process_group": tuple(["0", "default_pg"]),
        "collective_seq_id": seq,
        "p2p_seq_id": 0,
        "op_id": seq,
        "profiling_name": "nccl:all_reduce",
        "time_created_ns": 1767607928000000000 + seq,
        "input_sizes": [[1024, 4096]],
        "input_dtypes": ["BFloat16"],
        "output_sizes": [[1024, 4096]],
        "output_dtypes": ["BFloat16"],
        "state": "completed",
        "time_discovered_started_ns": 1767607928000000100 + seq,
        "time_discovered_completed_ns": 1767607928000000900 + seq,
        "retired": True,
        "timeout_ms": 600000,
        "is_p2p": False,
    }
    entry.update(over)
    return entry
