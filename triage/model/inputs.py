"""What ingest hands the parsers: a Source (one file or archive member) and the kinds of
inputs, events, outcomes and notes every stage names."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import IO


class SourceKind(str, Enum):
    """What an input is, found by sniffing its content (never by its name alone)."""

    RANK_LOG = "rank_log"
    NCCL = "nccl"
    PYSPY = "pyspy"
    FLIGHT_RECORDER = "flight_recorder"
    ELASTIC_ERROR = "elastic_error"
    ENV_REPORT = "env_report"
    TEXT = "text"

    @property
    def process_output(self) -> bool:
        """What a process printed as it ran (its log, NCCL's debug output): read whole, even
        a quiet one says something of the job."""
        return self in (SourceKind.RANK_LOG, SourceKind.NCCL)


class EventKind(str, Enum):
    """What one parsed event is. Rules filter on these; correlate reads the payloads."""

    TRACEBACK = "traceback"  # a whole Python traceback (chained exceptions kept)
    CPP_EXCEPTION = "cpp_exception"  # `terminate called after throwing ...` + `what():`
    ERROR_LINE = "error_line"  # one error-level line: glog E/F, logging ERROR, `Error:`
    WARNING_LINE = "warning_line"  # one warning-level line worth keeping
    AGENT = "agent"  # torchrun / deepspeed launcher lines (exit codes, SIGTERM sent)
    RANK_EXIT = "rank_exit"  # one rank's exit (payload RankExit): summary block, launcher
    NCCL_WARN = "nccl_warn"  # `NCCL WARN ...`
    NCCL_INFO = "nccl_info"  # NCCL INFO lines worth keeping (version, transport, errors)
    NCCL_COMM = "nccl_comm"  # communicator init: rank <-> host/pid/device (NcclLineFacts)
    PROGRESS = "progress"  # last training progress seen on a rank (ProgressFacts)
    SIGNAL = "signal"  # a signal or kill reported in text (Slurm OOM, Killed, SIGTERM)
    FLIGHT_RECORDER = "flight_recorder"  # payload FlightRecorderDump
    PYSPY = "pyspy"  # payload PySpyDump
    ELASTIC_ERROR = "elastic_error"  # payload RankExit built from error.json
    ENV_REPORT = "env_report"  # payload EnvReport
    INPUT_WARNING = "input_warning"  # the parser could not read something; text says why


class OutcomeKind(str, Enum):
    """What became of the job as a whole (DESIGN.md: `outcome.id`)."""

    SUCCEEDED = "succeeded"  # ran to its end and exited normally
    STOPPED = "stopped"  # stopped on purpose: time limit, preemption, a user, Ctrl-C, a signal
    FAILED = "failed"
    HUNG = "hung"  # ranks waited: a timeout fired, a collective never completed
    INCOMPLETE = "incomplete"  # the logs end while the job still ran normally
    UNKNOWN = "unknown"


class Level(str, Enum):
    DEBUG = "debug"
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"
    FATAL = "fatal"


class InputNote(str, Enum):
    """Warnings about an input that are facts about the job, not read failures: a killed
    rank's zero-byte stderr.log, a rank's empty log folder, a note someone left beside the
    logs (`inputs[].warnings` says them)."""

    EMPTY_FILE = "empty file"
    EMPTY_DIRECTORY = "empty directory: nothing to read"
    BESIDE_LOGS = (
        "text with no log lines beside the job's logs (notes, a README, a JSON document): "
        "listed, not read as the job's evidence"
    )

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Source:
    """One input: a file on disk or a member of an archive.

    `open` returns a fresh binary stream each time; archive members are read in place,
    never extracted. `path` is what the user sees (`bundle.tgz!attempt_0/1/stderr.log`).
    """

    path: str
    kind: SourceKind
    size: int
    open: Callable[[], IO[bytes]] = field(repr=False, compare=False)
    rank: int | None = None
    local_rank: int | None = None
    host: str | None = None
    attempt: int | None = None
    warnings: tuple[str, ...] = ()
    # frees the temp space the content takes (a member copied out of a compressed tar); the
    # pipeline calls it once the source is parsed; None when there is nothing to free
    release: Callable[[], None] | None = field(default=None, repr=False, compare=False)
