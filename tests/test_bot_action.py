"""The GitHub Action runs from the README's example workflow.

The test plays the runner: it reads the example workflow out of README.md and `action.yml`,
evaluates the `${{ }}` expressions a runner would (github, secrets, inputs contexts; the job's
`if:`), and runs each of the action's `run:` steps with bash and the environment a runner
gives (GITHUB_EVENT_PATH, GITHUB_API_URL, RUNNER_TEMP, GITHUB_PATH...), against a loopback
server answering like GitHub's API. Two inputs differ from a hosted runner's run, and say so:
`install: "false"` (triage is installed in this test's environment already; the install step
still runs, and skips) and `embed: "false"` (no embedding model: it takes 26 s to load cold).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from bot_samples import SHM_BODY
from tracker_api import TrackerAPI, github_comment_event, github_issue_event

from triage.bot.comment import MARKER

ROOT = Path(__file__).resolve().parents[1]
ACTION = yaml.safe_load((ROOT / "action.yml").read_text(encoding="utf-8"))
TOKEN = "ghs_runnerTokenForTheTestsOnly00000000001"
REPO = "octo/train"
TEST_INPUTS = {"install": "false", "embed": "false"}


def example_workflow() -> dict[str, Any]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for block in re.findall(r"```yaml\n(.*?)```", readme, re.DOTALL):
        doc = yaml.safe_load(block)
        if isinstance(doc, dict) and "jobs" in doc and "/triage@" in block:
            return doc
    raise AssertionError("README.md has no example workflow that uses the action")


WORKFLOW = example_workflow()
JOB = next(iter(WORKFLOW["jobs"].values()))
STEP = next(s for s in JOB["steps"] if "/triage@" in str(s.get("uses", "")))


# ---------------------------------------------------------------------- expressions


class Expression:
    """The part of GitHub's expression language the workflow and the action use: contexts,
    string literals, == and != (strings compared ignoring case, as GitHub does), !, &&, ||,
    parentheses, contains/startsWith/endsWith. Anything else fails the test."""

    TOKEN = re.compile(r"\s*(?:('(?:[^']|'')*')|(==|!=|&&|\|\||!|\(|\)|,)|([A-Za-z_][\w.-]*))")

    def __init__(self, text: str, contexts: dict[str, Any]) -> None:
        self.tokens: list[tuple[str, str]] = []
        pos = 0
        text = text.strip()
        while pos < len(text):
            m = self.TOKEN.match(text, pos)
            assert m and m.end() > pos, f"cannot read the expression {text!r} at {pos}"
            kind = "str" if m.group(1) else "op" if m.group(2) else "word"
            self.tokens.append((kind, m.group(1) or m.group(2) or m.group(3)))
            pos = m.end()
        self.contexts = contexts
        self.pos = 0

    def value(self) -> Any:
        out = self._or()
        assert self.pos == len(self.tokens), f"unread tokens: {self.tokens[self.pos :]}"
        return out

    def _peek(self) -> str | None:
        return self.tokens[self.pos][1] if self.pos < len(self.tokens) else None

    def _take(self) -> tuple[str, str]:
        self.pos += 1
        return self.tokens[self.pos - 1]

    def _or(self) -> Any:
        left = self._and()
        while self._peek() == "||":
            self._take()
            right = self._and()
            left = left or right
        return left

    def _and(self) -> Any:
        left = self._compare()
        while self._peek() == "&&":
            self._take()
            right = self._compare()
            left = left and right
        return left

    def _compare(self) -> Any:
        left = self._unary()
        if self._peek() in ("==", "!="):
            op = self._take()[1]
            right = self._unary()
            same = _fold(left) == _fold(right)
            return same if op == "==" else not same
        return left

    def _unary(self) -> Any:
        if self._peek() == "!":
            self._take()
            return not self._unary()
        return self._primary()

    def _primary(self) -> Any:
        kind, text = self._take()
        if text == "(":
            out = self._or()
            assert self._take()[1] == ")"
            return out
        if kind == "str":
            return text[1:-1].replace("''", "'")
        if self._peek() == "(":
            self._take()
            args = [self._or()]
            while self._peek() == ",":
                self._take()
                args.append(self._or())
            assert self._take()[1] == ")"
            return _call(text, args)
        if text in ("true", "false", "null"):
            return {"true": True, "false": False, "null": None}[text]
        value: Any = self.contexts
        for part in text.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        return value


def _fold(value: Any) -> Any:
    return value.lower() if isinstance(value, str) else value


def _call(name: str, args: list[Any]) -> bool:
    a, b = (str(x if x is not None else "").lower() for x in args)
    functions = {"contains": b in a, "startswith": a.startswith(b), "endswith": a.endswith(b)}
    assert name.lower() in functions, f"unknown function {name}"
    return functions[name.lower()]


def interpolate(text: Any, contexts: dict[str, Any]) -> str:
    def one(m: re.Match[str]) -> str:
        value = Expression(m.group(1), contexts).value()
        return (
            "" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
        )

    return re.sub(r"\$\{\{(.*?)\}\}", one, str(text))


# ---------------------------------------------------------------------- the runner


def run_action(
    api: TrackerAPI, tmp_path: Path, event_name: str, payload: dict[str, Any], **inputs: str
) -> tuple[bool, list[subprocess.CompletedProcess[str]]]:
    """Run the example workflow's job for one event: (whether the job ran, each step)."""
    event_path = tmp_path / "event.json"
    event_path.write_text(json.dumps(payload), encoding="utf-8")
    github = {
        "token": TOKEN,
        "api_url": api.github_url,
        "action_path": str(ROOT),
        "event_name": event_name,
        "event": payload,
        "repository": REPO,
        "workspace": str(tmp_path / "workspace"),
    }
    contexts: dict[str, Any] = {"github": github, "secrets": {"GITHUB_TOKEN": TOKEN}}
    if "if" in JOB and not Expression(JOB["if"], contexts).value():
        return False, []
    given = {k: interpolate(v, contexts) for k, v in (STEP.get("with") or {}).items()}
    assert set(given) <= set(ACTION["inputs"]), "the workflow passes an input the action lacks"
    defaults = {k: interpolate(v.get("default", ""), contexts) for k, v in ACTION["inputs"].items()}
    contexts["inputs"] = {**defaults, **given, **TEST_INPUTS, **inputs}
    (tmp_path / "workspace").mkdir(exist_ok=True)
    temp = tmp_path / "runner-temp"
    temp.mkdir(exist_ok=True)
    files = {
        name: tmp_path / name.lower() for name in ("GITHUB_PATH", "GITHUB_ENV", "GITHUB_OUTPUT")
    }
    for file in files.values():
        file.touch()
    path = [str(Path(sys.executable).parent), os.environ.get("PATH", "/usr/bin:/bin")]
    runner_env = {
        "CI": "true",
        "GITHUB_ACTIONS": "true",
        "HOME": str(tmp_path),
        "LANG": "C.UTF-8",
        "GITHUB_EVENT_PATH": str(event_path),
        "GITHUB_EVENT_NAME": event_name,
        "GITHUB_REPOSITORY": REPO,
        "GITHUB_API_URL": api.github_url,
        "GITHUB_ACTION_PATH": str(ROOT),
        "GITHUB_WORKSPACE": github["workspace"],
        "RUNNER_TEMP": str(temp),
        **{name: str(file) for name, file in files.items()},
    }
    done = []
    for step in ACTION["runs"]["steps"]:
        assert "run" in step, "a step of the composite action is not a run: step"
        assert step.get("shell") == "bash"
        script = tmp_path / "step.sh"
        script.write_text(interpolate(step["run"], contexts), encoding="utf-8")
        env = {k: interpolate(v, contexts) for k, v in (step.get("env") or {}).items()}
        env = {**runner_env, "PATH": os.pathsep.join(path), **env}
        # the runner's own command for shell: bash
        proc = subprocess.run(
            ["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
            env=env, cwd=github["workspace"], capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        done.append(proc)
        assert proc.returncode == 0, f"step {step.get('name')!r} failed:\n{proc.stderr}"
        # what a step appends to GITHUB_PATH is on PATH for the steps after it
        path = [*files["GITHUB_PATH"].read_text().split(), *path]
    return True, done


@pytest.fixture
def api() -> Any:
    api = TrackerAPI().start()
    api.add_user(TOKEN, "github-actions[bot]", "Bot", can_ask_who=False)
    yield api
    api.stop()


def test_the_example_workflow_listens_for_what_the_bot_answers() -> None:
    on = WORKFLOW.get("on", WORKFLOW.get(True))  # YAML 1.1 reads a bare `on` as true
    assert on["issues"]["types"] == ["opened", "edited"]
    assert on["issue_comment"]["types"] == ["created"]
    assert WORKFLOW["permissions"]["issues"] == "write"


def test_the_action_comments_on_a_new_issue_from_the_example_workflow(
    api: TrackerAPI, tmp_path: Path
) -> None:
    api.add_github_issue(REPO, 7)
    ran, steps = run_action(api, tmp_path, "issues", github_issue_event(REPO, 7, SHM_BODY))
    assert ran and len(steps) == 2
    [comment] = api.comments(REPO, 7)
    assert comment["body"].startswith(MARKER) and "`R05`" in comment["body"]
    assert comment["user"]["login"] == "github-actions[bot]"
    assert "octo/train#7: created" in steps[-1].stderr
    posted = api.calls("POST", r"/issues/7/comments$")[0]
    assert posted.headers["authorization"] == f"Bearer {TOKEN}"  # secrets.GITHUB_TOKEN


def test_a_triage_comment_runs_the_job_and_updates_the_comment(
    api: TrackerAPI, tmp_path: Path
) -> None:
    api.add_github_issue(REPO, 8)
    run_action(api, tmp_path, "issues", github_issue_event(REPO, 8, "it broke"))
    event = github_comment_event(REPO, 8, SHM_BODY, 5, "/triage")
    ran, _ = run_action(api, tmp_path, "issue_comment", event)
    assert ran
    [comment] = api.comments(REPO, 8)
    assert "`R05`" in comment["body"]


@pytest.mark.parametrize(
    ("event_name", "payload"),
    [
        ("issue_comment", github_comment_event(REPO, 9, SHM_BODY, 5, "thanks!")),
        (
            "issue_comment",
            github_comment_event(
                REPO, 9, SHM_BODY, 5, "/triage", sender="x[bot]", sender_type="Bot"
            ),
        ),  # noqa: E501
        (
            "issues",
            github_issue_event(REPO, 9, SHM_BODY, sender="renovate[bot]", sender_type="Bot"),
        ),  # noqa: E501
    ],
)
def test_the_job_does_not_start_for_plain_comments_or_bots(
    api: TrackerAPI, tmp_path: Path, event_name: str, payload: dict[str, Any]
) -> None:
    ran, _ = run_action(api, tmp_path, event_name, payload)
    assert not ran
    assert api.requests == []


def test_a_dry_run_prints_the_comment_in_the_job_log(api: TrackerAPI, tmp_path: Path) -> None:
    api.add_github_issue(REPO, 10)
    _, steps = run_action(
        api, tmp_path, "issues", github_issue_event(REPO, 10, SHM_BODY), **{"dry-run": "true"}
    )
    assert steps[-1].stdout.startswith(MARKER)
    assert api.writes() == []


def test_no_step_pastes_an_input_into_its_script() -> None:
    # ${{ }} in a run: script is pasted in before bash reads it: issue text could become code
    for step in ACTION["runs"]["steps"]:
        assert "${{" not in step["run"], step.get("name")
