"""How each rank ended: exit codes, signals and what they usually mean, plus elastic restarts."""

from __future__ import annotations

import signal as _signal
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace

import regex

from triage.analysis.ranks import RankIndex, format_ranks, ref
from triage.literals import Screened, lowered_ascii
from triage.model import Event, EventKind, EvidenceRef, Finding, ParsedSource, RankExit

# What a person should read into a worker's exit status (negative = killed by that signal).
_MEANING: dict[int, str] = {
    -9: "SIGKILL: killed from outside, very often the host OOM killer (or scancel/kill -9)",
    -11: "SIGSEGV: segmentation fault in native code (driver, NCCL, a C++ extension)",
    -6: "SIGABRT: aborted, e.g. the NCCL watchdog tearing the process down or a C++ terminate",
    -15: "SIGTERM: stopped by the launcher after another rank failed (a survivor)",
    -7: "SIGBUS: bus error, often /dev/shm too small for shared-memory transports",
    -2: "SIGINT: interrupted (Ctrl-C or the launcher)",
    -1: "SIGHUP: the controlling terminal or session went away",
    1: "exit 1: the worker raised an exception",
    137: "exit 137 (128+9): killed by SIGKILL, usually the OOM killer",
    139: "exit 139 (128+11): segmentation fault",
    134: "exit 134 (128+6): aborted",
    143: "exit 143 (128+15): terminated by SIGTERM",
}

# Exits that are themselves evidence of the initiating failure on that rank.
SELF_INFLICTED = {-9, -11, -7, 137, 139}
# Exits that mark a survivor the launcher stopped.
LAUNCHER_KILLED = {-15, -2, 143}

_RESTART = regex.compile(
    r"(?:Worker group FAILED\. (?P<left>\d+)/(?P<max>\d+) attempts left"
    r"|will restart worker group|Restarting worker group|restart_count=(?P<count>\d+))",
    regex.I,
)
_RESTART_SCREENED = Screened(_RESTART)  # runs on every error line of every rank


def meaning(exitcode: int | None) -> str:
    if exitcode is None:
        return "exit status unknown"
    if exitcode in _MEANING:
        return _MEANING[exitcode]
    if exitcode < 0:
        try:
            return f"{_signal.Signals(-exitcode).name}: killed by signal {-exitcode}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exit {exitcode}" + (": the worker failed" if exitcode else ": clean exit")


def signal_name(exitcode: int | None, given: str | None) -> str | None:
    if given:
        return given
    if exitcode is not None and exitcode < 0:
        try:
            return _signal.Signals(-exitcode).name
        except ValueError:
            return None
    return None


@dataclass(frozen=True)
class ExitRecord:
    exit: RankExit
    event: Event
    attempt: int | None


def collect_exits(parsed: Sequence[ParsedSource], index: RankIndex) -> list[ExitRecord]:
    """One record per (attempt, rank): torchrun summary, error.json and launcher lines merged."""
    merged: dict[tuple[int | None, int | None, int | None], ExitRecord] = {}
    for ps in parsed:
        for ev in ps.events:
            if ev.kind not in (EventKind.RANK_EXIT, EventKind.ELASTIC_ERROR):
                continue
            if not isinstance(ev.payload, RankExit):
                continue
            ex = ev.payload
            rank = ex.rank
            if rank is None:
                rank = index.rank_for(ex.pid, ex.host or ev.host)
            if rank is None:
                rank = index.rank_for_local(ex.local_rank, ex.host or ev.host)
            if rank is None:
                rank = ev.rank if ev.rank is not None else ps.source.rank
            if rank is not None and rank != ex.rank:
                ex = replace(ex, rank=rank)
            # a rank without a rank (old deepspeed lines) is keyed by pid so it is not lost
            key = (ps.source.attempt, rank, None if rank is not None else ex.pid)
            old = merged.get(key)
            merged[key] = ExitRecord(
                exit=_merge(old.exit, ex) if old else ex,
                event=old.event if old and _richer(old.event, ev) else ev,
                attempt=ps.source.attempt,
            )
    # a console summary carries no attempt; it describes the last attempt of its rank
    latest: dict[int | None, int] = {}
    for attempt, rank, _ in merged:
        if attempt is not None and rank is not None:
            latest[rank] = max(latest.get(rank, attempt), attempt)
    for key in [k for k in merged if k[0] is None and k[1] in latest]:
        rec = merged.pop(key)
        target = (latest[key[1]], key[1], None)
        old = merged[target]
        merged[target] = ExitRecord(
            exit=_merge(rec.exit, old.exit),
            event=rec.event if rec.exit.exitcode is not None else old.event,
            attempt=old.attempt,
        )
    return sorted(
        merged.values(),
        key=lambda r: (r.attempt or 0, r.exit.rank if r.exit.rank is not None else 1 << 30),
    )


def _merge(a: RankExit, b: RankExit) -> RankExit:
    """Fill the gaps of one exit record from another describing the same rank."""
    return RankExit(
        rank=a.rank if a.rank is not None else b.rank,
        local_rank=a.local_rank if a.local_rank is not None else b.local_rank,
        host=a.host or b.host,
        pid=a.pid if a.pid is not None else b.pid,
        exitcode=a.exitcode if a.exitcode is not None else b.exitcode,
        signal=a.signal or b.signal,
        time=min((t for t in (a.time, b.time) if t is not None), default=None),
        error_file=a.error_file or b.error_file,
        message=_longer(a.message, b.message),
        is_root_cause_block=a.is_root_cause_block or b.is_root_cause_block,
    )


def _longer(a: str | None, b: str | None) -> str | None:
    if not a:
        return b
    if not b:
        return a
    return a if len(a) >= len(b) else b


def _richer(a: Event, b: Event) -> bool:
    return a.kind is EventKind.ELASTIC_ERROR and b.kind is not EventKind.ELASTIC_ERROR


def exit_findings(records: Sequence[ExitRecord]) -> list[Finding]:
    """One finding per distinct exit status, listing the ranks that ended that way."""
    groups: dict[int | None, list[ExitRecord]] = defaultdict(list)
    for r in records:
        if r.exit.exitcode in (0, None):
            continue  # an error.json alone says how it failed, not how it ended
        groups[r.exit.exitcode].append(r)
    out: list[Finding] = []
    for code, recs in sorted(groups.items(), key=lambda kv: _severity(kv[0])):
        ranks = sorted({r.exit.rank for r in recs if r.exit.rank is not None})
        sig = signal_name(code, recs[0].exit.signal)
        what = meaning(code)
        where = f"rank {format_ranks(ranks)}" if len(ranks) == 1 else f"ranks {format_ranks(ranks)}"
        if not ranks:
            where = f"{len(recs)} worker(s) of unknown rank"
        out.append(
            Finding(
                kind="rank_exit",
                summary=f"{where} exited with {code} ({what})",
                ranks=tuple(ranks),
                evidence=tuple(ref(r.event, r.exit.rank) for r in recs[:5]),
                facts={"exitcode": code, "signal": sig, "meaning": what, "count": len(recs)},
            )
        )
    return out


def _severity(code: int | None) -> tuple[int, int]:
    if code in SELF_INFLICTED:
        return (0, code or 0)
    if code in LAUNCHER_KILLED:
        return (3, code or 0)
    if code is None:
        return (4, 0)
    return (1 if code < 0 else 2, code)


def restart_findings(parsed: Sequence[ParsedSource]) -> list[Finding]:
    """Elastic restarts: attempt folders and the agent's 'will restart worker group' lines."""
    attempts = sorted({ps.source.attempt for ps in parsed if ps.source.attempt is not None})
    lines: list[EvidenceRef] = []
    max_restarts: int | None = None
    for ps in parsed:
        for ev in ps.events:
            if ev.kind not in (EventKind.AGENT, EventKind.ERROR_LINE, EventKind.WARNING_LINE):
                continue
            m = _RESTART_SCREENED.search(ev.text, lowered_ascii(ev.text))
            if m:
                lines.append(ref(ev))
                if m["max"]:
                    max_restarts = int(m["max"])
    if len(attempts) <= 1 and not lines:
        return []
    n_attempts = max(len(attempts), 1 + len(lines))
    summary = f"the job ran {n_attempts} attempts (elastic restarts)"
    if max_restarts is not None:
        summary += f"; max restarts configured: {max_restarts}"
    return [
        Finding(
            kind="restart",
            summary=summary,
            evidence=tuple(lines[:5]),
            facts={"attempts": n_attempts, "attempt_ids": attempts, "max_restarts": max_restarts},
        )
    ]
