"""The kinds that moved out of the engines (exit codes, library frames) are checked like the
others: a wrong entry or an example its patterns do not bear out is named with file and item."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import Any

import pytest
import regex
import yaml

from triage import knowledge


def _rules_with(tmp_path: Path, name: str, edit: dict) -> Path:
    rules = tmp_path / "rules"
    shutil.copytree(knowledge.rules_dir(), rules)
    body = yaml.safe_load((rules / name).read_text(encoding="utf-8"))
    body.update(edit)
    (rules / name).write_text(yaml.safe_dump(body), encoding="utf-8")
    return rules


def _problems(rules: Path, monkeypatch: pytest.MonkeyPatch) -> dict[tuple[str, str], str]:
    monkeypatch.setenv(knowledge.RULES_ENV, str(rules))
    with pytest.raises(knowledge.KnowledgeError) as err:
        knowledge.load()
    return {(Path(p.file).name, p.item): p.message for p in err.value.problems}


def test_a_user_file_the_library_patterns_catch_is_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shipped = knowledge.load().frames
    examples = {"library": ["/opt/venv/lib/python3.12/site-packages/numpy/core.py"]}
    examples["user"] = ["/workspace/train.py", "/usr/lib/python3.12/threading.py"]
    found = _problems(_rules_with(tmp_path, "frames.yaml", {"examples": examples}), monkeypatch)
    assert "threading.py" in found[("frames.yaml", "examples")]
    assert shipped.is_library("/usr/lib/python3.12/threading.py")
    assert not shipped.is_library("/workspace/train.py")


def test_an_exit_code_without_a_meaning_or_with_an_unknown_role_is_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    codes = {-9: {"meaning": "SIGKILL", "role": "self-inflicted"}, 137: {"role": "x"}}
    found = _problems(_rules_with(tmp_path, "exits.yaml", {"codes": codes}), monkeypatch)
    assert "role 'self-inflicted'" in found[("exits.yaml", "code -9")]
    assert "needs `meaning`" in found[("exits.yaml", "code 137")]


def test_a_restart_pattern_that_misses_its_example_is_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    restarts = {
        "pattern": "will restart worker group",
        "examples": {"match": ["Worker group FAILED. 2/3 attempts left"], "no_match": ["x"]},
    }
    found = _problems(_rules_with(tmp_path, "exits.yaml", {"restarts": restarts}), monkeypatch)
    assert "misses its example" in found[("exits.yaml", "restarts")]


def test_a_compared_setting_the_agreement_lists_miss_is_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert knowledge.load().agreement.compares_env("NCCL_IB_HCA")
    env = yaml.safe_load((knowledge.rules_dir() / "agreement.yaml").read_text())["env"]
    env["examples"] = {"compared": ["NCCL_IB_HCA", "OMP_NUM_THREADS"], "not_compared": ["PATH"]}
    found = _problems(_rules_with(tmp_path, "agreement.yaml", {"env": env}), monkeypatch)
    assert "OMP_NUM_THREADS should be compared" in found[("agreement.yaml", "env.examples")]


def test_a_thread_evidence_sign_that_misses_its_example_is_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = yaml.safe_load((knowledge.rules_dir() / "collect_next.yaml").read_text())
    evidence = body["thread_evidence"]
    evidence["pyspy"]["shown_by"] = "^Thread \\d+ \\(idle"  # misses py-spy's hex thread ids
    del evidence["env"]
    rules = _rules_with(tmp_path, "collect_next.yaml", {"thread_evidence": evidence})
    found = _problems(rules, monkeypatch)
    assert "misses its example" in found[("collect_next.yaml", "thread_evidence pyspy")]
    assert "needs one entry for each" in found[("collect_next.yaml", "thread_evidence")]


def test_a_waiting_frame_the_patterns_read_otherwise_is_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    waiting = yaml.safe_load((knowledge.rules_dir() / "frames.yaml").read_text())["waiting"]
    # a rank stuck in its own GPU's synchronize is a suspect, not a waiter
    waiting["examples"]["waiting"].append(
        "synchronize (/opt/venv/lib/python3.11/site-packages/torch/cuda/__init__.py)"
    )
    found = _problems(_rules_with(tmp_path, "frames.yaml", {"waiting": waiting}), monkeypatch)
    assert "reads as neither" in found[("frames.yaml", "waiting.examples")]


DOCTOR = Path(__file__).resolve().parent.parent / "triage" / "doctor"


def test_every_finding_the_doctor_names_has_its_wording_in_the_data() -> None:
    from triage.doctor import knowledge as doctor_knowledge

    named = set()
    for module in DOCTOR.glob("*.py"):
        text = module.read_text(encoding="utf-8")
        named |= set(regex.findall(r'k\.finding\(\s*"([a-z0-9-]+)"', text))
        named |= set(regex.findall(r'fid = "([a-z0-9-]+)"', text))
        for a, b in regex.findall(r'"([a-z0-9-]+)" if \w+ else "([a-z0-9-]+)"', text):
            named |= {a, b}
    shipped = set(doctor_knowledge.load().findings)
    assert len(named) > 20 and named <= shipped, sorted(named - shipped)


def test_a_doctor_finding_with_an_unknown_cause_or_a_taken_field_is_reported(
    tmp_path: Path,
) -> None:
    from triage.doctor import knowledge as doctor_knowledge

    for name in ("compat.yaml", "env_vars.yaml", "findings.yaml"):
        shutil.copy(doctor_knowledge.knowledge_dir() / name, tmp_path / name)
    said = yaml.safe_load((tmp_path / "findings.yaml").read_text(encoding="utf-8"))
    said["findings"]["shm-missing"]["root_cause"] = "R99"
    said["findings"]["memlock-low"]["title"] = "locked memory for {ranks}"
    said["findings"]["env-value"]["fix_pattern"] = {"NCCL_": "F4"}
    (tmp_path / "findings.yaml").write_text(yaml.safe_dump(said), encoding="utf-8")
    with pytest.raises(doctor_knowledge.KnowledgeError) as err:
        doctor_knowledge.load(tmp_path)
    problems = "\n".join(err.value.problems)
    assert "findings.shm-missing: root_cause 'R99' is not a taxonomy id" in problems
    assert "findings.memlock-low: title names {ranks}" in problems
    assert 'findings.env-value: fix_pattern by prefix needs a "" entry' in problems


def test_an_argv_pattern_the_scan_gate_would_skip_is_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    argv = {
        "nnodes": r"--nnodes[= ](?P<n>\d+)",
        "nproc_per_node": r"-np (?P<n>\d+)",  # no `--n`: the scan would never look at it
        "node_rank": r"--node[-_]rank[= ](?P<n>\d+)",
    }
    found = _problems(_rules_with(tmp_path, "topology.yaml", {"argv": argv}), monkeypatch)
    assert "`--n`" in found[("topology.yaml", "argv nproc_per_node")]


def test_a_log_shape_without_the_groups_its_slot_reads_or_missing_its_example_is_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shapes = yaml.safe_load((knowledge.rules_dir() / "log_shapes.yaml").read_text())
    facts = shapes["facts"]
    facts["dump_from"]["pattern"] = r"collective timeout from (?:rank )?(\d+)"  # no (?P<src>)
    facts["rank_tag"]["examples"]["match"] = ["[rank 5] boom"]  # `[Rank N]` only
    found = _problems(_rules_with(tmp_path, "log_shapes.yaml", {"facts": facts}), monkeypatch)
    assert "['src']" in found[("log_shapes.yaml", "facts dump_from")]
    assert "misses its example '[rank 5] boom'" in found[("log_shapes.yaml", "facts rank_tag")]


def test_the_log_parser_reads_facts_with_the_shapes_of_the_knowledge_it_is_handed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from triage.parsers import parse_text

    line = "RuntimeError: [Worker 5] collective failed"
    shipped = knowledge.load()
    assert parse_text(line, kb=shipped).events[0].rank is None
    shapes = yaml.safe_load((knowledge.rules_dir() / "log_shapes.yaml").read_text())
    shapes["facts"]["rank_tag"] = {
        "pattern": r"\[Worker (?P<rank>-?\d+)\]",
        "examples": {"match": ["[Worker 5] boom"], "no_match": ["[Rank 5] boom"]},
    }
    rules = _rules_with(tmp_path, "log_shapes.yaml", {"facts": shapes["facts"]})
    monkeypatch.setenv(knowledge.RULES_ENV, str(rules))
    (event,) = parse_text(line, kb=knowledge.load()).events
    assert event.rank == 5 and event.c10d.rank == 5


def test_a_shape_guard_its_own_example_does_not_hold_is_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shapes = yaml.safe_load((knowledge.rules_dir() / "log_shapes.yaml").read_text())
    shapes["progress"]["step"]["guard"] = ["Step"]  # `global_step 120/5000` holds no `Step`
    shapes["progress"]["epoch"]["guard"] = "poch"  # a list is needed
    found = _problems(_rules_with(tmp_path, "log_shapes.yaml", shapes), monkeypatch)
    assert (
        "guard ['Step'] is not in its example 'global_step 120/5000 loss 1.9'"
        in (found[("log_shapes.yaml", "progress step")])
    )
    assert "must be a list" in found[("log_shapes.yaml", "progress epoch")]


def test_the_log_parser_searches_a_progress_shape_only_where_its_guard_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from triage.parsers import parse_text

    log = "global_step 7 loss 1.2\nglobal_step 8 loss 1.1\n"
    (progress,) = parse_text(log, kb=knowledge.load()).events
    assert progress.payload.step == 8
    shapes = yaml.safe_load((knowledge.rules_dir() / "log_shapes.yaml").read_text())
    step = shapes["progress"]["step"]
    step["guard"] = ["Step"]
    step["examples"]["match"] = [x for x in step["examples"]["match"] if "Step" in x]
    monkeypatch.setenv(knowledge.RULES_ENV, str(_rules_with(tmp_path, "log_shapes.yaml", shapes)))
    kb = knowledge.load()
    assert parse_text(log, kb=kb).events == ()
    (progress,) = parse_text(log.replace("global_step", "Step"), kb=kb).events
    assert progress.payload.step == 8


@pytest.mark.parametrize(
    ("name", "edit", "item"),
    [
        ("masks.yaml", {"salient": "(unclosed"}, "salient"),
        ("exits.yaml", {"restarts": {"pattern": "(", "examples": {}}}, "restarts"),
        ("outcome.yaml", {"hang_deaths": ["[z-a]"]}, "hang_deaths"),
        ("outcome.yaml", {"output_streams": ["[z-a]"]}, "output_streams"),
        ("frameworks.yaml", {"gpu_seen": {"pattern": "cuda:(", "examples": {}}}, "gpu_seen"),
    ],
)
def test_a_broken_regex_of_any_kind_is_reported_with_its_file_and_item(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, edit: dict, item: str
) -> None:
    found = _problems(_rules_with(tmp_path, name, edit), monkeypatch)
    assert "bad regex" in found[(name, item)]


def test_the_broken_regex_of_a_list_is_named_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a list of regexes is matched as one alternation; where one is broken the report quotes
    # that one, not the whole joined pattern the author never wrote
    edit = {"exit_reports": [r"exit code \d+", "[z-a]", r"return code = \d+"]}
    found = _problems(_rules_with(tmp_path, "outcome.yaml", edit), monkeypatch)
    assert "bad regex '[z-a]'" in found[("outcome.yaml", "exit_reports")]
    assert "exit code" not in found[("outcome.yaml", "exit_reports")]


def test_a_routine_line_runs_its_regex_only_on_a_text_that_holds_its_own_literals() -> None:
    # each routine line is screened by its own literals, not only by the union of all of
    # them: the same line is found for every example, and a pattern is never run on a text
    # without one of its literals
    routine = knowledge.shipped().routine
    assert len(routine.line_screens) == len(routine.lines)
    assert sum(lits is not None for lits in routine.line_screens) > len(routine.lines) // 2
    examples = [t for line in routine.lines for t in (*line.examples, *line.no_match)]
    texts = [*examples, *(t.upper() for t in examples), *(f"[rank3]: {t} x" for t in examples)]
    unscreened = dataclasses.replace(routine, line_screens=())
    for text in texts:
        assert routine.which(text) == unscreened.which(text)
    ran: list[str] = []
    spied = _spied(routine, ran)
    j = next(i for i, lits in enumerate(routine.line_screens) if lits is not None)

    def holds_any(text: str, lits: tuple[str, ...]) -> bool:
        low = text.lower()
        return any((lit[1:] in low) if lit.startswith("\0") else (lit in text) for lit in lits)

    # a routine text of another line that holds none of line j's literals
    other = next(
        t
        for t in examples
        if routine.which(t) not in (None, routine.lines[j])
        and not holds_any(t, routine.line_screens[j])  # type: ignore[arg-type]
    )
    assert spied.which(other).id == routine.which(other).id  # type: ignore[union-attr]
    assert routine.lines[j].id not in ran


def test_a_text_without_any_routine_literal_runs_only_the_lines_that_have_none() -> None:
    # three routine lines hold no literal to screen by (a shell's `+ cmd` echo, a config
    # dump's `'key': value`, DeepSpeed's op report): a text that holds none of the other
    # lines' literals is tried against those three alone, and still found when it is one
    routine = knowledge.shipped().routine
    without = [
        line.id for line, lits in zip(routine.lines, routine.line_screens, strict=True) if not lits
    ]
    assert 0 < len(without) < len(routine.lines) // 4
    ran: list[str] = []
    spied = _spied(routine, ran)
    assert spied.which("RuntimeError: NCCL communicator was aborted on rank 3.") is None
    assert ran == without
    echo = "++ git rev-parse --show-toplevel"
    assert spied.which(echo).id == routine.which(echo).id == "shell-xtrace-echo"  # type: ignore[union-attr]


def _spied(routine: Any, ran: list[str]) -> Any:
    """`routine` whose lines append their id to `ran` each time their pattern is tried."""

    class Spy:
        def __init__(self, line: Any) -> None:
            self.line = line

        def search(self, text: str) -> object:
            ran.append(self.line.id)
            return self.line.pattern.search(text)

    return dataclasses.replace(
        routine,
        lines=tuple(dataclasses.replace(line, pattern=Spy(line)) for line in routine.lines),
    )
