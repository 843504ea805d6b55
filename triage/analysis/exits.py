"""How each rank ended: exit codes, signals and what they usually mean, plus elastic restarts.

What each status means, and which ones only a rank's own failure causes, is the run's
`kb.exits` (`rules/exits.yaml`); each record carries it, so later steps read fields."""

from __future__ import annotations

import signal
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import lru_cache

from triage import knowledge
from triage.analysis.ranks import RankIndex, format_ranks, ref
from triage.knowledge.exits import ExitCodes, signal_name
from triage.literals import Screened, lowered_ascii
from triage.model import (
    Event,
    EventKind,
    EvidenceRef,
    Finding,
    FindingKind,
    ParsedSource,
    RankExit,
    RankExitFacts,
    RestartFacts,
)


@dataclass(frozen=True)
class ExitRecord:
    exit: RankExit
    event: Event
    attempt: int | None
    meaning: str = ""  # what a person should read into its status
    self_inflicted: bool = False  # only the rank's own failure ends it this way
    launcher_killed: bool = False  # a survivor the launcher (or a user) stopped
    signal: str | None = None  # the signal it names, if any
    # the launcher's line that says the program never started (its status is that errno)
    not_started: str | None = None


def collect_exits(
    parsed: Sequence[ParsedSource], index: RankIndex, kb: knowledge.Knowledge
) -> list[ExitRecord]:
    """One record per (attempt, rank): torchrun summary, error.json and launcher lines merged,
    each with what its status means (`kb.exits`)."""
    merged: dict[tuple[int | None, int | None, object], ExitRecord] = {}
    one_node = _one_node(parsed, index)
    for ps in parsed:
        # the launcher's word that a task's program could not start, by the status it ends with
        failed_starts: dict[int, str] = {}
        for ev in ps.events:
            start = _failed_start(ev, kb.exits)
            if start is not None:
                failed_starts.setdefault(*start)
                continue
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
            if rank is None and one_node and _launcher(ev) == "mp.spawn":
                # mp.spawn's index is the process's local rank; on one node, its rank
                rank = ex.local_rank
            if rank is None:
                rank = ev.rank if ev.rank is not None else ps.source.rank
            if rank is not None and rank != ex.rank:
                ex = replace(ex, rank=rank)
            # an exit without a rank (old deepspeed lines, srun's tasks) is keyed by what names
            # its process, so that two of them are not read as one
            task = ev.notice.task if ev.notice is not None else None
            unranked = None if rank is not None else (ex.pid, ex.host or ev.host, task)
            key = (ps.source.attempt, rank, unranked)
            old = merged.get(key)
            not_started = failed_starts.get(ex.exitcode) if _launcher(ev) == "srun" else None
            merged[key] = ExitRecord(
                exit=_merge(old.exit, ex) if old else ex,
                event=old.event if old and _richer(old.event, ev) else ev,
                attempt=ps.source.attempt,
                not_started=not_started or (old.not_started if old else None),
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
            not_started=rec.not_started or old.not_started,
        )
    return sorted(
        (_read(r, kb.exits) for r in merged.values()),
        key=lambda r: (r.attempt or 0, r.exit.rank if r.exit.rank is not None else 1 << 30),
    )


def _read(rec: ExitRecord, codes: ExitCodes) -> ExitRecord:
    code = rec.exit.exitcode
    if code is None and rec.exit.signal in signal.Signals.__members__:
        # a launcher that names the signal alone (mp.spawn): the code torchrun would report
        code = -int(signal.Signals[rec.exit.signal])
        rec = replace(rec, exit=replace(rec.exit, exitcode=code))
    meaning = codes.meaning(code)
    if rec.not_started:
        meaning = f"exit {code}: the program never started: {rec.not_started}"
    return replace(
        rec,
        meaning=meaning,
        self_inflicted=code in codes.self_inflicted,
        launcher_killed=code in codes.launcher_killed,
        signal=signal_name(code, rec.exit.signal),
    )


def _failed_start(ev: Event, codes: ExitCodes) -> tuple[int, str] | None:
    """(the status the task ends with, the words that say why) where this line says the
    launcher could not start a task's program (`kb.exits.not_started`: slurmstepd's
    `execve(): torchrun: No such file or directory` ends the task with ENOENT, 2)."""
    if codes.not_started is None or ev.kind is not EventKind.ERROR_LINE:
        return None
    m = codes.not_started.search(ev.text)
    if m is None or m["reason"] not in codes.not_started_status:
        return None
    return codes.not_started_status[m["reason"]], m.group(0).strip()


def _launcher(ev: Event) -> str | None:
    return ev.notice.launcher if ev.notice is not None else None


def _one_node(parsed: Sequence[ParsedSource], index: RankIndex) -> bool:
    """Nothing in the job names a second host (no launcher rank map, at most one host)."""
    if index.by_host_local:
        return False
    hosts = {ev.host for ps in parsed for ev in ps.events if ev.host}
    hosts |= {ps.source.host for ps in parsed if ps.source.host}
    return len(hosts) <= 1


def _merge(a: RankExit, b: RankExit) -> RankExit:
    """Fill the gaps of one exit record from another describing the same rank."""
    timed = [x for x in (a, b) if x.time is not None]
    earliest = min(timed, key=lambda x: x.time or 0.0) if timed else a
    return RankExit(
        rank=a.rank if a.rank is not None else b.rank,
        local_rank=a.local_rank if a.local_rank is not None else b.local_rank,
        host=a.host or b.host,
        pid=a.pid if a.pid is not None else b.pid,
        exitcode=a.exitcode if a.exitcode is not None else b.exitcode,
        signal=a.signal or b.signal,
        time=earliest.time,
        error_file=a.error_file or b.error_file,
        message=_longer(a.message, b.message),
        is_root_cause_block=a.is_root_cause_block or b.is_root_cause_block,
        time_resolution=earliest.time_resolution,
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
    for code, recs in sorted(groups.items(), key=lambda kv: _severity(kv[1][0])):
        ranks = sorted({r.exit.rank for r in recs if r.exit.rank is not None})
        sig = recs[0].signal
        what = recs[0].meaning
        where = f"rank {format_ranks(ranks)}" if len(ranks) == 1 else f"ranks {format_ranks(ranks)}"
        if not ranks:
            where = f"{len(recs)} worker(s) of unknown rank"
        out.append(
            Finding(
                kind=FindingKind.RANK_EXIT,
                summary=f"{where} exited with {code} ({what})",
                ranks=tuple(ranks),
                evidence=tuple(ref(r.event, r.exit.rank) for r in recs[:5]),
                facts=RankExitFacts(
                    exitcode=code,
                    signal=sig,
                    meaning=what,
                    count=len(recs),
                    # said only where every exit of the group never started its program
                    not_started=recs[0].not_started if all(r.not_started for r in recs) else None,
                ),
            )
        )
    return out


def _severity(rec: ExitRecord) -> tuple[int, int]:
    code = rec.exit.exitcode
    if rec.self_inflicted:
        return (0, code or 0)
    if rec.launcher_killed:
        return (3, code or 0)
    if code is None:
        return (4, 0)
    return (1 if code < 0 else 2, code)


def restart_screen(kb: knowledge.Knowledge) -> Screened:
    """The agent's restart lines (`kb.exits.restarts`), screened: it runs on every error line
    of every rank."""
    return _restart_screen(kb.exits)


@lru_cache(maxsize=8)
def _restart_screen(codes: ExitCodes) -> Screened:
    assert codes.restarts is not None  # the schema says so
    return Screened(codes.restarts)


def restart_findings(parsed: Sequence[ParsedSource], kb: knowledge.Knowledge) -> list[Finding]:
    """Elastic restarts: attempt folders and the agent's 'will restart worker group' lines."""
    screen = restart_screen(kb)
    attempts = sorted({ps.source.attempt for ps in parsed if ps.source.attempt is not None})
    lines: list[EvidenceRef] = []
    max_restarts: int | None = None
    for ps in parsed:
        for ev in ps.events:
            if ev.kind not in (EventKind.AGENT, EventKind.ERROR_LINE, EventKind.WARNING_LINE):
                continue
            m = screen.search(ev.text, lowered_ascii(ev.text))
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
            kind=FindingKind.RESTART,
            summary=summary,
            evidence=tuple(lines[:5]),
            facts=RestartFacts(
                attempts=n_attempts, attempt_ids=tuple(attempts), max_restarts=max_restarts
            ),
        )
    ]
