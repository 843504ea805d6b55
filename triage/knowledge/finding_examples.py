"""A rule's finding examples (`{finding: hang, facts: {shape: diverged, ranks: [2]}}`) read
into the typed findings and job facts correlate would hand the rule engine.

The facts an example names are checked against the types: a name that neither the finding's
kind nor the job has, or a value of the wrong type, is a problem of the rule file, not a
finding the engine later reads as "unknown".
"""

from __future__ import annotations

import types
import typing
from collections.abc import Mapping
from dataclasses import fields
from enum import Enum
from functools import cache
from typing import Any, TypeVar, Union

from triage.model import FACTS_OF, Analysis, AnalysisFacts, Finding, FindingKind

T = TypeVar("T")

JOB_FACTS = frozenset(f.name for f in fields(AnalysisFacts))


def finding_example(example: Mapping[str, Any]) -> Analysis:
    """The analysis an example stands for: one finding of its kind with its own facts (`ranks`
    are its ranks), and the job's facts it names besides (`timeout_ms`, `user_frame`).
    ValueError says what is wrong."""
    kind = FindingKind(example["finding"])
    if not isinstance(example.get("facts") or {}, Mapping):
        raise ValueError("`facts` must map fact names to values")
    raw = dict(example.get("facts") or {})
    ranks = raw.pop("ranks", [])
    if not isinstance(ranks, list) or not all(isinstance(r, int) for r in ranks):
        raise ValueError("`ranks` must be a list of rank numbers")
    cls = FACTS_OF[kind]
    own = {k: v for k, v in raw.items() if k in cls.names()}
    job = {k: v for k, v in raw.items() if k not in own}
    unknown = sorted(set(job) - JOB_FACTS)
    if unknown:
        raise ValueError(
            f"names {', '.join(unknown)}: no {kind} finding has such a fact (its facts: "
            f"{', '.join(sorted(cls.names())) or 'none'}), nor the job"
        )
    finding = Finding(
        kind=kind,
        summary=str(example.get("summary", kind.value)),
        ranks=tuple(ranks),
        facts=typed(cls, own),
    )
    return Analysis(findings=(finding,), facts=typed(AnalysisFacts, job))


def typed(cls: type[T], raw: Mapping[str, Any]) -> T:
    """`cls(**raw)` with YAML's lists as tuples and enum fields from their values; ValueError
    for a value of another type than the field's."""
    hints = _hints(cls)
    values = {name: _value(name, hints[name], value) for name, value in raw.items()}
    return cls(**values)


@cache
def _hints(cls: type) -> Mapping[str, Any]:
    # get_type_hints evaluates every string annotation again on each call (~1 ms a class):
    # the ~100 finding examples every run reads name 9 classes (0.1 s of start-up)
    return typing.get_type_hints(cls)


def _value(name: str, hint: Any, value: Any) -> Any:
    options = typing.get_args(hint) if _is_union(hint) else (hint,)
    for option in options:
        got = _as(option, value)
        if got is not _NO:
            return got
    raise ValueError(f"fact {name}: {value!r} is not a {_show(hint)}")


_NO = object()


def _as(hint: Any, value: Any) -> Any:
    origin = typing.get_origin(hint) or hint
    if hint is type(None):
        return None if value is None else _NO
    if isinstance(origin, type) and issubclass(origin, Enum):
        try:
            return origin(value)
        except ValueError:
            return _NO
    if origin is tuple:
        return _tuple(value) if isinstance(value, (list, tuple)) else _NO
    if origin in (Mapping, dict, typing.Mapping):
        return value if isinstance(value, Mapping) else _NO
    if origin is bool:
        return value if isinstance(value, bool) else _NO
    if origin is int:
        return value if isinstance(value, int) and not isinstance(value, bool) else _NO
    if origin is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        return value if ok else _NO
    if origin is str:
        return value if isinstance(value, str) else _NO
    return value  # a type the examples do not write: taken as it is


def _tuple(value: Any) -> Any:
    return tuple(_tuple(v) for v in value) if isinstance(value, (list, tuple)) else value


def _is_union(hint: Any) -> bool:
    return typing.get_origin(hint) in (Union, types.UnionType)


def _show(hint: Any) -> str:
    """`int`, `HangShape (failed, differing, ...)`: what a person writes instead."""
    if _is_union(hint):
        return " or ".join(_show(h) for h in typing.get_args(hint) if h is not type(None))
    if isinstance(hint, type) and issubclass(hint, Enum):
        return f"{hint.__name__} ({', '.join(str(m.value) for m in hint)})"
    origin = typing.get_origin(hint) or hint
    return getattr(origin, "__name__", None) or str(hint)
