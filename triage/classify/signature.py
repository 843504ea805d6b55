"""The failure signature: a short, masked text of the error that started the failure.

Two failures are the same kind when their initiating errors read alike once the parts that
change from job to job (numbers, hex ids, paths, hosts, IPs, ranks, timestamps) are masked.
The signature feeds both neighbour indexes (MiniLM embeddings and TF-IDF); MiniLM reads at
most 256 word pieces, so it is capped at a few salient lines.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import regex

from triage.analysis.cascade import reads_as_cascade
from triage.model import Analysis, Event, EventKind, ParsedSource

# Bumped whenever masking or line selection changes: the index manifest records it, so an
# index built with another version is stale.
SIGNATURE_VERSION = 3
MAX_CHARS = 700
MAX_LINES = 8
MAX_EVENTS = 2000  # events read for one signature
MAX_EVENT_CHARS = 20_000  # of one event's text (a traceback with its locals, a pasted log)

_ERROR_KINDS = frozenset(
    {
        EventKind.TRACEBACK,
        EventKind.CPP_EXCEPTION,
        EventKind.ERROR_LINE,
        EventKind.NCCL_WARN,
        EventKind.SIGNAL,
        EventKind.RANK_EXIT,
        EventKind.ELASTIC_ERROR,
        EventKind.AGENT,
    }
)

# A line worth embedding: an exception line, an NCCL WARN, a C++ `what():`, an error verb.
_SALIENT = regex.compile(
    r"^\s*(?:[\w.]+\.)?\w*(?:Error|Exception|Interrupt|Failure|Fault)\b\s*:?|"
    r"NCCL WARN|what\(\):|\berror\b|\bfailed\b|\bfailure\b|\bfatal\b|\bkilled\b|"
    r"\bunable to\b|\bcannot\b|\bcan't\b|\bnot (?:found|supported|defined)\b|"
    r"\bmismatch|\btimed? ?out\b|\bhang|\bstuck\b|\bsegmentation\b|\bSIG[A-Z]+\b|"
    r"\bout of memory\b|\billegal\b|\bnan\b|\boverflow\b|\bundefined symbol\b|\bassert",
    regex.IGNORECASE,
)
_FRAME = regex.compile(r'^\s*File "(?P<file>[^"]+)", line \d+, in (?P<func>\S+)')

_IP = regex.compile(
    r"\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+|<\d+>)?\b|\b(?:[0-9a-f]{1,4}:){3,7}[0-9a-f]{1,4}\b"
)
_HEX = regex.compile(r"\b0x[0-9a-fA-F]+\b|\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{8,}\b")
# NCCL's `host:pid:tid [dev]` line prefix and Ray's `(Actor pid=1, ip=...)` prefix.
_NCCL_PREFIX = regex.compile(r"^\s*\S+:\d+:\d+ \[\d+\]\s*", regex.MULTILINE)
_RAY_PREFIX = regex.compile(r"^\s*\(\w+ pid=\d+(?:, ip=[\d.]+)?\)\s*", regex.MULTILINE)
_RANK_PREFIX = regex.compile(r"^\s*\[(?:rank|default)\s*:?\s*\d+\]\s*:?\s*", regex.MULTILINE)
_LOG_PREFIX = regex.compile(
    r"^\s*(?:\[?\d{4}-\d\d-\d\d[ T][\d:,.]+\]?|[IWEF]\d{4} [\d:.]+ \d+ \S+\]|"
    r"(?:INFO|WARNING|ERROR|DEBUG) \d\d-\d\d [\d:]+ \S+:\d+\])\s*"
    r"(?:-\s*)?(?:(?:INFO|WARNING|ERROR|DEBUG|CRITICAL)\s*(?:-\s*)?)?",
    regex.MULTILINE,
)
_PATH = regex.compile(
    r"(?:[A-Za-z]:)?(?:~|\.{1,2})?(?:/[\w.@+~-]+){2,}/?|(?:[\w.@+-]+/){2,}[\w.@+-]+"
)
_HOST = regex.compile(
    r"\b(?:[a-z][a-z0-9]*-)+\d+(?:-\d+)*\b|\b(?:node|host|gpu|worker|compute)[-_]?\d+\b",
    regex.IGNORECASE,
)
_RANKWORD = regex.compile(
    r"\b(rank|local_rank|global_rank|world_size|device|GPU|cuda:?)\s*[:=]?\s*\d+", regex.IGNORECASE
)
# Exit codes and signal numbers mean something (-9 is SIGKILL); keep them.
_KEEP_CODE = regex.compile(
    r"\b((?:exit ?code|exitcode|exit status|signal|signum|return code)\s*[:=]?\s*)"
    r"(-?\d{1,3})(?!\d)",
    regex.IGNORECASE,
)
_NUMBER = regex.compile(r"(?<![\w<])[-+]?\d+(?:[.,]\d+)*(?:[eE][-+]?\d+)?(?![\w>])")
_BRACKETED_NUMBER = regex.compile(r"<\d+>")
_KEPT = regex.compile(r"KEEPCODE_(m?\d+)")
_NUM_RUN = regex.compile(r"<n>(?:\s*[-:./,x]\s*<n>)+")
_SPACES = regex.compile(r"[ \t]+")


def _shorten_path(match: regex.Match[str]) -> str:
    """Keep the package-relative tail of a path (informative), drop the machine's prefix."""
    path = match.group(0)
    for marker in ("site-packages/", "dist-packages/"):
        if marker in path:
            return path.split(marker, 1)[1]
    parts = [p for p in path.split("/") if p]
    return "<path>/" + parts[-1] if parts else "<path>"


def strip_prefixes(text: str) -> str:
    """Remove per-line prefixes (NCCL host:pid:tid, Ray actor, [rankN]:, log timestamps)."""
    out = _NCCL_PREFIX.sub("", text)
    out = _RAY_PREFIX.sub("", out)
    out = _RANK_PREFIX.sub("", out)
    return _LOG_PREFIX.sub("", out)


def mask(text: str) -> str:
    """Mask what differs between two runs of the same failure; keep what identifies it."""
    out = strip_prefixes(text)
    out = _IP.sub("<ip>", out)
    out = _PATH.sub(_shorten_path, out)
    out = _HEX.sub("<hex>", out)
    out = _HOST.sub("<host>", out)
    out = _RANKWORD.sub(lambda m: m.group(1) + " <n>", out)
    out = _KEEP_CODE.sub(lambda m: m.group(1) + "KEEPCODE_" + m.group(2).replace("-", "m"), out)
    out = _NUMBER.sub("<n>", _BRACKETED_NUMBER.sub("<n>", out))
    out = _KEPT.sub(lambda m: m.group(1).replace("m", "-"), out)
    out = _NUM_RUN.sub("<n>", out)
    out = _SPACES.sub(" ", out)
    return "\n".join(line.strip() for line in out.splitlines() if line.strip())


def is_cascade_text(text: str) -> bool:
    """True when the text reads like a consequence of another rank's failure (the cascade
    families of `rules/cascade.yaml`, as correlate reads them)."""
    return reads_as_cascade(text)


def salient_lines(text: str) -> list[str]:
    """The lines of an event that say what went wrong, masked and de-duplicated.

    For a traceback: the exception line(s) and the innermost frame; for other text: the lines
    that carry an error word. Falls back to the last lines when nothing looks like an error.
    """
    lines = [ln for ln in strip_prefixes(text).splitlines() if ln.strip()]
    picked: list[str] = []
    last_frame: str | None = None
    for ln in lines:
        frame = _FRAME.match(ln)
        if frame:
            last_frame = (
                f"in {frame.group('func')} ({_PATH.sub(_shorten_path, frame.group('file'))})"
            )
            continue
        if _SALIENT.search(ln):
            if last_frame is not None:
                picked.append(last_frame)
                last_frame = None
            picked.append(ln)
    if not picked:
        picked = lines[-3:]
    seen: set[str] = set()
    out: list[str] = []
    for ln in picked:
        masked = mask(ln)[:300]
        if masked and masked not in seen:
            seen.add(masked)
            out.append(masked)
    return out


def initiating_events(parsed: Sequence[ParsedSource], analysis: Analysis) -> list[Event]:
    """The events that started the failure, best first.

    Correlate's verdict when it has one; otherwise (a pasted text, one log) the error events
    in source order with cascade-looking ones moved behind the others.
    """
    if analysis.initiating_events:
        return list(analysis.initiating_events)
    errors = [ev for ps in parsed for ev in ps.events if ev.kind in _ERROR_KINDS]
    if not errors:
        errors = [
            ev
            for ps in parsed
            for ev in ps.events
            if ev.kind not in (EventKind.INPUT_WARNING, EventKind.PROGRESS, EventKind.NCCL_COMM)
        ]
    cascade_ids = {id(ev) for ev in analysis.cascade_events}
    primary = [ev for ev in errors if id(ev) not in cascade_ids and not is_cascade_text(ev.text)]
    rest = [ev for ev in errors if ev not in primary]
    return primary + rest


def signature_of_events(events: Iterable[Event]) -> str:
    """Join the salient masked lines of the events (best first) into one short signature.

    Cascade-looking lines go behind the others, so a pasted text that holds both an OOM and
    the connection resets it caused is read as the OOM first.
    """
    primary: list[str] = []
    cascade: list[str] = []
    seen: set[str] = set()
    for n, ev in enumerate(events):
        # Enough lines found, or a wall of events (a big job's cascade): stop reading.
        if len(primary) >= MAX_LINES or n >= MAX_EVENTS:
            break
        for ln in salient_lines(ev.text[:MAX_EVENT_CHARS]):
            if ln not in seen:
                seen.add(ln)
                (cascade if is_cascade_text(ln) else primary).append(ln)
    ordered = primary + cascade
    out: list[str] = []
    size = 0
    for ln in ordered:
        if len(out) >= MAX_LINES or size + len(ln) > MAX_CHARS:
            break
        out.append(ln)
        size += len(ln) + 1
    return "\n".join(out)


def signature(parsed: Sequence[ParsedSource], analysis: Analysis) -> str:
    """The failure signature of a job (or a pasted text) for the neighbour indexes.

    When no event reads as an error (a loss log, memory readings, a P2P matrix) the signature
    falls back to every event, then to the pasted text: what the user gave is the evidence.
    """
    sig = signature_of_events(initiating_events(parsed, analysis))
    if sig:
        return sig
    sig = signature_of_events(
        ev for ps in parsed for ev in ps.events if ev.kind is not EventKind.INPUT_WARNING
    )
    if sig:
        return sig
    for ps in parsed:
        # a paste whose events say nothing: the text itself (kept by the parser)
        if ps.whole_text:
            sig = signature_of_events(
                [Event(source=ps.source.path, kind=EventKind.ERROR_LINE, text=ps.whole_text)]
            )
            if sig:
                return sig
    return ""
