"""What a message says: a line template's fields, and the watchdog / process-group / NCCL
facts named in a message."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from triage.knowledge.log_shapes import LogShapes
from triage.knowledge.templates import (
    Template,
    Value,
    signal_of_exit_code,
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


def message_facts(msg: str, shapes: LogShapes) -> dict[str, Any]:
    """Watchdog / PG / NCCL facts named in a message (formats.md §2.3.1), read with the
    knowledge's message shapes (`rules/log_shapes.yaml`)."""
    attrs: dict[str, Any] = {}
    if not msg:
        return attrs
    # The reporting rank is the tag a c10 message starts with (after an exception type);
    # tags later in the text (a desync report, "remote error from [Rank 5]") name others.
    start = LEAD.match(msg).end()  # type: ignore[union-attr]
    facts = shapes.facts
    m = facts["pg_prefix"].match(msg, start)
    if m is not None:
        attrs["pg_id"] = int(m["pgid"])
        if m["guid"]:
            attrs["pg_guid"] = m["guid"]
        if m["desc"]:
            attrs["pg_desc"] = m["desc"]
        attrs["rank"] = int(m["rank"])
    else:
        m = facts["rank_tag"].match(msg, start)
        if m is not None:
            attrs["rank"] = int(m["rank"])
    if "WorkNCCL(" in msg:
        m = facts["watchdog_timeout"].search(msg)
        if m is not None:
            attrs["watchdog_timeout"] = True
            if m["seq"]:
                attrs["seq"] = int(m["seq"])
            attrs["op"] = m["op"]
            attrs["timeout_ms"] = int(m["timeout"])
            if m["nin"]:
                attrs["numel_in"], attrs["numel_out"] = int(m["nin"]), int(m["nout"])
            if m["ran"]:
                attrs["ran_ms"] = int(m["ran"])
    if "watchdog" in msg:
        m = facts["watchdog_summary"].search(msg)
        if m is not None:
            attrs.setdefault("seq", int(m["seq"]))
            attrs["last_enqueued"] = int(m["enq"])
            attrs["last_completed"] = int(m["comp"])
        m = facts["watchdog_stuck"].search(msg)
        if m is not None:
            attrs["watchdog_stuck_s"] = int(m["sec"])
        if "thread terminated with exception" in msg:
            attrs["watchdog_terminated"] = True
    m = facts["dump_from"].search(msg)
    if m is not None:
        attrs["dump_signal_from_rank"] = int(m["src"])
    m = facts["nccl_error_in"].search(msg)
    if m is not None:
        attrs["nccl_reason"] = m["reason"]
        if m["ver"]:
            attrs["nccl_version"] = m["ver"]
    return attrs
