"""A script's own source printed at the top of its log (parameter-golf's train_gpt.py and its
forks write their code first: `log0(code)`). Its `raise ValueError("... must be divisible by
...")` and `except ImportError:` are statements, never what happened: the parser reads the log
from the line after the listing.

Only a leading block counts, and only one that reads as a program: most of its lines are
statements, none is a traceback's frame (a traceback at the top of a log is read as one).
"""

from __future__ import annotations

import re

# a Python statement: a raise, assert or import, a block's opener, a call with a string first
_SOURCE_LINE = re.compile(
    r"\s*(?:raise\s+[A-Za-z_][\w.]*(?:\(|\s*$)"
    r"|(?:if|elif|while|with|for|try|else|finally|def|class|except)\b[^\n]*:\s*(?:#.*)?$"
    r"|(?:if|elif|while|with|for|else)\b[^\n]*?:\s*(?:raise|return|continue|break|pass)\b"
    r"|assert\s+\S|import\s+[\w.]+|from\s+[\w.]+\s+import\s"
    r"|[A-Za-z_][\w.]*\(\s*f?[\'\"])"
)
# the lines a listing holds besides statements: blank, comments, closers, a call, a string or
# a name continuing a statement (an indented line alone is no code: Megatron indents its
# iteration lines)
_CODE_ISH = re.compile(
    r"\s*(?:$|#|[)\]}]+[,:;)]*\s*$|@\w|[A-Za-z_][\w.]*\(.*\)[,:]?\s*$"
    r"|f?[\"'][^\"']*[\"'],?\s*$|[\w.]+,\s*$)"
)
# statements beyond _SOURCE_LINE's: an assignment, a return, a def or class line
_STATEMENT = re.compile(
    r"\s*(?:return\b|def |class |@\w|[A-Za-z_][\w.]*(?:\[[^\]]*\])?\s*(?:[-+*/|&]?=)(?!=))"
)
# a program's structure, which a file of settings lacks (nanoGPT prints its config file,
# `max_iters = 5000` and the like, at the top of the log: the total steps read from it)
_STRUCTURE = re.compile(
    r"\s*(?:def |class |import |from [\w.]+ import |if |for |while |with |try:)"
)
_FRAME = re.compile(r'\s*File "[^"]+", line \d+|Traceback \(most recent call last\)')
MIN_LINES = 30  # fewer is no program's listing
MIN_STRUCTURE = 3  # a listing defines, imports or branches at least this often
HEADER_LINES = 3  # a title before the code (`===== CODE SNAPSHOT =====`, the log's path)
# the listing ends at WINDOW // 2 unindented lines in a row that are no code; a traceback's
# frame within WINDOW lines of its start means the log opens with a traceback, not a listing
WINDOW = 12


def leading_code_lines(data: bytes) -> int:
    """The number of the last line of a code listing at the top of `data`, else 0. Most logs
    show within a few lines that they open with none: only the head is decoded, and more of
    it only while a listing goes on to its end."""
    found = 0
    for size in (16 << 10, 4 << 20):
        found, ended = _listing(data[:size])
        if ended or size >= len(data):
            break
    return found


def _listing(head: bytes) -> tuple[int, bool]:
    """(the listing's last line or 0, whether the head showed where it ends)."""
    lines = head.decode("utf-8", errors="replace").split("\n")
    statements = structure = 0
    last_code = 0
    outside = 0  # lines since the last code-ish one
    ended = False
    for i, line in enumerate(lines, start=1):
        if _FRAME.match(line):
            if i <= last_code + WINDOW:
                return 0, True
            ended = True
            break
        strong = bool(_SOURCE_LINE.match(line) or _STATEMENT.match(line))
        if strong or _CODE_ISH.match(line):
            statements += strong
            structure += strong and _STRUCTURE.match(line) is not None
            if line.strip():
                last_code = i
            outside = 0
            continue
        if i >= 2 * MIN_LINES and statements < 0.3 * i:
            return 0, True  # long past where a listing would show its statements
        if i <= HEADER_LINES or line[:1] in (" ", "\t"):
            continue  # the title; an indented line inside a statement (arguments, a tuple)
        outside += 1
        if outside >= WINDOW // 2:
            ended = True
            break
    if last_code < MIN_LINES or statements < 0.3 * last_code or structure < MIN_STRUCTURE:
        return 0, ended
    return last_code, ended
