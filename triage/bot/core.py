"""The tracker-neutral bot: extract -> diagnose -> render -> post or update.

An adapter (`github.py`, `gitlab.py`) turns its tracker's event into a `Request` and carries
out the few calls a `Tracker` offers; everything else happens here, once for both:

- who never gets an answer: the bot itself, other bots, users the operator lists;
- which comment is the bot's own: the hidden marker *and* the bot's account (a marker pasted
  by someone else is not enough), so an edited issue or a `/triage` updates it in place;
- the evidence: the issue's title and body and every human comment so far, attached logs
  when the repository enables it;
- the diagnosis: the pipeline's own `diagnose_parsed` on those pieces, hosts redacted;
- what to say: a full diagnosis, only the evidence to add, or nothing (per repository).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from triage.knowledge.advice import CollectNext
from triage.model import Diagnosis, ScoredLabel

from .comment import (
    CommentParts,
    asks_for,
    confidence,
    is_bot_comment,
    likely_duplicates,
    render_comment,
)
from .extract import Piece, extract_thread, has_command, make_piece, seen_evidence
from .fetch import attachment_links, fetch_log
from .rest import ApiError, RateLimited
from .settings import RepoSettings, ServiceSettings, load_repo_settings

__all__ = [
    "Author",
    "Ignored",
    "IssueRef",
    "Outcome",
    "Post",
    "Request",
    "Tracker",
    "diagnose_pieces",
    "respond",
]

log = logging.getLogger("triage.bot")
T = TypeVar("T")


@dataclass(frozen=True)
class Author:
    login: str
    is_bot: bool = False  # the tracker says so (GitHub `type: Bot`, GitLab bot names)


@dataclass(frozen=True)
class Post:
    id: int | None
    author: Author
    body: str
    system: bool = False  # GitLab's system notes ("changed the label ...")


@dataclass(frozen=True)
class IssueRef:
    tracker: str  # github | gitlab
    repo: str  # owner/name, group/sub/project
    number: int  # issue number (GitLab: iid)
    project_id: int | None = None  # GitLab's numeric project id
    default_branch: str | None = None
    web_url: str | None = None  # the project's page, for GitLab's relative upload links


@dataclass(frozen=True)
class Request:
    """One event the bot may answer."""

    ref: IssueRef
    reason: str  # opened | edited | command
    title: str
    body: str
    author: Author  # who opened the issue
    actor: Author  # whose action sent the event
    labels: tuple[str, ...] = ()  # the issue's labels now
    comment: Post | None = None  # the comment that sent the event (reason: command)


@dataclass(frozen=True)
class Ignored:
    """An event the bot does not answer, and why (logged, and the webhook's answer)."""

    reason: str


@dataclass(frozen=True)
class Outcome:
    action: str  # created | updated | unchanged | skipped | dry-run
    reason: str
    body: str | None = None
    labels: tuple[str, ...] = ()
    comment_id: int | None = None
    diagnosis: Diagnosis | None = field(default=None, repr=False)
    # a dry run's reads the API refused (it went on without them): said, not hidden
    unread: tuple[str, ...] = ()


class Tracker(Protocol):
    """The calls the core needs of a tracker. Each raises `ApiError` when the API refuses."""

    name: str  # github | gitlab
    config_name: str  # the settings file it reads, for messages: .github/triage.yml

    def identity(self) -> str | None:
        """The bot's own login, or None when the token cannot tell (GitHub Actions)."""

    def comments(self, ref: IssueRef) -> list[Post]: ...

    def create_comment(self, ref: IssueRef, body: str) -> int | None: ...

    def update_comment(self, ref: IssueRef, comment_id: int, body: str) -> None: ...

    def add_labels(self, ref: IssueRef, labels: Sequence[str]) -> None: ...

    def repo_config(self, ref: IssueRef) -> str | None:
        """The repository's bot settings file, None when it has none."""


def respond(
    req: Request,
    tracker: Tracker,
    settings: ServiceSettings,
    *,
    dry_run: bool = False,
) -> Outcome:
    """Answer one event: post or update the bot's comment (or say why not). Raises ApiError
    when the tracker fails a call the answer needs (after the retries); a dry run goes on
    without the reads that failed."""
    unread: list[str] = []  # a dry run's reads that failed: the result says which and why
    me = settings.bot_login or _read(dry_run, tracker.identity, None, unread)
    if _is_bot_or_self(req.actor, me, settings):
        return Outcome("skipped", f"the event came from a bot ({req.actor.login})")
    if req.author.is_bot and req.reason != "command":
        return Outcome("skipped", f"the issue was opened by a bot ({req.author.login})")
    if req.comment is not None and is_bot_comment(req.comment.body):
        return Outcome("skipped", "the comment is the bot's own")
    if req.reason == "command" and (req.comment is None or "/" not in req.comment.body):
        # every command starts with "/": most comments end here, before any API call
        return Outcome("skipped", "the comment does not ask for a run")
    repo, problems = _repo_settings(req, tracker, settings, dry_run, unread)
    if not repo.enabled:
        return Outcome("skipped", "the bot is disabled in this repository's settings")
    if req.reason == "command" and (
        req.comment is None or not has_command(req.comment.body, repo.command)
    ):
        return Outcome("skipped", f"the comment does not ask for {repo.command}")

    comments = _read(dry_run, lambda: tracker.comments(req.ref), [], unread)
    if req.comment is not None and all(c.id != req.comment.id for c in comments):
        comments.append(req.comment)  # the API may list it a moment after the event
    own = _own_comment(comments, me)
    pieces, notes = _evidence(req, comments, me, repo, settings)
    diagnosis = diagnose_pieces(pieces, settings)
    notes += [f"{tracker.config_name}: {p}" for p in problems]

    score = confidence(diagnosis)
    abstained = score is None or score < repo.min_confidence
    labels = list(repo.abstain_labels) if abstained else _labels(diagnosis, repo)
    have = {label.lower() for label in req.labels}
    new_labels = [label for label in dict.fromkeys(labels) if label.lower() not in have]

    mode = "full"
    if abstained:
        mode = "full" if repo.on_abstain == "full" else "collect-next"
        if repo.on_abstain == "silent" and own is None:
            if not dry_run and new_labels:
                tracker.add_labels(req.ref, new_labels)
            why = "abstained; this repository wants silence"
            return Outcome("skipped", why, None, tuple(new_labels), diagnosis=diagnosis)
    uncertain = abstained or (score is not None and score < repo.uncertain_below)
    collect = _collect_next(settings)
    parts = CommentParts(
        mode=mode,
        asks=asks_for(diagnosis, seen_evidence(pieces, collect), collect, abstained)
        if uncertain
        else (),
        duplicates=likely_duplicates(diagnosis, repo.duplicate_min_score),
        labels=tuple(dict.fromkeys(labels)),
        command=repo.command,
        notes=tuple(notes),
        tracker=tracker.name,
    )
    body = _redacted(render_comment(diagnosis, parts))
    if dry_run:
        what = f"would update comment {own.id}" if own is not None else "would create a comment"
        return Outcome(
            "dry-run", what, body, tuple(new_labels), diagnosis=diagnosis, unread=tuple(unread)
        )
    outcome = _post(req, tracker, body, own, me)
    if new_labels:
        tracker.add_labels(req.ref, new_labels)
    return Outcome(outcome[0], outcome[1], body, tuple(new_labels), outcome[2], diagnosis=diagnosis)


def diagnose_pieces(pieces: Sequence[Piece], settings: ServiceSettings) -> Diagnosis:
    """`triage explain` for a thread: each piece parsed as its sniffed kind, one diagnosis.
    Hosts, IPs, e-mails and home-folder users are always redacted: it is posted in public."""
    from triage import knowledge, parsers, pipeline

    options = pipeline.Options(
        use_embeddings=settings.embeddings,
        extra_rules_dirs=settings.rules_dirs,
        redact_hosts=True,
    )
    if not pieces:
        return pipeline.explain("", options)
    # the service's rules folders are read by the parser too: their lines become events
    kb = knowledge.load(options.extra_rules_dirs)
    parsed = [parsers.parse_text(p.text, name=p.name, kind=p.kind, kb=kb) for p in pieces]
    return pipeline.diagnose_parsed(parsed, options, kb)


def _collect_next(settings: ServiceSettings) -> CollectNext:
    """What to ask of a thread: the run's knowledge (shipped plus the service's rules)."""
    from triage import knowledge

    return knowledge.load(settings.rules_dirs).collect_next


# ---------------------------------------------------------------------- steps


def _evidence(
    req: Request,
    comments: Sequence[Post],
    me: str | None,
    repo: RepoSettings,
    settings: ServiceSettings,
) -> tuple[list[Piece], list[str]]:
    posts = [("issue", f"{req.title}\n\n{req.body}" if req.title else req.body)]
    for n, c in enumerate(comments, 1):
        if c.system or is_bot_comment(c.body) or _is_bot_or_self(c.author, me, settings):
            continue
        posts.append((f"comment-{n}", c.body))
    extracted = extract_thread(posts, max_chars=settings.max_thread_chars, base_url=req.ref.web_url)
    pieces = list(extracted.pieces)
    notes = list(extracted.notes)
    if repo.fetch_links:
        for url in attachment_links(extracted.links, settings.fetch):
            got = fetch_log(url, settings.fetch)
            if got.note:
                notes.append(f"attachment {got.name}: {got.note}")
            if got.text:
                pieces.append(make_piece(f"attachment/{got.name}", got.text))
    return pieces, notes


def _repo_settings(
    req: Request,
    tracker: Tracker,
    settings: ServiceSettings,
    dry_run: bool,
    unread: list[str] | None = None,
) -> tuple[RepoSettings, list[str]]:
    """The repository's settings. A file the token may not read (401, 403) leaves the
    defaults and a note; no answer, a 5xx or a rate limit ends the run (nothing could be
    posted either), except in a dry run."""
    try:
        text = tracker.repo_config(req.ref)
    except ApiError as exc:
        if exc.status in (401, 403) and not isinstance(exc, RateLimited):
            log.warning("%s: cannot read %s: %s", req.ref.repo, tracker.config_name, exc)
            why = f"could not be read (HTTP {exc.status}); the defaults were used"
            return load_repo_settings(None, settings.defaults)[0], [why]
        if not dry_run:
            raise
        log.info("dry run: %s; going on with the defaults", exc)
        if unread is not None:
            unread.append(str(exc))
        text = None
    return load_repo_settings(text, settings.defaults)


def _post(
    req: Request, tracker: Tracker, body: str, own: Post | None, me: str | None
) -> tuple[str, str, int | None]:
    if own is not None and own.id is not None:
        if own.body.strip() == body.strip():
            return "unchanged", "the comment already says this", own.id
        tracker.update_comment(req.ref, own.id, body)
        return "updated", f"updated comment {own.id}", own.id
    try:
        return "created", "created a comment", tracker.create_comment(req.ref, body)
    except ApiError as exc:
        if exc.status and exc.status < 500:
            raise
        # A 5xx or a lost answer may still have created it: look before posting again.
        log.warning("creating the comment failed (%s); checking whether it exists", exc)
        again = _own_comment(tracker.comments(req.ref), me)
        if again is not None and again.id is not None:
            if again.body.strip() != body.strip():
                tracker.update_comment(req.ref, again.id, body)
            return "created", "created a comment (found after a failed answer)", again.id
        return "created", "created a comment (second try)", tracker.create_comment(req.ref, body)


def _own_comment(comments: Sequence[Post], me: str | None) -> Post | None:
    """The bot's comment: the marker, written by the bot's account. When the token cannot
    say who it is (GitHub Actions' token), a bot account's comment with the marker."""
    for c in comments:
        if not is_bot_comment(c.body):
            continue
        if me is not None and c.author.login.lower() == me.lower():
            return c
        if me is None and c.author.is_bot:
            return c
    return None


def _is_bot_or_self(author: Author, me: str | None, settings: ServiceSettings) -> bool:
    login = author.login.lower()
    return (
        author.is_bot
        or (me is not None and login == me.lower())
        or login in {u.lower() for u in settings.ignore_users}
    )


def _labels(d: Diagnosis, repo: RepoSettings) -> list[str]:
    """Labels mapped from the taxonomy ids or slugs the diagnosis names with enough score."""
    if not repo.labels:
        return []
    found: list[ScoredLabel] = [*d.symptoms, *d.root_causes]
    if d.stage is not None:
        found.append(d.stage)
    out: list[str] = []
    for label in found:
        if label.score < repo.label_min_score:
            continue
        for key in (label.id, label.slug):
            out.extend(repo.labels.get(key, ()))
    for fix in d.fix_patterns:
        if fix.score >= repo.label_min_score:
            for key in (fix.id, fix.slug):
                out.extend(repo.labels.get(key, ()))
    return out


def _redacted(body: str) -> str:
    """A last pass of the secret patterns over the finished comment. The diagnosis was masked
    already (hosts too); this catches what a future section might add unmasked."""
    from triage.redact import redact_text

    return redact_text(body)


def _read(dry_run: bool, call: Callable[[], T], default: T, unread: list[str] | None = None) -> T:
    """A read that a dry run (often without a token) may survive failing; `unread` collects
    why it failed."""
    try:
        return call()
    except ApiError as exc:
        if not dry_run:
            raise
        log.info("dry run: %s; going on without it", exc)
        if unread is not None:
            unread.append(str(exc))
        return default
