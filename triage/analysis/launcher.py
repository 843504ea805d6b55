"""Job topology from the launcher's own command line, and the nodes that never showed up.

torchrun's argv (`--nnodes=2 --nproc-per-node=2 --node-rank=0`) tells how many ranks the job
should have and which of them each agent owns. It shows in py-spy dumps of the agent
(`Process 23792: ... torchrun --nnodes=2 ...`), in `ps` listings and in launcher echo lines.
When a rendezvous times out waiting for agents (`1/2 clients joined`), the ranks of the nodes
that never joined are the culprits, although they left no log at all.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache

import regex

from triage import knowledge
from triage.knowledge.topology import Topology as Shapes
from triage.literals import Screened, lowered_ascii
from triage.model import Event, EventKind, PySpyDump


def waiting_screen(kb: knowledge.Knowledge) -> Screened:
    """The rendezvous's wait-for-nodes lines (`kb.topology`), screened: it runs on every error
    line of every rank."""
    return _waiting_screen(kb.topology)


@lru_cache(maxsize=8)
def _waiting_screen(shapes: Shapes) -> Screened:
    assert shapes.waiting is not None  # the schema says so
    return Screened(shapes.waiting)


@dataclass
class Topology:
    nnodes: int | None = None
    nproc_per_node: int | None = None
    node_ranks: set[int] = field(default_factory=set)  # agents known to have started
    joined: int | None = None  # agents that joined a timed-out rendezvous
    expected_agents: int | None = None
    rendezvous_timeout: Event | None = None

    @property
    def world_size(self) -> int | None:
        if self.nnodes and self.nproc_per_node:
            return self.nnodes * self.nproc_per_node
        return None

    def missing_ranks(self, ranks_seen: set[int]) -> list[int]:
        """Ranks of nodes that never joined, when a rendezvous timed out waiting for them."""
        ws = self.world_size
        if self.rendezvous_timeout is None or not ws or not self.nproc_per_node:
            return []
        present = set(ranks_seen)
        for nr in self.node_ranks:
            present |= set(range(nr * self.nproc_per_node, (nr + 1) * self.nproc_per_node))
        missing = [r for r in range(ws) if r not in present]
        if self.joined is not None and self.expected_agents:
            # trust the store's own count: it says how many agents are absent
            absent_nodes = self.expected_agents - self.joined
            if absent_nodes <= 0:
                return []
        return missing


def _argv(text: str, topo: Topology, argv: Mapping[str, regex.Pattern[str]]) -> None:
    nnodes, nproc, node_rank = argv["nnodes"], argv["nproc_per_node"], argv["node_rank"]
    m = nnodes.search(text)
    if m:
        topo.nnodes = max(topo.nnodes or 0, int(m["n"]))
    m = nproc.search(text)
    if m:
        topo.nproc_per_node = int(m["n"])
    m = node_rank.search(text)
    if m and (nnodes.search(text) or nproc.search(text)):
        topo.node_ranks.add(int(m["n"]))


def topology(events: Iterable[Event], kb: knowledge.Knowledge) -> Topology:
    """The job's shape from the launcher's argv, and a rendezvous that timed out waiting."""
    topo = Topology()
    argv, joined = kb.topology.argv, kb.topology.joined
    waiting = waiting_screen(kb)
    for ev in events:
        payload = ev.payload
        if isinstance(payload, PySpyDump) and payload.command:
            _argv(payload.command, topo, argv)
            continue
        if ev.kind in (EventKind.FLIGHT_RECORDER, EventKind.ENV_REPORT):
            continue
        if "--n" in ev.text:  # every argv pattern holds it (the schema checks)
            _argv(ev.text, topo, argv)
        if ev.kind in (EventKind.TRACEBACK, EventKind.ERROR_LINE, EventKind.AGENT) and (
            waiting.search(ev.text, lowered_ascii(ev.text))
        ):
            topo.rendezvous_timeout = topo.rendezvous_timeout or ev
            m = joined.search(ev.text) if joined is not None else None
            if m:
                topo.joined, topo.expected_agents = int(m["k"]), int(m["m"])
    return topo
