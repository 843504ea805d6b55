"""The job's facts that later stages and action templates read."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any

from triage import knowledge
from triage.analysis import consistency, exits, flight_recorder, progress, pyspy
from triage.analysis.ranks import RankIndex, event_rank
from triage.model import FailureRef, HangReport, ParsedSource, SourceKind


def frameworks(
    parsed: Sequence[ParsedSource], loose_text: bool, kb: knowledge.Knowledge
) -> tuple[list[str], list[str]]:
    """The frameworks and launchers the job's own lines show (`rules/frameworks.yaml`): which
    advice applies to it. A note beside real logs is not the job's own output."""

    def texts() -> Iterator[str]:
        for ps in parsed:
            if loose_text and ps.source.kind is SourceKind.TEXT:
                continue
            if ps.whole_text:
                yield ps.whole_text
            for ev in ps.events:
                if ev.text:
                    yield ev.text

    found, launchers = kb.frameworks.detect(texts())
    return list(found), list(launchers)


def source_identity(
    parsed: Sequence[ParsedSource], index: RankIndex
) -> tuple[dict[str, int], dict[str, str]]:
    """The rank and host each input belongs to, as far as all inputs together tell.

    A torchrun `--log-dir` file knows only its local rank; the launcher's summary, NCCL's rank
    map or the `[rankN]:` prefixes inside it give the global rank (one rank per file only).
    """
    ranks: dict[str, int] = {}
    hosts: dict[str, str] = {}
    for ps in parsed:
        path = ps.source.path
        if ps.source.kind is SourceKind.TEXT and ps.source.rank is None:
            continue  # notes, a README, an issue's text: no rank's own output
        seen = {r for ev in ps.events if (r := event_rank(ev, index, ps.source.rank)) is not None}
        if ps.source.rank is not None:
            ranks[path] = ps.source.rank
        elif len(seen) == 1:
            ranks[path] = next(iter(seen))
        elif not seen and ps.source.local_rank is not None:
            got = index.rank_for_local(ps.source.local_rank, ps.source.host)
            if got is not None:
                ranks[path] = got
        host = ps.source.host or index.host_of_source.get(path)
        if host is None and path in ranks:
            host = index.host_of_rank.get(ranks[path])
        if host:
            hosts[path] = host
    return ranks, hosts


def job_facts(
    world_size: int | None,
    culprits: Sequence[int],
    lead: int | None,
    first: FailureRef | None,
    hang: HangReport | None,
    fr: flight_recorder.FRAnalysis,
    spy: pyspy.PySpyAnalysis,
    prog: progress.ProgressAnalysis,
    cons: consistency.ConsistencyAnalysis,
    exit_records: Sequence[exits.ExitRecord],
    hosts: set[str],
    index: RankIndex,
) -> dict[str, Any]:
    facts: dict[str, Any] = {
        "world_size": world_size,
        "culprit_ranks": list(culprits),
        "hosts": sorted(hosts),
    }
    if lead is not None:
        facts["culprit_rank"] = lead
        host = index.host_said.get(lead) or index.host_of_rank.get(lead)
        if host:
            facts["culprit_host"] = host
    if hang is not None:
        coll = dict(hang.collective or {})
        facts["hang"] = hang.detected
        facts["lagging_ranks"] = list(hang.lagging_ranks)
        if coll.get("op"):
            facts["collective"] = coll["op"]
        if coll.get("seq") is not None:
            facts["seq"] = coll["seq"]
        if coll.get("timeout_ms"):
            facts["timeout_ms"] = coll["timeout_ms"]
        if hang.process_group:
            facts["pg"] = hang.process_group
    if fr.reports:
        facts["fr_status"] = flight_recorder.status_table(fr)
        facts["fr_ranks_dumped"] = list(fr.ranks_dumped)
        missing = sorted({r for rep in fr.reports for r in rep.missing})
        if missing:
            facts["missing_ranks"] = missing
    if lead is not None and lead in spy.user_frames:
        uf = spy.user_frames[lead]
        facts["user_frame"] = f"{uf.function} ({uf.filename}:{uf.line})"
    if prog.last:
        facts["last_progress"] = {r: v for r, (_, v) in sorted(prog.last.items())}
    for key in ("torch", "nccl", "cuda", "python", "driver", "deepspeed", "gpu_models"):
        if key in cons.facts:
            facts[key] = cons.facts[key]
    cuda = cons.facts.get("cuda_build") or cons.facts.get("cuda_runtime")
    if cuda and "cuda" not in facts:
        facts["cuda"] = cuda
    if "nccl" not in facts and fr.comm_lib_versions:
        facts["nccl"] = Counter(fr.comm_lib_versions.values()).most_common(1)[0][0]
    for rec in exit_records:
        if rec.exit.rank in culprits and rec.exit.exitcode not in (None, 0):
            facts["exitcode"] = rec.exit.exitcode
            facts["signal"] = rec.signal
            break
    root = [r.exit.rank for r in exit_records if r.exit.is_root_cause_block]
    if root:
        facts["torchrun_root_cause_rank"] = root[0]
    if first is not None:
        facts["first_failure_text"] = first.text
    return facts
