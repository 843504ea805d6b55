"""The bot in a GitHub Action: one event file, one comment, through the REST API.

Every test runs the real bot (`triage.bot.ci.run_ci`, what `triage bot github` calls) against
a real HTTP server on loopback that answers like GitHub's API (tests/tracker_api.py).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from bot_samples import FAST_RETRY, SETTINGS, SHM_BODY, VAGUE_BODY, WATCHDOG_BODY
from click.testing import CliRunner
from tracker_api import TrackerAPI, github_comment_event, github_issue_event

from triage.bot.ci import CiResult, run_ci
from triage.bot.comment import MARKER
from triage.bot.settings import ServiceSettings
from triage.cli import main

REPO = "octo/train"
ACTIONS_TOKEN = "ghs_actionsTokenForTheTestsOnly0000000001"


@pytest.fixture
def api() -> Any:
    api = TrackerAPI().start()
    # GITHUB_TOKEN in Actions: a bot account that cannot ask GET /user who it is
    api.add_user(ACTIONS_TOKEN, "github-actions[bot]", "Bot", can_ask_who=False)
    api.add_user("pat-triage", "triage-bot", "User")
    api.add_user("pat-mallory", "mallory", "User")
    yield api
    api.stop()


def run(
    api: TrackerAPI,
    tmp_path: Path,
    event: dict[str, Any],
    *,
    name: str | None = None,
    token: str | None = ACTIONS_TOKEN,
    dry_run: bool = False,
    settings: ServiceSettings = SETTINGS,
) -> tuple[CiResult, list[str]]:
    path = tmp_path / "event.json"
    path.write_text(json.dumps(event), encoding="utf-8")
    env = {"GITHUB_API_URL": api.github_url}
    if name or "comment" in event or "issue" in event:
        env["GITHUB_EVENT_NAME"] = name or ("issue_comment" if "comment" in event else "issues")
    if token:
        env["GITHUB_TOKEN"] = token
    printed: list[str] = []
    result = run_ci(
        "github",
        str(path),
        api_url=None,
        dry_run=dry_run,
        settings=settings,
        env=env,
        echo=printed.append,
        retry=FAST_RETRY,
    )
    return result, printed


def test_a_new_issue_gets_one_comment_with_the_diagnosis(api: TrackerAPI, tmp_path: Path) -> None:
    api.add_github_issue(REPO, 7)
    result, _ = run(api, tmp_path, github_issue_event(REPO, 7, SHM_BODY))
    assert result.exit_code == 0, result.message
    assert "created" in result.message
    [comment] = api.comments(REPO, 7)
    body = comment["body"]
    assert body.startswith(MARKER)
    assert comment["user"]["login"] == "github-actions[bot]"
    assert "`S12`" in body and "`R05`" in body  # symptom, root cause
    assert "#### What to do" in body and "NCCL_SHM_DISABLE=1" in body  # ranked fixes, actions
    assert "99%" in body  # confidence
    # the token went as a bearer header, with the API version GitHub asks for
    post = api.calls("POST", r"/issues/7/comments$")[0]
    assert post.headers["authorization"] == f"Bearer {ACTIONS_TOKEN}"
    assert post.headers["x-github-api-version"] == "2022-11-28"


def test_editing_the_issue_updates_the_bots_comment_never_a_second_one(
    api: TrackerAPI, tmp_path: Path
) -> None:
    api.add_github_issue(REPO, 8)
    run(api, tmp_path, github_issue_event(REPO, 8, VAGUE_BODY))
    [first] = api.comments(REPO, 8)
    assert "not enough evidence" in first["body"]

    result, _ = run(api, tmp_path, github_issue_event(REPO, 8, SHM_BODY, action="edited"))
    assert result.exit_code == 0 and "updated" in result.message
    [after] = api.comments(REPO, 8)
    assert after["id"] == first["id"]
    assert "`R05`" in after["body"]
    assert len(api.calls("PATCH", r"/issues/comments/\d+$")) == 1

    # the same edit delivered again changes nothing: no second PATCH
    result, _ = run(api, tmp_path, github_issue_event(REPO, 8, SHM_BODY, action="edited"))
    assert "unchanged" in result.message
    assert len(api.calls("PATCH", r"/issues/comments/\d+$")) == 1
    assert len(api.comments(REPO, 8)) == 1


def test_triage_command_reruns_on_the_thread_so_far(api: TrackerAPI, tmp_path: Path) -> None:
    api.add_github_issue(REPO, 9)
    run(api, tmp_path, github_issue_event(REPO, 9, VAGUE_BODY))
    # the reporter adds the log the bot asked for, in a later comment, and asks again
    api.add_github_issue(REPO, 9, comments=(("alice", "Here is the log:\n\n" + SHM_BODY),))
    with api.lock:
        api.github[(REPO, 9)].comments.append(
            {"id": 5, "user": {"login": "carol", "type": "User"}, "body": "/triage"}
        )
    event = github_comment_event(REPO, 9, VAGUE_BODY, 5, "/triage")
    result, _ = run(api, tmp_path, event)
    assert result.exit_code == 0 and "updated" in result.message, result.message
    bot = [c for c in api.comments(REPO, 9) if c["body"].startswith(MARKER)]
    assert len(bot) == 1
    assert "`R05`" in bot[0]["body"]
    assert "comment-2/block-1" in bot[0]["body"]  # the evidence came from the comment


@pytest.mark.parametrize(
    "text",
    [
        "thanks, I'll try that",
        "```\n/triage\n```",  # in a code block: quoted, not asked
        "> /triage\n\nsomeone said that",  # quoted
        "please run /triage later",  # not at a line's start
    ],
)
def test_a_comment_that_does_not_ask_is_not_answered(
    api: TrackerAPI, tmp_path: Path, text: str
) -> None:
    api.add_github_issue(REPO, 10)
    result, _ = run(api, tmp_path, github_comment_event(REPO, 10, SHM_BODY, 3, text))
    assert result.exit_code == 0
    assert "does not ask" in result.message
    assert api.writes() == []


@pytest.mark.parametrize(
    ("sender", "kind"),
    [("github-actions[bot]", "Bot"), ("dependabot[bot]", "Bot"), ("some-ci", "Bot")],
)
def test_the_bot_never_answers_itself_or_other_bots(
    api: TrackerAPI, tmp_path: Path, sender: str, kind: str
) -> None:
    api.add_github_issue(REPO, 11)
    event = github_comment_event(REPO, 11, SHM_BODY, 3, "/triage", sender=sender, sender_type=kind)
    result, _ = run(api, tmp_path, event)
    assert result.exit_code == 0 and "bot" in result.message
    opened = github_issue_event(REPO, 11, SHM_BODY, sender=sender, sender_type=kind)
    result, _ = run(api, tmp_path, opened)
    assert result.exit_code == 0 and "bot" in result.message
    assert api.writes() == []


def test_a_marker_pasted_by_someone_else_is_not_taken_for_the_bots_comment(
    api: TrackerAPI, tmp_path: Path
) -> None:
    api.add_github_issue(REPO, 12, comments=(("mallory", MARKER + "\nnothing to see"),))
    result, _ = run(api, tmp_path, github_issue_event(REPO, 12, SHM_BODY))
    assert result.exit_code == 0 and "created" in result.message
    comments = api.comments(REPO, 12)
    assert comments[0]["body"] == MARKER + "\nnothing to see"  # untouched
    assert comments[1]["user"]["login"] == "github-actions[bot]"
    assert api.calls("PATCH", ".") == []


def test_with_a_personal_token_the_bot_knows_its_own_login(api: TrackerAPI, tmp_path: Path) -> None:
    api.add_github_issue(REPO, 13)
    run(api, tmp_path, github_issue_event(REPO, 13, VAGUE_BODY), token="pat-triage")
    run(api, tmp_path, github_issue_event(REPO, 13, SHM_BODY, action="edited"), token="pat-triage")
    [comment] = api.comments(REPO, 13)
    assert comment["user"]["login"] == "triage-bot" and "`R05`" in comment["body"]
    # and it does not answer its own comments even though its account is not typed Bot
    event = github_comment_event(REPO, 13, SHM_BODY, comment["id"], "/triage", sender="triage-bot")
    result, _ = run(api, tmp_path, event, token="pat-triage")
    assert "bot" in result.message


@pytest.mark.parametrize(
    ("name", "event"),
    [
        ("push", {"ref": "refs/heads/main", "repository": {"full_name": REPO}}),
        ("issues", github_issue_event(REPO, 14, SHM_BODY, action="labeled")),
        ("issues", github_issue_event(REPO, 14, SHM_BODY, action="closed")),
        ("issue_comment", github_comment_event(REPO, 14, "", 3, "/triage", pull_request=True)),
        ("issues", {"action": "opened", "issue": "not an object"}),
        ("issues", []),
    ],
)
def test_other_events_are_ignored_without_a_request(
    api: TrackerAPI, tmp_path: Path, name: str, event: Any
) -> None:
    result, _ = run(api, tmp_path, event, name=name)
    assert result.exit_code == 0
    assert result.message.startswith("ignored")
    assert api.requests == []


def test_dry_run_prints_the_comment_and_posts_nothing(api: TrackerAPI, tmp_path: Path) -> None:
    api.add_github_issue(REPO, 15)
    result, printed = run(
        api, tmp_path, github_issue_event(REPO, 15, SHM_BODY), dry_run=True, token=None
    )
    assert result.exit_code == 0
    assert "would create a comment" in result.message
    assert printed and printed[0].startswith(MARKER) and "`R05`" in printed[0]
    assert api.writes() == []


def test_repository_settings_map_the_diagnosis_to_labels(api: TrackerAPI, tmp_path: Path) -> None:
    api.files[(REPO, ".github/triage.yml")] = (
        "labels:\n  S12: nccl\n  R05: [infra, 'area: containers']\n  S14: oom\n"
    )
    api.add_github_issue(REPO, 16)
    event = github_issue_event(REPO, 16, SHM_BODY, labels=("nccl",))
    result, _ = run(api, tmp_path, event)
    assert "labels added: infra, area: containers" in result.message
    posted = api.calls("POST", r"/issues/16/labels$")
    assert posted[0].body == {"labels": ["infra", "area: containers"]}  # nccl was there already
    [comment] = api.comments(REPO, 16)
    assert "labels: `nccl`, `infra`, `area: containers`" in comment["body"]


def test_a_silent_repository_says_nothing_when_triage_abstains(
    api: TrackerAPI, tmp_path: Path
) -> None:
    api.files[(REPO, ".github/triage.yml")] = "on_abstain: silent\nabstain_labels: [needs-logs]\n"
    api.add_github_issue(REPO, 17)
    result, _ = run(api, tmp_path, github_issue_event(REPO, 17, VAGUE_BODY))
    assert "silence" in result.message
    assert api.comments(REPO, 17) == []
    assert api.labels((REPO, 17)) == ["needs-logs"]


def test_when_triage_abstains_it_posts_only_the_evidence_to_collect(
    api: TrackerAPI, tmp_path: Path
) -> None:
    api.add_github_issue(REPO, 18)
    run(api, tmp_path, github_issue_event(REPO, 18, VAGUE_BODY))
    [comment] = api.comments(REPO, 18)
    body = comment["body"]
    assert "not enough evidence" in body
    for wanted in ("NCCL_DEBUG=INFO", "TORCH_NCCL_DUMP_ON_TIMEOUT=1", "py-spy dump", "collect_env"):
        assert wanted in body
    assert "#### What to do" not in body  # no guessed fixes
    assert "comment `/triage`" in body


def test_a_higher_threshold_turns_an_uncertain_diagnosis_into_a_request_for_evidence(
    api: TrackerAPI, tmp_path: Path
) -> None:
    api.files[(REPO, ".github/triage.yml")] = "min_confidence: 0.6\n"
    api.add_github_issue(REPO, 19)
    run(api, tmp_path, github_issue_event(REPO, 19, WATCHDOG_BODY))  # R08 at ~54%
    [comment] = api.comments(REPO, 19)
    assert "not enough evidence" in comment["body"]


def test_an_uncertain_diagnosis_says_which_evidence_to_add_and_names_duplicates(
    api: TrackerAPI, tmp_path: Path
) -> None:
    api.add_github_issue(REPO, 20)
    run(api, tmp_path, github_issue_event(REPO, 20, WATCHDOG_BODY))
    [comment] = api.comments(REPO, 20)
    body = comment["body"]
    assert "`S17`" in body  # the diagnosis is shown
    assert "#### To make this diagnosis surer, add" in body
    asks = body.split("#### To make this diagnosis surer, add", 1)[1].split("<details>", 1)[0]
    for wanted in ("NCCL_DEBUG=INFO", "py-spy dump", "TORCH_NCCL_DUMP_ON_TIMEOUT=1"):
        assert wanted in asks
    assert "Watchdog" not in asks  # asks for what is missing, not for what is there
    assert "#### Likely duplicates" in body and "](<https://github.com/" in body


def test_a_teams_thread_ask_from_its_rules_folder_reaches_the_comment(
    api: TrackerAPI, tmp_path: Path
) -> None:
    team = tmp_path / "team"
    team.mkdir()
    (team / "collect_next.yaml").write_text(
        "kind: collect_next\n"
        "thread_asks:\n"
        "  - id: cluster-health\n"
        "    lacks: env\n"
        "    ask: The output of `ourcluster health --job JOBID` from the failing node.\n",
        encoding="utf-8",
    )
    api.add_github_issue(REPO, 25)
    settings = ServiceSettings(embeddings=False, rules_dirs=(str(team),))
    run(api, tmp_path, github_issue_event(REPO, 25, WATCHDOG_BODY), settings=settings)
    [comment] = api.comments(REPO, 25)
    asks = comment["body"].split("#### To make this diagnosis surer, add", 1)[1]
    # the shipped asks first, then the team's
    assert asks.index("NCCL_DEBUG=INFO") < asks.index("ourcluster health --job JOBID")


def test_a_broken_settings_file_keeps_the_defaults_and_says_so(
    api: TrackerAPI, tmp_path: Path
) -> None:
    api.files[(REPO, ".github/triage.yml")] = "on_abstain: [oops\nlabels: 3\nmystery: 1\n"
    api.add_github_issue(REPO, 21)
    result, _ = run(api, tmp_path, github_issue_event(REPO, 21, SHM_BODY))
    assert result.exit_code == 0
    [comment] = api.comments(REPO, 21)
    assert ".github/triage.yml: the file is not valid YAML" in comment["body"].replace("\\", "")


def test_a_rate_limit_with_retry_after_is_waited_out(api: TrackerAPI, tmp_path: Path) -> None:
    api.add_github_issue(REPO, 22)
    api.fail("POST", r"/issues/22/comments$", 429, {"Retry-After": "1"}, message="slow down")
    started = time.monotonic()
    result, _ = run(api, tmp_path, github_issue_event(REPO, 22, SHM_BODY))
    assert result.exit_code == 0, result.message
    assert time.monotonic() - started >= 0.9
    assert [r.status for r in api.calls("POST", r"/issues/22/comments$")] == [429, 201]
    assert len(api.comments(REPO, 22)) == 1


def test_a_403_rate_limit_waits_for_the_reset_time(api: TrackerAPI, tmp_path: Path) -> None:
    api.add_github_issue(REPO, 23)
    reset = str(int(time.time()) + 1)
    headers = {"x-ratelimit-remaining": "0", "x-ratelimit-reset": reset}
    api.fail("GET", r"/issues/23/comments$", 403, headers, message="API rate limit exceeded")
    result, _ = run(api, tmp_path, github_issue_event(REPO, 23, SHM_BODY))
    assert result.exit_code == 0, result.message
    assert [r.status for r in api.calls("GET", r"/issues/23/comments$")] == [403, 200]


def test_a_rate_limit_longer_than_the_bot_waits_ends_cleanly(
    api: TrackerAPI, tmp_path: Path
) -> None:
    api.add_github_issue(REPO, 24)
    api.fail("POST", r"/comments$", 403, {"Retry-After": "3600"}, message="secondary rate limit")
    started = time.monotonic()
    result, _ = run(api, tmp_path, github_issue_event(REPO, 24, SHM_BODY))
    assert time.monotonic() - started < 5
    assert result.exit_code == 1
    assert "rate limited for 3600 s" in result.message
    assert ACTIONS_TOKEN not in result.message


def test_server_errors_are_retried_for_reads_and_edits(api: TrackerAPI, tmp_path: Path) -> None:
    api.add_github_issue(REPO, 25)
    run(api, tmp_path, github_issue_event(REPO, 25, VAGUE_BODY))
    api.fail("GET", r"/issues/25/comments$", 502, times=2)
    api.fail("PATCH", r"/issues/comments/\d+$", 503)
    result, _ = run(api, tmp_path, github_issue_event(REPO, 25, SHM_BODY, action="edited"))
    assert result.exit_code == 0, result.message
    assert [r.status for r in api.calls("GET", r"/issues/25/comments$")][-3:] == [502, 502, 200]
    assert [r.status for r in api.calls("PATCH", ".")] == [503, 200]
    assert len(api.comments(REPO, 25)) == 1


def test_a_create_whose_answer_was_lost_is_not_posted_twice(
    api: TrackerAPI, tmp_path: Path
) -> None:
    api.add_github_issue(REPO, 26)
    api.fail("POST", r"/issues/26/comments$", 502, after=True)  # created, answered 502
    result, _ = run(api, tmp_path, github_issue_event(REPO, 26, SHM_BODY))
    assert result.exit_code == 0, result.message
    assert len(api.comments(REPO, 26)) == 1
    assert len(api.calls("POST", r"/issues/26/comments$")) == 1  # a POST is not blindly retried


def test_a_refused_write_is_reported_without_a_traceback(api: TrackerAPI, tmp_path: Path) -> None:
    api.add_github_issue(REPO, 27)
    api.fail("POST", r"/comments$", 403, message="Resource not accessible by integration")
    result, _ = run(api, tmp_path, github_issue_event(REPO, 27, SHM_BODY))
    assert result.exit_code == 1
    assert "HTTP 403: Resource not accessible by integration" in result.message
    assert len(api.calls("POST", r"/comments$")) == 1  # a plain 403 is not retried


def test_long_threads_are_read_across_pages(api: TrackerAPI, tmp_path: Path) -> None:
    api.page_size = 2
    chatter = tuple(("bob", f"same here #{n}") for n in range(5))
    api.add_github_issue(REPO, 28, comments=(*chatter, ("alice", SHM_BODY)))
    event = github_comment_event(REPO, 28, VAGUE_BODY, 99, "/triage")
    result, _ = run(api, tmp_path, event)
    assert result.exit_code == 0, result.message
    assert len(api.calls("GET", r"/issues/28/comments$")) == 3  # 6 comments, 2 a page
    assert "`R05`" in api.comments(REPO, 28)[-1]["body"]


# ---------------------------------------------------------------------- the command line


def test_cli_bot_github_posts_and_reports_what_it_did(api: TrackerAPI, tmp_path: Path) -> None:
    api.add_github_issue(REPO, 30)
    event = tmp_path / "event.json"
    event.write_text(json.dumps(github_issue_event(REPO, 30, SHM_BODY)))
    env = {"GITHUB_TOKEN": ACTIONS_TOKEN, "GITHUB_EVENT_NAME": "issues"}
    result = CliRunner().invoke(
        main,
        ["bot", "github", "--event", str(event), "--api-url", api.github_url, "--no-embed"],
        env=env,
    )
    assert result.exit_code == 0, result.output
    assert "octo/train#30: created" in result.output
    assert len(api.comments(REPO, 30)) == 1


@pytest.mark.parametrize(
    ("content", "env", "message"),
    [
        (None, {"GITHUB_TOKEN": "x"}, "no such event file"),
        (b"{not json", {"GITHUB_TOKEN": "x"}, "not JSON"),
        (b"\xff\xfe\x00", {"GITHUB_TOKEN": "x"}, "cannot read the event file"),
        (json.dumps(github_issue_event(REPO, 1, "x")).encode(), {}, "GITHUB_TOKEN is not set"),
    ],
)
def test_cli_bad_input_is_a_usage_error_not_a_traceback(
    tmp_path: Path, content: bytes | None, env: dict[str, str], message: str
) -> None:
    event = tmp_path / "event.json"
    if content is not None:
        event.write_bytes(content)
    env = {"GITHUB_TOKEN": "", "GITHUB_EVENT_NAME": "issues", **env}
    result = CliRunner().invoke(
        main, ["bot", "github", "--event", str(event), "--api-url", "http://127.0.0.1:9"], env=env
    )
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output


def test_cli_api_url_must_be_a_web_address(tmp_path: Path) -> None:
    event = tmp_path / "event.json"
    event.write_text(json.dumps(github_issue_event(REPO, 1, SHM_BODY)))
    result = CliRunner().invoke(
        main,
        ["bot", "github", "--event", str(event), "--api-url", "ftp://example.com"],
        env={"GITHUB_TOKEN": "x", "GITHUB_EVENT_NAME": "issues"},
    )
    assert result.exit_code == 2
    assert "--api-url" in result.output
