"""`triage explain --jsonl` answers every input line, in order, whatever one line holds: a
service feeding it issue bodies must never lose a whole batch to one hostile line."""

from __future__ import annotations

import json

from click.testing import CliRunner

from triage.cli import main

OOM = (
    "Traceback (most recent call last):\n"
    '  File "/workspace/train.py", line 40, in <module>\n'
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
)


def _rows(stdin: bytes) -> list[dict]:
    result = CliRunner().invoke(main, ["explain", "--jsonl", "--no-embed"], input=stdin)
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in result.stdout.splitlines()]


def test_one_hostile_line_does_not_sink_the_others_and_every_line_gets_its_row() -> None:
    deep = "[" * 100_000 + "]" * 100_000  # json.loads raises RecursionError on this
    deep_id = (
        json.dumps({"id": "deep-id", "text": OOM})[:-1] + ', "x": ' + "[" * 5000 + "]" * 5000 + "}"
    )
    lines = [
        json.dumps({"id": "first", "text": OOM}).encode(),
        b"",  # a blank line still gets a row: callers zip input and output lines
        deep.encode(),
        json.dumps({"id": 7, "text": 42}).encode(),  # parsed, but no text: the id comes back
        deep_id.encode(),
        b"\xff\xfe not utf-8 \x80",
        json.dumps({"id": "last", "text": OOM}).encode(),
    ]
    rows = _rows(b"\n".join(lines) + b"\n")
    assert len(rows) == len(lines)
    assert rows[0]["id"] == "first" and rows[0]["diagnosis"]["symptoms"][0]["id"] == "S14"
    assert rows[1] == {"id": None, "error": "line 2: blank line, nothing to explain"}
    assert rows[2]["id"] is None and "line 3" in rows[2]["error"]
    assert rows[3]["id"] == 7 and "text" in rows[3]["error"]
    assert rows[4]["id"] is None and "line 5: JSON nested too deep" in rows[4]["error"]
    assert rows[5]["id"] is None and "line 6" in rows[5]["error"]
    assert rows[6]["id"] == "last" and rows[6]["diagnosis"]["symptoms"][0]["id"] == "S14"


def test_an_id_that_cannot_be_written_back_gives_an_error_row_not_a_crash() -> None:
    nested_id = "[" * 3000 + "]" * 3000
    line = '{"id": ' + nested_id + ', "text": "RuntimeError: boom"}'
    rows = _rows(line.encode() + b"\n" + json.dumps({"id": "ok", "text": OOM}).encode() + b"\n")
    assert len(rows) == 2
    assert "error" in rows[0] or "diagnosis" in rows[0]
    assert rows[1]["id"] == "ok"
