"""One job's lines out of a file that several Slurm jobs wrote to, one after another.

An `#SBATCH --output` without `%j` appends: the file a user hands over may begin with the
output of earlier runs of the same script, their failures and cancels included. A job's end
names its id (`*** JOB 263121 ON dgx-15 CANCELLED AT ...`, `*** STEP 263121.0 ...`); the last
such line is this job's, and whatever stands up to the last end of another id was written by an
earlier job. Those events are left out before correlate, so no stage (the outcome, the first
failure, the classifier's evidence) reads an earlier job's failure as this one's; the source
keeps where they were (`ParsedSource.earlier_jobs`) for the report to say so. Without two ids
to tell them apart, a file is read as one job.

`nohup python train.py >> nohup.out` appends too, with no id on any line. There the sign is a
process's death: an uncaught exception ends the Python process that raised it (its traceback
runs from the script's top level, `<module>`), so training progress and the script's own end
line later in a file that one process wrote (no rank on any line) were printed by a later run
of the script, when that run ended well, went on with no error to the file's end, or died by
itself of an uncaught exception too (ranks that share a file untagged print for a moment
after one rank's death, until the launcher, whose own error lines follow, stops them).
Whatever stands up to the last such death is an earlier run's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from triage.analysis.ranks import ended_its_process
from triage.model import EarlierJobs, Event, EventKind, Level, ParsedSource, SourceKind


def this_job(parsed: Sequence[ParsedSource]) -> list[ParsedSource]:
    """The sources with the events earlier Slurm jobs wrote at their head left out."""
    return [_this_job_only(ps) for ps in parsed]


def _this_job_only(ps: ParsedSource) -> ParsedSource:
    earlier = _earlier_jobs(ps) or _earlier_runs(ps)
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


def _earlier_runs(ps: ParsedSource) -> EarlierJobs | None:
    """Earlier runs of a script in a file one process wrote, each ended by an uncaught
    exception before a later run trained: the later run printed its own end line, or went on
    with no error to the file's end."""
    if ps.source.kind is SourceKind.TEXT or ps.source.rank is not None:
        return None
    if any(ev.rank is not None for ev in ps.events):
        return None  # ranks share the file: one rank's death is not the file's end
    progress = [ev.line for ev in ps.events if ev.kind is EventKind.PROGRESS and ev.line]
    deaths = [
        ev.end_line or ev.line for ev in ps.events if ev.line is not None and ended_its_process(ev)
    ]
    # the last death a later run's training followed
    last = max((d for d in deaths if any(line > d for line in progress)), default=None)
    if last is None:
        return None
    later = [ev for ev in ps.events if ev.line is not None and ev.line > last]
    ended_well = any(
        ev.notice is not None
        and ev.notice.end == "succeeded"
        and ev.notice.target_pid is None  # the script's own words, not a launcher's count
        for ev in later
    )
    # Untagged ranks that share a file go on printing for a moment after one rank's death,
    # until the launcher, whose own error lines follow, stops them: a later run is one that
    # ended well, met no error at all, or died by itself as the earlier ones did
    if not ended_well and any(
        ev.level is Level.ERROR and not ended_its_process(ev) for ev in later
    ):
        return None
    return EarlierJobs(last, sum(1 for d in deaths if d <= last), by="exception")
