"""Message sites of Python source, read with `ast` (never with regexes over the text)."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator, Sequence

from triage.train.harvest.found import FIELD, Piece, found

# `logger.warning(...)`, `log.error(...)`, `logging.exception(...)`, `self._logger.warn(...)`,
# `warnings.warn(...)`; transformers' `logger.warning_once` and DeepSpeed's rank-0 loggers too.
LOG_LEVELS = {
    "error": "error",
    "exception": "error",
    "critical": "critical",
    "fatal": "critical",
    "warning": "warning",
    "warn": "warning",
    "warning_once": "warning",
    "warning_advice": "warning",
    "warning_rank0": "warning",
    "warn_once": "warning",
}
_LOGGER_NAME = re.compile(r"(?i)(^|_)(logger|log|logging|_logger|LOGGER)$|logger")
# %-format fields: %s, %d, %r, %(name)s, %-8.3f ...; `%%` is a literal percent
_PERCENT = re.compile(
    r"%(?:\([^)]*\))?[#0 +-]*(?:\*|\d+)?(?:\.(?:\*|\d+))?[hlL]?[diouxXeEfFgGcrsa%]"
)
_BRACE = re.compile(r"\{\{|\}\}|\{[^{}]*\}")
MAX_CONDITION = 160


def harvest(text: str, path: str) -> list:
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []  # a Python 2 file or a template with placeholders: not a module users run
    out: list = []
    _Visitor(path, out).visit(tree)
    return out


class _Visitor(ast.NodeVisitor):
    def __init__(self, path: str, out: list) -> None:
        self.path = path
        self.out = out
        self.scope: list[str] = []
        self.tests: list[ast.expr] = []  # the enclosing `if` tests, innermost last
        self.names: list[dict[str, ast.expr]] = [{}]  # message variables of each function

    # --------------------------------------------------------------- scopes
    def _scoped(self, node: ast.AST, name: str) -> None:
        self.scope.append(name)
        self.names.append({})
        self.generic_visit(node)
        self.names.pop()
        self.scope.pop()

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self._scoped(node, node.name)

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        self._scoped(node, node.name)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._scoped(node, node.name)

    def visit_If(self, node: ast.If) -> None:
        self.visit(node.test)
        self.tests.append(node.test)
        for stmt in node.body:
            self.visit(stmt)
        self.tests.pop()
        negated = ast.UnaryOp(op=ast.Not(), operand=node.test)
        self.tests.append(negated)
        for stmt in node.orelse:
            self.visit(stmt)
        self.tests.pop()

    def visit_Assign(self, node: ast.Assign) -> None:
        # `msg = f"..."; raise ValueError(msg)`: remember the message a name holds
        target = node.targets[0] if len(node.targets) == 1 else None
        if isinstance(target, ast.Name) and _stringish(node.value):
            self.names[-1][target.id] = node.value
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        if isinstance(node.target, ast.Name) and isinstance(node.op, ast.Add):
            before = self.names[-1].get(node.target.id)
            if before is not None and _stringish(node.value):
                self.names[-1][node.target.id] = ast.BinOp(before, ast.Add(), node.value)
        self.generic_visit(node)

    # --------------------------------------------------------------- sites
    def visit_Raise(self, node: ast.Raise) -> None:
        exc = node.exc
        if isinstance(exc, ast.Call):
            kind = _name(exc.func)
            message = _message_arg(exc)
            if kind and message is not None:
                cond = self.tests[-1] if self.tests else None
                self._add(message, "raise", kind.rsplit(".", 1)[-1], cond)
        self.generic_visit(node)

    def visit_Assert(self, node: ast.Assert) -> None:
        if node.msg is not None:
            self._add(node.msg, "assert", "AssertionError", node.test)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Attribute) and node.args:
            owner = _name(func.value)
            if owner == "warnings" and func.attr == "warn":
                category = node.args[1] if len(node.args) > 1 else None
                for kw in node.keywords:
                    if kw.arg == "category":
                        category = kw.value
                kind = (_name(category) or "UserWarning") if category is not None else "UserWarning"
                self._add(node.args[0], "warn", kind.rsplit(".", 1)[-1], None, node.args[1:1])
            elif (
                func.attr in LOG_LEVELS and owner and _LOGGER_NAME.search(owner.rsplit(".", 1)[-1])
            ):
                self._add(node.args[0], "log", LOG_LEVELS[func.attr], None, node.args[1:])
        self.generic_visit(node)

    def _add(
        self,
        message: ast.expr,
        kind: str,
        type_: str,
        cond: ast.expr | None,
        printf_args: Sequence[ast.expr] = (),
    ) -> None:
        if isinstance(message, ast.Name):
            held = self.names[-1].get(message.id)
            if held is None:
                return
            message = held
        pieces = _pieces(message)
        if printf_args:  # logging's lazy `%`: the first argument is a %-format string
            pieces = [
                p
                for piece in pieces
                for p in (_mask_percent(piece) if isinstance(piece, str) else [piece])
            ]
        condition = ""
        if cond is not None:
            try:
                condition = ast.unparse(cond)[:MAX_CONDITION]
            except (ValueError, RecursionError):
                condition = ""
        result = found(pieces, kind, type_, self.path, ".".join(self.scope), condition)
        if result is not None:
            self.out.append(result)


def _name(node: ast.expr | None) -> str:
    """`a.b.C` of a Name/Attribute chain; "" for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _name(node.value)
        return f"{inner}.{node.attr}" if inner else node.attr
    if isinstance(node, ast.Call):
        return _name(node.func)
    return ""


def _message_arg(call: ast.Call) -> ast.expr | None:
    if call.args:
        return call.args[0]
    for kw in call.keywords:
        if kw.arg in {"msg", "message"}:
            return kw.value
    return None


def _stringish(node: ast.expr) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, ast.JoinedStr):
        return True
    if isinstance(node, ast.BinOp):
        return _stringish(node.left) or _stringish(node.right)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return node.func.attr == "format" and _stringish(node.func.value)
    return False


def _pieces(node: ast.expr) -> list[Piece]:
    """The message as literal strings and FIELDs (what the program fills in)."""
    if isinstance(node, ast.Constant):
        return [node.value] if isinstance(node.value, str) else [FIELD]
    if isinstance(node, ast.JoinedStr):
        out: list[Piece] = []
        for value in node.values:
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                out.append(value.value)
            else:
                out.append(FIELD)
        return out
    if isinstance(node, ast.BinOp):
        if isinstance(node.op, ast.Add):
            return _pieces(node.left) + _pieces(node.right)
        left = node.left
        if isinstance(node.op, ast.Mod) and isinstance(left, ast.Constant):
            return _mask_percent(left.value) if isinstance(left.value, str) else [FIELD]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        base = node.func.value
        if (
            node.func.attr == "format"
            and isinstance(base, ast.Constant)
            and isinstance(base.value, str)
        ):
            return _mask_braces(base.value)
        if node.func.attr == "join" or node.func.attr in {"strip", "rstrip", "lstrip"}:
            return [FIELD] if node.func.attr == "join" else _pieces(base)
    if isinstance(node, ast.Call) and _name(node.func) in {"textwrap.dedent", "dedent", "str"}:
        return _pieces(node.args[0]) if node.args else [FIELD]
    if isinstance(node, ast.IfExp):
        return [FIELD]
    return [FIELD]


def _mask_percent(text: str) -> list[Piece]:
    out: list[Piece] = []
    at = 0
    for m in _PERCENT.finditer(text):
        out.append(text[at : m.start()])
        out.append("%" if m.group() == "%%" else FIELD)
        at = m.end()
    out.append(text[at:])
    return out


def _mask_braces(text: str) -> list[Piece]:
    out: list[Piece] = []
    at = 0
    for m in _BRACE.finditer(text):
        out.append(text[at : m.start()])
        g = m.group()
        out.append("{" if g == "{{" else "}" if g == "}}" else FIELD)
        at = m.end()
    out.append(text[at:])
    return out


def iter_pieces(node: ast.expr) -> Iterator[Piece]:
    """The pieces of one message expression (for tests and the fixture tree)."""
    yield from _pieces(node)
