"""Initiating failure vs cascade: which errors are causes and which are consequences.

A dead or stuck rank makes every other rank fail too, in a handful of recognisable ways: the
peer's socket closes, the communicator is aborted, the watchdog times out on a collective the
culprit never entered, the launcher SIGTERMs the survivors, the store loses its peer. Those
message *families* are consequences wherever they appear. Whatever is left (an OOM, a CUDA
error, a user exception, a SIGKILL) is a candidate initiating failure. The families, the
initiating phrases and the launcher narration are knowledge (`rules/cascade.yaml`), read here.

The structure of the cascade also points back at the culprit: `remote error detected from
rank: N`, the desync report's `[Rank N] ... didn't join collective #K`, and `Connection closed
by peer` addresses all name the rank the others are reacting to.

Each function reads the cascade knowledge of `kb`, the run's Knowledge (None: the shipped
one), screened once per load (`screens`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import regex

from triage import knowledge
from triage.analysis.ranks import outermost_frame, traceback_of
from triage.literals import Screened, lowered_ascii
from triage.model import Event, EventKind, Level
from triage.parsers.tracebacks import EXCEPTION_LINE


@dataclass(frozen=True)
class Role:
    """What one event is in the story of the failure."""

    role: str  # initiating | cascade | context
    family: str | None  # the cascade family, or None
    strength: float  # how much this event, alone, says "this rank started it"


# the cascade families after which ProcessGroupNCCL's watchdog ends its process with SIGABRT
# (`To avoid data inconsistency, we are taking the entire process down`)
WATCHDOG_FAMILIES = frozenset({"collective_timeout", "comm_aborted"})

ERROR_KINDS = {
    EventKind.TRACEBACK,
    EventKind.CPP_EXCEPTION,
    EventKind.ERROR_LINE,
    EventKind.NCCL_WARN,
    EventKind.SIGNAL,
    EventKind.ELASTIC_ERROR,
}


def headline(ev: Event, kb: knowledge.Knowledge | None = None) -> str:
    """The text the classification looks at: a traceback's final exception, else the text.

    A chained traceback whose first exception is not a consequence of another rank's failure
    is read by that first exception: the rank raised it, and the rest of the chain is what
    happened while it handled it (`finally: dist.barrier()` timing out, an emergency save).
    """
    if ev.kind is EventKind.TRACEBACK:
        heads = traceback_of(ev).exception_lines
        return _own_first_exception(heads, kb) or (heads[-1] if heads else ev.text)
    if ev.kind is EventKind.CPP_EXCEPTION:
        # `terminate called ...` + `what(): ...`: the what() line carries the meaning
        for line in ev.text.splitlines():
            if "what()" in line:
                return line
    return ev.text


def _own_first_exception(heads: tuple[str, ...], kb: knowledge.Knowledge | None) -> str | None:
    """The first exception of a chained traceback (of its links' exception lines, `heads`)
    when it is not a cascade message."""
    if len(heads) > 1 and not reads_as_cascade(heads[0], kb):
        return heads[0]
    return None


def handled_after(ev: Event, line_offset: int, kb: knowledge.Knowledge | None = None) -> bool:
    """Is this line (0-based in the event's text) of a chained traceback in a later link than
    the rank's own first exception? Such a line is what happened while the rank handled its
    failure (the barrier of a `finally:` that then timed out): a consequence, not a cause."""
    if ev.kind is not EventKind.TRACEBACK:
        return False
    traceback = traceback_of(ev)
    if _own_first_exception(traceback.exception_lines, kb) is None:
        return False
    starts = traceback.later_links_start
    return bool(starts) and line_offset >= starts[0]


def exception_lines(text: str) -> list[str]:
    """Every `SomeError: message` line of a (chained) traceback."""
    return [s for line in text.splitlines() if EXCEPTION_LINE.match(s := line.strip())]


@dataclass(frozen=True)
class CascadeScreens:
    """The cascade knowledge (`rules/cascade.yaml`), screened for speed."""

    families: dict[str, Screened]  # in the file's order: a message reads as the first
    initiating: Screened
    context: Screened
    points_at_rank: tuple[regex.Pattern[str], ...]
    peer_address: regex.Pattern[str]
    peer_mismatch: Screened | None


def screens(kb: knowledge.Knowledge | None = None) -> CascadeScreens:
    """The cascade knowledge of `kb` (None: the shipped one), screened once per load:
    correlate runs these on every event of every rank."""
    return _screens(kb if kb is not None else knowledge.shipped())


@lru_cache(maxsize=8)  # a Knowledge hashes by its identity: one entry per load
def _screens(kb: knowledge.Knowledge) -> CascadeScreens:
    facts = kb.cascade
    assert facts.initiating is not None and facts.context is not None  # the schema says so
    assert facts.peer_address is not None
    return CascadeScreens(
        families={f.name: Screened(f.pattern) for f in facts.families},
        initiating=Screened(facts.initiating),
        context=Screened(facts.context),
        points_at_rank=facts.points_at_rank,
        peer_address=facts.peer_address,
        peer_mismatch=Screened(facts.peer_mismatch) if facts.peer_mismatch else None,
    )


def waited_until_timeout(text: str, kb: knowledge.Knowledge | None = None) -> bool:
    """Does this message say its rank sat waiting until a timeout fired (a hang)?"""
    timeout = screens(kb).families["collective_timeout"]
    return bool(timeout.search(text, lowered_ascii(text)))


def _family(text: str, lowered: str | None, facts: CascadeScreens) -> str | None:
    for name, screened in facts.families.items():
        if screened.search(text, lowered):
            return name
    return None


def family_of(text: str, kb: knowledge.Knowledge | None = None) -> str | None:
    """The cascade family a message reads as (the first that matches), or None."""
    return _family(text, lowered_ascii(text), screens(kb))


def family_wording(
    family: str | None, ev: Event, kb: knowledge.Knowledge | None = None
) -> str | None:
    """What the reports call the cascade family of one event (`readings` in
    rules/cascade.yaml: a store's wait timeout is not a collective's), or None."""
    if family is None:
        return None
    facts = (kb if kb is not None else knowledge.shipped()).cascade
    for f in facts.families:
        if f.name == family:
            return f.wording(headline(ev, kb))
    return family.replace("_", " ")


def reads_as_cascade(text: str, kb: knowledge.Knowledge | None = None) -> bool:
    """Does this text read like a consequence of another rank's failure: a message of a
    cascade family without an initiating phrase (what `classify_event` says of a headline)?"""
    lowered = lowered_ascii(text)
    facts = screens(kb)
    if facts.initiating.search(text, lowered):
        return False
    return _family(text, lowered, facts) is not None


def classify_event(ev: Event, kb: knowledge.Knowledge | None = None) -> Role:
    """Initiating, cascade or context for one event, with a strength for culprit voting."""
    kb = kb if kb is not None else knowledge.shipped()
    # how much this event alone says "this rank started it" (`rules/culprit.yaml` strength)
    weights = kb.culprit.strength
    if ev.kind is EventKind.AGENT and ev.notice is not None and ev.notice.end == "failed":
        # the job's own word that it failed (an MLPerf run_stop `aborted`): where it shows
        return Role("initiating", None, weights.default)
    if ev.kind in (EventKind.AGENT, EventKind.INPUT_WARNING, EventKind.ENV_REPORT):
        return Role("context", None, 0.0)
    if ev.kind is EventKind.SIGNAL and ev.notice is not None and ev.notice.role == "launcher":
        # the shell saw the launcher itself die of a signal: like the launcher's own report of
        # its end, it says nothing of which worker started the failure (after the workers'
        # errors it ends the teardown; the outcome still reads it as the job's end)
        return Role("context", None, 0.0)
    if ev.kind in (EventKind.PROGRESS, EventKind.NCCL_COMM, EventKind.NCCL_INFO):
        return Role("context", None, 0.0)
    if ev.kind in (EventKind.FLIGHT_RECORDER, EventKind.PYSPY):
        return Role("context", None, 0.0)
    if ev.kind is EventKind.WARNING_LINE and ev.level not in (Level.ERROR, Level.FATAL):
        return Role("context", None, 0.0)
    if ev.kind is EventKind.RANK_EXIT:
        return Role("context", None, 0.0)  # exits are weighed separately (exits.py)
    if kb.ends.ignored_traceback(outermost_frame(ev)):
        return Role("context", None, 0.0)  # printed by Python, which went on (`__del__`)
    head = headline(ev, kb)
    lowered = lowered_ascii(head)
    facts = screens(kb)
    if facts.context.search(head, lowered):
        return Role("context", None, 0.0)
    marker = facts.initiating.search(head, lowered)
    family = _family(head, lowered, facts)
    if family and not marker:
        return Role("cascade", family, 0.0)
    if (
        family is None
        and ev.kind is EventKind.TRACEBACK
        and not marker
        and _own_first_exception(traceback_of(ev).exception_lines, kb) is None
    ):
        # a chained traceback may end generic while an earlier exception of the chain is a
        # cascade error; only the exception lines count, never the frames (`TCPStore(`)
        chain = "\n".join(exception_lines(ev.text))
        chain_lowered = lowered_ascii(chain)
        family = _family(chain, chain_lowered, facts)
        if family and not facts.initiating.search(chain, chain_lowered):
            return Role("cascade", family, 0.0)
    strength = weights.default
    if ev.kind is EventKind.NCCL_WARN:
        strength = weights.nccl_warn
    elif ev.kind is EventKind.ERROR_LINE:
        strength = weights.error_line
    if marker:
        strength += weights.marker
    return Role("initiating", None, strength)


def reports_peer_mismatch(ev: Event, kb: knowledge.Knowledge | None = None) -> bool:
    """Does this error say a peer's collective did not fit this rank's own (sizes, dtypes)?
    The rank detected the mismatch; `rules/cascade.yaml` `peer_mismatch`."""
    pattern = screens(kb).peer_mismatch
    if pattern is None:
        return False
    head = headline(ev, kb)
    return bool(pattern.search(head, lowered_ascii(head)))


def pointed_ranks(ev: Event, kb: knowledge.Knowledge | None = None) -> list[int]:
    """Ranks that a cascade message names as the one it is reacting to."""
    out: list[int] = []
    for pat in screens(kb).points_at_rank:
        out.extend(int(m["rank"]) for m in pat.finditer(ev.text))
    return out


def peer_address(ev: Event, kb: knowledge.Knowledge | None = None) -> tuple[str, int] | None:
    """The `ip:port` a `Connection closed by peer [ip]:port` line names, when it does."""
    m = screens(kb).peer_address.search(ev.text)
    if not m:
        return None
    return m["ip"], int(m["port"])
