"""Wires the stages together: ingest -> parse -> correlate -> classify -> recommend.

The CLI, the batch runner and the tests call these functions; no stage calls another.
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from triage.budget import JobBudget, JobLimits
from triage.model import (
    SURE_CAUSE,
    Analysis,
    Classification,
    Diagnosis,
    EventKind,
    FixRecommendation,
    FlightRecorderDump,
    InputSummary,
    OutcomeKind,
    ParsedSource,
    ScoredLabel,
    Source,
    SourceKind,
)
from triage.report.common import lower_first

if TYPE_CHECKING:
    from concurrent.futures import Future

    from triage.classify.types import RuleHit
    from triage.knowledge import Knowledge

# (sources done, bytes done, path now being read)
ProgressCallback = Callable[[int, int, str], None]


@dataclass(frozen=True)
class Options:
    use_embeddings: bool = True
    extra_rules_dirs: tuple[str, ...] = ()
    # entries read of each flight-recorder dump: None decides by the job's size
    # (`fr_tail_for`), 0 reads them all, N the last N
    fr_entries: int | None = None
    # follow symbolic links that lead out of the paths given (`--follow-links`)
    follow_links: bool = False
    # also mask e-mails, IPs, host names and home-folder user names (`--redact-hosts`);
    # secrets are always masked
    redact_hosts: bool = False
    # what one job may cost: decompressed bytes and seconds, temp space, flight-recorder
    # entries and decode memory (`triage.budget`)
    limits: JobLimits = JobLimits()
    # worker processes that parse a big bundle: None asks `default_workers()`, 1 reads here
    workers: int | None = None


def read_inputs(
    paths: Sequence[str],
    on_progress: ProgressCallback | None = None,
    *,
    fr_entries: int | None = None,
    while_workers_parse: Callable[[], None] | None = None,
    follow_links: bool = False,
    limits: JobLimits | None = None,
    workers: int | None = None,
    kb: Knowledge | None = None,
) -> list[ParsedSource]:
    """Ingest and parse every input under `paths`, in a stable order.

    A big bundle's files on disk are parsed in a pool of worker processes, one per core,
    handed over while discovery goes on (sniffing 2,000 files is itself ~1.5 s of work), and
    this process parses archive members meanwhile, each as soon as it is found, so the temp
    space a member of a compressed tar takes is given back before the next one is copied; the
    result is in discovery order either way. Small inputs (and `triage explain`) never pay for
    starting a pool. Flight-recorder dumps of a big job are read in part (`fr_tail_for`;
    `fr_entries` as in Options); they go to the pool last, once discovery has told how big the
    job is. `while_workers_parse` runs here once everything is handed out (see
    `warm_later_stages`). What the job may cost (`limits`, see `triage.budget`) is counted
    across this process and its workers. `workers` is the pool's size (None:
    `default_workers()`, which looks at this process; 1: no pool). `kb` is the run's
    knowledge (None: the shipped one), which the parsers here and in the workers read.
    """
    from triage import budget, knowledge

    kb = kb if kb is not None else knowledge.shipped()
    with budget.job(limits or JobLimits(), shared=True) as job_budget:
        return _read_inputs(
            paths,
            on_progress,
            fr_entries,
            while_workers_parse,
            follow_links,
            job_budget,
            workers,
            kb,
        )


def _read_inputs(
    paths: Sequence[str],
    on_progress: ProgressCallback | None,
    fr_entries: int | None,
    while_workers_parse: Callable[[], None] | None,
    follow_links: bool,
    job_budget: JobBudget,
    workers: int | None,
    kb: Knowledge,
) -> list[ParsedSource]:
    from triage import ingest

    progress = _Progress(on_progress)
    pool = _Pool(job_budget, workers, kb)
    sources: list[Source] = []
    results: list[ParsedSource | None] = []
    held_back: list[int] = []  # flight-recorder dumps, sent once fr_tail is known
    fr_tail: int | None = None
    try:
        for source in ingest.discover(paths, follow_links=follow_links):
            sources.append(source)
            results.append(None)
            i = len(sources) - 1
            if source.kind is SourceKind.FLIGHT_RECORDER:
                held_back.append(i)  # parsed once fr_tail is known, here or in the pool
            elif _poolable(source):
                pool.offer(i, source, None)
            else:  # an archive member: parsed now, and its temp space given back
                results[i] = _parse_counted(source, None, progress, kb)
        fr_tail = fr_tail_for(sources) if fr_entries is None else (fr_entries or None)
        for i in held_back:
            if _poolable(sources[i]):
                pool.offer(i, sources[i], fr_tail)
        pool.flush()
        if pool.executor is not None and while_workers_parse is not None:
            while_workers_parse()
        # Meanwhile, this process parses what cannot be shipped (archive members' dumps).
        for i, source in enumerate(sources):
            if results[i] is None and not pool.took(i):
                results[i] = _parse_counted(source, fr_tail, progress, kb)
        pool.collect(sources, results, progress)
    finally:
        pool.close()
        for i, source in enumerate(sources):
            if results[i] is not None and source.release is not None:
                source.release()
    for i, source in enumerate(sources):  # what a worker could not do
        if results[i] is None:
            results[i] = _parse_counted(source, fr_tail, progress, kb)
    progress.start("")
    return [parsed for parsed in results if parsed is not None]


# Above this many bytes of flight-recorder dumps, each dump gives its header and only its
# last FR_TAIL_ENTRIES entries: decoding all of a 2,000-entry dump costs ~30 ms, so 1,024
# ranks would take most of a minute; the tail costs ~4 ms and holds where the job stopped.
FR_WHOLE_BELOW = 16 * 1024 * 1024
FR_TAIL_ENTRIES = 128


def fr_tail_for(sources: Sequence[Source]) -> int | None:
    """How many entries to read of each flight-recorder dump: None means all of them."""
    total = sum(s.size for s in sources if s.kind is SourceKind.FLIGHT_RECORDER)
    return FR_TAIL_ENTRIES if total > FR_WHOLE_BELOW else None


# Below this much data on disk, parsing here beats starting workers (~0.2 s per pool).
_POOL_MIN_BYTES = 32 * 1024 * 1024
# Work handed to a worker at once: big enough to amortize the hand-off, small enough that
# the workers finish together.
_CHUNK_BYTES = 8 * 1024 * 1024
_CHUNK_FILES = 64

# What a worker needs to re-create a Source (its `open` is a closure and cannot travel).
_SourceFields = tuple[
    str, str, int, int | None, int | None, str | None, int | None, tuple[str, ...]
]


class _Progress:
    """Counts what is done for the on_progress callback."""

    def __init__(self, callback: ProgressCallback | None) -> None:
        self.callback = callback
        self.sources = 0
        self.bytes = 0

    def start(self, path: str) -> None:
        if self.callback is not None:
            self.callback(self.sources, self.bytes, path)

    def done(self, size: int) -> None:
        self.sources += 1
        self.bytes += size


def _poolable(source: Source) -> bool:
    from triage.ingest.streams import empty_stream

    # Only plain files on disk can be reopened by path in another process; a source with
    # nothing to read (an archive with problems, an unreadable file) stays here.
    return source.size > 0 and source.open is not empty_stream and os.path.isfile(source.path)


def default_workers() -> int:
    """How many worker processes this process may fork to parse a big bundle (1: none)."""
    import multiprocessing  # here, not at the top: `triage explain` never needs it

    if multiprocessing.parent_process() is not None:
        return 1  # already a worker (the batch runner): its siblings use the other cores
    if threading.active_count() > 1 or not sys.platform.startswith("linux"):
        # Forking a threaded process can deadlock, macOS system libraries do not survive a
        # fork, and the other start methods re-import the caller's main module: read here.
        return 1
    return min(len(os.sched_getaffinity(0)), 8)  # the cores this process may use


# the indices of the sources a worker parses, and its result to come (None: not shipped)
_Chunk = tuple[list[int], "Future[list[tuple[Any, ...] | None]] | None"]


class _Pool:
    """Worker processes that parse files by path, started once enough bytes are offered.

    Sources are offered in discovery order and shipped in chunks of about _CHUNK_BYTES; until
    _POOL_MIN_BYTES have been offered nothing starts (and a small input never starts it).
    Anything a worker could not do (a file that changed, a result that cannot travel, a
    worker killed by the OS) is left as None in `collect`, for the caller to parse here.
    """

    def __init__(self, job_budget: JobBudget, workers: int | None, kb: Knowledge) -> None:
        self.job_budget = job_budget
        self.kb = kb  # handed to the workers when they start (`_start_worker`)
        self.workers = workers  # None: `default_workers()` when the pool would start
        self.executor: Any = None
        self.broken = False
        self.waiting: list[tuple[int, Source, int | None]] = []
        self.offered_bytes = 0
        self.chunk: list[tuple[int, Source]] = []
        self.chunk_bytes = 0
        self.chunk_tail: int | None = None
        self.chunks: list[_Chunk] = []
        self.shipped: set[int] = set()
        self.gc_was_enabled = gc.isenabled()

    def offer(self, index: int, source: Source, fr_tail: int | None) -> None:
        self.offered_bytes += source.size
        if self.executor is None:
            self.waiting.append((index, source, fr_tail))
            if self.offered_bytes >= _POOL_MIN_BYTES and not self.broken:
                self._start()
            return
        self._add(index, source, fr_tail)

    def flush(self) -> None:
        if self.executor is not None:
            self._ship()

    def took(self, index: int) -> bool:
        return index in self.shipped

    def _start(self) -> None:
        workers = default_workers() if self.workers is None else self.workers
        if workers < 2:
            self.broken = True  # parse here; do not ask again for every later source
            return
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        from triage import parsers

        # what the sources offered so far need (dumps are offered last, once discovery is
        # done: a pool they start knows every kind of the job)
        parsers.preload({source.kind for _, source, _ in self.waiting}, self.kb)
        # Results arrive as many fresh, acyclic objects (FR entries); the cyclic GC would
        # re-scan all of them again and again meanwhile.
        gc.disable()
        try:
            # The workers count against this job's budget: forked, they share its counters.
            self.job_budget.before_fork()
            # Forked, they inherit the initializer's arguments as they are (never pickled):
            # the run's knowledge and the scan tables derived from it in `preload`.
            self.executor = ProcessPoolExecutor(
                max_workers=workers,
                mp_context=multiprocessing.get_context("fork"),
                initializer=_start_worker,
                initargs=(self.job_budget, self.kb),
            )
        except (OSError, RuntimeError):  # no processes to be had: read here
            self.broken = True
            self._restore_gc()
            return
        waiting, self.waiting = self.waiting, []
        for index, source, fr_tail in waiting:
            self._add(index, source, fr_tail)

    def _add(self, index: int, source: Source, fr_tail: int | None) -> None:
        if self.chunk and (
            self.chunk_bytes >= _CHUNK_BYTES
            or len(self.chunk) >= _CHUNK_FILES
            or fr_tail != self.chunk_tail
        ):
            self._ship()
        self.chunk.append((index, source))
        self.chunk_bytes += source.size
        self.chunk_tail = fr_tail

    def _ship(self) -> None:
        if not self.chunk:
            return
        indices = [i for i, _ in self.chunk]
        fields = [_fields(source) for _, source in self.chunk]
        try:
            future = self.executor.submit(_parse_chunk, fields, self.chunk_tail)
        except Exception:  # noqa: BLE001 - a broken pool: these are parsed here
            future = None
        self.chunks.append((indices, future))
        if future is not None:
            self.shipped.update(indices)
        self.chunk, self.chunk_bytes = [], 0

    def collect(
        self, sources: Sequence[Source], results: list[ParsedSource | None], progress: _Progress
    ) -> None:
        for k, (indices, future) in enumerate(self.chunks):
            if future is None:
                continue
            progress.start(sources[indices[0]].path)
            self.chunks[k] = (indices, None)  # a done future keeps its result alive
            try:
                packed = future.result()
            except Exception:  # noqa: BLE001 - a lost worker: its share is parsed here
                continue
            finally:
                del future
            for n, i in enumerate(indices):
                item, packed[n] = packed[n], None  # the columns go once the entries exist
                if item is not None:
                    results[i] = _unpack(sources[i], item)
                    progress.done(sources[i].size)
                del item

    def close(self) -> None:
        if self.executor is not None:
            self.executor.shutdown(wait=True, cancel_futures=True)
            self.executor = None
            self._restore_gc()

    def _restore_gc(self) -> None:
        if self.gc_was_enabled:
            gc.enable()


def _parse_counted(
    source: Source, fr_tail: int | None, progress: _Progress, kb: Knowledge
) -> ParsedSource:
    progress.start(source.path)
    parsed = _parse_here(source, fr_tail, kb)
    progress.done(source.size)
    return parsed


def _parse_here(source: Source, fr_tail: int | None, kb: Knowledge) -> ParsedSource:
    from triage import parsers

    try:
        return parsers.parse(source, fr_tail=fr_tail, kb=kb)
    finally:
        if source.release is not None:
            source.release()  # read: its temp space (a spooled archive member) goes back


def _fields(source: Source) -> _SourceFields:
    return (
        source.path,
        source.kind.value,
        source.size,
        source.rank,
        source.local_rank,
        source.host,
        source.attempt,
        source.warnings,
    )


# In a worker process: the knowledge of the job it parses for (`_start_worker`).
_worker_kb: Knowledge | None = None


def _start_worker(job_budget: JobBudget, kb: Knowledge) -> None:
    """The initializer of a job's worker processes: the job's budget and knowledge."""
    from triage import budget

    global _worker_kb
    budget.install(job_budget)
    _worker_kb = kb


def _parse_chunk(chunk: list[_SourceFields], fr_tail: int | None) -> list[tuple[Any, ...] | None]:
    """In a worker: re-open each file, parse it, pack the result for the trip back."""
    from triage import ingest, parsers

    out: list[tuple[Any, ...] | None] = []
    for path, kind, size, rank, local_rank, host, attempt, warnings in chunk:
        # A plain file is simply opened again; anything else (a compressed file) is
        # discovered again, which gives the very opener ingest chose for it. A file that
        # changed since is left to the main process, which reports it as ingest saw it.
        opener = ingest.reopen_plain(path, size)
        if opener is None:
            found = list(ingest.discover([path]))
            if len(found) != 1 or (found[0].path, found[0].kind.value, found[0].size) != (
                path,
                kind,
                size,
            ):
                out.append(None)
                continue
            opener = found[0].open
        source = Source(
            path=path,
            kind=SourceKind(kind),
            size=size,
            open=opener,
            rank=rank,
            local_rank=local_rank,
            host=host,
            attempt=attempt,
            warnings=warnings,
        )
        # A result that cannot be pickled fails this chunk's future; the main process then
        # parses the chunk itself.
        out.append(_pack(parsers.parse(source, fr_tail=fr_tail, kb=_worker_kb)))
    return out


def _pack(parsed: ParsedSource) -> tuple[Any, ...]:
    """ParsedSource minus its Source; flight-recorder entries as plain field columns, which
    unpickle faster than NamedTuples and let the main process share their numbers."""
    from triage.parsers import flight_recorder

    events = []
    for event in parsed.events:
        payload = event.payload
        if isinstance(payload, FlightRecorderDump):
            columns = flight_recorder.entry_columns(payload.entries)
            event = replace(event, payload=(replace(payload, entries=()), columns))
        events.append(event)
    return (
        tuple(events),
        parsed.warnings,
        parsed.lines,
        parsed.bytes_read,
        parsed.text_digest,
        parsed.whole_text,
        parsed.source.kind.value,
    )


def _unpack(source: Source, item: tuple[Any, ...]) -> ParsedSource:
    from triage.parsers import flight_recorder

    events, warnings, lines, bytes_read, digest, whole_text, kind = item
    out = []
    for event in events:
        payload = event.payload
        if type(payload) is tuple:
            dump, columns = payload
            entries = flight_recorder.entries_from_columns(columns)
            event = replace(event, payload=replace(dump, entries=entries))
        out.append(event)
    return ParsedSource(
        source=replace(source, kind=SourceKind(kind)),  # the kind its parser settled on
        events=tuple(out),
        warnings=warnings,
        lines=lines,
        bytes_read=bytes_read,
        text_digest=digest,
        whole_text=whole_text,
    )


def diagnose(
    paths: Sequence[str],
    options: Options = Options(),
    on_progress: ProgressCallback | None = None,
) -> Diagnosis:
    """The main job: a folder / archive / files of one failed job -> one Diagnosis."""
    from triage import knowledge

    # One load of the knowledge for every stage, the parsers first: a team folder's rules
    # make their lines events in the files as in a paste. A broken one stops here, loudly.
    kb = knowledge.load(options.extra_rules_dirs)
    parsed = read_inputs(
        paths,
        on_progress,
        fr_entries=options.fr_entries,
        while_workers_parse=lambda: warm_later_stages(options, kb),
        follow_links=options.follow_links,
        limits=options.limits,
        workers=options.workers,
        kb=kb,
    )
    # What was read stays alive until the diagnosis is made: the cyclic GC is told to leave it
    # alone rather than walk it again and again while the later stages allocate (~0.1-0.3 s
    # on a 1,024-rank bundle), and given it back after, for a batch process's next job.
    gc.freeze()
    try:
        return diagnose_parsed(parsed, options, kb)
    finally:
        gc.unfreeze()


def warm_later_stages(options: Options = Options(), kb: Knowledge | None = None) -> None:
    """Load what correlate, classify and recommend need first (their modules, the taxonomy,
    the rules): ~0.5 s that would otherwise wait until every file is read, done while the
    workers still parse."""
    from triage import analysis, knowledge, recommend, taxonomy  # noqa: F401 - loaded ahead
    from triage.classify import rules

    taxonomy.load()
    with contextlib.suppress(knowledge.KnowledgeError):  # reported in its turn, loudly
        rules.ruleset(kb if kb is not None else knowledge.load(options.extra_rules_dirs))


def diagnose_parsed(
    parsed: Sequence[ParsedSource], options: Options = Options(), kb: Knowledge | None = None
) -> Diagnosis:
    return diagnose_many([parsed], options, kb=kb)[0]


def diagnose_many(
    jobs: Sequence[Sequence[ParsedSource]],
    options: Options = Options(),
    *,
    pasted: bool = False,
    kb: Knowledge | None = None,
) -> list[Diagnosis]:
    """Correlate, classify and recommend for several jobs (classified in one batch).
    `pasted`: each job is a pasted text, evidence by itself however little it says. `kb`: the
    knowledge the jobs were parsed with (None: the shipped one plus options' rules folders)."""
    from triage import analysis, classify, knowledge, recommend
    from triage.classify import rules
    from triage.redact import redact_diagnosis, redact_events

    # One load of the knowledge for every stage: a team folder's rules and playbook reach
    # the fix advice too. A broken knowledge base stops here, loudly, as does a team rule
    # that misses its own examples (run once per load).
    kb = kb if kb is not None else knowledge.load(options.extra_rules_dirs)
    rules.check_team_examples(kb)
    # What a report can quote is masked in two steps of one module (triage/redact.py): the
    # secrets in the parsed text before the later stages cut quotes out of it, then every
    # string of the finished Diagnosis (paths, warnings, actions; hosts on request).
    jobs = [redact_events(parsed) for parsed in jobs]
    found = [analysis.correlate(parsed, kb) for parsed in jobs]
    labels = classify.classify_many(
        list(zip(jobs, found, strict=True)),
        use_embeddings=options.use_embeddings,
        kb=kb,
        pasted=pasted,
    )
    return [
        redact_diagnosis(
            _diagnosis(
                parsed,
                job_found,
                job_labels,
                recommend.recommend(job_labels, job_found, kb),
                kb,
                pasted,
            ),
            hosts=options.redact_hosts,
        )
        for parsed, job_found, job_labels in zip(jobs, found, labels, strict=True)
    ]


def _diagnosis(
    parsed: Sequence[ParsedSource],
    found: Analysis,
    labels: Classification,
    fixes: tuple[FixRecommendation, ...],
    kb: Knowledge,
    pasted: bool = False,
) -> Diagnosis:
    inputs = tuple(_input_summary(p, found) for p in parsed)
    if not pasted and not has_evidence(parsed):
        return no_evidence(inputs, kb)
    outcome = found.outcome
    if not pasted and outcome is not None and outcome.clean:
        # The job ended well and no fault is in its logs: whatever a rule or a neighbour
        # guessed from its routine lines is not a failure to report.
        return Diagnosis(
            summary=f"{_OUTCOME_WORDS[outcome.id]}: {lower_first(outcome.why)}.",
            inputs=inputs,
            # what correlate said of a failure (who started it, the cascade, the exits a stop
            # left) would contradict the outcome; facts about the job itself stay
            findings=tuple(f for f in found.findings if f.kind not in _FAILURE_FINDINGS),
            timeline=tuple(
                replace(t, role="context") if t.role == "initiating" else t for t in found.timeline
            ),
            rank_exits=tuple(replace(e, message=None) for e in found.rank_exits),
            process_groups=found.process_groups,
            stack_groups=found.stack_groups,
            outcome=outcome,
        )
    summary = summarize(labels, found, kb)
    if outcome is not None and outcome.fault_too and not pasted:
        summary = (
            f"{_OUTCOME_WORDS[outcome.id]} ({outcome.why}), but its logs hold a fault: {summary}"
        )
    return Diagnosis(
        summary=summary,
        symptoms=labels.symptoms,
        root_causes=labels.root_causes,
        cause_open=labels.cause_open,
        stage=labels.stage,
        fix_patterns=fixes if labels.symptoms or labels.root_causes else (),
        first_failure=found.first_failure,
        culprit_ranks=found.culprit_ranks,
        hang=found.hang,
        evidence=labels.evidence,
        similar_cases=labels.similar_cases,
        inputs=inputs,
        findings=found.findings,
        timeline=found.timeline,
        collect_next=labels.collect_next,
        # a rank's exception text is quoted where it matters (evidence, first failure); the
        # exit marks of the timeline need only who, when and how
        rank_exits=tuple(replace(e, message=None) for e in found.rank_exits),
        process_groups=found.process_groups,
        stack_groups=found.stack_groups,
        outcome=outcome,
    )


# Findings that speak of a failure: a job that ended well shows none of them.
_FAILURE_FINDINGS = frozenset(
    {
        "first_failure",
        "cascade",
        "hang",
        "lagging_rank",
        "missing_rank",
        "collective_mismatch",
        "rank_exit",
        "stack_outlier",
        "progress_divergence",
    }
)

# How a summary names each outcome.
_OUTCOME_WORDS = {
    OutcomeKind.SUCCEEDED: "The job finished",
    OutcomeKind.STOPPED: "The job was stopped on purpose",
    OutcomeKind.INCOMPLETE: "The job was still running",
    OutcomeKind.FAILED: "The job failed",
    OutcomeKind.HUNG: "The job hung",
    OutcomeKind.UNKNOWN: "The job's end is unknown",
}


# What carries no evidence of a failure by itself: a note that an input could not be read,
# and the versions of an environment report.
_NOT_EVIDENCE = (EventKind.INPUT_WARNING, EventKind.ENV_REPORT)


def has_evidence(parsed: Sequence[ParsedSource]) -> bool:
    """Did any input of a bundle hold something to diagnose: a log line, a traceback, a dump?
    (A text file in which the parsers found nothing, a README, is not evidence.)"""
    return any(ev.kind not in _NOT_EVIDENCE for ps in parsed for ev in ps.events)


def no_evidence(inputs: tuple[InputSummary, ...], kb: Knowledge | None = None) -> Diagnosis:
    """The diagnosis of a folder with nothing to read: said plainly, with what to collect
    (the collect-next advice of `kb`, None: the shipped one)."""
    from triage import knowledge

    advice = (kb if kb is not None else knowledge.shipped()).collect_next
    nothing = knowledge.Situation()  # as if nothing was read: every kind of evidence is missing
    if not inputs:
        where = "nothing was read"
    elif len(inputs) == 1:
        where = "the input holds no"
    else:
        where = f"none of the {len(inputs)} inputs holds a"
    what = "log line, traceback, py-spy or flight-recorder dump triage can read"
    said = f"{where}: {what}" if not inputs else f"{where} {what}"
    return Diagnosis(
        summary=f"No evidence found: {said}. Collect: " + "; ".join(advice.asks(nothing)) + ".",
        inputs=inputs,
        collect_next=tuple(advice.steps(nothing)),
        evidence_found=False,
    )


def explain(text: str, options: Options = Options()) -> Diagnosis:
    """`triage explain`: a pasted error or issue body -> Diagnosis."""
    return explain_many([text], options)[0]


def explain_many(texts: Iterable[str], options: Options = Options()) -> list[Diagnosis]:
    """Batch form of `explain`: the classifier embeds all signatures in one call."""
    from triage import knowledge, parsers

    kb = knowledge.load(options.extra_rules_dirs)
    jobs = [
        [parsers.parse_text(text, name="<pasted>" if i == 0 else f"<pasted {i + 1}>", kb=kb)]
        for i, text in enumerate(texts)
    ]
    return diagnose_many(jobs, options, pasted=True, kb=kb)


def check_rules(text_or_path: str, extra_rules_dirs: Sequence[str] = ()) -> list[RuleHit]:
    """`triage rules check`: the rules that match a file or folder (read like a bundle: ingest
    and parse turn bad input into warnings) or a text (read like a paste); the specific rules
    first, then the generic layer's family priors."""
    from triage import knowledge, parsers
    from triage.classify import rules

    kb = knowledge.load(extra_rules_dirs)
    rules.check_team_examples(kb)
    path = Path(text_or_path)
    try:
        is_path = len(text_or_path) < 4096 and "\n" not in text_or_path and path.exists()
    except (OSError, ValueError):
        is_path = False
    if is_path:
        parsed = read_inputs([str(path)], kb=kb)
        events = [ev for ps in parsed for ev in ps.events]
        kinds = {ps.source.path: ps.source.kind for ps in parsed}
        hits = rules.match_events(events, None, rules=rules.ruleset(kb), source_kinds=kinds)
    else:
        pasted = parsers.parse_text(text_or_path, kb=kb)
        hits = rules.match_text(text_or_path, pasted.events, None, rules=rules.ruleset(kb))
    return sorted(hits, key=lambda h: h.generic)


def summarize(labels: Classification, found: Analysis, kb: Knowledge | None = None) -> str:
    """One sentence: what happened, why, and who started it (`kb`'s collect-next advice,
    None: the shipped one, when nothing is known)."""
    if not labels.symptoms and not labels.root_causes:
        if labels.abstain_reason:
            return labels.abstain_reason
        from triage import knowledge
        from triage.classify import not_enough

        # nothing known about the evidence: every ask of the collect-next advice
        advice = (kb if kb is not None else knowledge.shipped()).collect_next
        return not_enough(advice.asks(knowledge.Situation()))
    parts: list[str] = []
    if labels.symptoms:
        parts.append(_label_phrase(labels.symptoms[0]))
    if labels.root_causes:
        cause = labels.root_causes[0]
        # a cause right less often than not, or one no rule names, is a guess and said to be
        sure = cause.score >= SURE_CAUSE and not labels.cause_open
        lead = "most likely cause" if sure else "cause unsettled, best guess"
        parts.append(f"{lead}: {_label_phrase(cause, lower=True)}")
    sentence = "; ".join(parts)
    who = _who(found)
    return f"{sentence}{who}."


def _label_phrase(label: ScoredLabel, lower: bool = False) -> str:
    name = label.name[0].lower() + label.name[1:] if lower else label.name
    # a calibrated score is never certainty: shown as 99% at most
    return f"{name} ({label.id}, {min(label.score, 0.99):.0%})"


def _who(found: Analysis) -> str:
    if found.hang is not None and found.hang.detected and found.hang.lagging_ranks:
        ranks = ", ".join(str(r) for r in found.hang.lagging_ranks)
        where = ""
        if found.hang.collective and found.hang.collective.get("op"):
            where = f" at {found.hang.collective['op']}"
        return f"; the job hung{where}, started by rank {ranks}"
    if found.culprit_ranks:
        ranks = ", ".join(str(r) for r in found.culprit_ranks)
        return f"; started by rank {ranks}"
    return ""


def _input_summary(parsed: ParsedSource, found: Analysis) -> InputSummary:
    """Kind, rank and host of one input: from its path, else what correlate learned."""
    source = parsed.source
    rank = source.rank
    if rank is None:
        rank = found.facts.source_ranks.get(source.path)
    host = source.host or found.facts.source_hosts.get(source.path)
    if host is None:
        hosts = Counter(e.host for e in parsed.events if e.host)
        if len(hosts) == 1:
            host = next(iter(hosts))
    return InputSummary(
        path=source.path,
        kind=source.kind,
        rank=rank,
        host=host,
        warnings=tuple(dict.fromkeys((*source.warnings, *parsed.warnings))),
        events=len(parsed.events),
    )
