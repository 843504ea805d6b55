"""Training progress: the step and epoch lines of each stream, read from the tail of each
chunk, one PROGRESS event per rank at the end."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from triage.knowledge.log_shapes import holds
from triage.model import EventKind, Level, ProgressFacts
from triage.parsers import timestamps as ts
from triage.parsers.prefixes import Prefixes, peel
from triage.parsers.rank_log.formats import int_or_none
from triage.parsers.rank_log.limits import PROGRESS_WINDOW
from triage.scan.engines import LineCounter
from triage.scan.markers import MarkerSet
from triage.scan.reader import clean_last

if TYPE_CHECKING:
    from triage.parsers.rank_log.needles import LogScanTables


# --------------------------------------------------------------------------- progress

# `iter` covers `iteration` and nanoGPT's loop line (train.py: `iter 20000: loss 3.2344, time ...`)
PROGRESS_MARKERS = MarkerSet(["step", "epoch", "iter", "it/s", "s/it"])
# The wrapper prefixes of a raw line, to skip older progress lines of a stream undecoded.
RAW_PREFIXES = re.compile(
    rb"(?:\d{1,6}: |\[[A-Za-z_]+\d+\]: ?|\[\d+,\d+\]<\w+>: ?|[\w.-]{1,64}: |\(\S+ pid=\d+[^)]*\) )*"
)
# `[Rank N]` counts only where it names the stream, as the `deepspeed` progress shape reads
# it (`[Rank 0] step=`): DeepSpeed's `[Rank 0] time (ms) | ... step: 12` lines are another
# stream, and two streams under one raw key would hide each other's lines
_RAW_RANK = re.compile(rb"\[Rank (-?\d+)\] step=")
# a metric printed as nan/inf (`loss nan`, `local_loss=inf`, `grad_norm: -inf`): Python's and
# C's spellings of a non-finite float
_NON_FINITE = re.compile(r"(?<![\w.])[-+]?(?:nan|inf|infinity)(?![\w.])", re.I)
# ... the loss itself printed so (`loss: nan`, `'loss': nan`, transformers 5's `'loss': 'nan'`,
# `lm loss: inf`, `train_loss=nan`), not a gradient norm: fp16 loss scaling prints
# `grad_norm: nan` on the steps it skips, and the loss stays finite there
_LOSS_NON_FINITE = re.compile(
    r"(?<![\w.])(?:\w+[_ ])?loss['\"]?\s*[:=]?\s*['\"]?[-+]?(?:nan|inf|infinity)(?![\w.])", re.I
)
DIGITS_TO_0 = bytes.maketrans(b"123456789", b"000000000")
SHAPE_MAX = 1024  # longest digit-masked line kept in a parser's shape cache (4096 at most)


def _without_last_redraw(raw: bytes) -> bytes:
    """A `\r` line less its last non-blank redraw (the terminal's line before it)."""
    parts = raw.rstrip().split(b"\r")
    while parts and not parts[-1].strip():
        parts.pop()
    return b"\r".join(parts[:-1])


def _raw_spans(data: bytes, start: int, end: int) -> tuple[int, int, int]:
    """(end of the raw prefixes, start and end of the `[Rank N]` number or 0, 0) of the line
    data[start:end], relative to its start; the rank counts within the line's first 200 bytes."""
    prefix = RAW_PREFIXES.match(data, start, end)
    prefix_end = prefix.end() - start if prefix is not None else 0
    rank = _RAW_RANK.search(data, start, min(start + 200, end))
    if rank is None:
        return prefix_end, 0, 0
    return prefix_end, rank.start(1) - start, rank.end(1) - start


# --------------------------------------------------------------------------- progress


@dataclass
class StreamProgress:
    step_line: int = 0
    step: int | None = None
    total: int | None = None
    epoch_line: int = 0
    epoch: float | None = None
    text: str = ""
    line: int = 0
    pre: Prefixes | None = None
    msg_rank: int | None = None
    chunk: int = -1  # the chunk that last updated it


def _read_progress(
    text: str, tables: LogScanTables
) -> tuple[int | None, int | None, float | None, int | None] | None:
    """(step, total, epoch, rank named in the message) of a progress line, or None, read with
    the knowledge's progress shapes (`rules/log_shapes.yaml`)."""
    shapes, guards = tables.shapes.progress, tables.shapes.progress_guards
    if holds(text, guards["not_progress"]) and shapes["not_progress"].search(text):
        return None  # another tool's line about the run (wandb's exit summary)
    # each pattern runs only when its guard's literals are there (most lines hold none)
    if holds(text, guards["megatron"]):
        m = shapes["megatron"].search(text)
        if m is not None:
            return int(m["step"]), int(m["total"]), None, None
    if holds(text, guards["epoch_step"]):
        m = shapes["epoch_step"].search(text)
        if m is not None:
            epoch, epochs = int(m["epoch"]), int(m["epochs"])
            step, per_epoch = int(m["step"]), int(m["total"])
            # the run's own step: the epochs before this one (counted from 1) and this one's
            done = (epoch - 1 if epoch >= 1 else 0) * per_epoch
            return done + step, epochs * per_epoch, float(epoch), None
    if holds(text, guards["sample_epoch"]):
        m = shapes["sample_epoch"].search(text)
        if m is not None:
            seen, per_epoch = int(m["step"]), int(m["total"])
            fraction = seen / per_epoch if per_epoch else 0.0
            return None, None, int(m["epoch"]) + min(fraction, 1.0), None
    if holds(text, guards["deepspeed"]):
        m = shapes["deepspeed"].search(text)
        if m is not None:
            return int(m["step"]), None, None, int(m["rank"])
    step = total = None
    epoch: float | None = None
    if holds(text, guards["hf"]):
        m = shapes["hf"].search(text)
        if m is not None:
            epoch = float(m["epoch"])
    m = shapes["tqdm"].search(text) if holds(text, guards["tqdm"]) else None
    if m is not None and holds(text, guards["setup_bar"]) and shapes["setup_bar"].search(text):
        return (None, None, epoch, None) if epoch is not None else None  # a setup bar
    if m is not None:
        step, total = int(m["step"]), int(m["total"])
        if holds(text, guards["bar_step"]) and (trainer := shapes["bar_step"].search(text)):
            # Lightning's bar counts batches; the trainer's own step is in its postfix
            step, total = int(trainer["step"]), None
    elif text[:1].isspace() or tables.has_error_words(text):
        # `... at step 23` in an error or a traceback line says where it broke, not progress
        return (None, None, epoch, None) if epoch is not None else None
    else:
        m = None
        if holds(text, guards["step"]):
            m = shapes["step"].search(text)
        if m is None and holds(text, guards["iteration"]):
            m = shapes["iteration"].search(text)
        if m is not None:
            step, total = int(m["step"]), int_or_none(m["total"])
    if epoch is None and holds(text, guards["epoch"]):
        m = shapes["epoch"].search(text)
        if m is not None:
            try:
                epoch = float(m["epoch"])
            except ValueError:
                epoch = None
    if step is None and epoch is None:
        return None
    return step, total, epoch, None


class ProgressReading:
    """The parser's progress reading (a part of `_LogParser`)."""

    def observe_progress(self, number: int, text: str, pre: Prefixes | None) -> bool:
        got = _read_progress(text, self.tables)
        if got is None:
            return False
        pre = pre or peel(text)
        step, total, epoch, msg_rank = got
        key = (pre.key, msg_rank)
        state = self.progress.get(key)
        if state is None:
            if len(self.progress) >= 4096:
                return False
            state = self.progress[key] = StreamProgress()
        changed = False
        if step is not None and number >= state.step_line:
            state.step, state.total, state.step_line = step, total, number
            changed = True
        if epoch is not None and number >= state.epoch_line:
            state.epoch, state.epoch_line = epoch, number
            changed = True
        if changed and number >= state.line:
            state.line, state.text, state.pre, state.msg_rank = (
                number,
                pre.rest.strip()[:500],
                pre,
                msg_rank,
            )
        state.chunk = self.chunk
        return True

    def scan_progress(self, data: bytes, counter: LineCounter) -> None:
        """Last progress line per stream in this chunk, read from its tail backwards.

        Streams that progressed in the previous chunk may have their last line anywhere in
        this one, so the window grows until each is found. In the first chunk, samples spread
        over the chunk find streams that stopped early (a hung rank) before the tail is read.
        """
        wanted = {k for k, p in self.progress.items() if p.chunk == self.chunk - 1}
        end = len(data)
        window = PROGRESS_WINDOW
        seen: set[tuple[str, int | None]] = set()
        seen_raw: set[tuple[bytes, bytes | None]] = set()
        if self.chunk == 1 and len(data) > 4 * PROGRESS_WINDOW:
            # A file whose start and end show the same single stream is one process's log
            # (ranks that share a file all start together): the samples between could only
            # find that stream again, and cost ~4 ms a file.
            head = self._progress_in(data, counter, 0, PROGRESS_WINDOW, set(), set())
            # the tail probe is the first window of the walk back below: read once, its
            # streams already seen (a line observed again changes nothing)
            end = len(data) - PROGRESS_WINDOW
            tail = self._progress_in(data, counter, end, len(data), seen, seen_raw)
            wanted |= head
            if len(head) != 1 or head != tail:
                step = len(data) // 16
                for at in range(step, len(data) - PROGRESS_WINDOW, step):
                    window = (at, at + PROGRESS_WINDOW)
                    wanted |= self._progress_in(data, counter, *window, set(), set())
            if wanted <= seen:
                return
            window = 4 * PROGRESS_WINDOW
        while end > 0:
            start = max(0, end - window)
            self._progress_in(data, counter, start, end, seen, seen_raw)
            if wanted <= seen or start == 0:
                return
            end = start
            window *= 4

    def _progress_in(
        self,
        data: bytes,
        counter: LineCounter,
        start: int,
        end: int,
        seen: set[tuple[str, int | None]],
        seen_raw: set[tuple[bytes, bytes | None]],
    ) -> set[tuple[str, int | None]]:
        """Observe the last progress line of each stream in data[start:end] not yet `seen`.

        Lines are read newest first; a stream's older lines are skipped on their raw key (raw
        prefixes and `[Rank N]`), undecoded. Both ways below give the same answer.
        """
        if start > 0:
            start = data.find(b"\n", start, end) + 1 or end
        if start < end < len(data) and data[end - 1 : end] != b"\n":
            # a window that ends inside a line reads that line whole: its cut half is an
            # older redraw of a bar (a `\r` line), or half a number
            end = data.find(b"\n", end) + 1 or len(data)
        window = data[start:end]
        found: set[tuple[str, int | None]] = set()
        if not (
            self.by_shape and self._progress_by_shape(window, start, counter, seen, seen_raw, found)
        ):
            self._progress_by_marker(window, start, counter, seen, seen_raw, found)
        return found

    def _progress_by_shape(
        self,
        window: bytes,
        start: int,
        counter: LineCounter,
        seen: set[tuple[str, int | None]],
        seen_raw: set[tuple[bytes, bytes | None]],
        found: set[tuple[str, int | None]],
    ) -> bool:
        """Every line of the window, what matters about it cached per digit-masked line.

        Whether a line holds a progress marker, and where its raw prefixes and `[Rank N]` sit,
        does not depend on its digits (the patterns see digits only as digits), and a stream's
        progress lines differ mostly in their digits: most lines cost a dict lookup. Gives up
        (False) on a window of mostly unseen shapes, before it costs more than a marker scan.
        """
        lines = window.split(b"\n")
        shapes = window.translate(DIGITS_TO_0).split(b"\n")
        known = self._line_shapes
        misses = 0
        first: int | None = None  # the window's first line number, counted when needed
        for i in range(len(lines) - 1, -1, -1):
            shape = shapes[i]
            facts = known.get(shape)
            if facts is None:
                misses += 1
                if misses > 32 and misses * 4 > len(lines) - i:
                    return False
                line = lines[i]
                facts = (
                    self.tables.progress_markers.contains(shape),
                    *_raw_spans(line, 0, len(line)),
                )
                if len(shape) <= SHAPE_MAX:  # the cache stays small: long lines are rare
                    if len(known) >= 4096:
                        known.clear()
                    known[shape] = facts
            if not facts[0]:  # no progress marker
                continue
            pre = self._newest_of_stream(lines[i], facts[1:], seen, seen_raw, found, shape)
            if pre is not None:
                first = counter.number_at(start) if first is None else first
                self.observe_progress(first + i, pre.rest, pre)
        return True

    def _progress_by_marker(
        self,
        window: bytes,
        start: int,
        counter: LineCounter,
        seen: set[tuple[str, int | None]],
        seen_raw: set[tuple[bytes, bytes | None]],
        found: set[tuple[str, int | None]],
    ) -> None:
        """The lines holding a progress marker, found by a scan of the window."""
        line_start_of = window.rfind
        for line_end in reversed(self.tables.progress_markers.line_ends(window)):
            line_start = line_start_of(b"\n", 0, line_end) + 1
            spans = _raw_spans(window, line_start, line_end)
            line = window[line_start:line_end]
            pre = self._newest_of_stream(line, spans, seen, seen_raw, found)
            if pre is not None:
                self.observe_progress(counter.number_at(start + line_start), pre.rest, pre)

    def _newest_of_stream(
        self,
        line: bytes,
        spans: tuple[int, int, int],
        seen: set[tuple[str, int | None]],
        seen_raw: set[tuple[bytes, bytes | None]],
        found: set[tuple[str, int | None]],
        shape: bytes | None = None,
    ) -> Prefixes | None:
        """A marked line, read newest first: its prefixes if it is the newest progress line of
        a stream not `seen` yet (to observe), else None. `spans` (`_raw_spans`) place its raw
        prefixes and `[Rank N]`; an older line of a raw key already met is skipped undecoded.
        A line that is no progress line at all marks its `shape` (the digit-masked line) so in
        the shape cache: whether the shapes match does not depend on the digits, and a warning
        that says `every iteration` each step was read again in every window."""
        prefix_end, rank_start, rank_end = spans
        raw_key = (line[:prefix_end], line[rank_start:rank_end] if rank_end else None)
        if raw_key in seen_raw:
            return None
        pre = peel(clean_last(line[-4096:]))
        got = _read_progress(pre.rest, self.tables)
        if (got is None or got[0] is None) and b"\r" in line:
            # a log copied while a bar was being redrawn ends in half a redraw (`Epoch 0:
            # 5%|▌  | 7`): the whole redraw before it shows where the bar was
            earlier = peel(clean_last(_without_last_redraw(line[-8192:])))
            if (again := _read_progress(earlier.rest, self.tables)) and again[0] is not None:
                pre, got = earlier, again
        if got is None:
            if shape is not None and shape in self._line_shapes:
                self._line_shapes[shape] = (False, *spans)
            return None
        key = (pre.key, got[3])
        seen_raw.add(raw_key)
        found.add(key)
        if key in seen:
            return None
        seen.add(key)
        return pre

    def _emit_progress(self) -> None:
        best: dict[Any, StreamProgress] = {}
        for (stream, _), p in self.progress.items():
            rank = self._rank(p.pre, p.msg_rank)
            slot: Any = rank if rank is not None else ("stream", stream)
            old = best.get(slot)
            if old is None or p.line > old.line:
                best[slot] = p
        for p in best.values():
            self._emit(
                EventKind.PROGRESS,
                p.text,
                p.line,
                p.line,
                p.pre,
                level=Level.INFO,
                msg_rank=p.msg_rank,
                time=ts.parse_any(p.text, self.hint),
                payload=ProgressFacts(
                    p.step,
                    p.total,
                    p.epoch,
                    non_finite=_NON_FINITE.search(p.text) is not None,
                    loss_non_finite=_LOSS_NON_FINITE.search(p.text) is not None,
                ),
                progress=True,
            )
