"""Data flows one way: no module of an earlier stage imports a later one.

The layers, lowest first: the foundation (the data model, the taxonomy, budgets, caches,
redaction), the knowledge, then the stages ingest -> parsers -> analysis -> classify ->
recommend -> report, then what wires the stages together (pipeline, its worker pool and its
wording), then what runs the pipeline for a purpose (train, batch, fleet, bot, snapshot,
doctor), and the CLI on top. A module may import its own layer and the ones below. Imports
are read from the source (ast), those inside functions and `TYPE_CHECKING` blocks included:
a lazy import still climbs.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

import triage

PACKAGE = Path(triage.__file__).parent

# The first name under `triage.` -> its layer. A new top-level module or package must be
# placed here: the test fails until it is.
LAYERS: dict[str, int] = {
    "triage": 0,  # the package itself (its version)
    "model": 0,
    "taxonomy": 0,
    "budget": 0,
    "diskcache": 0,
    "method_cache": 0,  # the compiled methods of dataclasses, kept on disk
    "formats": 0,
    "literals": 0,
    "rank_ranges": 0,  # one way to write a set of ranks, for every stage
    "scan": 0,  # the line scanner beside literals: engines, reader, markers, caches
    "redact": 8,  # masks what reports quote, beside the pipeline (it re-reads tracebacks)
    "regex_cache": 0,
    "yaml_docs": 0,
    "knowledge": 1,
    "ingest": 2,
    "parsers": 3,
    "analysis": 4,
    "classify": 5,
    "recommend": 6,
    "report": 7,
    "pipeline": 8,
    "pool": 8,
    "isolated": 8,  # the pool's sibling: dumps decoded in a child process
    "wording": 8,
    "train": 9,
    "batch": 9,
    "fleet": 9,
    "bot": 9,
    "snapshot": 9,
    "doctor": 9,
    "cli": 10,
    "__main__": 10,
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(module: str, source: str, is_package: bool) -> Iterator[tuple[int, str]]:
    """(line, imported triage module) for every import statement of `source`."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from the module's package, up level - 1
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                name = ".".join([*base, node.module] if node.module else base)
            else:
                name = node.module or ""
            if name == "triage":  # `from triage import pipeline`: the names are modules
                for alias in node.names:
                    yield node.lineno, f"triage.{alias.name}"
            else:
                yield node.lineno, name


def _layer(module: str) -> int | None:
    parts = module.split(".")
    if parts[0] != "triage":
        return None
    return LAYERS.get(parts[1] if len(parts) > 1 else "triage")


def climbs(sources: Mapping[str, tuple[str, bool]]) -> list[str]:
    """Every import of a later layer, as `module:line imports name`; `sources` maps a
    module's name to its source text and whether it is a package's `__init__`."""
    found = []
    for module, (source, is_package) in sorted(sources.items()):
        own = _layer(module)
        assert own is not None, f"{module} has no layer: place it in LAYERS"
        for line, name in _imports(module, source, is_package):
            theirs = _layer(name)
            if theirs is not None and theirs > own:
                found.append(f"{module}:{line} imports {name}")
    return found


def _package_sources() -> dict[str, tuple[str, bool]]:
    return {
        _module_name(path): (path.read_text(encoding="utf-8"), path.name == "__init__.py")
        for path in PACKAGE.rglob("*.py")
    }


def test_every_module_has_a_place_in_the_layers() -> None:
    unplaced = sorted(m for m in _package_sources() if _layer(m) is None)
    assert unplaced == [], f"place these in LAYERS: {unplaced}"


def test_no_stage_imports_a_later_one() -> None:
    assert climbs(_package_sources()) == []


def test_a_climbing_import_is_caught_wherever_it_is_written() -> None:
    sources = {
        # a parser that asks the classifier, lazily
        "triage.parsers.rank_log": ("def f():\n    from triage.classify import rules\n", False),
        # the knowledge running the pipeline, by a relative import
        "triage.knowledge": ("from .. import pipeline\n", True),
        # the report reading the CLI's options under TYPE_CHECKING
        "triage.report.text": (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import triage.cli.common\n",
            False,
        ),
        # downward and sideways imports are fine
        "triage.classify.rules": ("from triage.parsers import lines\nfrom . import types\n", False),
        "triage.fleet": ("from triage import batch\n", True),
    }
    assert climbs(sources) == [
        "triage.knowledge:1 imports triage.pipeline",
        "triage.parsers.rank_log:2 imports triage.classify",
        "triage.report.text:3 imports triage.cli.common",
    ]


def parser_only_reads(sources: Mapping[str, tuple[str, bool]]) -> list[str]:
    """Every `x.attrs` read in a module past the parsers, as `module:line`: what the parser
    read from a record reaches the later stages as typed fields, never as `Event.attrs` keys."""
    found = []
    for module, (source, _) in sorted(sources.items()):
        layer = _layer(module)
        if layer is None or layer <= LAYERS["parsers"]:
            continue
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Attribute) and node.attr == "attrs":
                found.append(f"{module}:{node.lineno}")
    return found


def test_no_stage_after_the_parsers_reads_an_events_attrs() -> None:
    assert parser_only_reads(_package_sources()) == []


def test_an_attrs_read_past_the_parsers_is_caught() -> None:
    sources = {
        "triage.analysis.outcome": ("def f(ev):\n    return (ev.attrs or {}).get('end')\n", False),
        "triage.report.text": ("x = 1\nsignal = event.attrs['signal']\n", False),
        # the parsers keep what no later stage reads; a webhook's own `attrs` is no event's
        "triage.parsers.pyspy": ("ev.attrs.get('failure')\n", False),
        "triage.bot.gitlab": ("attrs = body['object_attributes']\nattrs.get('action')\n", False),
    }
    assert parser_only_reads(sources) == ["triage.analysis.outcome:2", "triage.report.text:2"]


# The words of the NCCL lines the parser reads the version, the network and the bootstrap
# address from (`NcclLineFacts`): a later stage holding one in a string reads the line again.
NCCL_LINE_WORDS = ("nccl version", "using network", "net/", "bootstrap")


def text_readers(sources: Mapping[str, tuple[str, bool]]) -> list[str]:
    """In the stages after the parsers (analysis to report), every string that holds the words
    of an NCCL line the parser reads facts from, and every question of which frameworks a text
    names (`named_in`: an action carries the frameworks it names), as `module:line`.
    Docstrings are prose about the code, not read from events: left out."""
    found = []
    for module, (source, _) in sorted(sources.items()):
        layer = _layer(module)
        if layer is None or not LAYERS["parsers"] < layer <= LAYERS["report"]:
            continue
        tree = ast.parse(source)
        docstrings = {
            id(node.value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
        }
        for node in ast.walk(tree):
            asks_frameworks = isinstance(node, ast.Attribute) and node.attr == "named_in"
            holds_nccl_words = (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in docstrings
                and any(word in node.value.lower() for word in NCCL_LINE_WORDS)
            )
            if asks_frameworks or holds_nccl_words:
                found.append(f"{module}:{node.lineno}")
    return found


def test_no_stage_after_the_parsers_reads_nccl_facts_or_framework_names_from_text() -> None:
    assert text_readers(_package_sources()) == []


def test_reading_nccl_lines_or_framework_names_from_text_past_the_parsers_is_caught() -> None:
    asks_frameworks = "def names(kb, text):\n    return kb.frameworks.named_in(text)\n"
    sources = {
        # consistency reading the version and the network from the event's text
        "triage.analysis.consistency": (
            '"""NCCL version and Using network lines, read by the parser."""\n'
            "import regex\n"
            "V = regex.compile(r'NCCL version (?P<v>[\\d.]+)')\n"
            "T = regex.compile(r'Using network (?P<n>\\w+)|NET/(?P<m>\\w+) ?: Using')\n",
            False,
        ),
        # recommend asking which frameworks a filled action's text names
        "triage.recommend": (asks_frameworks, False),
        # the parser itself, and the knowledge that names an action's frameworks once, may
        "triage.parsers.nccl": ("V = r'NCCL version (?P<ver>\\S+)'\n", False),
        "triage.knowledge": (asks_frameworks, True),
    }
    assert text_readers(sources) == [
        "triage.analysis.consistency:3",
        "triage.analysis.consistency:4",
        "triage.recommend:2",
    ]
