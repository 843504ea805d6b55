"""Wires the stages together: ingest -> parse -> correlate -> classify -> recommend.

The CLI, the batch runner and the tests call these functions; no stage calls another. A big
bundle's files are parsed in worker processes (`triage.pool`).
"""

from __future__ import annotations

import contextlib
import gc
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from triage import wording
from triage.budget import JobBudget, JobLimits
from triage.model import (
    Analysis,
    Classification,
    Diagnosis,
    EventKind,
    FindingKind,
    FixRecommendation,
    InputSummary,
    ParsedSource,
    Source,
    SourceKind,
)
from triage.pool import (
    PARALLEL_FROM_BYTES,
    ParsePool,
    ProgressCallback,
    ReadProgress,
    poolable,
    settle,
)

if TYPE_CHECKING:
    from triage.classify.types import RuleHit
    from triage.knowledge import Knowledge


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
    # worker processes that parse a big bundle: None asks `pool.default_workers()`, 1 reads here
    workers: int | None = None
    # a bundle is parsed by those workers once this many bytes of its files are found (starting
    # them costs ~0.2 s, more than parsing a small bundle here); 0: always, where `workers` allows
    parallel_from_bytes: int = PARALLEL_FROM_BYTES


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
    parallel_from_bytes: int = PARALLEL_FROM_BYTES,
    workers_exit_later: bool = False,
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
    `pool.default_workers()`, which looks at this process; 1: no pool), started once
    `parallel_from_bytes` of files are found. `kb` is the run's knowledge (None: the shipped
    one), which the parsers here and in the workers read. `workers_exit_later`: once every
    result is in, return while the workers still exit (`pool.settle` waits for them).
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
            parallel_from_bytes,
            workers_exit_later,
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
    parallel_from_bytes: int,
    workers_exit_later: bool,
) -> list[ParsedSource]:
    from triage import ingest

    progress = ReadProgress(on_progress)
    pool = ParsePool(job_budget, workers, kb, parallel_from_bytes)
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
            elif poolable(source):
                pool.offer(i, source, None)
            else:  # an archive member: parsed now, and its temp space given back
                results[i] = _parse_here(source, None, progress, kb)
        fr_tail = fr_tail_for(sources) if fr_entries is None else (fr_entries or None)
        for i in held_back:
            if poolable(sources[i]):
                pool.offer(i, sources[i], fr_tail)
        pool.flush()
        if pool.running and while_workers_parse is not None:
            while_workers_parse()
        # Meanwhile, this process parses what cannot be shipped (archive members' dumps).
        here = [i for i in range(len(sources)) if results[i] is None and not pool.took(i)]
        _parse_all_here(sources, here, results, fr_tail, progress, kb)
        pool.collect(sources, results, progress)
        if workers_exit_later and all(parsed is not None for parsed in results):
            pool.close(wait=False)  # nothing is left to parse (or fork) here
    finally:
        pool.close()
        for i, source in enumerate(sources):
            if results[i] is not None and source.release is not None:
                source.release()
    left = [i for i in range(len(sources)) if results[i] is None]  # what a worker could not do
    _parse_all_here(sources, left, results, fr_tail, progress, kb)
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


def _parse_all_here(
    sources: Sequence[Source],
    indices: Sequence[int],
    results: list[ParsedSource | None],
    fr_tail: int | None,
    progress: ReadProgress,
    kb: Knowledge,
) -> None:
    """Parse `sources[indices]` in this process, flight-recorder dumps last and all together
    in one child process (`isolated`): a hostile pickle can crash or hang its decoder."""
    dumps = [i for i in indices if sources[i].kind is SourceKind.FLIGHT_RECORDER]
    for i in indices:
        if sources[i].kind is not SourceKind.FLIGHT_RECORDER:
            results[i] = _parse_here(sources[i], fr_tail, progress, kb)
    if dumps:
        from triage import isolated

        parsed = isolated.parse_dumps([sources[i] for i in dumps], fr_tail, kb, progress)
        for i, result in zip(dumps, parsed, strict=True):
            results[i] = result


def _parse_here(
    source: Source, fr_tail: int | None, progress: ReadProgress, kb: Knowledge
) -> ParsedSource:
    from triage import parsers

    progress.start(source.path)
    try:
        parsed = parsers.parse(source, fr_tail=fr_tail, kb=kb)
    finally:
        if source.release is not None:
            source.release()  # read: its temp space (a spooled archive member) goes back
    progress.done(source.size)
    return parsed


def diagnose(
    paths: Sequence[str],
    options: Options = Options(),
    on_progress: ProgressCallback | None = None,
) -> Diagnosis:
    """The main job: a folder / archive / files of one failed job -> one Diagnosis."""
    from triage import knowledge

    # One load of the knowledge for every stage, the parsers first: a team folder's rules
    # make their lines events in the files as in a paste. A broken one stops here, loudly.
    with _no_collections():  # start-up: long-lived objects alone, no garbage
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
        parallel_from_bytes=options.parallel_from_bytes,
        # the workers exit while the diagnosis is made, not before it starts
        workers_exit_later=True,
    )
    # What was read stays alive until the diagnosis is made: the cyclic GC is told to leave it
    # alone rather than walk it again and again while the later stages allocate (~0.1-0.3 s
    # on a 1,024-rank bundle), and given it back after, for a batch process's next job.
    gc.freeze()
    try:
        return diagnose_parsed(parsed, options, kb)
    finally:
        gc.unfreeze()
        settle()


@contextlib.contextmanager
def _no_collections() -> Iterator[None]:
    """The cyclic GC off meanwhile (as it was after): each collection walks every object the
    process holds, and what start-up makes (modules, the knowledge) all lives to the end."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def warm_later_stages(options: Options = Options(), kb: Knowledge | None = None) -> None:
    """Load what correlate, classify and recommend need first (their modules, the taxonomy,
    the rules, the models classify reads for any job): ~0.5 s that would otherwise wait until
    every file is read, done while the workers still parse."""
    from triage import analysis, knowledge, recommend, taxonomy  # noqa: F401 - loaded ahead
    from triage.classify import atlas, load_calibration, load_learned, neighbours, rules

    taxonomy.load()
    with contextlib.suppress(knowledge.KnowledgeError):  # reported in its turn, loudly
        kb = kb if kb is not None else knowledge.load(options.extra_rules_dirs)
        rules.ruleset(kb)
    # what classify reads of models/ whatever the job (each cached once loaded): the neighbour
    # index, the TF-IDF model, the calibration, the atlas's anchor table (~60 ms after the
    # last file otherwise). A file that cannot be used says so in its turn, as before.
    with contextlib.suppress(Exception):
        neighbours.load_index()
        load_learned("tfidf")
        load_calibration()
        if kb is not None:
            atlas.matcher(kb.atlas)


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
    from triage.classify import rule_examples
    from triage.redact import redact_diagnosis, redact_events

    # One load of the knowledge for every stage: a team folder's rules and playbook reach
    # the fix advice too. A broken knowledge base stops here, loudly, as does a team rule
    # that misses its own examples (run once per load).
    kb = kb if kb is not None else knowledge.load(options.extra_rules_dirs)
    rule_examples.check_team_examples(kb)
    # What a report can quote is masked in two steps of one module (triage/redact.py): the
    # secrets in the parsed text before the later stages cut quotes out of it, then every
    # string of the finished Diagnosis (paths, warnings, actions; hosts on request).
    jobs = [redact_events(parsed) for parsed in jobs]
    if not pasted:
        # a file several Slurm jobs appended to: only the last job's lines are this job's
        jobs = [analysis.this_job(parsed) for parsed in jobs]
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
            summary=wording.ended_well(outcome),
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
    summary = wording.summarize(labels, found, kb)
    if outcome is not None and outcome.fault_too and not pasted:
        summary = wording.fault_besides(outcome, summary)
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
        FindingKind.FIRST_FAILURE,
        FindingKind.CASCADE,
        FindingKind.HANG,
        FindingKind.LAGGING_RANK,
        FindingKind.MISSING_RANK,
        FindingKind.COLLECTIVE_MISMATCH,
        FindingKind.RANK_EXIT,
        FindingKind.STACK_OUTLIER,
        FindingKind.PROGRESS_DIVERGENCE,
    }
)

# What carries no evidence of a failure by itself: a note that an input could not be read,
# and the versions of an environment report.
_NOT_EVIDENCE = (EventKind.INPUT_WARNING, EventKind.ENV_REPORT)


def has_evidence(parsed: Sequence[ParsedSource]) -> bool:
    """Did any input of a bundle hold something to diagnose: a log line, a traceback, a dump,
    or a process's log read whole that held none of them (a quiet log says the job printed
    nothing triage knows, not that nothing was read)? (A text file in which the parsers found
    nothing, a README, is not evidence.)"""
    return any(ev.kind not in _NOT_EVIDENCE for ps in parsed for ev in ps.events) or any(
        ps.source.kind.process_output and ps.lines > 0 for ps in parsed
    )


def no_evidence(inputs: tuple[InputSummary, ...], kb: Knowledge | None = None) -> Diagnosis:
    """The diagnosis of a folder with nothing to read: said plainly, with what to collect
    (the collect-next advice of `kb`, None: the shipped one)."""
    from triage import knowledge

    advice = (kb if kb is not None else knowledge.shipped()).collect_next
    nothing = knowledge.Situation()  # as if nothing was read: every kind of evidence is missing
    return Diagnosis(
        summary=wording.nothing_to_read(len(inputs), advice.asks(nothing)),
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
    from triage.classify import rule_examples, rules

    kb = knowledge.load(extra_rules_dirs)
    rule_examples.check_team_examples(kb)
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
