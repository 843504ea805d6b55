"""One line to an event: its format read (`_meta`), then a launcher line, a line template,
an error or a warning."""

from __future__ import annotations

import re
from dataclasses import replace

from triage.knowledge.templates import (
    Template,
    signal_of_exit_code,
)
from triage.model import EventKind, Level, LogLineFacts, RaisedException, RankExit
from triage.parsers import timestamps as ts
from triage.parsers.nccl import parse_nccl_line
from triage.parsers.prefixes import Prefixes
from triage.parsers.rank_log.facts import (
    line_notice,
    message_facts,
    template_match,
    template_value,
)
from triage.parsers.rank_log.formats import (
    AGENT_SRC,
    BORDER,
    DEEPSPEED,
    DS_HOST_RANKS,
    EXC_LINE,
    FATAL_PYTHON,
    LEVEL_WORD,
    LEVELS,
    LIBFABRIC,
    NEMO,
    OLD_C10,
    PY_WARNING,
    PYLOG,
    SUMMARY_HEADER,
    SUMMARY_TITLE,
    TB_CUT_FILE,
    TB_FILE,
    TB_HEADER,
    TERMINATE,
    UCX,
    LineMeta,
    int_or_none,
)
from triage.parsers.rank_log.limits import MAX_SAME_ERROR, MAX_WARNINGS
from triage.parsers.rank_log.needles import DS_RANK_MAPPING
from triage.parsers.rank_log.records import (
    CppExceptionRecord,
    CppTailRecord,
    FaultHandlerRecord,
    SummaryRecord,
    TracebackRecord,
)

_DIGITS = re.compile(r"\d+")
_RANK_KEY = re.compile(r"\[rank\d+\]")
_WORDS = re.compile(r"[A-Za-z]{3}")


# What parsing a line alone came to, when a line like it (digits aside) would come to the
# same: nothing, a warning seen before, an error seen too often; else it is no repeat. A
# line's key among repeats is its raw prefixes as they are (`[default3]:[rank11]:`, whose
# digits say which process) and the rest with digits masked; NCCL lines (the tracker keeps
# state per line) and lines longer than SHAPE_MAX are never repeats.
NOT_A_REPEAT, _NOTHING, WARNING_AGAIN, ERROR_AGAIN = range(4)
# Digits laid out as the timestamps `timestamps.parse_any` and `_meta` read, valid or not.
_TIME_SHAPED = re.compile(
    r"\d{4}-\d{2}-\d{2}[ T_]\d{2}:|\[\d{2}/\d{2}/\d{2} \d{2}:|[DIWEFC]\d{3,4} \d{2}:\d{2}:\d{2}\."
)


class LineEvents:
    """The parser's reading of one line (a part of `_LogParser`)."""

    def _meta(self, rest: str) -> LineMeta:
        m = ts.C10_RE.match(rest)
        if m is None and rest[:1] != "[":
            # A progress bar can be glued in front of a c10 line (pytorch#118369).
            cut = rest.find("[", 1)
            if cut > 0:
                m = ts.C10_RE.match(rest, cut)
        if m is not None:
            yl = (m["md"], m["h"], m["mi"], m["s"], m["frac"])
            return LineMeta(
                msg=rest[m.end() :],
                level=LEVELS[m["lvl"]],
                time=ts.yearless(*yl, self.hint),
                src=m["src"],
                src_line=int(m["srcline"]),
                c10=True,
                yearless=yl,
            )
        m = OLD_C10.match(rest)
        if m is not None:
            return LineMeta(
                msg=rest[m.end() :],
                level=LEVELS[m["lvl"]],
                src=m["src"],
                src_line=int(m["srcline"]),
                c10=True,
            )
        m = ts.GLOG_RE.match(rest)
        if m is not None:
            yl = (m["md"], m["h"], m["mi"], m["s"], m["frac"])
            pid = int(m["pid"])
            # torchrun's own lines carry the agent's pid: never a worker's, so kept apart
            agent = AGENT_SRC.search(m["src"]) is not None
            return LineMeta(
                msg=rest[m.end() :],
                level=LEVELS[m["lvl"]],
                time=ts.yearless(*yl, self.hint),
                pid=None if agent else pid,
                agent_pid=pid if agent else None,
                src=m["src"],
                src_line=int(m["srcline"]),
                yearless=yl,
            )
        m = DEEPSPEED.match(rest)
        if m is not None:
            return LineMeta(
                msg=rest[m.end() :],
                level=LEVELS.get(m["lvl"]),
                time=ts.parse_any(rest, self.hint),
                src=m["src"],
                src_line=int(m["srcline"]),
            )
        m = NEMO.match(rest)
        if m is not None:
            return LineMeta(
                msg=rest[m.end() :],
                level=LEVELS[m["lvl"]],
                time=ts.parse_any(m["when"], self.hint),
                src=m["src"],
                src_line=int_or_none(m["srcline"]),
            )
        m = PYLOG.match(rest)
        if m is not None:
            return LineMeta(msg=rest[m.end() :], level=LEVELS[m["lvl"]], logger=m["logger"])
        if rest.startswith("[") and "UCX" in rest[:120]:
            m = UCX.match(rest)
            if m is not None:
                return LineMeta(
                    msg=rest[m.end() :],
                    level=LEVELS.get(m["lvl"], LEVELS.get(m["lvl"][:5], Level.DEBUG)),
                    time=float(rest[1 : rest.index("]")]),
                    pid=int(m["pid"]),
                    src=m["src"],
                    src_line=int(m["srcline"]),
                )
        if rest.startswith("libfabric:"):
            m = LIBFABRIC.match(rest)
            if m is not None:
                return LineMeta(
                    msg=rest[m.end() :],
                    level=LEVELS[m["lvl"]],
                    pid=int(m["pid"]),
                    src="libfabric",
                    src_line=int(m["srcline"]),
                )
        meta = LineMeta(msg=rest)
        if "Warning: " in rest and PY_WARNING.match(rest):
            meta.level = Level.WARNING
            return meta
        first = rest[:1]
        if first.isdigit() or first == "[":
            meta.time = ts.parse_any(rest, self.hint)
            if meta.time is not None:
                lw = LEVEL_WORD.search(rest, 0, 96)
                if lw is not None:
                    meta.level = LEVELS[lw["lvl"]]
        return meta

    def _time_of(self, pre: Prefixes) -> float | None:
        """A peeled line's time: its own log format's, else the container runtime's stamp."""
        when = self._meta(pre.rest).time
        if when is None and pre.stamp is not None:
            when = ts.parse_any(pre.stamp, self.hint)
        return when

    def classify(self, number: int, pre: Prefixes) -> None:
        rest = pre.rest
        key = pre.key
        if "NCCL" in rest:
            nl = parse_nccl_line(rest)
            if nl is not None:
                found = self.nccl.assess(nl)
                if found is not None:
                    self._emit(
                        found.kind,
                        rest.strip(),
                        number,
                        number,
                        pre,
                        level=found.level,
                        host=nl.host,
                        pid=nl.pid,
                        time=nl.time,
                        payload=found.record,
                    )
                if nl.time is not None:
                    self.stamped(number, nl.time)
                return
        meta = self._meta(rest)
        if meta.time is None and pre.stamp is not None:
            # the runtime's stamp stands for the line's own, its level word read as after one
            meta.time = ts.parse_any(pre.stamp, self.hint)
            lw = LEVEL_WORD.search(rest, 0, 96) if meta.level is None else None
            if lw is not None:
                meta.level = LEVELS[lw["lvl"]]
        if meta.time is not None:
            self.stamped(number, meta.time)
        # A repeat of this line may have a time where this one has none (a date that does
        # not exist): what looks like one is read when `last_time` is asked for.
        self._timed = meta.time is not None or _TIME_SHAPED.search(rest, 0, 96) is not None
        msg = meta.msg
        stripped = msg.strip()

        # multi-line openers
        if TB_HEADER.match(msg):
            tb = TracebackRecord(
                key,
                pre,
                number,
                number,
                indent=len(msg) - len(msg.lstrip()),
                pasted=self.pasted,
                tails=self.tables.shapes.message_tails,
            )
            tb.add(number, msg.strip())
            self._open(tb)
            return
        if (TB_FILE.match(msg) or TB_CUT_FILE.match(msg)) and meta.level is None:
            # CPython indents frames by two spaces; more means the paste itself is indented
            indent = max(0, len(msg) - len(msg.lstrip()) - 2)
            tb = TracebackRecord(
                key,
                pre,
                number,
                number,
                headerless=True,
                indent=indent,
                pasted=self.pasted,
                tails=self.tables.shapes.message_tails,
            )
            tb.feed(number, msg)
            self._open(tb)
            return
        m = FATAL_PYTHON.match(stripped)
        if m is not None:
            fault = FaultHandlerRecord(key, pre, number, number, what=m["what"])
            fault.add(number, stripped)
            self._open(fault)
            return
        m = TERMINATE.search(msg)
        if m is not None:
            cpp = CppExceptionRecord(key, pre, number, number, cls=m["cls"] or m["other"])
            cpp.add(number, stripped)
            self._open(cpp)
            return
        if (
            (
                "FAILED" in msg
                and SUMMARY_TITLE.match(msg)
                and meta.level is None
                and not msg.startswith("[")
                and " " not in msg.strip()[: -len(" FAILED")].strip()
            )
            or SUMMARY_HEADER.fullmatch(stripped)
            or (BORDER.match(msg) and msg.startswith("="))
        ):
            summary = SummaryRecord(key, pre, number, number)
            summary.feed(number, msg)
            self._open(summary)
            return
        if stripped.startswith("Exception raised from") and key in self.last_error_of:
            # The rest of a multi-line c10 message: c10 put `[rankN]:` on its first line only.
            tail = CppTailRecord(key, pre, number, number, event_index=self.last_error_of.pop(key))
            tail.feed(number, stripped)
            self._open(tail)
            return

        if self._agent_line(number, pre, meta):
            return
        self._error_or_warning(number, pre, meta)

    def _learn_deepspeed_ranks(self, pre: Prefixes, msg: str) -> None:
        """`global_rank_mapping=defaultdict(<class 'list'>, {'node07': [0, 1], ...})`."""
        hosts = DS_HOST_RANKS.findall(msg)
        for host, ranks in hosts:
            for local, rank in enumerate(int_or_none(r) for r in ranks.split(",")):
                if rank is None or len(self.local_to_rank) >= 65536:
                    continue
                self.local_to_rank.setdefault((host, local), rank)
                if len(hosts) == 1 or host == "localhost":
                    self.local_to_rank.setdefault((pre.host or self.source.host, local), rank)

    def _agent_line(self, number: int, pre: Prefixes, meta: LineMeta) -> bool:
        """An event from the first line template (`rules/templates.yaml`) the line matches."""
        msg = meta.msg
        if DS_RANK_MAPPING in msg:
            self._learn_deepspeed_ranks(pre, msg)
            return True
        for template in self.tables.templates.templates:
            groups = template_match(template, msg, meta)
            if groups is not None:
                self._emit_template(template, groups, number, pre, meta)
                return True
        return False

    def _emit_template(
        self,
        template: Template,
        groups: dict[str, str | None],
        number: int,
        pre: Prefixes,
        meta: LineMeta,
    ) -> None:
        signals = self.tables.templates.signal_words
        notice = line_notice(
            {name: template_value(value, groups, signals) for name, value in template.attrs.items()}
        )
        if notice.end == "succeeded" and notice.target_pid is None:
            # A script's own end line once a stream: a file that many runs wrote (a sweep
            # printing HF's `train_runtime` dict per run) has the first as its evidence, and
            # each repeat, a known nothing, costs no parse (the outcome reads the first mark)
            ended = (template.id, pre.key)
            if ended in self.ended:
                self._outcome = _NOTHING
                return
            self.ended.add(ended)
        level = template.level or meta.level or Level.ERROR
        if template.level_if is not None:
            group, equals, other = template.level_if
            if groups.get(group) == equals:
                level = other
        pid = (
            template_value(template.pid, groups, signals) if template.pid is not None else meta.pid
        )
        host = template_value(template.host, groups, signals) if template.host is not None else None
        time = template_value(template.time, groups, signals) if template.time is not None else None
        # a time of the template's own (Slurm's `CANCELLED AT`) is dated; the line's may not be
        yearless = meta.yearless if time is None else None
        time = time if time is not None else meta.time
        local_rank = None
        if template.local_rank is not None:
            local_rank = template_value(template.local_rank, groups, signals)
        payload = None
        if template.exit:
            exitcode = notice.exitcode
            signal = notice.signal or signal_of_exit_code(exitcode)
            payload = RankExit(
                rank=None,
                local_rank=local_rank,
                host=host or pre.host or self.source.host,
                pid=template_value(template.pid, groups, signals)
                if template.pid is not None
                else None,
                exitcode=exitcode,
                signal=signal,
                time=time,
                error_file=None,
                message=None,
            )
        at = self._emit(
            template.event,
            pre.rest.strip(),
            number,
            number,
            pre,
            level=level,
            host=host,
            pid=pid,
            time=time,
            notice=notice,
            payload=payload,
            yearless=yearless,
            agent_pid=meta.agent_pid,
        )
        if at is not None and local_rank is not None:
            # the launcher's line about one of its workers: the file's rank is not that
            # worker's; its rank comes from the local -> global map when parsing ends
            self.events[at] = replace(self.events[at], local_rank=local_rank, rank=None)

    def _error_or_warning(self, number: int, pre: Prefixes, meta: LineMeta) -> None:
        tables = self.tables
        msg = meta.msg
        level = meta.level
        notable = False
        if level is None or level in (Level.INFO, Level.DEBUG):
            if tables.has_error_words(msg) and (level is None or tables.fatal_in_info.search(msg)):
                level = Level.ERROR
            elif level is None and tables.has_warning_words(msg):
                level = Level.WARNING
            elif tables.rule_markers.contains(msg.encode("utf-8", "replace")):
                # a rule looks for this line: context for correlate, evidence for the rules
                notable = True
                level = level or Level.INFO
            else:
                self._outcome = _NOTHING
                return
        if not _WORDS.search(msg):
            self._outcome = _NOTHING
            return  # a banner or an empty log call: `W... run.py:792] ****`
        if meta.src is not None and not tables.markers.contains(
            pre.rest.encode("utf-8", "replace")
        ):
            # A W/E level alone does not make a line notable (`W... run.py:792] Setting
            # OMP_NUM_THREADS ...`); it must carry a marker, as the fast path requires.
            self._outcome = _NOTHING
            return
        text = pre.rest.strip()
        c10d = message_facts(msg, self.tables.shapes)
        record = LogLineFacts(
            src=meta.src, src_line=meta.src_line, logger=meta.logger, notable=notable
        )
        exception = None
        m = EXC_LINE.match(msg.strip())
        if m is not None and m["msg"] is not None and re.search(r"(?:Error|Exception)$", m["type"]):
            exception = RaisedException(m["type"], m["msg"])
        if level is Level.WARNING or notable:
            if self.warning_count >= MAX_WARNINGS:
                self.warnings_dropped += 1
                # a repeat is a warning dropped while the count is full, else not even that
                self._outcome = WARNING_AGAIN
                return
            norm = _DIGITS.sub("#", msg)[:300]
            if norm in self.same_error:
                # the same warning again (digits aside): the first one is the evidence, and a
                # repeat is no reason to tell the user an input was not read completely
                self._outcome = WARNING_AGAIN
                return
            if len(self.same_error) < 8192:
                self.same_error[norm] = 1
            self.warning_count += 1
            kind = EventKind.WARNING_LINE
        else:
            norm = _DIGITS.sub("#", msg)[:300]
            seen = self.same_error.get(norm, 0)
            if seen >= MAX_SAME_ERROR:
                self.errors_dropped += 1
                self._outcome = ERROR_AGAIN
                return
            if len(self.same_error) < 8192 or seen:
                self.same_error[norm] = seen + 1
            kind = EventKind.ERROR_LINE
        index = self._emit(
            kind,
            text,
            number,
            number,
            pre,
            level=level,
            msg_rank=c10d.rank if c10d is not None else None,
            time=meta.time,
            pid=meta.pid,
            agent_pid=meta.agent_pid,
            payload=record,
            exception=exception,
            c10d=c10d,
            yearless=meta.yearless,
        )
        if index is not None and meta.c10 and kind is EventKind.ERROR_LINE:
            base = _RANK_KEY.sub("", pre.key)
            if len(self.last_error_of) < 4096 or base in self.last_error_of:
                self.last_error_of[base] = index
