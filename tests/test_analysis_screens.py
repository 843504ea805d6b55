"""Shortcuts in the cross-rank analysis give the answers of the plain regexes they stand for."""

from __future__ import annotations

import regex
from hypothesis import given, settings
from hypothesis import strategies as st

from triage import knowledge
from triage.analysis import cascade, exits, launcher, timeline
from triage.analysis.ranks import first_line
from triage.literals import Screened, lowered_ascii, required_literals

_SCREENED = [
    *cascade.screens().families.values(),
    cascade.screens().initiating,
    cascade.screens().context,
    launcher.waiting_screen(knowledge.shipped()),
    exits.restart_screen(knowledge.shipped()),
]

# Pieces of the patterns' own words in mixed case, numbers, and characters that fold to ASCII
# letters under IGNORECASE (long s, Kelvin sign) or are not ASCII at all.
_PIECES = st.sampled_from(
    [
        "Connection closed by peer",
        "SIGTERM",
        "Signal 15",
        "signal 150",
        "NaN",
        "nan",
        "Xid 79",
        "oom-kill",
        "oom_kill",
        "Watchdog caught collective operation timeout",
        "WorkNCCL(SeqNum=5) ran for 600010 ms",
        "TCPStore",
        "rendezvous is closed",
        "ChildFailedError",
        "1/2 clients joined",
        "RendezvousTimeoutError",
        "Restarting worker group",
        "Worker group FAILED. 2/3 attempts left",
        "out of memory",
        "ſigterm",
        "\u212aILLED",
        "Ü",
        "[rank3]:",
        "[node01]:12",
        "host-7:42:17",
        "0x7f3a",
        " ",
        "\n",
        "3.14",
    ]
)
_TEXT = st.lists(_PIECES, max_size=8).map("".join)


def test_every_analysis_pattern_is_screened() -> None:
    # a pattern without literals would silently lose the shortcut
    assert all(s.literals for s in _SCREENED)


@settings(max_examples=400, deadline=None)
@given(text=_TEXT)
def test_screened_search_agrees_with_the_regex(text: str) -> None:
    lowered = lowered_ascii(text)
    for screened in _SCREENED:
        got = screened.search(text, lowered)
        want = screened.pattern.search(text)
        assert (got is None) == (want is None)
        if got is not None and want is not None:
            assert got.span() == want.span()


@settings(max_examples=300, deadline=None)
@given(text=_TEXT)
def test_the_timeline_signature_is_the_regex_one(text: str) -> None:
    assert timeline.signature(text) == timeline._NOISE.sub("#", first_line(text, 400))


def test_the_screen_keeps_case_insensitive_literals_of_every_branch() -> None:
    pattern = regex.compile(r"Xid\b|\bNaN\b|oom[-_ ]kill", regex.I)
    assert required_literals(f"(?i:{pattern.pattern})", min_len=1) == ("\0xid", "\0nan", "\0kill")
    assert Screened(pattern).search("ECC: xid 79", "ecc: xid 79") is not None
    assert Screened(pattern).search("all fine", "all fine") is None
