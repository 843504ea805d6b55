"""The keyword prefilter of the rule engine picks exactly the rules a plain per-event test picks."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from triage.classify import rules as engine
from triage.model import Event, EventKind

# Few letters, digits and a non-ASCII letter whose lowercase form is longer: keywords and
# texts collide often, and digit masking and lowercasing both get exercised.
_CHARS = "aAbB01 9\u0130\n"
_keyword = st.text(alphabet=_CHARS, min_size=1, max_size=4)
_lower_keyword = _keyword.map(lambda w: "\0" + w.lower())


def _rule(n: int, keywords: tuple[str, ...] | None) -> engine.Rule:
    return engine.Rule(id=f"r{n}", title="t", file="f", keywords=keywords)


def _naive(keywords: tuple[str, ...] | None, text: str) -> bool:
    if keywords is None:
        return True
    return any((k[1:] in text.lower()) if k.startswith("\0") else (k in text) for k in keywords)


@settings(max_examples=300, deadline=None)
@given(
    keywords=st.lists(
        st.one_of(st.none(), st.lists(st.one_of(_keyword, _lower_keyword), min_size=1, max_size=3)),
        min_size=1,
        max_size=6,
    ),
    texts=st.lists(st.text(alphabet=_CHARS, max_size=12), max_size=8),
)
def test_candidates_are_the_rules_whose_keywords_each_text_contains(
    keywords: list[list[str] | None], texts: list[str]
) -> None:
    rules = [_rule(n, tuple(k) if k is not None else None) for n, k in enumerate(keywords)]
    got = engine._Prefilter(rules).candidates(texts)
    want = [[n for n, r in enumerate(rules) if _naive(r.keywords, text)] for text in texts]
    assert got == want


def test_a_keyword_with_digits_tells_apart_lines_that_differ_only_in_numbers() -> None:
    # Both lines mask to the same text; only the first contains the rule's literal.
    events = [
        Event(source="a", kind=EventKind.ERROR_LINE, text=text, line=1)
        for text in (
            "Fatal Python error: Signal 11 (SIGSEGV) received by PID 4",
            "Fatal Python error: Signal 12 (SIGSEGV) received by PID 4",
        )
    ]
    # (the generic layer's SIGSEGV family matches both lines, as it should)
    hits = [(h.rule_id, h.event) for h in engine.match_events(events) if not h.generic]
    assert hits == [("process-sigsegv", events[0])]
