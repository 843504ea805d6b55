"""Hardware-ish signals of one job, per host and GPU, from its parsed events.

Which lines count is data (`rules/fleet/fleet.yaml`, passed in as `FleetKnowledge`). A GPU is
named when the line itself says which (an Xid's PCI address, NCCL's busId) or when another
line tied the rank to one (NCCL's `cudaDev N busId X` init line, nvidia-smi's table).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

import regex

from triage.fleet.knowledge import FleetKnowledge
from triage.fleet.model import SignalHit
from triage.model import Event, ParsedSource

# Lines kept per (host, signal) in one job: a flapping link can log thousands; the count of
# jobs is what the statistics use, and a few lines are enough to show.
LINES_PER_SIGNAL = 3
TEXT_CHARS = 300
_HEX = regex.compile(r"[0-9a-fA-F]+")


def gpu_from_pci(pci: str) -> str:
    """`0000:3B:00` / `00000000:3b:00.0` -> `3b:00` (bus:device, as every tool can agree)."""
    parts = pci.lower().split(".")[0].split(":")
    return ":".join(parts[-2:]) if len(parts) >= 2 else pci.lower()


def gpu_from_bus_id(bus_id: str) -> str:
    """NCCL's busId (`5e000`: the PCI address's hex digits run together) -> `5e:00`."""
    digits = bus_id.lower().zfill(9) if _HEX.fullmatch(bus_id) else ""
    return f"{digits[-5:-3]}:{digits[-3:-1]}" if digits else bus_id.lower()


def _gpu_of(m: regex.Match[str]) -> str | None:
    groups = m.groupdict()
    if groups.get("pci"):
        return gpu_from_pci(groups["pci"])
    if groups.get("bus_id"):
        return gpu_from_bus_id(groups["bus_id"])
    return None


def _events(parsed: Sequence[ParsedSource]) -> Iterable[tuple[ParsedSource, Event]]:
    for ps in parsed:
        for ev in ps.events:
            if ev.text:
                yield ps, ev


def gpu_map(
    parsed: Sequence[ParsedSource], knowledge: FleetKnowledge, rank_hosts: Mapping[int, str]
) -> dict[tuple[str, int], str]:
    """(host, rank) -> GPU, from the lines that only say which GPU a rank runs on."""
    found: dict[tuple[str, int], str] = {}
    for ps, ev in _events(parsed):
        for name in knowledge.gpu_names:
            for m in name.pattern.finditer(ev.text):
                gpu = _gpu_of(m)
                rank_text = m.groupdict().get("rank")
                rank = int(rank_text) if rank_text else ev.rank
                host = ev.host or ps.source.host or (rank_hosts.get(rank) if rank else None)
                if gpu and host and rank is not None:
                    found.setdefault((host, rank), gpu)
    return found


def scan(
    parsed: Sequence[ParsedSource],
    knowledge: FleetKnowledge,
    rank_hosts: Mapping[int, str],
    redact: Callable[[str], str] | None = None,
) -> list[SignalHit]:
    """Every signal line of a job with its host (and GPU), a few lines per host and signal.

    `redact` (text -> text) masks secrets in the quoted lines; a line with no host it can be
    tied to is left out (a fleet counts per host)."""
    gpus = gpu_map(parsed, knowledge, rank_hosts)
    kept: dict[tuple[str, str], int] = {}
    hits: list[SignalHit] = []
    for ps, ev in _events(parsed):
        host = ev.host or ps.source.host
        if host is None and ev.rank is not None:
            host = rank_hosts.get(ev.rank)
        if host is None:
            continue
        for signal in knowledge.signals:
            m = signal.search(ev.text)
            if m is None:
                continue
            key = (host, signal.id)
            kept[key] = kept.get(key, 0) + 1
            if kept[key] > LINES_PER_SIGNAL:
                continue
            gpu = _gpu_of(m) or (gpus.get((host, ev.rank)) if ev.rank is not None else None)
            code = m.groupdict().get("code") or ""
            text = _line_of(ev.text, m)
            hits.append(
                SignalHit(
                    signal=signal.id,
                    label=signal.label.replace("{code}", code).strip(),
                    host=host,
                    gpu=gpu,
                    rank=ev.rank,
                    source=ps.source.path,
                    line=ev.line,
                    text=redact(text) if redact is not None else text,
                )
            )
    return hits


def silent_ranks(
    lagging: Iterable[int],
    rank_hosts: Mapping[int, str],
    label: str,
    gpus: Mapping[tuple[str, int], str] | None = None,
) -> list[SignalHit]:
    """The hang's lagging ranks, as signals of their hosts."""
    out = []
    for rank in sorted(set(lagging)):
        host = rank_hosts.get(rank)
        if host is not None:
            gpu = (gpus or {}).get((host, rank))
            text = f"rank {rank} did not join the collective the other ranks waited in"
            out.append(SignalHit("silent_rank", label, host, gpu, rank, "", None, text))
    return out


def _line_of(text: str, m: regex.Match[str]) -> str:
    """The line of a (multi-line) event that holds the match, cut to a readable length."""
    start = text.rfind("\n", 0, m.start()) + 1
    end = text.find("\n", m.end())
    line = text[start : end if end != -1 else len(text)].strip()
    return line if len(line) <= TEXT_CHARS else line[: TEXT_CHARS - 1] + "…"
