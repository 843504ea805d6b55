"""triage run as a user runs it, for tests: `triage explain` through click's runner, and code
that must run in a process of its own (a decoder that may crash or hang takes only that one)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import triage
from triage.cli import main

# the checkout the test runs from, put first on the child's path
ROOT = str(Path(triage.__file__).resolve().parents[1])


def explained(text: str, *flags: str) -> dict[str, Any]:
    """`triage explain [FLAGS] TEXT --format json`, its exit checked."""
    result = CliRunner().invoke(main, ["explain", *flags, "--format", "json", text])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def assert_top(d: dict[str, Any], field: str, *accepted: str) -> None:
    """The diagnosis's first `field` label ("symptoms", "root_causes") is one of `accepted`;
    the failure message quotes the report's summary line."""
    top = d[field][0]["id"] if d[field] else None
    assert top in accepted, (field, top, d["summary"])


def advice_of(d: dict[str, Any]) -> str:
    """Every action of a diagnosis's fix patterns, as one text (what the user is told to do)."""
    return " ".join(a for f in d["fix_patterns"] for a in f["actions"])


def assert_the_check_names(text: str, symptom: str, cause: str, advice: str) -> dict[str, Any]:
    """A paste whose library check names its mechanism, read by `triage explain --no-embed`:
    its top symptom and root cause are among `symptom` and `cause` (alternatives split by "/")
    and the fixes say `advice`; the diagnosis, for more checks."""
    d = explained(text, "--no-embed")
    assert_top(d, "symptoms", *symptom.split("/"))
    assert_top(d, "root_causes", *cause.split("/"))
    told = advice_of(d)
    assert advice in told, told
    return d


def assert_the_check_decides(text: str, symptom: str, cause: str, advice: str) -> None:
    """`assert_the_check_names`, and the cause is stated with confidence (>= 0.8), not as a
    guess."""
    d = assert_the_check_names(text, symptom, cause, advice)
    assert d["root_causes"][0]["score"] >= 0.8, d["root_causes"][:2]


def cases_with_known_misses(
    cases: list[tuple[Any, ...]], known_misses: dict[str, str]
) -> list[Any]:
    """Parameters of `(id, *args)` cases; a case the shipped models get wrong today (its id in
    `known_misses`, with the reason) is a strict expected failure: it must keep failing until
    it is fixed, and is never left out."""
    return [
        pytest.param(
            *c[1:],
            id=c[0],
            marks=[pytest.mark.xfail(reason=known_misses[c[0]], strict=True)]
            if c[0] in known_misses
            else [],
        )
        for c in cases
    ]


def run_elsewhere(code: str, *args: str, prelude: str = "") -> subprocess.CompletedProcess[str]:
    """`code` (after `import sys` and `prelude`) in a fresh interpreter with `args` as
    `sys.argv[1:]`; a run past 150 s fails the test rather than hanging the suite."""
    try:
        return subprocess.run(
            [sys.executable, "-c", "import sys\n" + prelude + code, *args],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": ROOT},
            timeout=150,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("triage did not finish")
