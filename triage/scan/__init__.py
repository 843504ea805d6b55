"""Bounded, fast streaming of text lines out of a binary stream: a general scanner that the
parsers use, beside `triage.literals` (neither belongs to one stage).

Logs are read in big binary chunks holding whole lines (`reader`). Only lines that matter are
decoded: `markers.MarkerSet` finds candidate lines for a whole chunk at once (hyperscan's SIMD
multi-literal matcher where its wheel is installed, else a vectorised 4-byte hash in numpy and
an exact check per hit), `hot_lines.HotLines` adds the patterns a line must match to count, and
`reader.select_lines` walks only those lines, or every line while the caller asks for it (inside
a traceback). `engines` loads the optional accelerators on first use.
"""
