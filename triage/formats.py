"""The line shapes of the input formats, in one place: ingest sniffs a file's kind with them
and the parsers read the file with the same patterns (a format that changes is changed once).

A helper of both stages, so it belongs to neither (like `triage.literals`). The domain
knowledge of what the lines *mean* is in rules/ (templates, cascade, rules); this is only how
each tool prints them (formats.md of the project's research notes has the details).
"""

from __future__ import annotations

import re

import regex

from triage import regex_cache

# NCCL_DEBUG output: `[ts] host:pid:tid [dev] [ms] file.cc:N (func) NCCL INFO|WARN ... msg`;
# every part before `NCCL` is optional (wrappers strip some, NCCL_DEBUG_TIMESTAMP_FORMAT adds
# one). An NCCL_DEBUG_FILE line always has `host:pid:tid` (ingest's test for such a file).
NCCL_LINE = re.compile(
    r"(?:\[(?P<ts>\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?)\] )?"
    r"(?:(?P<host>[^\s:\[\]]+):(?P<pid>\d+):(?P<tid>\d+) )?"
    r"(?:\[(?P<dev>\d+)\] )?"
    r"(?:(?P<ms>\d+\.\d+) )?"
    r"(?:(?P<src>[\w./<>-]+):(?P<srcline>\d+) (?:\((?P<func>[^)]*)\) )?)?"
    r"NCCL (?P<level>INFO|WARN|TRACE|CALL|ABORT) ?(?P<msg>.*)"
)
NCCL_BARE_VERSION = re.compile(r"NCCL version (?P<ver>\d+\.\d+[\w.+-]*)")

# `py-spy dump` text: a process header, the interpreter, then per thread its frames (4
# spaces), innermost first; --locals adds `Arguments:`/`Locals:` at 8 spaces, values at 12.
PYSPY_PROCESS = regex_cache.compile(r"^Process (?P<pid>\d+): ?(?P<cmd>.*)$")
PYSPY_PYTHON = regex_cache.compile(r"^Python v(?P<ver>\S+)(?: \((?P<exe>.*)\))?$")
PYSPY_THREAD = regex_cache.compile(
    r'^Thread (?P<tid>\d+|0[xX][0-9A-Fa-f]+) \((?P<status>[^)]*)\)(?:: "(?P<name>.*)")?\s*$'
)
# The statuses py-spy 0.3/0.4 prints: a thread line with another one is not py-spy's.
PYSPY_STATUSES = frozenset({"idle", "active", "active+gil", "gil", "unknown"})
# A Python frame ends in `(file:line)`; a native frame or a line-less one in `(lib)`. The
# function part may itself hold parentheses (demangled C++), hence the greedy `.+`.
PYSPY_PY_FRAME = regex_cache.compile(r"^ {4}(?P<func>\S.*) \((?P<file>[^()]*?):(?P<line>\d+)\)$")
PYSPY_NATIVE_FRAME = regex_cache.compile(r"^ {4}(?P<func>\S.*) \((?P<file>[^()]*)\)$")
PYSPY_LOCALS = regex_cache.compile(r"^ {8,}\S")

# DeepSpeed's `ds_report`: one of its two section titles.
DS_REPORT_START = regex_cache.compile(
    r"DeepSpeed (?:C\+\+/CUDA extension op report|general environment info)"
)


def pyspy_thread(line: str) -> regex.Match[str] | None:
    """A py-spy thread line with a status py-spy prints, or None."""
    m = PYSPY_THREAD.match(line)
    return m if m is not None and m["status"] in PYSPY_STATUSES else None
