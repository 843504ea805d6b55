"""The classify stage as a user meets it: what a pasted error or a job's logs are labelled,
how sure the labels say they are, when it refuses to guess, and the reference index."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from triage import pipeline
from triage.analysis import correlate
from triage.classify import classify, classify_many, embedding, neighbours
from triage.classify.calibration import LogisticCalibrator, reliability
from triage.classify.signature import mask, signature
from triage.knowledge import corpus
from triage.model import (
    Analysis,
    Event,
    EventKind,
    FailureRef,
    Level,
    ParsedSource,
    Source,
    SourceKind,
)
from triage.report import view
from triage.train import indexing, references

OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.50 GiB. GPU 1 has a total "
    "capacity of 79.15 GiB of which 1.21 GiB is free. Including non-PyTorch memory, this process "
    "has 77.93 GiB memory in use. Of the allocated memory 74.10 GiB is allocated by PyTorch"
)
RESET = (
    "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
    "NCCLUtils.hpp:317, remote process exited or there was a network error, NCCL version 2.21.5\n"
    "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting "
    "prematurely.\nLast error:\nsocketProgressOpt: Call to recv from 10.0.3.7<51213> failed : "
    "Connection reset by peer"
)


def pasted(text: str) -> tuple[list[ParsedSource], Analysis]:
    """What `triage explain` does with a pasted text before classify."""
    parsed = references.paste_evidence(text)
    return parsed, correlate(parsed)


def ids(labels: Sequence) -> list[str]:
    return [x.id for x in labels]


@pytest.fixture(scope="session")
def embedding_model() -> None:
    """Load the similarity model once per session; tests that embed a query depend on this."""
    neighbours.embed(["warm up"])


@pytest.fixture(scope="session")
def shipped_index(embedding_model: None) -> neighbours.NeighbourIndex:
    """The index in models/ (the tests never rewrite it: `test_the_shipped_index_is_fresh`
    fails when it no longer matches its inputs)."""
    return neighbours.load_index()


# --------------------------------------------------------------------------- signature


def test_masking_hides_what_changes_between_runs_but_keeps_the_error() -> None:
    line = (
        "node08:27106:27302 [3] include/shm.h:48 NCCL WARN Error while creating shared memory "
        "segment nccl-shm-recv-b79-0-3-0 (size 4460544) on 10.0.0.12:29500 at 0x7f3a2c000000 "
        "in /home/alice/venv/lib/python3.10/site-packages/torch/distributed/c10d.py rank 5"
    )
    masked = mask(line)
    assert "NCCL WARN Error while creating shared memory segment" in masked
    for gone in ("node08", "27106", "4460544", "10.0.0.12", "0x7f3a", "/home/alice", "rank 5"):
        assert gone not in masked
    # the package-relative part of a path says which component failed; keep it
    assert "torch/distributed/c10d.py" in masked
    # an exit code is meaning, not noise: -9 is SIGKILL
    assert "exitcode: -9" in mask("failed (exitcode: -9) local_rank: 3 (pid: 81234)")


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=400))
def test_masking_any_text_never_fails_and_leaves_no_long_numbers(text: str) -> None:
    masked = mask(text)
    assert not any(len(run) > 3 for run in re.findall(r"(?<![\w-])\d+", masked))


def test_two_ranks_with_the_same_error_share_one_signature() -> None:
    a = "[rank3]: RuntimeError: CUDA error: an illegal memory access was encountered at 0x7f00aa"
    b = "[rank12]: RuntimeError: CUDA error: an illegal memory access was encountered at 0x5500bb"
    assert signature(*pasted(a)) == signature(*pasted(b))


def test_signature_reads_the_oom_before_the_connection_resets_it_caused() -> None:
    parsed, analysis = pasted(RESET + "\n" + OOM)
    first = signature(parsed, analysis).splitlines()[0]
    assert "out of memory" in first.lower()


def test_a_fatal_signal_is_placed_by_the_first_frame_of_its_innermost_first_stack() -> None:
    """faulthandler prints the crashing frame first: two segfaults in different code are two
    signatures, and the one in the user's script names the script's function."""
    dump = (
        "Fatal Python error: Segmentation fault\n\n"
        "Current thread 0x00007f3a2c000000 (most recent call first):\n"
        '  File "/workspace/{file}", line 42 in {func}\n'
        '  File "/usr/lib/python3.11/site-packages/torch/utils/data/_utils/fetch.py", '
        "line 52 in fetch\n"
    )
    mine = signature(*pasted(dump.format(file="train_native_aug.py", func="augment")))
    other = signature(*pasted(dump.format(file="loader.py", func="decode")))
    assert mine.splitlines()[0] == "in augment (<path>/train_native_aug.py)"
    assert "Segmentation fault" in mine.splitlines()[1]
    assert mine != other


# --------------------------------------------------------------------------- labels


def test_pasted_cuda_oom_is_gpu_out_of_memory_with_a_high_score() -> None:
    result = classify(*pasted(OOM))
    assert ids(result.symptoms)[0] == "S14"
    assert result.symptoms[0].score >= 0.8
    assert "R16" in ids(result.root_causes)[:3]
    assert result.stage is not None and result.stage.id == "ST4"
    assert result.evidence and "out of memory" in result.evidence[0].text.lower()
    assert all(0.0 <= s.score <= 1.0 for s in (*result.symptoms, *result.root_causes))


def test_rules_decide_an_oom_without_loading_the_embedding_model(monkeypatch) -> None:
    def no_model(*_: object) -> None:
        raise AssertionError("the paste was embedded although the rules decide")

    monkeypatch.setattr(neighbours, "embed", no_model)
    result = classify(*pasted(OOM))
    assert ids(result.symptoms)[0] == "S14"


def _event(source: str, rank: int, kind: EventKind, text: str, time: float) -> Event:
    return Event(
        source=source, kind=kind, text=text, line=10, rank=rank, time=time, level=Level.ERROR
    )


def _parsed(path: str, rank: int, events: tuple[Event, ...]) -> ParsedSource:
    source = Source(path=path, kind=SourceKind.RANK_LOG, size=1, open=lambda: None, rank=rank)
    return ParsedSource(source=source, events=events)


def test_connection_reset_on_rank0_after_oom_on_rank1_is_an_oom_case(embedding_model) -> None:
    oom = _event("rank1.log", 1, EventKind.TRACEBACK, OOM, 100.0)
    reset = _event("rank0.log", 0, EventKind.TRACEBACK, RESET, 101.5)
    timeout = _event(
        "rank2.log",
        2,
        EventKind.ERROR_LINE,
        "[rank2]:[E ProcessGroupNCCL.cpp:616] [Rank 2] Watchdog caught collective operation "
        "timeout: WorkNCCL(SeqNum=812, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
        "Timeout(ms)=600000) ran for 600023 milliseconds before timing out.",
        700.0,
    )
    parsed = [
        _parsed("rank0.log", 0, (reset,)),
        _parsed("rank1.log", 1, (oom,)),
        _parsed("rank2.log", 2, (timeout,)),
    ]
    analysis = Analysis(
        first_failure=FailureRef(1, None, 100.0, "rank1.log", 10, OOM),
        culprit_ranks=(1,),
        initiating_events=(oom,),
        cascade_events=(reset, timeout),
    )
    result = classify(parsed, analysis)
    assert ids(result.symptoms)[0] == "S14"
    assert ids(result.root_causes)[0] == "R16"
    # the evidence quoted first is the OOM on rank 1, not the cascade
    assert result.evidence[0].rank == 1


def test_vague_complaint_gets_no_confident_label_from_minilm(monkeypatch) -> None:
    # with the full MiniLM: an abstention or a weak guess, never a confident label
    pytest.importorskip("sentence_transformers")
    monkeypatch.setenv(embedding.EMBEDDING_ENV, "minilm")
    result = classify(*pasted("it doesn't work, training stopped"))
    assert all(x.score < 0.3 for x in (*result.symptoms, *result.root_causes))
    if not result.symptoms:
        reason = result.abstain_reason or ""
        for ask in ("NCCL_DEBUG=INFO", "TORCH_NCCL_DUMP_ON_TIMEOUT=1", "py-spy"):
            assert ask in reason


def test_vague_complaint_gets_no_confident_label_from_the_static_embedding(
    embedding_model,
) -> None:
    # its calibrated abstention threshold (0.11, chosen on the reference cases) lets a weak
    # guess through; it must stay a weak one, and the verdict must not claim a cause
    result = classify(*pasted("it doesn't work, training stopped"))
    assert all(x.score < 0.3 for x in (*result.symptoms, *result.root_causes))
    diagnosis = pipeline.explain("it doesn't work, training stopped")
    assert "most likely cause" not in diagnosis.summary
    assert "caused by" not in view.verdict(diagnosis)


def test_nothing_to_read_abstains_without_error() -> None:
    result = classify([], Analysis())
    assert result.symptoms == () and result.abstain_reason


def test_a_missing_index_is_an_error_that_says_how_to_build_it(tmp_path: Path, monkeypatch) -> None:
    # a tool without its index would abstain on everything: it must say so instead
    monkeypatch.setenv(neighbours.MODELS_ENV, str(tmp_path / "no_models"))
    with pytest.raises(neighbours.IndexMissing, match="triage index build"):
        classify(*pasted(OOM))


def test_abstention_names_the_rank_to_py_spy_when_correlate_found_it() -> None:
    # rank 5's log holds nothing a parser keeps: it just stopped writing
    analysis = Analysis(culprit_ranks=(5,))
    result = classify([_parsed("rank5.log", 5, ())], analysis, use_embeddings=False)
    assert result.symptoms == ()
    assert "py-spy dump --pid <PID>` of rank 5" in (result.abstain_reason or "")


def test_similar_cases_link_to_the_public_issues(shipped_index) -> None:
    text = (
        'Traceback (most recent call last):\n  File "train.py", line 3, in <module>\n'
        "    from colossalai.booster.plugin import MoeHybridParallelPlugin\n"
        "ImportError: cannot import name 'MoeHybridParallelPlugin' from "
        "'colossalai.booster.plugin'"
    )
    result = classify(*pasted(text))
    assert result.similar_cases
    for case in result.similar_cases:
        assert case.url and case.url.startswith("https://github.com/")
        assert 0.0 < case.score <= 1.0


def test_a_reference_case_never_matches_itself(shipped_index) -> None:
    rows = corpus.read_cases(corpus.reference_files()[0])
    case = next(r for r in rows if r["id"] == shipped_index.cases[0].id)
    result = classify(*pasted(case["evidence"]))
    assert case["id"] not in [c.id for c in result.similar_cases]


def test_batch_labels_match_one_by_one(shipped_index) -> None:
    texts = [OOM, RESET, "ModuleNotFoundError: No module named 'deepspeed'"]
    batch = classify_many([pasted(t) for t in texts])
    single = [classify(*pasted(t)) for t in texts]
    assert [ids(b.symptoms) for b in batch] == [ids(s.symptoms) for s in single]


# --------------------------------------------------------------------------- the index


def _write_cases(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


# A few labeled cases of our own, so the index tests need no corpus checkout.
SMALL_CASES = [
    ("t-oom", OOM, "S14", "R16", "F5", "ST4"),
    ("t-reset", RESET, "S12", "R07", "F4", "ST4"),
    ("t-import", "ModuleNotFoundError: No module named 'deepspeed'", "S02", "R02", "F1", "ST1"),
    (
        "t-shm",
        "NCCL WARN Error while creating shared memory segment nccl-shm (size 9637888)",
        "S12",
        "R05",
        "F5",
        "ST3",
    ),
    (
        "t-timeout",
        "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, "
        "OpType=ALLREDUCE) ran for 600000 milliseconds before timing out.",
        "S17",
        "R11",
        "F4",
        "ST4",
    ),
]


def _case_row(case: tuple[str, ...]) -> dict:
    cid, evidence, s, r, f, stage = case
    return {
        "id": cid,
        "url": f"https://example.org/{cid}",
        "evidence": evidence,
        "symptom": s,
        "root_cause": r,
        "fix": f,
        "stage": stage,
    }


def test_index_knows_when_it_is_stale_and_rebuilds(
    tmp_path: Path, embedding_model, monkeypatch
) -> None:
    rows = [_case_row(c) for c in SMALL_CASES]
    cases = tmp_path / "cases.jsonl"
    _write_cases(cases, rows)
    no_bundles = tmp_path / "no_bundles"
    out = indexing.build_index(tmp_path / "idx", [cases], no_bundles)
    assert indexing.stale_reasons(out, [cases], no_bundles) == []
    index = neighbours.load_index(out)
    assert index is not None and len(index) == len(rows)
    assert index.embeddings.dtype == np.float32

    rows[2] = {**rows[2], "evidence": rows[2]["evidence"] + "\nRuntimeError: something else"}
    _write_cases(cases, rows)
    assert indexing.stale_reasons(out, [cases], no_bundles) == [f"{cases.name} changed"]

    indexing.build_index(out, [cases], no_bundles)
    assert indexing.stale_reasons(out, [cases], no_bundles) == []
    # a pasted reference case finds the others, never itself ...
    index = neighbours.load_index(out)
    parsed, analysis = pasted(OOM)
    query = ([signature(parsed, analysis)], "embed")
    hashes = [neighbours.query_hashes(parsed)]
    assert "t-oom" not in [v.case_id for v in index.query(*query, query_hashes=hashes)[0]]
    # ... unless asked to (then it is its own nearest neighbour)
    monkeypatch.setenv(neighbours.SELF_MATCH_ENV, "1")
    nearest = index.query(*query, query_hashes=hashes)[0][0]
    assert nearest.case_id == "t-oom" and nearest.similarity > 0.99


def test_the_shipped_index_is_fresh_and_loads_without_torch(shipped_index) -> None:
    # stale: the corpus, a bundle, the parsers, correlate or the masks changed since it was
    # built; `triage index build` rebuilds it (the tests never do)
    assert indexing.stale_reasons() == []
    assert len(shipped_index) >= 100
    norms = np.linalg.norm(shipped_index.embeddings, axis=1)
    # unit length, or zero where the signature kept no word the model knows (a pasted table of
    # benchmark numbers masks to `<n> <n> ...`): such a case is never anyone's neighbour
    assert np.all(np.isclose(norms, 1.0, atol=1e-2) | (norms == 0.0))
    assert np.count_nonzero(norms == 0.0) <= 3
    # the public issues carry their URL; corpus_samples bundles are indexed too
    origins = {p.name for p in corpus.reference_files()}
    assert all(c.url for c in shipped_index.cases if c.origin in origins)
    assert any(c.id.startswith("sample:") for c in shipped_index.cases)


def test_numpy_tfidf_matches_scikit_learn() -> None:
    from sklearn.feature_extraction.text import TfidfVectorizer

    texts = [
        "NCCL WARN NET/IB : Got completion with error <n>",
        "CUDA out of memory. Tried to allocate <n> GiB",
        "Watchdog caught collective operation timeout: WorkNCCL ran for <n> ms",
        "out of memory out of memory on GPU",
    ]
    ours = neighbours.fit_tfidf(texts)
    ref = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True).fit(texts)
    query = ["CUDA out of memory while NCCL WARN timeout", "nothing known here"]
    expected = ref.transform(query).toarray()
    got = ours.transform(query)
    order = [ours.vocabulary[t] for t in ref.get_feature_names_out()]
    assert np.allclose(got[:, order], expected, atol=1e-6)


# --------------------------------------------------------------------------- calibration


def test_shipped_calibration_is_plain_numbers_and_gives_probabilities() -> None:
    path = neighbours.models_dir() / "calibration.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    for fields in data["calibrators"].values():
        for cal in fields.values():
            model = LogisticCalibrator.from_json(cal)
            assert len(model.coef) == len(model.features)
            strong = dict.fromkeys(model.features, 1.0)
            weak = dict.fromkeys(model.features, 0.0)
            p_strong, p_weak = model.predict([strong, weak])
            assert 0.0 < p_weak < p_strong < 1.0


def test_reliability_table_bins_scores_against_outcomes() -> None:
    rows = reliability([0.1, 0.15, 0.9, 0.95, 0.85], [False, False, True, True, False])
    assert rows[0][2] == 2 and rows[0][4] == 0.0
    assert rows[-1][2] == 3 and abs(rows[-1][4] - 2 / 3) < 1e-9


# --------------------------------------------------------------------------- real bundles

SAMPLES = references.default_samples()


@pytest.mark.skipif(
    not (SAMPLES / "import_error_on_one_node" / "expected.json").is_file(),
    reason="corpus_samples bundle not present",
)
def test_job_that_hung_because_one_node_failed_an_import_is_an_import_case(shipped_index) -> None:
    from triage.analysis import correlate

    bundle = SAMPLES / "import_error_on_one_node"
    parsed = references.bundle_evidence(bundle)
    # the bundle's truth and story are never read as evidence
    assert parsed
    assert not any(Path(p.source.path).name in ("expected.json", "README.md") for p in parsed)
    analysis = correlate(parsed)
    assert analysis.hang is not None and analysis.hang.detected
    result = classify(parsed, analysis)
    assert ids(result.symptoms)[0] == "S02"  # not S17: the hang is what the import caused
    assert ids(result.root_causes)[0] == "R01"


def _bundles() -> list[Path]:
    return sorted(p.parent for p in SAMPLES.glob("*/expected.json"))


# Bundles whose top symptom is wrong today, each with why (strict: a fix shows up as XPASS).
SYMPTOM_MISSES: dict[str, str] = {}


@pytest.mark.parametrize(
    "bundle",
    [
        pytest.param(
            b,
            id=b.name,
            marks=[pytest.mark.xfail(reason=SYMPTOM_MISSES[b.name], strict=True)]
            if b.name in SYMPTOM_MISSES
            else [],
        )
        for b in _bundles()
    ],
)
def test_every_real_bundle_gets_its_symptom_and_root_cause(bundle: Path, shipped_index) -> None:
    from triage.analysis import correlate

    expected = json.loads((bundle / "expected.json").read_text(encoding="utf-8"))
    # the bundle is in the shipped index, and never votes for itself (no exclusion needed)
    parsed = references.bundle_evidence(bundle)
    result = classify(parsed, correlate(parsed))
    symptoms = {expected["symptom"], *expected.get("symptom_alt", [])}
    causes = {expected["root_cause"], *expected.get("root_cause_alt", [])}
    assert ids(result.symptoms)[:1] and ids(result.symptoms)[0] in symptoms
    assert set(ids(result.root_causes)[:3]) & causes


@pytest.mark.parametrize(
    "name", ["keyerror_in_prefetch_thread_rank_waits", "segfault_native_augment"]
)
def test_a_job_that_failed_in_its_own_script_is_blamed_on_that_code_not_the_framework(
    name: str, shipped_index
) -> None:
    """A KeyError raised at the user's line 46, a segfault whose innermost frame is the user's
    line 42: neighbours and the learned model, reading pastes of DataLoader crashes, said
    "framework logic bug"; the job's own frames say where it failed, and that leads."""
    d = pipeline.diagnose([str(SAMPLES / name / "bundle")])
    assert d.root_causes and d.root_causes[0].id == "R26", d.summary
    # the cause said is the user's code; a framework bug the tables show at the same
    # percentage is named after it as tied, never as the cause
    assert "most likely cause: error in the user's training code" in d.summary, d.summary
    assert "cause: framework logic bug" not in d.summary


def test_a_loss_that_went_nan_on_one_rank_first_is_blamed_on_that_ranks_data(
    shipped_index,
) -> None:
    """Rank 1's own loss went NaN while the others' stayed finite (a zero std in its shard):
    DDP ranks hold the same weights, so the cause is that rank's data, not the learning rate,
    though every rank's FloatingPointError line reads the same."""
    d = pipeline.diagnose([str(SAMPLES / "nan_from_one_rank_shard" / "bundle")])
    assert d.root_causes and d.root_causes[0].id == "R27", d.summary
    assert d.fix_patterns and d.fix_patterns[0].id == "F6", d.summary


@pytest.mark.parametrize("bundle", _bundles(), ids=lambda p: p.name)
def test_a_shipped_bundle_never_votes_for_itself_wherever_it_lies(
    bundle: Path, tmp_path: Path
) -> None:
    """The demo bundles are in the index; diagnosing one (or a copy of it somewhere else) must
    not cite `neighbour:sample:<itself>`: a case never votes for itself."""
    import shutil

    from triage.analysis import correlate

    own = references.bundle_case_id(bundle)
    index = neighbours.load_index()
    copy = tmp_path / bundle.name
    shutil.copytree(bundle, copy)
    for where in (bundle, copy):
        parsed = references.bundle_evidence(where)
        votes = index.query(
            [signature(parsed, correlate(parsed))],
            "tfidf",
            query_hashes=[neighbours.query_hashes(parsed)],
        )[0]
        assert own not in [v.case_id for v in votes]
        result = classify(parsed, correlate(parsed), use_embeddings=False)
        assert f"neighbour:{own}" not in [e.why for e in result.evidence]


ILLEGAL_ACCESS = "RuntimeError: CUDA error: an illegal memory access was encountered"


def test_a_lone_illegal_memory_access_is_a_kernel_fault_not_a_broken_gpu() -> None:
    # no Xid, no ECC line: a kernel or framework bug is far likelier than faulty hardware
    result = classify(*pasted(ILLEGAL_ACCESS), use_embeddings=False)
    assert ids(result.symptoms)[:1] == ["S26"]
    causes = {c.id: c.score for c in result.root_causes}
    assert ids(result.root_causes)[0] != "R28"
    assert causes.get("R28", 0.0) < 0.3
    assert set(ids(result.root_causes)[:3]) & {"R23", "R25", "R26"}


def test_an_xid_next_to_the_illegal_memory_access_makes_it_a_hardware_fault() -> None:
    text = (
        ILLEGAL_ACCESS + "\n[Sat Feb 13 22:40:04 2021] NVRM: Xid (PCI:0000:db:00): 48, pid=3643, "
        "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer"
    )
    result = classify(*pasted(text), use_embeddings=False)
    assert ids(result.root_causes)[:1] == ["R28"]


def test_sparse_tfidf_rows_score_queries_as_the_dense_product_does() -> None:
    from triage.classify.neighbours import SparseRows

    rng = np.random.default_rng(7)
    dense = rng.random((6, 40)).astype(np.float32) * (rng.random((6, 40)) < 0.2)
    dense[3] = 0.0  # a case whose signature has no known term
    indptr = np.concatenate([[0], np.cumsum((dense != 0).sum(axis=1))])
    rows = SparseRows(dense[dense != 0], np.nonzero(dense)[1], indptr)
    queries = rng.random((3, 40)).astype(np.float32)
    assert np.allclose(rows.similarities(queries), queries @ dense.T, atol=1e-6)
    assert rows.similarities(queries)[:, 3].tolist() == [0.0, 0.0, 0.0]
