"""The message atlas: what the libraries themselves raise and log, harvested from their source.

Two parts:

- `models/atlas/` (gathered, `bench/harvest_atlas.py`): `templates.jsonl.gz`, one message
  template per line (its literal chunks, exception type or log level, library, file,
  function, the checked condition, the releases it was found in, and its labels), and
  `manifest.json` (library versions, counts, the command that rebuilt it). Read on first use,
  never at import: `Knowledge.atlas` holds only where it is.
- `rules/atlas_labels.yaml` (`kind: atlas_labels`, by hand): how a template's code context
  labels it (ordered rules: the first whose conditions all hold gives the labels), and the
  templates reviewed by hand, by id, with their corrected labels (`labels: {}` when none
  applies). The harvester writes each template's labels from this file; a test checks that the
  shipped atlas still agrees with it.

    kind: atlas_labels
    rules:
      - id: ckpt-load-keys
        lib: [torch, deepspeed]              # any of (optional)
        kind: [raise, assert, check]         # any of (optional)
        type: 'KeyError|RuntimeError'        # regexes, searched (optional)
        path: 'checkpoint'                   # the file inside the release
        function: 'load'                     # the enclosing Class.function
        words: 'missing|unexpected'          # the message (fields as <*>) and the condition
        not_words: 'deprecated'
        labels: {symptom: S29, root_cause: R20, fix: F3, stage: ST5}
      - id: info-narration                   # `labels: {}`: a family that names no failure
        kind: [log]
        type: '^info$'
        labels: {}
    reviewed:
      3f0a1c2b9d: {labels: {symptom: S29, root_cause: R20, fix: F3, stage: ST5}, note: why}
"""

from __future__ import annotations

import gzip
import hashlib
import json
import marshal
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import regex

from triage import diskcache, regex_cache, taxonomy
from triage.knowledge.problems import KnowledgeError, Problem

KIND = "atlas_labels"
FIELDS = ("symptom", "root_cause", "fix", "stage")
TEMPLATES_FILE = "templates.jsonl.gz"
MANIFEST_FILE = "manifest.json"
FIELD_MARK = "<*>"  # how a masked field is written when a template is shown
KINDS = ("raise", "assert", "log", "warn", "check", "throw")
_RULE_KEYS = {"id", "lib", "kind", "type", "path", "function", "words", "not_words", "labels"}
_SELECTS = ("type", "path", "function", "words", "not_words")


class AtlasError(KnowledgeError):
    """The shipped atlas data is malformed: names the file, the row and what is wrong."""

    def __init__(self, message: str) -> None:
        file, _, rest = message.partition(": ")
        super().__init__([Problem(file, "", rest or message)])


@dataclass(frozen=True)
class Template:
    """One message a library prints, as found in its source."""

    id: str
    lib: str
    kind: str  # raise | assert | log | warn | check | throw
    type: str  # exception class or log level
    parts: tuple[str, ...]  # literal chunks; a masked field lies between two
    leading: bool  # a field before the first chunk
    trailing: bool  # a field after the last chunk
    file: str
    function: str
    condition: str = ""
    releases: tuple[str, ...] = ()
    sites: int = 1
    labels: Mapping[str, str] = field(default_factory=dict)
    labelled_by: str = ""  # the label rule's id, or "reviewed"
    reviewed: bool = False
    anchor: str = ""  # its rarest whole word that no field touches ("": too little text)

    @property
    def text(self) -> str:
        body = FIELD_MARK.join(self.parts)
        return f"{FIELD_MARK if self.leading else ''}{body}{FIELD_MARK if self.trailing else ''}"

    @property
    def where(self) -> str:
        """`deepspeed deepspeed/runtime/engine.py DeepSpeedEngine._configure`."""
        return f"{self.lib} {self.file}" + (f" {self.function}" if self.function else "")


@dataclass(frozen=True)
class LabelRule:
    id: str
    labels: Mapping[str, str]
    lib: frozenset[str] | None = None
    kind: frozenset[str] | None = None
    selects: Mapping[str, regex.Pattern[str]] = field(default_factory=dict)

    def applies(self, t: Template) -> bool:
        if self.lib is not None and t.lib not in self.lib:
            return False
        if self.kind is not None and t.kind not in self.kind:
            return False
        for key, pattern in self.selects.items():
            hit = pattern.search(_subject(t, key)) is not None
            if hit == (key == "not_words"):
                return False
        return True


def _subject(t: Template, key: str) -> str:
    if key == "type":
        return t.type
    if key == "path":
        return t.file
    if key == "function":
        return t.function
    # words, not_words: the message as shown, a masked field as `<*>` (so that a rule can tell
    # `requires torch >= <*>` from `requires top_k > 0`) and any run of whitespace as one space
    # (a message continued over source lines), then the condition it checks
    return " ".join(t.text.split()) + "\n" + t.condition


@dataclass(frozen=True)
class Review:
    labels: Mapping[str, str]  # empty: reviewed, and no label applies
    note: str = ""


@dataclass(frozen=True)
class AtlasLabels:
    rules: tuple[LabelRule, ...] = ()
    reviewed: Mapping[str, Review] = field(default_factory=dict)

    def label(self, t: Template) -> tuple[dict[str, str], str, bool]:
        """(labels, what gave them, reviewed by hand) for a template."""
        review = self.reviewed.get(t.id)
        if review is not None:
            return dict(review.labels), "reviewed", True
        for rule in self.rules:
            if rule.applies(t):
                return dict(rule.labels), rule.id, False
        return {}, "", False


def build(body: Any, report: Callable[[str, str], None], _team: bool) -> AtlasLabels:
    """`kind: atlas_labels` checked: every problem reported (file, item, message)."""
    if not isinstance(body, dict):
        report("", "must be a mapping")
        return AtlasLabels()
    rules: list[LabelRule] = []
    seen: set[str] = set()
    for n, item in enumerate(body.get("rules") or []):
        where = f"rules[{n}]"
        if not isinstance(item, dict) or not isinstance(item.get("id"), str):
            report(where, "a label rule is a mapping with an `id`")
            continue
        where = f"label rule {item['id']!r}"
        if item["id"] in seen:
            report(where, "is defined twice")
        seen.add(item["id"])
        for key in sorted(set(item) - _RULE_KEYS):
            report(where, f"unknown key {key!r}; known: {', '.join(sorted(_RULE_KEYS))}")
        labels = _labels(item.get("labels"), where, report)
        # `labels: {}` is a family read as routine on purpose (narration, fallbacks): its
        # templates carry no label; a rule without `labels` is a slip
        if not isinstance(item.get("labels"), dict):
            report(where, "names no `labels` (`{}` for a family that names no failure)")
        selects: dict[str, regex.Pattern[str]] = {}
        for key in _SELECTS:
            if key in item:
                try:
                    selects[key] = regex_cache.compile(str(item[key]))
                except regex.error as exc:
                    report(where, f"`{key}` is not a regex: {exc}")
        kinds = _names(item.get("kind"), where, "kind", report)
        if kinds is not None and kinds - set(KINDS):
            report(where, f"unknown `kind` {sorted(kinds - set(KINDS))}; known: {', '.join(KINDS)}")
        if not selects and item.get("lib") is None and kinds is None:
            report(where, "has no condition: it would label every template")
        rules.append(
            LabelRule(
                item["id"], labels, _names(item.get("lib"), where, "lib", report), kinds, selects
            )
        )
    reviewed: dict[str, Review] = {}
    for key, item in (body.get("reviewed") or {}).items():
        where = f"reviewed {key!r}"
        if not isinstance(item, dict) or "labels" not in item:
            report(where, "a review is a mapping with `labels` (`{}` when none applies)")
            continue
        reviewed[str(key)] = Review(
            _labels(item["labels"], where, report), str(item.get("note", ""))
        )
    for key in sorted(set(body) - {"kind", "rules", "reviewed"}):
        report("", f"unknown key {key!r}")
    return AtlasLabels(tuple(rules), reviewed)


def merge(values: Sequence[AtlasLabels]) -> AtlasLabels:
    return values[0] if values else AtlasLabels()


def _names(
    value: Any, where: str, key: str, report: Callable[[str, str], None]
) -> frozenset[str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        report(where, f"`{key}` is a name or a list of names")
        return None
    return frozenset(value)


def _labels(value: Any, where: str, report: Callable[[str, str], None]) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        report(where, "`labels` maps symptom/root_cause/fix/stage to a taxonomy id")
        return {}
    tax = taxonomy.load()
    known = {
        "symptom": tax.symptoms,
        "root_cause": tax.root_causes,
        "fix": tax.fix_patterns,
        "stage": tax.stages,
    }
    out: dict[str, str] = {}
    for key, label in value.items():
        if key not in known:
            report(where, f"unknown label field {key!r}; known: {', '.join(FIELDS)}")
        elif label not in known[key]:
            report(where, f"{key} {label!r} is not a taxonomy id")
        else:
            out[key] = str(label)
    return out


# --------------------------------------------------------------------------- the data


@dataclass(frozen=True, eq=False)
class Atlas:
    """Where the harvested atlas is; its templates are read on first use."""

    folder: Path

    @cached_property
    def manifest(self) -> dict[str, Any]:
        path = self.folder / MANIFEST_FILE
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise AtlasError(f"{path}: cannot read the atlas manifest: {exc}") from exc
        if not isinstance(data, dict):
            raise AtlasError(f"{path}: the atlas manifest must be a JSON object")
        return data

    @cached_property
    def _lines(self) -> tuple[dict[str, Any], list[bytes]]:
        """The header (columns, each row's anchor) and the rows, still as JSON text: a row is
        parsed and checked when it is first used (a paste touches a few dozen of 20,000)."""
        path = self.folder / TEMPLATES_FILE
        if not path.exists():
            return {"columns": list(COLUMNS), "anchors": []}, []
        try:
            packed = path.read_bytes()
            kept = _unpacked_rows(packed)
            if kept is None:
                # in one call: GzipFile.read() inflates 5 MB in a Python loop of small chunks
                lines = gzip.decompress(packed).split(b"\n")  # rows decoded when used
                header = json.loads(lines[0])
                rows = [line for line in lines[1:] if line]
            else:
                header, rows = kept
        except (OSError, EOFError, UnicodeDecodeError, ValueError) as exc:
            raise AtlasError(f"{path}: cannot read the atlas: {exc}") from exc
        if not isinstance(header, dict) or header.get("columns") != list(COLUMNS):
            raise AtlasError(
                f"{path}: not an atlas (its first line names the columns {list(COLUMNS)})"
            )
        anchors = header.get("anchors")
        if not isinstance(anchors, list) or len(anchors) != len(rows):
            raise AtlasError(f"{path}: `anchors` must hold one word per row ({len(rows)} rows)")
        if kept is None:
            _keep_unpacked(packed, header, rows)
        return header, rows

    @property
    def anchors(self) -> list[str]:
        """Each row's anchor word ("" for a row too short to name anything by itself)."""
        return self._lines[0]["anchors"]

    def __len__(self) -> int:
        return len(self._lines[1])

    def template(self, index: int) -> Template:
        """Row `index` (0-based), parsed and checked on first use."""
        got = self._parsed.get(index)
        if got is None:
            path = self.folder / TEMPLATES_FILE
            where = f"{path} row {index + 1}"
            try:
                row = json.loads(self._lines[1][index])
            except ValueError as exc:
                raise AtlasError(f"{where}: not JSON: {exc}") from exc
            got = self._parsed[index] = from_row(row, where, self._known)
            if got.anchor != self.anchors[index]:
                raise AtlasError(f"{where}: its anchor differs from the header's")
        return got

    @cached_property
    def _parsed(self) -> dict[int, Template]:
        return {}

    @cached_property
    def _known(self) -> dict[str, set[str]]:
        return _known_labels()

    @cached_property
    def templates(self) -> tuple[Template, ...]:
        """Every template, each row checked (malformed data is an AtlasError)."""
        return tuple(self.template(i) for i in range(len(self)))


# The atlas's rows as inflated and split, kept in the cache folder (`triage.diskcache`) for the
# next run: inflating 1 MB of gzip into 5 MB and splitting it into 16,000 rows is ~0.03 s of
# every run that classifies, reading them back ~0.01 s. The file names the SHA-256 of the
# gzip it was made from (another atlas is simply not found) and is verified by its own.
_UNPACKED_FILE = "atlas-rows-v1.bin"


def _unpacked_rows(packed: bytes) -> tuple[dict[str, Any], list[bytes]] | None:
    """The header and rows kept for this very gzip, or None (then it is inflated)."""
    where = diskcache.folder()
    path = None if where is None else where / _UNPACKED_FILE
    try:
        if path is None or not diskcache.only_mine(path):
            return None
        body = diskcache.read_verified(path)
        kept = None if body is None else marshal.loads(body)
    except (OSError, ValueError, EOFError, TypeError):
        return None
    if (
        not isinstance(kept, tuple)
        or len(kept) != 3
        or kept[0] != hashlib.sha256(packed).digest()
        or not isinstance(kept[1], dict)
        or not isinstance(kept[2], list)
        or not all(type(row) is bytes for row in kept[2])
    ):
        return None
    return kept[1], kept[2]


def _keep_unpacked(packed: bytes, header: dict[str, Any], rows: list[bytes]) -> None:
    where = diskcache.folder()
    if where is None:
        return
    try:
        body = marshal.dumps((hashlib.sha256(packed).digest(), header, rows))
        diskcache.write_verified(where / _UNPACKED_FILE, body, ".atlas-")
    except (OSError, ValueError):  # a cache that cannot be written is no error
        pass


# One row per line, a JSON list in this order; the first line: {"columns": [...], "anchors":
# [one per row]}
COLUMNS = (
    "id", "lib", "kind", "type", "parts", "leading", "trailing", "file", "function",
    "condition", "releases", "sites", "labels", "labelled_by", "reviewed", "anchor",
)  # fmt: skip
_TYPES: dict[str, type | tuple[type, ...]] = {
    "id": str, "lib": str, "kind": str, "type": str, "parts": list, "leading": bool,
    "trailing": bool, "file": str, "function": str, "condition": str, "releases": list,
    "sites": int, "labels": dict, "labelled_by": str, "reviewed": bool, "anchor": str,
}  # fmt: skip


def _known_labels() -> dict[str, set[str]]:
    tax = taxonomy.load()
    return {
        "symptom": set(tax.symptoms),
        "root_cause": set(tax.root_causes),
        "fix": set(tax.fix_patterns),
        "stage": set(tax.stages),
    }


def from_row(row: Any, where: str, known: Mapping[str, set[str]] | None = None) -> Template:
    """One template from its row, checked (AtlasError names `where` and the column)."""
    if not isinstance(row, list) or len(row) != len(COLUMNS):
        raise AtlasError(
            f"{where}: a row is a list of {len(COLUMNS)} values ({', '.join(COLUMNS)})"
        )
    for name, value in zip(COLUMNS, row, strict=True):
        if not isinstance(value, _TYPES[name]) or (name == "sites" and isinstance(value, bool)):
            raise AtlasError(f"{where}: `{name}` is {value!r}, not a {_TYPES[name].__name__}")
    rec = dict(zip(COLUMNS, row, strict=True))
    parts = rec["parts"]
    if not parts or not all(isinstance(p, str) and p for p in parts):
        raise AtlasError(f"{where}: `parts` must be non-empty strings")
    if rec["kind"] not in KINDS:
        raise AtlasError(f"{where}: unknown kind {rec['kind']!r}; known: {', '.join(KINDS)}")
    known = known if known is not None else _known_labels()
    for key, label in rec["labels"].items():
        if key not in known or label not in known[key]:
            raise AtlasError(f"{where}: label {key}={label!r} is not a taxonomy id of that field")
    if rec["anchor"] and not any(rec["anchor"] in p for p in parts):
        raise AtlasError(f"{where}: anchor {rec['anchor']!r} is not in the template's text")
    rec["parts"] = tuple(parts)
    rec["releases"] = tuple(str(r) for r in rec["releases"])
    return Template(**rec)


def to_row(t: Template) -> list[Any]:
    rec = {
        **t.__dict__,
        "parts": list(t.parts),
        "releases": list(t.releases),
        "labels": dict(t.labels),
    }
    return [rec[name] for name in COLUMNS]


def write(folder: Path, templates: Iterable[Template], manifest: Mapping[str, Any]) -> None:
    """The atlas files, deterministic (same input, same bytes: gzip without a timestamp)."""
    folder.mkdir(parents=True, exist_ok=True)
    anchored = with_anchors(list(templates))
    header = {"columns": list(COLUMNS), "anchors": [t.anchor for t in anchored]}
    body = (
        "\n".join(
            json.dumps(x, separators=(",", ":")) for x in [header, *(to_row(t) for t in anchored)]
        )
        + "\n"
    )
    with (
        (folder / TEMPLATES_FILE).open("wb") as raw,
        gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as fh,
    ):
        fh.write(body.encode("utf-8"))
    (folder / MANIFEST_FILE).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")


_WORD = regex_cache.compile(r"[A-Za-z_][A-Za-z0-9_]{3,}")
MIN_ANCHORED = 16  # literal characters below which a template names nothing by itself


# A message printed over several lines is often cut after its first (the parser's event ends
# there, or the user pasted one line): its first line alone names it when it holds at least
# this much literal text (`classify.atlas` matches it so), and the anchor is taken from it.
FIRST_LINE_LITERAL = 25


def first_line(t: Template) -> str | None:
    """The literal first line of a message the template prints over several lines; None when
    the message is one line or its first line is too short to name it."""
    head = t.parts[0] if t.parts else ""
    if len(t.parts) < 2 or not head.endswith("\n") or len(head.strip()) < FIRST_LINE_LITERAL:
        return None
    return head


def anchor_words(t: Template, parts: int | None = None) -> set[str]:
    """Whole words of the literal text (of its first `parts` chunks: all by default) that no
    field can run into: any line the template prints holds them as words."""
    if sum(len(p.strip()) for p in t.parts) < MIN_ANCHORED:
        return set()
    out: set[str] = set()
    last = len(t.parts) - 1
    for n, part in enumerate(t.parts[:parts]):
        field_before = n > 0 or t.leading
        field_after = n < last or t.trailing
        for m in _WORD.finditer(part):
            if (m.start() == 0 and field_before) or (m.end() == len(part) and field_after):
                continue
            before = part[m.start() - 1] if m.start() else " "
            after = part[m.end()] if m.end() < len(part) else " "
            if before.isalnum() or before == "_" or after.isalnum():
                continue
            out.add(m.group())
    return out


def with_anchors(templates: list[Template]) -> list[Template]:
    """Each template anchored on its rarest such word (fewest templates share it); a message
    of several lines on a word of its first line, which names it alone (`first_line`)."""
    from dataclasses import replace

    words = [(first_line(t) and anchor_words(t, 1)) or anchor_words(t) for t in templates]
    df: dict[str, int] = {}
    for ws in words:
        for w in ws:
            df[w] = df.get(w, 0) + 1
    return [
        replace(t, anchor=min(ws, key=lambda w: (df[w], -len(w), w)) if ws else "")
        for t, ws in zip(templates, words, strict=True)
    ]


def relabel(templates: Iterable[Template], rules: AtlasLabels) -> list[Template]:
    """Every template with the labels the rules give it now."""
    from dataclasses import replace

    out = []
    for t in templates:
        labels, by, reviewed = rules.label(t)
        out.append(replace(t, labels=labels, labelled_by=by, reviewed=reviewed))
    return out
