"""The reports a user reads: terminal text, JSON, Markdown for an issue, one HTML file."""

from __future__ import annotations

import io
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt
from report_samples import (
    INPUT_WARNING,
    T0,
    TOP_ACTION,
    abstention,
    big_job,
    hang_on_rank3,
    hostile,
)
from rich.cells import cell_len
from rich.console import Console

from triage.model import (
    CollectiveRef,
    Diagnosis,
    Evidence,
    FailureRef,
    Finding,
    FixRecommendation,
    HangReport,
    InputSummary,
    ScoredLabel,
    SimilarCase,
    SourceKind,
    TimelineEntry,
)
from triage.pipeline import Options, diagnose
from triage.report import FORMATS, render, render_to_console
from triage.report.common import ranks_str
from triage.report.html import COPY_SCRIPT, script_hash
from triage.report.markdown import MAX_CHARS
from triage.report.text import render_text
from triage.report.view import build

SCHEMA_KEYS = {
    "schema",
    "summary",
    "outcome",
    "symptoms",
    "root_causes",
    "stage",
    "fix_patterns",
    "first_failure",
    "culprit_ranks",
    "hang",
    "evidence",
    "similar_cases",
    "inputs",
    "findings",
    "timeline",
}


class _Page(HTMLParser):
    """Collects what a browser would build: tags, attributes and the visible text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.ends: list[str] = []
        self.text: list[str] = []
        self.code_depth = 0
        self.plain: list[str] = []  # text outside <code>/<pre>/<a>, where mentions would fire
        self.skip = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag in ("style", "title", "script"):
            self.skip += 1
        if tag in ("code", "pre", "a"):
            self.code_depth += 1

    def handle_endtag(self, tag: str) -> None:
        self.ends.append(tag)
        if tag in ("style", "title", "script"):
            self.skip -= 1
        if tag in ("code", "pre", "a"):
            self.code_depth -= 1

    def handle_data(self, data: str) -> None:
        if self.skip:
            return
        self.text.append(data)
        if not self.code_depth:
            self.plain.append(data)

    def visible(self) -> str:
        return " ".join(" ".join(self.text).split())


def _page(html_text: str) -> _Page:
    page = _Page()
    page.feed(html_text)
    page.close()
    return page


def _markdown_to_html(md: str) -> str:
    # CommonMark with raw HTML allowed, like GitHub before its sanitizer: anything the
    # renderer failed to escape shows up here as a real tag.
    return MarkdownIt("commonmark", {"html": True}).enable("table").render(md)


def _visible(d: Diagnosis, fmt: str) -> str:
    """What a reader sees in one format, whitespace collapsed."""
    out = render(d, fmt)
    if fmt == "html":
        # the embedded JSON sits folded at the end: a copy for programs, not what one reads
        out = re.sub(r'<section class="card" id="raw">.*?</section>', "", out, flags=re.S)
        return _page(out).visible()
    if fmt == "md":
        # the zero-width space that keeps `#12` from linking issue 12 is invisible
        return _page(_markdown_to_html(out)).visible().replace("\u200b", "")
    return " ".join(out.split())


# --------------------------------------------------------------------------- every format


@pytest.mark.parametrize("fmt", FORMATS)
def test_hang_report_names_rank_3_and_the_first_fix_in_every_format(fmt: str) -> None:
    d = hang_on_rank3()
    if fmt == "json":
        data = json.loads(render(d, fmt))
        assert data["culprit_ranks"] == [3]
        assert data["hang"]["lagging_ranks"] == [3]
        assert data["fix_patterns"][0]["actions"][0] == TOP_ACTION
        return
    seen = _visible(d, fmt)
    assert "Culprit rank 3 on node-b" in seen.replace(":", "").replace("*", "")
    assert "py-spy dump --pid 4242" in seen
    assert "Collective hang or watchdog timeout" in seen
    assert "91%" in seen and "74%" in seen  # calibrated scores as percentages
    assert "all_reduce #57" in seen  # the stuck collective
    assert "logs/3.log:880" in seen  # where the first failure is


@pytest.mark.parametrize("fmt", ["text", "md", "html"])
def test_an_unreadable_input_is_called_out_in_every_format(fmt: str) -> None:
    seen = _visible(hang_on_rank3(), fmt)
    assert INPUT_WARNING in seen
    assert "1 input could not be read completely" in seen


@pytest.mark.parametrize("fmt", ["text", "md", "html"])
def test_abstention_says_what_evidence_to_collect(fmt: str) -> None:
    seen = _visible(abstention(), fmt)
    assert "Not enough evidence for a diagnosis" in seen
    assert "NCCL_DEBUG=INFO" in seen
    assert "py-spy dump --pid PID" in seen
    assert "python -m torch.utils.collect_env" in seen
    assert "Culprit ranks" not in seen


def test_abstention_does_not_ask_for_what_the_user_already_gave() -> None:
    kinds = (SourceKind.RANK_LOG, SourceKind.PYSPY, SourceKind.NCCL, SourceKind.ENV_REPORT)
    given = Diagnosis(
        summary="Not enough evidence; collect flight-recorder dumps.",
        inputs=tuple(InputSummary(f"in{i}", k, i, "h") for i, k in enumerate(kinds)),
    )
    seen = _visible(given, "text")
    assert "TORCH_FR_BUFFER_SIZE=2000" in seen
    assert "py-spy dump" not in seen
    assert "NCCL_DEBUG=INFO" not in seen
    assert "collect_env" not in seen


def test_unknown_format_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="text, json, md, html"):
        render(hang_on_rank3(), "pdf")


# --------------------------------------------------------------------------- JSON


def test_json_round_trips_with_exactly_the_schema_keys() -> None:
    d = hang_on_rank3()
    data = json.loads(render(d, "json"))
    assert data == json.loads(json.dumps(d.to_dict()))
    assert set(data) == SCHEMA_KEYS
    assert data["schema"] == "triage.diagnosis/1"
    assert set(data["fix_patterns"][0]) == {"id", "slug", "name", "score", "actions", "why"}
    assert set(data["first_failure"]) == {"rank", "host", "time", "source", "line", "text"}
    assert set(data["evidence"][0]) == {"source", "line", "rank", "text", "why"}
    assert set(data["similar_cases"][0]) == {"id", "url", "score"}
    assert set(data["inputs"][0]) == {"path", "kind", "rank", "host", "warnings"}
    assert data["inputs"][4]["warnings"] == [INPUT_WARNING]
    assert data["first_failure"]["time"].startswith("2025-12-02T08:17:55.250")


def test_json_keeps_every_timeline_entry_the_other_formats_cap() -> None:
    d = big_job()
    data = json.loads(render(d, "json"))
    assert len(data["timeline"]) == len(d.timeline) == 4097
    assert len(data["inputs"]) == 1024


# --------------------------------------------------------------------------- hostile text


def _scripts(html_text: str) -> list[str]:
    return re.findall(r"<script>(.*?)</script>", html_text, re.S)


def test_hostile_log_text_is_inert_in_html() -> None:
    out = render(hostile(), "html")
    page = _page(out)
    tags = {tag for tag, _ in page.tags}
    assert tags.isdisjoint({"img", "iframe", "object", "embed", "link"})
    # the one script is the copy buttons', byte for byte what the CSP's hash allows
    assert _scripts(out) == [COPY_SCRIPT]
    assert [t for t, _ in page.tags].count("script") == 1
    assert not any(k.startswith("on") for _, attrs in page.tags for k in attrs)
    assert page.ends.count("details") == sum(1 for t, _ in page.tags if t == "details")
    assert "<script>alert(1)</script>" in page.visible()  # shown as text, for the reader
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in out
    assert "\x1b" not in out and "\x07" not in out
    titles = [t for t, _ in page.tags if t == "title"]
    assert len(titles) == 1


def test_html_report_loads_nothing_from_outside_and_forbids_scripts() -> None:
    out = render(hang_on_rank3(), "html")
    page = _page(out)
    csp = [a for t, a in page.tags if t == "meta" and a.get("http-equiv")]
    policy = csp[0].get("content") or "" if csp else ""
    assert "default-src 'none'" in policy
    # scripts: only the copy buttons', pinned by hash (no 'unsafe-inline', nothing remote)
    assert f"script-src {script_hash()}" in policy and "unsafe" not in policy.split("style-src")[0]
    assert script_hash(_scripts(out)[0]) == script_hash()
    assert not any("src" in attrs for _, attrs in page.tags)
    assert "@import" not in out and "url(" not in out
    links = [a["href"] for t, a in page.tags if t == "a" and a.get("href", "#")[0] != "#"]
    assert links == ["https://github.com/pytorch/pytorch/issues/117"]  # javascript: is not linked


def test_hostile_log_text_cannot_break_the_markdown_comment() -> None:
    md = render(hostile(), "md")
    page = _page(_markdown_to_html(md))
    tags = [tag for tag, _ in page.tags]
    assert not {"script", "img"} & set(tags)
    # the timeline's and the inputs' folds, and no more: `</details>` in a log closes nothing
    assert tags.count("details") == page.ends.count("details") == 2
    assert "<script>alert(1)</script>" in page.visible()
    # A log line must not @-mention people or link issue #12 from a bot comment.
    plain = " ".join(page.plain)
    assert "@octocat" not in plain and "#12" not in plain
    assert "](<javascript" not in md
    assert "\x1b" not in md


def test_a_backtick_fence_inside_evidence_stays_inside_its_code_block() -> None:
    text = "before\n````\n</details>\n```\nafter"
    d = Diagnosis(
        summary="s",
        symptoms=(ScoredLabel("S18", "runtime_exception", "Runtime exception", 0.6),),
        evidence=(Evidence("a.log", 3, 0, text, "rule x"),),
    )
    html_out = _markdown_to_html(render(d, "md"))
    pre = html_out[html_out.index("<pre>") : html_out.index("</pre>")]
    assert "before" in pre and "after" in pre and "&lt;/details&gt;" in pre


def test_terminal_text_has_no_escape_codes_and_prints_markup_verbatim() -> None:
    out = render(hostile(), "text")
    assert "\x1b" not in out and "\x07" not in out
    assert "[bold]markup[/bold]" in out
    assert "<script>alert(1)</script>" in out


def test_hostile_text_survives_a_colour_terminal() -> None:
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, color_system="truecolor", width=100)
    render_to_console(hostile(), console)
    out = buf.getvalue()
    assert "[bold]markup[/bold]" in out
    assert "\x1b]0;title" not in out  # the log's window-title escape was removed
    assert "<script>alert(1)</script>" in out


# --------------------------------------------------------------------------- terminal


def test_terminal_report_has_colour_on_a_tty_and_none_in_a_file() -> None:
    buf = io.StringIO()
    render_to_console(
        hang_on_rank3(), Console(file=buf, force_terminal=True, color_system="256", width=100)
    )
    assert "\x1b[" in buf.getvalue()
    assert "\x1b[" not in render(hang_on_rank3(), "text")


@pytest.mark.parametrize("width", [60, 100])
def test_terminal_report_fits_the_width(width: int) -> None:
    for d in (hang_on_rank3(), hostile(), abstention()):
        out = render_text(d, width=width)
        too_wide = [line for line in out.splitlines() if cell_len(line) > width]
        assert not too_wide, too_wide[:3]
    assert "py-spy dump --pid 4242" in render_text(hang_on_rank3(), width=100)


def test_terminal_report_keeps_backticks_when_it_has_no_colour() -> None:
    assert "`py-spy dump --pid 4242`" in render(hang_on_rank3(), "text")


# --------------------------------------------------------------------------- big jobs


def test_a_1024_rank_job_renders_with_capped_rows() -> None:
    out = render(big_job(), "html")  # its time: bench/guard_timings.py
    assert len(out) < 2_000_000
    page = _page(out)
    rows = [a.get("class") for t, a in page.tags if t == "tr" and a.get("class")]
    assert rows.count("initiating") == 1  # the one error that started it survives the cap
    assert rows.count("cascade") < 300
    seen = page.visible()
    assert "3797 more entries not shown (3797 cascade)" in seen
    # The only unreadable input of 1,024 is listed first, not buried past the cap.
    assert "could not decode 12 bytes as UTF-8" in seen
    assert "1024 inputs under job/: 1024 rank_log; 1 could not be read completely" in seen
    assert "125/rank1000.log" in seen
    # the other 1,023 fold into one line of the inputs table, not 1,023 rows
    assert "rank_log read 1023 0-999, 1001-1023" in seen
    # 200 ranks' identical evidence is one group
    assert "ranks 0-199 (200 lines)" in seen
    # the swimlanes: the culprit's own lane, the others share one
    assert "1,008 other ranks" in seen


def test_big_job_markdown_fits_in_one_github_comment() -> None:
    d = big_job()
    huge = Diagnosis(
        summary=d.summary,
        symptoms=d.symptoms,
        fix_patterns=tuple(
            FixRecommendation(f"F{i}", "x", "fix", 0.5, ("`cmd`" + "x" * 5000,) * 30)
            for i in range(1, 7)
        ),
        first_failure=d.first_failure,
        culprit_ranks=d.culprit_ranks,
        evidence=tuple(Evidence("a.log", i, i, "line\n" * 5000, "rule") for i in range(60)),
        inputs=d.inputs,
        timeline=d.timeline,
    )
    md = render(huge, "md")
    assert len(md) <= MAX_CHARS
    seen = _page(_markdown_to_html(md)).visible()
    assert "rank 517" in seen
    assert "could not decode 12 bytes as UTF-8" in seen


def test_big_job_terminal_report_stays_short() -> None:
    out = render(big_job(), "text")
    assert len(out.splitlines()) < 400
    assert "CUDA error: an illegal memory access was encountered" in out
    assert "could not decode 12 bytes as UTF-8" in out


# --------------------------------------------------------------------------- small pieces


def test_timeline_cap_keeps_the_initiating_event_even_when_it_comes_last() -> None:
    entries = [TimelineEntry(T0 + i, i, "aborted", "a", i, "cascade") for i in range(5000)]
    entries.append(TimelineEntry(T0 + 9999, 7, "the real error", "b", 1, "initiating"))
    timeline = build(Diagnosis(summary="s", timeline=tuple(entries))).timeline
    rows, note = timeline.capped(10)
    assert [r.text for r in rows][-1] == "the real error"
    assert len(rows) == 10
    assert "4991 more entries not shown (4991 cascade)" in note


def test_rank_lists_stay_short_for_big_jobs() -> None:
    assert ranks_str(range(1024)) == "0-1023"
    assert ranks_str([8, 0, 1, 2, 5, 7]) == "0-2, 5, 7-8"
    assert ranks_str([]) == "-"


def test_a_report_writes_a_set_of_ranks_one_way_in_sentences_and_tables() -> None:
    # ranks 1 and 3 raised, 0 and 2 were stopped: the exits' findings and the culprit line
    # of the report say the same set the same way
    bundle = Path(__file__).parent.parent / "corpus_samples/uneven_shards_rank_exits_loop/bundle"
    d = diagnose([str(bundle)], Options(use_embeddings=False))
    text = render(d, "text")
    said = [f.summary for f in d.findings if f.kind == "rank_exit"]
    assert any("ranks 1, 3 exited" in s for s in said) and any("ranks 0, 2 " in s for s in said)
    assert "1,3" not in text and "0,2" not in text


def test_the_who_card_names_a_launchers_line_about_two_ranks_once() -> None:
    # node02 never joined: the launcher's line about ranks 2-3 heads the Who card as theirs,
    # and the card does not name the same ranks again in a row of their own
    bundle = Path(__file__).parent.parent / "corpus_samples/second_node_never_joins/bundle"
    html_text = render(diagnose([str(bundle)], Options(use_embeddings=False)), "html")
    assert "Started by ranks 2-3" in _page(html_text).visible()
    assert "<dt>Culprit ranks</dt>" not in html_text


def test_html_timeline_highlights_initiating_rows_and_mutes_cascade() -> None:
    page = _page(render(hang_on_rank3(), "html"))
    roles = {"initiating", "cascade", "context"}
    rows = [a.get("class") for t, a in page.tags if t == "tr" and a.get("class") in roles]
    assert rows == ["initiating", "cascade", "cascade", "cascade", "context"]
    labels = [a.get("class") for t, a in page.tags if t == "text"]
    assert "lane-label culprit" in labels  # rank 3's lane is marked
    marks = [a.get("class") for t, a in page.tags if t == "circle"]
    assert marks.count("initiating") == 1 and marks.count("cascade") == 3


def test_raw_json_is_embedded_in_the_html_and_parses() -> None:
    d = hang_on_rank3()
    out = render(d, "html")
    page = _page(out)
    raw = "".join(page.text[page.text.index("Raw JSON (triage.diagnosis/1)") + 1 :])
    start = raw.index("{")
    end = raw.rindex("}") + 1
    assert json.loads(raw[start:end]) == json.loads(render(d, "json"))


# --------------------------------------------------------------------------- any input


_texts = st.text(max_size=120)
# Plausible epochs only: model._iso (Diagnosis.to_dict) raises on NaN or out-of-range times.
_floats = st.one_of(st.none(), st.floats(min_value=0, max_value=4e9))
_ranks = st.one_of(st.none(), st.integers(min_value=-5, max_value=100_000))
_labels = st.builds(ScoredLabel, _texts, _texts, _texts, st.floats(allow_nan=True))


@settings(
    max_examples=30, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
@given(
    summary=_texts,
    labels=st.lists(_labels, max_size=3),
    fixes=st.lists(
        st.builds(
            FixRecommendation,
            _texts,
            _texts,
            _texts,
            st.floats(min_value=-1, max_value=2),
            st.lists(_texts, max_size=3).map(tuple),
            _texts,
        ),
        max_size=3,
    ),
    first=st.one_of(
        st.none(),
        st.builds(FailureRef, _ranks, st.none() | _texts, _floats, _texts, _ranks, _texts),
    ),
    hang=st.one_of(
        st.none(),
        st.builds(
            HangReport,
            st.booleans(),
            st.lists(st.integers(0, 4096), max_size=5).map(tuple),
            st.none() | _texts,
            st.none()
            | st.builds(
                CollectiveRef,
                op=st.none() | _texts,
                seq=st.none() | st.integers(),
                profiling_name=st.none() | _texts,
                input_sizes=st.lists(st.lists(st.integers()).map(tuple), max_size=3).map(tuple),
                input_dtypes=st.lists(_texts, max_size=3).map(tuple),
                timeout_ms=st.none() | st.integers(),
                call_site=st.none() | _texts,
                numel_in=st.none() | st.integers(),
                gloo_wait=st.none() | _texts,
            ),
            _texts,
        ),
    ),
    timeline=st.lists(
        st.builds(TimelineEntry, _floats, _ranks, _texts, _texts, _ranks, _texts), max_size=8
    ),
    inputs=st.lists(
        st.builds(
            InputSummary,
            _texts,
            st.sampled_from(list(SourceKind)),
            _ranks,
            st.none() | _texts,
            st.lists(_texts, max_size=2).map(tuple),
        ),
        max_size=4,
    ),
    urls=st.lists(st.tuples(_texts, st.none() | _texts), max_size=3),
)
def test_any_diagnosis_renders_in_every_format_without_raising(
    summary, labels, fixes, first, hang, timeline, inputs, urls
) -> None:
    d = Diagnosis(
        summary=summary,
        symptoms=tuple(labels),
        root_causes=tuple(labels[:1]),
        fix_patterns=tuple(fixes),
        first_failure=first,
        culprit_ranks=tuple(r for r in (first.rank if first else None,) if r is not None),
        hang=hang,
        evidence=tuple(Evidence(t.source, t.line, t.rank, t.text, t.role) for t in timeline),
        similar_cases=tuple(SimilarCase(i, u, 0.5) for i, u in urls),
        inputs=tuple(inputs),
        timeline=tuple(timeline),
    )
    for fmt in ("text", "md", "html"):
        out = render(d, fmt)
        assert "\x1b" not in out
    page = _page(_markdown_to_html(render(d, "md")))
    assert not {"script", "img", "iframe"} & {tag for tag, _ in page.tags}
    out = render(d, "html")
    page = _page(out)
    assert not {"img", "iframe"} & {tag for tag, _ in page.tags}
    assert _scripts(out) == [COPY_SCRIPT]


def test_the_shared_folder_of_all_inputs_is_named_once_not_on_every_row() -> None:
    d = Diagnosis(
        summary="s",
        symptoms=(ScoredLabel("S18", "runtime_exception", "Runtime exception", 0.6),),
        evidence=(Evidence("job7/logs/0.log", 5, 0, "ValueError: bad shape", "rule x"),),
        inputs=(
            InputSummary("job7/logs/0.log", SourceKind.RANK_LOG, 0, "h"),
            InputSummary("job7/logs/1.log", SourceKind.RANK_LOG, 1, "h"),
        ),
    )
    for fmt in ("text", "md", "html"):
        seen = _visible(d, fmt)
        assert "2 inputs under job7/logs/" in seen
        assert "0.log:5" in seen and "job7/logs/0.log:5" not in seen


def test_rank_lanes_zoom_in_on_the_failure_not_on_hours_of_start_up() -> None:
    d = Diagnosis(
        summary="s",
        symptoms=(ScoredLabel("S18", "runtime_exception", "Runtime exception", 0.6),),
        culprit_ranks=(1,),
        timeline=(
            TimelineEntry(T0 - 3600, 0, "NCCL INFO comm init", "a", 1, "context"),
            TimelineEntry(T0, 1, "ValueError", "b", 2, "initiating"),
            TimelineEntry(T0 + 5, 0, "aborted", "a", 3, "cascade"),
            TimelineEntry(T0 + 10, 0, "aborted again", "a", 4, "cascade"),
        ),
    )
    lanes = build(d).lanes
    assert lanes is not None
    marks = {m.kind: m.x for lane in lanes.lanes for m in lane.marks if lane.label == "rank 1"}
    assert marks["initiating"] == 0.0  # the window opens at the failure
    cascade = [m.x for lane in lanes.lanes for m in lane.marks if m.kind == "cascade"]
    assert 0.5 in cascade and 1.0 in cascade
    assert lanes.earlier == 1
    assert "over 10 s (1 earlier event at the left edge)" in _page(render(d, "html")).visible()


def test_thousands_of_findings_are_capped_in_html_but_kept_in_json() -> None:
    d = Diagnosis(
        summary="s",
        findings=tuple(Finding("rank_exit", f"rank {i} exited", (i,)) for i in range(500)),
    )
    assert "400 more findings in the JSON below." in _page(render(d, "html")).visible()
    assert len(json.loads(render(d, "json"))["findings"]) == 500


# --------------------------------------------------------------------------- the view


def test_only_the_fixes_worth_trying_are_shown_and_the_rest_counted() -> None:
    scores = (0.9, 0.5, 0.3, 0.12, 0.07, 0.06)
    d = Diagnosis(
        summary="s",
        symptoms=(ScoredLabel("S14", "cuda_oom", "GPU out of memory", 0.9),),
        fix_patterns=tuple(
            FixRecommendation(f"F{n}", "x", f"fix {n}", score, (f"step {n}",))
            for n, score in enumerate(scores, 1)
        ),
    )
    assert [f.id for f in build(d).fixes] == ["F1", "F2", "F3"]
    for fmt in ("text", "md", "html"):
        seen = _visible(d, fmt)
        assert "step 3" in seen and "step 4" not in seen and "6%" not in seen
        assert "3 less likely fix patterns" in seen
    assert len(json.loads(render(d, "json"))["fix_patterns"]) == 6  # the JSON keeps them all


def test_the_same_message_on_many_ranks_is_one_line_naming_the_ranks() -> None:
    line = "[rank{r}]:[E1202 08:27:55.251] Watchdog caught collective operation timeout: seq 57"
    d = Diagnosis(
        summary="s",
        symptoms=(ScoredLabel("S17", "hang", "Collective hang", 0.9),),
        evidence=(
            *(
                Evidence(f"logs/{r}.log", 40 + r, r, line.format(r=r), "watchdog")
                for r in range(127)
            ),
            Evidence("logs/127.log", 9, 127, "CUDA error: an illegal memory access", "cuda"),
        ),
    )
    groups = build(d).evidence
    assert [(g.who, g.count) for g in groups] == [("ranks 0-126", 127), ("rank 127", 1)]
    for fmt in ("text", "md", "html"):
        seen = _visible(d, fmt)
        assert "ranks 0-126 (127 lines)" in seen
        assert seen.count("Watchdog caught collective operation timeout") == 1


def test_an_empty_log_of_a_killed_rank_is_not_a_read_failure(tmp_path: Path) -> None:
    # torchrun's --log-dir layout: rank 1 was killed before it wrote a byte
    for rank, text in ((0, "step 10 loss 2.1\nRuntimeError: CUDA error: out of memory\n"), (1, "")):
        log = tmp_path / "job" / "attempt_0" / str(rank) / "stderr.log"
        log.parent.mkdir(parents=True)
        log.write_text(text, encoding="utf-8")
    d = diagnose([str(tmp_path / "job")], Options(use_embeddings=False))
    for fmt in ("text", "md", "html"):
        seen = _visible(d, fmt)
        assert "could not be read" not in seen
        assert "1 empty" in seen


def test_no_hang_is_said_as_such_not_as_not_detected_with_lagging_ranks() -> None:
    d = Diagnosis(
        summary="s",
        symptoms=(ScoredLabel("S27", "killed", "Rank process killed by a signal", 0.9),),
        culprit_ranks=(1,),
        hang=HangReport(
            False,
            (1,),
            "0 (default_pg)",
            CollectiveRef(op="all_reduce", seq=12),
            "the other ranks were in all_reduce #12 when rank(s) 1 failed",
        ),
    )
    for fmt in ("text", "md", "html"):
        seen = _visible(d, fmt)
        assert "no hang: the other ranks were in all_reduce #12" in seen
        assert "not detected" not in seen and "lagging" not in seen


def test_a_first_failure_quoted_from_another_ranks_dump_says_why() -> None:
    d = Diagnosis(
        summary="s",
        symptoms=(ScoredLabel("S17", "hang", "Collective hang", 0.9),),
        first_failure=FailureRef(2, None, None, "fr/rank_0", None, "collective #22 differs"),
        culprit_ranks=(2,),
        inputs=(
            InputSummary("fr/rank_0", SourceKind.FLIGHT_RECORDER, 0, None),
            InputSummary("fr/rank_2", SourceKind.FLIGHT_RECORDER, 2, None),
        ),
    )
    for fmt in ("text", "md", "html"):
        assert "quoted from rank 0's flight-recorder dump" in _visible(d, fmt)


def test_a_culprit_whose_error_has_no_timestamp_still_gets_its_lane() -> None:
    d = Diagnosis(
        summary="s",
        symptoms=(ScoredLabel("S14", "cuda_oom", "GPU out of memory", 0.9),),
        culprit_ranks=(663,),
        timeline=(
            TimelineEntry(None, 663, "torch.OutOfMemoryError", "r663.log", 9, "initiating"),
            TimelineEntry(T0, 0, "aborted", "r0.log", 5, "cascade"),
            TimelineEntry(T0 + 30, 1, "aborted", "r1.log", 5, "cascade"),
            # a job-wide note an hour later must not squeeze the ranks' lanes to the left
            TimelineEntry(T0 + 3600, None, "flight recorder: hang", "fr", None, "context"),
        ),
    )
    lanes = build(d).lanes
    assert lanes is not None and lanes.lanes[0].label == "rank 663"
    assert lanes.lanes[0].culprit and lanes.lanes[0].note == "its error has no timestamp"
    assert lanes.span == 30
    assert "its error has no timestamp" in _page(render(d, "html")).visible()
