"""The big-log shortcuts give the answers the plain way gives.

Repeats of a line read alone get that line's verdict without being parsed; the hot-line scan
looks for some patterns only in chunks that pass their gate; NCCL communicator set-ups are read
up to a bound, then only counted. Each is checked against the way it replaces.
"""

from __future__ import annotations

import io
import random
from pathlib import Path

import pytest

from triage.model import EventKind, NcclLineFacts, ParsedSource, Source, SourceKind
from triage.parsers import nccl, rank_log
from triage.scan import hot_lines

FIXTURES = Path(__file__).parent / "fixtures" / "logs"
SAMPLES = Path(__file__).parent.parent / "bench" / "samples" / "logs"


def source_of(data: bytes, path: str = "job.log") -> Source:
    return Source(
        path=path, kind=SourceKind.RANK_LOG, size=len(data), open=lambda: io.BytesIO(data)
    )


def everything(parsed: ParsedSource) -> tuple[object, ...]:
    return (
        [
            (e.kind, e.text, e.line, e.end_line, e.rank, e.local_rank, e.host, e.pid, e.time)
            + (e.level, sorted((k, repr(v)) for k, v in e.attrs.items()), repr(e.payload))
            + (e.exception, e.c10d, e.notice, e.line_numbers, e.time_before)
            + (e.stream_time_before, e.time_after)
            for e in parsed.events
        ],
        parsed.warnings,
        parsed.lines,
    )


def repeating_log(seed: int) -> bytes:
    """Lines that repeat apart from their digits, in every way the verdict could depend on
    them: several processes' prefixes, warnings past the cap, errors past their cap, digits
    a rule reads (`return code = -9`), dates that do not exist, a traceback at the end whose
    `time_before` is the last time seen."""
    rng = random.Random(seed)
    out: list[str] = []
    for i in range(6000):
        local = rng.randrange(4)
        day = rng.choice([3, 4, 31, 32])  # `W1232`: no such day, no time
        kind = rng.randrange(9)
        if kind == 0:
            out.append(
                f"[default{local}]:[rank{local + 8}]:[W12{day:02d} 07:32:{i % 60:02d}.{i:06d} "
                f"reducer.cpp:{1300 + local}] Warning: find_unused_parameters=True was specified"
            )
        elif kind == 1:
            out.append(
                f"[2026-12-{day:02d} 10:00:{i % 60:02d},{i % 1000:03d}] [WARNING] "
                f"[real_accelerator.py:{200 + i % 3}:get_accelerator] Setting accelerator to CPU"
            )
        elif kind == 2:
            name = chr(97 + i % 26) + chr(97 + i // 26 % 11)  # 286 options: past the cap
            out.append(f"WARNING: option {name} is deprecated, use new{i % 7}")
        elif kind == 3:
            out.append(f"RuntimeError: step {i} failed with code {i % 5}")
        elif kind == 4:
            out.append(f"[default{local}]: Worker exits with return code = -{rng.choice([8, 9])}")
        elif kind == 5:
            out.append(
                f"[2026-12-03 10:00:{i % 60:02d},{i % 1000:03d}] [INFO] [config.py:1:print]   "
                f"checkpoint_config ............ {{'tag_validation': 'WARN', 'n': {i}}}"
            )
        elif kind == 6:
            out.append(f"[rank{local}]: some info line {i} error_rate=0.{i}")
        else:
            out.append(f"step {i} loss 2.{i % 97} lr 1e-4")
    out += [
        "Traceback (most recent call last):",
        '  File "train.py", line 12, in <module>',
        "torch.OutOfMemoryError: CUDA out of memory.",
    ]
    return ("\n".join(out) + "\n").encode()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_repeats_get_the_verdict_parsing_them_gives(seed: int) -> None:
    data = repeating_log(seed)
    fast = rank_log.parse(source_of(data), scan_all=False)
    slow = rank_log.parse(source_of(data), scan_all=False, replay_repeats=False)
    assert everything(fast) == everything(slow)
    assert any(e.kind is EventKind.TRACEBACK and e.time_before is not None for e in fast.events)
    assert any("more warning lines not kept" in w for w in fast.warnings)


@pytest.mark.parametrize(
    "name", sorted(p.name for p in [*FIXTURES.iterdir(), *SAMPLES.glob("*.log")])
)
def test_repeats_change_nothing_on_the_fixtures(name: str) -> None:
    path = FIXTURES / name if (FIXTURES / name).exists() else SAMPLES / name
    data = path.read_bytes() * 3  # each line comes back: its repeats are replayed
    fast = rank_log.parse(source_of(data, name), scan_all=False)
    slow = rank_log.parse(source_of(data, name), scan_all=False, replay_repeats=False)
    assert everything(fast) == everything(slow)


def nccl_log(communicators: int, extra: str = "") -> bytes:
    """A process's NCCL INFO init output, one communicator after another."""
    prefix = "node003:4242:4300 [3] NCCL INFO"
    out = [f"{prefix} NCCL version 2.21.5+cuda12.4", f"{prefix} Using network IB"]
    for c in range(communicators):
        size = 64 if c % 7 else 8
        out.append(f"{prefix} comm 0x{c:x}00 rank {27 if size == 64 else 3} nRanks {size} MNNVL 0")
        out += [f"{prefix} Channel {k:02d}/0 : 27[3] -> 28[4] via P2P/IPC" for k in range(30)]
        out.append(
            f"{prefix} ncclCommInitRank comm 0x{c:x}00 rank {27 if size == 64 else 3} nranks "
            f"{size} cudaDev 3 nvmlDev 3 busId 48000 commId 0x{c:x}ab - Init COMPLETE"
        )
    out.append(f"{prefix} misc/socket.cc:484 -> 2")
    out.append(f"{prefix} [Service thread] Connection closed by localRank 2" + extra)
    out.append("RuntimeError: NCCL communicator was aborted")
    return ("\n".join(out) + "\n").encode()


@pytest.mark.parametrize("parse", [rank_log.parse, nccl.parse])
def test_communicator_set_ups_past_the_bound_are_counted_not_kept(parse: object) -> None:
    comms = 3000  # ~1 MB
    data = nccl_log(comms)
    parsed = parse(source_of(data))  # type: ignore[operator]
    set_ups = [
        e
        for e in parsed.events
        if e.kind is EventKind.NCCL_COMM
        or (isinstance(e.payload, NcclLineFacts) and e.payload.comm and e.payload.nranks)
    ]
    assert len(set_ups) == nccl.MAX_COMM_EVENTS
    (warning,) = [w for w in parsed.warnings if "communicator set-up" in w]
    assert warning.startswith(f"{2 * comms - nccl.MAX_COMM_EVENTS} more ")
    # what comes after is still read: the chain line, the trouble line, the error
    texts = " ".join(e.text for e in parsed.events)
    assert "-> 2" in texts and "Connection closed" in texts
    assert 27 in {e.rank for e in set_ups}  # the biggest communicator's rank


def hot_lines_of(found: list[int], data: bytes) -> list[int]:
    return sorted({data.rfind(b"\n", 0, o) + 1 for o in found})


def test_gated_scan_finds_the_lines_one_scan_of_everything_finds() -> None:
    """A main scan, then each gated group where its gate holds, reports the hot lines (and
    the muted matches) one scan with every pattern reports; the plain path (`re` on the
    lines a marker scan finds) reports no line the scan does not."""
    pytest.importorskip("hyperscan")
    parts = [p.read_bytes() for p in sorted([*FIXTURES.iterdir(), *SAMPLES.glob("*.log")])]
    parts.append(nccl_log(40, extra=" \x1b[31merror\x1b[0m"))
    parts.append(b"[2026-01-01 00:00:00] errors=0 failed_steps=0 NCCL_ASYNC_ERROR_HANDLING=1\n")
    tables = rank_log.scan_tables()
    groups = tables.gated
    ungated = hot_lines.HotLines(
        tables.markers,
        tables.specific_needles,
        [*tables.verdicts, *(p for g in groups for p in g.patterns())],
        [p for g in groups for p in g.once],
        prefilter=False,
    )
    plain = tables.using("numpy").hot_lines
    for data in [*parts, b"".join(parts)]:
        for mute in (frozenset(), rank_log.MUTE_COMMS):
            counts = [0], [0], [0]
            fast = hot_lines_of(tables.hot_lines.find(data, mute, counts[0]), data)
            assert fast == hot_lines_of(ungated.find(data, mute, counts[1]), data)
            assert set(hot_lines_of(plain.find(data, mute, counts[2]), data)) <= set(fast)
            assert counts[0] == counts[1] == counts[2]


def test_muted_matches_come_apart_and_add_up_to_the_unmuted_scan() -> None:
    """With `muted_out`, a muted pattern's lines come back on their own: together with the
    other hot lines they are the lines of a scan without muting, and their number is what
    the muted scan counts (one scan serves a chunk muted part way through)."""
    data = nccl_log(300, extra=" \x1b[31merror\x1b[0m")
    hot_lines = rank_log.scan_tables().hot_lines
    for scan in (hot_lines, _plain_hot_lines()):
        whole = hot_lines_of(scan.find(data), data)
        comms: list[int] = []
        others = scan.find(data, rank_log.MUTE_COMMS, None, comms)
        assert comms == sorted(comms) and comms
        assert hot_lines_of(others + comms, data) == whole
        counted = [0]
        assert scan.find(data, rank_log.MUTE_COMMS, counted) == others
        if scan is hot_lines:  # the plain path counts lines, the scan matches
            assert counted[0] == len(comms)


def _plain_hot_lines() -> hot_lines.HotLines:
    return rank_log.scan_tables().using("numpy").hot_lines


@pytest.mark.parametrize("plain", [False, True])
def test_an_nccl_info_line_is_hot_when_a_trouble_word_follows_nccl_info(plain: bool) -> None:
    """The trouble words are literals of the scan, each line checked for `NCCL INFO `
    before the word: a word after it makes the line hot, in any case; the word alone, or
    before NCCL INFO, does not (in a chunk that holds NCCL INFO lines)."""
    if not plain:
        pytest.importorskip("hyperscan")
    head = b"node1:1:2 [0] NCCL INFO "
    rows = [
        head + b"ring 0 bootstrap done\n",  # no word
        head + b"transport Connection CLOSED by peer\n",  # word after, upper case
        b"free text with failed_steps=0 here NCCL INFO\n",  # word before NCCL INFO
        b"x" * 300 + b" fail\n",  # word, no NCCL INFO on its line
        head + b"net proxy timed out; errors seen\n",  # two words after
    ]
    data = b"".join(rows)
    scan = _plain_hot_lines() if plain else rank_log.scan_tables().hot_lines
    found = hot_lines_of(scan.find(data), data)
    starts = [sum(map(len, rows[:i])) for i in range(len(rows))]
    assert starts[1] in found and starts[4] in found
    assert starts[2] not in found and starts[3] not in found


def test_lines_full_of_warning_words_and_a_last_line_without_newline_are_all_read() -> None:
    """The scan reports a line of generic words once, at its end: a line with several of
    them (torch's warning prose), one beside a rule's needle, and the log's last line with
    no newline after it give the events that reading every line gives."""
    healthy = "{'loss': 5.71, 'grad_norm': 1.62, 'learning_rate': 4.9e-06, 'epoch': 1.4}\n"
    lines = []
    for step in range(3000):
        lines.append(f"\r 12%|#2        | {step}/64 [00:01<00:08,  6.5it/s]{healthy}")
        if step % 300 == 7:
            lines.append(
                f"[rank0]:[W1203 07:29:{step % 60:02d}.918369198 reducer.cpp:1529] Warning: "
                "find_unused_parameters=True was specified; note that this warning may be "
                f"a false positive, WARNING {step}\n"
            )
        if step == 2500:
            lines.append("ERROR: ProcessGroupNCCL watchdog timeout, errors follow: error\n")
    # generic words alone (no needle of a rule or a template), on the last line
    lines.append(
        "[2026-12-03 07:31:58,598] [ERROR] [engine.py:88] the shard reader stopped: error 7"
    )
    data = "".join(lines).encode()
    assert len(data) > 4 * rank_log.SCAN_ALL_BELOW and not data.endswith(b"\n")
    scanned = rank_log.parse(source_of(data), scan_all=False)
    every_line = rank_log.parse(source_of(data), scan_all=True)
    kinds = {EventKind.ERROR_LINE, EventKind.WARNING_LINE}
    found = [(e.kind, e.line, e.text) for e in scanned.events if e.kind in kinds]
    assert found == [(e.kind, e.line, e.text) for e in every_line.events if e.kind in kinds]
    # the warning (its repeats counted, as every line read counts them), the error line, the
    # last line
    assert [text.split(":")[0][:12] for _, _, text in found] == [
        "[W1203 07",
        "ERROR",
        "[2026-12-03 ",
    ]
    assert found[-1][1] == data.count(b"\n") + 1
