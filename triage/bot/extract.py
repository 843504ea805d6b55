"""Evidence from an issue thread: what reporters paste, cut into pieces triage can read.

A bug report is Markdown: fenced code blocks (logs, tracebacks, `collect_env`), `<details>`
blocks around long logs, and tracebacks or NCCL lines pasted straight into the prose. Each
code block becomes its own piece whose kind is sniffed from its content (a pasted py-spy dump
is read by the py-spy parser, a `collect_env` block by the env-report parser); the rest of a
post (prose, `<details>` without a fence, unfenced pastes) is one text piece per post, with
HTML comments (issue templates' hints) and the `<details>`/`<summary>` tags taken out.

The block structure comes from markdown-it-py (a dependency of rich already), which knows
CommonMark's fences and indented blocks exactly; only the line ranges are used, so every
piece is the raw text the reporter pasted.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from triage.ingest.sniff import HEAD_BYTES, detect_kind
from triage.knowledge.advice import CollectNext
from triage.model import SourceKind

__all__ = [
    "Extracted",
    "Piece",
    "extract_thread",
    "find_links",
    "has_command",
    "make_piece",
    "seen_evidence",
]

MAX_PIECES = 64  # a thread with more blocks than this is read up to here

_HTML_COMMENT = re.compile(r"<!--.*?(?:-->|\Z)", re.DOTALL)
_DETAILS_TAGS = re.compile(r"</?details[^>]*>|<summary[^>]*>.*?</summary>|</?summary>", re.I)
_MARKDOWN_LINK = re.compile(r"\]\(\s*<?(https?://[^\s)>]+)>?\s*(?:\"[^\"]*\")?\)")
_BARE_URL = re.compile(r"(?<![(<\w])(https?://[^\s<>()\"'`\]]+)")
_RELATIVE_UPLOAD = re.compile(r"\]\(\s*(/uploads/[0-9a-f]{16,}/[^\s)]+)\)")  # GitLab


@dataclass(frozen=True)
class Piece:
    """One piece of evidence: a code block, or the prose of one post."""

    name: str  # what the report calls it: `issue/block-2`, `comment-3/text`
    text: str
    kind: SourceKind


@dataclass(frozen=True)
class Extracted:
    pieces: tuple[Piece, ...]
    links: tuple[str, ...]  # links that may point at attached logs, in thread order
    notes: tuple[str, ...] = ()  # what was left out, for the comment to say


def extract_thread(
    posts: Sequence[tuple[str, str]], *, max_chars: int = 1_000_000, base_url: str | None = None
) -> Extracted:
    """Pieces of every post `(where, markdown)` in thread order, up to `max_chars` of text.

    `base_url` resolves GitLab's relative upload links (`/uploads/<hash>/x.log`)."""
    pieces: list[Piece] = []
    links: list[str] = []
    notes: list[str] = []
    used = 0
    skipped_posts = 0
    for where, body in posts:
        if not body or not body.strip():
            continue
        if used >= max_chars:
            skipped_posts += 1
            continue
        post_pieces = split_post(body, where)
        for piece in post_pieces:
            room = max_chars - used
            if room <= 0:
                break
            text = piece.text if len(piece.text) <= room else piece.text[:room]
            if text is not piece.text:
                limit = f"{max_chars:,} characters"
                notes.append(f"{piece.name} was cut at the thread's limit of {limit}")
            pieces.append(Piece(piece.name, text, piece.kind))
            used += len(text)
        links.extend(find_links(body, base_url))
    if skipped_posts:
        notes.append(f"{skipped_posts} later posts were not read (the thread is over its limit)")
    if len(pieces) > MAX_PIECES:
        notes.append(f"{len(pieces) - MAX_PIECES} more code blocks were not read")
        pieces = pieces[:MAX_PIECES]
    return Extracted(tuple(pieces), tuple(dict.fromkeys(links)), tuple(notes))


def split_post(body: str, where: str) -> list[Piece]:
    """One post's code blocks (each its own piece) and its prose (one piece)."""
    lines = body.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    in_code = [False] * len(lines)
    blocks: list[str] = []
    for start, end, content in _code_blocks("\n".join(lines)):
        for i in range(start, min(end, len(lines))):
            in_code[i] = True
        if content.strip():
            blocks.append(content)
    prose = "\n".join(line for line, code in zip(lines, in_code, strict=True) if not code)
    prose = _DETAILS_TAGS.sub("", _HTML_COMMENT.sub("", prose))
    # Names read like files, so the report's `name:line` reads as a place in the thread.
    out = [Piece(f"{where}/block-{n}", block, _kind(block)) for n, block in enumerate(blocks, 1)]
    if prose.strip():
        out.append(Piece(f"{where}/text", prose.strip("\n"), SourceKind.TEXT))
    return out


def make_piece(name: str, text: str) -> Piece:
    """A piece of raw text (an attached log), its kind sniffed."""
    return Piece(name, text, _kind(text))


def has_command(body: str, command: str) -> bool:
    """Whether `command` (`/triage`) opens a line of the comment, outside code and quotes."""
    if command not in body:
        return False
    lines = body.replace("\r\n", "\n").split("\n")
    in_code = [False] * len(lines)
    for start, end, _ in _code_blocks("\n".join(lines)):
        for i in range(start, min(end, len(lines))):
            in_code[i] = True
    for line, code in zip(lines, in_code, strict=True):
        words = line.strip().split()
        if not code and words and words[0] == command:
            return True
    return False


def find_links(body: str, base_url: str | None = None) -> list[str]:
    """Every http(s) link in a post (Markdown links and bare URLs), in order."""
    text = _HTML_COMMENT.sub("", body)
    found: list[tuple[int, str]] = [(m.start(), m.group(1)) for m in _MARKDOWN_LINK.finditer(text)]
    found += [(m.start(), m.group(1).rstrip(".,;:!?")) for m in _BARE_URL.finditer(text)]
    if base_url:
        base = base_url.rstrip("/")
        found += [(m.start(), base + m.group(1)) for m in _RELATIVE_UPLOAD.finditer(text)]
    return list(dict.fromkeys(url for _, url in sorted(found)))


def seen_evidence(pieces: Iterable[Piece], collect: CollectNext) -> frozenset[str]:
    """Which kinds of evidence the thread already holds (traceback, nccl_debug, pyspy,
    flight_recorder, env), as `rules/collect_next.yaml` `thread_evidence` tells them."""
    seen: set[str] = set()
    for piece in pieces:
        for evidence in collect.thread_evidence:
            if evidence.name not in seen and evidence.in_piece(piece.kind, piece.text):
                seen.add(evidence.name)
    return frozenset(seen)


def _kind(text: str) -> SourceKind:
    return detect_kind(text.encode("utf-8", errors="replace")[:HEAD_BYTES])[0]


def _code_blocks(text: str) -> list[tuple[int, int, str]]:
    """(first line, line after the last, content) of every fenced or indented code block,
    at any depth (in lists, quotes, `<details>`)."""
    try:
        tokens = _parser().parse(text)
    except Exception:  # noqa: BLE001 - a post the parser chokes on is read as plain text
        return []
    return [
        (token.map[0], token.map[1], token.content)
        for token in tokens
        if token.type in ("fence", "code_block") and token.map
    ]


@lru_cache(maxsize=1)
def _parser() -> Any:
    from markdown_it import MarkdownIt

    # CommonMark: GitHub and GitLab both build on it. Block structure only: inline parsing
    # is not needed, and a post of 200,000 `[` takes it seconds (block parsing is linear).
    return MarkdownIt("commonmark").disable(["inline", "text_join"])
