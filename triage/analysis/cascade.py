"""Initiating failure vs cascade: which errors are causes and which are consequences.

A dead or stuck rank makes every other rank fail too, in a handful of recognisable ways: the
peer's socket closes, the communicator is aborted, the watchdog times out on a collective the
culprit never entered, the launcher SIGTERMs the survivors, the store loses its peer. Those
message *families* are consequences wherever they appear. Whatever is left (an OOM, a CUDA
error, a user exception, a SIGKILL) is a candidate initiating failure.

The structure of the cascade also points back at the culprit: `remote error detected from
rank: N`, the desync report's `[Rank N] ... didn't join collective #K`, and `Connection closed
by peer` addresses all name the rank the others are reacting to.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import regex

from triage.analysis.ranks import EXCEPTION_LINE, final_exception_line
from triage.literals import Screened, lowered_ascii
from triage.model import Event, EventKind, Level

# family -> pattern; order matters only for the label we report.
CASCADE_FAMILIES: Mapping[str, regex.Pattern[str]] = {
    "peer_closed": regex.compile(
        r"Connection closed by (?:remote )?peer|Connection reset by peer|remote worker crashing"
        r"|remote process exit|ncclRemoteError|remote error detected|Broken pipe"
        r"|failed to recv, got 0 bytes|Software caused connection abort|socketProgress"
        r"|Connection closed by localRank|peer (?:closed|disconnected)|EOF from peer",
        regex.I,
    ),
    "comm_aborted": regex.compile(
        r"communicator was aborted|NCCL communicator encountered error"
        r"|Some NCCL operations have failed or timed out|taking the entire process down"
        r"|watchdog thread terminated with exception|ProcessGroup(?:NCCL)? (?:is )?aborted"
        r"|aborting (?:the )?(?:NCCL )?communicator|Process group is being destroyed",
        regex.I,
    ),
    "collective_timeout": regex.compile(
        r"Watchdog caught collective operation timeout|collective operation timeout"
        r"|Timed out waiting \d+ ?ms for (?:recv|send)|failure detected by watchdog"
        r"|detected by watchdog at work|Heartbeat monitor timed out|watchdog got stuck"
        r"|operation (?:has )?timed out|wait timeout|Timed out (?:waiting|after)"
        r"|Timeout at (?:NCCL )?(?:work|collective)|lagging/dead/mismatched ranks"
        r"|WorkNCCL\(.*\) ran for \d+ ?(?:ms|milliseconds)|Socket Timeout"
        r"|client socket has timed out",
        regex.I,
    ),
    "killed_by_launcher": regex.compile(
        r"SIGTERM|Signal 15\b|signal 15\b|SignalException|closing signal|exitcode\s*:\s*-15\b"
        r"|Terminated\b|received signal SIGINT",
        regex.I,
    ),
    "store_lost": regex.compile(
        r"DistStoreError|TCPStore|recvValue|recvBytes|RendezvousClosedError|rendezvous.*closed"
        r"|store (?:is )?(?:closed|unavailable)|client socket has failed"
        r"|failed to (?:connect|recv|send).*store|Connection refused",
        regex.I,
    ),
    "dump_signal": regex.compile(
        r"dump signal|flight recorder dump|dumping nccl trace|preparing to dump debug info"
        r"|Received a global timeout from another rank|Finished writing .*debug info",
        regex.I,
    ),
}

# Phrases that make an error initiating even when a cascade phrase also appears in it
# (e.g. an OOM traceback that mentions the watchdog while unwinding).
INITIATING_MARKERS = regex.compile(
    r"out of memory|OutOfMemoryError|CUDA error|illegal memory access|device-side assert"
    r"|ECC error|Xid\b|fallen off the bus|Segmentation fault|SIGSEGV|SIGKILL|oom[-_ ]kill"
    r"|Killed\b|No space left on device|size mismatch|Detected mismatch between collectives"
    r"|Received data size doesn't match|collective mismatch|\bNaN\b|unhandled cuda error"
    r"|Cuda failure|invalid (?:argument|usage)|EADDRINUSE|address already in use"
    r"|failed to listen|ImportError|ModuleNotFoundError|undefined symbol",
    regex.I,
)

# Lines that only narrate what a launcher did; context, never a cause on their own.
_CONTEXT = regex.compile(
    r"ChildFailedError|Root Cause \(first observed failure\)|To enable traceback see"
    r"|Worker group FAILED|will restart worker group|no error file defined",
    regex.I,
)

_REMOTE_RANK = regex.compile(r"remote error detected from rank:? ?(?P<rank>\d+)", regex.I)
_DESYNC_RANK = regex.compile(
    r"\[Rank (?P<rank>\d+)\] (?:joined but didn't finish|finished collective #\d+, but didn't join)"
)
_DESYNC_ALT = regex.compile(r"lagging/dead/mismatched ranks.*?:\s*(?P<ranks>[\d ,\[\]]+)", regex.S)
_PEER_ADDR = regex.compile(
    r"(?:closed by (?:remote )?peer|reset by peer|Read error|from) "
    r"\[?(?P<ip>[\w.:-]+?)\]?[:<](?P<port>\d+)>?"
)


@dataclass(frozen=True)
class Role:
    """What one event is in the story of the failure."""

    role: str  # initiating | cascade | context
    family: str | None  # the cascade family, or None
    strength: float  # how much this event, alone, says "this rank started it"


ERROR_KINDS = {
    EventKind.TRACEBACK,
    EventKind.CPP_EXCEPTION,
    EventKind.ERROR_LINE,
    EventKind.NCCL_WARN,
    EventKind.SIGNAL,
    EventKind.ELASTIC_ERROR,
}


def headline(ev: Event) -> str:
    """The text the classification looks at: a traceback's final exception, else the text."""
    if ev.kind is EventKind.TRACEBACK:
        return final_exception_line(ev.text) or ev.text
    if ev.kind is EventKind.CPP_EXCEPTION:
        # `terminate called ...` + `what(): ...`: the what() line carries the meaning
        for line in ev.text.splitlines():
            if "what()" in line:
                return line
    return ev.text


def exception_lines(text: str) -> list[str]:
    """Every `SomeError: message` line of a (chained) traceback."""
    return [s for line in text.splitlines() if EXCEPTION_LINE.match(s := line.strip())]


_FAMILIES = {name: Screened(pattern) for name, pattern in CASCADE_FAMILIES.items()}
_INITIATING = Screened(INITIATING_MARKERS)
_CONTEXT_SCREENED = Screened(_CONTEXT)


def waited_until_timeout(text: str) -> bool:
    """Does this message say its rank sat waiting until a timeout fired (a hang)?"""
    return bool(_FAMILIES["collective_timeout"].search(text, lowered_ascii(text)))


def _family(text: str, lowered: str | None) -> str | None:
    for name, screened in _FAMILIES.items():
        if screened.search(text, lowered):
            return name
    return None


def classify_event(ev: Event) -> Role:
    """Initiating, cascade or context for one event, with a strength for culprit voting."""
    if ev.kind in (EventKind.AGENT, EventKind.INPUT_WARNING, EventKind.ENV_REPORT):
        return Role("context", None, 0.0)
    if ev.kind in (EventKind.PROGRESS, EventKind.NCCL_COMM, EventKind.NCCL_INFO):
        return Role("context", None, 0.0)
    if ev.kind in (EventKind.FLIGHT_RECORDER, EventKind.PYSPY):
        return Role("context", None, 0.0)
    if ev.kind is EventKind.WARNING_LINE and ev.level not in (Level.ERROR, Level.FATAL):
        return Role("context", None, 0.0)
    if ev.kind is EventKind.RANK_EXIT:
        return Role("context", None, 0.0)  # exits are weighed separately (exits.py)
    head = headline(ev)
    lowered = lowered_ascii(head)
    if _CONTEXT_SCREENED.search(head, lowered):
        return Role("context", None, 0.0)
    marker = _INITIATING.search(head, lowered)
    family = _family(head, lowered)
    if family and not marker:
        return Role("cascade", family, 0.0)
    if family is None and ev.kind is EventKind.TRACEBACK and not marker:
        # a chained traceback may end generic while an earlier exception of the chain is a
        # cascade error; only the exception lines count, never the frames (`TCPStore(`)
        chain = "\n".join(exception_lines(ev.text))
        chain_lowered = lowered_ascii(chain)
        family = _family(chain, chain_lowered)
        if family and not _INITIATING.search(chain, chain_lowered):
            return Role("cascade", family, 0.0)
    strength = 1.0
    if ev.kind is EventKind.NCCL_WARN:
        strength = 0.6  # NCCL WARNs often precede the real error on the same rank
    elif ev.kind is EventKind.ERROR_LINE:
        strength = 0.7
    if marker:
        strength += 0.5
    return Role("initiating", None, strength)


def pointed_ranks(ev: Event) -> list[int]:
    """Ranks that a cascade message names as the one it is reacting to."""
    out: list[int] = []
    for pat in (_REMOTE_RANK, _DESYNC_RANK):
        out.extend(int(m["rank"]) for m in pat.finditer(ev.text))
    return out


def peer_address(ev: Event) -> tuple[str, int] | None:
    """The `ip:port` a `Connection closed by peer [ip]:port` line names, when it does."""
    m = _PEER_ADDR.search(ev.text)
    if not m:
        return None
    return m["ip"], int(m["port"])
