"""The default similarity model: MiniLM distilled into a static embedding, applied with numpy.

The full MiniLM stays available as the `[minilm]` extra (`TRIAGE_EMBEDDING=minilm`), with its
own index rows, learned model and calibration.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner

from triage.classify import embedding, load_calibration, load_learned, neighbours
from triage.cli import main

# No rule settles it: the similarity model has to embed it.
VAGUE = (
    "epoch 3 | val_acc 0.612 on 8 GPUs with FSDP\n"
    "epoch 3 | val_acc 0.741 on 1 GPU, same seed and global batch"
)
HEAVY = {"torch", "transformers", "sentence_transformers", "sklearn"}


def test_the_static_embedding_is_what_model2vec_itself_computes() -> None:
    model2vec = pytest.importorskip("model2vec")
    ours = embedding.load_static()
    theirs = model2vec.StaticModel(vectors=ours.vectors, tokenizer=ours.tokenizer, normalize=True)
    texts = [
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB",
        "NCCL WARN Error while creating shared memory segment (size 4460544)",
        "ZeroDivisionError",
        "",
    ]
    got = ours.encode(texts)
    want = theirs.encode(texts)
    assert np.allclose(got, want, atol=2e-3)  # model2vec averages in float16, we in float32
    assert np.allclose(np.linalg.norm(got[:3], axis=1), 1.0, atol=1e-5)
    assert not got[3].any()  # nothing to embed: a zero row, never a NaN


def test_the_signatures_mask_placeholders_do_not_count() -> None:
    static = embedding.load_static()
    masked, plain = static.encode(
        ["Tried to allocate <n> GiB on <host>", "Tried to allocate GiB on"]
    )
    assert np.allclose(masked, plain)


def test_library_words_are_read_whole_not_as_word_pieces() -> None:
    # MiniLM's English vocabulary splits these (`nc ##cl`, `deep ##sp ##eed`); the distilled
    # model adds the words of the libraries' messages and the reference cases as whole words
    static = embedding.load_static()
    words = ["nccl", "deepspeed", "fsdp", "megatron", "processgroupnccl", "allreduce"]
    text = "ProcessGroupNCCL allreduce: NCCL error under DeepSpeed, FSDP and Megatron"
    tokens = static.tokenizer.encode(text, add_special_tokens=False).tokens
    assert set(words) <= set(tokens), tokens


def test_the_added_vocabulary_is_the_domain_words_the_tokenizer_splits() -> None:
    from triage.train import distil

    base = json.loads((neighbours.models_dir() / embedding.TOKENIZER_FILE).read_text())
    base["model"]["vocab"] = {
        w: i for w, i in base["model"]["vocab"].items() if w not in {"nccl", "watchdog"}
    }
    texts = [
        "NCCL WARN watchdog caught collective operation timeout",
        "ProcessGroupNCCL's Watchdog: NCCL communicator was aborted on rank 3",
        "the error 0x1f and ms in one text",
        "the error 0x1f and ms in another",
    ]
    words = distil.domain_vocabulary(json.dumps(base), texts, min_texts=2)
    # in two texts and missing from the vocabulary; never a known word, a number or a stub
    assert words == ["nccl", "watchdog"]


def test_a_vague_paste_is_embedded_without_torch_or_scikit_learn() -> None:
    probe = (
        "import sys\n"
        "from click.testing import CliRunner\n"
        "from triage.cli import main\n"
        "from triage.classify import embedding\n"
        f"r = CliRunner().invoke(main, ['explain', '-q', '--format', 'json', {VAGUE!r}])\n"
        "assert r.exit_code == 0, r.output\n"
        "print(embedding._load_static.cache_info().currsize)\n"
        f"print(sorted(set({sorted(HEAVY)!r}) & set(sys.modules)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    loaded, heavy = out.stdout.split("\n")[-3:-1]
    assert loaded == "1", "the static model was not asked to embed the paste"
    assert heavy == "[]", out.stdout + out.stderr


def test_every_file_fitted_in_the_static_space_agrees_on_its_size() -> None:
    static = embedding.load_static()
    index = neighbours.load_index()
    assert index.embeddings.shape == (len(index), static.dim)
    norms = np.linalg.norm(index.embeddings, axis=1)
    # zero where a signature kept no word the model knows (a table of numbers): nobody's neighbour
    assert np.all(np.isclose(norms, 1.0, atol=1e-2) | (norms == 0.0))
    model = load_learned("embed")
    assert model is not None and model.embed_dim == static.dim
    cal = load_calibration()
    assert cal is not None and cal.meta.get("embedding") == "static"
    meta = json.loads((neighbours.models_dir() / "static-embedding.json").read_text())
    assert meta["dims"] == static.dim and meta["vocabulary"] == len(static.vectors)
    # ~12 MB in the wheel (192 dims over ~32k rows), not MiniLM's 90
    size = (neighbours.models_dir() / embedding.STATIC_FILE).stat().st_size
    assert size < 16 * 2**20


def test_minilm_answers_with_its_own_rows_model_and_calibration(monkeypatch) -> None:
    pytest.importorskip("sentence_transformers")
    monkeypatch.setenv(embedding.EMBEDDING_ENV, "minilm")
    space = embedding.active()
    index = neighbours.load_index()
    assert index.rows(space).shape == (len(index), embedding.MINILM_DIM)
    model = load_learned("embed")
    assert model is not None and model.embed_dim == embedding.MINILM_DIM
    cal = load_calibration()
    assert cal is not None and cal.meta.get("embedding") == "minilm"
    result = CliRunner().invoke(main, ["explain", "-q", "--format", "json", VAGUE])
    assert result.exit_code == 0, result.output
    assert neighbours.model_loaded()


def test_an_unknown_embedding_names_the_ones_there_are(monkeypatch) -> None:
    monkeypatch.setenv(embedding.EMBEDDING_ENV, "bert-large")
    result = CliRunner().invoke(main, ["explain", "-q", VAGUE])
    assert result.exit_code != 0
    assert "static" in str(result.exception) and "minilm" in str(result.exception)


def test_the_reference_free_fit_reads_no_reference_case(monkeypatch, tmp_path) -> None:
    # `--fit-texts reference-free` exists so that cross-validation on the reference cases
    # judges a fitted static space honestly: no line of theirs may reach MiniLM's targets
    from triage.knowledge.corpus import CORPUS_ENV
    from triage.train import distil

    marker = "QuuxSentinelError: the sentinel shard was never written"
    row = json.loads((neighbours.models_dir() / "corpus" / "dev.jsonl").open().readline())
    row["evidence"] = f"Traceback (most recent call last):\n{marker}"
    cases = tmp_path / "cases.jsonl"
    cases.write_text(json.dumps(row) + "\n", encoding="utf-8")
    monkeypatch.setenv(CORPUS_ENV, str(cases))
    bundle = tmp_path / "corpus_samples" / "a_job" / "bundle"
    bundle.mkdir(parents=True)
    (bundle / "rank1.log").write_text(
        "[rank1]: torch.distributed.elastic.multiprocessing.errors.ChildFailedError: train.py\n"
    )

    with_references = distil.fitting_texts(tmp_path / "corpus_samples")
    free = distil.reference_free_texts(tmp_path)
    assert any("QuuxSentinelError" in t for t in with_references)
    assert not any("QuuxSentinelError" in t for t in free)
    # what it fits on instead: the shipped logs' lines
    assert any("ChildFailedError" in t for t in free)
