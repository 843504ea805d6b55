"""The timeline never gives a line a time it does not carry (issue #22).

A traceback has no stamp of its own: it lies between the stamp its stream printed before it and
the first one printed after it (its stream's, or the launcher's, which reports the exit after
it). The report shows that interval, not the time of an unrelated line, and the cause stays
before the exit it caused.
"""

from __future__ import annotations

import html
import re
from datetime import datetime
from pathlib import Path

from triage.model import Diagnosis
from triage.pipeline import Options, diagnose
from triage.report import render

# torchrun --tee: the launcher's banner, two ranks' stamped lines, rank 1's traceback with no
# stamp, rank 0 going on after it, then the launcher noticing rank 1's exit
CONSOLE = """\
W1203 08:12:15.142000 19490 torch/distributed/run.py:874] Setting OMP_NUM_THREADS environment \
variable for each process to be 1
[default0]:2026-12-03 08:12:22 INFO train: epoch 0 train loss 1.2068
[default1]:2026-12-03 08:12:24 INFO train: epoch 0 train loss 1.1469
[default1]:[rank1]: Traceback (most recent call last):
[default1]:[rank1]:   File "/workspace/train.py", line 60, in main
[default1]:[rank1]:     total[0] += F.cross_entropy(model(x), y, reduction="sum")
[default1]:[rank1]: ValueError: Expected input batch_size (8) to match target batch_size (7).
[default0]:2026-12-03 08:12:30 INFO train: still waiting
E1203 08:12:37.268000 19490 torch/distributed/elastic/multiprocessing/api.py:1002] failed \
(exitcode: 1) local_rank: 1 (pid: 19494) of binary: /opt/venv/bin/python3
"""


def _at(clock: str) -> float:
    return datetime.fromisoformat(f"2026-12-03T{clock}+00:00").timestamp()


def _diagnose(tmp_path: Path, text: str) -> Diagnosis:
    log = tmp_path / "job" / "console.log"
    log.parent.mkdir()
    log.write_text(text)
    return diagnose([str(log.parent)], Options(use_embeddings=False, workers=1))


def test_a_traceback_without_a_stamp_lies_between_its_streams_stamps(tmp_path: Path) -> None:
    d = _diagnose(tmp_path, CONSOLE)
    raised = next(t for t in d.timeline if t.role == "initiating")
    assert "ValueError" in raised.text and raised.line == 7
    # not the launcher's exit time (read when the traceback's record closed), nor rank 0's
    # stamps: rank 1's own line before it, the launcher's line after it
    assert raised.time is None
    assert raised.earliest == _at("08:12:24")
    assert raised.latest == _at("08:12:37.268")
    roles = [t.role for t in d.timeline]
    assert roles.index("initiating") < next(
        i for i, t in enumerate(d.timeline) if "exited" in t.text
    )


def test_every_format_shows_the_interval_not_a_time(tmp_path: Path) -> None:
    d = _diagnose(tmp_path, CONSOLE)
    for fmt in ("text", "md", "html"):
        out = " ".join(html.unescape(render(d, fmt)).split())
        assert "no stamp" in out, fmt
        # the line before it is stamped to the second: the bound is no finer than that stamp
        assert re.search(r"after 08:12:24(?![.\d])", out), fmt
        assert "before 08:12:37.268" in out, fmt


def test_a_line_with_no_stamp_around_it_is_untimed(tmp_path: Path) -> None:
    # a rank's own file without any stamp: nothing bounds its traceback
    d = _diagnose(
        tmp_path,
        "Traceback (most recent call last):\n"
        '  File "/workspace/train.py", line 60, in main\n'
        "    step()\n"
        "ValueError: bad batch\n",
    )
    raised = next(t for t in d.timeline if t.role == "initiating")
    assert (raised.time, raised.earliest, raised.latest) == (None, None, None)
    text = render(d, "text")
    assert "after 0" not in text and "before 0" not in text


# rank 1's error stamped to the millisecond, then torchrun's summary, whose `time` is to the
# second: the exit it records happened within 08:12:37, after the error that caused it
SAME_SECOND = """\
W1203 08:12:15.142000 19490 torch/distributed/run.py:874] Setting OMP_NUM_THREADS environment \
variable for each process to be 1
[default1]:[rank1]:[E1203 08:12:37.300412 19494 ProcessGroupGloo.cpp:143] Rank 1 failed: \
Connection closed by peer
E1203 08:12:37.868000 19490 torch/distributed/elastic/multiprocessing/api.py:1002] failed \
(exitcode: 1) local_rank: 1 (pid: 19494) of binary: /opt/venv/bin/python3
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-03_08:12:37
  host      : node07
  rank      : 1 (local_rank: 1)
  exitcode  : 1 (pid: 19494)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
============================================================
"""


def test_an_exit_stamped_to_the_second_comes_after_an_error_within_that_second(
    tmp_path: Path,
) -> None:
    d = _diagnose(tmp_path, SAME_SECOND)
    rows = [t.text for t in d.timeline]
    error = next(i for i, t in enumerate(d.timeline) if t.time == _at("08:12:37.300412"))
    exited = next(i for i, text in enumerate(rows) if "exited 1" in text)
    assert error < exited, rows
    # and each format shows the exit's stamp as precise as torchrun wrote it, no finer (the
    # JSON the HTML shows keeps the schema's ISO form)
    for fmt in ("text", "md", "html"):
        shown = re.sub(r"<script.*?</script>", " ", render(d, fmt), flags=re.S)
        out = " ".join(html.unescape(re.sub(r"<[^>]+>", " ", shown)).split())
        assert re.search(r"08:12:37(?!\.)\S* .{0,80}exited 1", out), fmt
        assert not re.search(r"08:12:37\.000(?!\+00:00\")\S* .{0,80}exited 1", out), fmt
