"""The culprit vote: which rank(s) started it, from the signals the other analyses found.

Every signal and its weight is in the run's `kb.culprit` (`rules/culprit.yaml`); this module
only decides which ranks gave which signal and adds up their votes, in a fixed order, so the
reasons a report lists come strongest-evidence first. `pick` names the ranks whose score is at
least the table's minimum and within its co-culprit share of the best.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from triage import knowledge
from triage.analysis import consistency, exits, flight_recorder, progress, pyspy, timeline
from triage.analysis.cascade import (
    ERROR_KINDS,
    WATCHDOG_FAMILIES,
    Role,
    peer_address,
    pointed_ranks,
)
from triage.analysis.ranks import RankIndex
from triage.knowledge.culprit import CulpritTable

__all__ = ["Votes", "pick", "vote"]


@dataclass
class Votes:
    """Each rank's score and, in the order they were added, the reasons behind it."""

    table: CulpritTable
    world_size: int | None
    scores: Counter[int] = field(default_factory=Counter)
    reasons: dict[int, list[str]] = field(default_factory=lambda: defaultdict(list))

    def add(
        self,
        rank: int | None,
        signal: str,
        n: int = 0,
        scale: float = 1.0,
        *,
        bounded: bool = True,
        **say: object,
    ) -> None:
        """Rank `rank` gave `signal` (counting `n` messages, scaled by `scale`). `bounded`: a
        rank read from a message; far beyond the world size it is a misread number."""
        spec = self.table.signals[signal]
        self._add(rank, spec.vote(n, scale), spec.reason.format(n=n, **say), bounded=bounded)

    def add_best(self, rank: int, signals: Iterable[str]) -> None:
        """A rank's signals of one group: its best one counts, with the group's reason."""
        specs = [self.table.signals[s] for s in sorted(signals)]
        if specs:
            self._add(rank, max(s.vote() for s in specs), specs[0].reason)

    def _add(self, rank: int | None, w: float, why: str, *, bounded: bool = True) -> None:
        ws = self.world_size
        if rank is None or (bounded and (rank < 0 or (ws and rank >= ws * 4))):
            return
        self.scores[rank] += w
        if why not in self.reasons[rank]:
            self.reasons[rank].append(why)


def vote(
    placed: Sequence[timeline.Placed],
    roles: Mapping[int, Role],
    exit_records: Sequence[exits.ExitRecord],
    fr: flight_recorder.FRAnalysis,
    spy: pyspy.PySpyAnalysis,
    prog: progress.ProgressAnalysis,
    cons: consistency.ConsistencyAnalysis,
    world_size: int | None,
    index: RankIndex,
    ip_hosts: Mapping[str, str],
    kb: knowledge.Knowledge,
) -> Votes:
    """Every rank's votes from the events, exits and the other analyses."""
    votes = Votes(kb.culprit, world_size)
    # initiating errors: the strongest per rank, and a bonus for the earliest on the timeline
    best: dict[int, float] = {}
    earliest: dict[int, float] = {}
    for p in placed:
        if p.role != "initiating" or p.rank is None:
            continue
        best[p.rank] = max(best.get(p.rank, 0.0), roles[id(p.event)].strength)
        if p.time is not None:
            earliest[p.rank] = min(earliest.get(p.rank, p.time), p.time)
    for r, s in best.items():
        votes.add(r, "initiating_error", scale=s)
    if len(earliest) > 1:
        t0 = min(earliest.values())
        for r, t in earliest.items():
            if t - t0 <= kb.culprit.first_window_s:
                votes.add(r, "first_on_timeline")

    # cascade messages that name the rank they react to
    pointed: Counter[int] = Counter()
    for p in placed:
        if p.role == "cascade" or p.event.kind in ERROR_KINDS:
            for r in pointed_ranks(p.event, kb):
                if r != p.rank:
                    pointed[r] += 1
    for r, n in pointed.items():
        votes.add(r, "named_by_peers", n)

    # `Connection closed by peer [10.0.0.7]:port` / `remote peer node02<port>` name a host;
    # every rank on it gets a small vote (the port alone does not say which rank)
    by_host: Counter[str] = Counter()
    ranks_of_host = index.ranks_of_host
    for p in placed:
        if p.role != "cascade":
            continue
        addr = peer_address(p.event, kb)
        if addr is None:
            continue
        host = ip_hosts.get(addr[0]) or (addr[0] if addr[0] in ranks_of_host else None)
        if host and host != (p.event.host or p.domain):
            by_host[host] += 1
    for host, n in by_host.items():
        for r in ranks_of_host.get(host, ()):
            votes.add(r, "peer_host", n, host=host)

    cascade_ranks = {p.rank for p in placed if p.role == "cascade" and p.rank is not None}
    # a process group's watchdog caught a timeout or tore a communicator down somewhere: every
    # rank's watchdog ends its process with SIGABRT the same way, so such an exit is no sign
    watchdog_seen = any(p.role == "cascade" and p.family in WATCHDOG_FAMILIES for p in placed)
    for rec in exit_records:
        code, r = rec.exit.exitcode, rec.exit.rank
        if rec.self_inflicted:
            votes.add(r, "exit_self_inflicted", code=code, meaning=rec.meaning)
        elif (
            code not in (None, 0)
            and not rec.launcher_killed
            and r not in cascade_ranks | set(best)
            and not (watchdog_seen and rec.signal == "SIGABRT")
        ):
            votes.add(r, "exit_without_message", code=code)

    for suspects in (fr.suspects, spy.suspects, prog.suspects, cons.suspects):
        for r, signals in suspects.items():
            votes.add_best(r, signals)
    return votes


def vote_absent(
    votes: Votes,
    silent: Sequence[int],
    has_initiating: bool,
    never_joined: Sequence[int],
    unnamed_error: bool = False,
) -> None:
    """Ranks that said nothing while the others failed, and ranks that never started;
    `unnamed_error`: an error on no rank's line started the failure."""
    # their ranks come from the world size and the launcher's topology, not from a message
    for r in silent:
        signal = (
            "silent_beside_errors"
            if has_initiating
            else "silent_beside_unnamed_error"
            if unnamed_error
            else "silent_alone"
        )
        votes.add(r, signal, bounded=False)
    for r in never_joined:
        votes.add(r, "never_joined", bounded=False)


def pick(votes: Votes) -> list[int]:
    """The ranks named: at least the minimum score and close enough to the best."""
    if not votes.scores:
        return []
    top = max(votes.scores.values())
    if top < votes.table.min_score:
        return []
    share = votes.table.co_culprit
    return sorted(r for r, s in votes.scores.items() if s >= top * share)
