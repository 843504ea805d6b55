"""What the report claims, its evidence shows (issue #22 item 4).

Every shipped bundle (`corpus_samples/*/bundle`, real torchrun jobs) is diagnosed and its report
view built; then each statement the report makes about ranks, collectives, sequence numbers,
lines and hosts is checked against facts read here, straight from the bundle's files: the py-spy
dumps (who waited where), the flight-recorder dumps (which collective each rank entered last),
the Python tracebacks in the logs (which line raised: the innermost frame of the raising
thread), the logs' own host names. The facts are read with a few regexes of this file, not with
triage's parsers, so a parser's mistake cannot vouch for itself.

Each check returns every problem it finds, so one run shows all that is wrong with a report.
"""

from __future__ import annotations

import html
import importlib.util
import json
import re
import sys
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import cache
from pathlib import Path
from types import ModuleType

import pytest

from triage.knowledge.actions import JobConditions, parse_action
from triage.model import Diagnosis, SourceKind
from triage.pipeline import Options, diagnose, explain
from triage.report import render
from triage.report import view as report_view

CORPUS = Path(__file__).resolve().parent.parent / "corpus_samples"
PYSPY, FR = SourceKind.PYSPY.value, SourceKind.FLIGHT_RECORDER.value
BUNDLES = sorted(p.parent for p in CORPUS.glob("*/expected.json"))


def _load_make() -> ModuleType:
    sys.path.insert(0, str(CORPUS))
    spec = importlib.util.spec_from_file_location("corpus_make_claims", CORPUS / "make.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


make = _load_make()

# torchrun's `[default3]:` and torch's `[rank3]:` in front of a worker's line
_PREFIX = re.compile(r"^(?:\[default(?P<local>\d+)\]:)?(?:\[rank(?P<rank>\d+)\]:)? ?")
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)')
_EXC = re.compile(r"^(?P<exc>[A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit)\b.*)$")
_PYSPY_FRAME = re.compile(r"^\s+(?P<func>\S.*?) \((?P<file>[^()]+):(?P<line>\d+)\)$")
# torch's process-group setup and rendezvous calls, as py-spy names them
_SETUP = re.compile(
    r"(?:^|\.)(?:init_process_group|new_group|next_rendezvous|_store_based_barrier)$"
)
_HOST_LINE = re.compile(r"^\s*host\s*:\s*(?P<host>\S+)\s*$")  # torchrun's failure summary
_NCCL_HOST = re.compile(r"^(?P<host>[A-Za-z][\w.-]*):\d+:\d+ \[\d+\] NCCL ")
_ERROR_WORDS = re.compile(r"Error\b|terminate called|Fatal Python error|Segmentation fault")
_REPEATS = re.compile(r"\s+\[x\d+ on .*$")
_FILE_LINE = re.compile(r"\(([\w./-]+\.py):(\d+)\)")
# torchrun's failure summary: `time : 2026-12-03_08:12:37`, `host : node22`,
# `rank : 2 (local_rank: 2)`, `exitcode : -6 (pid: 19906)`
_SUMMARY_EXIT = re.compile(
    r"^\s*time\s*:\s*\S+_(\d\d:\d\d:\d\d)\s*\n.*\n\s*rank\s*:\s*(\d+).*\n\s*exitcode\s*:\s*(-?\d+)",
    re.M,
)
_EXITED = re.compile(r"rank\(s\) ([\d, -]+) exited (-?\d+)")
_STAMP = re.compile(r"\b\d{2}:\d{2}:\d{2}\b")  # a clock time on a line, in any of the formats
# `what():  [enforce fail at .../gloo/transport/tcp/pair.cc:456]`, `Exception raised from f at
# file.cpp:12`: the library and place that threw, named by the message itself
_NATIVE_NAMED = re.compile(
    r"what\(\):\s+\[(?:enforce fail at )?\S+\.(?:cc|cpp|h|cu):\d+\]|Exception raised from \S+ at"
)


@dataclass
class Facts:
    """What the bundle's own files say, read without triage."""

    files: dict[str, list[str]] = field(default_factory=dict)  # path -> lines (text files)
    raised: dict[str, set[str]] = field(default_factory=dict)  # exception line -> `file.py:N`
    printed_errors: set[int] = field(default_factory=set)  # ranks that printed an error
    pyspy_op: dict[int, str] = field(default_factory=dict)  # rank -> torch.distributed function
    pyspy_ranks: set[int] = field(default_factory=set)  # ranks a py-spy dump shows alive
    # ranks whose main thread stands in process-group setup or a rendezvous (py-spy)
    pyspy_setup: set[int] = field(default_factory=set)
    fr_last: dict[int, tuple[int, str]] = field(default_factory=dict)  # rank -> (seq, op)
    fr_ops: dict[int, dict[int, str]] = field(default_factory=dict)  # rank -> seq -> op
    log_hosts: set[str] = field(default_factory=set)  # torchrun's `host :`, NCCL's `host:pid:`
    exit_codes: dict[int, int] = field(default_factory=dict)  # rank -> torchrun's exitcode
    exit_times: dict[int, str] = field(default_factory=dict)  # rank -> its `HH:MM:SS` there
    fr_files: set[str] = field(default_factory=set)  # the flight-recorder dumps' paths
    pyspy_files: set[str] = field(default_factory=set)  # the py-spy dumps' paths
    native_named: bool = False  # a C++ exception's what() names the source place that threw
    # path -> (line, rank) of the first error line a rank printed in that file
    first_error: dict[str, tuple[int, int]] = field(default_factory=dict)


def _user_frame(frames: list[tuple[str, int, str]]) -> str | None:
    """The innermost frame outside Python's and the libraries' own files."""
    for file, line, _func in reversed(frames):
        if "site-packages" in file or "/lib/python" in file or file.startswith("<"):
            continue
        return f"{Path(file).name}:{line}"
    return None


def _read_errors(path: str, lines: list[str], offset: int | None, facts: Facts) -> None:
    """Ranks that printed an error line of their own (`[rank2]:`, or `[default2]:` on a node's
    console whose first rank is `offset`): a C++ `terminate called`, a fatal signal; and the
    first such line of the file."""
    for number, raw in enumerate(lines, 1):
        m = _PREFIX.match(raw)
        assert m is not None
        text = raw[m.end() :]
        if not (_ERROR_WORDS.search(text) or text.startswith("Traceback (most recent")):
            continue
        rank = None
        if m["rank"] is not None:
            rank = int(m["rank"])
        elif m["local"] is not None and offset is not None:
            rank = offset + int(m["local"])
        if rank is not None:
            facts.printed_errors.add(rank)
            facts.first_error.setdefault(path, (number, rank))


def _read_tracebacks(lines: list[str], facts: Facts) -> None:
    frames: dict[str, list[tuple[str, int, str]]] = {}  # stream (prefix) -> open traceback
    for raw in lines:
        m = _PREFIX.match(raw)
        assert m is not None
        stream = (m["local"] or "") + "/" + (m["rank"] or "")
        text = raw[m.end() :]
        if text.startswith("Traceback (most recent call last)"):
            frames[stream] = []
            continue
        if stream not in frames:
            continue
        if fm := _FRAME.match(text):
            frames[stream].append((fm["file"], int(fm["line"]), fm["func"]))
        elif (em := _EXC.match(text)) and frames[stream]:
            where = _user_frame(frames.pop(stream))
            if where:
                facts.raised.setdefault(em["exc"].strip(), set()).add(where)
            rank = m["rank"] or m["local"]
            if rank is not None:
                facts.printed_errors.add(int(rank))


def _read_pyspy(path: Path, facts: Facts) -> None:
    text = path.read_text(encoding="utf-8", errors="replace")
    main = text.split('"MainThread"', 1)
    if len(main) < 2:
        return
    rank = _rank_of(path)
    facts.pyspy_ranks.add(rank)
    frames = []
    for line in main[1].splitlines()[1:]:
        fm = _PYSPY_FRAME.match(line)
        if fm is None:
            break
        frames.append(fm["func"])
        if fm["file"].endswith("distributed_c10d.py") and rank not in facts.pyspy_op:
            facts.pyspy_op[rank] = fm["func"]
    if any(_SETUP.search(f) for f in frames):
        facts.pyspy_setup.add(rank)


def _rank_of(path: Path) -> int:
    stem = path.name.removesuffix(".json").removesuffix(".txt")
    spelled = re.search(r"rank_?(\d+)", stem)
    return int(spelled.group(1)) if spelled else int(re.findall(r"\d+", stem)[-1])


@cache
def facts_of(bundle: Path) -> Facts:
    facts = Facts()
    evidence = make.evidence_dir(bundle)
    sc = make.SCENARIOS[bundle.name]
    fr_files = {p for p in (evidence / sc.fr_dir).glob("*") if p.is_file()}
    first_rank_of_console, offset = {}, 0
    for node in sc.nodes:
        first_rank_of_console[evidence / node.console] = offset
        offset += node.nproc
    pyspy = set(make.pyspy_dumps(bundle))
    for f in sorted(p for p in evidence.rglob("*") if p.is_file()):
        if f in fr_files:
            facts.fr_files.add(str(f))
            dump = make.load_fr(f)
            rank = _rank_of(f)
            ops = {
                int(e["collective_seq_id"]): e["profiling_name"].split(":")[-1]
                for e in dump["entries"]
            }
            facts.fr_ops[rank] = ops
            last = max(ops)
            facts.fr_last[rank] = (last, ops[last])
            continue
        if f in pyspy:
            facts.pyspy_files.add(str(f))
            _read_pyspy(f, facts)
            continue
        try:
            lines = f.read_text(encoding="utf-8").splitlines()
        except UnicodeDecodeError:
            continue
        if f.suffix == ".json" or (lines and lines[0].lstrip()[:1] == "{"):
            continue  # a JSON document (py-spy --json, error.json): shown rendered, not quoted
        facts.files[str(f)] = lines
        facts.native_named |= any(_NATIVE_NAMED.search(x) for x in lines)
        _read_tracebacks(lines, facts)
        _read_errors(str(f), lines, first_rank_of_console.get(f), facts)
        for clock, rank, code in _SUMMARY_EXIT.findall("\n".join(lines)):
            facts.exit_codes[int(rank)] = int(code)
            facts.exit_times[int(rank)] = clock
        for line in lines:
            if hm := (_HOST_LINE.match(line) or _NCCL_HOST.match(_PREFIX.sub("", line, count=1))):
                facts.log_hosts.add(hm["host"])
    return facts


@cache
def diagnosis_of(bundle: Path) -> Diagnosis:
    return diagnose([str(make.evidence_dir(bundle))], Options(use_embeddings=False, workers=1))


# --------------------------------------------------------------------------- the checks


def quote_problems(d: Diagnosis, facts: Facts) -> list[str]:
    """A line shown under `file:N` is what line N of that file holds (not the first line of the
    traceback it ends); one shown under a file without a line is in that file; nothing triage
    wrote (a finding's sentence) is shown as a quote of a file."""
    quoted: list[tuple[str, str, int | None, str]] = []
    quoted += [("evidence", e.source, e.line, e.text) for e in d.evidence]
    if d.first_failure is not None:
        f = d.first_failure
        quoted.append(("first failure", f.source, f.line, f.text))
    if d.outcome is not None:
        quoted += [("outcome", e.source, e.line, e.text) for e in d.outcome.evidence]
    # the timeline's initiating and cascade rows quote events; its context rows narrate
    quoted += [
        ("timeline", t.source, t.line, t.text)
        for t in d.timeline
        if t.line is not None and t.role != "context"
    ]
    sentences = {f.summary.strip() for f in d.findings}
    problems = []
    for what, source, line, text in quoted:
        first = _PREFIX.sub("", text.strip().split("\n", 1)[0], count=1).strip()
        first = _REPEATS.sub("", first)  # the timeline's `  [x4 on ranks 0-1]` after a quote
        if text.strip() in sentences:
            problems.append(f"{what}: triage's own {first[:60]!r} quoted from {Path(source).name}")
            continue
        lines = facts.files.get(source)
        if lines is None:
            if line is not None:
                problems.append(f"{what} {first[:60]!r} under {Path(source).name}:{line}")
            continue
        if line is None:
            if not any(first[:60] in x for x in lines):
                problems.append(f"{what} {first[:60]!r} is not in {Path(source).name}")
        elif not (0 < line <= len(lines)) or first[:60] not in lines[line - 1]:
            held = lines[line - 1][:60] if 0 < line <= len(lines) else "nothing"
            problems.append(f"{what} {first[:60]!r} at {Path(source).name}:{line}, holds {held!r}")
    return problems


def repeat_problems(view: report_view.ReportView) -> list[str]:
    """Each evidence line is shown once."""
    seen: set[tuple[str, str]] = set()
    problems = []
    for g in view.evidence:
        key = (g.where, g.text.split("\n", 1)[0])
        if key in seen:
            problems.append(f"evidence {g.where} shown twice")
        seen.add(key)
    return problems


def hang_problems(d: Diagnosis, view: report_view.ReportView, facts: Facts) -> list[str]:
    """Claims "the others waited in OP #SEQ": py-spy shows them in OP, their flight recorder has OP
    at SEQ; "the other ranks were in OP #SEQ" holds for every other rank that left a dump."""
    if view.who is None or view.who.hang is None or d.hang is None:
        return []
    head = view.who.hang.headline
    said_stuck = [t.stuck for t in view.progress if t.stuck.startswith("stuck")]
    contradiction = [f"{head!r} beside the table's {t!r}" for t in said_stuck if "no hang" in head]
    m = re.search(r"(?:waited in|were in) (\w+) #(\d+)", head)
    if m is None:
        return contradiction
    op, seq = m[1], int(m[2])
    # "rank 2 behind" is said of a rank whose own record stops short of #SEQ: one that entered
    # #SEQ with another collective was not behind, it issued something else there
    if said := re.match(r"(ranks? [\d, -]+) behind", head):
        problems_behind = [
            f"{head!r}: rank {r} entered #{facts.fr_last[r][0]} ({facts.fr_last[r][1]})"
            for r in _ranks(said[1].split(" ", 1)[1])
            if r in facts.fr_last and facts.fr_last[r][0] >= seq
        ]
        contradiction += problems_behind
    behind = set(d.hang.lagging_ranks) | set(d.culprit_ranks)
    others = {r for r in facts.fr_ops | facts.pyspy_op if r not in behind}
    problems = contradiction
    for r in sorted(others):
        if r in facts.pyspy_op and facts.pyspy_op[r] != op:
            problems.append(f"{head!r}: py-spy shows rank {r} in {facts.pyspy_op[r]}")
        if r in facts.fr_ops and facts.fr_ops[r].get(seq) != op:
            problems.append(
                f"{head!r}: rank {r}'s flight recorder has {facts.fr_ops[r].get(seq)} at #{seq}"
            )
        if "were in" in head and r in facts.fr_last and facts.fr_last[r][0] != seq:
            problems.append(f"{head!r}: rank {r} had entered #{facts.fr_last[r][0]}")
    return problems


def setup_problems(d: Diagnosis, view: report_view.ReportView, facts: Facts) -> list[str]:
    """A rank py-spy shows in init_process_group or a rendezvous waited for setup: no
    sentence and no stack chip says it waited in a collective."""
    problems = []
    behind = set(d.culprit_ranks) | (set(d.hang.lagging_ranks) if d.hang else set())
    waiters = facts.pyspy_ranks - behind
    if waiters and waiters <= facts.pyspy_setup:
        said = [d.hang.explanation if d.hang else ""]
        said += [view.who.hang.headline] if view.who and view.who.hang else []
        said += [f.summary for f in d.findings]
        problems += [
            f"{s[:70]!r}: py-spy shows ranks {sorted(waiters)} in setup"
            for s in said
            if re.search(r"wait(?:ed)? in (?:a collective|\w+ #\d+)", s)
        ]
    for s in view.stacks:
        if "collective" in s.waits and _ranks(s.ranks) <= facts.pyspy_setup:
            problems.append(f"stacks of ranks {s.ranks} said {s.waits!r}; they are in setup")
    return problems


def behind_problems(d: Diagnosis, facts: Facts) -> list[str]:
    """Claims "rank(s) 1 stopped at collective #2 while rank(s) 2 went on to #4 (broadcast)": each
    rank's last flight-recorder record says so."""
    problems = []
    for f in d.findings:
        m = re.search(
            r"rank\(s\) ([\d,-]+) stopped at collective #(\d+) while rank\(s\) ([\d,-]+) "
            r"went on to #(\d+)(?: \((\w+)\))?",
            f.summary,
        )
        if m is None:
            continue
        for r in _ranks(m[1]):
            if r in facts.fr_last and facts.fr_last[r][0] != int(m[2]):
                problems.append(f"{f.summary[:70]!r}: rank {r} stopped at #{facts.fr_last[r][0]}")
        for r in _ranks(m[3]):
            if r in facts.fr_last and facts.fr_last[r][0] != int(m[4]):
                problems.append(f"{f.summary[:70]!r}: rank {r} went on to #{facts.fr_last[r][0]}")
            if r in facts.fr_last and m[5] and facts.fr_last[r][1] != m[5]:
                problems.append(f"{f.summary[:70]!r}: rank {r}'s last is {facts.fr_last[r][1]}")
    return problems


def skipped_problems(d: Diagnosis, facts: Facts) -> list[str]:
    """Claims "what rank(s) R did instead of collective #N": no rank of R entered #N in its
    own flight recorder."""
    problems = []
    for f in d.fix_patterns:
        for a in f.actions:
            m = re.search(r"ranks? ([\d, -]+?) did instead of collective #(\d+)", a)
            if m is None:
                continue
            for r in _ranks(m[1]):
                if int(m[2]) in facts.fr_ops.get(r, {}):
                    problems.append(f"{a[:70]!r}: rank {r} entered #{m[2]}")
    return problems


def fix_line_problems(d: Diagnosis, facts: Facts) -> list[str]:
    """An action that names `file.py:N` of the failure names the line that raised it."""
    if d.first_failure is None:
        return []
    exc = _PREFIX.sub("", d.first_failure.text.strip().split("\n")[-1], count=1).strip()
    raised = facts.raised.get(exc, set())
    problems = []
    for f in d.fix_patterns:
        for action in f.actions:
            for name, line in _FILE_LINE.findall(action):
                if raised and f"{Path(name).name}:{line}" not in raised:
                    problems.append(
                        f"{action[:60]!r} names {name}:{line}; {exc[:40]} at {sorted(raised)}"
                    )
    return problems


def silent_problems(d: Diagnosis, facts: Facts) -> list[str]:
    """'Rank N went silent' (check whether its process died) is never said of a rank that
    printed an error, nor of one a py-spy dump shows alive."""
    problems = []
    for f in d.fix_patterns:
        for action in f.actions:
            if m := re.search(r"Rank\(s\) ([\d, -]+) went silent", action):
                ranks = _ranks(m[1])
                alive = ranks & facts.pyspy_ranks
                if alive:
                    problems.append(f"{action[:50]!r}: py-spy shows {sorted(alive)} alive")
                if ranks & facts.printed_errors:
                    problems.append(
                        f"{action[:50]!r}: {sorted(ranks & facts.printed_errors)} printed errors"
                    )
    return problems


def native_stack_problems(view: report_view.ReportView, facts: Facts) -> list[str]:
    """No advice asks for a native stack (gdb, a core dump) to learn which library crashed
    where the bundle's own C++ exception already names the library and the place."""
    if not facts.native_named:
        return []
    steps = [a.text for f in view.fixes for a in f.actions] + [a.text for a in view.collect_next]
    return [
        f"asks {s[:60]!r} though a C++ exception names where it threw"
        for s in steps
        if re.search(r"native stack|gdb -p|core dump", s)
    ]


def asks_for_held_problems(d: Diagnosis, view: report_view.ReportView) -> list[str]:
    """No advice asks for a kind of input the bundle already holds."""
    kinds = {i.kind for i in d.inputs}
    asks = {
        SourceKind.PYSPY: re.compile(r"py-?spy dump|dump every rank with py-spy|triage snapshot"),
        SourceKind.FLIGHT_RECORDER: re.compile(
            r"enable the flight recorder|dump the flight recorder|triage snapshot"
        ),
    }
    problems = []
    steps = [a.text for f in view.fixes for a in f.actions] + [a.text for a in view.collect_next]
    for kind, rx in asks.items():
        if kind in kinds:
            problems += [
                f"asks {s[:70]!r} though the bundle has {kind.value}" for s in steps if rx.search(s)
            ]
    return problems


def printed_by_problems(d: Diagnosis, view: report_view.ReportView, facts: Facts) -> list[str]:
    """The first failure is quoted as rank N's only from a line rank N printed: a `[rankM]:`
    line is rank M's; a line of a shared log with no rank on it comes with a note saying so."""
    f = d.first_failure
    if f is None or f.rank is None or f.line is None or f.source not in facts.files:
        return []
    lines = facts.files[f.source]
    if not 0 < f.line <= len(lines):
        return []
    m = _PREFIX.match(lines[f.line - 1])
    assert m is not None
    if m["rank"] is not None and int(m["rank"]) != f.rank:
        return [f"first failure of rank {f.rank} quotes rank {m['rank']}'s line {f.line}"]
    note = view.who.first.note if view.who is not None and view.who.first is not None else ""
    said = re.search(r"quoted from rank (\d+)'s \w+, which reports it about", note)
    if said and m["rank"] is not None and int(m["rank"]) == f.rank:
        return [f"{note[:60]!r}: line {f.line} is rank {f.rank}'s own `[rank{f.rank}]:` line"]
    own_file = any(i.path == f.source and i.rank is not None for i in d.inputs)
    noted = view.who is not None and view.who.first is not None and view.who.first.note
    # torchrun's failure summary names the rank its entry is about (`rank : 1 (local_rank: 1)`)
    entry = "\n".join(lines[max(0, f.line - 6) : f.line])
    named = re.search(rf"^\s*rank\s*:\s*{f.rank}\b", entry, re.M) is not None
    if m["rank"] is None and m["local"] is None and not (own_file or noted or named):
        return [f"first failure of rank {f.rank} quotes a line no rank printed, without a note"]
    return []


# a log line that reports how things went (`INFO step 23 local_loss nan`), not an error
_LOG_LEVEL_INFO = re.compile(r"\b(?:INFO|DEBUG)\b")


def failure_quote_problems(d: Diagnosis, facts: Facts) -> list[str]:
    """The first failure of a rank that printed an error of its own quotes that error, not an
    INFO line that came before it (a loss logged as `nan` is the failure's first sign)."""
    f = d.first_failure
    if f is None or f.rank is None or not f.own_error or f.rank not in facts.printed_errors:
        return []
    first = _PREFIX.sub("", f.text.strip().split("\n", 1)[0], count=1)
    if _LOG_LEVEL_INFO.search(first) and not _ERROR_WORDS.search(first):
        return [f"first failure of rank {f.rank} quotes {first[:60]!r}, not the error it raised"]
    return []


def record_problems(view: report_view.ReportView) -> list[str]:
    """An action names a collective by its name, never by a dumped record (`{'op': ...}`),
    and neither the job's line nor the hang's collective quotes a Python list
    (`[[6]] ['Double']`)."""
    out = [
        f"action shows a raw record: {a.text[:70]!r}"
        for f in view.fixes
        for a in f.actions
        if re.search(r"\{'\w+': ", a.text)
    ]
    if view.outcome is not None and re.search(r"\[\[|\['", view.outcome.why):
        out.append(f"the job's line quotes a list: {view.outcome.why[:80]!r}")
    hang = view.who.hang if view.who is not None else None
    if hang is not None and re.search(r"\[", hang.collective):
        out.append(f"the hang's collective quotes a list: {hang.collective[:80]!r}")
    return out


def host_problems(d: Diagnosis, facts: Facts) -> list[str]:
    """A host the report names is one the logs name, when the logs name any."""
    named = {d.first_failure.host} if d.first_failure and d.first_failure.host else set()
    if not facts.log_hosts:
        return []
    return [f"host {h!r}; the logs say {sorted(facts.log_hosts)}" for h in named - facts.log_hosts]


def time_problems(d: Diagnosis, view: report_view.ReportView, facts: Facts) -> list[str]:
    """The timeline dates a quoted line only with a stamp that line carries; a line without
    one is shown between stamps its file prints before and after it, never later than the
    exits it caused; the picture's start is the table's +0."""
    problems = []
    for t in d.timeline:
        lines = facts.files.get(t.source)
        if t.role == "context" or t.line is None or lines is None or not 0 < t.line <= len(lines):
            continue
        where = f"{Path(t.source).name}:{t.line}"
        if t.time is not None and not _STAMP.search(lines[t.line - 1]):
            problems.append(f"timeline dates {where} though that line has no time")
        before = any(_STAMP.search(x) for x in lines[: t.line - 1])
        if t.time is None and t.earliest is not None and not before:
            problems.append(f"timeline: {where} 'after' a stamp its file does not print before")
        after = any(_STAMP.search(x) for x in lines[t.line :])
        if t.time is None and t.latest is not None and not after:
            problems.append(f"timeline: {where} 'before' a stamp its file does not print after")
    for t in d.timeline:
        m = _EXITED.match(t.text)
        if m is None or t.time is None:
            continue
        for r in _ranks(m[1]):
            said = datetime.fromtimestamp(t.time, tz=timezone.utc).strftime("%H:%M:%S")
            if r in facts.exit_times and facts.exit_times[r] != said:
                problems.append(
                    f"timeline: rank {r} exited at {said}; torchrun says {facts.exit_times[r]}"
                )
    # consequences without a stamp from one file, bounded by the same next stamp, keep the
    # file's order (a cause may be put first: its raise came before its own handler's lines)
    last_line: dict[tuple[str, float], int] = {}
    for t in d.timeline:
        if t.role == "cascade" and t.time is None and t.latest is not None and t.line:
            key = (t.source, t.latest)
            if key in last_line and t.line < last_line[key]:
                problems.append(
                    f"timeline: {Path(t.source).name}:{t.line} shown after line {last_line[key]}"
                )
            last_line[key] = max(t.line, last_line.get(key, 0))
    # the first failure is dated no finer than the line it quotes (`exitcode : -9` of torchrun's
    # summary, whose `time` is to the second; a log line stamped `10:20:43`)
    f = d.first_failure
    shown = view.who.first.time if view.who is not None and view.who.first is not None else ""
    lines = facts.files.get(f.source) if f is not None else None
    if f is not None and f.line and lines and 0 < f.line <= len(lines) and shown:
        entry = "\n".join(lines[max(0, f.line - 6) : f.line])
        stamps = re.findall(r"(?<!\d)\d\d:\d\d:\d\d(?:[.,]\d+)?", entry)
        if stamps and not re.search(r"[.,]\d", stamps[-1]) and re.search(r":\d\d\.\d", shown):
            problems.append(f"first failure dated {shown!r}; its line says {stamps[-1]!r}")
    rows = view.timeline.rows
    exits = [i for i, r in enumerate(rows) if " exited " in r.text]
    for i, r in enumerate(rows):
        if r.role == "initiating" and exits and i > min(exits):
            problems.append(f"timeline: the initiating row {r.where} comes after an exit")
    if view.lanes is not None:
        # a stamp to the second shows whole seconds: `+0s` at `08:13:16 UTC`
        zero = [r.iso for r in rows if r.offset in ("+0.000s", "-0.000s", "+0s", "-0s")]
        if not any(view.lanes.start.startswith(z.removesuffix(" UTC")) for z in zero):
            problems.append(
                f"timeline: the picture starts at {view.lanes.start}, the table at {zero}"
            )
    return problems


def first_failure_problems(d: Diagnosis, view: report_view.ReportView, facts: Facts) -> list[str]:
    """ "First failure on rank N" quotes a failure, not rank N's flight-recorder record; "rank R
    failed first: `X`" names the rank whose error line comes first in the file that prints X,
    and is never said of a hang, whose waiters' first errors are their timeouts."""
    problems = []
    why = d.outcome.why if d.outcome is not None else ""
    f = d.first_failure
    called = re.search(r"first failure on rank", why, re.I)
    if f is not None and f.source in facts.fr_files and called:
        problems.append(f"{why[:60]!r}: rank {f.rank}'s dump record is called a failure")
    note = view.who.first.note if view.who is not None and view.who.first is not None else ""
    if d.hang is not None and d.hang.detected and "failed first" in why + note:
        problems.append(f"a hang's waiter is said to have failed first: {(why + note)[:80]!r}")
    if m := re.search(r"rank (\d+) failed first: `([^`]+?)(?:…)?`", why):
        said, quote = int(m[1]), m[2]
        for path, lines in facts.files.items():
            if path in facts.first_error and any(quote in x for x in lines):
                line, rank = facts.first_error[path]
                if rank != said:
                    problems.append(
                        f"{why[:60]!r}: {Path(path).name}:{line} shows rank {rank}'s error first"
                    )
    return problems


def failed_problems(d: Diagnosis, facts: Facts) -> list[str]:
    """ "When rank(s) N failed" names ranks the launcher saw fail (an exit that is not its own
    SIGTERM), where it saw any: not the odd one out that was stopped after another aborted."""
    failed = {r for r, code in facts.exit_codes.items() if code not in (0, -15)}
    problems = []
    for f in d.findings:
        m = re.search(r"rank\(s\) ([\d, -]+) failed\b", f.summary)
        if m and failed and not _ranks(m[1]) <= failed:
            problems.append(f"{f.summary[:60]!r}: the launcher saw ranks {sorted(failed)} fail")
    return problems


def branch_problems(d: Diagnosis, facts: Facts) -> list[str]:
    """ "The code of rank N branches around communication" is said only where the flight
    recorder shows rank N issuing another collective than the others at the same step."""
    problems = []
    for f in d.fix_patterns:
        for action in f.actions:
            m = re.search(r"code of ranks? ([\d, -]+) branches around", action)
            if m is None:
                continue
            for r in _ranks(m[1]):
                mine = facts.fr_ops.get(r, {})
                theirs = [ops for other, ops in facts.fr_ops.items() if other != r]
                if not any(
                    ops.get(seq) not in (None, op) for seq, op in mine.items() for ops in theirs
                ):
                    problems.append(f"{action[:60]!r}: rank {r} issued what the others did")
    return problems


# advice that states a rank ran out of data (less work, the loop left early) as a fact
_UNEVEN_SAID = re.compile(
    r"(?<![Ii]f )\b(?:one rank ran an extra or missing step|rank \d+ ran out of step)"
)


def uneven_problems(d: Diagnosis, facts: Facts) -> list[str]:
    """Advice never states that a rank ran out of data where the bundle shows another reason
    it stopped: an exception of its own, or py-spy finding it busy outside any collective."""
    busy = facts.pyspy_ranks - set(facts.pyspy_op)
    if not (facts.raised or busy):
        return []
    return [
        f"{action[:70]!r} though the bundle shows an error raised or a rank busy elsewhere"
        for f in d.fix_patterns
        for action in f.actions
        if _UNEVEN_SAID.search(action)
    ]


# the rendezvous store timing out while the ranks join: `DistStoreError: wait timeout after
# 25000ms`, `Timed out after 21 seconds waiting for clients`
_STORE_WAIT = re.compile(r"DistStoreError|TCPStore|waiting for clients")


def store_wait_problems(d: Diagnosis) -> list[str]:
    """A wait in the rendezvous store during setup is not called a collective timeout: not in
    the timeline's folded rows, not in the cascade's count."""
    problems = [
        f"timeline: {t.text[:70]!r} is called a collective timeout"
        for t in d.timeline
        if "collective timeout" in t.text and _STORE_WAIT.search(t.text)
    ]
    for f in d.findings:
        if "collective timeout" in f.summary and any(
            _STORE_WAIT.search(e.text) for e in f.evidence
        ):
            problems += [f"{f.summary[:70]!r}: its evidence is the store's wait"]
    return problems


_ASKS_FOR_COLLECTIVES = re.compile(r"flight.recorder (?:has|records?|shows?) the collectives", re.I)


def setup_advice_problems(d: Diagnosis, view: report_view.ReportView, facts: Facts) -> list[str]:
    """Where every py-spy stack waits in process-group setup or a rendezvous and no rank left a
    flight-recorder dump, no rank started a collective: no advice asks to record them."""
    if not facts.pyspy_ranks or not facts.pyspy_ranks <= facts.pyspy_setup or facts.fr_files:
        return []
    said = [a for f in d.fix_patterns for a in f.actions] + report_view.collect_next(d)
    return [f"{s[:70]!r}: no rank got past setup" for s in said if _ASKS_FOR_COLLECTIVES.search(s)]


# causes that need collectives to have run: ranks disagreeing on them (R08), uneven work
# between them (R09), a collective timeout shorter than the work between them (R11)
_COLLECTIVE_CAUSES = {"R08", "R09", "R11"}
_COLLECTIVE_HANG = "S17"


def setup_label_problems(view: report_view.ReportView, facts: Facts) -> list[str]:
    """Where every py-spy stack waits in process-group setup or a rendezvous and no rank left a
    flight-recorder dump, nothing ran: the report offers no cause about collectives, and does
    not call the wait a collective hang."""
    if not facts.pyspy_ranks or not facts.pyspy_ranks <= facts.pyspy_setup or facts.fr_files:
        return []
    problems = [
        f"root cause {x.id} ({x.pct}) offered though no rank got past setup"
        for x in view.root_causes
        if x.id in _COLLECTIVE_CAUSES
    ]
    problems += [
        f"symptom {x.id} ({x.pct}) though no rank got past setup"
        for x in view.symptoms
        if x.id == _COLLECTIVE_HANG
    ]
    return problems


def no_hang_label_problems(view: report_view.ReportView) -> list[str]:
    """Next to a hang line that says "no hang", the collective-hang symptom is never shown as
    high as the leading symptom: the report would call the job hung and not hung at once."""
    head = view.who.hang.headline if view.who and view.who.hang else ""
    if not head.startswith("no hang") or not view.symptoms:
        return []
    top = view.symptoms[0].share
    return [
        f"symptom {x.id} at {x.pct} (the leading one {view.symptoms[0].pct}) beside {head[:40]!r}"
        for x in view.symptoms
        if x.id == _COLLECTIVE_HANG and x.share >= top
    ]


def _shown(score: float) -> int:
    """A score as the reports print it: a whole percentage, never 100 (no certainty)."""
    return round(max(0.0, min(0.99, score)) * 100)


def no_hang_wait_problems(d: Diagnosis) -> list[str]:
    """Advice in a job whose ranks got an error at once (no hang) never speaks of a moment
    while the others waited: there was none to take a stack in."""
    if d.hang is None or d.hang.detected:
        return []
    return [
        f"{a[:70]!r} though no rank waited"
        for f in d.fix_patterns
        for a in f.actions
        if re.search(r"while the others wait", a)
    ]


# a sentence that says ranks waited (for a rank, in a collective, until a timeout); one that
# starts "If" only supposes it
_SAYS_WAITED = re.compile(
    r"\b(?:the others?|other ranks|ranks? [\d, -]+|they) (?:wait|waits|waited|were waiting)"
    r"(?: \w+)? (?:in|inside|for|until)\b|\bwhile the others wait\b",
    re.I,
)
_SENTENCE_END = re.compile(r"(?<=[.;])\s+")


def _no_hang_said(d: Diagnosis, view: report_view.ReportView) -> list[str]:
    """What triage itself says in a report: its verdicts, findings, actions and why-lines."""
    said = [d.summary, d.hang.explanation if d.hang else ""]
    said += [d.outcome.why] if d.outcome is not None else []
    said += [f.summary for f in d.findings]
    said += [a for f in d.fix_patterns for a in f.actions]
    said += [f.why for f in view.fixes]
    return [x for x in said if x]


def no_hang_symptom_problems(d: Diagnosis, view: report_view.ReportView) -> list[str]:
    """A job whose hang verdict is "no hang" (the others got an error at once) is not called a
    collective hang anywhere: no S17 in the card, `--brief`, Markdown or HTML; and nothing
    triage says of it claims that ranks waited (for the failed rank, in a collective)."""
    if d.hang is None or d.hang.detected:
        return []
    hang_name = next((x.name for x in d.symptoms if x.id == _COLLECTIVE_HANG), None)
    problems = [
        f"card: symptom {x.id} ({x.pct}) beside {d.hang.explanation[:40]!r}"
        for x in view.symptoms
        if x.id == _COLLECTIVE_HANG
    ]
    outputs = {
        "brief": render(d, "text", brief=True),
        "brief md": render(d, "md", brief=True),
        "md": render(d, "md"),
        "html": html.unescape(render(d, "html")),
    }
    for fmt, out in outputs.items():
        if re.search(rf"\b{_COLLECTIVE_HANG}\b", out) or (hang_name and hang_name in out):
            problems.append(f"{fmt}: shows the collective-hang symptom beside 'no hang'")
    for text in _no_hang_said(d, view):
        for sentence in _SENTENCE_END.split(text):
            if not sentence.lstrip().startswith("If ") and _SAYS_WAITED.search(sentence):
                problems.append(f"{sentence[:70]!r} though no rank waited")
    return problems


def _ops_differ(facts: Facts) -> bool:
    """At some sequence number two ranks' flight recorders hold different collectives."""
    seqs = {seq for ops in facts.fr_ops.values() for seq in ops}
    return any(len({ops[seq] for ops in facts.fr_ops.values() if seq in ops}) > 1 for seq in seqs)


def contradicted_cause_problems(
    d: Diagnosis, view: report_view.ReportView, facts: Facts
) -> list[str]:
    """No root cause is offered that the bundle's own files contradict:

    * a collective timeout shorter than the work (R11), where a rank issued another collective
      than the others at the same sequence number (it never issues theirs, however long they
      wait), or where the rank the others waited for had raised an error of its own;
    * collectives mismatched across ranks (R08), where every rank's records agree and py-spy
      shows the rank behind in its own code, outside any collective (slow, not different);
    * a launcher or cluster misconfiguration (R06), where every rank's flight recorder holds
      collectives past the first two: the job was brought up and ran them together."""
    offered = {x.id: x.pct for x in view.root_causes}
    problems = []
    raised = set(d.culprit_ranks) & facts.printed_errors and bool(facts.raised)
    if "R11" in offered and (_ops_differ(facts) or (d.hang is not None and raised)):
        why = "ranks issued different collectives" if _ops_differ(facts) else "it had raised"
        problems.append(f"root cause R11 ({offered['R11']}) though {why}")
    busy = facts.pyspy_ranks - set(facts.pyspy_op)
    if "R08" in offered and facts.fr_ops and not _ops_differ(facts) and busy:
        problems.append(
            f"root cause R08 ({offered['R08']}) though every record agrees and py-spy shows "
            f"ranks {sorted(busy)} outside any collective"
        )
    ran = [seq for seq, _ in facts.fr_last.values()]
    if "R06" in offered and ran and min(ran) > 2:
        problems.append(f"root cause R06 ({offered['R06']}) though every rank ran collectives")
    return problems


def _seconds_of_day(clock: str) -> float:
    h, m, s = clock.split(":")
    return int(h) * 3600 + int(m) * 60 + float(s)


def offset_problems(view: report_view.ReportView) -> list[str]:
    """A row's offset is its clock minus the picture's start, to the millisecond both show:
    `10:06:26.774` from `10:06:26` is `+0.774s`, not `+0.775s`."""
    if view.lanes is None:
        return []
    start = re.search(r"(\d\d:\d\d:\d\d(?:\.\d+)?) UTC$", view.lanes.start)
    if start is None:
        return []
    problems = []
    for r in view.timeline.rows:
        said = re.fullmatch(r"([+-]\d+\.\d{3})s", r.offset)
        if said is None or not re.fullmatch(r"\d\d:\d\d:\d\d\.\d{3}", r.clock):
            continue
        shown = round((_seconds_of_day(r.clock) - _seconds_of_day(start[1])) * 1000)
        if shown != round(float(said[1]) * 1000):
            problems.append(f"timeline: {r.clock} is {r.offset} from {start[1]}")
    return problems


def timeline_rank_problems(view: report_view.ReportView) -> list[str]:
    """A timeline row's rank column names one rank only where its entry is about that rank
    alone: "rank(s) 2-3 never started" is not rank 2's row. (A folded row's `[x4 on ranks
    0, 2]` counts the others that printed the line its rank printed.)"""
    problems = []
    for r in view.timeline.rows:
        if not r.rank.isdigit():
            continue
        said = re.search(r"\branks?(?:\(s\))? (\d+(?:(?:, |-)\d+)*)", _REPEATS.sub("", r.text))
        if said and _ranks(said[1]) - {int(r.rank)}:
            problems.append(f"timeline: rank {r.rank}'s row says {said[0]!r}")
    return problems


def offset_precision_problems(view: report_view.ReportView) -> list[str]:
    """An offset is the row's clock minus the picture's start, to the precision it prints: a
    row stamped `10:11:50` from a start at `10:11:49.670` is `+0.3s`, not `+0s`. The start
    is the picture's, or (no picture) the finest clock of a row at +0."""
    rows = view.timeline.rows
    zero = [r.clock for r in rows if re.fullmatch(r"[+-]0(?:\.0+)?s", r.offset)]
    said_start = view.lanes.start if view.lanes is not None else max(zero, key=len, default="")
    start = re.search(r"(\d\d:\d\d:\d\d(?:\.\d+)?)(?: UTC)?$", said_start)
    if start is None:
        return []
    problems = []
    for r in rows:
        said = re.fullmatch(r"([+-]\d+(?:\.(\d+))?)s", r.offset)
        if said is None or not re.fullmatch(r"\d\d:\d\d:\d\d(?:\.\d{3})?", r.clock):
            continue
        shown = round((_seconds_of_day(r.clock) - _seconds_of_day(start[1])) * 1000)
        decimals = len(said[2] or "")
        if shown % 1000 and not decimals:
            problems.append(f"timeline: {r.clock} is {r.offset} from {start[1]} (whole seconds)")
        elif abs(float(said[1]) * 1000 - shown) > 500 * 10**-decimals:
            problems.append(f"timeline: {r.clock} is {r.offset} from {start[1]}")
    return problems


# the timeline's folded row: `... [x4 on ranks 0-1; dump signal]`
_FOLD = re.compile(r"^(?P<head>.*?)\s+\[x(?P<n>\d+) on ranks? (?P<ranks>[\d, -]+); [^\]]+\]$", re.S)


def _masked(text: str) -> str:
    return re.sub(r"\d+", "#", text.strip())


def fold_count_problems(bundle: Path, d: Diagnosis, facts: Facts) -> list[str]:
    """A folded timeline row's `[xN on ranks R]` counts what ranks R printed, each rank's line
    once: the same line in the console (`[default1]:`), the rank's own log and its error.json
    is one print, not three."""
    console_first = {}
    offset = 0
    evidence = make.evidence_dir(bundle)
    for node in make.SCENARIOS[bundle.name].nodes:
        console_first[str(evidence / node.console)] = offset
        offset += node.nproc
    rank_of_file = {i.path: i.rank for i in d.inputs}
    problems = []
    for t in d.timeline:
        m = _FOLD.match(t.text)
        if m is None:
            continue
        head = _masked(m["head"].removesuffix("…"))
        named = _ranks(m["ranks"])
        printed = set()
        for path, lines in facts.files.items():
            for raw in lines:
                p = _PREFIX.match(raw)
                assert p is not None
                text = raw[p.end() :].strip()
                if not _masked(text).startswith(head):
                    continue
                rank = rank_of_file.get(path)
                if p["rank"] is not None:
                    rank = int(p["rank"])
                elif p["local"] is not None and path in console_first:
                    rank = console_first[path] + int(p["local"])
                if rank in named:
                    printed.add((rank, text))
        if printed and int(m["n"]) != len(printed):
            problems.append(
                f"timeline: {m['head'][:50]!r} x{m['n']} on ranks {m['ranks']}; "
                f"the ranks printed it {len(printed)} times"
            )
    return problems


def survivor_problems(d: Diagnosis) -> list[str]:
    """A rank the report says started the failure is never called a survivor: the launcher's
    SIGTERM stops the rank whose stall or own error began it as well as the others."""
    said = [(f.summary, set(f.ranks)) for f in d.findings if f.kind.value == "rank_exit"]
    said += [(t.text, _ranks(m[1])) for t in d.timeline if (m := _EXITED.match(t.text))]
    return [
        f"{text[:60]!r}: rank(s) {sorted(ranks & set(d.culprit_ranks))} started it"
        for text, ranks in said
        if "survivor" in text and ranks & set(d.culprit_ranks)
    ]


def got_an_error_problems(d: Diagnosis, facts: Facts) -> list[str]:
    """'The other ranks got an error' is said only where every other rank printed one: a rank
    the launcher stopped before it printed anything stopped, it got no error."""
    if d.hang is None or not re.search(r"other ranks\b.*\bgot an error", d.hang.explanation):
        return []
    ranks = set(facts.exit_codes) | set(facts.fr_last) | facts.printed_errors
    quiet = ranks - set(d.culprit_ranks) - facts.printed_errors
    return (
        [f"{d.hang.explanation[:60]!r}: rank(s) {sorted(quiet)} printed no error"] if quiet else []
    )


def record_quote_problems(view: report_view.ReportView, facts: Facts) -> list[str]:
    """Evidence shown under a flight-recorder or py-spy dump's name without a line is a record
    triage decoded and worded, and says so: the dump holds no such sentence."""
    dumps = {Path(p).name for p in facts.fr_files | facts.pyspy_files}
    return [
        f"{g.where!r} shows {g.text[:40]!r} as if the dump held it"
        for g in view.evidence
        if ":" not in g.where.split(" (", 1)[0]
        and Path(g.where.split(" (", 1)[0]).name in dumps
        and "record" not in g.where
    ]


def self_consequence_problems(d: Diagnosis) -> list[str]:
    """The error the report calls the first failure is not counted among "consequences of the
    first failure": a lone watchdog line would be its own cause."""
    f = d.first_failure
    if f is None or f.line is None:
        return []
    itself = any(
        t.role == "cascade" and (t.source, t.line) == (f.source, f.line) for t in d.timeline
    )
    return [
        f"{c.summary[:60]!r} though the first failure ({Path(f.source).name}:{f.line}) is one"
        for c in d.findings
        if c.kind.value == "cascade" and "consequences of the first failure" in c.summary and itself
    ]


def after_bound_problems(d: Diagnosis) -> list[str]:
    """A stamped row is not listed below a consequence without a stamp whose "after" bound is
    later than that stamp: the list would put an instant after a line that came later than it.
    (A cause is listed before its consequences, whatever its buffered output's bounds say.)"""
    problems = []
    for i, t in enumerate(d.timeline):
        if t.time is not None or t.earliest is None or t.role == "initiating":
            continue
        for later in d.timeline[i + 1 :]:
            if later.time is not None and later.time + later.resolution <= t.earliest:
                problems.append(
                    f"timeline: {later.text[:40]!r} (stamped) below {t.text[:40]!r} (after it)"
                )
    return problems


def lane_mark_problems(view: report_view.ReportView) -> list[str]:
    """A rank's exit is drawn as an exit (or a launcher's stop) only: not also as a context
    event at the same place, which shows through the stop's hollow square and draws one
    rank's stop unlike the others'."""
    if view.lanes is None:
        return []
    return [
        f"picture: {lane.label}'s exit at {m.x:.3f} also drawn as a context event"
        for lane in view.lanes.lanes
        for m in lane.marks
        if m.kind in ("exit", "stopped")
        and any(o.kind == "context" and abs(o.x - m.x) < 1e-9 for o in lane.marks)
    ]


def first_of_several_problems(view: report_view.ReportView) -> list[str]:
    """ "ranks 2-3 (first: rank 2, ...)" names a rank that went first only where the line
    quoted is that rank's own: a launcher's line about ranks that never started says no one
    of them was first."""
    if view.who is None or view.who.first is None or not view.who.first.note:
        return []
    line = view.who.culprit_line()
    problems = [f"{line!r} though {view.who.first.note[:60]!r}"] if "(first: rank" in line else []
    # the block that quotes the line names them all too, not the lowest of them
    several = any(ch in view.who.culprits for ch in ",-")
    if several and "by no rank" in view.who.first.note and view.who.first.label.startswith("rank "):
        problems.append(
            f"{view.who.first.label!r} heads a line by no rank about ranks {view.who.culprits}"
        )
    return problems


def evidence_copy_problems(view: report_view.ReportView) -> list[str]:
    """One rank's error is one evidence entry, however many files show it (a --tee console and
    the rank's own log): two entries of the same ranks quoting the same line are a repeat."""
    seen: dict[tuple[tuple[int, ...], str], str] = {}
    problems = []
    for g in view.evidence:
        key = (g.ranks, g.text.split("\n", 1)[0])
        if g.ranks and key in seen:
            problems.append(f"evidence {g.where} repeats {seen[key]} ({g.who})")
        seen.setdefault(key, g.where)
    return problems


def plural_problems(d: Diagnosis) -> list[str]:
    """A count of one takes the singular: "(1 event)", "1 more evidence line"."""
    out = render(d, "md") + render(d, "text") + html.unescape(render(d, "html"))
    return [f"{m[0]!r}" for m in re.finditer(r"\b1 (?:more evidence lines|events)\b", out)]


def tie_problems(d: Diagnosis, view: report_view.ReportView) -> list[str]:
    """Two things listed one above the other at the same percentage are said to be tied, in
    every format: the order alone would rank them where the numbers do not."""
    shown_fixes = {f.id for f in view.fixes}
    lists = [d.symptoms[:3], d.root_causes[:3], [f for f in d.fix_patterns if f.id in shown_fixes]]
    ties = [
        f"{b.id} at {_shown(b.score)}% under {a.id}"
        for items in lists
        for a, b in zip(items, items[1:], strict=False)
        if _shown(a.score) == _shown(b.score)
    ]
    problems = []
    for fmt in ("md", "text", "html"):
        said = len(re.findall(r"\btied\b", render(d, fmt)))
        if said < len(ties):
            problems.append(f"{fmt}: {ties} shown without saying they are tied")
    return problems


def order_problems(d: Diagnosis) -> list[str]:
    """A row without a stamp is not listed above an error stamped inside its own bounds: it
    would read as earlier than a time its "before" bound says it may follow."""
    problems = []
    for i, t in enumerate(d.timeline):
        if t.time is not None or t.earliest is None or t.latest is None:
            continue
        for later in d.timeline[i + 1 :]:
            inside = later.time is not None and t.earliest < later.time < t.latest
            if inside and later.role in ("initiating", "cascade"):
                problems.append(f"timeline: {t.text[:40]!r} above {later.text[:40]!r}")
    return problems


def fraction_problems(view: report_view.ReportView, facts: Facts) -> list[str]:
    """A time the timeline shows is no finer than the stamp it comes from: `10:20:43.000` (a
    fraction no clock gives but a stamp to the second) only where some line prints it so."""
    printed = "\n".join(x for lines in facts.files.values() for x in lines)
    problems = []
    times = [(r.where, {r.clock, r.iso, r.offset}) for r in view.timeline.rows]
    times += [("the picture's start", {view.lanes.start})] if view.lanes is not None else []
    for where, said in times:
        for shown in said:
            for m in re.finditer(r"(\d\d:\d\d:\d\d)\.(000)", shown):
                finer = re.search(re.escape(m[1]) + r"[.,]" + m[2], printed)
                if finer is None and re.search(re.escape(m[1]) + r"(?![.,]\d)", printed):
                    problems.append(f"timeline shows {m[0]} for {where}; stamps say {m[1]}")
    return problems


def unnamed_rank_problems(d: Diagnosis) -> list[str]:
    """Advice that speaks of "this rank" names it: a report is about many ranks at once."""
    return [
        f"{action[:60]!r} names no rank"
        for f in d.fix_patterns
        for action in f.actions
        if re.search(r"\bThis rank\b", action)
    ]


def _ranks(text: str) -> set[int]:
    out: set[int] = set()
    for part in text.replace(", ", ",").split(","):
        lo, _, hi = part.strip().partition("-")
        if lo.isdigit():
            out.update(range(int(lo), int(hi or lo) + 1))
    return out


def rendered_problems(d: Diagnosis, view: report_view.ReportView) -> list[str]:
    """What the Markdown, text and HTML reports print is what the view decided: the hang line
    as it was checked, and no raw record anywhere."""
    problems = []
    for fmt in ("md", "text", "html"):
        out = html.unescape(render(d, fmt)) if fmt == "html" else render(d, fmt)
        # Markdown escapes `_` and breaks `#26` with a zero-width space (no issue link)
        plain = re.sub(r"\\([_*`#\[\]()])", r"\1", out).replace("\u200b", "")
        flat = " ".join(plain.replace("│", " ").split())
        head = view.who.hang.headline if view.who and view.who.hang else ""
        if head and " ".join(head.split()) not in flat:
            problems.append(f"{fmt}: the hang line {head[:50]!r} is missing")
        if re.search(r"\{'\w+': ", out):
            problems.append(f"{fmt}: a raw record is printed")
        # the noun agrees with the count: "ranks 0, 1" and "ranks 0-1", never "rank 0, 1"
        if m := re.search(r"\brank \d+(?:-\d+)?(?:, \d+)+|\brank \d+-\d+", flat):
            problems.append(f"{fmt}: {m[0]!r} names several ranks as one")
        # the picture's width is said as a person says a length of time: `over 6 s`, not
        # `over 6.000s`
        span = re.search(r"\bover (\S+?) ?(s|min|h)\b", flat) if fmt == "html" else None
        if span and not re.fullmatch(r"\d+(?:\.\d)?", span[1]):
            problems.append(f"html: the picture spans {span[0]!r}")
        # a set of ranks that is empty is not a rank: "rank(s) none", "ranks -"
        if re.search(r"\branks?(?:\(s\))? (?:none|-)(?![\w-])", flat):
            problems.append(f"{fmt}: an empty set of ranks is named as ranks")
    return problems


def claim_problems(bundle: Path) -> list[str]:
    d = diagnosis_of(bundle)
    facts = facts_of(bundle)
    view = report_view.build(d)
    return (
        quote_problems(d, facts)
        + repeat_problems(view)
        + hang_problems(d, view, facts)
        + setup_problems(d, view, facts)
        + behind_problems(d, facts)
        + skipped_problems(d, facts)
        + fix_line_problems(d, facts)
        + silent_problems(d, facts)
        + asks_for_held_problems(d, view)
        + native_stack_problems(view, facts)
        + printed_by_problems(d, view, facts)
        + failure_quote_problems(d, facts)
        + record_problems(view)
        + host_problems(d, facts)
        + rendered_problems(d, view)
        + time_problems(d, view, facts)
        + failed_problems(d, facts)
        + first_failure_problems(d, view, facts)
        + branch_problems(d, facts)
        + uneven_problems(d, facts)
        + store_wait_problems(d)
        + setup_advice_problems(d, view, facts)
        + setup_label_problems(view, facts)
        + no_hang_label_problems(view)
        + tie_problems(d, view)
        + no_hang_wait_problems(d)
        + no_hang_symptom_problems(d, view)
        + contradicted_cause_problems(d, view, facts)
        + offset_problems(view)
        + order_problems(d)
        + fraction_problems(view, facts)
        + unnamed_rank_problems(d)
        + timeline_rank_problems(view)
        + offset_precision_problems(view)
        + fold_count_problems(bundle, d, facts)
        + survivor_problems(d)
        + record_quote_problems(view, facts)
        + got_an_error_problems(d, facts)
        + self_consequence_problems(d)
        + after_bound_problems(d)
        + lane_mark_problems(view)
        + first_of_several_problems(view)
        + evidence_copy_problems(view)
        + plural_problems(d)
    )


# one rank's line in a job's log, pasted: NCCL's socket closed by its peer, py-spy's wait
_PEER_CLOSED = (
    "[rank3]: node01:3063025:3066048 [0] misc/socket.cc:49 NCCL WARN socketProgress: "
    "Connection closed by remote peer node02<51159>"
)
_WAITING = (
    'Thread 7712 (idle): "MainThread"\n    all_reduce (torch/distributed/distributed_c10d.py:3252)'
)


@pytest.mark.parametrize(
    ("pasted", "said"),
    [
        (_PEER_CLOSED, "Rank 3 only saw its peer node02<51159> go away"),
        (_PEER_CLOSED.removeprefix("[rank3]: "), "The rank that logged this only saw its peer"),
        (_WAITING, "A rank waiting in `all_reduce` only waits"),
    ],
)
def test_advice_about_the_rank_that_logged_a_line_names_it(pasted: str, said: str) -> None:
    d = explain(pasted, Options(use_embeddings=False, workers=1))
    actions = [a for f in d.fix_patterns for a in f.actions]
    assert any(a.startswith(said) for a in actions), actions
    assert not [a for a in actions if re.search(r"\bThis rank\b", a)]


def test_a_lone_watchdog_line_is_not_a_consequence_of_itself() -> None:
    # the bot's example issue: one rank's watchdog timeout, nothing else (tests/bot_samples.py)
    pasted = (
        "[rank3]:[E ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective operation "
        "timeout: WorkNCCL(SeqNum=1204, OpType=ALLREDUCE, NumelIn=1024, NumelOut=1024, "
        "Timeout(ms)=600000) ran for 600043 milliseconds before timing out."
    )
    d = explain(pasted, Options(use_embeddings=False, workers=1))
    assert d.first_failure is not None and "Watchdog caught" in d.first_failure.text
    assert self_consequence_problems(d) == []
    cascade = [f.summary for f in d.findings if f.kind.value == "cascade"]
    assert cascade and "consequences of a failure these logs do not show" in cascade[0]


@pytest.mark.parametrize("bundle", BUNDLES, ids=[b.name for b in BUNDLES])
def test_every_claim_of_the_report_is_what_the_bundle_shows(bundle: Path) -> None:
    assert claim_problems(bundle) == []


def test_an_action_never_asks_for_inputs_the_job_already_holds() -> None:
    problems: list[tuple[str, str]] = []
    action = parse_action(
        [
            {
                "text": "Take py-spy dumps and flight-recorder dumps.",
                "when": {"missing": [PYSPY, FR]},
            },
            {"text": "Dump the flight recorder too.", "when": {"missing": FR}},
        ],
        "test",
        lambda item, msg: problems.append((item, msg)),
    )
    assert action is not None and problems == []
    assert (
        action.fill({}, JobConditions(input_kinds=frozenset({"rank_log"})))
        == "Take py-spy dumps and flight-recorder dumps."
    )
    assert (
        action.fill({}, JobConditions(input_kinds=frozenset({"rank_log", PYSPY})))
        == "Dump the flight recorder too."
    )
    assert (
        action.fill({}, JobConditions(input_kinds=frozenset({PYSPY, FR}))) is None
    )  # a snapshot: nothing to ask
    # a kind that is no input kind is a mistake of the rule, reported when it is read
    assert (
        parse_action(
            {"text": "x", "when": {"missing": "stacks"}},
            "bad",
            lambda i, m: problems.append((i, m)),
        )
        is None
    )
    assert problems and problems[0][0] == "bad"


def test_a_native_stack_is_not_asked_for_where_the_crash_names_its_library() -> None:
    problems: list[tuple[str, str]] = []
    action = parse_action(
        [{"text": "Get the native stack with `gdb -p <pid>`.", "when": {"native": "unnamed"}}],
        "test",
        lambda item, msg: problems.append((item, msg)),
    )
    assert action is not None and problems == []
    assert action.fill({}, JobConditions()) == "Get the native stack with `gdb -p <pid>`."
    # gloo's `[enforce fail at gloo/transport/tcp/pair.cc:456]` already says where it threw
    assert action.fill({}, JobConditions(native_named=True)) is None


# --------------------------------------------------------------------------- the fixes' why


def test_a_fix_quotes_the_words_its_rule_matched_not_the_start_of_a_long_line() -> None:
    # DeepSpeed's launcher prints the whole command before the exit code: a quote of the line's
    # first 90 characters showed a timestamp and arguments, never the segfault it was about
    pasted = (
        "[2024-05-02 10:11:12,345] [ERROR] [launch.py:321:sigkill_handler] ['/usr/bin/python', "
        "'-u', 'pretrain_gpt.py', '--local_rank=3', '--tensor-model-parallel-size', '4', "
        "'--pipeline-model-parallel-size', '2', '--data-path', '/data/corpus_text_document', "
        "'--bf16'] exits with return code = -11"
    )
    d = explain(pasted, Options(use_embeddings=False, workers=1))
    quoted = [f.why for f in d.fix_patterns if "segmentation fault" in f.why]
    assert quoted and all("exits with return code = -11" in why for why in quoted), quoted


def test_a_fix_gives_its_cause_the_percentage_the_report_shows() -> None:
    # the root-cause table shows a calibrated score as 99% at most; the fix's why said 100%
    pasted = (
        "torch.distributed.DistNetworkError: The server socket has failed to listen on any local "
        "network address. port: 29500, useIpv6: false, code: -98, name: EADDRINUSE, message: "
        "address already in use"
    )
    d = explain(pasted, Options(use_embeddings=False, workers=1))
    view = report_view.build(d)
    shown = {label.id: label.pct for label in view.root_causes}
    for fix in d.fix_patterns:
        for cause, pct in re.findall(
            r"root cause,? (R\d+) [^(]*(?:\([^)]*\) )*\((\d+%)\)", fix.why
        ):
            assert shown.get(cause, pct) == pct, (fix.why, shown)
        assert "100%" not in fix.why, fix.why


# --------------------------------------------------------------------------- whole jobs


def _whole_job(case: str, *flags: str) -> str:
    """`triage <the case's files> --no-embed -q FLAGS` on a reference whole job (the held-out
    ones are refused by test_whole_jobs' guard before a file is read)."""
    from click.testing import CliRunner

    from tests.test_whole_jobs import _files
    from triage.cli import main

    result = CliRunner().invoke(main, [*_files(case), "--no-embed", "-q", *flags])
    assert result.exit_code == 0, result.output
    return result.output


def test_the_summary_folds_the_culprit_ranks_as_the_culprit_line_does() -> None:
    # eight ranks raised DeepSpeed's untested-optimizer assertion: the culprit line said
    # `ranks 0-7` and the summary beside it `started by ranks 0, 1, 2, 3, 4, 5, 6, 7`
    d = json.loads(_whole_job("b_linsky_llm_ds_8gpu_untested_zero_optimizer", "--format", "json"))
    assert d["culprit_ranks"] == list(range(8))
    assert d["summary"].endswith("started by ranks 0-7."), d["summary"]


def test_a_cause_tied_with_another_is_not_named_alone() -> None:
    # DeepSpeed-Chat's device mismatch: the table shows user code and API misuse at 50% each
    # ("50% (tied)"); the headline and the summary named user code alone as the cause
    report = _whole_job("a_dschat_sft_llama7b_zero3_device_mismatch")
    d = json.loads(_whole_job("a_dschat_sft_llama7b_zero3_device_mismatch", "--format", "json"))
    first, second = d["root_causes"][:2]
    assert round(first["score"] * 100) == round(second["score"] * 100), (first, second)
    # the verdict, above the tables: its words as one line, without the panel's borders
    headline = " ".join(report.split("Symptom ")[0].replace("│", " ").split())
    assert "caused by error in the user's training code, tied with framework API misuse" in (
        headline
    ), headline
    assert f"tied with framework API misuse ({second['id']}, " in d["summary"], d["summary"]


def test_a_node_to_drain_is_never_called_localhost() -> None:
    # pdsh's DeepSpeed launch prefixes the launching node's lines `localhost:`: "Take localhost
    # out of the pool" names no machine an operator can drain; the culprit's rank does
    from tests.test_whole_jobs import _files
    from triage import analysis, recommend
    from triage.pipeline import read_inputs

    d = json.loads(_whole_job("a_starksim_dual8_pdsh_nccl_cuda_calloc", "--format", "json"))
    actions = [a for f in d["fix_patterns"] for a in f["actions"]]
    assert not [a for a in actions if re.search(r"\blocalhost\b", a)], actions
    # the facts every action is written from hold no loopback host, whichever fixes rank first
    parsed = read_inputs(_files("a_starksim_dual8_pdsh_nccl_cuda_calloc"))
    found = analysis.correlate(parsed[0] if isinstance(parsed, tuple) else parsed)
    assert found.first_failure is not None and found.first_failure.host == "localhost"
    assert "host" not in recommend.job_facts(found)


def test_a_stack_dumped_when_the_launcher_stopped_a_worker_starts_nothing(tmp_path: Path) -> None:
    # Megatron-RL's refit benchmark: a TypeError on every rank, then torchrun SIGTERMs the
    # workers and one of them, with faulthandler registered for SIGTERM, prints where the stop
    # found it (torch.compile's worker pool shutting down). That stack was an initiating row of
    # the timeline and brought torch.compile advice to a job that never failed in torch.compile.
    agent = "torch/distributed/elastic/multiprocessing/api.py"
    log = "\n".join(
        [
            "[rank0]: Traceback (most recent call last):",
            '[rank0]:   File "/work/examples/rl/benchmark_refit.py", line 88, in <module>',
            "[rank0]:     main()",
            '[rank0]:   File "/work/megatron/training/training.py", line 1231, in build_model',
            "[rank0]:     model = model_provider_func(",
            "[rank0]: TypeError: <lambda>() got an unexpected keyword argument 'config'",
            f"W0128 15:42:08.661000 564838 {agent}:900] Sending process 564909 closing signal"
            " SIGTERM",
            "Stack (most recent call first):",
            '  File "/usr/lib/python3.12/subprocess.py", line 2047 in _wait',
            '  File "/usr/lib/python3.12/subprocess.py", line 1264 in wait',
            '  File "/usr/local/lib/python3.12/dist-packages/torch/_inductor/compile_worker/'
            'subproc_pool.py", line 226 in shutdown',
            '  File "/usr/local/lib/python3.12/dist-packages/torch/_inductor/async_compile.py",'
            " line 115 in shutdown_compile_workers",
            f"E0128 15:42:09.792000 564838 {agent}:874] failed (exitcode: 1) local_rank: 0"
            " (pid: 564910) of binary: /usr/bin/python",
            "",
        ]
    )
    (tmp_path / "train.log").write_text(log, encoding="utf-8")
    d = diagnose([str(tmp_path)], Options(use_embeddings=False, workers=1))
    started = [t for t in d.timeline if t.role == "initiating"]
    assert started and all("TypeError" in t.text for t in started), started
    actions = [a for f in d.fix_patterns for a in f.actions]
    assert not [a for a in actions if "torch.compile" in a], actions


def _srun_job(tmp_path: Path, before_exits: list[str]) -> Diagnosis:
    lines = [*before_exits]
    lines += [
        "srun: error: gpu01: task 0: Exited with exit code 2",
        "srun: error: gpu02: task 1: Exited with exit code 2",
        "",
    ]
    (tmp_path / "slurm-4242.err").write_text("\n".join(lines), encoding="utf-8")
    return diagnose([str(tmp_path)], Options(use_embeddings=False, workers=1))


def test_a_task_whose_program_never_started_is_no_usage_error(tmp_path: Path) -> None:
    # slurmstepd ends a task whose execve() failed with errno: ENOENT is 2, like argparse's
    # usage error, but no parser ran; the report said "the command-line parser's usage error"
    # and counted the two tasks that exited as one worker
    d = _srun_job(
        tmp_path,
        [
            "slurmstepd: error: execve(): torchrun: No such file or directory",
            "slurmstepd: error: execve(): torchrun: No such file or directory",
        ],
    )
    said = " ".join(
        [*(f.why for f in d.fix_patterns), *(a for f in d.fix_patterns for a in f.actions)]
    )
    assert "usage error" not in said and "--help" not in said, said
    exits = [f for f in d.findings if f.kind.value == "rank_exit"]
    assert [f.summary for f in exits] == [
        "2 worker(s) of unknown rank exited with 2 (exit 2: the program never started:"
        " execve(): torchrun: No such file or directory)"
    ], exits


def test_a_task_that_ran_and_exited_2_is_still_read_as_a_usage_error(tmp_path: Path) -> None:
    d = _srun_job(
        tmp_path,
        [
            "usage: train.py [-h] [--lr LR]",
            "train.py: error: unrecognized arguments: --learning-rate 3e-4",
        ],
    )
    said = " ".join(f.why for f in d.fix_patterns)
    assert "usage error" in said, said


def test_a_fix_names_no_root_cause_the_table_leaves_out() -> None:
    # a Megatron inference job failed an assertion, then a second step failed an import: the
    # top fix's why named "root cause R17 Insufficient host memory (15%)", fourth in a table
    # that shows three, a cause the report never states
    d = json.loads(
        _whole_job("b_attnbench_megatron_srun_4rank_tp_inference_assert", "--format", "json")
    )
    shown = {c["id"] for c in d["root_causes"][:3]}
    for fix in d["fix_patterns"]:
        named = set(re.findall(r"root cause,? (R\d+)", fix["why"]))
        assert named <= shown, (fix["id"], fix["why"], shown)


@pytest.mark.parametrize("fmt", ["text", "md", "html"])
def test_a_rank_is_never_said_to_run_on_localhost(fmt: str) -> None:
    # pdsh prefixes the launching node's lines `localhost:`; "rank 0 on localhost" names
    # whichever machine reads the report, not the node rank 0 ran on (pdsh@DGX2-1's)
    report = _whole_job("a_starksim_dual8_pdsh_nccl_cuda_calloc", "--format", fmt)
    text = html.unescape(re.sub(r"<[^>]+>", " ", report)) if fmt == "html" else report
    text = text.replace("\u200b", "").replace("\\_", "_")
    assert not re.search(r"rank \d+ on\W+localhost", " ".join(text.split())), fmt
    assert re.search(r"rank 0\b", text), fmt


def test_a_traceback_whose_header_a_progress_bar_swallowed_is_quoted_by_its_exception() -> None:
    # tqdm's bar and `[rank1]: Traceback (most recent call last):` shared one line: the first
    # failure was quoted as `File ".../lozo_train.py", line 413, in <module>`, the outermost
    # frame, while the KeyError it raised stood six lines below
    d = json.loads(_whole_job("c_nanogpt_pr_lozo_torchrun_8gpu_keyerror", "--format", "json"))
    first = d["first_failure"]
    assert first["text"] == "KeyError: '_orig_mod.transformer.wte.weight'", first
    assert first["line"] == 447, first


def test_a_rank_is_not_said_to_be_silent_where_errors_name_no_rank() -> None:
    # eight unprefixed `ModuleNotFoundError: No module named 'triton_kernels'` tracebacks, then
    # torchrun's rank 0 exited 1: the finding said rank 0 "exited 1 without any message of its
    # own", which the log's unattributed tracebacks do not support
    d = json.loads(_whole_job("c_modded_nanogpt_nebius_triton_kernels_missing", "--format", "json"))
    assert any(e["rank"] is None and "ModuleNotFoundError" in e["text"] for e in d["timeline"])
    said = " ".join(f["summary"] for f in d["findings"])
    assert "without any message" not in said, said
