"""Small formatting helpers every report format uses: cleaning log text, scores, ranks, times.

What a report shows is decided once, in `view.py`; these only turn values into strings.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime, timezone

import regex

from triage import regex_cache
from triage.model import Diagnosis, ScoredLabel, TimelineEntry
from triage.rank_ranges import ranks_text

# Log text arrives with terminal colour codes (ANSI CSI/OSC sequences) and stray control bytes.
# They are stripped in every format: raw escapes would repaint a user's terminal and are noise
# in HTML and Markdown.
_ANSI = regex_cache.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI: colours, cursor moves
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC: window title, hyperlinks
    r"|\x1b[@-Z\\-_]"  # other two-byte escapes
    r"|\x9b[0-?]*[ -/]*[@-~]"  # 8-bit CSI
)
_CONTROL = regex_cache.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
# Invisible format characters change what a reader sees without showing: bidi overrides and
# isolates (U+202A-U+202E, U+2066-U+2069: "Trojan Source") reorder a line, zero-width ones
# (U+200B-U+200D, U+2060, U+FEFF) and tag characters (U+E0000 block) hide text. They are shown
# as visible escapes, so a reader sees that something was there.
_INVISIBLE = regex_cache.compile(r"[\p{Cf}\u2028\u2029]")
_BACKTICKED = regex_cache.compile(r"(`+)(.+?)(?<!`)\1(?!`)", regex.DOTALL)


def clean(text: str | None) -> str:
    """Log text made safe to show: escapes and control bytes removed, CRLF normalised."""
    if not text:
        return ""
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\t", "    ")
    text = _CONTROL.sub("", _ANSI.sub("", text))
    return _INVISIBLE.sub(_escape, text) if _INVISIBLE.search(text) else text


def _escape(m: regex.Match[str]) -> str:
    code = ord(m.group())
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def short(text: str | None, limit: int = 2000) -> str:
    """Cleaned text cut at `limit` characters: one runaway log line must not flood a report."""
    t = clean(text)
    return t if len(t) <= limit else t[: limit - 1] + "…"


def lower_first(text: str) -> str:
    """`The launcher saw ...` -> `the launcher saw ...`, `A user ...` -> `a user ...`; an
    acronym (`NCCL ...`) stays."""
    word = text.split(" ", 1)[0]
    return text if len(word) > 1 and word[:2].isupper() else text[:1].lower() + text[1:]


def one_line(text: str | None, limit: int = 200) -> str:
    """The first line of a text, shortened to `limit` characters with an ellipsis."""
    lines = clean(text).strip().split("\n")
    line = lines[0] if lines else ""
    if len(line) > limit:
        return line[: limit - 1] + "…"
    return line + (" …" if len(lines) > 1 else "")


def cut_lines(text: str | None, max_lines: int, max_chars: int = 400) -> tuple[str, int]:
    """Text limited to `max_lines` lines of at most `max_chars` each; also how many lines hid."""
    lines = clean(text).rstrip("\n").split("\n")
    hidden = max(0, len(lines) - max_lines)
    shown = [ln if len(ln) <= max_chars else ln[: max_chars - 1] + "…" for ln in lines[:max_lines]]
    return "\n".join(shown), hidden


def share(score: float) -> float:
    """A score as a share in [0, 1] for a bar: a bad score (NaN, negative) cannot break layout."""
    try:
        value = float(score)
    except (TypeError, ValueError):
        return 0.0
    return value if 0.0 <= value <= 1.0 else (1.0 if value > 1.0 else 0.0)


def pct(score: float | None) -> str:
    """A calibrated score as a percentage; never "100%": the model is never certain."""
    if score is None:
        return "-"
    return f"{round(max(0.0, min(0.99, score)) * 100):d}%"


def tied_at_top(labels: Sequence[ScoredLabel]) -> list[ScoredLabel]:
    """The first label and those after it shown at the same percentage: a tie the reader sees
    in the tables, which a sentence naming the first alone would break."""
    top = [*labels[:1]]
    for label in labels[1:]:
        if pct(label.score) != pct(top[0].score):
            break
        top.append(label)
    return top


def rel(path: str, base: str) -> str:
    if base and path.startswith(base) and len(path) > len(base):
        return path[len(base) :]
    return path


def where(source: str, line: int | None, base: str = "") -> str:
    source = rel(source, base)
    return f"{source}:{line}" if line is not None else source


def rank_str(rank: int | None) -> str:
    return "-" if rank is None else str(rank)


def ranks_str(ranks: Sequence[int], limit: int = 32) -> str:
    """Ranks as a compact list: `0-3, 7, 12-15` so 1,024 ranks stay one line."""
    return ranks_text(ranks, limit, empty="-")


def iso_time(epoch: float | None, resolution: float = 0.0) -> str:
    """`2026-12-03 08:12:37.300 UTC`; a stamp to the second (`resolution` 1.0) without the
    milliseconds it never had."""
    if epoch is None:
        return "-"
    try:
        stamp = datetime.fromtimestamp(epoch, tz=timezone.utc)
    except (OverflowError, OSError, ValueError):
        return "-"
    if resolution >= 1.0:
        return stamp.strftime("%Y-%m-%d %H:%M:%S") + " UTC"
    return stamp.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


def clock_time(epoch: float | None, resolution: float = 0.0) -> str:
    """`08:12:37.300`; `08:12:37` for a stamp to the second."""
    if epoch is None:
        return "-"
    try:
        stamp = datetime.fromtimestamp(epoch, tz=timezone.utc)
    except (OverflowError, OSError, ValueError):
        return "-"
    if resolution >= 1.0:
        return stamp.strftime("%H:%M:%S")
    return stamp.strftime("%H:%M:%S.%f")[:-3]


def segments(action: str) -> list[tuple[bool, str]]:
    """An action split into (is_code, text) pieces: backticked parts are commands or keys."""
    text = short(action, 2000)
    out: list[tuple[bool, str]] = []
    pos = 0
    for m in _BACKTICKED.finditer(text):
        if m.start() > pos:
            out.append((False, text[pos : m.start()]))
        code = m.group(2)
        # CommonMark strips one space padding that was added to fence a backtick.
        if len(code) > 2 and code.startswith(" ") and code.endswith(" "):
            code = code[1:-1]
        out.append((True, code))
        pos = m.end()
    if pos < len(text):
        out.append((False, text[pos:]))
    return out


def safe_url(url: str | None) -> str | None:
    """Only plain web links become links; `javascript:` and friends stay text."""
    if not url:
        return None
    url = clean(url).strip()
    if regex.match(r"(?i)^https?://[^\s<>\"'`]+$", url):
        return url
    return None


def hang_collective(d: Diagnosis) -> str:
    """The stuck collective in one line, in words: `all_reduce #1204, shape 1024 (Float),
    timeout 600 s, called at main (train.py:88)`; never a record's Python syntax."""
    if d.hang is None or not d.hang.collective:
        return ""
    c = d.hang.collective.as_dict()
    op = c.get("op") or c.get("profiling_name") or "collective"
    seq = c.get("seq", c.get("collective_seq_id", c.get("seq_id")))
    bits = [f"{op} #{seq}" if seq is not None else str(op)]
    sizes = c.get("sizes", c.get("input_sizes"))
    dtypes = c.get("dtypes", c.get("input_dtypes"))
    if sizes:
        kinds = f" ({_listed(dtypes)})" if dtypes else ""
        bits.append(f"{_tensors(sizes)}{kinds}")
    out = c.get("output_sizes")
    if out and out != sizes:
        bits.append(f"output {_tensors(out)}")
    if c.get("timeout_ms"):
        bits.append(f"timeout {_seconds(c['timeout_ms'])}")
    if c.get("gloo_wait"):
        bits.append(f"gloo waiting in {_compact(c['gloo_wait'])}")
    if c.get("call_site"):
        bits.append(f"called at {_compact(c['call_site'])}")
    shown = {
        "op",
        "profiling_name",
        "seq",
        "collective_seq_id",
        "seq_id",
        "sizes",
        "input_sizes",
        "dtypes",
        "input_dtypes",
        "output_sizes",
        "timeout_ms",
        "gloo_wait",
        "call_site",
    }
    for key, value in c.items():
        if key not in shown and value not in (None, "", [], ()):
            bits.append(f"{key.replace('_', ' ')} {_compact(value)}")
    return clean(", ".join(bits))


def _tensors(sizes: object) -> str:
    """Tensor shapes in words: `[[9, 96], [5]]` -> `shapes 9x96, 5`; `[[]]` -> a scalar."""
    shapes = sizes if isinstance(sizes, (list, tuple)) else [sizes]
    words = [
        "x".join(_compact(n) for n in s) or "scalar"
        if isinstance(s, (list, tuple))
        else _compact(s)
        for s in shapes
    ]
    return ("shape " if len(words) == 1 else "shapes ") + _cut(", ".join(words))


def _listed(values: object) -> str:
    items = values if isinstance(values, (list, tuple)) else [values]
    return _cut(", ".join(_compact(v) for v in items))


def _seconds(ms: object) -> str:
    try:
        s = float(ms) / 1000  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return f"{_compact(ms)} ms"
    return f"{s:g} s"


def _cut(text: str) -> str:
    return text if len(text) <= 120 else text[:119] + "…"


def _compact(value: object) -> str:
    if isinstance(value, (list, tuple)):
        return _cut(", ".join(_compact(v) for v in value))
    return _cut(str(value))


def time_span(entries: Sequence[TimelineEntry]) -> tuple[float, float] | None:
    times = [e.time for e in entries if e.time is not None]
    if len(times) < 2 or max(times) <= min(times):
        return None
    return min(times), max(times)


def offset(epoch: float | None, start: float | None, resolution: float = 0.0) -> str:
    """Seconds since the start of the drawn window: `+12.345s` (`-3.000s` before it); reads
    faster than two clocks. A stamp to the second gives whole seconds (`+2s`) from a start on
    a whole second, and tenths from one within a second (`10:11:50` from `10:11:49.670` is
    `+0.3s`: rounded to whole seconds it would read as the same instant)."""
    if epoch is None or start is None:
        return ""
    # counted between the milliseconds the clocks show (they cut, not round): `10:06:26.774`
    # is `+0.774s` from `10:06:26`, never `+0.775s`
    ms = _shown_ms(epoch) - _shown_ms(start)
    sign = "-" if ms < 0 else "+"
    if resolution >= 1.0:
        if ms % 1000 == 0:
            return f"{sign}{abs(ms) // 1000}s"
        tenths = (abs(ms) + 50) // 100
        return f"{sign}{tenths // 10}.{tenths % 10}s"
    return f"{sign}{abs(ms) // 1000}.{abs(ms) % 1000:03d}s"


def _shown_ms(epoch: float) -> int:
    """The epoch in whole milliseconds as a clock shows it: to the microsecond (as datetime
    rounds it), then cut to the millisecond."""
    return round(epoch * 1_000_000) // 1000


def duration(seconds: float) -> str:
    """A length of time as a person says it: `6 s`, `2.5 s`, `45 s`, `12 min`, `1.5 h`; no
    more digits than the stamps it comes from are likely to carry."""
    if not seconds >= 0 or seconds == float("inf"):
        return ""
    for limit, unit, name in ((120.0, 1.0, "s"), (7200.0, 60.0, "min"), (math.inf, 3600.0, "h")):
        if seconds < limit:
            value = seconds / unit
            # one decimal only below 10 of the unit, and none where it would read `.0`
            text = f"{value:.1f}" if value < 10 else f"{value:.0f}"
            return f"{text.removesuffix('.0')} {name}"
    return ""


def bounds(earliest: float | None, latest: float | None) -> str:
    """Where a line without a stamp lies: `after 10:06:05, before 10:06:16.445`. A bound on a
    whole second is most likely a stamp to the second: it is not shown finer (`.000`)."""
    parts = []
    if earliest is not None:
        parts.append(f"after {clock_time(earliest, 1.0 if float(earliest).is_integer() else 0.0)}")
    if latest is not None:
        parts.append(f"before {clock_time(latest, 1.0 if float(latest).is_integer() else 0.0)}")
    return ", ".join(parts)
