"""Ingest: paths, folders and archives in; `Source`s with a sniffed kind and path facts out.

    from triage.ingest import discover, detect_kind
    for source in discover(["logs/", "bundle.tgz"]):
        with source.open() as f: ...

See `walk` (discovery), `sniff` (kinds from content), `archives` (reading in place, limits),
`attribution` (rank/host/attempt from paths) and `streams` (the streams `open()` returns).
"""

from triage.ingest.archives import Limits
from triage.ingest.attribution import PathFacts, attribute
from triage.ingest.sniff import HEAD_BYTES, detect_kind, sniff
from triage.ingest.streams import stream_problem
from triage.ingest.walk import discover, reopen_plain

__all__ = [
    "HEAD_BYTES",
    "Limits",
    "PathFacts",
    "attribute",
    "detect_kind",
    "discover",
    "reopen_plain",
    "sniff",
    "stream_problem",
]
