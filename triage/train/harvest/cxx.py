"""Message sites of C/C++ source, read with a small tokenizer (comments, string literals,
raw strings and preprocessor lines are tokens, so a quote or a brace inside them is never
taken for code).

Each macro a library reports errors through says which argument starts the message and how
the message is written: pieces concatenated (`TORCH_CHECK(cond, "a", x, "b")`, gloo's
`GLOO_ENFORCE`, `LOG(ERROR) << "a" << x`), or a printf format (NCCL's `WARN(fmt, ...)`), or a
`{}` format (`fmt::format`, c10d's `C10D_ERROR`).

A message is often built first and reported after (`auto msg = c10::str(...); LOG(ERROR) <<
msg; C10_THROW_ERROR(DistBackendError, msg)`): a string a function assigns to a local name is
remembered, and the name stands for its pieces where the function reports it. The body of a
`#define` is read as a function named for its macro: torch reports NCCL failures
(`C10D_NCCL_CHECK`) and socket timeouts (`SYSCHECK`) through macros.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from triage.train.harvest.found import FIELD, Found, Piece, found


@dataclass(frozen=True)
class Macro:
    kind: str  # check | throw | log | warn
    type: str  # exception class or log level; "" = the macro's first argument
    start: int  # index of the first message argument
    style: str = "concat"  # concat | printf | braces
    condition: int | None = None  # index of the checked condition


MACROS: dict[str, Macro] = {
    # torch (c10/util/Exception.h)
    "TORCH_CHECK": Macro("check", "RuntimeError", 1, condition=0),
    "TORCH_CHECK_WITH": Macro("check", "", 2, condition=1),
    "TORCH_CHECK_VALUE": Macro("check", "ValueError", 1, condition=0),
    "TORCH_CHECK_INDEX": Macro("check", "IndexError", 1, condition=0),
    "TORCH_CHECK_TYPE": Macro("check", "TypeError", 1, condition=0),
    "TORCH_CHECK_NOT_IMPLEMENTED": Macro("check", "NotImplementedError", 1, condition=0),
    "TORCH_INTERNAL_ASSERT": Macro("check", "InternalAssert", 1, condition=0),
    "TORCH_WARN": Macro("warn", "warning", 0),
    "TORCH_WARN_ONCE": Macro("warn", "warning", 0),
    "C10_THROW_ERROR": Macro("throw", "", 1),
    "C10_BUILD_ERROR": Macro("throw", "", 1),
    "REDUCER_CHECK": Macro("check", "RuntimeError", 2, condition=0),  # DDP's reducer
    "C10D_THROW_ERROR": Macro("throw", "", 1, "braces"),
    "C10D_ERROR": Macro("log", "error", 0, "braces"),
    "C10D_WARNING": Macro("log", "warning", 0, "braces"),
    "C10D_INFO": Macro("log", "info", 0, "braces"),
    # c10d's socket: a failed attempt logged as a warning, gathered into the error it raises
    "recordError": Macro("log", "warning", 0, "braces"),
    # ProcessGroupGloo's helper: logs its first argument, throws its second (TORCH_CHECK)
    "logAndThrow": Macro("check", "RuntimeError", 1),
    # NCCL (src/include/debug.h)
    "WARN": Macro("log", "warn", 0, "printf"),
    "INFO": Macro("log", "info", 1, "printf"),
    # gloo (gloo/common/logging.h, error.h)
    "GLOO_ENFORCE": Macro("check", "EnforceNotMet", 1, condition=0),
    "GLOO_ENFORCE_EQ": Macro("check", "EnforceNotMet", 2),
    "GLOO_ENFORCE_NE": Macro("check", "EnforceNotMet", 2),
    "GLOO_ENFORCE_LE": Macro("check", "EnforceNotMet", 2),
    "GLOO_ENFORCE_LT": Macro("check", "EnforceNotMet", 2),
    "GLOO_ENFORCE_GE": Macro("check", "EnforceNotMet", 2),
    "GLOO_ENFORCE_GT": Macro("check", "EnforceNotMet", 2),
    "GLOO_THROW": Macro("throw", "gloo::Exception", 0),
    "GLOO_THROW_INVALID_OPERATION_EXCEPTION": Macro("throw", "gloo::InvalidOperationException", 0),
    "GLOO_THROW_IO_EXCEPTION": Macro("throw", "gloo::IoException", 0),
    "GLOO_ERROR": Macro("log", "error", 0),
    "GLOO_WARN": Macro("log", "warning", 0),
}
LOG_LEVELS = {"ERROR": "error", "WARNING": "warning", "FATAL": "critical", "DFATAL": "critical"}
_CONTROL = {"if", "for", "while", "switch", "catch", "return", "sizeof", "decltype", "do"}
_AFTER_SIGNATURE = {"const", "noexcept", "override", "final", "mutable", "volatile"}

_TOKEN = re.compile(
    r"""
    (?P<pre>^[ \t]*\#(?:[^\n\\]|\\.|\\\n)*)              # a preprocessor line, continued
  | (?P<comment>//[^\n]*|/\*.*?\*/)
  | (?P<raw>(?:u8|u|U|L)?R"(?P<delim>[^(\s]{0,16})\((?P<rawbody>.*?)\)(?P=delim)")
  | (?P<str>(?:u8|u|U|L)?"(?:\\.|[^"\\\n])*")
  | (?P<chr>'(?:\\.|[^'\\\n]){1,8}')
  | (?P<id>[A-Za-z_]\w*(?:::~?[A-Za-z_]\w*)*)
  | (?P<num>\d[\w.']*)
  | (?P<op><<|::|->|[^\s\w])
    """,
    re.VERBOSE | re.DOTALL | re.MULTILINE,
)
_ESCAPES = {"n": "\n", "t": "\t", '"': '"', "\\": "\\", "'": "'", "r": "", "0": ""}
_PRINTF = re.compile(
    r"%[-+ #0]*(?:\*|\d+)?(?:\.(?:\*|\d+))?(?:hh|h|ll|l|L|z|j|t)?[diouxXeEfgGcspn%]|%\"\s*PRI\w+"
)
_BRACES = re.compile(r"\{\{|\}\}|\{[^{}]*\}")
_DEFINE = re.compile(r"#\s*define\s+(\w+)(\([^)]*\))?(.*)", re.DOTALL)
MAX_CONDITION = 160
# a function's local strings: name -> the pieces last assigned to it
Names = dict[str, list[Piece]]


def tokens(text: str) -> list[tuple[str, str]]:
    """(kind, text) tokens: str (the literal's value, unescaped), id, num, op."""
    out: list[tuple[str, str]] = []
    for m in _TOKEN.finditer(text):
        kind = m.lastgroup
        if kind == "pre":
            define = _DEFINE.match(m.group().strip().replace("\\\n", " "))
            if define and define.group(3).strip():
                out.append(("define", define.group(1)))
                out.append(("body", define.group(3)))
            continue
        if kind == "comment" or kind is None:
            continue
        if kind == "raw":
            out.append(("str", m.group("rawbody")))
        elif kind == "delim" or kind == "rawbody":
            out.append(("str", m.group("rawbody") or ""))
        elif kind == "str":
            body = m.group()
            out.append(("str", _unescape(body[body.index('"') + 1 : -1])))
        else:
            out.append((kind, m.group()))
    return out


def _unescape(body: str) -> str:
    return re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), m.group(1)), body)


def harvest(text: str, path: str, outer: str = "") -> list[Found]:
    """Every message site of one file (`outer`: the function a macro body stands for)."""
    toks = tokens(text)
    out: list[Found] = []
    scopes: list[str | None] = [outer or None]  # per open brace: the function or class
    names: dict[str | None, Names] = {}  # per function: its local strings
    match_open: dict[int, int] = {}  # index of ")" -> its "("
    parens: list[int] = []
    pending_class: str | None = None
    i = 0
    n = len(toks)
    while i < n:
        kind, value = toks[i]
        local = names.setdefault(_function(scopes), {})
        if kind == "define" and i + 1 < n:
            out += harvest(toks[i + 1][1], path, value)
            i += 2
            continue
        if kind == "op":
            if value == "(":
                parens.append(i)
            elif value == ")" and parens:
                match_open[i] = parens.pop()
            elif value == "{":
                scopes.append(pending_class or _function_before(toks, i, match_open))
                pending_class = None
            elif value == "}" and scopes:
                scopes.pop()
            elif value == ";":
                pending_class = None
        elif kind == "id":
            if (
                value in ("class", "struct")
                and i + 2 < n
                and toks[i + 1][0] == "id"
                and toks[i + 2][1] in ("{", ":", "final")
            ):
                pending_class = toks[i + 1][1]
            macro = MACROS.get(value)
            if value == "throw" and i + 2 < n and toks[i + 1][0] == "id" and toks[i + 2][1] == "(":
                args, end = _args(toks, i + 2)
                site = _site(Macro("throw", toks[i + 1][1], 0), args, path, scopes, local)
                _append(out, site)
            elif value == "LOG" and i + 3 < n and toks[i + 1][1] == "(" and toks[i + 3][1] == ")":
                level = LOG_LEVELS.get(toks[i + 2][1])
                if level is not None:
                    pieces, i = _stream(toks, i + 4, local)
                    _append(out, found(pieces, "log", level, path, _function(scopes)))
                    continue
            elif macro is not None and i + 1 < n and toks[i + 1][1] == "(":
                args, end = _args(toks, i + 1)
                _append(out, _site(macro, args, path, scopes, local))
            elif i + 2 < n and toks[i + 1] == ("op", "=") and toks[i + 2] != ("op", "="):
                _remember(toks, i, local)
            elif value in local and toks[i + 1 : i + 3] == [("op", "+"), ("op", "=")]:
                # appended to, maybe on one branch only: what follows is left open
                if local[value][-1:] != [FIELD]:
                    local[value] = [*local[value], FIELD]
            elif i + 1 < n and toks[i + 1] == ("op", "<<") and (i == 0 or toks[i - 1][1] in ";{}"):
                # `ss << "a" << x;`: a message written into a local stream, reported as
                # `ss.str()` after
                pieces, i = _stream(toks, i + 2, local)
                if any(isinstance(p, str) and any(c.isalpha() for c in p) for p in pieces):
                    local[value] = local.get(value, []) + pieces
                continue
        i += 1
    return out


def _remember(toks: list[tuple[str, str]], at: int, local: Names) -> None:
    """`name = <a string with literal text>;`: the name stands for those pieces after."""
    expr: list[tuple[str, str]] = []
    depth = 0
    for kind, value in toks[at + 2 :]:
        if kind == "op" and value in "([{":
            depth += 1
        elif kind == "op" and value in ")]}":
            depth -= 1
        if depth < 0 or (depth == 0 and kind == "op" and value in (";", ",")):
            break
        expr.append((kind, value))
    pieces = _segment(expr, local)
    if any(isinstance(p, str) and any(c.isalpha() for c in p) for p in pieces):
        local[toks[at][1]] = pieces


def _append(out: list[Found], site: Found | None) -> None:
    if site is not None:
        out.append(site)


def _function(scopes: list[str | None]) -> str:
    names = [s for s in scopes if s]
    return names[-1] if names else ""


def _function_before(
    toks: list[tuple[str, str]], brace: int, match_open: dict[int, int]
) -> str | None:
    """The function whose body this brace opens (`Foo::bar(...) const {`), else None."""
    j = brace - 1
    while j >= 0 and toks[j][1] in _AFTER_SIGNATURE:
        j -= 1
    if j < 0 or toks[j][1] != ")" or j not in match_open:
        return None
    k = match_open[j] - 1
    if k >= 0 and toks[k][0] == "id" and toks[k][1] not in _CONTROL:
        return toks[k][1]
    return None


def _args(toks: list[tuple[str, str]], open_at: int) -> tuple[list[list[tuple[str, str]]], int]:
    """The top-level comma-separated arguments of the call opening at `open_at`."""
    args: list[list[tuple[str, str]]] = [[]]
    depth = 0
    j = open_at
    while j < len(toks):
        kind, value = toks[j]
        if kind == "op" and value in "([{":
            depth += 1
            if depth == 1:
                j += 1
                continue
        elif kind == "op" and value in ")]}":
            depth -= 1
            if depth == 0:
                return (args if args != [[]] else []), j
        elif kind == "op" and value == "," and depth == 1:
            args.append([])
            j += 1
            continue
        elif kind == "op" and value == ";" and depth <= 1:
            break  # unbalanced: a macro body or broken code
        args[-1].append(toks[j])
        j += 1
    return [], j


def _stream(
    toks: list[tuple[str, str]], j: int, local: Names | None = None
) -> tuple[list[Piece], int]:
    """`<< "a" << x << "b";` after LOG(LEVEL)."""
    segment: list[tuple[str, str]] = []
    pieces: list[Piece] = []
    depth = 0
    while j < len(toks):
        kind, value = toks[j]
        if kind == "op" and value in "([{":
            depth += 1
        elif kind == "op" and value in ")]}":
            depth -= 1
        if depth <= 0 and kind == "op" and value in (";", "}"):
            break
        if depth == 0 and kind == "op" and value == "<<":
            pieces += _segment(segment, local)
            segment = []
        else:
            segment.append(toks[j])
        j += 1
    pieces += _segment(segment, local)
    return pieces, j


def _segment(seg: list[tuple[str, str]], local: Names | None = None) -> list[Piece]:
    """One concatenated operand: adjacent literals are one; a local string the function
    assigned is its pieces; anything else is a field, except a call of
    `c10::str`/`fmt::format`, whose own pieces count."""
    if not seg:
        return []
    if all(k == "str" for k, _ in seg):
        return ["".join(v for _, v in seg)]
    if local and seg[0][1] in local and [v for _, v in seg[1:]] in ([], [".", "str", "(", ")"]):
        return list(local[seg[0][1]])
    head = seg[0][1]
    if len(seg) > 2 and seg[1][1] == "(" and head in ("c10::str", "fmt::format", "std::string"):
        args, _ = _args(seg, 1)
        if head == "fmt::format" and args:
            return _formatted(args, "braces", local)
        return _concat(args, local)
    # `"a" + x + "b"`: split at top-level `+`
    parts: list[list[tuple[str, str]]] = [[]]
    depth = 0
    for k, v in seg:
        if k == "op" and v in "([{":
            depth += 1
        elif k == "op" and v in ")]}":
            depth -= 1
        if depth == 0 and k == "op" and v == "+":
            parts.append([])
        else:
            parts[-1].append((k, v))
    if len(parts) > 1:
        return [p for part in parts for p in _segment(part, local)]
    return [FIELD]


def _concat(args: list[list[tuple[str, str]]], local: Names | None = None) -> list[Piece]:
    return [p for arg in args for p in _segment(arg, local)]


def _formatted(
    args: list[list[tuple[str, str]]], style: str, local: Names | None = None
) -> list[Piece]:
    """A format string (its fields masked) and the values that fill it."""
    first = args[0]
    if not first or not all(k == "str" or (k == "id" and v.startswith("PRI")) for k, v in first):
        return _concat(args, local)
    pieces: list[Piece] = []
    for k, v in first:
        if k != "str":
            pieces.append(FIELD)  # `"%" PRIu64`: the format macro and its field
            continue
        pattern = _PRINTF if style == "printf" else _BRACES
        at = 0
        for m in pattern.finditer(v):
            pieces.append(v[at : m.start()])
            g = m.group()
            pieces.append({"%%": "%", "{{": "{", "}}": "}"}.get(g, FIELD))
            at = m.end()
        pieces.append(v[at:])
    return pieces


def _site(
    macro: Macro,
    args: list[list[tuple[str, str]]],
    path: str,
    scopes: list[str | None],
    local: Names | None = None,
) -> Found | None:
    if len(args) <= macro.start:
        return None
    message = args[macro.start :]
    pieces = (
        _concat(message, local)
        if macro.style == "concat"
        else _formatted(message, macro.style, local)
    )
    type_ = macro.type or "".join(v for _, v in args[0]).rsplit("::", 1)[-1]
    condition = ""
    if macro.condition is not None and len(args) > macro.condition:
        condition = _render(args[macro.condition])[:MAX_CONDITION]
    return found(pieces, macro.kind, type_, path, _function(scopes), condition)


def _render(arg: list[tuple[str, str]]) -> str:
    return " ".join(f'"{v}"' if k == "str" else v for k, v in arg)
