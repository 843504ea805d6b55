"""Tell what an input is from its first bytes (never from its name).

`detect_kind(head)` looks at up to HEAD_BYTES of a file and answers a `SourceKind` plus the
warnings a user should see (empty, binary, a pickle that is not a flight-recorder dump...).
It never unpickles anything and never raises, whatever the bytes are.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass

import regex

from triage import formats, regex_cache
from triage.model import InputNote, SourceKind

HEAD_BYTES = 64 * 1024

# Lines looked at by the line-shape tests; a head of 64 KiB rarely has more, and capping
# keeps sniffing cheap on files made of very short lines.
_MAX_LINES = 800

# ------------------------------------------------------------------ binary formats

# Pickle protocol 2+ starts with PROTO (0x80) then the protocol number (FR dumps use 2).
_PICKLE_PROTOCOLS = frozenset(range(2, 6))

# Key strings a flight-recorder dump carries (pickle or JSON). Pre-2.3 dumps are a bare list
# of entries, so the entry keys alone must be enough.
_FR_ENTRY_KEYS = (b"profiling_name", b"collective_seq_id", b"seq_id", b"record_id")
_FR_TOP_KEYS = (b"entries", b"pg_config", b"pg_status", b"comm_lib_version", b"nccl_version")

# Control bytes that do not occur in text logs (tab, LF, CR, FF, ESC and backspace do).
_CONTROL = bytes(b for b in range(32) if b not in (8, 9, 10, 12, 13, 27))
_CONTROL_TABLE = bytes.maketrans(_CONTROL, b"\x00" * len(_CONTROL))

# ------------------------------------------------------------------ text formats

# py-spy's own failure output (no ptrace rights, process gone): the pyspy parser reports it.
_PYSPY_FAILURE_FIRST = regex_cache.compile(r"^(?:Error: |Permission Denied)")
_PYSPY_FAILURE_SIGN = regex_cache.compile(r"py_spy::|SYS_PTRACE|ptrace|py-spy")

# Strong signs that a file is a process's own log, whatever else it holds at the top.
_STRONG_LOG = regex_cache.compile(
    r"^(?:\[rank\d+\]:|\[default\d+\]:|Traceback \(most recent call last\):"
    r"|[IWEF]\d{4} \d{2}:\d{2}:\d{2}\.\d+ +\d+ |\[[IWEF]\d{3,4} \d{2}:\d{2}:\d{2}"
    r"|\[[IWEF] [\w.]+:\d+\])"
    r"|ChildFailedError|torch\.distributed|ProcessGroup(?:NCCL|Gloo)",
    regex.MULTILINE,
)

# Literals one of which every match of _STRONG_LOG holds (the glog forms as a line's first two
# characters: a level letter then a digit, or `[` then the level letter).
_STRONG_LOG_LITERALS = (
    "[rank",
    "[default",
    "Traceback (most recent call last):",
    "ChildFailedError",
    "torch.distributed",
    "ProcessGroupNCCL",
    "ProcessGroupGloo",
)
# A stdlib `re` with a literal newline first scans at memchr speed (a `^` in MULTILINE mode
# tries every position); the text's first line is checked on its own.
_GLOG_LINE_START = re.compile(r"\n(?:[IWEF]\d|\[[IWEF])")
_GLOG_FIRST = re.compile(r"[IWEF]\d|\[[IWEF]")


def _strong_log(text: str) -> bool:
    """`_STRONG_LOG.search(text)`, with the regex run only when a literal it needs is there:
    on a 64 KiB head without any (most training logs) the substring checks are ~10x faster."""
    if not (
        any(word in text for word in _STRONG_LOG_LITERALS)
        or _GLOG_FIRST.match(text)
        or _GLOG_LINE_START.search(text)
    ):
        return False
    return _STRONG_LOG.search(text) is not None


# Anything that makes a text a log rather than prose: timestamps, levels, tracebacks,
# launcher and NCCL output, training progress.
_LOG_MARKER = regex_cache.compile(
    r"Traceback \(most recent call last\)|\b(?:Error|Exception|Warning)\b"
    r"|\b[A-Z]\w*(?:Error|Exception)\b|^\s*File \"[^\"]+\", line \d+|No module named|\bNCCL\b"
    r"|\btimed? ?out\b|\bassert(?:ion)?\b|\bpython\d|\bPyTorch\b|\btorch\b"
    r"|^\s*(?:INFO|WARNING|WARN|ERROR|DEBUG|CRITICAL|FATAL)\b|\[(?:INFO|WARNING|ERROR|DEBUG)\]"
    r"|^[IWEFD]\d{4} \d{2}:\d{2}|\[[IWEF]\d{3,4} |^\[?\d{4}-\d{2}-\d{2}[ T_]\d{2}:\d{2}"
    r"|\bNCCL (?:INFO|WARN)\b|\[rank\d+\]|^\[default\d+\]:|\bsrun: |\bslurmstepd: "
    r"|\b(?:torchrun|torch\.distributed|deepspeed|megatron|accelerate)\b"
    r"|\b(?:iteration|epoch|loss|step)\b.{0,40}\d|\bKilled\b|Segmentation fault|core dumped"
    r"|\bCUDA\b|\bout of memory\b|\bOOM\b|\bNaN\b|illegal memory access|WorkNCCL"
    r"|\bexit ?code\b|\breturn code\b|\bterminated\b|\bunexpected key|\brank\s*[=:]?\s*\d",
    regex.MULTILINE | regex.IGNORECASE,
)

_COLLECT_ENV = (
    "Collecting environment information",
    "PyTorch version:",
    "Is debug build:",
    "CUDA used to build PyTorch:",
    "Python platform:",
    "Is CUDA available:",
    "Versions of relevant libraries:",
)
_NVIDIA_SMI = regex_cache.compile(
    r"NVIDIA-SMI \d+\.\d+.*Driver Version:|^=+NVSMI LOG=+$|^Driver Version\s+: \d"
    r"|^\s*GPU0\s.*\bCPU Affinity\b",  # `nvidia-smi topo -m`
    regex.MULTILINE,
)
_NVIDIA_SMI_WORDS = ("NVIDIA-SMI", "NVSMI LOG", "Driver Version", "GPU0")
_PIP_LIST_HEADER = regex_cache.compile(
    r"^Package +Version *(?:Location|Editable project location)?\s*\n-{3,} +-{3,}", regex.MULTILINE
)
_CONDA_LIST_HEADER = regex_cache.compile(r"^# packages in environment at ", regex.MULTILINE)
_PIP_FREEZE_LINE = regex_cache.compile(
    r"^(?:[A-Za-z0-9][A-Za-z0-9._-]*(?:\[[\w,.-]+\])? *(?:===?|~=|>=) *\S+"
    r"|[A-Za-z0-9][A-Za-z0-9._-]* @ \S+|-e \S+|--?[a-z][a-z-]*(?: \S+)?)$"
)
_ENV_LINE = regex_cache.compile(r"^(?:declare -x |export )?[A-Za-z_][A-Za-z0-9_]*=(?!=)")

_MARKDOWN_HEADING = regex_cache.compile(r"^#{1,6} \S")
# The first line of a TeX engine's log (`This is pdfTeX, Version 3.141592653-2.6-1.40.25`)
_TEX_LOG = regex_cache.compile(r"This is (?:pdf|Xe|Lua|LuaHB|e-|e|Aleph|Omega)?TeX, Version ")

# A line only a process's output holds: a clock time, a log level at a line's start or in
# brackets, a launcher's prefix, a rank, a progress bar or rate, a traceback's frame, a step
# count. A text whose head has none of them may be something else (`_not_output`).
_OUTPUT_LINE = regex_cache.compile(
    r"\d{1,2}:\d{2}:\d{2}|^\s*\[?(?-i:INFO|WARNING|WARN|ERROR|DEBUG|CRITICAL|FATAL)\b"
    r"|\[(?-i:INFO|WARNING|WARN|ERROR|DEBUG)\]|^\s*(?:srun|slurmstepd|mpirun|torchrun)\S*: "
    r"|\brank\s*\d|\d+%\||\b(?:it/s|s/it)\b|^\s*File \"[^\"]+\", line \d+|\bNCCL (?:INFO|WARN)\b"
    r"|\b(?:step|iter(?:ation)?|epoch)\b\W{0,3}\d",
    regex.MULTILINE | regex.IGNORECASE,
)
# A sentence's line: words and punctuation, no digit (a licence, a book, prose notes).
_PROSE_LINE = regex_cache.compile(r"[^\W\d_][^\d]*")
# `tree`'s drawing of a folder (`├── model.py`, `│   └── utils.py`)
_TREE_LINE = regex_cache.compile(r"[│ \t]*(?:├|└)── ")
# A data list's record: a file's path, then `|` and its label or transcript (the filelists of
# speech and image datasets: `wavs/LJ001-0001.wav|Printing, in the only sense...`)
_RECORD_LINE = regex_cache.compile(r"[\w./~-]+\.\w{2,5}\|\S")
# A line of a diff: `diff`'s normal form (`26c27`, `< old`, `---`, `> new`) or a unified patch
# (`@@ -12,7 +12,8 @@`, `-old`, `+new`), and the hunk headers one of which a diff has (a shell's
# `set -x` trace is lines of `+ cmd` too, with none)
_DIFF_LINE = regex_cache.compile(
    r"[<>](?: |$)|---$|[+\-](?![+\-])|\+\+\+ |--- |@@ -\d|diff |index [0-9a-f]"
    r"|\d+(?:,\d+)?[acd]\d+(?:,\d+)?$"
)
_DIFF_HUNK = regex_cache.compile(r"\d+(?:,\d+)?[acd]\d+(?:,\d+)?$|@@ -\d+(?:,\d+)? \+\d")
# A line of source code or a shell script: a Python statement's opening word, a decorator, a
# comment, a shebang, a scheduler directive, a shell keyword or an assignment.
_CODE_LINE = regex_cache.compile(
    r"\s*(?:#|@[A-Za-z_]|(?:import|from|def|class|return|if|elif|else|for|while|try|except"
    r"|finally|with|raise|yield|assert|pass|break|continue|async|await|global|then|fi|do|done"
    r"|esac|case|export|echo|source|module|cd|mkdir|srun|torchrun|python3?|deepspeed|set|exit"
    r"|local|function)\b|[A-Za-z_][A-Za-z0-9_]*=|[)}\]]+[,:;]?$|[A-Za-z_][\w.]*\(.*\)$)"
)

_JSON_ELASTIC_MESSAGE = regex_cache.compile(rb'^\s*\{\s*"message"\s*:')
_JSON_KEY = regex_cache.compile(rb'"(py_callstack|extraInfo|errorCode|errorTraits|timestamp)"\s*:')


@dataclass(frozen=True)
class Sniffed:
    kind: SourceKind
    warnings: tuple[str, ...] = ()
    readable: bool = True  # False: the content is not worth handing to a parser


def detect_kind(head: bytes) -> tuple[SourceKind, list[str]]:
    """Return the kind of the input whose first bytes are `head`, and warnings about it.

    Looks only at the bytes given (callers pass up to HEAD_BYTES). Never raises.
    """
    found = sniff(head)
    return found.kind, list(found.warnings)


def sniff(head: bytes) -> Sniffed:
    """`detect_kind` plus whether the content should be read at all."""
    try:
        return _detect(head)
    except Exception as exc:  # a sniffer bug must not stop the run
        return Sniffed(
            SourceKind.TEXT, (f"could not tell what this file is ({type(exc).__name__})",)
        )


def _not_read(why: str) -> Sniffed:
    return Sniffed(SourceKind.TEXT, (why,), readable=False)


def _detect(head: bytes) -> Sniffed:
    if not head:
        return _not_read(InputNote.EMPTY_FILE)
    if len(head) >= 2 and head[0] == 0x80 and head[1] in _PICKLE_PROTOCOLS:
        if _looks_like_flight_recorder(head):
            return Sniffed(SourceKind.FLIGHT_RECORDER)
        return _not_read("Python pickle that is not a flight-recorder dump, not read")
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        return _not_read("UTF-16 encoded text, not read (convert it to UTF-8)")
    notes: tuple[str, ...] = ()
    if b"\x00" in head:
        if not head.strip(b"\x00"):
            return _not_read("holds only NUL bytes (a preallocated or zeroed file), not read")
        nul_free = _text_around_nuls(head)
        if nul_free is None:
            return _not_read("binary file, not read")
        notes = (
            f"holds {len(head) - len(nul_free)} NUL bytes near its start (a crashed writer or "
            "a preallocated file?); the text around them is read",
        )
        head = nul_free
    if _is_binary(head):
        return _not_read("binary file, not read")
    found = _detect_text(head)
    return Sniffed(found.kind, (*notes, *found.warnings), found.readable) if notes else found


def _detect_text(head: bytes) -> Sniffed:
    text = head.decode("utf-8", errors="replace").removeprefix("\ufeff")
    stripped = text.lstrip()
    if stripped.startswith(("{", "[")):
        kind = _json_kind(head.lstrip().removeprefix(b"\xef\xbb\xbf").lstrip())
        if kind is not None:
            return Sniffed(kind)
        if len(head) < HEAD_BYTES and _is_one_json_document(text):
            return Sniffed(SourceKind.TEXT)  # data (a config, metrics), not a log
    lines = _lines(text, complete=len(head) < HEAD_BYTES)
    if not lines:
        return _not_read("file holds only blank lines")
    if _TEX_LOG.match(lines[0]):
        # a document's build: its `! Undefined control sequence` and `error style` are no job's
        return _not_read("reads as a TeX build log, not a training job's output: not read")
    strong_log = _strong_log(text)
    # no line of its head is one only a process's output holds
    quiet = not strong_log and _OUTPUT_LINE.search(text) is None
    if not strong_log and _MARKDOWN_HEADING.match(lines[0]) and not (quiet and _is_code(lines)):
        return Sniffed(SourceKind.TEXT)  # notes or a README, not a process's output
    if _is_pyspy(lines, strong_log):
        return Sniffed(SourceKind.PYSPY)
    if not strong_log and _is_env_report(text, lines):
        return Sniffed(SourceKind.ENV_REPORT)
    if not strong_log and _is_nccl_debug_file(lines):
        return Sniffed(SourceKind.NCCL)
    what = _not_output(lines) if quiet else None
    if what is not None:
        # not read, beside logs or alone: a book's `killed`, a licence's `computer failure`,
        # a tokenizer's ` error` merge and a script's `echo "ERROR ..."` are no job's failure
        return _not_read(f"reads as {what}, not a process's output: not read")
    if strong_log or _LOG_MARKER.search(text):
        return Sniffed(SourceKind.RANK_LOG)
    return Sniffed(SourceKind.TEXT)


def _not_output(lines: list[str]) -> str | None:
    """What a text with no line of a process's output is instead, where its lines say so
    plainly: its error words (a licence's `computer failure`, a tokenizer's ` error` merge, a
    script's `echo "ERROR ..."`) are no job's failure, beside logs or alone."""
    if len(lines) >= 20 and _mostly(lines, 0.75, _prose_line):
        return "prose (a licence, a book, a story)"
    # a licence's or a notice's sentences carry section numbers and years: of its lines of
    # four words or more, nearly all are sentences, and they are most of the text; they run
    # long or end in punctuation, where a program's short notes (`loading data from x.dat`)
    # do neither
    sentences = [line.strip() for line in lines if len(line.split()) >= 4]
    if (
        len(sentences) >= 20
        and len(sentences) >= 0.5 * len(lines)
        and _mostly(sentences, 0.85, _sentence_line)
        and (
            sorted(map(len, sentences))[len(sentences) // 2] >= 45
            or _mostly(sentences, 0.3, lambda line: line[-1] in ".,;:!?")
        )
    ):
        return "prose (a licence, a book, a story)"
    if len(lines) >= 10 and _mostly(lines, 0.5, lambda line: bool(_TREE_LINE.match(line))):
        return "a directory listing"
    if len(lines) >= 20 and _mostly(lines, 0.8, lambda line: bool(_RECORD_LINE.match(line))):
        return "a data list (file paths with their labels or transcripts)"
    if len(lines) >= 50 and _mostly(lines, 0.9, _word_list_line):
        return "a word list (a vocabulary, a tokenizer's merges, names)"
    if _is_code(lines):
        return "code, a script or a file of settings"
    if (
        len(lines) >= 10
        and any(_DIFF_HUNK.match(line) for line in lines)
        and _mostly(lines, 0.6, lambda line: bool(_DIFF_LINE.match(line)))
    ):
        return "a diff between two files"
    return None


def _is_code(lines: list[str]) -> bool:
    return len(lines) >= 10 and _mostly(lines, 0.6, lambda line: bool(_CODE_LINE.match(line)))


def _prose_line(line: str) -> bool:
    text = line.strip()
    return len(text.split()) >= 4 and _PROSE_LINE.fullmatch(text) is not None


def _sentence_line(line: str) -> bool:
    """A line of running text: words, with at most a few digits (a section's number, a year)
    and none of a log's marks (`=`, `|`, `[`, a path's `/`)."""
    text = line.strip()
    if any(c in text for c in "=|[]{}<>/\\_"):
        return False
    letters = sum(c.isalpha() for c in text)
    digits = sum(c.isdigit() for c in text)
    return letters >= 0.75 * len(text.replace(" ", "")) and digits <= 8


def _word_list_line(line: str) -> bool:
    fields = line.split()
    return (
        0 < len(fields) <= 2
        and all(len(field) <= 40 and not any(c in field for c in "=:(") for field in fields)
        and any(c.isalpha() for c in line)
    )


def _is_one_json_document(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False  # JSON lines (a structured log) or not JSON at all
    return True


def _looks_like_flight_recorder(head: bytes) -> bool:
    entry_keys = sum(key in head for key in _FR_ENTRY_KEYS)
    # v2.x dumps name pg keys first (a huge pg_config can push `entries` past the head);
    # a bare-list dump (torch 2.2) only has entry keys.
    top = any(key in head for key in _FR_TOP_KEYS if key != b"entries")
    return top or (b"entries" in head and entry_keys >= 1) or entry_keys >= 2


_NUL_RUN = re.compile(rb"\x00+")


def _text_around_nuls(head: bytes) -> bytes | None:
    """`head` without its NUL bytes when they come in runs (a block a crashed writer left, a
    preallocated file) and the rest is text; None when they look like a binary format's (NULs
    scattered between other bytes, or UTF-16 without its byte-order mark: every other byte)."""
    runs = _NUL_RUN.findall(head)
    nuls = sum(map(len, runs))
    if len(runs) > 4 and nuls < 8 * len(runs):  # short runs everywhere: binary or UTF-16
        return None
    rest = head.replace(b"\x00", b"")
    if len(rest.strip()) < 16:  # nothing but NULs (and a few bytes): nothing to read
        return None
    return rest


def _is_binary(head: bytes) -> bool:
    if b"\x00" in head[:8192]:
        return True
    sample = head[:16384]
    controls = len(sample) - len(sample.translate(_CONTROL_TABLE).replace(b"\x00", b""))
    if controls > max(8, len(sample) // 50):
        return True
    text = sample.decode("utf-8", errors="replace")
    # A cut multi-byte character at the end of the head is not a sign of binary data.
    bad = text[:-3].count("\ufffd")
    return bad > max(8, len(text) // 20)


def _json_kind(head: bytes) -> SourceKind | None:
    if head.startswith(b"{"):
        if b'"entries"' in head and (
            any(key in head for key in _FR_ENTRY_KEYS)
            or b'"pg_config"' in head
            or b'"version"' in head
        ):
            return SourceKind.FLIGHT_RECORDER
        if _is_elastic_error(head):
            return SourceKind.ELASTIC_ERROR
        return None
    # `[` : py-spy --json (a list of thread objects) or a pre-2.3 flight recorder list.
    if b'"frames"' in head and regex.search(
        rb'"(?:thread_id|os_thread_id|owns_gil|thread_name)"\s*:', head
    ):
        return SourceKind.PYSPY
    if b'"profiling_name"' in head and (b'"collective_seq_id"' in head or b'"seq_id"' in head):
        return SourceKind.FLIGHT_RECORDER
    return None


def _is_elastic_error(head: bytes) -> bool:
    """TORCHELASTIC_ERROR_FILE: `{"message": {"message", "extraInfo": {...}}}`, or the
    legacy `{"message": "...", "timestamp": ...}`; keys in any order."""
    if len(head) < HEAD_BYTES:
        try:
            doc = json.loads(head)
        except ValueError:
            doc = None
        if isinstance(doc, dict):
            message = doc.get("message")
            if isinstance(message, dict):
                return "message" in message and bool(
                    {"extraInfo", "errorCode", "errorTraits"} & message.keys()
                )
            return isinstance(message, str) and "timestamp" in doc
    # A head cut short (a huge py_callstack): judge by the keys it shows.
    return _JSON_ELASTIC_MESSAGE.match(head) is not None and _JSON_KEY.search(head) is not None


def _lines(text: str, *, complete: bool) -> list[str]:
    raw = text.splitlines()
    if not complete and len(raw) > 1:
        raw = raw[:-1]  # the head cut the last line short (a head of one huge line keeps it)
    out: list[str] = []
    for line in raw:
        if line.strip():
            out.append(line.rstrip("\r"))
            if len(out) >= _MAX_LINES:
                break
    return out


def _is_pyspy(lines: list[str], strong_log: bool) -> bool:
    first = lines[0]
    if (
        formats.PYSPY_PROCESS.match(first)
        and len(lines) > 1
        and formats.PYSPY_PYTHON.match(lines[1])
    ):
        return True
    if formats.pyspy_thread(first):
        return True
    if _PYSPY_FAILURE_FIRST.match(first) and any(
        _PYSPY_FAILURE_SIGN.search(line) for line in lines[:40]
    ):
        return True
    if strong_log or not any(
        formats.pyspy_thread(line) for line in lines if line.startswith("Thread ")
    ):
        return False  # a dump has at least one thread line
    return _mostly(
        lines,
        0.6,
        lambda line: bool(
            formats.pyspy_thread(line)
            or formats.PYSPY_PY_FRAME.match(line)
            or formats.PYSPY_NATIVE_FRAME.match(line)
            or formats.PYSPY_LOCALS.match(line)
            or formats.PYSPY_PROCESS.match(line)
            or formats.PYSPY_PYTHON.match(line)
        ),
    )


def _mostly(lines: list[str], share: float, test: Callable[[str], bool]) -> bool:
    """Whether at least `share` of `lines` pass `test`; stops once too many have failed
    (sniffing ~270 logs of a big job would otherwise test every head line many times)."""
    allowed = len(lines) - share * len(lines)  # failures that still leave `share` passing
    failed = 0
    for line in lines:
        if not test(line):
            failed += 1
            if failed > allowed:
                return False
    return True


def _is_env_report(text: str, lines: list[str]) -> bool:
    if sum(marker in text for marker in _COLLECT_ENV) >= 2:
        return True
    if "DeepSpeed" in text and formats.DS_REPORT_START.search(text):
        return True
    # each regex runs only when a literal it needs is there: most heads have none
    if any(word in text for word in _NVIDIA_SMI_WORDS) and _NVIDIA_SMI.search(text):
        return True
    if "Package" in text and _PIP_LIST_HEADER.search(text):
        return True
    if "# packages in environment at " in text and _CONDA_LIST_HEADER.search(text):
        return True
    if len(lines) < 3:
        return False
    body = [line for line in lines if not line.startswith("#")]
    if len(body) < 3:
        return False
    return _mostly(body, 0.8, lambda line: bool(_PIP_FREEZE_LINE.match(line))) or _mostly(
        body, 0.8, lambda line: bool(_ENV_LINE.match(line))
    )


def nccl_only(sample: bytes) -> bool:
    """Whether a stretch of a file (its tail, say) is NCCL debug lines only.

    A head full of NCCL init lines can belong to a process's stdout whose traceback comes
    later; callers check the tail of big files before trusting SourceKind.NCCL."""
    text = sample.decode("utf-8", errors="replace")
    if _strong_log(text):
        return False
    lines = text.splitlines()[1:]  # the first line may start mid-way
    return _is_nccl_debug_file([line for line in lines if line.strip()][-_MAX_LINES:])


def _nccl_file_line(line: str) -> bool:
    """A line of NCCL_DEBUG_FILE output: an NCCL debug line with its `host:pid:tid`, or the
    bare `NCCL version` banner."""
    m = formats.NCCL_LINE.match(line)
    return (m is not None and m["host"] is not None) or bool(formats.NCCL_BARE_VERSION.match(line))


# What a process's own output holds and NCCL_DEBUG_FILE output never does: training progress,
# a Python traceback.
_NOT_NCCL_OUTPUT = regex_cache.compile(
    r"Traceback \(most recent call last\)|^\s*File \"|\b(?:iteration|epoch|step|loss)\b.{0,40}\d",
    regex.IGNORECASE,
)


def _is_nccl_debug_file(lines: list[str]) -> bool:
    # NCCL_DEBUG_FILE output holds NCCL lines only (plus the odd continuation line of a
    # multi-line WARN); a process's stdout with NCCL lines mixed in is a rank log, even when
    # its set-up lines are most of what it printed so far.
    if not lines:
        return False

    def nccl_line(line: str) -> bool:
        return _nccl_file_line(line) or bool(formats.NCCL_BARE_VERSION.match(line))

    if not _mostly(lines, 0.9, nccl_line):  # stops early: most heads fail at once
        return False
    return not any(_NOT_NCCL_OUTPUT.search(line) and not nccl_line(line) for line in lines)
