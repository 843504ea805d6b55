"""How a set of ranks is written, in one style wherever triage says it: `0-3, 7, 12-15`.

Findings, the outcome's why and the reports all say ranks this way, so a report never shows
one set as `0-2,5` in a sentence and `0-2, 5` in a table beside it.
"""

from __future__ import annotations

from collections.abc import Iterable


def ranks_text(ranks: Iterable[int], limit: int | None = None, empty: str = "none") -> str:
    """Runs of consecutive ranks as `a-b`, joined by `, `; past `limit` runs the rest is
    counted (`…  (1024 ranks)`) so a report line stays one line. `empty`: what no rank reads as."""
    ordered = sorted(set(ranks))
    if not ordered:
        return empty
    spans: list[str] = []
    start = prev = ordered[0]
    for r in ordered[1:]:
        if r == prev + 1:
            prev = r
            continue
        spans.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = r
    spans.append(str(start) if start == prev else f"{start}-{prev}")
    if limit is not None and len(spans) > limit:
        return ", ".join(spans[:limit]) + f", … ({len(ordered)} ranks)"
    return ", ".join(spans)
