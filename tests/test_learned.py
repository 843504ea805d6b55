"""The learned model as a user (and a maintainer) meets it: it reads where an error was
raised, it is shipped as plain numbers, predicting needs neither scikit-learn nor torch, and
its labels reach the fused answer only as evidence the calibrator weighs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from triage.analysis import correlate
from triage.classify import fusion, learned, load_learned, neighbours
from triage.classify.learned import LearnedClassifier, ModelInput
from triage.train import references

LOAD_TRACE = (
    "Traceback (most recent call last):\n"
    '  File "/home/me/train.py", line 40, in <module>\n'
    "    engine.load_checkpoint(args.ckpt)\n"
    '  File "/opt/venv/lib/python3.10/site-packages/deepspeed/runtime/engine.py", line 2780, '
    "in load_checkpoint\n"
    "    load_optimizer_states=load_optimizer_states)\n"
    "KeyError: 'base_optimizer_state'"
)


def test_the_model_reads_where_the_error_was_raised() -> None:
    parsed = references.paste_evidence(LOAD_TRACE)
    words = learned.context_words(parsed, correlate(parsed))
    # the package and function the signature masks away, and the exception class
    assert {"mod_deepspeed", "mod_runtime", "mod_engine", "fn_load_checkpoint"} <= set(words)
    assert "exc_KeyError" in words


def _toy_inputs() -> tuple[list[ModelInput], dict[str, list[str]]]:
    rng = np.random.default_rng(0)
    texts = {
        "S14": "CUDA out of memory. Tried to allocate 2.00 GiB",
        "S02": "ModuleNotFoundError: No module named deepspeed",
        "S17": "Watchdog caught collective operation timeout ALLREDUCE",
    }
    inputs, labels = [], []
    for i in range(30):
        label = list(texts)[i % 3]
        vec = rng.normal(size=learned.EMBED_DIM).astype(np.float32)
        inputs.append(ModelInput(f"{texts[label]} case{i}", vec, {f"rule:{label}": 0.9}))
        labels.append(label)
    return inputs, {"symptom": labels, "fix": ["F5" if x == "S14" else "F1" for x in labels]}


def test_fit_predict_save_load_round_trip_as_plain_numbers(tmp_path: Path) -> None:
    inputs, targets = _toy_inputs()
    model = LearnedClassifier(use_embedding=True, c=1.0, min_df=1).fit(inputs, targets)
    probs = model.predict_proba(inputs)
    assert probs["symptom"].shape == (30, 3)
    assert np.allclose(probs["symptom"].sum(axis=1), 1.0)
    best = [model.classes["symptom"][j] for j in probs["symptom"].argmax(axis=1)]
    assert best == targets["symptom"]

    model.temperature = {"symptom": 0.5}
    model.save(tmp_path / "learned-embed")
    # numbers in an .npz that loads without pickles, the rest in JSON
    np.load(tmp_path / "learned-embed.npz", allow_pickle=False)
    meta = json.loads((tmp_path / "learned-embed.json").read_text(encoding="utf-8"))
    assert meta["schema"] == learned.SCHEMA and meta["temperature"] == {"symptom": 0.5}
    again = LearnedClassifier.load(tmp_path / "learned-embed")
    assert again is not None
    reloaded = again.predict_proba(inputs)
    plain = LearnedClassifier(**{**model.__dict__, "temperature": {}}).predict_proba(inputs)
    assert np.allclose(reloaded["symptom"], model.predict_proba(inputs)["symptom"], atol=1e-2)
    # a temperature below one makes the same ranking surer
    assert reloaded["symptom"].max(axis=1).mean() > plain["symptom"].max(axis=1).mean()


def test_accepted_alternatives_are_learned_at_their_weight(tmp_path: Path) -> None:
    inputs, targets = _toy_inputs()
    # every OOM case also accepts S15 (host OOM) and fix F2: the symptom model learns the
    # alternative next to the label, the fix model does not (learned.ALT_FIELDS)
    alts = {
        "symptom": [["S15"] if x == "S14" else [] for x in targets["symptom"]],
        "fix": [["F2"] if x == "S14" else [] for x in targets["symptom"]],
    }
    model = LearnedClassifier(use_embedding=False, c=1.0, min_df=1, alt_weight=0.5)
    model.fit(inputs, targets, alts)
    assert "S15" in model.classes["symptom"] and "F2" not in model.classes["fix"]
    probs = model.label_probs(inputs[:1])[0]["symptom"]  # an OOM case
    # the label itself stays first: its row weighs 1, the alternative's alt_weight
    assert max(probs, key=probs.__getitem__) == "S14" and probs["S15"] > probs["S02"]
    none = LearnedClassifier(use_embedding=False, c=1.0, min_df=1)  # as shipped: off
    assert "S15" not in none.fit(inputs, targets, alts).classes["symptom"]
    model.save(tmp_path / "learned-tfidf")
    again = LearnedClassifier.load(tmp_path / "learned-tfidf")
    assert again is not None and again.alt_weight == model.alt_weight


def test_a_missing_or_foreign_model_file_means_no_model(tmp_path: Path) -> None:
    assert LearnedClassifier.load(tmp_path / "nothing") is None
    (tmp_path / "other.json").write_text('{"schema": "something/else"}', encoding="utf-8")
    assert LearnedClassifier.load(tmp_path / "other") is None


def test_the_temperature_fit_sharpens_an_underconfident_model() -> None:
    # right 90% of the time at p=0.5: honest probabilities are higher
    probs = [{"A": 0.5, "B": 0.3, "C": 0.2}] * 10
    accepted = [{"A"}] * 9 + [{"B"}]
    t = learned.fit_temperature(probs, accepted)
    assert t < 1.0
    assert learned.tempered(probs[0], t)["A"] > 0.8


@pytest.mark.parametrize("variant", learned.VARIANTS)
def test_the_shipped_model_is_fitted_on_the_reference_labels(variant: str) -> None:
    model = load_learned(variant)
    assert model is not None, "run `python bench/eval_corpus.py --write-calibration`"
    assert model.use_embedding == (variant == "embed")
    assert set(model.classes) == {"symptom", "root_cause", "fix"}
    assert len(model.classes["symptom"]) >= 20
    assert model.meta.get("cases", 0) >= 400
    # what it was fitted from and how is written down next to it
    assert model.meta.get("fitted_by") and model.meta.get("settings")


def test_predicting_needs_neither_scikit_learn_nor_torch() -> None:
    probe = (
        "import sys\n"
        "from triage.analysis import correlate\n"
        "from triage.classify import load_learned, learned\n"
        "from triage.train import references\n"
        "parsed = references.paste_evidence('KeyError: \\'labels\\'')\n"
        "x = learned.model_input('KeyError', [], parsed, correlate(parsed))\n"
        "probs = load_learned('tfidf').label_probs([x])\n"
        "assert abs(sum(probs[0]['symptom'].values()) - 1) < 1e-6\n"
        "print(sorted({'torch', 'sklearn', 'sentence_transformers'} & set(sys.modules)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_a_model_label_is_a_candidate_the_calibrator_weighs() -> None:
    cands = fusion.candidates("root_cause", [], {}, model={"R27": 0.7, "R26": 0.2, "R01": 0.01})
    feats = {c.label: c.features for c in cands}
    # its likely labels become candidates, a negligible one does not
    assert set(feats) == {"R27", "R26"}
    assert feats["R27"]["model"] == 0.7 and feats["R27"]["model_top"] == 1.0
    assert feats["R26"]["model_top"] == 0.0


def test_the_model_never_adds_a_symptom_to_a_clear_exception() -> None:
    # the generic layer settles a plain ZeroDivisionError: nothing but the rules names symptoms
    parsed = references.paste_evidence("ZeroDivisionError: division by zero")
    from triage.classify import prepare

    prep = prepare(parsed, correlate(parsed))
    cands = fusion.candidates("symptom", prep.hits, {}, model={"S02": 0.9})
    assert "S02" not in {c.label for c in cands}


def test_the_index_and_the_model_agree_on_the_embedding_size() -> None:
    index = neighbours.load_index()
    model = load_learned("embed")
    assert model is not None and index.embeddings.shape[1] == model.embed_dim
