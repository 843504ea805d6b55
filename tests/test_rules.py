"""The rule engine and every shipped rule's own examples (Semgrep style: a rule without a
failing example is not done)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from triage import knowledge
from triage.classify import rule_examples
from triage.classify import rules as engine
from triage.knowledge.actions import Action, JobConditions, parse_action
from triage.model import (
    Analysis,
    CollectiveRef,
    Event,
    EventKind,
    Finding,
    HangReport,
    Level,
    SourceKind,
)
from triage.parsers import parse_text
from triage.pipeline import check_rules

RULES = engine.list_rules()


def test_every_rules_file_reaches_the_engine_with_unique_ids() -> None:
    # a file the loader skipped (a bad `kind:`, a YAML slip) would give the engine no rule
    files = {
        p.name
        for p in knowledge.rules_dir().glob("*.yaml")
        if isinstance(yaml.safe_load(p.read_text(encoding="utf-8")), list)
    }
    assert files and files == {Path(r.file).name for r in RULES}
    assert len({r.id for r in RULES}) == len(RULES)


# Semgrep style: every example goes through the real engine, never as a bare text event, read
# as triage reads a user's evidence (`rule_examples.example_readings`: as a file, in a big log, as a
# paste). A team folder's examples are read the same way whenever it is loaded.
def _examples(rule: engine.Rule, match: bool) -> list:
    return list(rule.examples_match if match else rule.examples_no_match)


def _readings(rule: engine.Rule, example: object, tmp_path: Path) -> dict[str, bool]:
    """Whether the rule hits its example, per way of reading it."""
    return rule_examples.example_readings(rule, example, knowledge.shipped(), tmp_path)


@pytest.mark.parametrize("rule", RULES, ids=[r.id for r in RULES])
def test_rule_examples_through_the_parser(rule: engine.Rule, tmp_path: Path) -> None:
    assert rule.examples_match and rule.examples_no_match
    for example in _examples(rule, match=True):
        missed = [way for way, hit in _readings(rule, example, tmp_path).items() if not hit]
        assert not missed, f"{rule.id} should match {example!r} read {', '.join(missed)}"
    for example in _examples(rule, match=False):
        wrong = [way for way, hit in _readings(rule, example, tmp_path).items() if hit]
        assert not wrong, f"{rule.id} must not match {example!r} read {', '.join(wrong)}"


def _write(tmp_path: Path, body: str) -> Path:
    d = tmp_path / "team_rules"
    d.mkdir(exist_ok=True)
    (d / "team.yaml").write_text(body, encoding="utf-8")
    return d


GOOD_RULE = """
- id: team-disk-full
  title: Scratch disk full
  match:
    any: ['No space left on device: .(?P<path>/scratch/\\S+).']
  concludes:
    symptom: {S28: 0.8}
    root_cause: {R05: 0.7}
    fix: {F5: 0.8}
  actions:
    F5: "Free space under {path} on rank {rank} (node {host})"
  examples:
    match: ["OSError: [Errno 28] No space left on device: '/scratch/ckpt/step_10.pt'"]
    no_match: ["saved checkpoint to /scratch/ckpt"]
"""


def test_a_team_folder_adds_its_rules_and_fills_actions_from_groups(tmp_path: Path) -> None:
    folder = _write(tmp_path, GOOD_RULE)
    assert "team-disk-full" in {r.id for r in engine.list_rules([folder])}
    assert "team-disk-full" not in {r.id for r in engine.list_rules()}
    event = Event(
        source="rank3.log",
        kind=EventKind.TRACEBACK,
        text="Traceback (most recent call last):\n  File x\n"
        "OSError: [Errno 28] No space left on device: '/scratch/ckpt/step_10.pt'",
        line=40,
        rank=3,
        level=Level.ERROR,
    )
    hits = [
        h for h in engine.match_events([event], None, [folder]) if h.rule_id == "team-disk-full"
    ]
    assert len(hits) == 1
    hit = hits[0]
    # The quoted line is the error line inside the traceback, with its absolute line number.
    assert hit.evidence_text.startswith("OSError: [Errno 28]")
    assert hit.evidence_line == 42
    # The node is not known here: its clause is left out, never shown as a placeholder.
    assert [a.text for a in hit.actions["F5"]] == [
        "Free space under /scratch/ckpt/step_10.pt on rank 3"
    ]


@pytest.mark.parametrize(
    ("body", "complaint"),
    [
        (GOOD_RULE.replace("S28", "S99"), "unknown taxonomy id 'S99'"),
        (GOOD_RULE.replace("(?P<path>", "(?P<path"), "bad regex"),
        (GOOD_RULE.replace("  examples:", "  exampels:"), "unknown key"),
        (GOOD_RULE.replace("0.8}", "1.8}", 1), "weight must be a number in [0, 1]"),
        (GOOD_RULE.replace('F5: "', 'F9: "'), "not a fix pattern id"),
        (
            GOOD_RULE.replace('no_match: ["saved checkpoint to /scratch/ckpt"]', "no_match: []"),
            "at least one example",
        ),
    ],
)
def test_a_broken_rule_is_rejected_with_file_and_rule_named(
    tmp_path: Path, body: str, complaint: str
) -> None:
    folder = _write(tmp_path, body)
    with pytest.raises(engine.RuleError) as err:
        engine.list_rules([folder])
    message = str(err.value)
    assert "team.yaml" in message and "team-disk-full" in message and complaint in message


def _action(raw: object) -> Action:
    problems: list[str] = []
    action = parse_action(raw, "test", lambda item, msg: problems.append(msg))
    assert action is not None, problems
    return action


def test_a_missing_fact_drops_its_clause_or_the_action_never_a_placeholder() -> None:
    clause = _action("Check every node joins ({joined} of {expected} clients joined).")
    assert clause.fill({"joined": 1, "expected": 2}, JobConditions()) == (
        "Check every node joins (1 of 2 clients joined)."
    )
    assert clause.fill({}, JobConditions()) == "Check every node joins."
    bare = _action("Raise the timeout above {timeout_ms} ms.")
    assert (
        bare.fill({"timeout_ms": 600000}, JobConditions()) == "Raise the timeout above 600000 ms."
    )
    assert bare.fill({}, JobConditions()) is None
    # parentheses inside code are code, not a clause that can go
    code = _action("Raise it: `timedelta(minutes={m})`.")
    assert code.fill({}, JobConditions()) is None


def test_an_action_for_another_framework_is_not_given() -> None:
    action = _action(
        [
            {"text": "Offload less in the ZeRO config.", "when": {"framework": "deepspeed"}},
            "Use fewer DataLoader workers on {host}.",
            "Use fewer DataLoader workers.",
        ]
    )
    assert (
        action.fill({}, JobConditions(frameworks=frozenset({"deepspeed"})))
        == "Offload less in the ZeRO config."
    )
    assert action.fill({"host": "n1"}, JobConditions(frameworks=frozenset({"ddp"}))) == (
        "Use fewer DataLoader workers on n1."
    )
    assert action.fill({}, JobConditions()) == "Use fewer DataLoader workers."
    peer = _action({"text": "Read the log of {peer}.", "when": {"culprit": "unknown"}})
    assert (
        peer.fill({"peer": "[10.0.0.3]:1745"}, JobConditions())
        == "Read the log of [10.0.0.3]:1745."
    )
    assert peer.fill({"peer": "[10.0.0.3]:1745"}, JobConditions(culprit_known=True)) is None


def test_a_misspelt_framework_in_a_team_rule_is_reported(tmp_path: Path) -> None:
    body = GOOD_RULE.replace(
        'F5: "Free space under {path} on rank {rank} (node {host})"',
        "F5: {text: 'Free space', when: {framework: deepspeeed}}",
    )
    with pytest.raises(engine.RuleError, match="deepspeeed"):
        engine.list_rules([_write(tmp_path, body)])


def test_check_accepts_pasted_text_and_names_the_rule() -> None:
    hits = check_rules(
        "include/shm.h:28 NCCL WARN Call to posix_fallocate failed: No space left on device"
    )
    assert any(h.rule_id == "nccl-shm-exhausted" for h in hits)


def test_check_reads_a_file(tmp_path: Path) -> None:
    log = tmp_path / "rank0.log"
    log.write_text(
        "step 10 loss 2.1\n"
        "node08:27106:27302 [0] include/shm.h:48 NCCL WARN Error while creating shared memory "
        "segment nccl-shm-recv-b79-0-3-0 (size 4460544)\n",
        encoding="utf-8",
    )
    hits = [h for h in check_rules(str(log)) if h.rule_id == "nccl-shm-exhausted"]
    assert hits and hits[0].captures.get("size") == "4460544"
    assert hits[0].evidence_line == 2


def test_a_peer_closed_message_after_another_ranks_failure_is_marked_cascade() -> None:
    first = Event(
        source="r1.log",
        kind=EventKind.TRACEBACK,
        text="torch.OutOfMemoryError: CUDA out of memory.",
        line=5,
        rank=1,
    )
    echo = Event(
        source="r0.log",
        kind=EventKind.NCCL_WARN,
        text="n1:1:2 [0] misc/socket.cc:49 NCCL WARN socketProgress: "
        "Connection closed by remote peer n2<5>",
        line=9,
        rank=0,
    )
    analysis = Analysis(initiating_events=(first,), cascade_events=(echo,))
    hits = [
        h
        for h in engine.match_events([first, echo], analysis)
        if h.rule_id == "nccl-remote-peer-closed"
    ]
    assert hits and hits[0].from_cascade


def test_finding_rules_fire_on_findings_and_fill_the_lagging_rank(tmp_path: Path) -> None:
    folder = _write(
        tmp_path,
        """
- id: team-hang-lagging
  title: A rank never joined the collective
  match: {finding: lagging_rank}
  concludes: {symptom: {S17: 0.7}, root_cause: {R09: 0.4}, fix: {F3: 0.5}}
  actions: {F3: "Look at what rank {rank} does before {collective}"}
  examples:
    match: [{finding: lagging_rank, facts: {ranks: [3]}}]
    no_match: [{finding: hang}]
""",
    )
    analysis = Analysis(
        findings=(Finding(kind="lagging_rank", summary="rank 3 is behind", ranks=(3,)),),
        hang=HangReport(
            detected=True,
            lagging_ranks=(3,),
            process_group="0",
            collective=CollectiveRef(op="all_reduce"),
        ),
    )
    hits = [
        h for h in engine.match_events([], analysis, [folder]) if h.rule_id == "team-hang-lagging"
    ]
    assert len(hits) == 1
    assert [a.text for a in hits[0].actions["F3"]] == ["Look at what rank 3 does before all_reduce"]
    assert hits[0].evidence_text == "rank 3 is behind"


def test_kind_filter_limits_a_rule_to_its_event_kinds(tmp_path: Path) -> None:
    # its examples are run when the folder loads: an NCCL WARN line is what it can match
    nccl_only = GOOD_RULE.replace("  match:\n", "  match:\n    kind: [nccl_warn]\n").replace(
        "OSError: [Errno 28] No space left on device: '/scratch/ckpt/step_10.pt'",
        "node1:9:9 [0] include/shm.h:48 NCCL WARN No space left on device: '/scratch/shm/x'",
    )
    folder = _write(tmp_path, nccl_only)
    event = Event(
        source="x", kind=EventKind.TRACEBACK, text="No space left on device: '/scratch/a'", line=1
    )
    assert not [
        h for h in engine.match_events([event], None, [folder]) if h.rule_id == "team-disk-full"
    ]


def test_the_keyword_prefilter_only_keeps_literals_every_match_contains() -> None:
    assert engine.required_literals(r"Watchdog caught (?P<x>\w+) timeout") == ("Watchdog caught ",)
    assert engine.required_literals(r"food(?:bar)?|bazqux") == ("food", "bazqux")
    assert engine.required_literals(r"(?i:Address already in use)") == ("\0address already in use",)
    assert engine.required_literals(r"ab|cdef") is None  # one branch has no usable literal
    assert engine.required_literals(r"\d+ items") == (" items",)


def test_every_shipped_regex_rule_has_a_prefilter_keyword() -> None:
    # A rule without keywords runs its regexes on every event of every log: keep them cheap.
    slow = [r.id for r in RULES if r.needs_text and r.keywords is None]
    assert slow == []


PATHOLOGICAL_TEXTS = [
    "word " * 40000 + " must be divisible by 8",
    "OpType=ALLREDUCE, TensorShape=[1] " * 3000,
    'File "x.py", line 1\n' * 20000 + "IndexError: list index out of range",
    "a" * 300000,
    "No such file or directory " * 5000,
    # deeply indented source lines under library frames (the generic layer's frame test)
    ('  File "/site-packages/a.py", line 1, in f\n' + " " * 200 + "x = 1\n" * 6) * 2000,
]


# the suite's --timeout is the hang guard; bench/guard_timings.py measures the time
def test_huge_pathological_events_are_matched_in_bounded_time() -> None:
    # Rules run on every event of every rank's log: no pattern may backtrack for minutes on a
    # long line (a tqdm bar glued to an error, a repeated fingerprint, a 100k-line traceback).
    found = {
        hit.rule_id
        for text in PATHOLOGICAL_TEXTS
        for hit in engine.match_events([engine.whole_text_event(text)])
    }
    # the long traceback still reads as the exception it ends with, and nothing else matched
    assert found == {"generic-exception-user-code"}


def test_a_detail_the_parser_drops_is_still_found_in_a_paste() -> None:
    # NCCL prints the reason on the line after `Last error:`; a line-level parser may keep only
    # the error line, so match_text gives the rules a second look at the whole paste.
    paste = (
        "[trainer0|0]:ncclInternalError: Internal check failed.\n"
        "[trainer0|0]:Last error:\n"
        "[trainer0|0]:ncclSocketInit: connecting to address  with family 59936 is neither "
        "AF_INET(2) nor AF_INET6(10)\n"
    )
    hits = {h.rule_id: h for h in engine.match_text(paste, parse_text(paste).events)}
    assert "nccl-socket-interface" in hits and "nccl-internal-error" in hits
    assert hits["nccl-socket-interface"].evidence_line == 3


def test_check_reads_a_folder_of_logs(tmp_path: Path) -> None:
    (tmp_path / "rank0.log").write_text(
        "RuntimeError: Expected to have finished reduction in the prior iteration before "
        "starting a new one.\n",
        encoding="utf-8",
    )
    assert any(h.rule_id == "ddp-unused-parameters" for h in check_rules(str(tmp_path)))


def test_a_missing_team_rules_folder_is_an_error_not_silence(tmp_path: Path) -> None:
    with pytest.raises(engine.RuleError, match="rules folder not found"):
        engine.list_rules([tmp_path / "no_such_folder"])


def test_kind_filter_can_name_the_input_kind(tmp_path: Path) -> None:
    # its examples are run when the folder loads, as a file and as a paste (a text input): an
    # NCCL debug line is what it can match
    nccl_only = GOOD_RULE.replace("  match:\n", "  match:\n    kind: [nccl, text]\n").replace(
        "OSError: [Errno 28] No space left on device: '/scratch/ckpt/step_10.pt'",
        "node1:9:9 [0] include/shm.h:48 NCCL WARN No space left on device: '/scratch/shm/x'",
    )
    folder = _write(tmp_path, nccl_only)
    text = "OSError: [Errno 28] No space left on device: '/scratch/a'"
    from_nccl = Event(source="nccl.log", kind=EventKind.ERROR_LINE, text=text, line=1)
    from_rank = Event(source="rank0.log", kind=EventKind.ERROR_LINE, text=text, line=1)
    kinds = {"nccl.log": SourceKind.NCCL, "rank0.log": SourceKind.RANK_LOG}
    hits = engine.match_events([from_nccl, from_rank], None, [folder], source_kinds=kinds)
    assert [h.event.source for h in hits if h.rule_id == "team-disk-full"] == ["nccl.log"]


def test_rule_sources_and_layer_are_validated(tmp_path: Path) -> None:
    folder = _write(
        tmp_path,
        """
- id: team-generic
  title: t
  layer: general
  match: {any: ['boom']}
  concludes: {symptom: {S18: 0.5}}
  examples: {match: ['boom'], no_match: ['bam']}
""",
    )
    with pytest.raises(engine.RuleError, match="team-generic.*layer"):
        engine.load([folder])


def test_a_generic_exception_hit_yields_to_the_specific_rule_on_the_same_traceback() -> None:
    from triage.classify import fusion

    # The checkpoint loader's KeyError: the KeyError family says "runtime exception", the
    # mechanism says "checkpoint load"; only the mechanism is kept.
    paste = (
        "Traceback (most recent call last):\n"
        '  File "/home/me/train.py", line 40, in main\n'
        "    model.load_state_dict(sd)\n"
        "RuntimeError: Error(s) in loading state_dict for GPT:\n"
        '\tMissing key(s) in state_dict: "lm_head.weight".'
    )
    hits = check_rules(paste)
    assert {"ckpt-missing-unexpected-keys", "generic-runtime-error"} <= {h.rule_id for h in hits}
    kept = {h.rule_id for h in fusion.yield_generic(hits)}
    assert "ckpt-missing-unexpected-keys" in kept and "generic-runtime-error" not in kept


def test_a_generic_hit_on_another_event_stays_next_to_a_specific_one() -> None:
    from triage.classify import fusion

    # A warning the specific rules know about does not explain a ZeroDivisionError elsewhere.
    paste = (
        "[W reducer.cpp:1346] Warning: find_unused_parameters=True was specified in DDP "
        "constructor, but did not find any unused parameters in the forward pass.\n"
        "Traceback (most recent call last):\n"
        '  File "/home/me/train.py", line 61, in main\n'
        "    avg = total / n\n"
        "ZeroDivisionError: division by zero"
    )
    kept = {h.rule_id for h in fusion.yield_generic(check_rules(paste))}
    assert "generic-exception-user-code" in kept


def test_rules_mined_from_library_source_say_where_the_message_comes_from() -> None:
    # The generic layer and the lib_* files were written from the libraries' own messages:
    # each rule names the package module (or CPython/NCCL source) that prints its message.
    mined = [r for r in RULES if Path(r.file).name.startswith(("lib_", "generic"))]
    assert len(mined) >= 60
    assert [r.id for r in mined if not r.sources] == []
    assert {r.layer for r in mined if Path(r.file).name.startswith("generic")} == {"generic"}
