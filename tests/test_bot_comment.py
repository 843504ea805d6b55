"""The comment as a tracker shows it: the bot's Markdown rendered to HTML by markdown-it-py
(CommonMark with tables, as GitHub and GitLab extend it), and the README's example of it.

The README example is the real bot's dry-run output for a sample issue; after a change to
the comment, `python tests/test_bot_comment.py` writes it anew.
"""

from __future__ import annotations

import json
import sys
import tempfile
from html.parser import HTMLParser
from pathlib import Path

import pytest
from bot_samples import FAST_RETRY, SETTINGS, VAGUE_BODY, WATCHDOG_BODY
from markdown_it import MarkdownIt
from tracker_api import TrackerAPI, github_issue_event

from triage.bot.ci import run_ci
from triage.bot.comment import MARKER

README = Path(__file__).resolve().parents[1] / "README.md"
START = "<!-- bot-comment-example:start"
END = "<!-- bot-comment-example:end -->"


def bot_comment(body: str, *, title: str = "Job hangs after 10 minutes", config: str = "") -> str:
    """What the bot would post for an issue with `body` (its dry run, over HTTP)."""
    api = TrackerAPI().start()
    try:
        api.add_github_issue("octo/train", 7)
        if config:
            api.files[("octo/train", ".github/triage.yml")] = config
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "event.json"
            path.write_text(json.dumps(github_issue_event("octo/train", 7, body, title=title)))
            printed: list[str] = []
            env = {"GITHUB_EVENT_NAME": "issues", "GITHUB_API_URL": api.github_url}
            result = run_ci(
                "github", str(path), api_url=None, dry_run=True, settings=SETTINGS, env=env,
                echo=printed.append, retry=FAST_RETRY,
            )  # fmt: skip
        assert result.exit_code == 0, result.message
        return printed[0]
    finally:
        api.stop()


def example_comment() -> str:
    return bot_comment(WATCHDOG_BODY, config="labels: {S17: hang}\n")


def quoted(markdown: str) -> str:
    return "\n".join(f"> {line}" if line else ">" for line in markdown.rstrip("\n").split("\n"))


def readme_example(text: str) -> str:
    start = text.index(START)
    start = text.index("\n", start) + 1
    block = text[start : text.index(END)]
    lines = [line[2:] if line.startswith("> ") else line.lstrip(">") for line in block.split("\n")]
    return "\n".join(lines).strip("\n") + "\n"


def render(markdown: str) -> str:
    # GitHub and GitLab: CommonMark, tables, strikethrough, and raw HTML (sanitised after)
    return (
        MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"]).render(markdown)
    )


class Page(HTMLParser):
    """Elements of a rendered page, each with the text inside it."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str | None], list[str]]] = []
        self._open: list[list[str]] = []
        self._tags: list[str] = []
        self.comments: list[str] = []
        self.prose: list[str] = []  # text outside code: where mentions and links would work
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        text: list[str] = []
        self.elements.append((tag, dict(attrs), text))
        if tag not in ("br", "hr", "img", "input"):
            self._open.append(text)
            self._tags.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if self._open:
            self._open.pop()
            self._tags.pop()

    def handle_data(self, data: str) -> None:
        for text in self._open:
            text.append(data)
        if "code" not in self._tags and "pre" not in self._tags:
            self.prose.append(data)

    def handle_comment(self, data: str) -> None:
        self.comments.append(data)

    def texts(self, tag: str) -> list[str]:
        return ["".join(text) for t, _, text in self.elements if t == tag]

    def all_text(self) -> str:
        return "".join(self.texts("p") + self.texts("li") + self.texts("td") + self.texts("h3"))


@pytest.fixture(scope="module")
def example() -> str:
    return example_comment()


def test_the_readme_shows_the_comment_the_bot_posts(example: str) -> None:
    assert readme_example(README.read_text(encoding="utf-8")) == example, (
        "the README's example comment is stale: run `python tests/test_bot_comment.py`"
    )


def test_the_comment_renders_as_a_tracker_shows_it(example: str) -> None:
    page = Page(render(example))
    assert page.comments and page.comments[0].startswith(" triage-bot")  # hidden marker
    assert "triage-bot" not in page.all_text()
    [headline] = page.texts("h3")
    assert headline.startswith("triage: Collective hang or watchdog timeout")
    table = " ".join(page.texts("td"))
    assert "S17" in table and "R08" in table and "99%" in table  # symptom, cause, confidence
    # one rank's watchdog line: the rank that reported the wait is not blamed for it
    who = " ".join(page.texts("li"))
    assert "not identified" in who and "rank 3 took another path" not in page.all_text()
    headings = page.texts("h4")
    order = ["Who", "What to do", "Likely duplicates", "To make this diagnosis surer, add"]
    assert [h for h in headings if h in order] == order
    codes = page.texts("code")
    assert "NCCL_DEBUG=INFO" in codes and "TORCH_NCCL_DUMP_ON_TIMEOUT=1" in " ".join(codes)
    links = [attrs.get("href") for tag, attrs, _ in page.elements if tag == "a"]
    assert links and all(str(href).startswith("https://github.com/") for href in links)
    assert "Evidence, similar cases and inputs" in page.texts("summary")
    assert "hang" in codes  # the label the repository maps S17 to
    assert not any(tag in ("script", "img", "iframe") for tag, _, _ in page.elements)


def test_the_readme_example_renders_inside_a_quote() -> None:
    page = Page(render(README.read_text(encoding="utf-8")))
    quoted_headlines = [
        text
        for tag, _, text in page.elements
        if tag == "blockquote" and "triage: Collective" in "".join(text)  # noqa: E501
    ]
    assert quoted_headlines


def test_hostile_text_in_an_issue_stays_inert_in_the_comment() -> None:
    evil = (
        "</details></code></pre><script>alert(1)</script> @octocat fixes #1 "
        "[click](javascript:alert(1)) <img src=x onerror=alert(1)> ```` ~~~"
    )
    body = (
        f"{evil}\n\n```\n[rank0]:Traceback (most recent call last):\n"
        f'[rank0]:  File "/w/train.py", line 1, in <module>\n'
        f"[rank0]:torch.OutOfMemoryError: CUDA out of memory. {evil}\n```\n"
    )
    markdown = bot_comment(body, title=evil, config="on_abstain: full\n")
    assert "`S14`" in markdown  # diagnosed, so the line is quoted
    page = Page(render(markdown))
    assert not any(tag in ("script", "img", "iframe") for tag, _, _ in page.elements)
    hrefs = [str(attrs.get("href")) for tag, attrs, _ in page.elements if tag == "a"]
    assert not any(h.startswith("javascript") for h in hrefs)
    # the log line is quoted, as code or escaped text, and cannot ping @octocat
    assert "alert(1)" in "".join(page.texts("code")) + page.all_text()
    assert "@octocat" not in "".join(page.prose)


def test_an_abstention_renders_as_a_short_list_of_evidence_to_add() -> None:
    page = Page(render(bot_comment(VAGUE_BODY)))
    assert page.texts("h3") == ["triage: not enough evidence for a diagnosis yet"]
    asks = page.texts("li")
    assert len(asks) >= 4
    assert any("NCCL_DEBUG=INFO" in li for li in asks)
    assert "What to do" not in page.texts("h4")


def test_a_huge_thread_still_fits_in_one_github_comment() -> None:
    lines = "\n".join(
        f"[rank{n % 64}]:[E ProcessGroupNCCL.cpp:{n}] error number {n} " + "x" * 300
        for n in range(3000)
    )
    markdown = bot_comment(f"```\n{lines}\n```")
    assert len(markdown) <= 65_000
    assert markdown.startswith(MARKER)


def _write_readme() -> None:
    text = README.read_text(encoding="utf-8")
    start = text.index("\n", text.index(START)) + 1
    end = text.index(END)
    README.write_text(
        text[:start] + quoted(example_comment()) + "\n" + text[end:], encoding="utf-8"
    )
    print(f"wrote the example comment into {README}")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    _write_readme()
