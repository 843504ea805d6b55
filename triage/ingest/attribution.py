"""Rank, local rank, host and attempt from where a file sits (its path), and its content only
to confirm a rank the name merely suggests (`confirmed`).

Parsers attribute from content (`[rank3]:` prefixes, NCCL `Init COMPLETE` lines); this module
does the path side, conservatively: a wrong rank is worse than none.

Rules, innermost evidence first:

* torchrun `--log-dir` layout `.../attempt_<N>/<local_rank>/{stdout.log,stderr.log,error.json}`
  gives `attempt` and `local_rank`. The global rank is left None: a path from one node of a
  multi-node job looks the same as a single-node run, and `group_rank * nproc + local_rank`
  is not in the path. Content (torchrun's failure table, `[rankN]:` prefixes) fills it.
* A rank comes from the file name only through an explicit word: `rank_3`, `rank3`, `rank-3`,
  `node-1-rank12` (12), `stderr_rank_5`, `worker-0`, `trace_7`, `nccl_trace_rank_3`, and the
  flight-recorder form with a host inside, `comm_lib_trace_rank_container-node02_5` (rank =
  last run of digits, host between). `local_rank3` gives a local rank, not a rank.
* A small trailing index (1-4 digits after `_` or `-`) after a word that per-rank files use
  (`stdout_3`, `log-2`, `pyspy_1`, `dump_0`...) is a guess (`rank_guessed`): a log's own
  lines must name that rank before it counts (`confirmed`, which the walk runs on the file's
  first bytes). A `log-5.txt` that is one driver's console with every rank in it, or a
  `train-0.log` that is torchrun's merged output, names no rank 5 or 0 of its own. Numbers
  after other words (`slurm-494583`, `job_12`, `epoch_3`), dates, and `.N` rotation suffixes
  never count.
* A directory named exactly `rank_3` / `worker3` gives the rank when the file name does not.
* Host: the flight-recorder name above, NCCL_DEBUG_FILE's `%h.%p` names
  (`nccl.node01.12345.log` -> node01), a host-shaped name right before an explicit rank
  (`trn-node-2.rank0.pid19821.txt`, `node-1-rank12.out`), a file named just like a host
  (`node01.log`, `host-a7.txt`, `10.0.0.5.log`), else the deepest directory that
  is clearly a host folder: `host-<name>` / `hostname=<name>` / `node_<name>`, a name
  ending in a host word and a number (`node01`, `gpu-node-3`, `nid001234`, `dgx07`,
  `compute-12`), or an IPv4 address (`10.0.0.5`, `ip-10-0-0-5`). Archive names count as
  directories (`node01.tar.gz`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace

import regex

from triage import regex_cache


@dataclass(frozen=True)
class PathFacts:
    rank: int | None = None
    local_rank: int | None = None
    host: str | None = None
    attempt: int | None = None
    # the rank is a trailing number after a word per-rank files use (`stdout_4`, `log-5`),
    # not an explicit rank word: a guess until the file's own lines agree (`confirmed`)
    rank_guessed: bool = False


# Suffixes stripped before reading a name (repeatedly: `rank2.pyspy.json` -> `rank2`).
_EXTENSIONS = frozenset(
    [
        "log",
        "txt",
        "text",
        "out",
        "err",
        "stdout",
        "stderr",
        "json",
        "jsonl",
        "pkl",
        "pickle",
        "pyspy",
        "spy",
        "dump",
        "trace",
        "gz",
        "tgz",
        "tar",
        "zip",
        "bz2",
        "tbz2",
        "xz",
        "txz",
        "zst",
        "md",
        "csv",
        "yaml",
        "yml",
        "html",
        "bin",
        "dat",
    ]
)

_ATTEMPT = regex_cache.compile(r"attempt[_-]?(\d{1,4})", regex.IGNORECASE)
_LOCAL_RANK = regex_cache.compile(
    r"(?<![a-z])local[_-]?rank[_.-]?(\d{1,6})(?!\d)", regex.IGNORECASE
)
_EXPLICIT_RANK = regex_cache.compile(
    r"(?<![a-z])(?:rank|worker)[_.-]?(\d{1,6})(?!\d)", regex.IGNORECASE
)
_TRACE_INDEX = regex_cache.compile(r"(?<![a-z])trace[_.-]?(\d{1,6})$", regex.IGNORECASE)
_FR_WITH_HOST = regex_cache.compile(
    r"trace_rank_(?P<host>[A-Za-z0-9][\w.-]*?[A-Za-z][\w.-]*?)[_-](?P<rank>\d{1,6})$",
    regex.IGNORECASE,
)
_NCCL_HOST_PID = regex_cache.compile(
    r"(?:.*[._-])?nccl[\w-]*\.(?P<host>[A-Za-z][\w-]*)\.(?P<pid>\d+)", regex.IGNORECASE
)
_TRAILING_INDEX = regex_cache.compile(
    r"(?:^|[_.-])(?P<word>[a-z]+)[_-](?P<idx>\d{1,4})$", regex.IGNORECASE
)
# Words after which a small number is, by convention, the rank of the process that wrote it.
_RANK_WORDS = frozenset(
    [
        "rank",
        "worker",
        "trace",
        "dump",
        "fr",
        "pyspy",
        "spy",
        "stack",
        "stacks",
        "stdout",
        "stderr",
        "out",
        "err",
        "output",
        "log",
        "logs",
        "train",
        "training",
        "proc",
        "process",
    ]
)
_DIR_RANK = regex_cache.compile(r"(?:rank|worker)[_-]?(\d{1,6})", regex.IGNORECASE)

_HOST_PREFIXED = regex_cache.compile(
    r"(?:host|hostname|node)[=_-](?P<rest>[A-Za-z0-9][\w.-]*)", regex.IGNORECASE
)
_HOST_WORD_NUMBER = regex_cache.compile(
    r"(?:[A-Za-z][A-Za-z0-9-]*?)?(?:node|nid|host|compute|dgx|hgx|srv|server)[-_]?\d+",
    regex.IGNORECASE,
)
# A file named after its host: stricter than folders (`torchrun-node01.txt` is not a host).
_HOST_FILE = regex_cache.compile(r"(?:node|nid|host|compute|dgx|hgx)[-_]?\d+", regex.IGNORECASE)
_IPV4 = regex_cache.compile(r"(?:ip-)?\d{1,3}(?P<sep>[.-])\d{1,3}(?P=sep)\d{1,3}(?P=sep)\d{1,3}")


def strip_extensions(name: str) -> str:
    """`rank2.pyspy.json` -> `rank2`; `nccl.node01.12345.log` -> `nccl.node01.12345`."""
    stem = name
    for _ in range(4):
        base, dot, ext = stem.rpartition(".")
        if not dot or not base or ext.lower() not in _EXTENSIONS:
            break
        stem = base
    return stem


def attribute(parts: Sequence[str]) -> PathFacts:
    """Facts from a path given as components, outermost first; the last one is the file.

    Archive members are passed as the archive's own components followed by the member's
    (`["bundle.tgz", "attempt_0", "1", "stderr.log"]`). `..`, `.` and empty parts are ignored.
    """
    clean = [p for p in (str(x).strip() for x in parts) if p and p not in (".", "..")]
    if not clean:
        return PathFacts()
    stem = strip_extensions(clean[-1])
    dirs = [strip_extensions(d) for d in clean[:-1]]

    rank, host, guessed = _rank_and_host_from_name(stem)
    local_rank: int | None = None
    attempt: int | None = None

    lr = _LOCAL_RANK.search(stem)
    if lr:
        local_rank = int(lr.group(1))
    if len(dirs) >= 2 and dirs[-1].isdigit() and _ATTEMPT.fullmatch(dirs[-2]):
        # torchrun --log-dir: <run>/attempt_N/<local_rank>/stdout.log
        local_rank = int(dirs[-1])
    for d in reversed(dirs):
        m = _ATTEMPT.fullmatch(d)
        if m:
            attempt = int(m.group(1))
            break

    for d in reversed(dirs):
        if rank is None and (m := _DIR_RANK.fullmatch(d)):
            rank = int(m.group(1))
        if local_rank is None and (m := _LOCAL_RANK.fullmatch(d)):
            local_rank = int(m.group(1))

    if host is None:
        for d in reversed(dirs):
            host = host_from_dir(d)
            if host:
                break
    return PathFacts(
        rank=rank, local_rank=local_rank, host=host, attempt=attempt, rank_guessed=guessed
    )


# a line naming the rank of the process that printed it: `[rank5]:`, `rank 5`, `RANK=5`,
# `global_rank: 5`, `[Rank 5]`; never a local rank (`local_rank=5`, `[default5]:`)
_RANK_IN_LINE = regex_cache.compile(
    r"(?<![A-Za-z_])(?<!local )(?:global[ _])?rank[\s=:\[-]{0,3}(\d{1,6})(?!\d)",
    regex.IGNORECASE,
)


def confirmed(facts: PathFacts, head: bytes) -> PathFacts:
    """`facts` less a guessed rank (`rank_guessed`) that the log's first bytes do not name
    more than any other: a file of one rank's output says its rank, and a file that says
    many ranks as often (a driver's console, a launcher's merged output) is no one rank's."""
    if not facts.rank_guessed:
        return facts
    text = head.decode("utf-8", "replace")
    named = Counter(int(m.group(1)) for m in _RANK_IN_LINE.finditer(text))
    mine = named.get(facts.rank, 0) if facts.rank is not None else 0
    if mine and all(n < mine for r, n in named.items() if r != facts.rank):
        return replace(facts, rank_guessed=False)
    return replace(facts, rank=None, rank_guessed=False)


def host_from_dir(name: str) -> str | None:
    """The host a folder is named after, or None when the name is not clearly a host."""
    if _ATTEMPT.fullmatch(name) or _DIR_RANK.fullmatch(name) or _LOCAL_RANK.fullmatch(name):
        return None
    m = _HOST_PREFIXED.fullmatch(name)
    if m:
        rest = m.group("rest")
        if "_" in rest:
            return None  # no host name holds `_` (RFC 1123): `host_alloc_fails_...` is a story
        return name if rest.isdigit() else rest
    if _HOST_WORD_NUMBER.fullmatch(name) or _IPV4.fullmatch(name):
        return name
    return None


def _host_before(prefix: str) -> str | None:
    """`trn-node-2.rank0` / `node-1-rank12`: a host-shaped name right before the rank."""
    prefix = prefix.rstrip("._-")
    if not prefix:
        return None
    return host_from_dir(prefix) or host_from_dir(prefix.rsplit(".", 1)[-1])


def _rank_and_host_from_name(stem: str) -> tuple[int | None, str | None, bool]:
    """(rank, host, whether the rank is a guess) a file's name gives."""
    m = _FR_WITH_HOST.search(stem)
    if m:
        return int(m.group("rank")), m.group("host"), False
    stem_wo_local = _LOCAL_RANK.sub("", stem)
    explicit = list(_EXPLICIT_RANK.finditer(stem_wo_local))
    if explicit:
        last = explicit[-1]
        return int(last.group(1)), _host_before(stem_wo_local[: last.start()]), False
    m = _TRACE_INDEX.search(stem)
    if m:
        return int(m.group(1)), None, False
    m = _NCCL_HOST_PID.fullmatch(stem)
    if m:
        return None, m.group("host"), False
    m = _TRAILING_INDEX.search(stem_wo_local)
    if m and m.group("word").lower() in _RANK_WORDS:
        return int(m.group("idx")), None, True
    if _HOST_FILE.fullmatch(stem) or _HOST_PREFIXED.fullmatch(stem) or _IPV4.fullmatch(stem):
        return None, host_from_dir(stem), False  # `node01.log`: one file per host
    return None, None, False
