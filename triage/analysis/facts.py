"""The job's facts that later stages and action templates read."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence

import regex

from triage import knowledge
from triage.analysis import consistency, exits, flight_recorder, progress, pyspy
from triage.analysis.ranks import RankIndex, event_rank
from triage.model import (
    AnalysisFacts,
    CppExceptionFacts,
    EnvReport,
    EventKind,
    FailureRef,
    HangReport,
    ParsedSource,
    SourceKind,
)


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
    parsed: Sequence[ParsedSource],
    world_size: int | None,
    culprits: Sequence[int],
    lead: int | None,
    first: FailureRef | None,
    raised: pyspy.RaisedAt | None,
    hang: HangReport | None,
    fr: flight_recorder.FRAnalysis,
    spy: pyspy.PySpyAnalysis,
    prog: progress.ProgressAnalysis,
    cons: consistency.ConsistencyAnalysis,
    exit_records: Sequence[exits.ExitRecord],
    hosts: set[str],
    index: RankIndex,
    loose_text: bool,
    kb: knowledge.Knowledge,
) -> AnalysisFacts:
    """`raised`: where the first failure's traceback raised, as the user's code saw it, if found."""
    culprit_host = None
    if lead is not None:
        culprit_host = index.host_said.get(lead) or index.host_of_rank.get(lead) or None
    coll = hang.collective if hang is not None else None
    missing = sorted({r for rep in fr.reports for r in rep.missing})
    user_frame = raising_user_frame = None
    if raised is not None and raised.user is not None:
        # the line the first failure's traceback raised at; py-spy's frame is only where the
        # rank waited afterwards (its `finally:` barrier, a `Queue.get` of the main thread)
        uf = raised.user
        user_frame = f"{uf.function} ({uf.filename}:{uf.line})"
        if raised.by_user:
            raising_user_frame = user_frame
    elif lead is not None and lead in spy.user_frames:
        uf = spy.user_frames[lead]
        user_frame = f"{uf.function} ({uf.filename}:{uf.line})"
    versions = {k: v for k, v in cons.facts.items() if k in _VERSIONS}
    if "cuda" not in versions:
        versions["cuda"] = cons.facts.get("cuda_build") or cons.facts.get("cuda_runtime") or None
    if "nccl" not in versions and fr.comm_lib_versions:
        versions["nccl"] = Counter(fr.comm_lib_versions.values()).most_common(1)[0][0]
    exitcode, signal = None, None
    for rec in exit_records:
        if rec.exit.rank in culprits and rec.exit.exitcode not in (None, 0):
            exitcode, signal = rec.exit.exitcode, rec.signal
            break
    root = [r.exit.rank for r in exit_records if r.exit.is_root_cause_block]
    source_ranks, source_hosts = source_identity(parsed, index)
    found, launchers = frameworks(parsed, loose_text, kb)
    return AnalysisFacts(
        world_size=world_size,
        culprit_ranks=tuple(culprits),
        culprit_rank=lead,
        culprit_host=culprit_host,
        hosts=tuple(sorted(hosts)),
        hang=hang.detected if hang is not None else None,
        lagging_ranks=tuple(hang.lagging_ranks) if hang is not None else None,
        collective=(coll.op or None) if coll else None,
        seq=coll.seq if coll else None,
        timeout_ms=(coll.timeout_ms or None) if coll else None,
        pg=(hang.process_group or None) if hang is not None else None,
        fr_status=flight_recorder.status_table(fr) if fr.reports else None,
        fr_ranks_dumped=tuple(fr.ranks_dumped) if fr.reports else None,
        missing_ranks=tuple(missing),
        user_frame=user_frame,
        raising_user_frame=raising_user_frame,
        last_progress={r: v for r, (_, v) in sorted(prog.last.items())} or None,
        exitcode=exitcode,
        signal=signal,
        torchrun_root_cause_rank=root[0] if root else None,
        first_failure_text=first.text if first is not None else None,
        source_ranks=source_ranks,
        source_hosts=source_hosts,
        frameworks=tuple(found),
        launchers=tuple(launchers),
        input_kinds=tuple(sorted({ps.source.kind.value for ps in parsed})),
        device=device_of(parsed, versions.get("gpu_models"), kb.frameworks.gpu_seen),
        native_origin=native_origin(parsed),
        stuck_in_setup=bool(spy.setup_waits) and not (prog.last or spy.waiting_ranks or fr.reports),
        **versions,
    )


def native_origin(parsed: Sequence[ParsedSource]) -> str | None:
    """Where the job's first C++ exception that says so was thrown (`terminate called after
    throwing ...` whose what() or `Exception raised from` names the source place)."""
    for ps in parsed:
        for ev in ps.events:
            if isinstance(ev.payload, CppExceptionFacts) and ev.payload.raised_from:
                return ev.payload.raised_from
    return None


_NCCL_EVENTS = (EventKind.NCCL_INFO, EventKind.NCCL_COMM, EventKind.NCCL_WARN)


def device_of(
    parsed: Sequence[ParsedSource],
    gpu_models: str | None,
    gpu_seen: regex.Pattern[str] | None,
) -> str | None:
    """What the job ran on: "gpu" when it shows GPUs (NCCL's own lines, GPU models, an
    environment report that saw CUDA), "cpu" when its environment report says CUDA was not
    available and nothing shows a GPU; None when nothing says (most pasted errors)."""
    if gpu_models or any(
        ev.kind in _NCCL_EVENTS or (gpu_seen is not None and gpu_seen.search(ev.text[:4000]))
        for ps in parsed
        for ev in ps.events
    ):
        return "gpu"
    said = {
        str(ev.payload.facts.get("cuda_available", "")).strip().lower()
        for ps in parsed
        for ev in ps.events
        if isinstance(ev.payload, EnvReport)
    }
    if said & {"true", "yes"}:
        return "gpu"
    if said & {"false", "no"}:
        return "cpu"
    return None


# the versions the job's environment reports give, as the majority of ranks has them
_VERSIONS = ("torch", "nccl", "cuda", "python", "driver", "deepspeed", "gpu_models")
