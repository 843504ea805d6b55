"""The shipped corpus bundles: real failing jobs, each with the truth a diagnosis is scored against.

The default run only reads the shipped bundles; the slow test makes one scenario again with
torchrun and checks it still shows the same facts.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

from triage import taxonomy

CORPUS = Path(__file__).resolve().parent.parent / "corpus_samples"


def _load_make() -> ModuleType:
    sys.path.insert(0, str(CORPUS))
    spec = importlib.util.spec_from_file_location("corpus_make", CORPUS / "make.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


make = _load_make()
BUNDLES = sorted(p.parent for p in CORPUS.glob("*/expected.json"))
BUNDLE_IDS = [b.name for b in BUNDLES]


def _expected(bundle: Path) -> dict:
    return json.loads((bundle / "expected.json").read_text(encoding="utf-8"))


def _rank_of(path: Path) -> int:
    """Rank from a file name: ``rank3`` if spelled out, else the last run of digits
    (``comm_lib_trace_rank_node01_3``, ``node07-2.json``)."""
    stem = path.name.removesuffix(".json").removesuffix(".txt")
    spelled = re.search(r"rank_?(\d+)", stem)
    return int(spelled.group(1)) if spelled else int(re.findall(r"\d+", stem)[-1])


def test_corpus_has_a_bundle_for_every_scenario_and_at_least_twelve() -> None:
    assert len(BUNDLES) >= 12
    assert set(BUNDLE_IDS) == set(make.SCENARIOS)


@pytest.mark.parametrize("bundle", BUNDLES, ids=BUNDLE_IDS)
def test_expected_json_uses_taxonomy_ids_and_names_a_real_culprit(bundle: Path) -> None:
    tax = taxonomy.load()
    exp = _expected(bundle)
    assert exp["scenario"] == bundle.name
    assert exp["symptom"] in tax.symptoms
    assert exp["root_cause"] in tax.root_causes
    assert exp["fix"] in tax.fix_patterns
    assert exp["stage"] in tax.stages
    assert set(exp["symptom_alt"]) <= set(tax.symptoms) - {exp["symptom"]}
    assert set(exp["root_cause_alt"]) <= set(tax.root_causes) - {exp["root_cause"]}
    assert set(exp["fix_alt"]) <= set(tax.fix_patterns) - {exp["fix"]}
    assert all(0 <= r < exp["world_size"] for r in exp["culprit_ranks"])
    assert isinstance(exp["hang"], bool)
    assert exp["story"] and "\n" not in exp["story"]
    assert exp["command"] == f"python corpus_samples/make.py {bundle.name}"


@pytest.mark.parametrize("bundle", BUNDLES, ids=BUNDLE_IDS)
def test_bundle_holds_what_the_user_had_after_the_crash(bundle: Path) -> None:
    sc = make.SCENARIOS[bundle.name]
    exp = _expected(bundle)
    evidence = make.evidence_dir(bundle)
    assert (evidence / sc.env_report).read_text().startswith("Collecting environment information")
    assert (bundle / "README.md").is_file()
    for node in sc.nodes:
        console = (evidence / node.console).read_text(encoding="utf-8")
        assert "torch/distributed/run.py" in console  # the launcher's own lines are there
    started_workers = "[default0]:" in (evidence / sc.nodes[0].console).read_text(encoding="utf-8")
    if started_workers:
        for node in sc.nodes:
            for local in range(node.nproc):
                logs = list((evidence / node.logs).glob(f"*/attempt_0/{local}/stderr.log"))
                assert logs, f"{node.host} local rank {local} has no --log-dir stderr.log"
    assert problems_of(bundle) == []
    fr_ranks = sorted({_rank_of(f) for f in (evidence / sc.fr_dir).glob("*")})
    assert fr_ranks == sorted(sc.fr_ranks)
    if exp["hang"]:
        assert make.pyspy_dumps(bundle), "a hang without py-spy dumps of the stuck processes"


def problems_of(bundle: Path) -> list[str]:
    return make.check_bundle(bundle, make.SCENARIOS[bundle.name])


@pytest.mark.parametrize("bundle", BUNDLES, ids=BUNDLE_IDS)
def test_the_answer_is_kept_outside_the_evidence(bundle: Path) -> None:
    """triage runs on bundle/; the truth and the story must not be in there to be read."""
    evidence = make.evidence_dir(bundle)
    assert evidence.is_dir()
    names = {p.name for p in evidence.rglob("*")}
    assert not names & {"expected.json", "README.md"}
    assert {p.name for p in bundle.iterdir()} == {"bundle", "expected.json", "README.md"}


@pytest.mark.parametrize("bundle", BUNDLES, ids=BUNDLE_IDS)
def test_flight_recorder_dumps_load_as_plain_data(bundle: Path) -> None:
    sc = make.SCENARIOS[bundle.name]
    for f in sorted((make.evidence_dir(bundle) / sc.fr_dir).glob("*")):
        raw = f.read_bytes()
        assert raw[:2] == b"\x80\x02" or raw[:1] == b"{", f"{f.name} is neither pickle nor JSON"
        dump = make.load_fr(f)
        assert dump["version"] == "2.10"
        assert dump["entries"], f"{f.name} recorded no collective"


HANGS_WITH_TWO_SIDES = [
    b
    for b in BUNDLES
    if _expected(b)["hang"]
    and any(_rank_of(p) in _expected(b)["culprit_ranks"] for p in make.pyspy_dumps(b))
]


def _first_user_frame(dump: Path) -> str:
    """The innermost main-thread frame outside torch: where the rank's own code was waiting."""
    text = dump.read_text(encoding="utf-8")
    main = text.split('"MainThread"', 1)[1]
    for line in main.splitlines()[1:]:
        m = re.match(r"    (.+?) \((.+?):(\d+)\)$", line)
        if m and not m.group(2).startswith("torch/"):
            return f"{m.group(1)} {m.group(2)}:{m.group(3)}"
    raise AssertionError(f"no user frame in {dump}")


@pytest.mark.parametrize("bundle", HANGS_WITH_TWO_SIDES, ids=[b.name for b in HANGS_WITH_TWO_SIDES])
def test_hung_culprit_waits_somewhere_else_than_its_peers_in_pyspy(bundle: Path) -> None:
    culprits = set(_expected(bundle)["culprit_ranks"])
    where = {_rank_of(d): _first_user_frame(d) for d in make.pyspy_dumps(bundle)}
    culprit_sites = {site for r, site in where.items() if r in culprits}
    peer_sites = {site for r, site in where.items() if r not in culprits}
    assert peer_sites and culprit_sites.isdisjoint(peer_sites)


FR_WITH_TWO_SIDES = [
    b
    for b in BUNDLES
    if _expected(b)["culprit_ranks"]
    and make.SCENARIOS[b.name].fr_shows_culprit
    and set(make.SCENARIOS[b.name].fr_ranks) & set(_expected(b)["culprit_ranks"])
    and set(make.SCENARIOS[b.name].fr_ranks) - set(_expected(b)["culprit_ranks"])
    and len(_expected(b)["culprit_ranks"]) < _expected(b)["world_size"]
]


@pytest.mark.parametrize("bundle", FR_WITH_TWO_SIDES, ids=[b.name for b in FR_WITH_TWO_SIDES])
def test_flight_recorder_shows_the_culprit_out_of_step(bundle: Path) -> None:
    sc = make.SCENARIOS[bundle.name]
    culprits = set(_expected(bundle)["culprit_ranks"])
    last = make.fr_last_entries(bundle, sc.fr_dir)
    culprit_last = {v for k, v in last.items() if _rank_of(Path(k)) in culprits}
    peer_last = {v for k, v in last.items() if _rank_of(Path(k)) not in culprits}
    assert culprit_last.isdisjoint(peer_last)


def test_nothing_of_this_machine_leaks_into_the_bundles() -> None:
    leaks = [b"/work/main", b"/root", b".venv", b"/tmp/corpus-"]
    for f in CORPUS.rglob("*"):
        # third_party/ holds other people's logs as they committed them, their paths included
        parts = f.relative_to(CORPUS).parts
        if f.is_file() and "jobs" not in parts and "third_party" not in parts:
            data = f.read_bytes()
            for leak in leaks:
                assert leak not in data, f"{f.relative_to(CORPUS)} contains {leak!r}"


def test_shipped_bundles_stay_small() -> None:
    total = sum(f.stat().st_size for b in BUNDLES for f in b.rglob("*") if f.is_file())
    assert total < 5 * 2**20


@pytest.mark.slow
def test_raise_mid_step_reproduces_its_shipped_facts(tmp_path: Path) -> None:
    name = "raise_mid_step"
    sc = make.SCENARIOS[name]
    fresh = make.run_scenario(sc, tmp_path)
    shipped = CORPUS / name

    # error.json of a victim rank depends on whether SIGTERM or the peer's error got there first.
    def stable(files: set[str]) -> set[str]:
        return {f for f in files if not f.endswith("error.json")}

    assert stable(make.bundle_files(fresh)) == stable(make.bundle_files(shipped))
    assert make.check_bundle(fresh, sc) == []
    assert list(
        make.evidence_dir(fresh).glob("logs/*/attempt_0/2/error.json")
    )  # the culprit's @record error file
    assert make.fr_last_entries(fresh, sc.fr_dir) == make.fr_last_entries(shipped, sc.fr_dir)
    facts = {"symptom", "root_cause", "fix", "stage", "culprit_ranks", "hang", "world_size"}
    assert {k: _expected(fresh)[k] for k in facts} == {k: _expected(shipped)[k] for k in facts}
