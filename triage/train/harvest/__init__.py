"""The harvester of the message atlas: the messages the libraries themselves raise and log.

Build-time code (run by `bench/harvest_atlas.py`, never by `triage` itself): it reads the
source of library releases and yields one `Found` per `raise`, `assert`, logging or warning
call (Python, read with `ast`) and per `TORCH_CHECK`/`C10_THROW_ERROR`/`LOG(...)`, NCCL
`WARN`/`INFO` or gloo `GLOO_ENFORCE`/`GLOO_THROW` (C/C++, read with a small tokenizer). A
message's template keeps its literal text and masks what the program fills in: f-string
fields, `%`-format and `.format()` fields, printf fields, concatenated expressions.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from triage.train.harvest.found import Found

# A template says little with fewer literal characters than this ("{} != {}", "Error: {}").
MIN_LITERAL = 12
MAX_FILE_BYTES = 4 << 20  # generated tables, not messages
PY_SUFFIXES = (".py",)
CXX_SUFFIXES = (".c", ".cc", ".cpp", ".cu", ".cuh", ".h", ".hpp", ".cxx")


def literal_chars(parts: tuple[str, ...]) -> int:
    return sum(len(p.strip()) for p in parts)


def keep(found: Found) -> bool:
    """Worth shipping: enough literal text to recognise it in a log."""
    return literal_chars(found.parts) >= MIN_LITERAL and any(
        c.isalpha() for p in found.parts for c in p
    )


def source_files(root: Path) -> Iterator[Path]:
    """Every Python and C/C++ source under root, in a stable order; tests and examples are
    skipped (their messages are not what users' jobs print)."""
    skip = {"tests", "test", "testing", "examples", "docs", "benchmarks", "third_party", ".git"}
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in skip and not d.startswith("."))
        for name in sorted(files):
            if name.endswith(PY_SUFFIXES + CXX_SUFFIXES) and not name.startswith("test_"):
                path = Path(folder) / name
                try:
                    if path.stat().st_size <= MAX_FILE_BYTES:
                        yield path
                except OSError:
                    continue


def harvest_tree(root: Path) -> Iterator[Found]:
    """Every message site of the sources under root (paths relative to root)."""
    from triage.train.harvest import cxx, python

    for path in source_files(root):
        rel = path.relative_to(root).as_posix()
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        sites = python.harvest(text, rel) if path.suffix == ".py" else cxx.harvest(text, rel)
        yield from (f for f in sites if keep(f))
