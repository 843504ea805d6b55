"""What a worker's exit status means (`kind: exits`), and the launcher's restart lines.

    kind: exits
    codes:                      # negative: killed by that signal
      -9: {meaning: "SIGKILL: killed from outside ...", role: self_inflicted}
      -15: {meaning: "SIGTERM: stopped by the launcher ...", role: launcher_killed}
      1: {meaning: "exit 1: the worker raised an exception"}
    restarts:                   # the elastic agent's lines that say it restarted the workers
      pattern: 'Worker group FAILED\\. (?P<left>\\d+)/(?P<max>\\d+) attempts left|...'
      examples: {match: [...], no_match: [...]}
    not_started:                # the launcher could not start the program (slurmstepd's execve)
      pattern: 'execve\\(\\): (?P<program>.+?): (?P<reason>No such file or directory|...)'
      errno: {No such file or directory: 2}   # the status the task then ends with
      examples: {match: [...], no_match: [...]}

`role`: `self_inflicted` exits are evidence of the rank's own failure (the culprit vote weighs
them); `launcher_killed` ones mark a survivor the launcher stopped. A code the table does not
name is read from the OS's signal names. Shipped only.
"""

from __future__ import annotations

import signal as _signal
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import regex

from triage.knowledge.problems import check_examples, compile_regex

KIND = "exits"
ROLES = ("self_inflicted", "launcher_killed")
_KEYS = {"kind", "codes", "restarts", "not_started"}


@dataclass(frozen=True, eq=False)  # hashed by identity: one per load
class ExitCodes:
    meanings: Mapping[int, str] = field(default_factory=dict)
    self_inflicted: frozenset[int] = frozenset()
    launcher_killed: frozenset[int] = frozenset()
    # `max`: the restarts configured, where the line says
    restarts: regex.Pattern[str] | None = None
    # a line that says the program of a task could not be started, naming `reason`, and the
    # exit status each reason ends the task with (its errno)
    not_started: regex.Pattern[str] | None = None
    not_started_status: Mapping[str, int] = field(default_factory=dict)

    def meaning(self, exitcode: int | None) -> str:
        """What a person should read into an exit status."""
        if exitcode is None:
            return "exit status unknown"
        if exitcode in self.meanings:
            return self.meanings[exitcode]
        if exitcode < 0:
            name = signal_name(exitcode, None)
            return (
                f"{name}: killed by signal {-exitcode}"
                if name
                else (f"killed by signal {-exitcode}")
            )
        if 128 < exitcode <= 128 + 64 and (name := signal_name(128 - exitcode, None)):
            # a shell, Slurm or LSF reports a death by a signal as 128 + its number
            return f"exit {exitcode} (128+{exitcode - 128}): killed by {name}"
        return f"exit {exitcode}" + (": the worker failed" if exitcode else ": clean exit")


def signal_name(exitcode: int | None, given: str | None) -> str | None:
    """The signal an exit names: the one the launcher said, else the OS's name of -code."""
    if given:
        return given
    if exitcode is not None and exitcode < 0:
        try:
            return _signal.Signals(-exitcode).name
        except ValueError:
            return None
    return None


def build(body: Mapping[str, Any], report: Callable[[str, str], None], team: bool) -> ExitCodes:
    unknown = set(body) - _KEYS
    if unknown:
        report("", f"unknown key(s) {sorted(unknown)}; allowed: {sorted(_KEYS - {'kind'})}")
    meanings: dict[int, str] = {}
    roles: dict[str, set[int]] = {role: set() for role in ROLES}
    codes = body.get("codes")
    if not isinstance(codes, dict) or not codes:
        report("codes", "needs a mapping of exit code to its meaning")
        codes = {}
    for code, spec in codes.items():
        item = f"code {code!r}"
        if isinstance(code, bool) or not isinstance(code, int):
            report(item, "an exit code is a whole number (negative: the signal)")
            continue
        if not isinstance(spec, dict) or not isinstance(spec.get("meaning"), str):
            report(item, "needs `meaning` (what a person should read into it)")
            continue
        if set(spec) - {"meaning", "role"}:
            report(item, f"unknown key(s) {sorted(set(spec) - {'meaning', 'role'})}")
        role = spec.get("role")
        if role is not None and role not in ROLES:
            report(item, f"role {role!r}: one of {list(ROLES)}")
        elif role is not None:
            roles[role].add(code)
        meanings[code] = spec["meaning"]
    return ExitCodes(
        meanings=meanings,
        self_inflicted=frozenset(roles["self_inflicted"]),
        launcher_killed=frozenset(roles["launcher_killed"]),
        restarts=_restarts(body.get("restarts"), report),
        **_not_started(body.get("not_started"), report),
    )


def _restarts(spec: Any, report: Callable[[str, str], None]) -> regex.Pattern[str] | None:
    if not isinstance(spec, dict) or not isinstance(spec.get("pattern"), str):
        report("restarts", "needs `pattern` and `examples`")
        return None
    pattern = compile_regex(spec["pattern"], "restarts", report, regex.I)
    if pattern is None:
        return None
    check_examples(pattern, spec.get("examples"), "restarts", report)
    return pattern


def _not_started(spec: Any, report: Callable[[str, str], None]) -> dict[str, Any]:
    if spec is None:
        return {}
    if not isinstance(spec, dict) or not isinstance(spec.get("pattern"), str):
        report("not_started", "needs `pattern`, `errno` and `examples`")
        return {}
    errno = spec.get("errno")
    if not isinstance(errno, dict) or not all(
        isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)
        for k, v in errno.items()
    ):
        report("not_started", "`errno` maps each reason the line names to the exit status")
        return {}
    pattern = compile_regex(spec["pattern"], "not_started", report)
    if pattern is None:
        return {}
    if "reason" not in pattern.groupindex:
        report("not_started", "the pattern names the failure's `reason` (?P<reason>...)")
        return {}
    check_examples(pattern, spec.get("examples"), "not_started", report)
    return {"not_started": pattern, "not_started_status": dict(errno)}


def merge(values: Sequence[ExitCodes]) -> ExitCodes:
    return values[0] if values else ExitCodes()
