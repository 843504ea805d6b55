"""The log parser's line templates (`rules/templates.yaml`) as data: every example line makes
its event through the real parser, in a small file and in a big log (where only the marker
scan's lines are read), and no needle of the scan is in healthy progress output."""

from __future__ import annotations

import dataclasses
import io

import pytest

from triage import knowledge
from triage.knowledge.templates import Template
from triage.model import EventKind, ParsedSource, Source, SourceKind
from triage.parsers import rank_log

TEMPLATES = knowledge.load().templates
HEALTHY = "\n".join(TEMPLATES.healthy) + "\n"
BIG = HEALTHY * (rank_log.SCAN_ALL_BELOW // len(HEALTHY) + 1)


def _parse(text: str) -> ParsedSource:
    data = text.encode("utf-8")
    source = Source("rank0.log", SourceKind.RANK_LOG, len(data), lambda: io.BytesIO(data))
    return rank_log.parse(source)


def _made(template: Template, parsed: ParsedSource, line: str) -> list[dict]:
    """What the events of the template's kind made from this line say (their notices)."""
    return [
        dataclasses.asdict(e.notice) if e.notice is not None else {}
        for e in parsed.events
        if e.kind is template.event and line.strip().endswith(e.text.strip()[-40:])
    ]


@pytest.mark.parametrize("template", TEMPLATES.templates, ids=[t.id for t in TEMPLATES.templates])
def test_every_template_example_makes_its_event_through_the_parser(template: Template) -> None:
    for line, attrs in template.examples:
        for where, text in (("alone", line + "\n"), ("in a big log", BIG + line + "\n" + BIG)):
            made = _made(template, _parse(text), line)
            assert made, f"{template.id}: no {template.event.value} event from {line!r} {where}"
            assert any(attrs.items() <= got.items() for got in made), (template.id, where, made)
    for line in template.no_match:
        assert not _made(template, _parse(line + "\n"), line), (template.id, line)


def test_no_needle_of_the_big_log_scan_is_in_healthy_progress_output() -> None:
    # a needle in every iteration line would make the scan decode the whole log
    markers = rank_log.scan_tables().markers
    assert markers.find(HEALTHY.encode("utf-8")) == []
    assert markers.find_plain(HEALTHY.encode("utf-8")) == []


def test_a_template_without_a_literal_for_the_scan_is_refused(tmp_path) -> None:
    from triage.knowledge import templates

    problems: list[tuple[str, str]] = []
    built = templates.build(
        {
            "kind": "templates",
            "error_words": "Error",
            "warning_words": "Warning",
            "fatal_in_info": "Traceback",
            "templates": [
                {
                    "id": "no-literal",
                    "pattern": r"\d+ (?:a|b)",
                    "event": "agent",
                    "level": "error",
                    "examples": [{"line": "1 a"}],
                },
                {"id": "odd", "pattern": "Rendezvous(", "event": "nope", "level": "loud"},
            ],
        },
        lambda item, message: problems.append((item, message)),
        team=False,
    )
    assert built.templates == ()
    found = dict(problems)
    assert "marker scan" in found["template 'no-literal'"]
    assert any(i == "template 'odd'" and "bad regex" in m for i, m in problems)


def test_a_template_fact_the_event_has_no_field_for_is_refused() -> None:
    from triage.knowledge import templates

    problems: list[tuple[str, str]] = []
    built = templates.build(
        {
            "kind": "templates",
            "error_words": "Error",
            "warning_words": "Warning",
            "fatal_in_info": "Traceback",
            "templates": [
                {
                    "id": "typo",
                    "pattern": r"worker (?P<code>\d+) exited",
                    "event": "rank_exit",
                    "level": "error",
                    "attrs": {"exit_code": "$code:int", "launcher": "torchrun"},
                    "examples": [{"line": "worker 3 exited"}],
                },
            ],
        },
        lambda item, message: problems.append((item, message)),
        team=True,
    )
    assert built.templates == ()
    assert ("template 'typo'", "`attrs.exit_code` is not a field of a line notice") in problems


def test_the_needles_are_derived_never_listed() -> None:
    needles = set(rank_log.scan_tables().markers._spec)
    # a template's literal, an error word, a record opener, a rule's keyword, NCCL lines
    assert {"killed process ", "out of memory", "traceback (most recent call last):"} <= needles
    assert "nccl " in needles and "warn" in needles
    assert any("as pytorch extensions root" in n for n in needles)
    # `loss scale` alone is in every Megatron iteration line; only the full phrase is a needle
    assert "loss scale" not in needles and "loss scale already at minimum" in needles
    assert all(EventKind.PROGRESS is not t.event for t in TEMPLATES.templates)


@pytest.mark.parametrize(
    ("line", "is_error"),
    [
        # a user's words about the absence of errors: no error line
        ("My training is slow and then it stops, no error. Any idea?", False),
        ("Epoch 3 finished without errors", False),
        # ... unless another error word is there
        ("the job failed with no error message", True),
        ("ValueError: no errors allowed in a strict run", True),
        # a compiler's flags in torch's build settings, which OpenMMLab's environment header
        # prints at every start: no error line
        (
            "  - Build settings: BLAS_INFO=mkl, BUILD_TYPE=Release, CUDA_VERSION=10.2, CXX_FLAGS="
            " -Wno-deprecated -Wall -Wextra -Werror=return-type -Wno-error=deprecated-declarations"
            " -Wno-error=pedantic -Werror=format -Wno-stringop-overflow, USE_NCCL=ON,",
            False,
        ),
        # ... but the compiler's own error about one still is
        ("c++: error: unrecognized command-line option '-Wno-error=pedantic'", True),
        # argparse's usage naming a setting's choices; its own error line is one
        ("                     [--log_level {debug,info,warning,error,critical,passive}]", False),
        ("train_bash.py: error: argument --fp16: Truthy value expected: got s", True),
        # a path that names torchelastic's error file
        (
            "/env/lib/python3.10/site-packages/bitsandbytes/cuda_setup/main.py:136: UserWarning:"
            " WARNING: The following directories listed in your path were found to be"
            " non-existent: {PosixPath('/tmp/torchelastic_p2l0vgfh/none_bkqct2vb/attempt_0/1/"
            "error.json')}",
            False,
        ),
        ("RuntimeError: could not write /scratch/run/errors.log: disk quota exceeded", True),
    ],
)
def test_error_words_that_say_no_error_make_no_error_line(line: str, is_error: bool) -> None:
    from triage.parsers import parse_text

    events = parse_text(line + "\n", kb=knowledge.load()).events
    assert any(e.level.value == "error" for e in events) is is_error, events
