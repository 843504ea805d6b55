"""The bot on GitLab: `triage bot gitlab --event "$TRIGGER_PAYLOAD"` in a CI job, notes API;
and no payload of either tracker, however odd, makes an adapter raise.

Real bot, real HTTP: a loopback server answers like GitLab's API v4 (tests/tracker_api.py).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from bot_samples import FAST_RETRY, SETTINGS, SHM_BODY, VAGUE_BODY
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from tracker_api import (
    TrackerAPI,
    github_comment_event,
    github_issue_event,
    gitlab_issue_event,
    gitlab_note_event,
)

from triage.bot import github, gitlab
from triage.bot.ci import CiResult, run_ci
from triage.bot.comment import MARKER
from triage.bot.core import Ignored, Request
from triage.cli import main

PROJECT = 42
PATH = "ml/train"
TOKEN = "glpat-testsOnlyToken000000"


@pytest.fixture
def api() -> Any:
    api = TrackerAPI().start()
    api.add_user(TOKEN, "project_42_bot_3f2a", "Bot")
    yield api
    api.stop()


def run(api: TrackerAPI, tmp_path: Path, event: dict[str, Any], **kw: Any) -> CiResult:
    path = tmp_path / "payload.json"
    path.write_text(json.dumps(event), encoding="utf-8")
    env = {"GITLAB_TOKEN": TOKEN, "CI_API_V4_URL": api.gitlab_url}
    return run_ci(
        "gitlab",
        str(path),
        api_url=None,
        dry_run=kw.get("dry_run", False),
        settings=SETTINGS,
        env=env,
        echo=lambda _: None,
        retry=FAST_RETRY,
    )


def test_an_opened_issue_gets_one_note(api: TrackerAPI, tmp_path: Path) -> None:
    api.add_gitlab_issue(PROJECT, 3)
    result = run(api, tmp_path, gitlab_issue_event(PROJECT, PATH, 3, SHM_BODY))
    assert result.exit_code == 0, result.message
    [note] = api.notes(PROJECT, 3)
    assert note["body"].startswith(MARKER) and "`R05`" in note["body"]
    assert note["author"]["username"] == "project_42_bot_3f2a"
    post = api.calls("POST", r"/projects/42/issues/3/notes$")[0]
    assert post.headers["private-token"] == TOKEN


def test_a_description_edit_updates_the_note(api: TrackerAPI, tmp_path: Path) -> None:
    api.add_gitlab_issue(PROJECT, 4)
    run(api, tmp_path, gitlab_issue_event(PROJECT, PATH, 4, VAGUE_BODY))
    edited = gitlab_issue_event(
        PROJECT, PATH, 4, SHM_BODY, action="update", changes={"description": {"previous": "x"}}
    )
    result = run(api, tmp_path, edited)
    assert result.exit_code == 0 and "updated" in result.message, result.message
    [note] = api.notes(PROJECT, 4)
    assert "`R05`" in note["body"]
    assert len(api.calls("PUT", r"/notes/\d+$")) == 1


def test_a_label_change_is_not_an_edit(api: TrackerAPI, tmp_path: Path) -> None:
    # GitLab sends `update` for the bot's own label changes too: answering it would loop
    event = gitlab_issue_event(
        PROJECT, PATH, 5, SHM_BODY, action="update", changes={"labels": {"previous": []}}
    )
    result = run(api, tmp_path, event)
    assert result.message.startswith("ignored")
    assert api.requests == []


def test_a_triage_note_reruns_on_the_thread(api: TrackerAPI, tmp_path: Path) -> None:
    api.add_gitlab_issue(PROJECT, 6, notes=(("alice", SHM_BODY), ("carol", "/triage")))
    with api.lock:
        api.gitlab[(PROJECT, 6)].comments.append(
            {"id": 77, "author": {"username": "ghost"}, "body": "changed label", "system": True}
        )
    note_id = api.notes(PROJECT, 6)[1]["id"]
    result = run(api, tmp_path, gitlab_note_event(PROJECT, PATH, 6, VAGUE_BODY, note_id, "/triage"))
    assert result.exit_code == 0 and "created" in result.message, result.message
    bot = api.notes(PROJECT, 6)[-1]
    assert "`R05`" in bot["body"] and "comment-1/block-1" in bot["body"]


@pytest.mark.parametrize(
    "event",
    [
        gitlab_note_event(PROJECT, PATH, 7, SHM_BODY, 1, "/triage", noteable_type="MergeRequest"),
        gitlab_note_event(PROJECT, PATH, 7, SHM_BODY, 1, "/triage", username="project_42_bot_3f2a"),
        gitlab_note_event(PROJECT, PATH, 7, SHM_BODY, 1, "/triage", username="renovate-bot"),
        gitlab_issue_event(PROJECT, PATH, 7, SHM_BODY, action="close"),
        {"object_kind": "push", "project": {"id": PROJECT}},
        {"object_kind": "issue", "project": "nope", "object_attributes": {}},
    ],
)
def test_bots_merge_requests_and_other_hooks_get_no_note(
    api: TrackerAPI, tmp_path: Path, event: dict[str, Any]
) -> None:
    api.add_gitlab_issue(PROJECT, 7)
    result = run(api, tmp_path, event)
    assert result.exit_code == 0
    assert api.writes() == []


def test_the_repository_settings_file_is_read_from_the_default_branch(
    api: TrackerAPI, tmp_path: Path
) -> None:
    api.files[(str(PROJECT), ".gitlab/triage.yml")] = "labels: {R05: infra::shm}\n"
    api.add_gitlab_issue(PROJECT, 8)
    result = run(api, tmp_path, gitlab_issue_event(PROJECT, PATH, 8, SHM_BODY))
    assert result.exit_code == 0, result.message
    assert api.labels((PROJECT, 8)) == ["infra::shm"]
    [read] = api.calls("GET", r"/repository/files/")
    assert read.query == {"ref": "main"}


def test_the_webhook_token_is_compared_whole(tmp_path: Path) -> None:
    assert gitlab.verify_token("s3cret", "s3cret")
    assert not gitlab.verify_token("s3cret", "s3cre")
    assert not gitlab.verify_token("s3cret", None)
    assert not gitlab.verify_token("", "")
    assert not gitlab.verify_token("s3cret", "s3cret\u00e9")


def test_cli_bot_gitlab_dry_run_needs_no_token(api: TrackerAPI, tmp_path: Path) -> None:
    api.add_gitlab_issue(PROJECT, 9)
    path = tmp_path / "payload.json"
    path.write_text(json.dumps(gitlab_issue_event(PROJECT, PATH, 9, SHM_BODY)))
    result = CliRunner().invoke(
        main,
        ["bot", "gitlab", "--event", str(path), "--dry-run", "--no-embed"],
        env={"CI_API_V4_URL": api.gitlab_url, "GITLAB_TOKEN": ""},
    )
    assert result.exit_code == 0, result.output
    assert MARKER in result.output and "would create a comment" in result.output
    assert api.writes() == []


# Any JSON at all, and real payloads with any one field replaced by any JSON value.
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=20,
)
_REAL = [
    ("issues", github_issue_event("o/r", 1, "body", labels=("a",))),
    ("issue_comment", github_comment_event("o/r", 1, "body", 5, "/triage")),
    (None, gitlab_issue_event(1, "g/p", 2, "d", changes={"description": {}})),
    (None, gitlab_note_event(1, "g/p", 2, "d", 3, "/triage")),
]


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(value, dict):
        for key, item in value.items():
            out += _paths(item, (*prefix, key))
    return out


_MUTATIONS = [(n, path) for n, (_, payload) in enumerate(_REAL) for path in _paths(payload)]


@settings(max_examples=400, deadline=None)
@given(mutation=st.sampled_from(_MUTATIONS), value=_json, other=_json)
def test_no_payload_makes_either_adapter_raise(
    mutation: tuple[int, tuple[Any, ...]], value: Any, other: Any
) -> None:
    n, path = mutation
    event, payload = copy.deepcopy(_REAL[n][0]), copy.deepcopy(_REAL[n][1])
    node = payload
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    for parsed in (
        github.parse_event(event, payload),
        github.parse_event(None, payload),
        gitlab.parse_event(payload),
        github.parse_event(event, other),
        gitlab.parse_event(other),
    ):
        assert isinstance(parsed, (Request, Ignored))
