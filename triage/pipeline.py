"""Wires the stages together: ingest -> parse -> correlate -> classify -> recommend.

The CLI, the batch runner and the tests call these functions; no stage calls another.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from triage.model import (
    Analysis,
    Classification,
    Diagnosis,
    FixRecommendation,
    InputSummary,
    ParsedSource,
    ScoredLabel,
)

# (sources done, bytes done, path now being read)
ProgressCallback = Callable[[int, int, str], None]


@dataclass(frozen=True)
class Options:
    use_embeddings: bool = True
    extra_rules_dirs: tuple[str, ...] = ()


def read_inputs(
    paths: Sequence[str], on_progress: ProgressCallback | None = None
) -> list[ParsedSource]:
    """Ingest and parse every input under `paths`, in a stable order."""
    from triage import ingest, parsers

    parsed: list[ParsedSource] = []
    done_bytes = 0
    for source in ingest.discover(paths):
        if on_progress is not None:
            on_progress(len(parsed), done_bytes, source.path)
        parsed.append(parsers.parse(source))
        done_bytes += source.size
    if on_progress is not None:
        on_progress(len(parsed), done_bytes, "")
    return parsed


def diagnose(
    paths: Sequence[str],
    options: Options = Options(),
    on_progress: ProgressCallback | None = None,
) -> Diagnosis:
    """The main job: a folder / archive / files of one failed job -> one Diagnosis."""
    return diagnose_parsed(read_inputs(paths, on_progress), options)


def diagnose_parsed(parsed: Sequence[ParsedSource], options: Options = Options()) -> Diagnosis:
    return diagnose_many([parsed], options)[0]


def diagnose_many(
    jobs: Sequence[Sequence[ParsedSource]], options: Options = Options()
) -> list[Diagnosis]:
    """Correlate, classify and recommend for several jobs (classified in one batch)."""
    from triage import analysis, classify, recommend

    found = [analysis.correlate(parsed) for parsed in jobs]
    labels = classify.classify_many(
        list(zip(jobs, found, strict=True)),
        use_embeddings=options.use_embeddings,
        extra_rules_dirs=options.extra_rules_dirs,
    )
    return [
        _diagnosis(parsed, job_found, job_labels, recommend.recommend(job_labels, job_found))
        for parsed, job_found, job_labels in zip(jobs, found, labels, strict=True)
    ]


def _diagnosis(
    parsed: Sequence[ParsedSource],
    found: Analysis,
    labels: Classification,
    fixes: tuple[FixRecommendation, ...],
) -> Diagnosis:
    return Diagnosis(
        summary=summarize(labels, found),
        symptoms=labels.symptoms,
        root_causes=labels.root_causes,
        stage=labels.stage,
        fix_patterns=fixes if labels.symptoms or labels.root_causes else (),
        first_failure=found.first_failure,
        culprit_ranks=found.culprit_ranks,
        hang=found.hang,
        evidence=labels.evidence,
        similar_cases=labels.similar_cases,
        inputs=tuple(_input_summary(p) for p in parsed),
        findings=found.findings,
        timeline=found.timeline,
    )


def explain(text: str, options: Options = Options()) -> Diagnosis:
    """`triage explain`: a pasted error or issue body -> Diagnosis."""
    return explain_many([text], options)[0]


def explain_many(texts: Iterable[str], options: Options = Options()) -> list[Diagnosis]:
    """Batch form of `explain`: the classifier embeds all signatures in one call."""
    from triage import parsers

    jobs = [
        [parsers.parse_text(text, name="<pasted>" if i == 0 else f"<pasted {i + 1}>")]
        for i, text in enumerate(texts)
    ]
    return diagnose_many(jobs, options)


def summarize(labels: Classification, found: Analysis) -> str:
    """One sentence: what happened, why, and who started it."""
    if not labels.symptoms and not labels.root_causes:
        return labels.abstain_reason or (
            "Not enough evidence to name a cause: collect every rank's log with "
            "NCCL_DEBUG=INFO, flight-recorder dumps (TORCH_FR_BUFFER_SIZE=2000, "
            "TORCH_NCCL_DUMP_ON_TIMEOUT=1) and py-spy dumps of every rank while it hangs."
        )
    parts: list[str] = []
    if labels.symptoms:
        parts.append(_label_phrase(labels.symptoms[0]))
    if labels.root_causes:
        parts.append(f"most likely cause: {_label_phrase(labels.root_causes[0], lower=True)}")
    sentence = "; ".join(parts)
    who = _who(found)
    return f"{sentence}{who}."


def _label_phrase(label: ScoredLabel, lower: bool = False) -> str:
    name = label.name[0].lower() + label.name[1:] if lower else label.name
    return f"{name} ({label.id}, {label.score:.0%})"


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


def _input_summary(parsed: ParsedSource) -> InputSummary:
    source = parsed.source
    rank, host = source.rank, source.host
    if rank is None:
        ranks = Counter(e.rank for e in parsed.events if e.rank is not None)
        if len(ranks) == 1:
            rank = next(iter(ranks))
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
