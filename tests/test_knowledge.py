"""The knowledge base as its authors meet it: one loader, one validator that names every
problem with its file and item, the shipped folders found through the package, and a corpus
whose held-out files never reach an index."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from triage import knowledge
from triage.knowledge import corpus
from triage.train import indexing

BROKEN_RULES = """
- id: team-one
  title: One
  match: {any: ['(?P<x']}
  concludes: {symptom: {S99: 0.5}}
  examples: {match: [a], no_match: [b]}
- id: team-two
  title: Two
  match: {any: ['fine']}
  concludes: {symptom: {S14: 1.5}}
  actions: {F9: "nope"}
  exampels: {}
- title: no id
  match: {}
"""


def test_the_shipped_knowledge_and_corpus_have_no_problems() -> None:
    assert knowledge.problems() == []  # rules, every other kind, the corpus


def test_every_problem_of_every_rule_is_reported_with_file_and_item(tmp_path: Path) -> None:
    (tmp_path / "team.yaml").write_text(BROKEN_RULES, encoding="utf-8")
    with pytest.raises(knowledge.RuleError) as err:
        knowledge.load([tmp_path])
    found = [(Path(p.file).name, p.item, p.message) for p in err.value.problems]
    assert all(file == "team.yaml" for file, _, _ in found)
    by_item: dict[str, list[str]] = {}
    for _, item, message in found:
        by_item.setdefault(item, []).append(message)
    # pySigma style: one run shows all that is wrong, not the first problem only
    assert any("bad regex" in m for m in by_item["rule 'team-one'"])
    assert any("unknown taxonomy id 'S99'" in m for m in by_item["rule 'team-one'"])
    two = " | ".join(by_item["rule 'team-two'"])
    assert "unknown key(s) ['exampels']" in two and "[0, 1]" in two and "not a fix pattern" in two
    assert any("needs an `id`" in m for m in by_item["entry #3"])
    assert len(found) >= 6


def test_zero_shipped_rules_is_an_error_not_an_empty_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(knowledge.RULES_ENV, str(tmp_path))
    with pytest.raises(knowledge.KnowledgeError, match="holds no rules"):
        knowledge.load()


def test_the_shipped_folders_come_from_the_package_not_from_a_path_guess(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    rules = knowledge.package_dir("triage.rules")
    models = knowledge.package_dir("triage.models")
    assert any(p.suffix == ".yaml" for p in rules.iterdir())
    assert (models / "manifest.json").is_file() and (models / "corpus" / "manifest.yaml").is_file()
    # without the developer's variables, the knowledge is the installed package's folders
    monkeypatch.delenv(knowledge.RULES_ENV, raising=False)
    monkeypatch.delenv(knowledge.MODELS_ENV, raising=False)
    assert knowledge.rules_dir() == rules and knowledge.models_dir() == models
    # with them (a developer's checkout), their folders replace the package's
    monkeypatch.setenv(knowledge.RULES_ENV, str(tmp_path / "rules"))
    monkeypatch.setenv(knowledge.MODELS_ENV, str(tmp_path / "models"))
    assert knowledge.rules_dir() == tmp_path / "rules"
    assert knowledge.models_dir() == tmp_path / "models"


def _corpus(folder: Path, manifest: str, files: dict[str, list[dict]]) -> Path:
    folder.mkdir()
    (folder / "manifest.yaml").write_text(manifest, encoding="utf-8")
    for name, rows in files.items():
        text = "".join(json.dumps(r) + "\n" for r in rows)
        (folder / name).write_text(text, encoding="utf-8")
    return folder


def _case(case_id: str, **extra: object) -> dict:
    row = {
        "id": case_id,
        "url": f"https://github.com/o/r/issues/{case_id}",
        "evidence": "torch.OutOfMemoryError: CUDA out of memory.",
        "symptom": "S14",
        "root_cause": "R16",
        "fix": "F5",
        "stage": "ST4",
    }
    return {**row, **extra}


def test_held_out_cases_are_never_indexed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    models = tmp_path / "models"
    models.mkdir()
    _corpus(
        models / "corpus",
        "kind: corpus\nfiles:\n  - {file: ref.jsonl, use: reference}\n"
        "  - {file: test.jsonl, use: held_out}\n",
        {"ref.jsonl": [_case("a")], "test.jsonl": [_case("b")], "unlisted.jsonl": [_case("c")]},
    )
    monkeypatch.setenv(knowledge.MODELS_ENV, str(models))
    monkeypatch.delenv(corpus.CORPUS_ENV, raising=False)
    assert corpus.reference_files() == [models / "corpus" / "ref.jsonl"]
    assert corpus.held_out_files() == [models / "corpus" / "test.jsonl"]
    with pytest.raises(ValueError, match="held-out"):
        indexing.build_index(
            tmp_path / "idx", [models / "corpus" / "test.jsonl"], tmp_path / "none"
        )


def test_the_shipped_held_out_split_follows_its_rule_and_never_meets_the_index() -> None:
    """mined.jsonl and heldout.jsonl were split once by a hash of each thread's URL (see
    models/corpus/manifest.yaml): every held-out case is on its side of the rule (cases only
    ever move to the reference side), no thread is on both sides, and no held-out case is in
    the shipped index."""
    import hashlib

    def held_out_by_rule(url: str) -> bool:
        digest = hashlib.sha256(url.strip().rstrip("/").lower().encode()).hexdigest()
        return int(digest, 16) % 10 < 3

    held = [row for path in corpus.held_out_files() for row in corpus.read_cases(path)]
    refs = [row for path in corpus.reference_files() for row in corpus.read_cases(path)]
    assert len(held) >= 150
    assert all(held_out_by_rule(row["url"]) for row in held)

    def norm(url: str) -> str:
        return url.strip().rstrip("/").lower()

    assert not {norm(r["url"]) for r in held} & {norm(r["url"]) for r in refs}
    indexed = {
        json.loads(line)["id"]
        for line in (knowledge.models_dir() / "index.jsonl").read_text().splitlines()
    }
    assert not indexed & {row["id"] for row in held}


def test_the_corpus_validator_names_each_bad_case(tmp_path: Path) -> None:
    folder = _corpus(
        tmp_path / "corpus",
        "kind: corpus\nfiles:\n  - {file: ref.jsonl, use: reference}\n"
        "  - {file: test.jsonl, use: held_out}\n  - {file: gone.jsonl, use: reference}\n"
        "  - {file: ref.jsonl, use: training}\n",
        {
            "ref.jsonl": [_case("a"), _case("b", url=""), _case("c", symptom="S99")],
            "test.jsonl": [_case("a")],
        },
    )
    found = {(Path(p.file).name, p.item, p.message) for p in corpus.problems(folder)}
    assert ("manifest.yaml", "file 'gone.jsonl'", "no such file in the corpus folder") in found
    assert any(item == "file 'ref.jsonl'" and "`use`" in msg for _, item, msg in found)
    assert ("ref.jsonl", "case 'b'", "missing url") in found
    assert ("ref.jsonl", "case 'c'", "`symptom`: unknown taxonomy id 'S99'") in found
    # the same case held out and indexed would leak into the index
    assert any(f == "test.jsonl" and "also used in ref.jsonl" in m for f, _, m in found)


def test_a_team_playbook_is_checked_like_a_rule(tmp_path: Path) -> None:
    (tmp_path / "book.yaml").write_text(
        "kind: playbook\n"
        "causes:\n"
        "  R99: {F1: 'x'}\n"
        "  R16:\n"
        "    F9: 'y'\n"
        "    F5: ['Lower the batch on rank {rank}', {text: 'x', when: {hang: maybe}}]\n"
        "fallback: {F5: 'Free {what}'}\n",
        encoding="utf-8",
    )
    with pytest.raises(knowledge.RuleError) as err:
        knowledge.load([tmp_path])
    found = {(p.item, p.message.split(";")[0]) for p in err.value.problems}
    assert ("cause R99", "unknown root cause id") in found
    assert ("cause R16 / F9", "unknown fix pattern id") in found
    assert ("cause R16 / F5", "`hang` must be true or false") in found
    assert ("fallback F5", "must be one template that names no {fact}") in found


def test_each_cascade_family_example_reads_as_that_family() -> None:
    from triage.analysis import cascade
    from triage.model import Event, EventKind, Level

    families = knowledge.load().cascade.families
    assert families and all(f.examples for f in families)
    for family in families:
        for text in family.examples:
            event = Event(source="x", kind=EventKind.ERROR_LINE, text=text, level=Level.ERROR)
            role = cascade.classify_event(event)
            assert (role.role, role.family) == ("cascade", family.name), text


def test_each_peer_mismatch_example_read_by_the_log_parser_is_a_detected_mismatch() -> None:
    """The examples go through the real log parser, as a job's console would: the event it
    makes is an initiating error on its own (the best lead when nothing else says more) that
    correlate knows to re-read once the flight recorder shows whose collective differed."""
    from triage.analysis import cascade
    from triage.parsers import parse_text

    examples = knowledge.load().cascade.peer_mismatch_examples
    assert examples
    for text in examples:
        events = [
            ev
            for ev in parse_text(
                f"[rank2]:terminate called after throwing an instance of "
                f"'gloo::EnforceNotMet'\n[rank2]:{text}\n",
                "console.log",
            ).events
            if ev.kind in cascade.ERROR_KINDS
        ]
        assert events and all(cascade.reports_peer_mismatch(ev) for ev in events), text
        assert {cascade.classify_event(ev).role for ev in events} == {"initiating"}, text


def test_a_peer_mismatch_example_its_messages_do_not_match_is_reported(tmp_path: Path) -> None:
    from triage.knowledge import cascade as cascade_kind

    problems: list[tuple[str, str]] = []
    cascade_kind.build(
        {
            "families": {"x": {"messages": ["x"], "examples": ["x"]}},
            "initiating": ["oom"],
            "context": ["ctx"],
            "peer_address": "(?P<ip>a):(?P<port>1)",
            "peer_mismatch": {"messages": ["size differs"], "examples": ["dtype differs"]},
        },
        lambda item, message: problems.append((item, message)),
        False,
    )
    assert any(item == "peer_mismatch" and "misses its example" in m for item, m in problems)


def test_a_cascade_family_or_reading_example_its_messages_miss_is_reported() -> None:
    """A family's examples are checked against its messages at load, as its readings' are: a
    family whose messages drift from what it claims to read is found before a job is."""
    from triage.knowledge import cascade as cascade_kind

    problems: list[tuple[str, str]] = []
    family = {
        "messages": ["Connection reset by peer"],
        "examples": ["Connection closed by peer"],
        "readings": [{"name": "r", "messages": ["reset"], "examples": ["peer gone"]}],
    }
    cascade_kind.build(
        {
            "families": {"peer_closed": family},
            "initiating": ["oom"],
            "context": ["ctx"],
            "peer_address": "(?P<ip>a):(?P<port>1)",
        },
        lambda item, message: problems.append((item, message)),
        False,
    )
    assert ("family peer_closed", "misses its example 'Connection closed by peer'") in problems
    assert ("family peer_closed reading 'r'", "misses its example 'peer gone'") in problems


def test_cascade_rules_are_named_in_the_cascade_file_not_in_the_rule(tmp_path: Path) -> None:
    kb = knowledge.load()
    listed = {rule_id for family in kb.cascade.families for rule_id in family.rules}
    assert listed and {r.id for r in kb.rules if r.cascade} == listed
    (tmp_path / "team.yaml").write_text(
        "- id: team-x\n  title: X\n  cascade: true\n  match: {any: ['xyzzy']}\n"
        "  concludes: {symptom: {S17: 0.5}}\n  examples: {match: [xyzzy], no_match: [b]}\n",
        encoding="utf-8",
    )
    with pytest.raises(knowledge.RuleError, match="list the rule in a family's `rules`"):
        knowledge.load([tmp_path])


def test_a_team_folder_cannot_redefine_what_correlate_reads(tmp_path: Path) -> None:
    (tmp_path / "cascade.yaml").write_text("kind: cascade\nfamilies: {}\n", encoding="utf-8")
    with pytest.raises(knowledge.RuleError, match="cannot hold `kind: cascade`"):
        knowledge.load([tmp_path])


def test_a_teams_collect_next_advice_reaches_the_summary_and_the_report(tmp_path: Path) -> None:
    from triage.pipeline import Options, explain
    from triage.report import render

    (tmp_path / "advice.yaml").write_text(
        "kind: collect_next\nadvice:\n"
        "  - situation: no GPU telemetry\n    when: {missing: env_report}\n"
        "    ask: the job's Grafana GPU panel export\n"
        "    how: 'Export the Grafana GPU panel of the job (team runbook 3).'\n",
        encoding="utf-8",
    )
    vague = "it doesn't work, training stopped"
    mine = explain(vague, Options(use_embeddings=False, extra_rules_dirs=(str(tmp_path),)))
    assert not mine.symptoms and "the job's Grafana GPU panel export" in mine.summary
    assert "NCCL_DEBUG=INFO" in mine.summary  # the shipped advice is still there, first
    assert "team runbook 3" in render(mine, "text")
    shipped = explain(vague, Options(use_embeddings=False))
    assert "Grafana" not in shipped.summary and "team runbook" not in render(shipped, "text")


def test_every_masking_example_masks_to_what_the_file_says() -> None:
    from triage.classify.signature import mask

    examples = knowledge.load().masks.examples
    assert examples
    for text, masked in examples:
        assert mask(text) == masked


def test_a_kept_exit_code_survives_the_number_masks() -> None:
    from triage.classify.signature import mask

    # the signal number and exit code mean something; the pid and the local rank do not
    assert mask("exitcode: -9 signal 15 return code 255 pid 4321") == (
        "exitcode: -9 SIGKILL signal 15 return code 255 pid <n>"
    )
    # an exit status that is a signal reads as its name, whichever launcher printed the number
    assert mask("exits with return code = -9") == "exits with return code = -9 SIGKILL"
    assert mask("exits with return code = 1") == "exits with return code = 1"
    assert mask("exit status 137") == "exit status 137 SIGKILL"
    assert mask("exit code 9-5, exit status 1.5") == "exit code 9-<n>, exit status 1.<n>"


def test_framework_screen_changes_no_answer() -> None:
    # `Frameworks.detect` skips a text holding none of the markers' literals; it must find
    # what searching every marker finds, case-folded and non-ASCII texts included.
    import dataclasses

    shipped = knowledge.shipped().frameworks
    assert shipped.screen is not None  # every shipped marker has literals: the screen is on
    unscreened = dataclasses.replace(shipped, screen=None)
    markers = (*shipped.frameworks, *shipped.launchers)
    texts = [e for m in markers for e in m.examples]
    texts += [t.upper() for t in texts] + [t.lower() for t in texts]
    texts += [f"é {t.upper()} ü" for t in texts]
    texts += ["NCCL INFO Channel 00/02 : 0 1", "loss 2.31 step 10", "Ёжик", "", "mpi", "MPI"]
    for text in texts:
        assert shipped.detect([text]) == unscreened.detect([text]), text
    assert shipped.detect(texts) == unscreened.detect(texts)
    assert "megatron" in shipped.detect(["é MEGATRON/core"])[0]
    assert shipped.detect(["nothing of note here"]) == ((), ())
