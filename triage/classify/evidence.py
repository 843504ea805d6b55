"""The evidence a classification shows: the lines its rule hits matched, initiating ones and
those that back the top labels first, and one line the neighbours' agreement rests on."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from triage import regex_cache
from triage.classify import fusion
from triage.classify.types import NeighbourVote, RuleHit
from triage.model import Event, Evidence

if TYPE_CHECKING:
    from triage.classify import Prepared

MAX_EVIDENCE = 8


def evidence(
    prep: Prepared, result: dict[str, list[fusion.Scored]], votes: Sequence[NeighbourVote]
) -> tuple[Evidence, ...]:
    top = {f: result[f][0].label for f in ("symptom", "root_cause") if result[f]}

    def supports(hit: RuleHit) -> float:
        return max(
            hit.symptom.get(top.get("symptom", ""), 0.0),
            hit.root_cause.get(top.get("root_cause", ""), 0.0),
        )

    out: list[Evidence] = []
    seen: set[tuple[str, int | None, str]] = set()
    for hit in sorted(prep.hits, key=lambda h: (h.from_cascade, -supports(h))):
        ev = hit.event
        text = (hit.evidence_text or (ev.text if ev is not None else "")).strip()
        if not text:
            continue
        source = ev.source if ev is not None else "analysis"
        line = hit.evidence_line if hit.evidence_line is not None else (ev.line if ev else None)
        key = (source, line, hit.rule_id)
        if key in seen:
            continue
        seen.add(key)
        out.append(Evidence(source, line, ev.rank if ev else None, text, hit.rule_id))
        if len(out) >= MAX_EVIDENCE - 1:
            break
    agreeing = [v for v in votes if v.symptom == top.get("symptom")]
    if prep.lead is not None and agreeing:
        ev = prep.lead
        # the error line, not the frame the signature placed it with (`in f (path)`)
        lines = [ln for ln in prep.signature.splitlines() if not _PLACED_FRAME.match(ln)]
        quoted = lines[0] if lines else ev.text[:200]
        text = first_line_containing(ev.text, quoted) or quoted
        line = line_of(ev, text)
        out.append(Evidence(ev.source, line, ev.rank, text, f"neighbour:{agreeing[0].case_id}"))
    return tuple(out)


_PLACED_FRAME = regex_cache.compile(r"^in \S+ \(.*\)$")


def line_of(ev: Event, quoted: str) -> int | None:
    """The file line of a quoted line of the event, where the parser kept each line's number
    (a traceback skips blank and interleaved lines); else the event's first line."""
    numbers = ev.line_numbers
    at = next((i for i, x in enumerate(ev.text.splitlines()) if x.strip() == quoted), None)
    if numbers and at is not None and at < len(numbers) and numbers[at] is not None:
        return int(numbers[at])
    return ev.line


def first_line_containing(text: str, masked: str) -> str | None:
    """The raw line of the event that the masked signature line came from (best effort): one
    word may be missing, since masking may add one (an exit status's signal name, `-9 SIGKILL`)."""
    words = [w for w in masked.split() if "<" not in w][:4]
    if not words:
        return None
    allowed_missing = 1 if len(words) >= 3 else 0
    for line in text.splitlines():
        if sum(w not in line for w in words) <= allowed_missing:
            return line.strip()[:400]
    return None
