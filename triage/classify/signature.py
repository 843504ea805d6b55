"""The failure signature: a short, masked text of the error that started the failure.

Two failures are the same kind when their initiating errors read alike once the parts that
change from job to job (numbers, hex ids, paths, hosts, IPs, ranks, timestamps) are masked.
The masking instructions and the salient-line test are knowledge (`rules/masks.yaml`).
The signature feeds both neighbour indexes (MiniLM embeddings and TF-IDF); MiniLM reads at
most 256 word pieces, so it is capped at a few salient lines.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import lru_cache

import regex

from triage import knowledge, regex_cache
from triage.analysis.cascade import reads_as_cascade
from triage.model import Analysis, Event, EventKind, ParsedSource

# Bumped whenever masking or line selection changes: the index manifest records it, so an
# index built with another version is stale.
SIGNATURE_VERSION = 5
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


class _Masker:
    """The masking instructions of `rules/masks.yaml`, applied in order (read once per
    process: every salient line of every signature goes through them)."""

    def __init__(self, masks: knowledge.Masks) -> None:
        assert masks.salient is not None and masks.frame is not None  # the schema says so
        self.prefixes = masks.prefixes
        self.masks = masks.masks
        self.salient = masks.salient
        self.frame = masks.frame
        self.innermost_first = masks.innermost_first
        self.path = masks.named("path")

    def strip_prefixes(self, text: str) -> str:
        for pattern in self.prefixes:
            text = pattern.sub("", text)
        return text

    def mask(self, text: str) -> str:
        out = self.strip_prefixes(text)
        kept: list[str] = []
        for mask in self.masks:
            out = self._apply(mask, out, kept)
        if kept:
            out = _KEPT.sub(lambda m: _restore(m, kept), out)
        return "\n".join(line.strip() for line in out.splitlines() if line.strip())

    def _apply(self, mask: knowledge.Mask, text: str, kept: list[str]) -> str:
        if mask.keep is not None:
            group = mask.keep

            def keep(m: regex.Match[str]) -> str:
                kept.append(m.group(group))
                # a placeholder of letters only, as the kept text's neighbours see a word:
                # no later mask (numbers, spaces) touches it or what is next to it
                start, end = m.span(group)
                at = m.start()
                return m.string[at:start] + _placeholder(len(kept) - 1) + m.string[end : m.end()]

            return mask.pattern.sub(keep, text)
        template = mask.mask_with or ""
        if "{basename}" in template:
            return mask.pattern.sub(lambda m: _path(m.group(0), template, mask.keep_after), text)
        return mask.pattern.sub(template, text)

    def mask_path(self, text: str) -> str:
        return self._apply(self.path, text, [])


def _path(path: str, template: str, keep_after: tuple[str, ...]) -> str:
    """A path masked: its tail after a `keep_after` marker (site-packages/), else the template
    with its last part."""
    for marker in keep_after:
        if marker in path:
            return path.split(marker, 1)[1]
    parts = [p for p in path.split("/") if p]
    return template.replace("{basename}", parts[-1]) if parts else template.split("/", 1)[0]


_KEPT = regex_cache.compile("zzkept([a-y]+)zz")


def _placeholder(n: int) -> str:
    letters = ""
    while True:
        n, r = divmod(n, 25)
        letters += chr(ord("a") + r)
        if not n:
            return f"zzkept{letters}zz"


def _restore(m: regex.Match[str], kept: list[str]) -> str:
    n = sum((ord(c) - ord("a")) * 25**i for i, c in enumerate(m.group(1)))
    return kept[n] if n < len(kept) else m.group(0)


def _masker(kb: knowledge.Knowledge | None) -> _Masker:
    return _masker_of(kb if kb is not None else knowledge.shipped())


@lru_cache(maxsize=8)  # a Knowledge hashes by its identity: one masker per load
def _masker_of(kb: knowledge.Knowledge) -> _Masker:
    return _Masker(kb.masks)


def strip_prefixes(text: str, kb: knowledge.Knowledge | None = None) -> str:
    """Remove per-line prefixes (NCCL host:pid:tid, Ray actor, [rankN]:, log timestamps).
    `kb` (here and below): the run's knowledge, None: the shipped one."""
    return _masker(kb).strip_prefixes(text)


def mask(text: str, kb: knowledge.Knowledge | None = None) -> str:
    """Mask what differs between two runs of the same failure; keep what identifies it."""
    return _masker(kb).mask(text)


def is_cascade_text(text: str, kb: knowledge.Knowledge | None = None) -> bool:
    """True when the text reads like a consequence of another rank's failure (the cascade
    families of `rules/cascade.yaml`, as correlate reads them)."""
    return reads_as_cascade(text, kb)


def salient_lines(text: str, kb: knowledge.Knowledge | None = None) -> list[str]:
    """The lines of an event that say what went wrong, masked and de-duplicated.

    For a traceback: the exception line(s) and the innermost frame; for other text: the lines
    that carry an error word. Falls back to the last lines when nothing looks like an error.
    """
    masker = _masker(kb)
    lines = [ln for ln in masker.strip_prefixes(text).splitlines() if ln.strip()]
    picked: list[str] = []
    last_frame: str | None = None
    # a stack printed innermost first (faulthandler's) places the error line above it
    placing: int | None = None
    for ln in lines:
        frame = masker.frame.match(ln)
        if frame:
            place = f"in {frame.group('func')} ({masker.mask_path(frame.group('file'))})"
            if placing is not None:
                picked.insert(placing, place)
                placing = None
            else:
                last_frame = place
            continue
        if masker.innermost_first is not None and masker.innermost_first.search(ln):
            last_frame = None
            # where the error line before this stack sits
            placing = max(len(picked) - 1, 0) if picked else None
            continue
        if masker.salient.search(ln):
            if last_frame is not None:
                picked.append(last_frame)
                last_frame = None
            picked.append(ln)
    if not picked:
        picked = lines[-3:]
    seen: set[str] = set()
    out: list[str] = []
    for ln in picked:
        masked = masker.mask(ln)[:300]
        if masked and masked not in seen:
            seen.add(masked)
            out.append(masked)
    return out


def initiating_events(
    parsed: Sequence[ParsedSource], analysis: Analysis, kb: knowledge.Knowledge | None = None
) -> list[Event]:
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
    primary = [
        ev for ev in errors if id(ev) not in cascade_ids and not is_cascade_text(ev.text, kb)
    ]
    rest = [ev for ev in errors if ev not in primary]
    return primary + rest


def signature_of_events(events: Iterable[Event], kb: knowledge.Knowledge | None = None) -> str:
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
        for ln in salient_lines(ev.text[:MAX_EVENT_CHARS], kb):
            if ln not in seen:
                seen.add(ln)
                (cascade if is_cascade_text(ln, kb) else primary).append(ln)
    ordered = primary + cascade
    out: list[str] = []
    size = 0
    for ln in ordered:
        if len(out) >= MAX_LINES or size + len(ln) > MAX_CHARS:
            break
        out.append(ln)
        size += len(ln) + 1
    return "\n".join(out)


def signature(
    parsed: Sequence[ParsedSource], analysis: Analysis, kb: knowledge.Knowledge | None = None
) -> str:
    """The failure signature of a job (or a pasted text) for the neighbour indexes.

    When no event reads as an error (a loss log, memory readings, a P2P matrix) the signature
    falls back to every event, then to the pasted text: what the user gave is the evidence.
    """
    sig = signature_of_events(initiating_events(parsed, analysis, kb), kb)
    if sig:
        return sig
    sig = signature_of_events(
        (ev for ps in parsed for ev in ps.events if ev.kind is not EventKind.INPUT_WARNING), kb
    )
    if sig:
        return sig
    for ps in parsed:
        # a paste whose events say nothing: the text itself (kept by the parser)
        if ps.whole_text:
            sig = signature_of_events(
                [Event(source=ps.source.path, kind=EventKind.ERROR_LINE, text=ps.whole_text)], kb
            )
            if sig:
                return sig
    return ""
