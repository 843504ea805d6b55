"""How jobs end (`kind: outcome`): what makes a job succeeded, stopped, failed or incomplete.

    kind: outcome
    stop_exceptions: [KeyboardInterrupt, SignalException]   # raised because of a stop
    outside_signals: [SIGTERM, SIGINT, SIGHUP]              # sent to a job to stop it
    stop_exit_codes: [-15, -2, 143, 130]                    # the exits such a stop leaves
    fault_signals: [SIGKILL, SIGSEGV, SIGBUS]               # a job's own processes die of
    scheduler_reasons:                                      # Slurm's `DUE TO <reason>`, ...
      TIME LIMIT: {outcome: stopped, why: "the scheduler ended it at its time limit"}
      "": {outcome: stopped, why: "a user cancelled it (scancel)",
           after_failure: "Slurm cancelled it (no reason given)"}   # after a failure shown
      NODE FAILURE: {outcome: failed, why: "a node failed"}
    end_markers:                                            # `end:` attrs of line templates
      succeeded: "the training loop reported its end"
    printed_and_ignored:                                    # a traceback's outermost frame
      - {file: multiprocessing/util.py, function: _run_finalizers}
      - {function: __del__}

The lines themselves are line templates (`rules/templates.yaml`) whose events carry `end:
succeeded|stopped` and, for stops, `stop:` (the reason's key here); correlate
(triage.analysis.outcome) weighs them against the failures it found. Shipped only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import regex

from triage.knowledge.problems import compile_alternation

KIND = "outcome"
_KEYS = {
    "kind",
    "stop_exceptions",
    "outside_signals",
    "scheduler_reasons",
    "stop_reasons",
    "hang_deaths",
    "stop_exit_codes",
    "fault_signals",
    "printed_and_ignored",
    "time_limits",
    "exit_reports",
    "output_streams",
}
_OUTCOMES = {"stopped", "failed"}


@dataclass(frozen=True)
class Reason:
    outcome: str  # stopped | failed
    why: str  # a clause: "the scheduler ended it at its time limit"
    # the clause after a failure the logs show first, where the scheduler's words fit that
    # failure's end as well (a cancel with no reason follows an MPI abort too); None: `why`
    after_failure: str | None = None


@dataclass(frozen=True)
class Ends:
    stop_exceptions: frozenset[str] = frozenset()
    outside_signals: frozenset[str] = frozenset()
    # Slurm's `DUE TO X` (upper case; "" for none: a user's scancel), LSF's TERM_ codes, ...
    scheduler_reasons: Mapping[str, Reason] = field(default_factory=dict)
    # the scheduler reasons (keys above) that are a time limit running out
    time_limits: frozenset[str] = frozenset()
    # a line that reports a process's end (it did not sit waiting)
    exit_reports: regex.Pattern[str] | None = None
    # the `stop:` attr of an end-marker template -> why, in words
    stop_reasons: Mapping[str, str] = field(default_factory=dict)
    # lines of a process that died because it waited (the watchdog's abort, the launcher's
    # SIGTERM after it): in a job that hung, the hang's consequence
    hang_deaths: regex.Pattern[str] | None = None
    # exit codes a stop on purpose leaves (a killed SIGTERM/SIGINT/SIGHUP, as a launcher or a
    # shell reports it)
    stop_exit_codes: frozenset[int] = frozenset()
    # signals the job's own processes die of (a fault, never a stop)
    fault_signals: frozenset[str] = frozenset()
    # (file path's end or "" for any, function) of the outermost frame of a traceback Python
    # prints and goes on from (multiprocessing's exit-time finalizers, `__del__`): no fault
    printed_and_ignored: tuple[tuple[str, str], ...] = ()
    # the end of a file's name that makes it one output stream of a job (`.out`, `.err`, PBS's
    # `.o<id>`); what is left of the path, with the group `id`, names the job both belong to
    output_streams: regex.Pattern[str] | None = None

    def job_stream(self, path: str) -> str | None:
        """The job an output-stream file belongs to (`logs/job-42` for `logs/job-42.out` and
        `logs/job-42.err`), None for a file of no such name."""
        m = self.output_streams.search(path) if self.output_streams is not None else None
        if m is None:
            return None
        return f"{path[: m.start()]}\0{m.groupdict().get('id') or ''}"

    def stop_exception(self, exc_type: str | None) -> bool:
        """A Python exception raised because somebody stopped the job (Ctrl-C, a signal)."""
        if not exc_type:
            return False
        return exc_type in self.stop_exceptions or exc_type.rsplit(".", 1)[-1] in (
            self.stop_exceptions
        )

    def ignored_traceback(self, outermost: tuple[str, str] | None) -> bool:
        """A traceback Python printed and went on from, by its outermost (file, function)."""
        if outermost is None:
            return False
        path, function = outermost
        path = path.replace("\\", "/")
        return any(
            function == func and (not end or path == end or path.endswith("/" + end))
            for end, func in self.printed_and_ignored
        )


def build(body: Mapping[str, Any], report: Callable[[str, str], None], team: bool) -> Ends:
    unknown = set(body) - _KEYS
    if unknown:
        report("", f"unknown key(s) {sorted(unknown)}; allowed: {sorted(_KEYS - {'kind'})}")
    reasons: dict[str, Reason] = {}
    for key, spec in (body.get("scheduler_reasons") or {}).items():
        item = f"scheduler_reasons {key!r}"
        if (
            not isinstance(spec, dict)
            or spec.get("outcome") not in _OUTCOMES
            or not spec.get("why")
        ):
            report(item, f"needs outcome ({' or '.join(sorted(_OUTCOMES))}) and why")
            continue
        after = spec.get("after_failure")
        if after is not None and not isinstance(after, str):
            report(item, "`after_failure` must be a clause")
            after = None
        reasons[str(key or "").upper()] = Reason(str(spec["outcome"]), str(spec["why"]), after)
    stops = body.get("stop_reasons") or {}
    if not isinstance(stops, dict) or not all(isinstance(v, str) for v in stops.values()):
        report("stop_reasons", "must map a stop key to its wording")
        stops = {}
    return Ends(
        hang_deaths=_alternation(
            body.get("hang_deaths"), "hang_deaths", report, regex.M | regex.I, required=True
        ),
        stop_exceptions=frozenset(_names(body.get("stop_exceptions"), "stop_exceptions", report)),
        outside_signals=frozenset(_names(body.get("outside_signals"), "outside_signals", report)),
        scheduler_reasons=reasons,
        stop_reasons={str(k): v for k, v in stops.items()},
        stop_exit_codes=frozenset(_codes(body.get("stop_exit_codes"), report)),
        fault_signals=frozenset(_names(body.get("fault_signals"), "fault_signals", report)),
        printed_and_ignored=_frames(body.get("printed_and_ignored"), report),
        time_limits=_time_limits(body.get("time_limits"), reasons, report),
        exit_reports=_alternation(body.get("exit_reports"), "exit_reports", report),
        output_streams=_alternation(body.get("output_streams"), "output_streams", report),
    )


def _alternation(
    raw: Any,
    item: str,
    report: Callable[[str, str], None],
    flags: int = regex.I,
    required: bool = False,
) -> regex.Pattern[str] | None:
    """A list of patterns as one pattern that matches where any of them does (None for none;
    a missing `required` list is reported)."""
    if raw is None and not required:
        return None
    return compile_alternation(_names(raw, item, report), item, report, flags)


def _time_limits(
    raw: Any, reasons: Mapping[str, Reason], report: Callable[[str, str], None]
) -> frozenset[str]:
    if raw is None:
        return frozenset()
    names = {n.upper() for n in _names(raw, "time_limits", report)}
    for name in sorted(names - set(reasons)):
        report("time_limits", f"{name!r} is no key of scheduler_reasons")
    return frozenset(names)


def _frames(raw: Any, report: Callable[[str, str], None]) -> tuple[tuple[str, str], ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(
        isinstance(x, dict)
        and "function" in x
        and set(x) <= {"file", "function"}
        and all(isinstance(v, str) and v for v in x.values())
        for x in raw
    ):
        report("printed_and_ignored", "needs a list of {function, file (optional)}")
        return ()
    return tuple((str(x.get("file", "")), str(x["function"])) for x in raw)


def _codes(raw: Any, report: Callable[[str, str], None]) -> list[int]:
    if (
        not isinstance(raw, list)
        or not raw
        or not all(isinstance(x, int) and not isinstance(x, bool) for x in raw)
    ):
        report("stop_exit_codes", "needs a list of exit codes")
        return []
    return list(raw)


def _names(raw: Any, item: str, report: Callable[[str, str], None]) -> list[str]:
    if not isinstance(raw, list) or not all(isinstance(x, str) for x in raw) or not raw:
        report(item, "needs a list of names")
        return []
    return list(raw)


def merge(values: Sequence[Ends]) -> Ends:
    return values[0] if values else Ends()
