"""The bot's two configuration files.

- `bot.yaml` (`triage serve --config`): the service's own settings, chosen by whoever runs it:
  which repositories it answers, the API URLs, limits, the work queue, and the defaults of the
  per-repository settings. A problem here is the operator's to fix: `SettingsError`, exit 2.
- `.github/triage.yml` (GitLab: `.gitlab/triage.yml` first) in each repository, read from its
  default branch: labels, silence, thresholds. Maintainers edit it, so a problem never stops the
  bot: the bad key keeps its default and the comment says what was wrong.

    bot.yaml                                 .github/triage.yml
    repositories: [octo/*, ml/train]         on_abstain: silent
    github: {api_url: https://...}           min_confidence: 0.4
    gitlab: {api_url: https://.../api/v4}    labels: {S17: hang, R05: infra}
    limits: {max_payload_bytes: 1048576,     abstain_labels: [needs-logs]
             queue_size: 64, workers: 2}     fetch_links: true
    fetch_links: {max_bytes: 5242880, hosts: [...]}
    embeddings: true
    defaults: {on_abstain: collect-next}
"""

from __future__ import annotations

import dataclasses
import fnmatch
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

__all__ = [
    "FetchLimits",
    "RepoSettings",
    "ServiceSettings",
    "SettingsError",
    "load_repo_settings",
    "load_service_settings",
]

ABSTAIN_MODES = ("silent", "collect-next", "full")


class SettingsError(ValueError):
    """bot.yaml is malformed: the message names the key."""


@dataclass(frozen=True)
class FetchLimits:
    """Attached log files, read only when a repository enables it. Hosts are an allow-list:
    the service must not become a way to reach addresses on its own network."""

    max_bytes: int = 5 * 2**20  # per file
    timeout_s: float = 10.0  # per file, the whole transfer
    max_links: int = 5  # per thread
    hosts: tuple[str, ...] = (
        "github.com",
        "objects.githubusercontent.com",
        "gist.githubusercontent.com",
        "gitlab.com",
    )
    allow_http: bool = False  # plain http (a test server on loopback); https otherwise


@dataclass(frozen=True)
class RepoSettings:
    """What a repository decides (`.github/triage.yml`); the service gives the defaults."""

    enabled: bool = True
    # what to do when triage abstains (or is below min_confidence): say nothing, post only
    # the list of evidence to add, or post the whole (uncertain) diagnosis
    on_abstain: str = "collect-next"
    min_confidence: float = 0.3  # below: treated as an abstention
    uncertain_below: float = 0.7  # below: the comment also lists the evidence that would help
    labels: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # taxonomy id/slug ->
    label_min_score: float = 0.5
    abstain_labels: tuple[str, ...] = ()  # e.g. needs-logs, added when abstaining
    duplicate_min_score: float = 0.75  # similar cases shown as likely duplicates
    command: str = "/triage"
    fetch_links: bool = False


@dataclass(frozen=True)
class ServiceSettings:
    github_api_url: str = "https://api.github.com"
    gitlab_api_url: str = "https://gitlab.com/api/v4"
    repositories: tuple[str, ...] | None = None  # patterns; None: every repository
    max_payload_bytes: int = 1 * 2**20
    queue_size: int = 64
    workers: int = 2
    max_connections: int = 64
    embeddings: bool = True
    rules_dirs: tuple[str, ...] = ()
    bot_login: str | None = None  # the bot's own account, when the API cannot say
    ignore_users: tuple[str, ...] = ()
    max_thread_chars: int = 1_000_000  # evidence read from one thread
    fetch: FetchLimits = FetchLimits()
    defaults: RepoSettings = RepoSettings()

    def allows(self, repo: str) -> bool:
        if self.repositories is None:
            return True
        name = repo.lower()
        return any(fnmatch.fnmatchcase(name, p.lower()) for p in self.repositories)


# ---------------------------------------------------------------------- bot.yaml


def load_service_settings(path: str | Path | None) -> ServiceSettings:
    if path is None:
        return ServiceSettings()
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingsError(f"{path}: cannot read: {exc}") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise SettingsError(f"{path}: not YAML: {exc}") from None
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        raise SettingsError(f"{path}: expected a mapping of settings")
    problems: list[str] = []
    base = ServiceSettings()
    known = {
        "repositories", "github", "gitlab", "limits", "embeddings", "rules", "bot_login",
        "ignore_users", "fetch_links", "defaults", "max_thread_chars",
    }  # fmt: skip
    for key in doc:
        if key not in known:
            problems.append(f"unknown key {key!r}")
    github = _mapping(doc, "github", problems)
    gitlab = _mapping(doc, "gitlab", problems)
    limits = _mapping(doc, "limits", problems)
    fetch = _mapping(doc, "fetch_links", problems)
    repositories = doc.get("repositories")
    if repositories is not None and not _strings(repositories):
        problems.append("repositories: expected a list of owner/name patterns")
        repositories = None
    defaults, repo_problems = _repo_settings(_mapping(doc, "defaults", problems), RepoSettings())
    problems += [f"defaults: {p}" for p in repo_problems]
    settings = ServiceSettings(
        github_api_url=_str(github, "api_url", base.github_api_url, problems, "github."),
        gitlab_api_url=_str(gitlab, "api_url", base.gitlab_api_url, problems, "gitlab."),
        repositories=tuple(repositories) if repositories is not None else None,
        max_payload_bytes=_int(
            limits, "max_payload_bytes", base.max_payload_bytes, problems, "limits."
        ),
        queue_size=_int(limits, "queue_size", base.queue_size, problems, "limits."),
        workers=_int(limits, "workers", base.workers, problems, "limits."),
        max_connections=_int(limits, "max_connections", base.max_connections, problems, "limits."),
        embeddings=_bool(doc, "embeddings", base.embeddings, problems),
        rules_dirs=tuple(_list(doc, "rules", problems)),
        bot_login=_str(doc, "bot_login", None, problems),
        ignore_users=tuple(_list(doc, "ignore_users", problems)),
        max_thread_chars=_int(doc, "max_thread_chars", base.max_thread_chars, problems),
        fetch=FetchLimits(
            max_bytes=_int(fetch, "max_bytes", base.fetch.max_bytes, problems, "fetch_links."),
            timeout_s=_float(fetch, "timeout_s", base.fetch.timeout_s, problems, "fetch_links."),
            max_links=_int(fetch, "max_links", base.fetch.max_links, problems, "fetch_links."),
            hosts=tuple(_list(fetch, "hosts", problems, "fetch_links.") or base.fetch.hosts),
            allow_http=_bool(fetch, "allow_http", False, problems, "fetch_links."),
        ),
        defaults=defaults,
    )
    if problems:
        raise SettingsError(f"{path}: " + "; ".join(problems))
    return settings


# ---------------------------------------------------------------------- .github/triage.yml


def load_repo_settings(text: str | None, defaults: RepoSettings) -> tuple[RepoSettings, list[str]]:
    """A repository's settings over the service's defaults, and every problem found (each
    bad key keeps its default)."""
    if text is None or not text.strip():
        return defaults, []
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        return defaults, [f"the file is not valid YAML{where}; defaults used"]
    if doc is None:
        return defaults, []
    if not isinstance(doc, dict):
        return defaults, ["expected a mapping of settings; defaults used"]
    return _repo_settings(doc, defaults)


def _repo_settings(doc: Mapping[str, Any], base: RepoSettings) -> tuple[RepoSettings, list[str]]:
    problems: list[str] = []
    names = {f.name for f in dataclasses.fields(RepoSettings)}
    for key in doc:
        if key not in names:
            problems.append(f"unknown key {key!r}")
    on_abstain = doc.get("on_abstain", base.on_abstain)
    if on_abstain not in ABSTAIN_MODES:
        problems.append(f"on_abstain: expected one of {', '.join(ABSTAIN_MODES)}")
        on_abstain = base.on_abstain
    labels: dict[str, tuple[str, ...]] = dict(base.labels)
    raw_labels = doc.get("labels")
    if raw_labels is not None:
        if isinstance(raw_labels, dict):
            labels = {}
            for key, value in raw_labels.items():
                names_ = [value] if isinstance(value, str) else value
                if not isinstance(key, str) or not _strings(names_) or not names_:
                    problems.append(f"labels: {key!r}: expected a label name or a list of them")
                    continue
                labels[key] = tuple(str(n) for n in names_)
        else:
            problems.append("labels: expected a mapping of taxonomy id or slug to label")
    command = _str(doc, "command", base.command, problems)
    if not command or not command.startswith("/") or len(command.split()) != 1:
        problems.append("command: expected one word starting with '/'")
        command = base.command
    settings = RepoSettings(
        enabled=_bool(doc, "enabled", base.enabled, problems),
        on_abstain=on_abstain,
        min_confidence=_score(doc, "min_confidence", base.min_confidence, problems),
        uncertain_below=_score(doc, "uncertain_below", base.uncertain_below, problems),
        labels=labels,
        label_min_score=_score(doc, "label_min_score", base.label_min_score, problems),
        abstain_labels=tuple(_list(doc, "abstain_labels", problems) or base.abstain_labels),
        duplicate_min_score=_score(doc, "duplicate_min_score", base.duplicate_min_score, problems),
        command=command,
        fetch_links=_bool(doc, "fetch_links", base.fetch_links, problems),
    )
    return settings, problems


# ---------------------------------------------------------------------- typed reads


def _mapping(doc: Mapping[str, Any], key: str, problems: list[str]) -> Mapping[str, Any]:
    value = doc.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        problems.append(f"{key}: expected a mapping")
        return {}
    return value


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(x, str) and x for x in value)


def _list(doc: Mapping[str, Any], key: str, problems: list[str], prefix: str = "") -> list[str]:
    value = doc.get(key)
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]
    if not _strings(value):
        problems.append(f"{prefix}{key}: expected a list of strings")
        return []
    return list(value)


def _str(
    doc: Mapping[str, Any], key: str, default: Any, problems: list[str], prefix: str = ""
) -> Any:
    value = doc.get(key, default)
    if value is not None and not isinstance(value, str):
        problems.append(f"{prefix}{key}: expected a string")
        return default
    return value


def _bool(
    doc: Mapping[str, Any], key: str, default: bool, problems: list[str], prefix: str = ""
) -> bool:
    value = doc.get(key, default)
    if not isinstance(value, bool):
        problems.append(f"{prefix}{key}: expected true or false")
        return default
    return value


def _int(
    doc: Mapping[str, Any], key: str, default: int, problems: list[str], prefix: str = ""
) -> int:
    value = doc.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        problems.append(f"{prefix}{key}: expected a whole number of at least 1")
        return default
    return value


def _float(
    doc: Mapping[str, Any], key: str, default: float, problems: list[str], prefix: str = ""
) -> float:
    value = doc.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        problems.append(f"{prefix}{key}: expected a positive number")
        return default
    return float(value)


def _score(doc: Mapping[str, Any], key: str, default: float, problems: list[str]) -> float:
    value = doc.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        problems.append(f"{key}: expected a number from 0 to 1")
        return default
    return float(value)
