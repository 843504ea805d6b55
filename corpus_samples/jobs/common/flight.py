"""Flight-recorder dumps for gloo jobs.

NCCL jobs get these for free with TORCH_NCCL_DUMP_ON_TIMEOUT=1; gloo never dumps on its own, so
this module does what the NCCL watchdog would: on a collective timeout, on an exception and on
SIGTERM it writes the recorder to ``$TORCH_FR_DUMP_TEMP_FILE<rank>`` like the C++ writer does.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Iterator

from torch._C import _distributed_c10d as c10d

_dumped = False


def dump(reason: str) -> str | None:
    """Write this rank's flight recorder once; later calls are no-ops (the first dump wins)."""
    global _dumped
    prefix = os.environ.get("TORCH_FR_DUMP_TEMP_FILE")
    if _dumped or not prefix:
        return None
    _dumped = True
    rank = os.environ.get("RANK", "0")
    path = f"{prefix}{rank}"
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    # Hold off the launcher's SIGTERM while writing, so a dump is never left half written.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        with open(path, "wb") as fh:
            # Mirrors TORCH_INCLUDE_STACK_TRACE of the NCCL dump; symbolizing stacks can hang
            # after some gloo failures, so jobs may turn it off.
            stacks = os.environ.get("TORCH_INCLUDE_STACK_TRACE", "1") != "0"
            fh.write(c10d._dump_fr_trace(includeStackTraces=stacks))
        if "json" in os.environ.get("FR_DUMP_FORMATS", "pickle"):
            with open(path + ".json", "wb") as fh:
                fh.write(c10d._dump_fr_trace_json())
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    print(f"[rank{rank}] flight recorder dumped ({reason}) to {path}", file=sys.stderr, flush=True)
    return path


def _on_sigterm(signum: int, frame: object) -> None:
    dump("SIGTERM from launcher")
    # Die of the same signal so the launcher still reports exitcode -15.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


def install_sigterm_dump() -> None:
    signal.signal(signal.SIGTERM, _on_sigterm)


@contextlib.contextmanager
def dump_on_failure() -> Iterator[None]:
    """Dump the recorder when the wrapped block fails, then let the error propagate."""
    install_sigterm_dump()
    try:
        yield
    except BaseException as exc:
        reason = "collective timeout" if "Timed out" in str(exc) else type(exc).__name__
        dump(reason)
        raise
