"""Every shipped bundle and a table of pasted errors, through every report format: the advice is
one a user can act on, and the reports contradict neither themselves nor the command line.

Checked on what the user reads (the rendered text, Markdown, HTML and JSON):
- no unfilled placeholder (`<joined>`, `{ext}`) outside code spans, where `<PID>` is a blank
  the user fills in;
- no `triage <command>` that the command line does not have;
- no "x% < y%" where x >= y, and no "Hang: not detected" next to lagging ranks;
- no fix pattern whose actions presume a framework or launcher the job does not run on (the
  case's truth is written by hand: bundles are plain DDP jobs started by torchrun or Slurm).
"""

from __future__ import annotations

import json
import re
from functools import cache, lru_cache
from html.parser import HTMLParser
from pathlib import Path

import pytest
from advice_cases import PASTES
from markdown_it import MarkdownIt

from triage import pipeline
from triage.cli import main
from triage.model import Diagnosis
from triage.report import render

ROOT = Path(__file__).resolve().parent.parent
BUNDLES = sorted(p for p in (ROOT / "corpus_samples").glob("*/bundle") if p.is_dir())
FORMATS = ("text", "json", "md", "html", "brief-text", "brief-md")

# What an action says only when it assumes the job runs on a framework (independent of
# rules/frameworks.yaml: these are the test's own words). A suggestion to adopt plain
# torch FSDP (`FULL_SHARD` instead of DDP) presumes nothing and is not listed.
PRESUMES = {
    "deepspeed": r"ZeRO|DeepSpeed|deepspeed|ds_config|DS_BUILD|stage3_|offload_optimizer",
    "fsdp": r"FullStateDictConfig|summon_full_params|ShardingStrategy|use_orig_params|CPUOffload\(",
    "megatron": r"Megatron|megatron|--tensor-model-parallel|--sequence-parallel|"
    r"--recompute-activations|--use-distributed-optimizer",
    "colossalai": r"Colossal|colossalai",
    "accelerate": r"\bAccelerate\b|accelerator\.|accelerate launch|InitProcessGroupKwargs",
    "transformers": r"--ddp_timeout|TrainingArguments|ddp_find_unused_parameters|"
    r"gradient_checkpointing_enable|HfDeepSpeedConfig",
    "lightning": r"Lightning|sync_dist|DDPStrategy",
}
LAUNCHER_PRESUMES = {
    "slurm": r"\bscontrol\b|\bsbatch\b|--gpus-per-task",
    "deepspeed": r"deepspeed --no_ssh|--include localhost",
}
# Python's own pseudo-file and frame names: quoted log text, not placeholders.
_PYTHON_NAMES = {
    "module",
    "lambda",
    "listcomp",
    "dictcomp",
    "setcomp",
    "genexpr",
    "stdin",
    "locals",
}
_PLACEHOLDER = re.compile(r"<([a-z][a-z_]*)>|\{([a-z][a-z_0-9]*)\}")
_BACKTICKS = re.compile(r"(`+)(.+?)\1", re.S)
_PERCENT_LESS = re.compile(r"(\d+(?:\.\d+)?)% < (\d+(?:\.\d+)?)%")
# `triage word` names a command; `triage snap/` is the main command on a path
_TRIAGE_CMD = re.compile(r"(?:^|[;&|$]\s*)triage\s+([a-z][\w-]*)(?![\w./-])")


@lru_cache(maxsize=1)
def _pastes() -> dict[str, Diagnosis]:
    # one batch: the similarity model loads once for all of them
    diagnoses = pipeline.explain_many([p.text for p in PASTES])
    return {p.name: d for p, d in zip(PASTES, diagnoses, strict=True)}


@cache
def _bundle(name: str) -> Diagnosis:
    return pipeline.diagnose([str(ROOT / "corpus_samples" / name / "bundle")])


CASES = [("bundle", b.parent.name) for b in BUNDLES] + [("paste", p.name) for p in PASTES]


def _case(kind: str, name: str) -> tuple[Diagnosis, frozenset[str], frozenset[str]]:
    if kind == "bundle":
        # the shipped bundles are plain DDP (torch + gloo) jobs started by torchrun, some
        # under Slurm (corpus_samples/make.py)
        return _bundle(name), frozenset({"ddp"}), frozenset({"torchrun", "slurm"})
    paste = next(p for p in PASTES if p.name == name)
    return _pastes()[name], paste.frameworks, paste.launchers


class _Prose(HTMLParser):
    """The text a reader sees outside <code>/<pre> (log text and commands live in those), and
    the text of the code elements apart."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.depth = 0
        self.skip = 0
        self.prose: list[str] = []
        self.code: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("code", "pre"):
            self.depth += 1
            self.code.append("")
        if tag in ("style", "script", "title"):
            self.skip += 1

    def handle_endtag(self, tag: str) -> None:
        if tag in ("code", "pre"):
            self.depth -= 1
        if tag in ("style", "script", "title"):
            self.skip -= 1

    def handle_data(self, data: str) -> None:
        if self.skip:
            return
        if self.depth:
            self.code[-1] += data
        else:
            self.prose.append(data)


def _split(fmt: str, d: Diagnosis) -> tuple[str, list[str], str]:
    """(everything the reader sees, the code spans, the prose outside code) of one format."""
    if fmt == "json":
        data = json.loads(render(d, "json"))
        # what triage says in its own words: summary and actions; log text sits in the
        # evidence, first failure and timeline, which are quotes
        said = [data["summary"], *(a for f in data["fix_patterns"] for a in f["actions"])]
        said += [f["why"] for f in data["fix_patterns"]]
        said = [re.sub(r"“[^”]*”", "", s) for s in said]  # a why quotes a log line
        code = [m.group(2) for s in said for m in _BACKTICKS.finditer(s)]
        prose = " ".join(_BACKTICKS.sub(" ", s) for s in said)
        return json.dumps(data), code, prose
    brief = fmt.startswith("brief-")
    base = fmt.removeprefix("brief-")
    out = render(d, base, brief=brief)
    if base == "html" or base == "md":
        page = out if base == "html" else MarkdownIt("commonmark").enable("table").render(out)
        # the page embeds the JSON report as it is (checked as JSON above), not as commands
        page = re.sub(r'<section class="card" id="raw">.*?</section>', "", page, flags=re.S)
        parser = _Prose()
        parser.feed(page)
        return out, parser.code, " ".join(parser.prose)
    # text: the first screen is triage's own words; the details quote logs
    head = out.split("Details", 1)[0] if not brief else out
    if brief:  # the evidence line is a quote
        head = "\n".join(line for line in head.splitlines() if not line.startswith("evidence:"))
    code = [m.group(2) for m in _BACKTICKS.finditer(head)]
    return out, code, _BACKTICKS.sub(" ", head)


def _actions(d: Diagnosis) -> list[tuple[str, str]]:
    return [(f.id, a) for f in d.fix_patterns for a in f.actions]


# The brief Markdown says what the brief text says: one bundle of it is enough.
RUNS = [
    (kind, name, fmt)
    for kind, name in CASES
    for fmt in FORMATS
    if not (fmt == "brief-md" and kind == "bundle" and name != BUNDLES[0].parent.name)
]


@pytest.mark.parametrize(("kind", "name", "fmt"), RUNS, ids=[f"{k}:{n}-{f}" for k, n, f in RUNS])
def test_every_case_reads_cleanly_in_every_format(kind: str, name: str, fmt: str) -> None:
    d, _, _ = _case(kind, name)
    everything, code, prose = _split(fmt, d)
    leaks = [
        m.group(0)
        for m in _PLACEHOLDER.finditer(prose)
        if (m.group(1) or m.group(2)) not in _PYTHON_NAMES
    ]
    assert not leaks, f"unfilled placeholders outside code: {leaks}"
    commands = set(main.commands) - {"analyze"}
    named = {m.group(1) for snippet in code for m in _TRIAGE_CMD.finditer(snippet.strip())}
    assert named <= commands, f"names commands that do not exist: {named - commands}"
    for x, y in _PERCENT_LESS.findall(everything):
        assert float(x) < float(y), f"'{x}% < {y}%' says the opposite of itself"
    assert "not detected" not in everything.lower(), "a hang 'not detected' with lagging ranks"


@pytest.mark.parametrize(("kind", "name"), CASES, ids=[f"{k}:{n}" for k, n in CASES])
def test_no_fix_listed_presumes_another_framework_or_launcher(kind: str, name: str) -> None:
    d, frameworks, launchers = _case(kind, name)
    wrong = [
        (fix, framework, action)
        for fix, action in _actions(d)
        for framework, words in PRESUMES.items()
        if framework not in frameworks and re.search(words, action)
    ]
    wrong += [
        (fix, launcher, action)
        for fix, action in _actions(d)
        for launcher, words in LAUNCHER_PRESUMES.items()
        if launcher not in launchers and re.search(words, action)
    ]
    assert not wrong, "\n".join(f"{f} assumes {w}: {a}" for f, w, a in wrong)


@pytest.mark.parametrize(("kind", "name"), CASES, ids=[f"{k}:{n}" for k, n in CASES])
def test_no_fix_asks_for_the_same_command_twice(kind: str, name: str) -> None:
    d, _, _ = _case(kind, name)
    for fix in d.fix_patterns:
        commands = [max(spans, key=len) for a in fix.actions if (spans := _code_spans(a))]
        long = [c for c in commands if len(c) >= 12]
        assert len(long) == len(set(long)), f"{fix.id} repeats a step: {fix.actions}"


def _code_spans(text: str) -> list[str]:
    return [m.group(2) for m in _BACKTICKS.finditer(text)]


def test_the_table_of_pastes_is_wide_enough() -> None:
    assert len(PASTES) >= 20
    assert len(BUNDLES) >= 15
    covered = set().union(*(p.frameworks for p in PASTES))
    assert {"ddp", "deepspeed", "fsdp", "megatron", "transformers", "accelerate"} <= covered


def test_the_advice_a_user_would_look_for_comes_first() -> None:
    """The most direct fix leads: `pip install ninja` for a missing ninja, a bigger
    /dev/shm for an exhausted one, find_unused_parameters for DDP's unused parameters."""
    expected = {
        "ninja_missing": "pip install ninja",
        "shm_exhausted": "--shm-size",
        "ddp_unused_parameters": "find_unused_parameters=True",
        "master_port_in_use": "--master_port",
    }
    for name, words in expected.items():
        d = _pastes()[name]
        assert d.fix_patterns, name
        assert words in d.fix_patterns[0].actions[0], (name, d.fix_patterns[0].actions)


def test_a_missing_fact_is_left_out_not_shown_as_a_placeholder() -> None:
    counts = " ".join(a for _, a in _actions(_pastes()["accelerate_store_timeout"]))
    assert "(1 of 2 clients joined)" in counts
    bare = " ".join(a for _, a in _actions(_pastes()["store_socket_timeout_no_counts"]))
    assert "clients joined" not in bare and "<" not in bare


def test_a_sigkilled_rank_is_not_sent_to_read_its_peers_log() -> None:
    d = _bundle("oom_killed_rank_image_cache")
    said = " ".join(a for _, a in _actions(d))
    assert "Read the log of the worker" not in said
    assert "dmesg" in d.fix_patterns[0].actions[0]
    # a lone 'connection closed by peer', with nobody named yet, does point at the peer
    alone = " ".join(a for _, a in _actions(_pastes()["gloo_peer_closed"]))
    assert "[10.0.0.3]:19653:" in alone


def test_a_rank_is_said_to_take_another_path_only_when_it_did() -> None:
    # rank 3 called the same all_reduce as the others, with float64: not another code path
    mismatch = " ".join(a for _, a in _actions(_bundle("metric_dtype_differs_on_one_rank")))
    assert "dtype" in mismatch and "took another path" not in mismatch
    # rank 2 skipped the metric all_reduce the others entered (and went on to a barrier)
    skipped = " ".join(a for _, a in _actions(_bundle("skip_collective_empty_val_shard")))
    assert "Rank 2 issued another collective where the others wait in `all_reduce`" in skipped


def test_a_deepspeed_job_does_get_deepspeed_advice() -> None:
    said = " ".join(a for _, a in _actions(_pastes()["deepspeed_cuda_oom"]))
    assert "ZeRO" in said
    ddp = " ".join(a for _, a in _actions(_pastes()["ddp_cuda_oom"]))
    assert "ZeRO" not in ddp and "FSDP" in ddp  # adopting torch's own sharding
