"""The bot's settings files, and the REST client's rules for where the token may go.

A repository's `.github/triage.yml` is maintainers' text: every mistake in it is reported at
once and keeps that key's default. `bot.yaml` is the operator's: any mistake stops the start.
"""

from __future__ import annotations

import re
import time
from email.utils import formatdate
from pathlib import Path
from typing import Any

import pytest
from tracker_api import TrackerAPI

from triage.bot.rest import ApiError, RestClient, RetryPolicy
from triage.bot.settings import (
    RepoSettings,
    ServiceSettings,
    SettingsError,
    load_repo_settings,
    load_service_settings,
)


def test_a_repository_file_overrides_the_service_defaults() -> None:
    defaults = RepoSettings(on_abstain="silent", min_confidence=0.2)
    settings, problems = load_repo_settings(
        "min_confidence: 0.5\nlabels:\n  S17: hang\n  R05: [infra, shm]\n", defaults
    )
    assert problems == []
    assert settings.on_abstain == "silent"  # kept from the service
    assert settings.min_confidence == 0.5
    assert settings.labels == {"S17": ("hang",), "R05": ("infra", "shm")}


def test_every_mistake_in_a_repository_file_is_reported_and_keeps_its_default() -> None:
    text = (
        "on_abstain: loud\nmin_confidence: 2\nlabels: {S17: [1, 2], R05: ok}\n"
        "command: triage please\nenabled: yes-please\nsurprise: 1\n"
    )
    settings, problems = load_repo_settings(text, RepoSettings())
    assert len(problems) == 6, problems
    assert any("on_abstain" in p for p in problems) and any("surprise" in p for p in problems)
    assert settings.on_abstain == "collect-next" and settings.min_confidence == 0.3
    assert settings.command == "/triage" and settings.enabled is True
    assert settings.labels == {"R05": ("ok",)}  # the good entry stays


@pytest.mark.parametrize("text", ["[1, 2]", "a: [", "\x00\x01", "- just\n- a list"])
def test_a_repository_file_that_is_not_a_mapping_leaves_the_defaults(text: str) -> None:
    settings, problems = load_repo_settings(text, RepoSettings())
    assert settings == RepoSettings()
    assert problems


def test_bot_yaml_is_read_whole_and_its_mistakes_stop_the_start(tmp_path: Path) -> None:
    good = tmp_path / "bot.yaml"
    good.write_text(
        "repositories: [octo/*]\nlimits: {queue_size: 8, workers: 3}\nembeddings: false\n"
        "fetch_links: {hosts: [files.example.com], max_bytes: 1000}\n"
        "defaults: {on_abstain: silent}\n"
    )
    settings = load_service_settings(good)
    assert settings.queue_size == 8 and settings.workers == 3 and not settings.embeddings
    assert settings.fetch.hosts == ("files.example.com",) and settings.fetch.max_bytes == 1000
    assert settings.defaults.on_abstain == "silent"
    assert settings.allows("octo/train") and settings.allows("OCTO/Train")
    assert not settings.allows("other/train")
    assert ServiceSettings().allows("anyone/anything")  # no list: every repository

    bad = tmp_path / "bad.yaml"
    bad.write_text("limits: {queue_size: -1, workers: two}\ndefaults: {on_abstain: 3}\n")
    with pytest.raises(SettingsError) as error:
        load_service_settings(bad)
    message = str(error.value)
    assert "limits.queue_size" in message and "limits.workers" in message
    assert "defaults: on_abstain" in message


# ---------------------------------------------------------------------- REST client


@pytest.fixture
def api() -> Any:
    api = TrackerAPI().start()
    api.add_user("tok", "someone")
    yield api
    api.stop()


def client(api: TrackerAPI, **retry: Any) -> RestClient:
    policy = RetryPolicy(base_delay=0.01, max_delay=0.02, **retry)
    return RestClient(api.github_url, {"Authorization": "Bearer tok"}, retry=policy)


def test_retry_after_may_be_an_http_date(api: TrackerAPI) -> None:
    api.fail("GET", "^/user$", 429, {"Retry-After": formatdate(time.time() + 2, usegmt=True)})
    started = time.monotonic()
    assert client(api).request("GET", "/user").data["login"] == "someone"
    assert time.monotonic() - started >= 0.9  # the date has whole seconds: 1 to 2 s


def test_the_token_never_goes_to_another_origin(api: TrackerAPI) -> None:
    rest = client(api)
    with pytest.raises(ValueError, match="another origin"):
        rest.request("GET", "https://evil.example.com/steal")
    # a Link header pointing elsewhere ends the pagination instead of following it
    api.add_github_issue("o/r", 1, comments=(("a", "1"), ("b", "2"), ("c", "3")))
    api.page_size = 2
    rest._origin = ("http", "elsewhere:1")  # what the API's own links would not match
    items, more = rest.pages("/repos/o/r/issues/1/comments", {"per_page": 2})
    assert len(items) == 2 and more is False


def test_a_redirect_is_not_followed_with_the_token(api: TrackerAPI) -> None:
    api.serve_file("moved", b"", redirect="http://127.0.0.1:9/elsewhere")
    rest = RestClient(api.url, {"Authorization": "Bearer tok"}, retry=RetryPolicy(attempts=1))
    with pytest.raises(ApiError) as error:
        rest.request("GET", "/files/moved")
    assert error.value.status == 302


def test_an_api_that_never_answers_is_an_error_not_a_hang() -> None:
    rest = RestClient("http://127.0.0.1:9", retry=RetryPolicy(attempts=2, base_delay=0.01))
    with pytest.raises(ApiError) as error:
        rest.request("GET", "/user")
    assert error.value.status == 0 and "no answer" in str(error.value)


def test_the_readme_examples_of_both_files_are_valid(tmp_path: Path) -> None:
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```yaml\n(.*?)```", readme, re.DOTALL)
    [service] = [b for b in blocks if b.startswith("# bot.yaml")]
    [repo] = [b for b in blocks if b.startswith("enabled: true")]
    path = tmp_path / "bot.yaml"
    path.write_text(service)
    assert load_service_settings(path).repositories == ("octo/*", "ml/train")
    settings, problems = load_repo_settings(repo, RepoSettings())
    assert problems == []
    assert settings.labels["R05"] == ("infra", "area: containers")
