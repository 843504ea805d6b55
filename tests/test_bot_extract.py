"""Evidence from what reporters paste: code blocks, `<details>`, unfenced tracebacks, links;
attached logs fetched only when enabled, within size and time limits."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from bot_samples import FAST_RETRY, OOM_BODY, SETTINGS, VAGUE_BODY
from tracker_api import TrackerAPI, github_issue_event

from triage import knowledge
from triage.bot.ci import run_ci
from triage.bot.core import diagnose_pieces
from triage.bot.extract import (
    extract_thread,
    find_links,
    has_command,
    seen_evidence,
    split_post,
)
from triage.bot.fetch import attachment_links, fetch_log
from triage.bot.settings import FetchLimits, ServiceSettings
from triage.model import SourceKind

STRUCTURED = Path(__file__).parent / "fixtures" / "structured"
PYSPY = (STRUCTURED / "pyspy" / "rank0_allreduce.txt").read_text()
COLLECT_ENV = (STRUCTURED / "env" / "collect_env_gpu.txt").read_text()
NCCL_LOG = (Path(__file__).parent / "fixtures" / "logs" / "nccl_debug.log").read_text()

ISSUE = f"""\
<!-- Please fill in the template. Thanks! -->
### Describe the bug

It hangs. Stacks of rank 0:

<details>
<summary>py-spy dump</summary>

```
{PYSPY}```

</details>

<details><summary>Environment</summary>

~~~text
{COLLECT_ENV}~~~
</details>

1. first I ran it
   ```bash
   {NCCL_LOG.splitlines()[0]}
   ```

> quoted from the forum:
>
>     RuntimeError: something quoted
"""


def test_each_code_block_is_a_piece_read_by_the_parser_of_its_kind() -> None:
    pieces = split_post(ISSUE, "issue")
    kinds = {p.name: p.kind for p in pieces}
    assert kinds["issue/block-1"] is SourceKind.PYSPY
    assert kinds["issue/block-2"] is SourceKind.ENV_REPORT
    assert kinds["issue/block-3"] is SourceKind.NCCL  # inside a list item
    assert "RuntimeError: something quoted" in pieces[3].text  # inside a quote
    assert pieces[0].text.startswith("Process 13105")  # raw, as pasted
    prose = pieces[-1]
    assert prose.name == "issue/text" and prose.kind is SourceKind.TEXT
    assert "It hangs" in prose.text
    # template hints and the <details> machinery are not evidence
    assert "Please fill in" not in prose.text and "<summary>" not in prose.text
    assert "Process 13105" not in prose.text  # a block is not read twice


def test_what_the_thread_already_holds_is_known() -> None:
    pieces = split_post(ISSUE, "issue")
    collect = knowledge.load().collect_next
    assert seen_evidence(pieces, collect) == {"pyspy", "env", "nccl_debug"}
    assert seen_evidence(split_post(OOM_BODY, "issue"), collect) == {"traceback"}


def test_an_unfenced_traceback_in_the_prose_is_diagnosed() -> None:
    extracted = extract_thread([("issue", OOM_BODY)])
    diagnosis = diagnose_pieces(extracted.pieces, SETTINGS)
    assert diagnosis.symptoms[0].id == "S14"


def test_details_without_a_fence_are_read_as_text() -> None:
    body = "<details><summary>log</summary>\n\n[rank1]: torch.OutOfMemoryError: CUDA out of memory.\n</details>"  # noqa: E501
    [piece] = split_post(body, "issue")
    assert piece.text.strip() == "[rank1]: torch.OutOfMemoryError: CUDA out of memory."


def test_a_thread_over_its_limit_is_read_up_to_it_and_says_so() -> None:
    posts = [("issue", "x" * 600), ("comment-1", "y" * 600), ("comment-2", "z" * 10)]
    extracted = extract_thread(posts, max_chars=1000)
    assert sum(len(p.text) for p in extracted.pieces) == 1000
    assert any("cut at the thread's limit" in n for n in extracted.notes)
    assert any("1 later posts were not read" in n for n in extracted.notes)


def test_a_thread_of_many_blocks_keeps_the_first_64() -> None:
    body = "\n\n".join(f"```\nline {n}\n```" for n in range(100))
    extracted = extract_thread([("issue", body)])
    assert len(extracted.pieces) == 64
    assert any("more code blocks were not read" in n for n in extracted.notes)


@pytest.mark.parametrize(
    ("body", "asks"),
    [
        ("/triage", True),
        ("  /triage please", True),
        ("thanks!\n/triage\n", True),
        ("/triaged", False),
        ("see /triage", False),
        ("```\n/triage\n```", False),
        ("    /triage", False),  # an indented code block
        ("> /triage", False),
    ],
)
def test_the_command_counts_only_at_a_line_start_outside_code_and_quotes(
    body: str, asks: bool
) -> None:
    assert has_command(body, "/triage") is asks


def test_links_are_found_in_markdown_links_and_bare_urls() -> None:
    body = (
        "logs: [rank3.log](https://github.com/user-attachments/files/123/rank3.log) and "
        "https://gist.githubusercontent.com/a/b/raw/nccl.txt, see https://pytorch.org/docs.\n"
        "GitLab upload: [rank0.log](/uploads/0123456789abcdef0123456789abcdef/rank0.log)\n"
        "<!-- https://hidden.example.com/secret.log -->"
    )
    links = find_links(body, "https://gitlab.example.com/ml/train")
    assert links == [
        "https://github.com/user-attachments/files/123/rank3.log",
        "https://gist.githubusercontent.com/a/b/raw/nccl.txt",
        "https://pytorch.org/docs",
        "https://gitlab.example.com/ml/train/uploads/0123456789abcdef0123456789abcdef/rank0.log",
    ]
    limits = FetchLimits()
    assert attachment_links(links, limits) == links[:2]
    # plain http, credentials in the URL, hosts not on the list: never fetched
    assert attachment_links(["http://github.com/x/files/1/a.log"], limits) == []
    assert attachment_links(["https://u:p@github.com/files/1/a.log"], limits) == []
    assert attachment_links(["https://169.254.169.254/latest/a.txt"], limits) == []


# ---------------------------------------------------------------------- fetching


@pytest.fixture
def api() -> Any:
    api = TrackerAPI().start()
    api.add_user("tok", "github-actions[bot]", "Bot", can_ask_who=False)
    yield api
    api.stop()


def limits_for(api: TrackerAPI, **kw: Any) -> FetchLimits:
    host = api.url.split("//", 1)[1]
    return FetchLimits(hosts=(host,), allow_http=True, **kw)


def test_an_attached_log_over_the_cap_keeps_its_start_and_its_end(api: TrackerAPI) -> None:
    data = b"".join(b"line %06d\n" % n for n in range(20_000))  # 220 KB
    url = api.serve_file("big.log", data)
    got = fetch_log(url, limits_for(api, max_bytes=40_000))
    assert got.text is not None and got.note is not None
    assert got.text.startswith("line 000000")
    assert got.text.rstrip().endswith("line 019999")
    assert "bytes left out" in got.text and "from the middle left out" in got.note
    assert len(got.text) < 41_000


def test_a_server_that_drips_is_cut_at_the_deadline(api: TrackerAPI) -> None:
    url = api.serve_file("slow.log", b"x" * 200_000, delay_per_kb=0.05)  # ~10 s in all
    started = time.monotonic()
    got = fetch_log(url, limits_for(api, timeout_s=1.0))
    assert time.monotonic() - started < 3
    assert got.note is not None and "cut after 1 s" in got.note


def test_redirects_are_followed_only_to_allowed_hosts(api: TrackerAPI) -> None:
    target = api.serve_file("real.log", b"NCCL WARN hello\n")
    hop = api.serve_file("hop.log", b"", redirect=target)
    assert fetch_log(hop, limits_for(api)).text == "NCCL WARN hello\n"
    away = api.serve_file("away.log", b"", redirect="http://10.0.0.1/internal.log")
    got = fetch_log(away, limits_for(api))
    assert got.text is None and "allow-list" in (got.note or "")


def test_binary_and_missing_attachments_are_not_read(api: TrackerAPI) -> None:
    binary = api.serve_file("core.log", b"\x7fELF\x00\x00\x00" * 100)
    assert fetch_log(binary, limits_for(api)).note == "not read: not a text file"
    missing = fetch_log(api.url + "/files/none.log", limits_for(api))
    assert missing.text is None and missing.note == "not fetched: HTTP 404"
    closed = fetch_log(
        "http://127.0.0.1:9/x.log", FetchLimits(hosts=("127.0.0.1:9",), allow_http=True)
    )  # noqa: E501
    assert closed.text is None and (closed.note or "").startswith("not fetched")


def _run_issue(api: TrackerAPI, tmp_path: Path, body: str, settings: ServiceSettings) -> str:
    api.add_github_issue("octo/train", 1)
    path = tmp_path / "event.json"
    path.write_text(json.dumps(github_issue_event("octo/train", 1, body)))
    env = {"GITHUB_TOKEN": "tok", "GITHUB_EVENT_NAME": "issues", "GITHUB_API_URL": api.github_url}
    result = run_ci(
        "github", str(path), api_url=None, dry_run=False, settings=settings, env=env,
        echo=lambda _: None, retry=FAST_RETRY,
    )  # fmt: skip
    assert result.exit_code == 0, result.message
    return api.comments("octo/train", 1)[0]["body"]


def test_attached_logs_are_read_only_where_the_repository_enables_it(
    api: TrackerAPI, tmp_path: Path
) -> None:
    url = api.serve_file("rank3.log", OOM_BODY.encode())
    body = f"{VAGUE_BODY}\n\nLog: [rank3.log]({url})"
    settings = ServiceSettings(embeddings=False, fetch=limits_for(api))
    off = _run_issue(api, tmp_path, body, settings)
    assert "not enough evidence" in off  # the link alone is not read
    assert api.calls("GET", r"^/files/") == []

    api.files[("octo/train", ".github/triage.yml")] = "fetch_links: true\n"
    api.github.clear()
    on = _run_issue(api, tmp_path, body, settings)
    assert "`S14`" in on and "attachment/rank3.log" in on
    [fetched] = api.calls("GET", r"^/files/")
    assert "authorization" not in {k.lower() for k in fetched.headers}  # no token sent along


@pytest.mark.parametrize(
    "body",
    [
        "[" * 200_000,
        "[a](" * 100_000,
        "*a " * 100_000,
        "\n".join("> " * 60 + "- x" for _ in range(5000)),
    ],
)
def test_a_pathological_post_is_read_as_text(body: str) -> None:
    # its time is measured by bench/guard_timings.py
    assert split_post(body, "issue")  # read as text, not dropped
