"""What a message says: a line template's fields, and the watchdog / process-group / NCCL
facts named in a message."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from triage.knowledge.log_shapes import LogShapes, holds
from triage.knowledge.templates import (
    Template,
    Value,
    signal_of_exit_code,
)
from triage.model import (
    C10dFacts,
    CollectiveRef,
    GlooTimeout,
    LineNotice,
    NcclErrorNote,
    ProcessGroupTag,
    WatchdogProgress,
    WatchdogTimeout,
)
from triage.parsers import timestamps as ts
from triage.parsers.rank_log.formats import (
    LEAD,
    LineMeta,
    int_or_none,
)


def template_match(template: Template, msg: str, meta: LineMeta) -> dict[str, str | None] | None:
    """The groups of a template that matches the line, or None."""
    if template.unleveled and (meta.level is not None or meta.c10):
        return None
    if template.only_levels is not None and meta.level not in template.only_levels:
        return None
    if template.literals:
        low: str | None = None
        for lit in template.literals:
            if lit[0] == "\0":
                low = msg.lower() if low is None else low
                if lit[1:] in low:
                    break
            elif lit in msg:
                break
        else:
            return None
    m = template.pattern.search(msg)
    if m is None or (template.also is not None and template.also.search(msg) is None):
        return None
    groups = dict(m.groupdict())
    if template.optional is not None:
        extra = template.optional.search(msg)
        if extra is not None:
            groups.update(extra.groupdict())
    return groups


def template_value(value: Value, groups: dict[str, str | None], signals: Mapping[str, str]) -> Any:
    """A template's value for this line (see `rules/templates.yaml`)."""
    if value.group is None:
        return value.constant
    text = groups.get(value.group)
    conversion = value.conversion
    if conversion == "present":
        return text is not None
    if text is None:
        return None
    if conversion == "int":
        return int_or_none(text.strip())
    if conversion == "signal":
        return signal_of_exit_code(int_or_none(text))
    if conversion == "word_signal":
        found = None
        for word, sig in signals.items():  # the last word of the table that is there
            if word in text:
                found = sig
        return found
    if conversion == "lower":
        return text.lower()
    if conversion == "strip":
        return text.strip() or None
    if conversion == "dated":
        return ts.parse_dated(text)
    return text


def message_facts(msg: str, shapes: LogShapes) -> C10dFacts | None:
    """Watchdog / PG / NCCL facts named in a message (formats.md §2.3.1), read with the
    knowledge's message shapes (`rules/log_shapes.yaml`); None when it names none."""
    if not msg:
        return None
    # The reporting rank is the tag a c10 message starts with (after an exception type);
    # tags later in the text (a desync report, "remote error from [Rank 5]") name others.
    start = LEAD.match(msg).end()  # type: ignore[union-attr]
    facts, guards = shapes.facts, shapes.fact_guards
    rank = group = timeout = progress = stuck = dump_from = nccl_error = None
    terminated = False
    m = facts["pg_prefix"].match(msg, start)
    if m is not None:
        group = ProcessGroupTag(int(m["pgid"]), m["guid"] or None, m["desc"] or None)
        rank = int(m["rank"])
    else:
        m = facts["rank_tag"].match(msg, start)
        if m is not None:
            rank = int(m["rank"])
    if holds(msg, guards["watchdog_timeout"]):
        m = facts["watchdog_timeout"].search(msg)
        if m is not None:
            collective = CollectiveRef(
                op=m["op"].lower(),
                seq=int(m["seq"]) if m["seq"] else None,
                timeout_ms=int(m["timeout"]),
                numel_in=int(m["nin"]) if m["nin"] else None,
            )
            timeout = WatchdogTimeout(
                collective,
                numel_out=int(m["nout"]) if m["nin"] else None,
                ran_ms=int(m["ran"]) if m["ran"] else None,
            )
    if holds(msg, guards["watchdog_summary"]):
        m = facts["watchdog_summary"].search(msg)
        if m is not None:
            progress = WatchdogProgress(int(m["seq"]), int(m["enq"]), int(m["comp"]))
    if holds(msg, guards["watchdog_stuck"]):
        m = facts["watchdog_stuck"].search(msg)
        if m is not None:
            stuck = int(m["sec"])
    if holds(msg, guards["watchdog_terminated"]):
        terminated = facts["watchdog_terminated"].search(msg) is not None
    if timeout is not None and timeout.collective.seq is None and progress is not None:
        # an older record names no SeqNum: the same message's summary does
        timeout = replace(timeout, collective=replace(timeout.collective, seq=progress.seq))
    m = facts["dump_from"].search(msg) if holds(msg, guards["dump_from"]) else None
    if m is not None:
        dump_from = int(m["src"])
    m = facts["nccl_error_in"].search(msg) if holds(msg, guards["nccl_error_in"]) else None
    if m is not None:
        nccl_error = NcclErrorNote(m["reason"], m["ver"] or None)
    m = facts["gloo_timeout"].search(msg) if holds(msg, guards["gloo_timeout"]) else None
    gloo_timeout = GlooTimeout(m["op"], int(m["ms"])) if m is not None else None
    found = C10dFacts(
        rank=rank,
        process_group=group,
        timeout=timeout,
        watchdog_progress=progress,
        stuck_s=stuck,
        watchdog_terminated=terminated,
        dump_signal_from_rank=dump_from,
        nccl_error=nccl_error,
        gloo_timeout=gloo_timeout,
    )
    return None if found == _NOTHING else found


_NOTHING = C10dFacts()


def gloo_timeout_in(messages: Iterable[str], shapes: LogShapes) -> GlooTimeout | None:
    """gloo's timed-out transport step in the first of `messages` that names one."""
    for msg in messages:
        if holds(msg, shapes.fact_guards["gloo_timeout"]):
            m = shapes.facts["gloo_timeout"].search(msg)
            if m is not None:
                return GlooTimeout(m["op"], int(m["ms"]))
    return None


def line_notice(values: Mapping[str, Any]) -> LineNotice:
    """A line template's facts (its `attrs`, names checked when the templates load)."""
    return LineNotice(**values)
