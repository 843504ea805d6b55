"""The marker scan's tables (`LogScanTables`): the needles and verdict patterns that pick the
lines of a big log worth decoding, derived from the run's knowledge, never read at import."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

from triage import diskcache, knowledge
from triage.knowledge.log_shapes import LogShapes
from triage.knowledge.templates import (
    Templates,
    literals_of,
)
from triage.literals import group_literals
from triage.model import EventKind, Level, SourceKind
from triage.parsers.nccl import line_needles as nccl_line_needles
from triage.parsers.rank_log.formats import (
    FATAL_PYTHON,
    LEVELS,
    RAISED_FROM,
    SUMMARY_HEADER,
    SUMMARY_TITLE,
    TB_CUT_FILE,
    TB_FILE,
    TB_HEADER,
    TERMINATE,
    WHAT,
)
from triage.parsers.rank_log.progress import DIGITS_TO_0, PROGRESS_MARKERS
from triage.scan.engines import hyperscan_module
from triage.scan.hot_lines import Gate, Gated, HotLines
from triage.scan.markers import MarkerSet

# The line templates, the error and warning words and the shell's signal words are knowledge
# (`rules/templates.yaml`); the marker needles are derived from it, the rules and the cascade
# families of the run's knowledge (`scan_tables`), never listed by hand nor read at import: a
# team folder's rules (`--rules`) are looked for in files exactly as in pastes.


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
    TB_HEADER,
    TB_FILE,
    TB_CUT_FILE,
    TERMINATE,
    WHAT,
    FATAL_PYTHON,
    RAISED_FROM,
    SUMMARY_HEADER,
    SUMMARY_TITLE,
)
DS_RANK_MAPPING = "global_rank_mapping="  # DeepSpeed's launcher: local -> global ranks
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
    return any(needle in line for line in _lowered_lines(templates.healthy))


@lru_cache(maxsize=8)
def _lowered_lines(lines: tuple[str, ...]) -> tuple[str, ...]:
    # each needle was tested against every healthy line lowered again (~14k `lower` calls
    # before the workers fork)
    return tuple(line.lower() for line in lines)


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
        *(name.lower() for name, lvl in LEVELS.items() if lvl is Level.FATAL and len(name) > 3),
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
        DS_RANK_MAPPING,
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
    return [
        *template_verdicts.values(),
        # the record openers' literals in their own case (` FAILED`, `Traceback (most ...`)
        *(_exact(group_literals(p.pattern)) for p in _OPENERS),
        *_generic_verdicts(templates),
        rb"NCCL WARN",
    ]


def _generic_verdicts(templates: Templates) -> list[bytes]:
    """The verdicts of generic words and log levels: a line of prose may match them several
    times (the scan reports such a line once, `HotLines`' `per_line`)."""
    assert templates.error_words is not None and templates.warning_words is not None
    # hyperscan's \w and \b are ASCII: `\w+Warning:` could miss `éWarning:`, whose
    # `\bWarning\b` it finds (a boundary before the W, seen from the bytes). `Warning:` after a
    # boundary is `\bWarning\b` too: `\B` keeps the scan from reporting such a line twice
    # (torch's `Warning: ...` lines, repeated every step, are most hot lines of some logs)
    warning = templates.warning_words.pattern.replace(r"|\w+Warning:", r"|\BWarning:")
    return [
        templates.error_words.pattern.encode(),
        warning.encode(),
        # c10 `[E1218 20:27:21.4...`, glog `E1218 20:27:21.4...`, old c10 `[E file.cpp:12]`
        rb"[WEFC]\d{3,4} \d\d:\d\d:\d\d\.|\[[WEF] [\w./-]+:\d+\]|\b(?:CRITICAL|FATAL)\b",
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


_DIGIT = re.compile(rb"[0-9]")


def _masked_digit_needles(
    markers: MarkerSet, rule_markers: MarkerSet, templates: Templates
) -> tuple[bytes, ...]:
    """The needles and template literals that hold a digit, digits masked: a line whose key
    holds one may be decided by its digits (`return code = -9`, not `-8`)."""
    found = {
        n
        for n in (*markers._needles, *rule_markers._needles)  # noqa: SLF001 - same package
        if _DIGIT.search(n) is not None
    }
    for template in templates.templates:
        found.update(
            lit.lower().encode() for lit in _lowered(template.literals, 1) if re.search(r"\d", lit)
        )
    return tuple(sorted(n.translate(DIGITS_TO_0) for n in found))


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
    shapes: LogShapes  # the message shapes facts and progress are read with
    # the progress words a chunk's tail is scanned for
    progress_markers: MarkerSet = PROGRESS_MARKERS
    # the verdicts a line may match several times, reported once a line (`HotLines`)
    per_line: tuple[bytes, ...] = ()
    # error words that say no error where they stand (`no error`, `-Wno-error=pedantic`): the
    # line is read without them
    not_an_error: re.Pattern[str] | None = None
    # digit-masked line -> (holds a progress marker, raw prefix end, rank start, rank end):
    # what a progress window's line is, which depends on its shape and these tables alone
    # (`ProgressReading._progress_by_shape`), shared by every log parsed with them: the
    # ranks' files of a job print the same shapes, and each file's first windows were all
    # misses (~0.3 ms a file)
    line_shapes: dict[bytes, tuple[bool, int, int, int]] = field(default_factory=dict, repr=False)

    def has_error_words(self, text: str) -> bool:
        low = text.lower()
        if not any(key in low for key in self.error_keys) or not self.error_words.search(text):
            return False
        not_meant = self.not_an_error
        if not_meant is None or not not_meant.search(text):
            return True
        # `stops, no error`: what is left once the words that say no error are taken out
        return self.error_words.search(not_meant.sub(" ", text)) is not None

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
            progress_markers=self.progress_markers.using(engine),
            line_shapes={},
            hot_lines=HotLines(
                markers,
                self.specific_needles,
                self.verdicts,
                gated=self.gated,
                ordinary=self.templates.healthy,
                per_line=self.per_line,
            ),
        )

    def warm(self) -> None:
        """Compile the scans now (numpy or hyperscan imported, the databases built): worker
        processes forked afterwards inherit them."""
        for markers in (self.markers, self.rule_markers, self.progress_markers):
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
    per_line = tuple(_generic_verdicts(templates))
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
        not_an_error=templates.not_an_error,
        specific_needles=tuple(specific),
        verdicts=tuple(verdicts),
        gated=tuple(gated),
        markers=markers,
        rule_markers=rule_markers,
        hot_lines=HotLines(
            markers,
            specific,
            verdicts,
            gated=gated,
            ordinary=templates.healthy,
            per_line=per_line,
        ),
        digit_needles=_masked_digit_needles(markers, rule_markers, templates),
        shapes=kb.log_shapes,
        per_line=per_line,
    )
    diskcache.save()  # the literals derived here, for the next run's start (`triage.diskcache`)
    return tables
