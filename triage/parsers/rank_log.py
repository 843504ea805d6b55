"""The main log parser: one rank's (or a whole job's interleaved) console output -> events.

It turns a log into the events that matter: whole Python tracebacks (chained exceptions kept,
several ranks interleaved line by line told apart by their prefixes), C++ `terminate called`
blocks, c10/glog error and warning lines with the watchdog facts in them, torchrun / DeepSpeed /
Slurm / kernel exit and signal lines, torchrun's `ChildFailedError` summary blocks, NCCL lines
(through `nccl.py`) and one PROGRESS summary per rank.

Speed: a big log is read in chunks; a marker scan (`LogScanTables`) finds the few lines with a
word that can matter and only those (plus every line while a multi-line record is open) are
decoded and parsed.
Progress is read backwards from the tail of each chunk, far enough to find every stream that
progressed in the previous chunk (samples of the first chunk find streams that stopped early);
on this path a stream's last step and last epoch come from its last progress line only. A line
of those windows mostly costs one dict lookup: what matters about it is cached per digit-masked
line (a stream's progress lines differ in their numbers).
Small inputs (pasted text, files under `SCAN_ALL_BELOW`) are read line by line in full.
Memory is bounded: a chunk, capped records, capped event and warning counts.

Times: an event's `time` is its own line's timestamp; events whose lines carry none (tracebacks,
C++ blocks) get `attrs["time_before"]`, the latest time seen earlier in the file.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import signal as _signal
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import IO, Any

from triage import diskcache, knowledge
from triage.knowledge.templates import (
    Template,
    Templates,
    Value,
    literals_of,
    signal_of_exit_code,
)
from triage.literals import group_literals
from triage.model import Event, EventKind, Level, ParsedSource, RankExit, Source, SourceKind
from triage.parsers import timestamps as ts
from triage.parsers.common import MAX_PASTE, parser_stopped, text_digest
from triage.parsers.nccl import NcclTracker, fill_ranks, parse_nccl_line
from triage.parsers.nccl import line_needles as nccl_line_needles
from triage.parsers.prefixes import Prefixes, peel
from triage.scan.engines import LineCounter, hyperscan_module
from triage.scan.hot_lines import Gate, Gated, HotLines
from triage.scan.markers import MarkerSet
from triage.scan.reader import ChunkReader, clean, line_text, select_spans

MAX_EVENTS = 20_000
MAX_WARNINGS = 200  # generic warning lines kept per source
MAX_SAME_ERROR = 50  # identical error lines kept per source (after digits are masked)
TB_HEAD = 60  # traceback lines kept from the start ...
TB_TAIL = 60  # ... and from the end
MAX_FRAMES = 200
STALE_LINES = 400  # a record whose stream has been silent this long is closed
SCAN_ALL_BELOW = 64 << 10  # pasted text; bigger files take the marker-driven path
PROGRESS_WINDOW = 16 << 10

# The line templates, the error and warning words and the shell's signal words are knowledge
# (`rules/templates.yaml`); the marker needles are derived from it, the rules and the cascade
# families of the run's knowledge (`scan_tables`), never listed by hand nor read at import: a
# team folder's rules (`--rules`) are looked for in files exactly as in pastes.


# --------------------------------------------------------------------------- line formats

_OLD_C10 = re.compile(r"\[(?P<lvl>[IWEF]) (?P<src>[\w./-]+):(?P<srcline>\d+)\] ?")
_DEEPSPEED = re.compile(
    r"\[(?P<when>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}[,.]\d+)\] \[(?P<lvl>[A-Z]+)\] "
    r"\[(?P<src>[^:\]]+):(?P<srcline>\d+):(?P<func>[^\]]*)\] ?"
)
_PYLOG = re.compile(r"(?P<lvl>ERROR|WARNING|CRITICAL|INFO|DEBUG|FATAL):(?P<logger>[\w.]+):")
_LEVEL_WORD = re.compile(r"\b(?P<lvl>ERROR|CRITICAL|FATAL|WARNING|WARN)\b")
_LEVELS = {
    "E": Level.ERROR,
    "F": Level.FATAL,
    "W": Level.WARNING,
    "I": Level.INFO,
    "D": Level.DEBUG,
    "C": Level.FATAL,
    "ERROR": Level.ERROR,
    "CRITICAL": Level.FATAL,
    "FATAL": Level.FATAL,
    "WARNING": Level.WARNING,
    "WARN": Level.WARNING,
    "INFO": Level.INFO,
    "DEBUG": Level.DEBUG,
}

# --------------------------------------------------------------------------- message templates

_TB_HEADER = re.compile(r"\s*Traceback \(most recent call last\):\s*$")
# faulthandler writes `  File "x.py", line 12 in main` (no comma)
_TB_FILE = re.compile(r'\s+File "(?P<file>[^"]*)", line (?P<line>\d+)(?:,? in (?P<func>.*))?')
# a pasted traceback whose first frame was cut mid-path, its `File "` lost with it:
# `ckages/deepspeed/runtime/engine.py", line 468, in __getattr__`
_TB_CUT_FILE = re.compile(
    r'[ \t]*(?P<file>[^\s"][^"]*?\.pyx?)", line (?P<line>\d+), in (?P<func>[^\s"]+)[ \t]*$'
)
# Lines torch and NCCL append to an exception message without indenting them
_MESSAGE_TAILS = (
    "Exception raised from", "frame #", "Last error", "nccl", "socket", "CUDA kernel errors",
    "For debugging consider", "Compile with `TORCH_USE_CUDA_DSA`", "If reserved but unallocated",
    "See documentation for Memory Management",
)  # fmt: skip
_EXC_LINE = re.compile(r"(?P<type>[A-Za-z_][\w.]*(?:::\w+)*)(?::(?: ?(?P<msg>.*))?)?\s*$")
_CHAIN = re.compile(
    r"(During handling of the above exception, another exception occurred:"
    r"|The above exception was the direct cause of the following exception:)\s*$"
)
_TERMINATE = re.compile(
    r"terminate called (?:after throwing an instance of '(?P<cls>[^']+)'"
    r"|(?P<other>without an active exception|recursively))"
)
_WHAT = re.compile(r"\s*what\(\):\s*(?P<what>.*)")
_RAISED_FROM = re.compile(r"Exception raised from (?P<func>.+?) at (?P<loc>\S+)")
_CPP_FRAME = re.compile(r"frame #(?P<n>\d+): ")
_BORDER = re.compile(r"(?P<ch>[=-])(?P=ch){9,}\s*$")
_SUMMARY_TITLE = re.compile(r"\S.* FAILED\s*$")
_SUMMARY_IDX = re.compile(r"\[(?P<idx>\d+)\]:\s*$")
_SUMMARY_FIELD = re.compile(
    r"  (?P<key>time|host|rank|exitcode|error_file|traceback)\s*: ?(?P<value>.*)$"
)
_SUMMARY_RANK = re.compile(r"(?P<rank>-?\d+)(?: \(local_rank: (?P<lr>-?\d+)\))?")
_SUMMARY_EXIT = re.compile(
    r"(?P<code>-?\d+)(?: \(pid: (?P<pid>\d+)\))?\s*(?:\((?P<sig>[A-Z0-9_/]+)\))?"
)

_WATCHDOG_TIMEOUT = re.compile(
    r"Watchdog caught collective operation timeout: WorkNCCL\((?:SeqNum=(?P<seq>\d+), )?"
    r"OpType=(?P<op>\w+)(?:, NumelIn=(?P<nin>\d+), NumelOut=(?P<nout>\d+))?"
    r"(?:, [^)]*?)?, Timeout\(ms\)=(?P<timeout>\d+)\)(?: ran for (?P<ran>\d+) milliseconds)?"
)
_WATCHDOG_SUMMARY = re.compile(
    r"detected by watchdog at work(?: sequence id)?: (?P<seq>\d+)"
    r"(?:,| PG status:) last enqueued (?:NCCL )?work: (?P<enq>-?\d+), "
    r"last completed (?:NCCL )?work: (?P<comp>-?\d+)"
)
_PG_PREFIX = re.compile(
    r"\[PG (?:ID )?(?P<pgid>\d+)(?: PG GUID (?P<guid>[^\s(\]]+)(?:\((?P<desc>[^)]*)\))?)?"
    r" Rank (?P<rank>\d+)\]"
)
_RANK_TAG = re.compile(r"\[Rank (?P<rank>-?\d+)\]")
_AGENT_SRC = re.compile(r"distributed/(?:elastic/|run\.py|launcher/)")
_LEAD = re.compile(r"\s*(?:[A-Za-z_][\w.]*(?:::\w+)*:\s*)?")
_DUMP_FROM = re.compile(r"dump signal due to a collective timeout from (?:rank )?(?P<src>\d+)")
_WATCHDOG_STUCK = re.compile(r"watchdog got stuck for (?P<sec>\d+) seconds")
_NCCL_ERROR_IN = re.compile(
    r"NCCL error in: (?P<src>\S+):(?P<line>\d+), (?P<reason>.+?)"
    r"(?:, NCCL version (?P<ver>[\d.]+\S*))?$",
    re.MULTILINE,
)

_DS_HOST_RANKS = re.compile(r"'(?P<host>[^']+)': \[(?P<ranks>[\d, ]+)\]")
# faulthandler (on by default for torchrun workers): the fatal signal, then each thread's
# Python stack, innermost frame first
_FATAL_PYTHON = re.compile(r"Fatal Python error: (?P<what>[A-Z][\w ]+?)\s*$")
_FAULT_THREAD = re.compile(
    r"(?:Current thread|Thread) 0x[0-9a-fA-F]+ .*\(most recent call first\):"
)

# --------------------------------------------------------------------------- marker needles
# A big log is read only at the lines that hold one of these (case-insensitive) needles, plus
# every line while a multi-line record is open. Each is a literal every match of something
# that makes an event must contain: a line template or an error / warning word (templates
# file), a record opener or an error log level of this parser, a cascade family (correlate
# must see those messages), an NCCL debug line (the tracker learns ranks from them), and the
# rules' keywords (a rule can only match an event). A literal that healthy progress output
# holds (the templates file's `healthy` lines) is never a needle: it would make the scan decode
# every iteration.
_OPENERS = (
    _TB_HEADER,
    _TB_FILE,
    _TB_CUT_FILE,
    _TERMINATE,
    _WHAT,
    _FATAL_PYTHON,
    _RAISED_FROM,
    _SUMMARY_TITLE,
)
_DS_RANK_MAPPING = "global_rank_mapping="  # DeepSpeed's launcher: local -> global ranks
_OTHER_PARSERS_KINDS = {
    EventKind.PYSPY,
    EventKind.FLIGHT_RECORDER,
    EventKind.ENV_REPORT,
    EventKind.ELASTIC_ERROR,
}
# Log kinds the rank_log parser makes events of: a rule filtered to other kinds only (py-spy,
# flight recorder, env reports) gives no needle.
_LOG_KINDS = {
    SourceKind.RANK_LOG.value,
    SourceKind.TEXT.value,
    *(k.value for k in EventKind if k not in _OTHER_PARSERS_KINDS),
}


# A rule's or a cascade family's literal is a needle only when it is this long: a short one
# (`python`, `tensor`, `peer `) would pick ordinary lines (the templates' literals are written
# for the scan; the rules' are picked for matching events).
SPECIFIC_NEEDLE = 12


def _lowered(literals: tuple[str, ...] | None, min_len: int = 4) -> list[str]:
    return [lit.lstrip("\0").lower() for lit in literals or () if len(lit.lstrip("\0")) >= min_len]


def _healthy(needle: str, templates: Templates) -> bool:
    return any(needle in line.lower() for line in templates.healthy)


def rule_needles(rules: Iterable[knowledge.Rule], templates: Templates) -> list[str]:
    """The rules' keywords that can be needles: of rules that can match this parser's events,
    SPECIFIC_NEEDLE characters or more, ASCII (what the scan reads), and not in healthy
    progress output (`templates.healthy`)."""
    out: list[str] = []
    for rule in rules:
        kinds = rule.event_kinds | rule.source_kinds
        if kinds and not kinds & _LOG_KINDS:
            continue
        out.extend(
            n
            for n in _lowered(rule.keywords, SPECIFIC_NEEDLE)
            if n.isascii() and not _healthy(n, templates)
        )
    return list(dict.fromkeys(out))


def _word_needles(templates: Templates) -> list[str]:
    """Needles of the generic words (error and warning words, level names, `NCCL `): their
    exact patterns (`_VERDICTS`) decide in the scan whether a line holding one matters."""
    words = [
        *(
            n
            for pattern in (templates.error_words, templates.warning_words)
            if pattern is not None
            for n in _lowered(literals_of(pattern.pattern))
        ),
        *(name.lower() for name, lvl in _LEVELS.items() if lvl is Level.FATAL and len(name) > 3),
        *nccl_line_needles(),
    ]
    return list(dict.fromkeys(words))


def _template_verdicts(templates: Templates) -> dict[str, bytes]:
    """Template id -> its pattern for the scan, where hyperscan compiles it: a template whose
    literal is a generic word (`Killed`, ` failed`) then costs nothing on the lines that only
    hold the word. Templates it cannot compile keep their literals as needles."""
    hs = hyperscan_module()
    out: dict[str, bytes] = {}
    for template in templates.templates:
        pattern = re.sub(r"\(\?P<\w+>", "(?:", template.pattern.pattern).encode()
        if hs is None:
            out[template.id] = pattern
            continue
        if not _hyperscan_compiles(hs, pattern):  # a construct it lacks (`^` inside a group)
            pattern = _exact(template.literals)  # its literals, in their own case
        out[template.id] = pattern
    return out


def _hyperscan_compiles(hs: Any, pattern: bytes) -> bool:
    """Whether hyperscan compiles `pattern`; the answer is kept on disk (`triage.diskcache`):
    trying each template costs ~50 ms of every run's start."""
    key = f"{hs.__version__}\0{pattern.decode('utf-8', 'surrogateescape')}"
    known = diskcache.section(_HS_COMPILES).get(key)
    if isinstance(known, bool):
        return known
    try:
        hs.Database(mode=hs.HS_MODE_BLOCK).compile(expressions=[pattern])
        ok = True
    except Exception:  # noqa: BLE001 - hyperscan's own error type for what it cannot compile
        ok = False
    diskcache.put(_HS_COMPILES, key, ok)
    return ok


_HS_COMPILES = "hyperscan-compiles"


def _exact(literals: Iterable[str] | None) -> bytes:
    """Literals as a case-sensitive alternation (`Killed`, not `killed_workers=0`)."""
    return b"|".join(re.escape(lit.lstrip("\0")).encode() for lit in literals or ())


def _specific_needles(
    kb: knowledge.Knowledge, template_verdicts: dict[str, bytes], rule_words: list[str]
) -> list[str]:
    """Needles that make a line worth parsing alone: the line templates' and the record
    openers' literals, DeepSpeed's rank map, the cascade families' and the rules' keywords."""
    cascade = [
        n
        for family in kb.cascade.families
        for n in _lowered(group_literals(f"(?i:{family.pattern.pattern})"), SPECIFIC_NEEDLE)
        if not _healthy(n, kb.templates)
    ]
    templates = [
        n
        for t in kb.templates.templates
        if t.id not in template_verdicts
        for n in _lowered(t.literals)
    ]
    found = [
        *templates,
        _DS_RANK_MAPPING,
        *cascade,
        "nccl version ",  # a bare `NCCL version 2.x` line (no `host:pid:tid ... NCCL INFO`)
        *rule_words,
    ]
    return list(dict.fromkeys(found))


def _needles(specific: list[str], templates: Templates) -> list[str]:
    structural = [n for p in _OPENERS for n in _lowered(group_literals(p.pattern))]
    return list(dict.fromkeys([*specific, *structural, *_word_needles(templates)]))


def _verdicts(templates: Templates, template_verdicts: dict[str, bytes]) -> list[bytes]:
    """What makes a line that holds only generic words worth parsing, in the syntax both
    hyperscan and `re` read: exactly the words `_error_or_warning` looks for, a W/E/F/C log
    level (such a line is an event when it holds any needle), NCCL WARN lines (the NCCL INFO
    lines `NcclTracker.assess` keeps: `_gated`). Each is a superset of what the parser then
    decides."""
    assert templates.error_words is not None and templates.warning_words is not None
    # hyperscan's \w and \b are ASCII: `\w+Warning:` could miss `éWarning:`, whose
    # `\bWarning\b` it finds (a boundary before the W, seen from the bytes)
    warning = templates.warning_words.pattern.replace(r"|\w+Warning:", "|Warning:")
    return [
        *template_verdicts.values(),
        # the record openers' literals in their own case (` FAILED`, `Traceback (most ...`)
        *(_exact(group_literals(p.pattern)) for p in _OPENERS),
        templates.error_words.pattern.encode(),
        warning.encode(),
        # c10 `[E1218 20:27:21.4...`, glog `E1218 20:27:21.4...`, old c10 `[E file.cpp:12]`
        rb"[WEFC]\d{3,4} \d\d:\d\d:\d\d\.|\[[WEF] [\w./-]+:\d+\]|\b(?:CRITICAL|FATAL)\b",
        rb"NCCL WARN",
    ]


def _gated(templates: Templates) -> list[Gated]:
    """Verdicts only some chunks need, behind a cheap test of the chunk (see `HotLines`)."""
    # ANSI colour codes end in a letter (`\x1b[1;31mERROR`): no word boundary is left to see
    # in the bytes, so a coloured line is read whenever it holds a generic word at all
    words = b"|".join(re.escape(w.encode()) for w in _word_needles(templates))
    colour = Gated(
        Gate(b"\x1b"),
        verdicts=(rb"\x1b[^\n]*?(?i:" + words + rb")", rb"(?i:" + words + rb")[^\n]*?\x1b"),
    )
    # The NCCL INFO lines `NcclTracker.assess` keeps. Where NCCL INFO is on every line, a
    # pattern `NCCL INFO[^\n]*?X` is followed to the end of each line (~100 MB/s): the ones
    # with a literal of their own are that literal alone here (a superset: the tracker
    # decides), each behind the gate of a chunk that holds NCCL INFO lines at all.
    nccl = Gated(
        Gate(b"NCCL INFO"),
        verdicts=(
            rb"cudaDriverVersion |Bootstrap|Using network |NET/\w+ ?: ?Using "
            rb"| set by environment to |:\d+ -> \d",
            _COMM_VERDICT,
        ),
        # channel lines (dozens per communicator): the tracker keeps the first of each
        # transport, so each chunk reports only its first line of each known transport (and
        # its first channel line of any); `1[1] via P2P/IPC`, `1[1] [send] via NET/IB/0`
        once=tuple(
            rb"\] via " + transport
            for transport in (
                rb"P2P",
                rb"SHM",
                rb"NET/IB",
                rb"NET/Socket",
                rb"NET/",
                rb"COLLNET",
                rb"NVLS",
                b"",
            )
        ),
        # An INFO line about trouble (`Connection closed`, `Abort COMPLETE`) needs its
        # context: the words alone are in ordinary lines (`failed_steps=0`). The words are
        # literals of this group's scan; a line holding one is hot when NCCL INFO precedes it.
        after=(b"NCCL INFO ", _NCCL_TROUBLE),
    )
    return [colour, nccl]


_NCCL_TROUBLE = (b"error", b"fail", b"closed", b"abort", b"timeout", b"timed out", b"refused")
_NCCL_TROUBLE += (b"unreachable", b"mismatch", b"exceeded")


# A communicator set-up line (`comm 0x.. rank R nRanks N`, `... nranks N ... Init COMPLETE`):
# muted once the input's tracker only counts them (`MAX_COMM_EVENTS`)
_COMM_VERDICT = rb" (?:nRanks|nranks) "
NCCL_GROUPS = (1,)  # `_gated()`'s NCCL INFO group
# what `LogScanTables.hot_lines.find` is told to mute once an input's tracker only counts them
MUTE_COMMS = frozenset({_COMM_VERDICT})
_NONE: frozenset[bytes] = frozenset()

# --------------------------------------------------------------------------- progress

PROGRESS_MARKERS = MarkerSet(["step", "epoch", "iteration", "it/s", "s/it"])
# The wrapper prefixes of a raw line, to skip older progress lines of a stream undecoded.
_RAW_PREFIXES = re.compile(
    rb"(?:\d{1,6}: |\[[A-Za-z_]+\d+\]: ?|\[\d+,\d+\]<\w+>: ?|[\w.-]{1,64}: |\(\S+ pid=\d+[^)]*\) )*"
)
# `[Rank N]` counts only where it names the stream, as `_P_DEEPSPEED` reads it (`[Rank 0]
# step=`): DeepSpeed's `[Rank 0] time (ms) | ... step: 12` lines are another stream, and two
# streams under one raw key would hide each other's lines
_RAW_RANK = re.compile(rb"\[Rank (-?\d+)\] step=")
_DIGITS_TO_0 = bytes.maketrans(b"123456789", b"000000000")
_SHAPE_MAX = 1024  # longest digit-masked line kept in a parser's shape cache (4096 at most)


def _raw_spans(data: bytes, start: int, end: int) -> tuple[int, int, int]:
    """(end of the raw prefixes, start and end of the `[Rank N]` number or 0, 0) of the line
    data[start:end], relative to its start; the rank counts within the line's first 200 bytes."""
    prefix = _RAW_PREFIXES.match(data, start, end)
    prefix_end = prefix.end() - start if prefix is not None else 0
    rank = _RAW_RANK.search(data, start, min(start + 200, end))
    if rank is None:
        return prefix_end, 0, 0
    return prefix_end, rank.start(1) - start, rank.end(1) - start


# What parsing a line alone came to, when a line like it (digits aside) would come to the
# same: nothing, a warning seen before, an error seen too often; else it is no repeat. A
# line's key among repeats is its raw prefixes as they are (`[default3]:[rank11]:`, whose
# digits say which process) and the rest with digits masked; NCCL lines (the tracker keeps
# state per line) and lines longer than _SHAPE_MAX are never repeats.
_NOT_A_REPEAT, _NOTHING, _WARNING_AGAIN, _ERROR_AGAIN = range(4)
# Digits laid out as the timestamps `timestamps.parse_any` and `_meta` read, valid or not.
_TIME_SHAPED = re.compile(
    r"\d{4}-\d{2}-\d{2}[ T_]\d{2}:|\[\d{2}/\d{2}/\d{2} \d{2}:|[DIWEFC]\d{3,4} \d{2}:\d{2}:\d{2}\."
)


def _masked_digit_needles(
    markers: MarkerSet, rule_markers: MarkerSet, templates: Templates
) -> tuple[bytes, ...]:
    """The needles and template literals that hold a digit, digits masked: a line whose key
    holds one may be decided by its digits (`return code = -9`, not `-8`)."""
    found = {
        n
        for n in (*markers._needles, *rule_markers._needles)  # noqa: SLF001 - same package
        if any(c in b"0123456789" for c in n)
    }
    for template in templates.templates:
        found.update(
            lit.lower().encode() for lit in _lowered(template.literals, 1) if re.search(r"\d", lit)
        )
    return tuple(sorted(n.translate(_DIGITS_TO_0) for n in found))


@dataclass(frozen=True, eq=False)
class LogScanTables:
    """What the parser derives from the knowledge of a run (`scan_tables`): the words that make
    a line an error or a warning, the needles of the marker scan (`markers`; the rules'
    keywords alone: `rule_markers`), the hot-line scan of big chunks and its parts, and the
    needles that make a line's digits matter to its verdict."""

    templates: Templates
    error_words: re.Pattern[str]
    warning_words: re.Pattern[str]
    fatal_in_info: re.Pattern[str]
    # Lower-case pieces, one of which every `error_words` match holds: a cheap `in` test
    # spares most lines the big regex.
    error_keys: tuple[str, ...]
    template_verdicts: dict[str, bytes]
    specific_needles: tuple[str, ...]
    verdicts: tuple[bytes, ...]
    gated: tuple[Gated, ...]
    markers: MarkerSet
    # A line that holds a rule's keyword is an event even without an error word or a log
    # level (`Using ... as PyTorch extensions root`, `NVIDIA H100 ... is not compatible`): a
    # rule is looking for it.
    rule_markers: MarkerSet
    hot_lines: HotLines
    digit_needles: tuple[bytes, ...]

    def has_error_words(self, text: str) -> bool:
        low = text.lower()
        return any(key in low for key in self.error_keys) and (
            self.error_words.search(text) is not None
        )

    def has_warning_words(self, text: str) -> bool:
        return "warn" in text.lower() and self.warning_words.search(text) is not None

    def digit_sensitive(self, key: bytes) -> bool:
        low = key.lower()
        return any(n in low for n in self.digit_needles)

    def using(self, engine: str) -> LogScanTables:
        """The same tables with every marker scan on another engine (tests compare them)."""
        markers = self.markers.using(engine)
        return replace(
            self,
            markers=markers,
            rule_markers=self.rule_markers.using(engine),
            hot_lines=HotLines(markers, self.specific_needles, self.verdicts, gated=self.gated),
        )

    def warm(self) -> None:
        """Compile the scans now (numpy or hyperscan imported, the databases built): worker
        processes forked afterwards inherit them."""
        for markers in (self.markers, self.rule_markers, PROGRESS_MARKERS):
            _ = markers.engine
        # the database every chunk is scanned with and the NCCL groups' (cheap, and an NCCL
        # init log's every chunk needs one); colour codes' (~0.15 s) only where a chunk holds
        # them
        self.hot_lines.warm(NCCL_GROUPS)


def scan_tables(kb: knowledge.Knowledge | None = None) -> LogScanTables:
    """The scan tables of a loaded knowledge base (None: the shipped one), built once per
    load: `knowledge.load` gives the same object until a file changes, so repeated runs and
    `explain --jsonl` build them once."""
    return _scan_tables(kb if kb is not None else knowledge.shipped())


@lru_cache(maxsize=8)  # a Knowledge hashes by its identity: one entry per load
def _scan_tables(kb: knowledge.Knowledge) -> LogScanTables:
    templates = kb.templates
    error_words, warning_words = templates.error_words, templates.warning_words
    fatal_in_info = templates.fatal_in_info
    # the templates schema requires all three
    assert error_words is not None and warning_words is not None and fatal_in_info is not None
    template_verdicts = _template_verdicts(templates)
    rule_words = rule_needles(kb.rules, templates)
    specific = _specific_needles(kb, template_verdicts, rule_words)
    markers = MarkerSet(_needles(specific, templates), ordinary=templates.healthy)
    rule_markers = MarkerSet(rule_words, ordinary=templates.healthy)
    verdicts = _verdicts(templates, template_verdicts)
    gated = _gated(templates)
    tables = LogScanTables(
        templates=templates,
        error_words=error_words,
        warning_words=warning_words,
        fatal_in_info=fatal_in_info,
        error_keys=tuple(
            dict.fromkeys(lit.lstrip("\0").lower() for lit in literals_of(error_words.pattern))
        ),
        template_verdicts=template_verdicts,
        specific_needles=tuple(specific),
        verdicts=tuple(verdicts),
        gated=tuple(gated),
        markers=markers,
        rule_markers=rule_markers,
        hot_lines=HotLines(markers, specific, verdicts, gated=gated),
        digit_needles=_masked_digit_needles(markers, rule_markers, templates),
    )
    diskcache.save()  # the literals derived here, for the next run's start (`triage.diskcache`)
    return tables


_P_MEGATRON = re.compile(r"\biteration\s+(?P<step>\d+)\s*/\s*(?P<total>\d+)\s*\|")
_P_DEEPSPEED = re.compile(r"\[Rank (?P<rank>-?\d+)\] step=(?P<step>\d+)")
_P_HF = re.compile(r"\{'loss': [^}]*?'epoch': (?P<epoch>[\d.]+)")
_P_TQDM = re.compile(r"(?:\d+%\|[^|\n]*\|\s*)?(?P<step>\d+)/(?P<total>\d+) \[\d")
_P_STEP = re.compile(r"\b(?:global[_ ])?[Ss]tep[\s:=\[#]*(?P<step>\d+)(?:\s*/\s*(?P<total>\d+))?")
_P_ITER = re.compile(r"\b[Ii]ter(?:ation)?[\s:=\[#]*(?P<step>\d+)(?:\s*/\s*(?P<total>\d+))?")
_P_EPOCH = re.compile(r"\b[Ee]poch[\s:=\[]*(?P<epoch>\d+(?:\.\d+)?)(?:\s*/\s*(?P<total>\d+))?")
_USER_FRAME_SKIP = ("site-packages", "dist-packages", "/lib/python", "<frozen", "<string>")

_DIGITS = re.compile(r"\d+")
_RANK_KEY = re.compile(r"\[rank\d+\]")
_WORDS = re.compile(r"[A-Za-z]{3}")


def _signal_name(code: int | None) -> str | None:
    if code is None or code >= 0:
        return None
    try:
        return _signal.Signals(-code).name
    except ValueError:
        return None


def _int(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        return None


@dataclass
class _Meta:
    """What a line's log format said: level, time, pid, source location, message."""

    msg: str
    level: Level | None = None
    time: float | None = None
    pid: int | None = None
    src: str | None = None
    src_line: int | None = None
    logger: str | None = None
    c10: bool = False
    agent_pid: int | None = None  # pid of torchrun's agent when it logged the line
    yearless: tuple[str, str, str, str, str | None] | None = None


# --------------------------------------------------------------------------- multi-line records

CONSUMED, FOREIGN, CLOSE, DONE = 0, 1, 2, 3  # DONE: consumed, and the record is complete


@dataclass
class _Record:
    """A multi-line record being collected from one output stream."""

    stream: str
    pre: Prefixes
    start: int
    last_line: int
    head: list[str] = field(default_factory=list)
    tail: deque[str] = field(default_factory=lambda: deque(maxlen=TB_TAIL))
    omitted: int = 0
    # the file line of each kept line: blank lines, other streams' lines of a shared console
    # and omitted lines are not in the text, so `start + offset` would point elsewhere
    head_numbers: list[int] = field(default_factory=list)
    tail_numbers: deque[int] = field(default_factory=lambda: deque(maxlen=TB_TAIL))

    def add(self, number: int, text: str) -> None:
        self.last_line = number
        if len(self.head) < TB_HEAD:
            self.head.append(text)
            self.head_numbers.append(number)
            return
        if len(self.tail) == self.tail.maxlen:
            self.omitted += 1
        self.tail.append(text)
        self.tail_numbers.append(number)

    def text(self) -> str:
        body = list(self.head)
        if self.omitted:
            body.append(f"... [{self.omitted} lines omitted] ...")
        body.extend(self.tail)
        while body and not body[-1].strip():
            body.pop()
        return "\n".join(body)

    def line_numbers(self) -> tuple[int | None, ...]:
        """The file line of each line of `text()` (None for the omission marker)."""
        marker: tuple[int | None, ...] = (None,) if self.omitted else ()
        return (*self.head_numbers, *marker, *self.tail_numbers)


@dataclass
class _Traceback(_Record):
    state: str = "frames"  # frames | exc | chain
    frames: list[tuple[str, int, str]] = field(default_factory=list)
    frames_tail: deque[tuple[str, int, str]] = field(
        default_factory=lambda: deque(maxlen=MAX_FRAMES // 2)
    )
    frames_dropped: int = 0
    exc_type: str | None = None
    exc_message: str | None = None
    chained: list[str] = field(default_factory=list)
    cont: int = 0
    blanks: int = 0
    headerless: bool = False
    indent: int = 0  # a pasted traceback indented as a whole (markdown code block)
    last_was_code: bool = False  # the last frames line was a frame's source line
    pasted: bool = False  # pasted text (`triage explain`): lenient about trimmed exception lines

    def frame(self, f: tuple[str, int, str]) -> None:
        if len(self.frames) < MAX_FRAMES // 2:
            self.frames.append(f)
            return
        if len(self.frames_tail) == self.frames_tail.maxlen:
            self.frames_dropped += 1
        self.frames_tail.append(f)

    def feed(self, number: int, text: str) -> int:
        if self.indent and text[: self.indent].isspace():
            text = text[self.indent :]
        stripped = text.strip()
        if self.state == "frames":
            if not stripped:
                self.blanks += 1
                return CONSUMED if self.blanks <= 2 else CLOSE
            self.blanks = 0
            m = _TB_FILE.match(text)
            if m is None and self.headerless and not self.frames and not self.head:
                m = _TB_CUT_FILE.match(text)  # the paste's first frame, cut mid-path
            if m is not None:
                self.frame((m["file"], int(m["line"]), (m["func"] or "").strip()))
                self.add(number, text)
                self.last_was_code = False
                return CONSUMED
            if text[:1].isspace():
                self.add(number, text)
                self.last_was_code = True
                return CONSUMED
            if _TB_HEADER.match(text):
                return CLOSE  # a new traceback: this one was cut short
            m = _EXC_LINE.match(text)
            if m is not None and not _looks_structured(text):
                self._exception(m["type"], m["msg"])
                self.state = "exc"
                self.add(number, text)
                return CONSUMED
            if self.last_was_code and self.pasted and not _looks_structured(text):
                # a paste trimmed to the message: `Foo.__init__() takes 2 arguments but 5 ...`
                # (not in big logs, where another process's line may land here)
                self.exc_message = stripped
                self.state = "exc"
                self.add(number, text)
                return CONSUMED
            return FOREIGN
        if self.state == "exc":
            if not stripped:
                self.blanks += 1
                return CONSUMED if self.blanks <= 2 else CLOSE
            if _CHAIN.match(stripped):
                self.chained.append(self._exc_line())
                self.state = "chain"
                self.blanks = 0
                self.add(number, text)
                return CONSUMED
            if self.blanks == 0 and self.cont < 40 and self._continues(text):
                self.cont += 1
                if self.exc_message is not None and len(self.exc_message) < 4000:
                    self.exc_message = f"{self.exc_message}\n{stripped}"
                self.add(number, text)
                return CONSUMED
            return CLOSE
        # chain: waiting for the next traceback of the chain
        if not stripped:
            return CONSUMED
        if _TB_HEADER.match(text) or _TB_FILE.match(text):
            self.state = "frames"
            self.cont = self.blanks = 0
            if _TB_FILE.match(text):
                return self.feed(number, text)
            self.add(number, text)
            return CONSUMED
        return CLOSE

    def _continues(self, text: str) -> bool:
        if _BORDER.match(text) or _TB_HEADER.match(text) or _looks_structured(text):
            return False
        if text[:1].isspace() or text.startswith(_MESSAGE_TAILS):
            return True
        last = self.tail[-1] if self.tail else (self.head[-1] if self.head else "")
        return last.rstrip().endswith(":") and not text.startswith("[")

    def _exception(self, exc_type: str, msg: str | None) -> None:
        self.exc_type = exc_type
        self.exc_message = (msg or "").strip()

    def _exc_line(self) -> str:
        if self.exc_type is None:
            return (self.exc_message or "").split("\n", 1)[0]
        first = (self.exc_message or "").split("\n", 1)[0]
        return f"{self.exc_type}: {first}" if first else self.exc_type

    def all_frames(self) -> list[tuple[str, int, str]]:
        return self.frames + list(self.frames_tail)


@dataclass
class _CppException(_Record):
    cls: str | None = None
    what: str | None = None
    raised_from: str | None = None
    frame_count: int = 0
    cont: int = 0

    def feed(self, number: int, text: str) -> int:
        stripped = text.strip()
        if not stripped:
            return CLOSE if self.what is not None or self.frame_count else CONSUMED
        m = _WHAT.match(text)
        if m is not None and self.what is None:
            self.what = m["what"].strip()
            self.add(number, text)
            return CONSUMED
        m = _RAISED_FROM.match(stripped)
        if m is not None:
            self.raised_from = f"{m['func']} at {m['loc']}"
            self.add(number, text)
            return CONSUMED
        if _CPP_FRAME.match(stripped):
            self.frame_count += 1
            if self.frame_count <= 12:
                self.add(number, text)
            else:
                self.last_line = number
            return CONSUMED
        if self.what is not None and not self.frame_count and self.cont < 20:
            if _looks_structured(text) or _TB_HEADER.match(text):
                return CLOSE
            self.cont += 1
            self.what = f"{self.what}\n{stripped}"
            self.add(number, text)
            return CONSUMED
        return CLOSE


@dataclass
class _FaultHandler(_Record):
    """`Fatal Python error: Segmentation fault` and the thread stacks faulthandler prints."""

    what: str = ""
    frames: list[tuple[str, int, str]] = field(default_factory=list)
    blanks: int = 0

    def feed(self, number: int, text: str) -> int:
        stripped = text.strip()
        if not stripped:
            self.blanks += 1
            return CONSUMED if self.blanks <= 2 else CLOSE
        self.blanks = 0
        m = _TB_FILE.match(text)
        if m is not None:
            if len(self.frames) < MAX_FRAMES:
                self.frames.append((m["file"], int(m["line"]), (m["func"] or "").strip()))
            self.add(number, text)
            return CONSUMED
        if _FAULT_THREAD.match(stripped) or stripped.startswith("Extension modules:"):
            self.add(number, text[:300])
            return CONSUMED
        return CLOSE


@dataclass
class _CppTail(_Record):
    """`Exception raised from ...` + `frame #N` lines after a c10 error line: added to it."""

    event_index: int = -1
    raised_from: str | None = None
    frame_count: int = 0

    def feed(self, number: int, text: str) -> int:
        stripped = text.strip()
        m = _RAISED_FROM.match(stripped)
        if m is not None and self.raised_from is None:
            self.raised_from = f"{m['func']} at {m['loc']}"
            self.add(number, text)
            return CONSUMED
        if _CPP_FRAME.match(stripped):
            self.frame_count += 1
            if self.frame_count <= 8:
                self.add(number, text)
            else:
                self.last_line = number
            return CONSUMED
        return CLOSE


@dataclass
class _SummaryEntry:
    idx: int
    root: bool
    start: int
    end: int
    lines: list[str] = field(default_factory=list)
    fields: dict[str, str] = field(default_factory=dict)
    traceback: list[str] = field(default_factory=list)


@dataclass
class _Summary(_Record):
    """torchrun's ChildFailedError table (formats.md §2.1.1)."""

    title: str | None = None
    section: str = "failures"
    entry: _SummaryEntry | None = None
    done: list[_SummaryEntry] = field(default_factory=list)
    in_traceback: bool = False
    headed: bool = False  # a `Failures:` or `Root Cause` header was seen: a real table

    def _finish(self) -> None:
        if self.entry is not None and len(self.done) < 4096:
            self.done.append(self.entry)
        self.entry = None
        self.in_traceback = False

    def feed(self, number: int, text: str) -> int:
        self.last_line = number
        m = _BORDER.match(text)
        if m is not None:
            self._finish()
            if m["ch"] == "=" and self.done:
                return DONE
            return CONSUMED
        stripped = text.strip()
        if stripped == "Failures:":
            self._finish()
            self.section = "failures"
            self.headed = True
            return CONSUMED
        if stripped.startswith("Root Cause (first observed failure)"):
            self._finish()
            self.section = "root"
            self.headed = True
            return CONSUMED
        if stripped == "<NO_OTHER_FAILURES>":
            return CONSUMED
        m = _SUMMARY_IDX.match(text)
        if m is not None:
            self._finish()
            self.entry = _SummaryEntry(int(m["idx"]), self.section == "root", number, number)
            self.entry.lines.append(text)
            return CONSUMED
        if (
            self.entry is None
            and self.title is None
            and "FAILED" in text
            and _SUMMARY_TITLE.match(text)
        ):
            self.title = stripped
            return CONSUMED
        if self.entry is not None:
            m = _SUMMARY_FIELD.match(text)
            if m is not None:
                self.in_traceback = m["key"] == "traceback"
                self.entry.fields[m["key"]] = m["value"].rstrip()
                if self.in_traceback:
                    self.entry.traceback.append(m["value"].rstrip())
                self._entry_line(number, text)
                return CONSUMED
            if self.in_traceback and (text.startswith("  ") or not stripped):
                if len(self.entry.traceback) < 400:
                    self.entry.traceback.append(text[4:] if text.startswith("    ") else text[2:])
                self._entry_line(number, text)
                return CONSUMED
        if not stripped:
            return CONSUMED
        self._finish()
        return CLOSE

    def _entry_line(self, number: int, text: str) -> None:
        assert self.entry is not None
        self.entry.end = number
        if len(self.entry.lines) < 40:
            self.entry.lines.append(text)


def _looks_structured(text: str) -> bool:
    """A line that is its own record (log-formatted, NCCL), never part of a traceback."""
    head = text[:40]
    if head.startswith("[") and (
        ts.C10_RE.match(text)
        or _OLD_C10.match(text)
        or _DEEPSPEED.match(text)
        or ts.parse_dated(head) is not None
    ):
        return True
    if ts.GLOG_RE.match(text) or _PYLOG.match(text):
        return True
    if head[:1].isdigit() and ts.parse_dated(head) is not None:
        return True
    return "NCCL" in text and parse_nccl_line(text) is not None


# --------------------------------------------------------------------------- progress


@dataclass
class _Progress:
    step_line: int = 0
    step: int | None = None
    total: int | None = None
    epoch_line: int = 0
    epoch: float | None = None
    text: str = ""
    line: int = 0
    pre: Prefixes | None = None
    msg_rank: int | None = None
    chunk: int = -1  # the chunk that last updated it


def _read_progress(
    text: str, tables: LogScanTables
) -> tuple[int | None, int | None, float | None, int | None] | None:
    """(step, total, epoch, rank named in the message) of a progress line, or None."""
    # each pattern runs only when its literal is there: most lines have none
    if "iteration" in text:
        m = _P_MEGATRON.search(text)
        if m is not None:
            return int(m["step"]), int(m["total"]), None, None
    if "step=" in text:
        m = _P_DEEPSPEED.search(text)
        if m is not None:
            return int(m["step"]), None, None, int(m["rank"])
    step = total = None
    epoch: float | None = None
    if "'epoch'" in text:
        m = _P_HF.search(text)
        if m is not None:
            epoch = float(m["epoch"])
    m = _P_TQDM.search(text) if "/" in text and " [" in text else None
    if m is not None:
        step, total = int(m["step"]), int(m["total"])
    elif text[:1].isspace() or tables.has_error_words(text):
        # `... at step 23` in an error or a traceback line says where it broke, not progress
        return (None, None, epoch, None) if epoch is not None else None
    else:
        m = None
        if "tep" in text:
            m = _P_STEP.search(text)
        if m is None and ("ter" in text or "Iter" in text):
            m = _P_ITER.search(text)
        if m is not None:
            step, total = int(m["step"]), _int(m["total"])
    if epoch is None and "poch" in text:
        m = _P_EPOCH.search(text)
        if m is not None:
            try:
                epoch = float(m["epoch"])
            except ValueError:
                epoch = None
    if step is None and epoch is None:
        return None
    return step, total, epoch, None


# --------------------------------------------------------------------------- the parser


class _LogParser:
    by_shape = True  # progress windows read line by line with a shape cache (tests turn it off)
    repeats = True  # a repeat of a line read alone gets its verdict (tests turn it off)

    def __init__(
        self,
        source: Source,
        scan_all: bool,
        tables: LogScanTables,
        opener: Callable[[], IO[bytes]] | None = None,
    ) -> None:
        self.source = source
        self.tables = tables
        self.opener = opener or source.open  # a paste already read: its bytes
        self.scan_all = scan_all
        self.pasted = source.kind is SourceKind.TEXT
        self.events: list[Event] = []
        self.warnings: list[str] = []
        self.records: dict[str, _Record] = {}
        self.nccl = NcclTracker()
        self.local_to_rank: dict[tuple[str | None, int], int] = {}
        self.progress: dict[tuple[str, int | None], _Progress] = {}
        self.last_error_of: dict[str, int] = {}  # stream -> index of its last c10 error event
        self.warning_count = 0
        self.warnings_dropped = 0
        self.same_error: dict[str, int] = {}
        self.errors_dropped = 0
        self.events_dropped = 0
        self.yearless: list[tuple[int, tuple[str, str, str, str, str | None]]] = []
        self._last_time: float | None = None
        # A hot line that repeats an earlier one apart from its digits (the same warning every
        # step, a config dump printed again) gets that one's verdict without being parsed:
        # digit-masked line -> (outcome, whether it had a time). `_outcome` and `_timed` are
        # what parsing the line now said; `_pending` the raw repeats since, newest last, whose
        # times are read only if something asks for `last_time`.
        self._repeats: dict[bytes, tuple[int, bool]] = {}
        self._outcome = 0
        self._timed = False
        self._pending: list[bytes] = []
        self.chunk = 0
        mtime = None
        try:
            if source.path and os.path.isfile(source.path):
                mtime = os.path.getmtime(source.path)
        except (OSError, ValueError):
            mtime = None
        self.hint = ts.YearHint.from_mtime(mtime)
        self.reader: ChunkReader | None = None
        self._pre: Prefixes | None = None  # the prefixes of the line `handle` read last
        # digit-masked line -> (holds a progress marker, raw prefix end, rank start, rank end)
        self._line_shapes: dict[bytes, tuple[bool, int, int, int]] = {}

    # ------------------------------------------------------------------ driving

    def dense(self) -> bool:
        return self.scan_all or bool(self.records)

    def run(self) -> None:
        stream = self.opener()
        try:
            self.reader = reader = ChunkReader(stream)
            for data, first in reader:
                self.chunk += 1
                counter = reader.counter or LineCounter(data, first)
                self._read_chunk(reader, data, counter)
                if not self.scan_all:
                    self.scan_progress(data, counter)
        finally:
            with contextlib.suppress(Exception):
                stream.close()

    def _read_chunk(self, reader: ChunkReader, data: bytes, counter: LineCounter) -> None:
        """Read the chunk's hot lines (and every line while a record is open).

        The loop is `select_spans` written out, with a repeat's replay inline: a log that
        prints the same warning every step has thousands of hot lines per chunk, and each
        generator step and call costs ~1 us here.
        """
        if self.scan_all:
            for number, start, end in select_spans(data, [], self.dense, counter):
                for text in line_text(reader, data[start:end], number):  # type: ignore[arg-type]
                    self.handle(number, text)  # type: ignore[arg-type]
            return
        muted = self.nccl.comms_full
        skipped = self.nccl.skipped
        # While set-ups are still read, their lines come apart (`comms`): once the tracker
        # holds enough of them, the rest of the chunk goes on without them, unscanned again.
        comms: list[int] = []
        if muted:
            offsets = self.tables.hot_lines.find(data, MUTE_COMMS, skipped)
        else:
            others = self.tables.hot_lines.find(data, MUTE_COMMS, None, comms)
            offsets = sorted(others + comms) if comms else others
        # Bar redraws, colours and NUL runs make a line more than its decoded text (no
        # repeat): looked for in each line only where the chunk holds them.
        odd_bytes = b"".join(c for c in (b"\r", b"\x1b", b"\x00") if c in data)
        # one C call per line (a generator over the bytes cost ~1 us a hot line)
        odd = re.compile(b"[" + re.escape(odd_bytes) + b"]").search if odd_bytes else None
        plain = self.repeats
        repeats = self._repeats
        pending = self._pending
        mask = _DIGITS_TO_0
        prefixes = _RAW_PREFIXES.match
        rfind, find = data.rfind, data.find
        n = len(data)
        pos = i = 0
        k = len(offsets)
        while pos < n:
            if self.records:  # a record is open: every line, in order
                for number, start, end in select_spans(data, [], self.dense, counter, pos):
                    for text in line_text(reader, data[start:end], number):  # type: ignore[arg-type]
                        self.handle(number, text)  # type: ignore[arg-type]
                    if not self.records:
                        break
                else:
                    return
                pos = end + 1
                continue
            while i < k and offsets[i] < pos:
                i += 1
            if i >= k:
                return
            start = rfind(b"\n", pos, offsets[i]) + 1
            if start < pos:
                start = pos
            end = find(b"\n", start)
            if end < 0:
                end = n
            pos = end + 1
            raw = data[start:end]
            if (
                plain
                and end - start <= _SHAPE_MAX
                and b"NCCL" not in raw
                and not (odd and odd(raw))
            ):
                cut = prefixes(raw).end()  # type: ignore[union-attr]
                key = raw[:cut] + raw[cut:].translate(mask) if cut else raw.translate(mask)
                verdict = repeats.get(key)
                if verdict is not None:  # a repeat: its first line's verdict, unparsed
                    outcome, timed = verdict
                    if outcome == _WARNING_AGAIN:
                        if self.warning_count >= MAX_WARNINGS:
                            self.warnings_dropped += 1
                    elif outcome == _ERROR_AGAIN:
                        self.errors_dropped += 1
                    if timed:
                        pending.append(raw)
                        if len(pending) >= 64:
                            self._resolve_pending()  # bounded: usually the newest alone is read
                    continue
                self._read_new(counter.number_at(start), raw, key, cut)
            else:
                number = counter.number_at(start)
                for text in line_text(reader, raw, number):
                    self.handle(number, text)
            if not muted and self.nccl.comms_full:
                # The communicator set-ups to keep are all read: the rest of this chunk is
                # scanned again without them (they are ~2 of every ~70 lines of an NCCL init
                # log, each ~25 us here).
                muted = True
                offsets = [o for o in others if o >= pos]
                skipped[0] += sum(1 for o in comms if o >= pos)
                i, k = 0, len(offsets)

    def _read_new(self, number: int, raw: bytes, key: bytes, prefix_end: int) -> None:
        """Parse a line read alone (no record open) whose verdict is not known yet, and keep
        the verdict for its repeats when their digits cannot change it."""
        if self._pending and not self.hint.learned:
            self._resolve_pending()  # read with the year hint the lines were written under
        events = len(self.events)
        self._outcome, self._timed = _NOT_A_REPEAT, False
        text = raw.decode("utf-8", "replace").rstrip()
        self.handle(number, text)
        pre = self._pre
        if (
            self._outcome != _NOT_A_REPEAT
            and len(self.events) == events
            and not self.records
            and pre is not None
            # the rank a line teaches comes from its prefix, kept whole in the key
            and (
                pre.rank is None
                or pre.local_rank is None
                or len(text) - len(pre.rest) <= prefix_end
            )
            and not self.tables.digit_sensitive(key)
        ):
            if len(self._repeats) >= 4096:
                self._repeats.clear()
            self._repeats[key] = (self._outcome, self._timed)

    @property
    def last_time(self) -> float | None:
        """The latest time seen on a line read so far (`time_before` of events without one)."""
        if self._pending:
            self._resolve_pending()
        return self._last_time

    @last_time.setter
    def last_time(self, value: float | None) -> None:
        self._pending.clear()
        self._last_time = value

    def _resolve_pending(self) -> None:
        # newest first: the first time found is the latest (a repeat's date can be invalid
        # where its first line's was not, so an older one may still hold the answer)
        while self._pending:
            meta = self._meta(peel(clean(self._pending.pop())[-1]).rest)
            if meta.time is not None:
                self._pending.clear()
                self._last_time = meta.time

    def handle(self, number: int, text: str) -> None:
        self._pre = None
        if self.records:
            self._close_stale(number)
        if not text.strip():
            rec = self.records.get("")
            if rec is not None:
                self._feed(rec, number, text)
            return
        pre = self._pre = peel(text)
        if self.scan_all:
            self.observe_progress(number, pre.rest, pre)
        if pre.rank is not None and pre.local_rank is not None and len(self.local_to_rank) < 65536:
            self.local_to_rank[(pre.host, pre.local_rank)] = pre.rank
        rec = self.records.get(pre.key)
        if rec is not None:
            verdict = self._feed(rec, number, pre.rest)
            if verdict == CONSUMED:
                return
        self.classify(number, pre)

    def _feed(self, rec: _Record, number: int, rest: str) -> int:
        verdict: int = rec.feed(number, rest)  # type: ignore[attr-defined]
        if verdict in (CLOSE, DONE):
            self._close(rec)
        return CONSUMED if verdict == DONE else verdict

    def _open(self, rec: _Record) -> None:
        old = self.records.get(rec.stream)
        if old is not None:
            self._close(old)
        if len(self.records) >= 1024:  # bounded: give up the oldest record
            self._close(min(self.records.values(), key=lambda r: r.last_line))
        self.records[rec.stream] = rec

    def _close_stale(self, number: int) -> None:
        for key in [k for k, r in self.records.items() if number - r.last_line > STALE_LINES]:
            self._close(self.records[key])

    def finish(self) -> None:
        for rec in list(self.records.values()):
            self._close(rec)
        self._emit_progress()
        self._fix_years()
        fill_ranks(self.events, self.nccl)
        self._fill_local_ranks()
        if self.warnings_dropped:
            self.warnings.append(
                f"{self.warnings_dropped} more warning lines not kept (at most {MAX_WARNINGS} "
                "per source)"
            )
        if self.errors_dropped:
            self.warnings.append(
                f"{self.errors_dropped} repeated error lines not kept "
                f"(at most {MAX_SAME_ERROR} of each)"
            )
        if self.events_dropped:
            self.warnings.append(
                f"{self.events_dropped} more events dropped after the first {MAX_EVENTS}"
            )
        comms = self.nccl.dropped_warning()
        if comms:
            self.warnings.append(comms)

    # ------------------------------------------------------------------ events

    def _rank(self, pre: Prefixes | None, msg_rank: int | None = None) -> int | None:
        if pre is not None and pre.rank is not None:
            return pre.rank
        if msg_rank is not None and msg_rank >= 0:
            return msg_rank
        if pre is not None and pre.local_rank is not None:
            got = self.local_to_rank.get((pre.host, pre.local_rank))
            if got is not None:
                return got
            return None  # an interleaved console: the file's rank is not this line's
        if pre is not None and pre.task is not None:
            return pre.task
        return self.source.rank

    def _emit(
        self,
        kind: EventKind,
        text: str,
        line: int,
        end_line: int,
        pre: Prefixes | None,
        *,
        level: Level,
        msg_rank: int | None = None,
        host: str | None = None,
        pid: int | None = None,
        time: float | None = None,
        attrs: dict[str, Any] | None = None,
        payload: Any = None,
        yearless: tuple[str, str, str, str, str | None] | None = None,
        progress: bool = False,
        agent_pid: int | None = None,
    ) -> int | None:
        if len(self.events) >= MAX_EVENTS:
            self.events_dropped += 1
            return None
        local_rank = pre.local_rank if pre is not None and pre.local_rank is not None else None
        if local_rank is None and (pre is None or pre.empty):
            local_rank = self.source.local_rank
        attrs = dict(attrs or {})
        if time is None and self.last_time is not None and not progress:
            attrs.setdefault("time_before", self.last_time)  # the latest time seen earlier
        if pre is not None and pre.task is not None:
            attrs.setdefault("task", pre.task)
        if agent_pid is not None:
            attrs.setdefault("agent_pid", agent_pid)
        self.events.append(
            Event(
                source=self.source.path,
                kind=kind,
                text=text,
                line=line,
                end_line=end_line,
                rank=self._rank(pre, msg_rank),
                local_rank=local_rank,
                host=host or (pre.host if pre is not None else None) or self.source.host,
                pid=pid,
                time=time,
                level=level,
                attrs=attrs,
                payload=payload,
            )
        )
        index = len(self.events) - 1
        if yearless is not None and time is not None:
            self.yearless.append((index, yearless))
        return index

    def _close(self, rec: _Record) -> None:
        self.records.pop(rec.stream, None)
        if isinstance(rec, _Traceback):
            self._emit_traceback(rec)
        elif isinstance(rec, _CppException):
            self._emit_cpp(rec)
        elif isinstance(rec, _FaultHandler):
            self._emit_fault(rec)
        elif isinstance(rec, _CppTail):
            self._extend_error(rec)
        elif isinstance(rec, _Summary):
            self._emit_summary(rec)

    def _emit_traceback(self, tb: _Traceback) -> None:
        frames = tb.all_frames()
        if not frames and tb.exc_type is None:
            return
        user = [f for f in frames if not any(s in f[0] for s in _USER_FRAME_SKIP)]
        attrs: dict[str, Any] = {
            "exc_type": tb.exc_type,
            "exc_message": tb.exc_message,
            "frames": frames,
            "user_frames": user,
            "chained": list(tb.chained),
            "truncated": tb.exc_type is None and not tb.exc_message,
            "line_numbers": tb.line_numbers(),
        }
        if tb.frames_dropped:
            attrs["frames_dropped"] = tb.frames_dropped
        if tb.headerless:
            attrs["headerless"] = True
        msg = f"{tb.exc_type}: {tb.exc_message or ''}" if tb.exc_type else tb.exc_message or ""
        attrs.update(_facts(msg))
        self._emit(
            EventKind.TRACEBACK,
            tb.text(),
            tb.start,
            tb.last_line,
            tb.pre,
            level=Level.ERROR,
            msg_rank=attrs.get("rank"),
            attrs=attrs,
        )

    def _emit_fault(self, fault: _FaultHandler) -> None:
        user = [f for f in fault.frames if not any(s in f[0] for s in _USER_FRAME_SKIP)]
        signal = self.tables.templates.signal_words.get(fault.what)
        self._emit(
            EventKind.SIGNAL,
            fault.text(),
            fault.start,
            fault.last_line,
            fault.pre,
            level=Level.FATAL,
            attrs={
                "signal": signal,
                "fatal_error": fault.what,
                "frames": fault.frames,  # innermost first, as faulthandler prints them
                "user_frames": user,
                "innermost_is_user_code": bool(fault.frames) and fault.frames[0] in user,
            },
        )

    def _emit_cpp(self, cpp: _CppException) -> None:
        attrs: dict[str, Any] = {
            "exception_class": cpp.cls,
            "what": cpp.what,
            "raised_from": cpp.raised_from,
            "cpp_frames": cpp.frame_count,
        }
        attrs.update(_facts(cpp.what or ""))
        self._emit(
            EventKind.CPP_EXCEPTION,
            cpp.text(),
            cpp.start,
            cpp.last_line,
            cpp.pre,
            level=Level.FATAL,
            msg_rank=attrs.get("rank"),
            attrs=attrs,
        )

    def _extend_error(self, tail: _CppTail) -> None:
        index = tail.event_index
        if not 0 <= index < len(self.events):
            return
        ev = self.events[index]
        attrs = dict(ev.attrs)
        attrs["raised_from"] = tail.raised_from
        attrs["cpp_frames"] = tail.frame_count
        self.events[index] = replace(
            ev, text=ev.text + "\n" + tail.text(), end_line=tail.last_line, attrs=attrs
        )

    def _emit_summary(self, summary: _Summary) -> None:
        summary._finish()
        if summary.title is None and not summary.headed:
            return  # a `====` rule and an `[n]:` line alone are not torchrun's table
        summary.done = [e for e in summary.done if "rank" in e.fields or "exitcode" in e.fields]
        hosts = {e.fields.get("host") for e in summary.done}
        for entry in summary.done:
            m = _SUMMARY_RANK.match(entry.fields.get("rank", ""))
            if m is not None and m["lr"] is not None and len(self.local_to_rank) < 65536:
                # The table maps local to global ranks; one agent host means one node's file.
                rank_, lr_ = int(m["rank"]), int(m["lr"])
                self.local_to_rank.setdefault((entry.fields.get("host"), lr_), rank_)
                if len(hosts) == 1:
                    self.local_to_rank.setdefault((summary.pre.host, lr_), rank_)
        for entry in summary.done:
            f = entry.fields
            rank = local_rank = exitcode = pid = None
            sig = None
            m = _SUMMARY_RANK.match(f.get("rank", ""))
            if m is not None:
                rank, local_rank = _int(m["rank"]), _int(m["lr"])
            m = _SUMMARY_EXIT.match(f.get("exitcode", ""))
            if m is not None:
                exitcode, pid, sig = _int(m["code"]), _int(m["pid"]), m["sig"]
            sig = sig or _signal_name(exitcode)
            when = ts.parse_dated(f.get("time", "")) if f.get("time") else None
            if when is not None:
                self.hint.learn(when)
            host = f.get("host") or None
            error_file = f.get("error_file")
            if error_file in (None, "", "<N/A>"):
                error_file = None
            message = "\n".join(entry.traceback).strip() or None
            exit_ = RankExit(
                rank=rank,
                local_rank=local_rank,
                host=host,
                pid=pid,
                exitcode=exitcode,
                signal=sig,
                time=when,
                error_file=error_file,
                message=message,
                is_root_cause_block=entry.root,
            )
            attrs = {
                "summary_index": entry.idx,
                "title": summary.title,
                "root_cause": entry.root,
                "exitcode": exitcode,
                "signal": sig,
            }
            pre = replace(summary.pre, rank=None, local_rank=None)
            index = self._emit(
                EventKind.RANK_EXIT,
                "\n".join(entry.lines),
                entry.start,
                entry.end,
                pre,
                level=Level.ERROR,
                msg_rank=rank,
                host=host,
                pid=pid,
                time=when,
                attrs=attrs,
                payload=exit_,
            )
            if index is not None and local_rank is not None:
                ev = self.events[index]
                self.events[index] = replace(ev, rank=rank, local_rank=local_rank)

    # ------------------------------------------------------------------ one line

    def _meta(self, rest: str) -> _Meta:
        m = ts.C10_RE.match(rest)
        if m is None and rest[:1] != "[":
            # A progress bar can be glued in front of a c10 line (pytorch#118369).
            cut = rest.find("[", 1)
            if cut > 0:
                m = ts.C10_RE.match(rest, cut)
        if m is not None:
            yl = (m["md"], m["h"], m["mi"], m["s"], m["frac"])
            return _Meta(
                msg=rest[m.end() :],
                level=_LEVELS[m["lvl"]],
                time=ts.yearless(*yl, self.hint),
                src=m["src"],
                src_line=int(m["srcline"]),
                c10=True,
                yearless=yl,
            )
        m = _OLD_C10.match(rest)
        if m is not None:
            return _Meta(
                msg=rest[m.end() :],
                level=_LEVELS[m["lvl"]],
                src=m["src"],
                src_line=int(m["srcline"]),
                c10=True,
            )
        m = ts.GLOG_RE.match(rest)
        if m is not None:
            yl = (m["md"], m["h"], m["mi"], m["s"], m["frac"])
            pid = int(m["pid"])
            # torchrun's own lines carry the agent's pid: never a worker's, so kept apart
            agent = _AGENT_SRC.search(m["src"]) is not None
            return _Meta(
                msg=rest[m.end() :],
                level=_LEVELS[m["lvl"]],
                time=ts.yearless(*yl, self.hint),
                pid=None if agent else pid,
                agent_pid=pid if agent else None,
                src=m["src"],
                src_line=int(m["srcline"]),
                yearless=yl,
            )
        m = _DEEPSPEED.match(rest)
        if m is not None:
            return _Meta(
                msg=rest[m.end() :],
                level=_LEVELS.get(m["lvl"]),
                time=ts.parse_any(rest, self.hint),
                src=m["src"],
                src_line=int(m["srcline"]),
            )
        m = _PYLOG.match(rest)
        if m is not None:
            return _Meta(msg=rest[m.end() :], level=_LEVELS[m["lvl"]], logger=m["logger"])
        meta = _Meta(msg=rest)
        first = rest[:1]
        if first.isdigit() or first == "[":
            meta.time = ts.parse_any(rest, self.hint)
            if meta.time is not None:
                lw = _LEVEL_WORD.search(rest, 0, 96)
                if lw is not None:
                    meta.level = _LEVELS[lw["lvl"]]
        return meta

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
                        attrs=found.attrs,
                    )
                if nl.time is not None:
                    self.last_time = nl.time
                return
        meta = self._meta(rest)
        if meta.time is not None:
            self.last_time = meta.time
        # A repeat of this line may have a time where this one has none (a date that does
        # not exist): what looks like one is read when `last_time` is asked for.
        self._timed = meta.time is not None or _TIME_SHAPED.search(rest, 0, 96) is not None
        msg = meta.msg
        stripped = msg.strip()

        # multi-line openers
        if _TB_HEADER.match(msg):
            tb = _Traceback(
                key, pre, number, number, indent=len(msg) - len(msg.lstrip()), pasted=self.pasted
            )
            tb.add(number, msg.strip())
            self._open(tb)
            return
        if (_TB_FILE.match(msg) or _TB_CUT_FILE.match(msg)) and meta.level is None:
            # CPython indents frames by two spaces; more means the paste itself is indented
            indent = max(0, len(msg) - len(msg.lstrip()) - 2)
            tb = _Traceback(
                key, pre, number, number, headerless=True, indent=indent, pasted=self.pasted
            )
            tb.feed(number, msg)
            self._open(tb)
            return
        m = _FATAL_PYTHON.match(stripped)
        if m is not None:
            fault = _FaultHandler(key, pre, number, number, what=m["what"])
            fault.add(number, stripped)
            self._open(fault)
            return
        m = _TERMINATE.search(msg)
        if m is not None:
            cpp = _CppException(key, pre, number, number, cls=m["cls"] or m["other"])
            cpp.add(number, stripped)
            self._open(cpp)
            return
        if (
            (
                "FAILED" in msg
                and _SUMMARY_TITLE.match(msg)
                and meta.level is None
                and not msg.startswith("[")
                and " " not in msg.strip()[: -len(" FAILED")].strip()
            )
            or stripped in ("Failures:", "Root Cause (first observed failure):")
            or (_BORDER.match(msg) and msg.startswith("="))
        ):
            summary = _Summary(key, pre, number, number)
            summary.feed(number, msg)
            self._open(summary)
            return
        if stripped.startswith("Exception raised from") and key in self.last_error_of:
            # The rest of a multi-line c10 message: c10 put `[rankN]:` on its first line only.
            tail = _CppTail(key, pre, number, number, event_index=self.last_error_of.pop(key))
            tail.feed(number, stripped)
            self._open(tail)
            return

        if self._agent_line(number, pre, meta):
            return
        self._error_or_warning(number, pre, meta)

    def _learn_deepspeed_ranks(self, pre: Prefixes, msg: str) -> None:
        """`global_rank_mapping=defaultdict(<class 'list'>, {'node07': [0, 1], ...})`."""
        hosts = _DS_HOST_RANKS.findall(msg)
        for host, ranks in hosts:
            for local, rank in enumerate(_int(r) for r in ranks.split(",")):
                if rank is None or len(self.local_to_rank) >= 65536:
                    continue
                self.local_to_rank.setdefault((host, local), rank)
                if len(hosts) == 1 or host == "localhost":
                    self.local_to_rank.setdefault((pre.host or self.source.host, local), rank)

    def _agent_line(self, number: int, pre: Prefixes, meta: _Meta) -> bool:
        """An event from the first line template (`rules/templates.yaml`) the line matches."""
        msg = meta.msg
        if _DS_RANK_MAPPING in msg:
            self._learn_deepspeed_ranks(pre, msg)
            return True
        for template in self.tables.templates.templates:
            groups = _template_match(template, msg, meta)
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
        meta: _Meta,
    ) -> None:
        signals = self.tables.templates.signal_words
        attrs = {name: _value(value, groups, signals) for name, value in template.attrs.items()}
        level = template.level or meta.level or Level.ERROR
        if template.level_if is not None:
            group, equals, other = template.level_if
            if groups.get(group) == equals:
                level = other
        pid = _value(template.pid, groups, signals) if template.pid is not None else meta.pid
        host = _value(template.host, groups, signals) if template.host is not None else None
        time = _value(template.time, groups, signals) if template.time is not None else None
        # a time of the template's own (Slurm's `CANCELLED AT`) is dated; the line's may not be
        yearless = meta.yearless if time is None else None
        time = time if time is not None else meta.time
        local_rank = None
        if template.local_rank is not None:
            local_rank = _value(template.local_rank, groups, signals)
        payload = None
        if template.exit:
            exitcode = attrs.get("exitcode")
            signal = attrs.get("signal") or signal_of_exit_code(exitcode)
            payload = RankExit(
                rank=None,
                local_rank=local_rank,
                host=host or pre.host or self.source.host,
                pid=_value(template.pid, groups, signals) if template.pid is not None else None,
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
            attrs=attrs,
            payload=payload,
            yearless=yearless,
            agent_pid=meta.agent_pid,
        )
        if at is not None and local_rank is not None:
            # the launcher's line about one of its workers: the file's rank is not that
            # worker's; its rank comes from the local -> global map when parsing ends
            self.events[at] = replace(self.events[at], local_rank=local_rank, rank=None)

    def _error_or_warning(self, number: int, pre: Prefixes, meta: _Meta) -> None:
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
        attrs = _facts(msg)
        if meta.src is not None:
            attrs["src"] = meta.src
            attrs["src_line"] = meta.src_line
        if meta.logger is not None:
            attrs["logger"] = meta.logger
        m = _EXC_LINE.match(msg.strip())
        if m is not None and m["msg"] is not None and re.search(r"(?:Error|Exception)$", m["type"]):
            attrs["exc_type"] = m["type"]
            attrs["exc_message"] = m["msg"]
        if notable:
            attrs["notable"] = "rule"
        if level is Level.WARNING or notable:
            if self.warning_count >= MAX_WARNINGS:
                self.warnings_dropped += 1
                # a repeat is a warning dropped while the count is full, else not even that
                self._outcome = _WARNING_AGAIN
                return
            norm = _DIGITS.sub("#", msg)[:300]
            if norm in self.same_error:
                # the same warning again (digits aside): the first one is the evidence, and a
                # repeat is no reason to tell the user an input was not read completely
                self._outcome = _WARNING_AGAIN
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
                self._outcome = _ERROR_AGAIN
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
            msg_rank=attrs.get("rank"),
            time=meta.time,
            pid=meta.pid,
            agent_pid=meta.agent_pid,
            attrs=attrs,
            yearless=meta.yearless,
        )
        if index is not None and meta.c10 and kind is EventKind.ERROR_LINE:
            base = _RANK_KEY.sub("", pre.key)
            if len(self.last_error_of) < 4096 or base in self.last_error_of:
                self.last_error_of[base] = index

    # ------------------------------------------------------------------ progress

    def observe_progress(self, number: int, text: str, pre: Prefixes | None) -> bool:
        got = _read_progress(text, self.tables)
        if got is None:
            return False
        pre = pre or peel(text)
        step, total, epoch, msg_rank = got
        key = (pre.key, msg_rank)
        state = self.progress.get(key)
        if state is None:
            if len(self.progress) >= 4096:
                return False
            state = self.progress[key] = _Progress()
        changed = False
        if step is not None and number >= state.step_line:
            state.step, state.total, state.step_line = step, total, number
            changed = True
        if epoch is not None and number >= state.epoch_line:
            state.epoch, state.epoch_line = epoch, number
            changed = True
        if changed and number >= state.line:
            state.line, state.text, state.pre, state.msg_rank = (
                number,
                pre.rest.strip()[:500],
                pre,
                msg_rank,
            )
        state.chunk = self.chunk
        return True

    def scan_progress(self, data: bytes, counter: LineCounter) -> None:
        """Last progress line per stream in this chunk, read from its tail backwards.

        Streams that progressed in the previous chunk may have their last line anywhere in
        this one, so the window grows until each is found. In the first chunk, samples spread
        over the chunk find streams that stopped early (a hung rank) before the tail is read.
        """
        wanted = {k for k, p in self.progress.items() if p.chunk == self.chunk - 1}
        if self.chunk == 1 and len(data) > 4 * PROGRESS_WINDOW:
            # A file whose start and end show the same single stream is one process's log
            # (ranks that share a file all start together): the samples between could only
            # find that stream again, and cost ~4 ms a file.
            head = self._progress_in(data, counter, 0, PROGRESS_WINDOW, set(), set())
            end_probe = len(data) - PROGRESS_WINDOW
            tail = self._progress_in(data, counter, end_probe, len(data), set(), set())
            wanted |= head
            if len(head) != 1 or head != tail:
                step = len(data) // 16
                for at in range(step, len(data) - PROGRESS_WINDOW, step):
                    window = (at, at + PROGRESS_WINDOW)
                    wanted |= self._progress_in(data, counter, *window, set(), set())
        end = len(data)
        window = PROGRESS_WINDOW
        seen: set[tuple[str, int | None]] = set()
        seen_raw: set[tuple[bytes, bytes | None]] = set()
        while end > 0:
            start = max(0, end - window)
            self._progress_in(data, counter, start, end, seen, seen_raw)
            if wanted <= seen or start == 0:
                return
            end = start
            window *= 4

    def _progress_in(
        self,
        data: bytes,
        counter: LineCounter,
        start: int,
        end: int,
        seen: set[tuple[str, int | None]],
        seen_raw: set[tuple[bytes, bytes | None]],
    ) -> set[tuple[str, int | None]]:
        """Observe the last progress line of each stream in data[start:end] not yet `seen`.

        Lines are read newest first; a stream's older lines are skipped on their raw key (raw
        prefixes and `[Rank N]`), undecoded. Both ways below give the same answer.
        """
        if start > 0:
            start = data.find(b"\n", start, end) + 1 or end
        window = data[start:end]
        found: set[tuple[str, int | None]] = set()
        if not (
            self.by_shape and self._progress_by_shape(window, start, counter, seen, seen_raw, found)
        ):
            self._progress_by_marker(window, start, counter, seen, seen_raw, found)
        return found

    def _progress_by_shape(
        self,
        window: bytes,
        start: int,
        counter: LineCounter,
        seen: set[tuple[str, int | None]],
        seen_raw: set[tuple[bytes, bytes | None]],
        found: set[tuple[str, int | None]],
    ) -> bool:
        """Every line of the window, what matters about it cached per digit-masked line.

        Whether a line holds a progress marker, and where its raw prefixes and `[Rank N]` sit,
        does not depend on its digits (the patterns see digits only as digits), and a stream's
        progress lines differ mostly in their digits: most lines cost a dict lookup. Gives up
        (False) on a window of mostly unseen shapes, before it costs more than a marker scan.
        """
        lines = window.split(b"\n")
        shapes = window.translate(_DIGITS_TO_0).split(b"\n")
        known = self._line_shapes
        misses = 0
        first: int | None = None  # the window's first line number, counted when needed
        for i in range(len(lines) - 1, -1, -1):
            shape = shapes[i]
            facts = known.get(shape)
            if facts is None:
                misses += 1
                if misses > 32 and misses * 4 > len(lines) - i:
                    return False
                line = lines[i]
                facts = (PROGRESS_MARKERS.contains(shape), *_raw_spans(line, 0, len(line)))
                if len(shape) <= _SHAPE_MAX:  # the cache stays small: long lines are rare
                    if len(known) >= 4096:
                        known.clear()
                    known[shape] = facts
            if not facts[0]:  # no progress marker
                continue
            pre = self._newest_of_stream(lines[i], facts[1:], seen, seen_raw, found)
            if pre is not None:
                first = counter.number_at(start) if first is None else first
                self.observe_progress(first + i, pre.rest, pre)
        return True

    def _progress_by_marker(
        self,
        window: bytes,
        start: int,
        counter: LineCounter,
        seen: set[tuple[str, int | None]],
        seen_raw: set[tuple[bytes, bytes | None]],
        found: set[tuple[str, int | None]],
    ) -> None:
        """The lines holding a progress marker, found by a scan of the window."""
        line_start_of = window.rfind
        for line_end in reversed(PROGRESS_MARKERS.line_ends(window)):
            line_start = line_start_of(b"\n", 0, line_end) + 1
            spans = _raw_spans(window, line_start, line_end)
            line = window[line_start:line_end]
            pre = self._newest_of_stream(line, spans, seen, seen_raw, found)
            if pre is not None:
                self.observe_progress(counter.number_at(start + line_start), pre.rest, pre)

    def _newest_of_stream(
        self,
        line: bytes,
        spans: tuple[int, int, int],
        seen: set[tuple[str, int | None]],
        seen_raw: set[tuple[bytes, bytes | None]],
        found: set[tuple[str, int | None]],
    ) -> Prefixes | None:
        """A marked line, read newest first: its prefixes if it is the newest progress line of
        a stream not `seen` yet (to observe), else None. `spans` (`_raw_spans`) place its raw
        prefixes and `[Rank N]`; an older line of a raw key already met is skipped undecoded."""
        prefix_end, rank_start, rank_end = spans
        raw_key = (line[:prefix_end], line[rank_start:rank_end] if rank_end else None)
        if raw_key in seen_raw:
            return None
        pre = peel(clean(line[-4096:])[-1])
        got = _read_progress(pre.rest, self.tables)
        if got is None:
            return None
        key = (pre.key, got[3])
        seen_raw.add(raw_key)
        found.add(key)
        if key in seen:
            return None
        seen.add(key)
        return pre

    def _emit_progress(self) -> None:
        best: dict[Any, _Progress] = {}
        for (stream, _), p in self.progress.items():
            rank = self._rank(p.pre, p.msg_rank)
            slot: Any = rank if rank is not None else ("stream", stream)
            old = best.get(slot)
            if old is None or p.line > old.line:
                best[slot] = p
        for p in best.values():
            attrs = {
                "last_step": p.step,
                "total_steps": p.total,
                "last_epoch": p.epoch,
                "line": p.text,
            }
            self._emit(
                EventKind.PROGRESS,
                p.text,
                p.line,
                p.line,
                p.pre,
                level=Level.INFO,
                msg_rank=p.msg_rank,
                time=ts.parse_any(p.text, self.hint),
                attrs=attrs,
                progress=True,
            )

    # ------------------------------------------------------------------ fix-ups

    def _fix_years(self) -> None:
        if not self.hint.learned:
            return
        for index, yl in self.yearless:
            ev = self.events[index]
            when = ts.yearless(*yl, self.hint)
            if when is not None and when != ev.time:
                self.events[index] = replace(ev, time=when)

    def _fill_local_ranks(self) -> None:
        if not self.local_to_rank:
            return
        for i, ev in enumerate(self.events):
            if ev.rank is None and ev.local_rank is not None:
                rank = self.local_to_rank.get((ev.host, ev.local_rank))
                if rank is None and ev.host == self.source.host:
                    rank = self.local_to_rank.get((None, ev.local_rank))
                if rank is not None:
                    payload = ev.payload
                    if isinstance(payload, RankExit) and payload.rank is None:
                        payload = replace(payload, rank=rank)
                    self.events[i] = replace(ev, rank=rank, payload=payload)


def _template_match(template: Template, msg: str, meta: _Meta) -> dict[str, str | None] | None:
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


def _value(value: Value, groups: dict[str, str | None], signals: Mapping[str, str]) -> Any:
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
        return _int(text.strip())
    if conversion == "signal":
        return signal_of_exit_code(_int(text))
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


def _facts(msg: str) -> dict[str, Any]:
    """Watchdog / PG / NCCL facts named in a message (formats.md §2.3.1)."""
    attrs: dict[str, Any] = {}
    if not msg:
        return attrs
    # The reporting rank is the tag a c10 message starts with (after an exception type);
    # tags later in the text (a desync report, "remote error from [Rank 5]") name others.
    start = _LEAD.match(msg).end()  # type: ignore[union-attr]
    m = _PG_PREFIX.match(msg, start)
    if m is not None:
        attrs["pg_id"] = int(m["pgid"])
        if m["guid"]:
            attrs["pg_guid"] = m["guid"]
        if m["desc"]:
            attrs["pg_desc"] = m["desc"]
        attrs["rank"] = int(m["rank"])
    else:
        m = _RANK_TAG.match(msg, start)
        if m is not None:
            attrs["rank"] = int(m["rank"])
    if "WorkNCCL(" in msg:
        m = _WATCHDOG_TIMEOUT.search(msg)
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
        m = _WATCHDOG_SUMMARY.search(msg)
        if m is not None:
            attrs.setdefault("seq", int(m["seq"]))
            attrs["last_enqueued"] = int(m["enq"])
            attrs["last_completed"] = int(m["comp"])
        m = _WATCHDOG_STUCK.search(msg)
        if m is not None:
            attrs["watchdog_stuck_s"] = int(m["sec"])
        if "thread terminated with exception" in msg:
            attrs["watchdog_terminated"] = True
    m = _DUMP_FROM.search(msg)
    if m is not None:
        attrs["dump_signal_from_rank"] = int(m["src"])
    m = _NCCL_ERROR_IN.search(msg)
    if m is not None:
        attrs["nccl_reason"] = m["reason"]
        if m["ver"]:
            attrs["nccl_version"] = m["ver"]
    return attrs


def parse(
    source: Source,
    *,
    scan_all: bool | None = None,
    kb: knowledge.Knowledge | None = None,
    tables: LogScanTables | None = None,
) -> ParsedSource:
    """Notable events of one log. Never raises: problems become `warnings`.

    `scan_all` parses every line instead of only marked ones; by default it is on for small
    inputs (under `SCAN_ALL_BELOW` bytes, or pasted text). `kb` is the run's knowledge (the
    shipped one when None): its rules' keywords make lines notable, in every reading. `tables`
    (tests: another scan engine) stands for `scan_tables(kb)`.
    """
    tables = tables if tables is not None else scan_tables(kb)
    if scan_all is None:
        scan_all = 0 < source.size <= SCAN_ALL_BELOW  # size 0: unknown, maybe big
    paste = _read_paste(source)
    opener = (lambda: io.BytesIO(paste)) if paste is not None else None
    parser = _LogParser(source, scan_all, tables, opener)
    warnings: list[str] = []
    try:
        parser.run()
    except Exception as exc:  # never let one bad file stop a diagnosis
        warnings.append(parser_stopped("log", exc))
    try:
        parser.finish()
    except Exception as exc:
        warnings.append(parser_stopped("log", exc, " while finishing"))
    reader = parser.reader
    if reader is not None:
        warnings[:0] = reader.warnings
    warnings.extend(parser.warnings)
    events = sorted(parser.events, key=lambda e: (e.line or 0, e.kind is EventKind.PROGRESS))
    digest = whole = None
    if paste is not None:
        text = paste.decode("utf-8", errors="replace")
        digest = text_digest(text)
        # no event the paste is about (only context: INFO lines, lines rules look for, input
        # warnings): its whole text is evidence too (a py-spy dump, a P2P matrix, a bare
        # assertion line, NCCL INFO lines that only mean something together)
        if text.strip() and not any(_about(e) for e in events):
            whole = text
    return ParsedSource(
        source=source,
        events=tuple(events),
        warnings=tuple(warnings),
        lines=reader.lines if reader else 0,
        bytes_read=reader.bytes_read if reader else 0,
        text_digest=digest,
        whole_text=whole,
    )


def _about(event: Event) -> bool:
    """Is this an event a paste is about: a warning or an error, not context?"""
    if event.kind is EventKind.INPUT_WARNING or event.attrs.get("notable"):
        return False
    return event.level not in (Level.INFO, Level.DEBUG)


def _read_paste(source: Source) -> bytes | None:
    """All of a pasted text (a TEXT input up to MAX_PASTE bytes), read once: its digest and,
    when no event is found in it, its whole text go with the result. None otherwise, or when
    it cannot be read (the parser then reports why)."""
    if source.kind is not SourceKind.TEXT or not 0 < source.size <= MAX_PASTE:
        return None
    try:
        with source.open() as stream:
            data = stream.read(MAX_PASTE + 1)
    except Exception:  # noqa: BLE001 - reported when the parser opens it again
        return None
    return data if isinstance(data, bytes) else None
