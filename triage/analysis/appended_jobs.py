"""One job's lines out of a file that several Slurm jobs wrote to, one after another.

An `#SBATCH --output` without `%j` appends: the file a user hands over may begin with the
output of earlier runs of the same script, their failures and cancels included. A job's end
names its id (`*** JOB 263121 ON dgx-15 CANCELLED AT ...`, `*** STEP 263121.0 ...`); the last
such line is this job's, and whatever stands up to the last end of another id was written by an
earlier job. Those events are left out before correlate, so no stage (the outcome, the first
failure, the classifier's evidence) reads an earlier job's failure as this one's; the source
keeps where they were (`ParsedSource.earlier_jobs`) for the report to say so. Without two ids
to tell them apart, a file is read as one job.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from triage.model import EarlierJobs, Event, ParsedSource


def this_job(parsed: Sequence[ParsedSource]) -> list[ParsedSource]:
    """The sources with the events earlier Slurm jobs wrote at their head left out."""
    return [_this_job_only(ps) for ps in parsed]


def _this_job_only(ps: ParsedSource) -> ParsedSource:
    earlier = _earlier_jobs(ps)
    if earlier is None:
        return ps
    kept = tuple(ev for ev in ps.events if ev.line is None or ev.line > earlier.last_line)
    return replace(ps, events=kept, earlier_jobs=earlier)


def _earlier_jobs(ps: ParsedSource) -> EarlierJobs | None:
    marks = sorted(
        (ev.line, job)
        for ev in ps.events
        if ev.line is not None and (job := _slurm_job(ev)) is not None
    )
    if len(marks) < 2:
        return None
    this = marks[-1][1]
    others = [(line, job) for line, job in marks if job != this]
    if not others:
        return None
    return EarlierJobs(max(line for line, _ in others), len({job for _, job in others}))


def _slurm_job(ev: Event) -> str | None:
    """The Slurm job id a scheduler's end line names (`1234` of `STEP 1234.0`)."""
    notice = ev.notice
    if notice is None or not notice.slurm or not notice.job:
        return None
    return notice.job.split(".")[0]
