"""The hot-line scan's first test (`triage.scan.prefilter`) lets through every line the full
scan would report: a chunk it rejects really holds no hot line, whatever the knowledge (a
team's `--rules` included), and a chunk read from its first hit on gives the same lines."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import pytest

from triage import knowledge
from triage.literals import required_literals
from triage.model import Source, SourceKind
from triage.parsers import rank_log
from triage.parsers.rank_log.needles import LogScanTables
from triage.scan import prefilter
from triage.scan.hot_lines import HotLines

FIXTURES = Path(__file__).parent / "fixtures" / "logs"
SAMPLES = Path(__file__).parent.parent / "bench" / "samples" / "logs"

TEAM_KEYWORD = "blobcache evicted shard"
TEAM_RULE = f"""
- id: team-blobcache-evicted
  title: The blob cache evicts a shard the loader still reads
  match:
    any: ['{TEAM_KEYWORD} (?P<shard>\\S+)']
  concludes:
    symptom: {{S28: 0.9}}
    root_cause: {{R05: 0.7}}
    fix: {{F5: 0.8}}
  actions:
    F5: "Give the blob cache room for {{shard}}"
  examples:
    match: ["[2026-01-05 10:12:08,123] [INFO] [cache.py:7] {TEAM_KEYWORD} s-0041"]
    no_match: ["[2026-01-05 10:12:09,001] [INFO] [cache.py:9] blobcache warm"]
"""
TEAM_LINE = f"[2026-01-05 10:12:08,123] [INFO] [cache.py:7] {TEAM_KEYWORD} s-0041"


def _team_kb(tmp_path: Path) -> knowledge.Knowledge:
    folder = tmp_path / "team_rules"
    folder.mkdir()
    (folder / "team.yaml").write_text(TEAM_RULE, encoding="utf-8")
    return knowledge.load([str(folder)])


def _tables(tmp_path: Path, team: bool) -> LogScanTables:
    return rank_log.scan_tables(_team_kb(tmp_path) if team else None)


def _one_pass(tables: LogScanTables) -> LogScanTables:
    """The same tables with the hot-line scan in one pass over each chunk (no prefilter)."""
    scan = HotLines(
        tables.markers, tables.specific_needles, tables.verdicts, gated=tables.gated,
        prefilter=False,
    )  # fmt: skip
    return replace(tables, hot_lines=scan)


@pytest.mark.parametrize("team", [False, True], ids=["shipped", "with a team folder"])
def test_every_needle_and_verdict_literal_of_the_knowledge_passes_the_prefilter(
    tmp_path: Path, team: bool
) -> None:
    tables = _tables(tmp_path, team)
    first = tables.hot_lines.first_test()
    for needle in tables.specific_needles:
        for case in (needle, needle.upper(), needle.lower()):
            assert first.holds(f"x {case} y".encode()), needle
    for pattern in tables.verdicts:
        literals = required_literals(pattern.decode("latin-1"), 3)
        if literals is None:
            assert pattern in first.patterns
            continue
        for literal in literals:
            text = literal.lstrip("\0").encode("latin-1")
            assert first.holds(text) and first.holds(text.upper()), (pattern, literal)
    if team:
        assert first.holds(TEAM_LINE.encode())
    # far fewer pieces than needles: that is what makes the first pass fast
    assert len(first.literals) < len(tables.specific_needles) / 3


def test_a_healthy_progress_line_holds_no_piece() -> None:
    tables = rank_log.scan_tables()
    first = tables.hot_lines.first_test()
    for line in tables.templates.healthy:
        assert not any(piece in line.lower().encode() for piece in first.literals), line


def _chunks(seed: int) -> bytes:
    """Healthy lines with, here and there, a line of a real log (errors, NCCL, tracebacks)."""
    rng = random.Random(seed)
    healthy = [h.encode() for h in knowledge.shipped().templates.healthy]
    real = [
        line
        for p in sorted([*FIXTURES.iterdir(), *SAMPLES.glob("*.log")])
        for line in p.read_bytes().splitlines()
    ]
    lines = [rng.choice(healthy) for _ in range(3000)]
    for _ in range(rng.randrange(0, 6)):
        lines.insert(rng.randrange(len(lines) + 1), rng.choice(real))
    return b"\n".join(lines) + b"\n"


def _hot(found: list[int], data: bytes) -> list[int]:
    return sorted({data.rfind(b"\n", 0, o) + 1 for o in found})


def test_the_prefiltered_scan_reports_the_lines_of_one_pass_over_the_chunk() -> None:
    pytest.importorskip("hyperscan")
    tables = rank_log.scan_tables()
    fast, full = tables.hot_lines, _one_pass(tables).hot_lines
    rejected = 0
    for seed in range(60):
        data = _chunks(seed)
        for mute in (frozenset(), rank_log.MUTE_COMMS):
            counts = [0], [0]
            got = fast.find(data, mute, counts[0])
            assert _hot(got, data) == _hot(full.find(data, mute, counts[1]), data), seed
            assert counts[0] == counts[1]
            rejected += not got
    assert rejected  # some chunks hold only healthy lines: the first pass alone decides them


def test_a_match_that_spans_lines_is_found_when_the_first_hit_comes_after_it() -> None:
    """`Killed process N (name\\nmore)` may span lines: its pattern is scanned over the whole
    chunk, not from the first prefilter hit's line on."""
    pytest.importorskip("hyperscan")
    assert not prefilter.line_local(rb"Killed process (?:\d+) \((?:[^)]*)\)")
    assert prefilter.line_local(rb"NCCL WARN [^\n]*")
    scan = HotLines(
        rank_log.scan_tables().markers, ["zzkeyword"], [rb"Killed process (?:\d+) \((?:[^)]*)\)"]
    )
    one_pass = HotLines(
        rank_log.scan_tables().markers,
        ["zzkeyword"],
        [rb"Killed process (?:\d+) \((?:[^)]*)\)"],
        prefilter=False,
    )
    data = b"step 1\nKilled process 12 (python\nstill the name)\nstep 2 zzkeyword\n"
    assert _hot(scan.find(data), data) == _hot(one_pass.find(data), data)


@pytest.mark.parametrize("team", [False, True], ids=["shipped", "with a team folder"])
def test_a_big_log_gives_the_same_events_with_and_without_the_prefilter(
    tmp_path: Path, team: bool
) -> None:
    """A 9 MiB log (three chunks) of healthy lines, the team's INFO line in the second chunk
    and a failure at the end: the same events either way, the team line among them when the
    team's rules are loaded."""
    tables = _tables(tmp_path, team)
    healthy = "\n".join(tables.templates.healthy) + "\n"
    half = healthy * ((9 << 20) // (2 * len(healthy)) + 1)
    failure = (
        "Traceback (most recent call last):\n"
        '  File "train.py", line 88, in <module>\n'
        "RuntimeError: CUDA error: an illegal memory access was encountered\n"
    )
    data = f"{half}{TEAM_LINE}\n{half}{failure}".encode()
    path = tmp_path / "rank0.log"
    path.write_bytes(data)
    source = Source(path=str(path), kind=SourceKind.RANK_LOG, size=len(data), open=path.open)
    source = replace(source, open=lambda: path.open("rb"))
    fast = rank_log.parse(source, tables=tables)
    slow = rank_log.parse(source, tables=_one_pass(tables))
    assert [(e.kind, e.line, e.text) for e in fast.events] == [
        (e.kind, e.line, e.text) for e in slow.events
    ]
    assert any("illegal memory access" in e.text for e in fast.events)
    assert any(TEAM_KEYWORD in e.text for e in fast.events) is team


def test_the_heads_a_match_begins_with() -> None:
    assert prefilter.heads(rb"srun: error: (?:[^:\s]+): tasks? (?:.+?)\s*$") == [b"srun: error: "]
    assert prefilter.heads(
        rb"(?:Out of memory: |Memory cgroup out of memory: )Killed process (?:\d+) \("
    ) == [b"Out of memory: Killed process ", b"Memory cgroup out of memory: Killed process "]
    # a class, a repeat, a branch with no text of its own, flags set inside: no head known
    for pattern in (rb"[WEFC]\d{3,4} ", rb"\s*Killed", rb"(?:abc|\d+)x", rb"(?i:abc)d", rb"^abc"):
        assert prefilter.heads(pattern) is None, pattern
    pieces = [b"killed proc"]
    assert prefilter.starts_covered(rb"Killed process (?:\d+) \((?:[^)]*)\)", pieces)
    # the piece is in the pattern, but not in the text its matches begin with
    assert not prefilter.starts_covered(rb"Main (?:[^)]*)\)\s*killed process", pieces)


def test_the_shipped_scan_reads_a_chunk_once_from_its_first_hit() -> None:
    """Every shipped pattern whose match may span lines begins with a prefilter piece: a chunk
    whose first hit is late (a healthy log's last chunk, its failure at the end) is scanned
    from that line on in one pass, not again whole for those patterns."""
    first = rank_log.scan_tables().hot_lines.first_test()
    assert first.crossing
    for pattern in first.crossing:
        assert prefilter.starts_covered(pattern, first.literals), pattern


@pytest.mark.parametrize(
    "verdict",
    [
        rb"Killed process (?:\d+) \((?:[^)]*)\)",  # begins with its piece: one pass
        rb"[a-z]+ (?:[^)]*)\)\s*zzcrash",  # its piece after a line break: the chunk again whole
    ],
)
def test_a_late_first_hit_finds_the_lines_of_one_pass(verdict: bytes) -> None:
    """A chunk whose first prefilter hit lies past its first eighth: matches that span lines,
    after the hit and (for a pattern whose piece is not where its matches begin) before it,
    are the lines one pass over the whole chunk reports."""
    pytest.importorskip("hyperscan")
    markers = rank_log.scan_tables().markers
    fast = HotLines(markers, ["zzkeyword"], [verdict])
    full = HotLines(markers, ["zzkeyword"], [verdict], prefilter=False)
    filler = b"step 1 loss 2.5\n" * 4000
    for data in (
        filler + b"oom (pid\n) zzcrash\nstep 2 zzkeyword\nKilled process 12 (python\nname)\n",
        filler + b"step 2 zzkeyword\nKilled process 12 (python\nstill the name)\nend\n",
    ):
        got = fast.find(data)
        assert got and _hot(got, data) == _hot(full.find(data), data)
        assert fast.first_test().crossing == (verdict,)
