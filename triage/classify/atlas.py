"""Which of the libraries' own messages (the atlas, `triage.knowledge.atlas`) a job's lines
instantiate, as evidence for classification.

Each template is anchored on its rarest whole word (one that no masked field can touch, so
the word appears in any line the template prints; chosen when the atlas was written,
`knowledge.atlas.with_anchors`): a line's words are looked up in one dict,
and only the few templates whose anchor it holds are verified with the template's regex. No
automaton is compiled at start-up, and a paste costs well under a millisecond per event.

A matched template with labels becomes a `RuleHit` marked `atlas`: fusion gives the atlas its
own feature, and the calibration learns how far to trust it next to the hand-written rules.
"""

from __future__ import annotations

import re
import warnings
import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from triage import regex_cache
from triage.classify.types import RuleHit
from triage.knowledge import Knowledge, shipped
from triage.knowledge.atlas import Atlas, AtlasError, Template, first_line
from triage.model import Analysis, Event, ParsedSource

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]{3,}")
# A field may hold a path, a list, a shape: bounded so a miss costs little.
_FIELD = r"[^\n]{0,400}?"
MAX_EVENTS = 400  # events of one job that are looked at (initiating ones first)
MAX_TEXT = 20_000  # characters of one event that are looked at
# weight of a labelled template's labels: reviewed by hand, or from a label rule alone
REVIEWED_WEIGHT = 0.9
RULE_WEIGHT = 0.6
FULL_LITERAL = 40  # literal characters at which a match counts in full


@dataclass(frozen=True)
class Match:
    template: Template
    event: Event
    ties: tuple[Template, ...]  # every template with the same literal text that matched
    text: str  # the line(s) the match spans
    line: int | None  # its file line, where the event has one
    literal: int = 0  # the template's literal characters the text holds (all, or its first line)


@dataclass
class Matcher:
    """The anchor table of one atlas; a template is read, and its regex compiled, when a line
    first holds its anchor."""

    atlas: Atlas
    anchors: dict[str, list[int]] = field(default_factory=dict)
    compiled: dict[int, re.Pattern[str]] = field(default_factory=dict)
    first_lines: dict[int, re.Pattern[str] | None] = field(default_factory=dict)

    def matches(self, text: str) -> list[tuple[Template, re.Match[str], tuple[str, ...]]]:
        """(template, match, the literal chunks matched) of every template the text
        instantiates, in full or, for a message of several lines, by its first line."""
        seen: set[int] = set()
        out = []
        for word in set(_WORD.findall(text)):
            for i in self.anchors.get(word, ()):
                if i in seen:
                    continue
                seen.add(i)
                t = self.atlas.template(i)
                pattern = self.compiled.get(i)
                if pattern is None:
                    pattern = self.compiled[i] = pattern_of(t)
                m = pattern.search(text)
                if m is not None:
                    out.append((t, m, t.parts))
                    continue
                if i not in self.first_lines:
                    self.first_lines[i] = first_line_pattern_of(t)
                head = self.first_lines[i]
                m = head.search(text) if head is not None else None
                if m is not None:
                    out.append((t, m, t.parts[:1]))
        return out


_MATCHERS: weakref.WeakKeyDictionary[Atlas, Matcher] = weakref.WeakKeyDictionary()


def matcher(atlas: Atlas) -> Matcher:
    """The atlas's matcher, built once per loaded atlas."""
    got = _MATCHERS.get(atlas)
    if got is None:
        anchors: dict[str, list[int]] = {}
        for i, word in enumerate(atlas.anchors):
            if word:
                anchors.setdefault(word, []).append(i)
        got = _MATCHERS[atlas] = Matcher(atlas, anchors)
    return got


def pattern_of(t: Template) -> re.Pattern[str]:
    """The template as a regex: literal chunks (any run of whitespace matching any), fields
    between them."""
    chunks = [_literal(part) for part in t.parts]
    chunks = [
        # a chunk of whitespace alone (`"{} {}"`, a `"\n"` before a field) matches any run
        # of it, none included (a paste may end there), not one run on each side
        r"\s*"
        if part.isspace()
        else (r"\s+" if part[:1].isspace() and n else "")
        + c
        + (r"\s+" if part[-1:].isspace() and n < len(t.parts) - 1 else "")
        for n, (part, c) in enumerate(zip(t.parts, chunks, strict=True))
    ]
    # the stdlib's `re`: it compiles these plain patterns in half the time `regex` takes, and
    # the compiled form is kept on disk for the next run (`regex_cache.compile_std`)
    return regex_cache.compile_std(_FIELD.join(c for c in chunks if c))


def first_line_pattern_of(t: Template) -> re.Pattern[str] | None:
    """The first line of a message the template prints over several lines (`first_line`), as
    a regex that ends where a line ends; None when it has none that names it."""
    head = first_line(t)
    if head is None:
        return None
    return regex_cache.compile_std(_literal(head) + r"[ \t]*$", re.M)


def _literal(part: str) -> str:
    """A template's literal chunk as a regex: its words in order, any whitespace between."""
    return r"\s+".join(re.escape(w) for w in part.split())


def find(atlas: Atlas, events: Iterable[Event]) -> list[Match]:
    """The templates the events instantiate: for each matched span, the most specific one
    (the most literal text)."""
    m = matcher(atlas)
    if not m.anchors:
        return []
    out: list[Match] = []
    for n, ev in enumerate(events):
        if n >= MAX_EVENTS:
            break
        text = ev.text[:MAX_TEXT]
        found = m.matches(text)
        ties: dict[int, list[Template]] = {}
        best: dict[int, tuple[tuple[str, ...], Template, re.Match[str]]] = {}
        for t, hit, chunks in found:
            line = text.count("\n", 0, hit.start())
            if line not in best or _size(chunks) > _size(best[line][0]):
                best[line] = (chunks, t, hit)
                ties[line] = [t]
            elif chunks == best[line][0]:
                ties[line].append(t)
        for line, (chunks, t, hit) in sorted(best.items()):
            # quoted as the whole line(s) it spans: evidence quotes lines as the file has them
            start = text.rfind("\n", 0, hit.start()) + 1
            end = text.find("\n", hit.end())
            quoted = text[start : end if end >= 0 else len(text)].strip()
            out.append(Match(t, ev, tuple(ties[line]), quoted, _file_line(ev, line), _size(chunks)))
    return out


def _size(chunks: Sequence[str]) -> int:
    return sum(len(c.strip()) for c in chunks)


def _file_line(ev: Event, offset: int) -> int | None:
    numbers = ev.line_numbers
    if numbers and offset < len(numbers) and numbers[offset] is not None:
        return int(numbers[offset])
    return ev.line + offset if ev.line is not None else None


def job_hits(
    parsed: Sequence[ParsedSource],
    analysis: Analysis,
    lead: Sequence[Event],
    kb: Knowledge | None = None,
) -> list[RuleHit]:
    """The libraries' own messages in the job's initiating events (`lead`; all its events when
    correlate named none), as hits of the atlas layer. None in a job that ended well with no
    fault in its logs: the atlas names messages, not whether they ended the job. Malformed
    atlas data is an AtlasError; a matching bug only a warning. `kb`: the run's knowledge
    (None: the shipped one)."""
    if analysis.outcome is not None and analysis.outcome.clean:
        return []
    kb = kb if kb is not None else shipped()
    events = list(lead) or [ev for ps in parsed for ev in ps.events]
    try:
        return hits(find(kb.atlas, events))
    except AtlasError:
        raise
    except Exception as exc:  # noqa: BLE001 - a matching bug must not stop the run
        warnings.warn(f"atlas matching failed: {type(exc).__name__}: {exc}", stacklevel=2)
        return []


def hits(matches: Sequence[Match]) -> list[RuleHit]:
    """The labelled matches as rule hits of their own layer (`atlas`). The same text printed by
    several libraries or functions says only what all of them agree on."""
    out = []
    for match in matches:
        t = match.template
        agreed = {
            f: label
            for f, label in t.labels.items()
            if all(other.labels.get(f) == label for other in match.ties)
        }
        if not (agreed.get("symptom") or agreed.get("root_cause")):
            continue
        literal = match.literal
        sure = all(other.reviewed for other in match.ties)
        weight = (REVIEWED_WEIGHT if sure else RULE_WEIGHT) * min(1.0, literal / FULL_LITERAL)
        fields = ("symptom", "root_cause", "fix", "stage")
        labels = {f: ({agreed[f]: weight} if f in agreed else {}) for f in fields}
        out.append(
            RuleHit(
                rule_id=f"atlas:{t.lib}:{t.function or t.file}",
                title=f"{t.lib}'s own message ({t.type}, {t.file}"
                + (f", {t.function}" if t.function else "")
                + ")",
                event=match.event,
                symptom=labels["symptom"],
                root_cause=labels["root_cause"],
                fix=labels["fix"],
                stage=labels["stage"],
                evidence_text=match.text[:400],
                evidence_line=match.line,
                atlas=True,
                reviewed=sure,
            )
        )
    return out
