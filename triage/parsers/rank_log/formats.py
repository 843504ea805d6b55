"""The line formats a log's lines come in (c10, glog, DeepSpeed, NeMo, Python logging) and the
shapes of the messages in them: traceback parts, C++ exceptions, torchrun's summary, watchdog
reports; `LineMeta` is what a line's format said."""

from __future__ import annotations

import re
import signal as _signal
from dataclasses import dataclass

from triage.model import Level

# --------------------------------------------------------------------------- line formats

OLD_C10 = re.compile(r"\[(?P<lvl>[IWEF]) (?P<src>[\w./-]+):(?P<srcline>\d+)\] ?")
DEEPSPEED = re.compile(
    r"\[(?P<when>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}[,.]\d+)\] \[(?P<lvl>[A-Z]+)\] "
    r"\[(?P<src>[^:\]]+):(?P<srcline>\d+):(?P<func>[^\]]*)\] ?"
)
# NeMo's logger (nemo/utils/formatters/base.py): `[NeMo W 2024-04-08 15:44:57 exp_manager:966] `
NEMO = re.compile(
    r"\[NeMo (?P<lvl>[DIWEC]) (?P<when>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})"
    r"(?: (?P<src>[\w.]+):(?P<srcline>\d+))?\] ?"
)
# libfabric's logger (src/log.c, fi_log_): `libfabric:<pid>:<secs>:<fabric>:<prov>:<subsys>:
# <func>():<line><level> `, its own level in angle brackets (FI_LOG_LEVEL=warn|info|debug|trace)
LIBFABRIC = re.compile(
    r"libfabric:(?P<pid>\d+):\d+:[^<\n]*?\(\):(?P<srcline>\d+)<(?P<lvl>warn|info|debug|trace)> ?"
)
# UCX's logger (src/ucs/debug/log.c): `[<secs>.<us>] [<host>:<pid>:<thread>] <file>:<line>
# UCX  <LEVEL> `, its level a word of its own (UCX_LOG_LEVEL=debug prints pages of them)
UCX = re.compile(
    r"\[\d+\.\d+\] \[(?P<host>[^:\]\s]+):(?P<pid>\d+):\d+\]\s+(?P<src>[\w.]+):(?P<srcline>\d+)\s+"
    r"UCX\s+(?P<lvl>FATAL|ERROR|WARN|DIAG|INFO|DEBUG|TRACE\w*|PRINT)\s+"
)
PYLOG = re.compile(r"(?P<lvl>ERROR|WARNING|CRITICAL|INFO|DEBUG|FATAL):(?P<logger>[\w.]+):")
# The level a timestamped line names near its start (`2024-05-01 12:00:00 INFO ...`, Hydra's
# `[time][name][INFO] - ...`): an INFO or DEBUG record's words are a message's, not an error's,
# as for the stdlib's `INFO:name:` lines (a sample's transcript saying "killed" is no failure).
LEVEL_WORD = re.compile(r"\b(?P<lvl>ERROR|CRITICAL|FATAL|WARNING|WARN|INFO|DEBUG)\b")
# Python's warnings module (`warnings.formatwarning`): `path.py:LINE: Category: message`. Its
# words are a warning's, whatever they say (`RuntimeWarning: ... disabled after runtime failure;
# falling back to SDPA. ValueError: ...` is a fallback the program took, not its failure).
PY_WARNING = re.compile(r"\S+\.py:\d+: (?:[A-Za-z_]\w*\.)*[A-Za-z_]*Warning: ")
LEVELS = {
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
    # UCX's
    "DIAG": Level.INFO,
    "PRINT": Level.INFO,
    "TRACE": Level.DEBUG,
    # libfabric's
    "warn": Level.WARNING,
    "info": Level.INFO,
    "debug": Level.DEBUG,
    "trace": Level.DEBUG,
}

# --------------------------------------------------------------------------- message templates

TB_HEADER = re.compile(r"\s*Traceback \(most recent call last\):\s*$")
# faulthandler writes `  File "x.py", line 12 in main` (no comma)
TB_FILE = re.compile(r'\s+File "(?P<file>[^"]*)", line (?P<line>\d+)(?:,? in (?P<func>.*))?')
# a pasted traceback whose first frame was cut mid-path, its `File "` lost with it:
# `ckages/deepspeed/runtime/engine.py", line 468, in __getattr__`
TB_CUT_FILE = re.compile(
    r'[ \t]*(?P<file>[^\s"][^"]*?\.pyx?)", line (?P<line>\d+), in (?P<func>[^\s"]+)[ \t]*$'
)
EXC_LINE = re.compile(r"(?P<type>[A-Za-z_][\w.]*(?:::\w+)*)(?::(?: ?(?P<msg>.*))?)?\s*$")
CHAIN = re.compile(
    r"(During handling of the above exception, another exception occurred:"
    r"|The above exception was the direct cause of the following exception:)\s*$"
)
TERMINATE = re.compile(
    r"terminate called (?:after throwing an instance of '(?P<cls>[^']+)'"
    r"|(?P<other>without an active exception|recursively))"
)
WHAT = re.compile(r"\s*what\(\):\s*(?P<what>.*)")
RAISED_FROM = re.compile(r"Exception raised from (?P<func>.+?) at (?P<loc>\S+)")
# a line that opens with a one-word tag (`[eval] rank 2 ...`, `[rank3]: ...`, `[INFO] ...`) is
# a new log record of its own: a what() message never goes on with one (`[Rank 0] ...` and
# `[enforce fail at ...]` hold a space and may)
TAGGED_RECORD = re.compile(r"\s*\[[A-Za-z][\w.-]*\]:? ")
# gloo's and c10's checks name their native source place first in what(): `[enforce fail at
# gloo/transport/tcp/pair.cc:456] ...`, `[../third_party/gloo/gloo/transport/tcp/pair.cc:553] ...`
NATIVE_AT = re.compile(
    r"\[(?:enforce fail at )?(?P<loc>[^\]\s]+\.(?:cc|cpp|cxx|cu|cuh|c|h|hpp):\d+)\]"
)
CPP_FRAME = re.compile(r"frame #(?P<n>\d+): ")
BORDER = re.compile(r"(?P<ch>[=-])(?P=ch){9,}\s*$")
SUMMARY_TITLE = re.compile(r"\S.* FAILED\s*$")
# the table's section headers; a table cut above its title still opens with one of them
SUMMARY_HEADER = re.compile(r"(?:Failures:|Root Cause \(first observed failure\):)")
SUMMARY_IDX = re.compile(r"\[(?P<idx>\d+)\]:\s*$")
SUMMARY_FIELD = re.compile(
    r"  (?P<key>time|host|rank|exitcode|error_file|traceback)\s*: ?(?P<value>.*)$"
)
SUMMARY_RANK = re.compile(r"(?P<rank>-?\d+)(?: \(local_rank: (?P<lr>-?\d+)\))?")
SUMMARY_EXIT = re.compile(
    r"(?P<code>-?\d+)(?: \(pid: (?P<pid>\d+)\))?\s*(?:\((?P<sig>[A-Z0-9_/]+)\))?"
)

AGENT_SRC = re.compile(r"distributed/(?:elastic/|run\.py|launcher/)")
LEAD = re.compile(r"\s*(?:[A-Za-z_][\w.]*(?:::\w+)*:\s*)?")

DS_HOST_RANKS = re.compile(r"'(?P<host>[^']+)': \[(?P<ranks>[\d, ]+)\]")
# faulthandler (on by default for torchrun workers): the fatal signal, then each thread's
# Python stack, innermost frame first
FATAL_PYTHON = re.compile(r"Fatal Python error: (?P<what>[A-Z][\w ]+?)\s*$")
FAULT_THREAD = re.compile(r"(?:Current thread|Thread) 0x[0-9a-fA-F]+ .*\(most recent call first\):")


def signal_name(code: int | None) -> str | None:
    if code is None or code >= 0:
        return None
    try:
        return _signal.Signals(-code).name
    except ValueError:
        return None


def int_or_none(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        return None


@dataclass
class LineMeta:
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
