"""The learned model: a linear classifier per label field over what a case's evidence says.

What it reads of a case (`ModelInput`, made by `model_input` from what classify prepared):

- words: the failure signature plus the context the signature masks away: the packages,
  modules and functions of the traceback frames (`mod_deepspeed mod_zero fn_load_checkpoint`),
  the exception class, the frameworks and launchers the job's lines reveal;
- the embedding of the signature (the `embed` variant only, static or full MiniLM: the
  `tfidf` variant, used with `--no-embed` and when the rules decide, never embeds);
- the rules' weights per taxonomy label (specific, generic and cascade hits apart) and the
  kinds of correlate's findings (a hang, a signal exit, a cascade).

`LearnedClassifier` is one scikit-learn-style estimator: `fit` (scikit-learn's multinomial
LogisticRegression, one per field, imported only there), `predict_proba` (numpy only),
`save` / `load` (plain numbers: an `.npz` read without pickles, and a `.json`). Its
probabilities enter fusion as the candidate features `model` and `model_top`, next to the
rules and the neighbour votes, and the calibrator weighs them (`calibration.json`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from triage import regex_cache, taxonomy
from triage.classify.embedding import SPACES, Space
from triage.classify.neighbours import Tfidf
from triage.classify.types import RuleHit
from triage.model import Analysis, ParsedSource, log_frames

SCHEMA = "triage.learned/1"
FIELDS = ("symptom", "root_cause", "fix")
VARIANTS = ("embed", "tfidf")  # with the signature's embedding, and without it
EMBED_DIM = 384  # MiniLM's; a model fitted on another space keeps its own (`embed_dim`)
_WORD = regex_cache.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Where installed code lives: the path after it names the package and its modules.
_INSTALLED = regex_cache.compile(r"(?:site-packages|dist-packages)[/\\](.+)$")
MAX_FRAMES = 24  # frames per traceback read for context words (innermost last)
# The fields whose accepted alternatives (`*_alt`) the model may also learn, each as an extra
# row of its case at `alt_weight` (a case labeled "runtime exception, or else a checkpoint
# failure" teaches both). Off as shipped: cross-validated on the reference cases
# (bench/eval_corpus.py, 5 folds) at weight 0.5 the model alone gained symptom@1 72.4% ->
# 73.0% and root cause@1 56.9% -> 58.6% but lost fix@1 (68.8% -> 66.8%, hence not the fix);
# fused, triage moved by a case or two either way (symptom@1 77.9% -> 78.1%, root cause@3
# 83.7% -> 83.3%) and one corpus_samples bundle lost its expected symptom. `--tune` grids it.
ALT_FIELDS = ("symptom", "root_cause")


def file_name(variant: str, space: Space | None = None) -> str:
    """The files (without suffix) of a variant; the `embed` variant's depend on the space."""
    if variant == "embed":
        return (space or SPACES["static"]).learned_file
    return f"learned-{variant}"


@dataclass(frozen=True)
class ModelInput:
    """What the learned model reads of one case."""

    words: str
    embedding: np.ndarray | None = None
    features: Mapping[str, float] = field(default_factory=dict)


# --------------------------------------------------------------------------- what a case says


def context_words(parsed: Sequence[ParsedSource], analysis: Analysis) -> list[str]:
    """The context a signature masks away: where in which package the error was raised (the
    frames' modules and functions), the exception class, the job's frameworks and launchers."""
    words: list[str] = []
    for ps in parsed:
        for ev in ps.events:
            for frame in log_frames(ev.payload)[-MAX_FRAMES:]:
                words += _frame_words(frame)
            exc = ev.exception.exc_type if ev.exception is not None else None
            if exc:
                words.append("exc_" + str(exc).rsplit(".", 1)[-1])
    words += ["fw_" + _slug(x) for x in analysis.facts.frameworks]
    words += ["launcher_" + _slug(x) for x in analysis.facts.launchers]
    return words


def _frame_words(frame: Any) -> list[str]:
    if not isinstance(frame, (tuple, list)) or not frame:
        return []
    path = str(frame[0]).replace("\\", "/")
    func = str(frame[2]) if len(frame) > 2 and frame[2] else ""
    m = _INSTALLED.search(path)
    parts = m.group(1).split("/") if m else path.split("/")[-3:]
    words = []
    for part in parts:
        stem = part[:-3] if part.endswith(".py") else part
        if _WORD.fullmatch(stem):
            words.append("mod_" + stem.lower())
    if func and _WORD.fullmatch(func):
        words.append("fn_" + func.lower())
    return words


def _slug(text: str) -> str:
    return "_".join(_WORD.findall(text.lower())) or "x"


def rule_features(hits: Iterable[RuleHit], analysis: Analysis) -> dict[str, float]:
    """Per taxonomy label, the rules' noisy-OR weight, specific (`rule:`), generic
    (`generic:`) and cascade (`cascade:`) hits apart; and `finding:<kind>` for correlate's
    findings."""
    miss: dict[str, float] = {}
    for hit in hits:
        layer = (
            "atlas"
            if hit.atlas
            else "cascade"
            if hit.from_cascade
            else "generic"
            if hit.generic
            else "rule"
        )
        for weights in (hit.symptom, hit.root_cause, hit.fix):
            for label, w in weights.items():
                key = f"{layer}:{label}"
                miss[key] = miss.get(key, 1.0) * (1.0 - min(max(w, 0.0), 1.0))
    out = {k: 1.0 - v for k, v in miss.items()}
    for finding in analysis.findings:
        out[f"finding:{finding.kind}"] = 1.0
    if analysis.hang is not None and analysis.hang.detected:
        out["finding:hang_detected"] = 1.0
    return out


def model_input(
    signature: str,
    hits: Iterable[RuleHit],
    parsed: Sequence[ParsedSource],
    analysis: Analysis,
    embedding: np.ndarray | None = None,
) -> ModelInput:
    words = " ".join([signature, *context_words(parsed, analysis)])
    return ModelInput(words, embedding, rule_features(hits, analysis))


def feature_names() -> tuple[str, ...]:
    """The rule and finding features, in a fixed order (every taxonomy label, three layers)."""
    tax = taxonomy.load()
    labels = [*sorted(tax.symptoms), *sorted(tax.root_causes), *sorted(tax.fix_patterns)]
    names = [f"{layer}:{label}" for layer in ("rule", "generic", "cascade") for label in labels]
    kinds = (
        "first_failure",
        "cascade",
        "hang",
        "hang_detected",
        "lagging_rank",
        "missing_rank",
        "collective_mismatch",
        "rank_exit",
        "restart",
        "stack_outlier",
        "env_mismatch",
        "progress_divergence",
    )
    return (*names, *(f"finding:{k}" for k in kinds))


# --------------------------------------------------------------------------- the estimator


@dataclass
class LearnedClassifier:
    """A multinomial logistic regression per label field (scikit-learn's, fitted), applied
    with numpy. `weights` scale the three blocks of the input: words (TF-IDF), embedding,
    rules and findings."""

    use_embedding: bool = True
    embed_dim: int = EMBED_DIM
    c: float = 4.0
    weights: tuple[float, float, float] = (1.0, 1.0, 1.0)
    min_df: int = 2
    alt_weight: float = 0.0  # weight of an accepted alternative's row (ALT_FIELDS); 0: none
    vocabulary: dict[str, int] = field(default_factory=dict)
    idf: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.float32))
    features: tuple[str, ...] = field(default_factory=feature_names)
    classes: dict[str, tuple[str, ...]] = field(default_factory=dict)
    coef: dict[str, np.ndarray] = field(default_factory=dict)
    intercept: dict[str, np.ndarray] = field(default_factory=dict)
    # per field: the softmax temperature that makes the probabilities honest, fitted on
    # out-of-fold predictions (`fit_temperature`); 1.0 = the regression's own
    temperature: dict[str, float] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)

    # ----------------------------------------------------------------------- features

    def _words(self, texts: Sequence[str]) -> np.ndarray:
        return Tfidf(self.vocabulary, self.idf).transform(texts)

    def transform(self, inputs: Sequence[ModelInput]) -> np.ndarray:
        """The design matrix: [words' TF-IDF | embedding | rule and finding features]."""
        w_words, w_embed, w_rules = self.weights
        blocks = [w_words * self._words([x.words for x in inputs])]
        if self.use_embedding:
            emb = np.zeros((len(inputs), self.embed_dim), dtype=np.float32)
            for i, x in enumerate(inputs):
                if x.embedding is not None:
                    emb[i] = x.embedding
            blocks.append(w_embed * emb)
        index = {name: j for j, name in enumerate(self.features)}
        rules = np.zeros((len(inputs), len(self.features)), dtype=np.float32)
        for i, x in enumerate(inputs):
            for name, value in x.features.items():
                j = index.get(name)
                if j is not None:
                    rules[i, j] = value
        blocks.append(w_rules * rules)
        return np.hstack(blocks)

    # ----------------------------------------------------------------------- scikit-learn API

    def fit(
        self,
        inputs: Sequence[ModelInput],
        targets: Mapping[str, Sequence[str]],
        alternatives: Mapping[str, Sequence[Sequence[str]]] | None = None,
    ) -> LearnedClassifier:
        """Fit the vocabulary and one classifier per field (`targets`: field -> labels;
        `alternatives`: field -> per input, the other labels that are also right)."""
        from sklearn.feature_extraction.text import TfidfVectorizer
        from sklearn.linear_model import LogisticRegression

        vec = TfidfVectorizer(
            ngram_range=(1, 2), sublinear_tf=True, min_df=min(self.min_df, len(inputs))
        )
        vec.fit([x.words for x in inputs])
        self.vocabulary = {str(k): int(v) for k, v in vec.vocabulary_.items()}
        self.idf = np.asarray(vec.idf_, dtype=np.float32)
        dims = {len(x.embedding) for x in inputs if x.embedding is not None}
        if self.use_embedding and dims:
            self.embed_dim = dims.pop()
        x = self.transform(inputs)
        for name, labels in targets.items():
            rows, y_list = list(range(len(labels))), list(labels)
            weights = [1.0] * len(labels)
            if self.alt_weight > 0 and name in ALT_FIELDS and alternatives:
                for i, alts in enumerate(alternatives.get(name) or ()):
                    for alt in dict.fromkeys(alts):
                        if alt != labels[i]:
                            rows.append(i)
                            y_list.append(alt)
                            weights.append(self.alt_weight)
            y = np.asarray(y_list)
            classes = sorted(set(y_list))
            if len(classes) < 2:  # one label only: it is always the answer
                self.classes[name] = tuple(classes)
                self.coef[name] = np.zeros((len(classes), x.shape[1]), dtype=np.float32)
                self.intercept[name] = np.zeros(len(classes), dtype=np.float32)
                continue
            model = LogisticRegression(C=self.c, max_iter=3000)
            model.fit(x[rows], y, sample_weight=np.asarray(weights))
            self.classes[name] = tuple(str(c) for c in model.classes_)
            coef, intercept = model.coef_, model.intercept_
            if len(classes) == 2:
                # scikit-learn keeps one row for two classes (the second's log-odds): the
                # softmax of [0, z] is that same sigmoid
                coef = np.vstack([np.zeros_like(coef), coef])
                intercept = np.concatenate([np.zeros_like(intercept), intercept])
            self.coef[name] = coef.astype(np.float32)
            self.intercept[name] = intercept.astype(np.float32)
        return self

    def predict_proba(self, inputs: Sequence[ModelInput]) -> dict[str, np.ndarray]:
        """Per field, an (inputs, classes) matrix of probabilities (`classes[field]` order)."""
        if not inputs:
            return {f: np.zeros((0, len(c))) for f, c in self.classes.items()}
        x = self.transform(inputs)
        out = {}
        for name, coef in self.coef.items():
            z = (x @ coef.T + self.intercept[name]) / self.temperature.get(name, 1.0)
            z -= z.max(axis=1, keepdims=True)
            p = np.exp(z)
            out[name] = p / p.sum(axis=1, keepdims=True)
        return out

    def label_probs(self, inputs: Sequence[ModelInput]) -> list[dict[str, dict[str, float]]]:
        """Per input, field -> {label: probability}."""
        probs = self.predict_proba(inputs)
        return [
            {
                name: {c: float(p[i, j]) for j, c in enumerate(self.classes[name])}
                for name, p in probs.items()
            }
            for i in range(len(inputs))
        ]

    # ----------------------------------------------------------------------- plain data

    def save(self, path: Path) -> None:
        """`path`.npz (the numbers, no pickles) and `path`.json (everything else)."""
        arrays = {"idf": self.idf.astype(np.float32)}
        for name in self.coef:
            arrays[f"{name}.coef"] = self.coef[name].astype(np.float16)
            arrays[f"{name}.intercept"] = self.intercept[name].astype(np.float32)
        np.savez_compressed(path.with_suffix(".npz"), **arrays)
        vocab = sorted(self.vocabulary, key=self.vocabulary.__getitem__)
        data = {
            "schema": SCHEMA,
            "use_embedding": self.use_embedding,
            "embed_dim": self.embed_dim,
            "c": self.c,
            "weights": list(self.weights),
            "min_df": self.min_df,
            "alt_weight": self.alt_weight,
            "features": list(self.features),
            "classes": {k: list(v) for k, v in self.classes.items()},
            "temperature": self.temperature,
            "meta": self.meta,
            "vocabulary": vocab,
        }
        path.with_suffix(".json").write_text(
            json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
        )
        _load_cached.cache_clear()

    @classmethod
    def load(cls, path: Path) -> LearnedClassifier | None:
        """The saved model, or None when there is none (fusion then works without it)."""
        return _load_cached(str(path))


@lru_cache(maxsize=4)
def _load_cached(path: str) -> LearnedClassifier | None:
    base = Path(path)
    try:
        data = json.loads(base.with_suffix(".json").read_text(encoding="utf-8"))
        if data.get("schema") != SCHEMA:
            return None
        arrays = np.load(base.with_suffix(".npz"), allow_pickle=False)
        classes = {k: tuple(v) for k, v in data["classes"].items()}
        return LearnedClassifier(
            use_embedding=bool(data["use_embedding"]),
            embed_dim=int(data.get("embed_dim", EMBED_DIM)),
            c=float(data["c"]),
            weights=tuple(float(w) for w in data["weights"]),  # type: ignore[arg-type]
            min_df=int(data["min_df"]),
            alt_weight=float(data.get("alt_weight", 0.0)),
            vocabulary={t: i for i, t in enumerate(data["vocabulary"])},
            idf=arrays["idf"].astype(np.float32),
            features=tuple(data["features"]),
            classes=classes,
            coef={k: arrays[f"{k}.coef"].astype(np.float32) for k in classes},
            intercept={k: arrays[f"{k}.intercept"].astype(np.float32) for k in classes},
            temperature={k: float(v) for k, v in (data.get("temperature") or {}).items()},
            meta=data.get("meta", {}),
        )
    except FileNotFoundError:
        return None
    except (OSError, KeyError, TypeError, ValueError) as exc:
        import warnings

        warnings.warn(f"learned model {path} unusable ({exc}); not used", stacklevel=2)
        return None


def fit_temperature(probs: Sequence[Mapping[str, float]], accepted: Sequence[set[str]]) -> float:
    """The temperature T that makes out-of-fold probabilities honest: the one (on a grid)
    with the least negative log-likelihood of the accepted labels when p is recomputed as
    softmax(log p / T). T < 1 sharpens an underconfident model, T > 1 softens one."""
    best, best_nll = 1.0, math.inf
    for t in np.exp(np.linspace(math.log(0.2), math.log(3.0), 41)):
        nll = 0.0
        for p, ok in zip(probs, accepted, strict=True):
            if not p:
                continue
            scaled = tempered(p, float(t))
            nll -= math.log(max(sum(scaled.get(label, 0.0) for label in ok), 1e-9))
        if nll < best_nll:
            best, best_nll = float(t), nll
    return best


def tempered(probs: Mapping[str, float], t: float) -> dict[str, float]:
    """softmax(log p / t) of one prediction."""
    if not probs or t == 1.0:
        return dict(probs)
    logs = {k: math.log(max(v, 1e-12)) / t for k, v in probs.items()}
    top = max(logs.values())
    exp = {k: math.exp(v - top) for k, v in logs.items()}
    total = sum(exp.values())
    return {k: v / total for k, v in exp.items()}
