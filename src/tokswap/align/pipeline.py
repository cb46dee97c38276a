"""From two tokenizers and a corpus to a verified `TokenAlignment` (TokAlign, paper section 3).

Pipeline (every stage cached under `tokswap.utils.cache_dir()`, keyed by what it depends on):

1. tokenize the corpus with both tokenizers (`datasets.map`, batched, optionally multi-process);
2. count token co-occurrences per side (`tokswap.align.cooccurrence`);
3. train GloVe vectors per side (`tokswap.align.glove`);
4. pair identical tokens by their bytes and control tokens by role (`tokswap.align.vocab`);
5. match every other target token GloVe has seen to a source token across the two spaces
   (`tokswap.align.matching`), and give tokens GloVe never saw the source pieces their text splits into;
6. check the result: recover held-out identical pairs (precision@1/@10), BLEU-1 and semantic
   similarity on held-out text (`tokswap.align.quality`), largest in-degree with and without the
   hubness correction.

Example:
    >>> from tokswap.align.pipeline import AlignmentConfig, align_tokenizers
    >>> alignment = align_tokenizers("smollm2", "qwen2.5", config=AlignmentConfig(corpus_bytes=5_000_000))
    >>> alignment.save_pretrained("alignments/smollm2-qwen2.5")
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import torch

from tokswap.align.matching import (
    nearest_neighbours,
    normalize_rows,
    precision_at_k,
    procrustes_map,
    relative_representations,
)
from tokswap.align.vocab import (
    _source_preference,
    _vocab_by_id,
    identical_token_pairs,
    special_token_ids,
    special_token_pairs,
    token_bytes,
    tokenizer_scheme,
)
from tokswap.alignment import AlignmentError, RowSource, TokenAlignment, tokenizer_fingerprint
from tokswap.errors import check_fraction, check_positive, check_positive_int
from tokswap.utils import cache_dir, check_local_path, get_logger

logger = get_logger(__name__)

__all__ = ["AlignmentConfig", "align_tokenizers", "build_alignment", "evaluate_alignment"]

_CACHE_VERSION = "v1"


class CorpusTooSmallError(AlignmentError):
    """The corpus has too few tokens to learn co-occurrence vectors from."""


class NoOverlapError(AlignmentError):
    """The two vocabularies share too few tokens to anchor the two vector spaces."""


@dataclass
class AlignmentConfig:
    """Settings of `align_tokenizers` (defaults follow the TokAlign reference where it has one)."""

    window: int = field(default=15, metadata={"help": "Co-occurrence window on each side of a token."})
    min_count: int = field(default=5, metadata={"help": "Tokens seen fewer times get no GloVe vector."})
    dim: int = field(default=300, metadata={"help": "GloVe vector size."})
    iterations: int = field(default=15, metadata={"help": "GloVe training epochs."})
    x_max: float = field(default=10.0, metadata={"help": "GloVe weighting cut-off."})
    alpha: float = field(default=0.75, metadata={"help": "GloVe weighting exponent."})
    learning_rate: float = field(default=0.05, metadata={"help": "GloVe AdaGrad learning rate."})
    glove_seed: int = field(default=0, metadata={"help": "Seed of the GloVe initialization."})
    method: str = field(
        default="procrustes",
        metadata={
            "help": "Cross-space matching: 'procrustes' (orthogonal map fitted on all identical pairs) or "
            "'relative' (the paper's relative representations against anchor tokens)."
        },
    )
    num_anchors: int = field(
        default=300, metadata={"help": "Anchor tokens for method='relative' (0: every usable identical pair)."}
    )
    anchor_seed: int = field(default=0, metadata={"help": "Seed for drawing anchors and the self-check hold-out."})
    hubness_correction: Optional[str] = field(
        default="csls", metadata={"help": "Hubness correction of the matching: 'csls' or 'none'."}
    )
    csls_k: int = field(default=10, metadata={"help": "Neighbourhood size of the CSLS penalties."})
    candidate_k: int = field(default=64, metadata={"help": "Cosine candidates per token re-scored by CSLS."})
    search_dim: Optional[int] = field(
        default=None, metadata={"help": "Search candidates in this many principal components (None: full space)."}
    )
    holdout_fraction: float = field(
        default=0.1, metadata={"help": "Share of identical pairs held out of the fit to self-check the matching."}
    )
    min_match_precision: Optional[float] = field(
        default=0.9,
        metadata={
            "help": "Confidence gate: keep a GloVe match only if its score reaches the threshold above which "
            "this share of the self-check pairs is matched right; the rest take the pieces fallback "
            "(None: keep every match, exactly as the paper)."
        },
    )
    chunk_size: int = field(default=2048, metadata={"help": "Target rows per similarity block in the matching."})
    corpus_bytes: int = field(
        default=8_000_000,
        metadata={"help": "Size of the default corpus (`tokswap.default_corpus`) in bytes."},
    )
    default_corpus: str = field(
        default="auto",
        metadata={
            "help": "Where the default corpus comes from: 'hub' (streamed from open Hub datasets), 'offline' (built "
            "from pinned packages) or 'auto' (the Hub when it answers and HF_HUB_OFFLINE is not set, else offline)."
        },
    )
    eval_documents: int = field(
        default=200,
        metadata={"help": "Documents held out for BLEU-1/semantic similarity when the corpus has no test split."},
    )
    eval_segments: int = field(default=400, metadata={"help": "Held-out text segments used for BLEU-1 and similarity."})
    eval_segment_chars: int = field(default=600, metadata={"help": "Length of one evaluation segment in characters."})
    semantic_similarity: bool = field(
        default=True, metadata={"help": "Compute the sentence-encoder similarity (needs all-MiniLM-L6-v2)."}
    )
    evaluate_baselines: bool = field(
        default=False, metadata={"help": "Also score the random and identical-token baselines."}
    )
    min_corpus_tokens: int = field(default=20_000, metadata={"help": "Refuse corpora with fewer tokens than this."})
    min_identical_pairs: int = field(
        default=50, metadata={"help": "Refuse pairs of vocabularies sharing fewer trained tokens than this."}
    )
    num_proc: Optional[int] = field(default=None, metadata={"help": "Processes for tokenizing the corpus."})
    batch_size: int = field(default=256, metadata={"help": "Documents per tokenization batch."})
    cache: bool = field(default=True, metadata={"help": "Cache tokenized corpora, co-occurrences and vectors."})
    device: Optional[str] = field(
        default=None, metadata={"help": "Device for GloVe training (default: cuda if present)."}
    )
    seed: int = field(default=0, metadata={"help": "Seed of the default corpus and of the baselines."})

    def __post_init__(self):
        # Zero or negative values are accepted by the stages and fail late (or give an empty alignment): refuse
        # them here, naming the `tokswap align` flag, which is the field name with dashes.
        for name in (
            "window",
            "min_count",
            "dim",
            "iterations",
            "csls_k",
            "candidate_k",
            "chunk_size",
            "corpus_bytes",
            "eval_segments",
            "eval_segment_chars",
            "min_identical_pairs",
            "batch_size",
        ):
            check_positive_int(AlignmentError, name, getattr(self, name), _flag(name))
        if self.default_corpus not in ("auto", "hub", "offline"):
            raise AlignmentError(
                f"default_corpus must be 'auto', 'hub' or 'offline', not {self.default_corpus!r} (--default-corpus)."
            )
        for name in ("search_dim", "num_proc"):
            check_positive_int(AlignmentError, name, getattr(self, name), _flag(name), optional=True)
        for name in ("num_anchors", "eval_documents", "min_corpus_tokens"):
            check_positive_int(AlignmentError, name, getattr(self, name), _flag(name), minimum=0)
        for name in ("x_max", "alpha", "learning_rate"):
            check_positive(AlignmentError, name, getattr(self, name), _flag(name))
        check_fraction(AlignmentError, "holdout_fraction", self.holdout_fraction, _flag("holdout_fraction"))
        if self.min_match_precision is not None and not 0 < self.min_match_precision <= 1:
            raise AlignmentError(
                f"min_match_precision (--min-match-precision) must be in (0, 1] or None, got {self.min_match_precision!r}."
            )
        if self.method not in ("procrustes", "relative"):
            raise AlignmentError(f"method (--method) must be 'procrustes' or 'relative', got {self.method!r}.")
        if self.hubness_correction not in (None, "none", "csls"):
            raise AlignmentError(
                f"hubness_correction (--hubness-correction) must be 'csls' or 'none', got {self.hubness_correction!r}."
            )

    def glove_config(self):
        from tokswap.align.glove import GloveConfig

        wanted = {
            "dim": self.dim,
            "iterations": self.iterations,
            "x_max": self.x_max,
            "alpha": self.alpha,
            "seed": self.glove_seed,
            "learning_rate": self.learning_rate,
            "device": self.device,
        }
        accepted = {f.name for f in fields(GloveConfig)}
        return GloveConfig(**{k: v for k, v in wanted.items() if k in accepted and v is not None})


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


# ---------------------------------------------------------------------------------------------- inputs
def _load_tokenizer(tokenizer):
    from tokswap.loading import load_tokenizer

    return load_tokenizer(tokenizer)


def _texts_hash(texts) -> str:
    digest = hashlib.sha256()
    for text in texts:
        digest.update(text.encode("utf-8", "surrogatepass"))
        digest.update(b"\x00")
    return digest.hexdigest()


def _segments(texts: Sequence[str], count: int, length: int) -> list:
    """Cut held-out documents into up to `count` pieces of about `length` characters (at spaces)."""
    pieces = []
    for text in texts:
        start = 0
        while start < len(text) and len(pieces) < count:
            end = min(len(text), start + length)
            if end < len(text):
                space = text.rfind(" ", start + length // 2, end)
                end = space if space > start else end
            piece = text[start:end].strip()
            if piece:
                pieces.append(piece)
            start = end
        if len(pieces) >= count:
            break
    return pieces


def _prepare_corpus(corpus, config: AlignmentConfig):
    """-> (train `datasets.Dataset` with a "text" column, held-out texts, corpus description)."""
    import datasets

    description: dict = {}
    if corpus is None:
        from tokswap.default_corpus import default_corpus

        made = default_corpus(total_bytes=config.corpus_bytes, seed=config.seed, source=config.default_corpus)
        corpus, description["source"] = made.dataset, made.origin
    if isinstance(corpus, (str, os.PathLike)):
        description.setdefault("source", os.fspath(corpus))
        corpus = load_corpus(corpus)
    if isinstance(corpus, datasets.DatasetDict):
        train = corpus["train"]
        held_name = next((name for name in ("test", "validation") if name in corpus), None)
        held = corpus[held_name]["text"] if held_name else None
    elif isinstance(corpus, datasets.Dataset):
        train, held = corpus, None
    elif isinstance(corpus, (list, tuple)):
        if corpus and not isinstance(corpus[0], str):
            raise AlignmentError("A corpus given as a list must hold strings (one document each).")
        train, held = datasets.Dataset.from_dict({"text": list(corpus)}), None
        description.setdefault("source", f"list of {len(corpus)} texts")
    else:
        raise AlignmentError(
            f"Unsupported corpus type {type(corpus).__name__}: pass a datasets.Dataset/DatasetDict with a 'text' "
            "column, a list of strings, a .jsonl/.txt file or dataset folder, or None for the default corpus."
        )
    if "text" not in train.column_names:
        raise AlignmentError(f"The corpus needs a 'text' column; it has {train.column_names}.")
    if held is None:
        # Hold out the last documents (a seeded shuffle keeps the split independent of file order).
        if len(train) < 2:
            raise CorpusTooSmallError("The corpus needs at least 2 documents (one is held out for evaluation).")
        order = np.random.default_rng(config.seed).permutation(len(train))
        num_held = min(config.eval_documents, max(1, len(train) // 10))
        held = train.select(np.sort(order[:num_held]))["text"]
        train = train.select(np.sort(order[num_held:]))
    train_texts = train["text"]
    description.setdefault("source", "datasets.Dataset")
    description.update(
        {
            "num_documents": len(train),
            "num_bytes": int(sum(len(t.encode("utf-8", "surrogatepass")) for t in train_texts)),
            "sha256": _texts_hash(train_texts),
            "num_heldout_documents": len(held),
            "heldout_sha256": _texts_hash(held),
        }
    )
    if "domain" in train.column_names:
        domains, counts = np.unique(np.asarray(train["domain"]), return_counts=True)
        description["domains"] = dict(zip(domains.tolist(), counts.tolist()))
    return train.select_columns(["text"]), list(held), description


def check_corpus_path(corpus) -> None:
    """Refuse a corpus given as a path that does not exist or a file that is not UTF-8 text (corpora are local
    files or folders only), before any tokenizer or model is loaded."""
    if not isinstance(corpus, (str, os.PathLike)):
        return
    path = Path(corpus).expanduser()
    if not path.exists():
        raise AlignmentError(
            f"Corpus {os.fspath(corpus)} does not exist: give a .jsonl/.txt file or a dataset folder "
            "(or leave it out for tokswap's default corpus)."
        )
    if path.is_file():
        from tokswap.utils.text_files import check_utf8_file

        check_utf8_file(path, AlignmentError)


def load_corpus(path) -> datasets.Dataset:  # noqa: F821 (datasets is imported lazily)
    """A corpus from a .jsonl (a "text" field per line), a .txt (one document per blank-line-separated
    paragraph, or per line when the file has no blank line; see `tokswap.offline.corpus.read_text_documents`), or a
    folder saved with `datasets.save_to_disk`."""
    import datasets

    path = Path(path)
    if path.is_dir():
        loaded = datasets.load_from_disk(str(path))
        return loaded
    if not path.is_file():
        raise AlignmentError(f"Corpus {path} does not exist.")
    if path.suffix in (".jsonl", ".json"):
        texts = []
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                if line.strip():
                    record = json.loads(line)
                    texts.append(record["text"] if isinstance(record, dict) else str(record))
    else:
        from tokswap.utils.text_files import read_text_documents

        texts = read_text_documents(path)
    return datasets.Dataset.from_dict({"text": texts})


# ---------------------------------------------------------------------------------------------- cached stages
def _key(*parts) -> str:
    return hashlib.sha256(json.dumps([_CACHE_VERSION, *parts], sort_keys=True, default=str).encode()).hexdigest()[:24]


def _tokenize(train, tokenizer, fingerprint: dict, corpus_hash: str, config: AlignmentConfig, progress: bool):
    """Token ids of every training document: `(flat ids int32, offsets int64)`, cached."""
    key = _key("tokenized", fingerprint["vocab_hash"], corpus_hash)
    path = cache_dir("alignment", "tokenized") / f"{key}.npz"
    if config.cache and path.is_file():
        with np.load(path) as data:
            return data["ids"], data["offsets"]

    def encode(batch):
        return {"input_ids": tokenizer(batch["text"], add_special_tokens=False)["input_ids"]}

    num_proc = config.num_proc if (config.num_proc or 1) > 1 else None
    tokenized = train.map(
        encode,
        batched=True,
        batch_size=config.batch_size,
        num_proc=num_proc,
        remove_columns=["text"],
        desc=f"Tokenizing with {fingerprint['name_or_path'] or 'tokenizer'}",
    )
    tokenized.set_format("numpy")
    lengths, chunks = [], []
    for row in tokenized:
        ids = np.asarray(row["input_ids"], dtype=np.int32)
        chunks.append(ids)
        lengths.append(len(ids))
    ids = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int32)
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if config.cache:
        from tokswap.utils import atomic_output_file

        with atomic_output_file(path) as handle:
            np.savez(handle, ids=ids, offsets=offsets)
    return ids, offsets


def _documents(ids, offsets):
    return [ids[offsets[i] : offsets[i + 1]] for i in range(len(offsets) - 1)]


def _cooccurrences(ids, offsets, vocab_size: int, key: str, config: AlignmentConfig, progress: bool):
    from tokswap.align.cooccurrence import CooccurrenceMatrix, count_cooccurrences

    path = cache_dir("alignment", "cooccurrence") / f"{key}.npz"
    if config.cache and path.is_file():
        return CooccurrenceMatrix.load(path)
    cooc = count_cooccurrences(
        _documents(ids, offsets),
        vocab_size=vocab_size,
        window=config.window,
        min_count=config.min_count,
        progress=progress,
    )
    if config.cache:
        cooc.save(path)
    return cooc


def _glove(cooc, key: str, config: AlignmentConfig, progress: bool):
    """-> (vectors float32 [V, dim], trained bool [V]), cached."""
    from tokswap.align.glove import train_glove

    path = cache_dir("alignment", "glove") / f"{key}.npz"
    if config.cache and path.is_file():
        with np.load(path) as data:
            return data["vectors"], data["trained"]
    glove_config = config.glove_config()
    try:
        result = train_glove(cooc, glove_config, progress=progress)
    except TypeError:  # a train_glove without the progress argument
        result = train_glove(cooc, glove_config)
    vectors = np.asarray(result.vectors, dtype=np.float32)
    trained = np.asarray(result.trained, dtype=bool)
    if config.cache:
        from tokswap.utils import atomic_output_file

        with atomic_output_file(path) as handle:
            np.savez(handle, vectors=vectors, trained=trained)
    return vectors, trained


# ---------------------------------------------------------------------------------------------- matching
def _split_into_source(texts_bytes: list, source_tokenizer, source_lookup: dict, fallback_id: int) -> list:
    """The source token ids each byte string splits into: the source tokenizer's own segmentation for
    valid UTF-8 text, else a greedy longest match over source tokens' bytes (a byte-level BPE piece
    can be half of a UTF-8 character)."""
    texts, valid = [], []
    for value in texts_bytes:
        try:
            texts.append(value.decode("utf-8") if value else "")
            valid.append(bool(value))
        except UnicodeDecodeError:
            texts.append("")
            valid.append(False)
    encoded = source_tokenizer(texts, add_special_tokens=False)["input_ids"] if texts else []
    max_len = max((len(b) for b in source_lookup), default=1)
    result = []
    for value, ok, ids in zip(texts_bytes, valid, encoded):
        if ok and ids:
            result.append(list(ids))
            continue
        pieces, start = [], 0
        while value and start < len(value):
            for end in range(min(len(value), start + max_len), start, -1):
                match = source_lookup.get(value[start:end])
                if match is not None:
                    pieces.append(match)
                    start = end
                    break
            else:
                start += 1  # a byte no source token covers: skip it
        result.append(pieces or [fallback_id])
    return result


def _spaces(source_vectors, target_vectors, train_sources, train_targets, config: AlignmentConfig, rng):
    """Both vocabularies' vectors expressed in one comparable space -> (source_rep, target_rep, info)."""
    if config.method == "procrustes":
        source = normalize_rows(source_vectors)
        target = normalize_rows(target_vectors)
        # Center on the tokens that took part in training, then re-normalize (standard for Procrustes).
        source = normalize_rows(source - source[torch.as_tensor(train_sources)].mean(0, keepdim=True))
        target = normalize_rows(target - target[torch.as_tensor(train_targets)].mean(0, keepdim=True))
        rotation = procrustes_map(target[torch.as_tensor(train_targets)], source[torch.as_tensor(train_sources)])
        return source, target @ rotation, {"fit_pairs": int(len(train_targets))}
    if config.method == "relative":
        count = len(train_targets) if config.num_anchors <= 0 else min(config.num_anchors, len(train_targets))
        chosen = np.sort(rng.choice(len(train_targets), size=count, replace=False))
        source = relative_representations(source_vectors, train_sources[chosen])
        target = relative_representations(target_vectors, train_targets[chosen])
        return source, target, {"num_anchors": int(count)}
    raise AlignmentError(f"Unknown matching method {config.method!r}: use 'procrustes' or 'relative'.")


def build_alignment(
    source_tokenizer,
    target_tokenizer,
    source_vectors: np.ndarray,
    source_trained: np.ndarray,
    target_vectors: np.ndarray,
    target_trained: np.ndarray,
    config: Optional[AlignmentConfig] = None,
    progress: bool = False,
) -> TokenAlignment:
    """Build the alignment from GloVe vectors of both vocabularies (steps 4-5 of the pipeline).

    Args:
        source_tokenizer / target_tokenizer: fast tokenizers.
        source_vectors (`[V_s, d]`), source_trained (`[V_s]` bool): GloVe vectors of the source
            vocabulary and which rows GloVe actually trained (tokens seen at least `min_count` times).
        target_vectors (`[V_t, d']`), target_trained (`[V_t]` bool): the same for the target.
        config (`AlignmentConfig`): matching settings.

    Returns:
        `TokenAlignment` whose `config["diagnostics"]` holds the identical-pair counts, the
        self-check precision and the in-degrees; provenance is added by `align_tokenizers`.
    """
    config = config or AlignmentConfig()
    started = time.perf_counter()
    num_source, num_target = len(source_tokenizer), len(target_tokenizer)
    source_trained = _trained_mask(source_trained, num_source)
    target_trained = _trained_mask(target_trained, num_target)

    # 1. Identical tokens (by bytes) map directly; specials by role.
    identical = identical_token_pairs(source_tokenizer, target_tokenizer)
    specials = special_token_pairs(source_tokenizer, target_tokenizer)
    if identical.byte_level_count == 0:
        raise NoOverlapError(
            "The two tokenizers share no token (not even single bytes): there is nothing to anchor an alignment on."
        )
    rows = _Rows.anchored(num_target, identical, specials)
    source_specials = special_token_ids(source_tokenizer)

    # 2. The two GloVe spaces, bridged by the identical tokens both know (some held out to check the matching).
    usable_t, usable_s = _bridge_pairs(identical, source_trained, target_trained, config)
    rng = np.random.default_rng(config.anchor_seed)
    holdout, fit = _split_holdout(len(usable_t), config, rng)
    source_rep, target_rep, space_info = _spaces(
        source_vectors, target_vectors, usable_s[fit], usable_t[fit], config, rng
    )

    # 3. Every other trained target token goes to its nearest source token, if the match is confident enough.
    reps, trained = (source_rep, target_rep), (source_trained, target_trained)
    holdout_pairs = (usable_t[holdout], usable_s[holdout])
    matching = _match_rows(rows, reps, trained, source_specials, holdout_pairs, config, progress)

    # 4. Tokens GloVe never saw (or matched unconfidently): the mean of the source tokens their text splits into.
    source_bytes = token_bytes(source_tokenizer)
    indptr, indices = _fallback_rows(rows, source_tokenizer, target_tokenizer, specials, source_specials, source_bytes)

    # 5. Reverse direction for evaluation: identical target, else nearest trained target, else pieces.
    source_to_target = _reverse_map(
        source_tokenizer, target_tokenizer, identical, specials, *reps, *trained, source_specials,
        special_token_ids(target_tokenizer), source_bytes, config,
    )  # fmt: skip
    diagnostics = {
        **_anchor_diagnostics(identical, specials, usable_t, holdout, config),
        **space_info,
        **matching,
        "coverage_trained_target": float(target_trained.mean()) if num_target else 0.0,
        "coverage_trained_source": float(source_trained.mean()) if num_source else 0.0,
        "build_seconds": round(time.perf_counter() - started, 3),
    }
    return TokenAlignment(
        target_to_source=rows.target_to_source,
        scores=rows.scores,
        row_sources=rows.row_sources,
        fallback_indptr=indptr,
        fallback_indices=indices,
        config={"diagnostics": diagnostics},
        source_to_target=source_to_target,
    )


def _anchor_diagnostics(identical, specials, usable_t, holdout, config: AlignmentConfig) -> dict:
    return {
        "identical_raw_string": identical.raw_string_count,
        "identical_byte_level": identical.byte_level_count,
        "identical_trained_both": int(len(usable_t)),
        "special_tokens": specials.details,
        "matching_method": config.method,
        "self_check_pairs": int(len(holdout)),
    }


def _trained_mask(trained, size: int) -> np.ndarray:
    """Which rows GloVe trained, as a bool array of exactly `size` (None: none)."""
    trained = np.zeros(size, bool) if trained is None else np.asarray(trained, bool)
    return np.pad(trained, (0, max(0, size - len(trained))))[:size]


@dataclass
class _Rows:
    """The alignment being built: for each target row, its source row, its score and where it came from."""

    target_to_source: np.ndarray
    scores: np.ndarray
    row_sources: np.ndarray

    @classmethod
    def anchored(cls, num_target: int, identical, specials) -> _Rows:
        """Identical tokens and special tokens placed; every other row waits for a match or the fallback."""
        rows = cls(
            np.full(num_target, -1, dtype=np.int64),
            np.zeros(num_target, dtype=np.float32),
            np.full(num_target, RowSource.FALLBACK, dtype=np.int8),
        )
        rows.target_to_source[identical.target_ids] = identical.source_ids
        rows.scores[identical.target_ids] = 1.0
        rows.row_sources[identical.target_ids] = RowSource.IDENTICAL
        for target_id, source_id in specials.items():
            if target_id < num_target:
                rows.target_to_source[target_id] = source_id
                rows.scores[target_id] = 1.0
                rows.row_sources[target_id] = RowSource.SPECIAL
        return rows


def _bridge_pairs(identical, source_trained, target_trained, config: AlignmentConfig):
    """`(target ids, source ids)` of the identical pairs both GloVe spaces know: the bridge between the spaces."""
    usable = source_trained[identical.source_ids] & target_trained[identical.target_ids]
    usable_t, usable_s = identical.target_ids[usable], identical.source_ids[usable]
    if len(usable_t) < config.min_identical_pairs:
        raise NoOverlapError(
            f"Only {len(usable_t)} identical tokens were seen at least {config.min_count} times on both sides "
            f"(of {identical.byte_level_count} identical tokens); at least {config.min_identical_pairs} are needed to "
            "anchor the two vector spaces. Use a larger corpus, or a lower min_count."
        )
    return usable_t, usable_s


def _split_holdout(num_pairs: int, config: AlignmentConfig, rng):
    """`(held-out positions, fit positions)`: the held-out identical pairs check the matching and calibrate its gate."""
    order = rng.permutation(num_pairs)
    num_holdout = int(round(config.holdout_fraction * num_pairs))
    num_holdout = min(num_holdout, num_pairs - config.min_identical_pairs) if num_holdout else 0
    return order[:num_holdout], order[num_holdout:]


def _match_rows(rows: _Rows, reps, trained, source_specials, holdout_pairs, config, progress) -> dict:
    """Match every trained, still unplaced target token to its nearest source token (Procrustes + CSLS), then
    send the matches the calibrated gate does not trust back to the fallback. Returns the matching diagnostics."""
    (source_rep, target_rep), (source_trained, target_trained) = reps, trained
    holdout_t, holdout_s = holdout_pairs
    # Source candidates: tokens GloVe trained, control tokens excluded (they are mapped by role).
    key_mask = source_trained.copy()
    key_mask[list(source_specials)] = False
    key_ids = np.flatnonzero(key_mask)
    match_ids = np.flatnonzero(target_trained & (rows.row_sources == RowSource.FALLBACK))
    queries = np.concatenate([match_ids, holdout_t])
    hubness = None if config.hubness_correction in (None, "none") else config.hubness_correction
    match_started = time.perf_counter()
    result = nearest_neighbours(
        target_rep[torch.as_tensor(queries)],
        source_rep[torch.as_tensor(key_ids)],
        k=10,
        hubness=hubness,
        csls_k=config.csls_k,
        chunk_size=config.chunk_size,
        candidate_k=config.candidate_k,
        search_dim=config.search_dim,
        progress=progress,
    )
    match_seconds = time.perf_counter() - match_started
    picked = key_ids[result.indices.numpy()] if len(queries) else np.zeros((0, 10), np.int64)
    num_match = len(match_ids)
    rows.target_to_source[match_ids] = picked[:num_match, 0]
    rows.scores[match_ids] = result.cosine[:num_match, 0].numpy()
    rows.row_sources[match_ids] = RowSource.GLOVE
    self_check = precision_at_k(torch.as_tensor(picked[num_match:]), holdout_s)
    gate = calibrate_match_gate(
        result.scores[num_match:, 0].numpy(), picked[num_match:, 0] == holdout_s, config.min_match_precision
    )
    if gate["threshold"] is not None and num_match:
        # Unconfident matches are worse than splitting the token into source pieces: leave them to the fallback.
        rejected = match_ids[result.scores[:num_match, 0].numpy() < gate["threshold"]]
        rows.row_sources[rejected] = RowSource.FALLBACK
        gate["rejected"] = int(len(rejected))
        match_ids = match_ids[rows.row_sources[match_ids] == RowSource.GLOVE]
    top1_raw = key_ids[result.top1_uncorrected.numpy()[:num_match]] if num_match else np.zeros(0, np.int64)
    return {
        "self_check_precision_at_1": self_check["precision@1"],
        "self_check_precision_at_10": self_check["precision@10"],
        "glove_matched": int(len(match_ids)),
        "match_gate": gate,
        "max_in_degree": int(np.bincount(rows.target_to_source[match_ids]).max()) if len(match_ids) else 0,
        "max_in_degree_without_hubness_correction": int(np.bincount(top1_raw).max()) if num_match else 0,
        "hubness_correction": hubness or "none",
        "matching_seconds": round(match_seconds, 3),
    }


def _fallback_rows(rows: _Rows, source_tokenizer, target_tokenizer, specials, source_specials, source_bytes):
    """Give every fallback row the source tokens its text splits into; returns the CSR `(indptr, indices)`.

    The longest piece (in bytes) stands for the token where one row is needed (`target_to_source`).
    """
    num_target = len(rows.row_sources)
    target_bytes = token_bytes(target_tokenizer)
    source_lookup = _source_preference(
        _vocab_by_id(source_tokenizer),
        [None if i in source_specials else b for i, b in enumerate(source_bytes)],
        source_specials,
        tokenizer_scheme(source_tokenizer),
    )
    default_source = specials.get(_first_role_id(target_tokenizer), None)
    if default_source is None:
        default_source = min(source_specials) if source_specials else 0
    fallback_ids = np.flatnonzero(rows.row_sources == RowSource.FALLBACK)
    pieces = _split_into_source(
        [target_bytes[i] if i < len(target_bytes) else None for i in fallback_ids],
        source_tokenizer,
        source_lookup,
        default_source,
    )
    indptr = np.zeros(num_target + 1, dtype=np.int64)
    lengths = np.zeros(num_target, dtype=np.int64)
    lengths[fallback_ids] = [len(p) for p in pieces]
    np.cumsum(lengths, out=indptr[1:])
    indices = np.asarray([s for p in pieces for s in p], dtype=np.int64)
    for target_id, ids in zip(fallback_ids, pieces):
        rows.target_to_source[target_id] = max(ids, key=lambda s: len(source_bytes[s] or b""))
    if len(fallback_ids):
        rows.scores[fallback_ids] = 0.0
    return indptr, indices


def calibrate_match_gate(
    holdout_scores: np.ndarray, holdout_correct: np.ndarray, min_precision: Optional[float]
) -> dict:
    """The lowest matching score above which at least `min_precision` of the self-check pairs are matched right.

    The self-check pairs (identical tokens held out of the fit) are the only matches whose right answer is
    known, so they calibrate how far a score can be trusted. Returns `{"threshold": None, ...}` when no gate
    is asked for, and an unreachable threshold when no score range is precise enough.
    """
    info = {"min_precision": min_precision, "threshold": None, "holdout_pairs": int(len(holdout_scores))}
    if min_precision is None or len(holdout_scores) == 0:
        return info
    order = np.argsort(-holdout_scores, kind="stable")
    precision = np.cumsum(holdout_correct[order]) / np.arange(1, len(order) + 1)
    reaching = np.flatnonzero(precision >= min_precision)
    if len(reaching) == 0:
        info["threshold"] = float("inf")
        info["holdout_kept"] = 0
        return info
    last = int(reaching[-1])
    info["threshold"] = float(holdout_scores[order[last]])
    info["holdout_kept"] = last + 1
    info["holdout_kept_precision"] = float(precision[last])
    return info


def _first_role_id(tokenizer) -> Optional[int]:
    from tokswap.align.vocab import _roles

    roles = _roles(tokenizer)
    for role in ("unk", "eos", "pad"):
        if role in roles:
            return roles[role]
    return None


def _reverse_map(
    source_tokenizer,
    target_tokenizer,
    identical,
    specials,
    source_rep,
    target_rep,
    source_trained,
    target_trained,
    source_specials,
    target_specials,
    source_bytes,
    config,
) -> np.ndarray:
    num_source = len(source_tokenizer)
    result = np.full(num_source, -1, dtype=np.int64)
    # Several targets may share a source (e.g. `▁` and `<0x20>`): keep the lowest target id.
    order = np.argsort(identical.target_ids)[::-1]
    result[identical.source_ids[order]] = identical.target_ids[order]
    for target_id, source_id in specials.items():
        if result[source_id] < 0:
            result[source_id] = target_id
    queries = np.flatnonzero((result < 0) & source_trained)
    queries = queries[~np.isin(queries, list(source_specials))]
    key_mask = target_trained.copy()
    key_mask[list(target_specials)] = False
    key_ids = np.flatnonzero(key_mask)
    if len(queries) and len(key_ids):
        hubness = None if config.hubness_correction in (None, "none") else config.hubness_correction
        found = nearest_neighbours(
            source_rep[torch.as_tensor(queries)],
            target_rep[torch.as_tensor(key_ids)],
            k=1,
            hubness=hubness,
            csls_k=config.csls_k,
            chunk_size=config.chunk_size,
            candidate_k=config.candidate_k,
            search_dim=config.search_dim,
        )
        result[queries] = key_ids[found.indices[:, 0].numpy()]
    rest = np.flatnonzero(result < 0)
    if len(rest):
        target_specials_set = set(target_specials)
        target_bytes = token_bytes(target_tokenizer)
        target_lookup = _source_preference(
            _vocab_by_id(target_tokenizer),
            [None if i in target_specials_set else b for i, b in enumerate(target_bytes)],
            target_specials_set,
            tokenizer_scheme(target_tokenizer),
        )
        default = _first_role_id(target_tokenizer)
        default = 0 if default is None else default
        pieces = _split_into_source([source_bytes[i] for i in rest], target_tokenizer, target_lookup, default)
        result[rest] = [max(p, key=lambda t: len(target_bytes[t] or b"")) for p in pieces]
    return result


# ---------------------------------------------------------------------------------------------- evaluation
def evaluate_alignment(
    alignment: TokenAlignment,
    source_tokenizer,
    target_tokenizer,
    texts: Sequence[str],
    semantic: bool = True,
    encoder_path=None,
) -> dict:
    """BLEU-1 and (optionally) semantic similarity of `alignment` on `texts` (held-out text)."""
    from tokswap.align.quality import bleu1, semantic_similarity, source_to_target_map

    texts = [t for t in texts if t.strip()]
    if not texts:
        return {}
    source_ids = source_tokenizer(list(texts), add_special_tokens=False)["input_ids"]
    target_ids = target_tokenizer(list(texts), add_special_tokens=False)["input_ids"]
    mapping = source_to_target_map(alignment, len(source_tokenizer))
    metrics = {"bleu1": bleu1(mapping, source_ids, target_ids), "eval_segments": len(texts)}
    if semantic:
        decoded = target_tokenizer.batch_decode(
            [mapping[np.asarray(ids, dtype=np.int64)].tolist() for ids in source_ids]
        )
        metrics["semantic_similarity"] = semantic_similarity(texts, decoded, encoder_path=encoder_path)
    return metrics


# ---------------------------------------------------------------------------------------------- main entry
def align_tokenizers(
    source_tokenizer,
    target_tokenizer,
    corpus=None,
    config: Optional[AlignmentConfig] = None,
    progress: bool = True,
    encoder_path=None,
) -> TokenAlignment:
    """Learn which source token each target token inherits its parameters from.

    Args:
        source_tokenizer / target_tokenizer: tokenizer objects, tokswap asset names (`"smollm2"`,
            `"qwen2.5"`, ...), local folders or tokenizer.json files.
        corpus: a `datasets.Dataset`/`DatasetDict` with a "text" column, a list of strings, a path
            (.jsonl, .txt, dataset folder), or None for `tokswap.offline.corpus.build_corpus()`. Without a
            test split, `eval_documents` documents are held out for evaluation.
        config (`AlignmentConfig`, optional): settings.
        progress (`bool`): progress bars.
        encoder_path: sentence encoder for the semantic similarity (default all-MiniLM-L6-v2).

    Returns:
        `TokenAlignment` with full provenance in `config`.

    Raises:
        AlignmentError (and subclasses `CorpusTooSmallError`, `NoOverlapError`): bad input.
    """
    from tokswap.constants import __version__

    config = config or AlignmentConfig()
    timings = {}
    started = time.perf_counter()
    check_corpus_path(corpus)  # before the tokenizers are loaded
    source_tokenizer, target_tokenizer = _load_pair(source_tokenizer, target_tokenizer)
    fingerprints = {
        "source": tokenizer_fingerprint(source_tokenizer),
        "target": tokenizer_fingerprint(target_tokenizer),
    }
    # 1. One corpus, tokenized by both tokenizers; 2. co-occurrences and GloVe vectors per vocabulary.
    train, held_texts, corpus_info = _prepare_corpus(corpus, config)
    timings["corpus"] = time.perf_counter() - started
    vectors = {
        side: _vectors_of(side, tokenizer, train, fingerprints[side], corpus_info, config, timings, progress)
        for side, tokenizer in (("source", source_tokenizer), ("target", target_tokenizer))
    }
    # 3. Identical tokens, specials by role, the rest matched across the two spaces or split into pieces.
    t0 = time.perf_counter()
    alignment = build_alignment(
        source_tokenizer,
        target_tokenizer,
        *vectors["source"],
        *vectors["target"],
        config=config,
        progress=progress,
    )
    timings["match"] = time.perf_counter() - t0
    # the target GloVe space stays with the alignment in memory, for the `omp` and `focus` init methods
    target_vectors, target_trained = vectors["target"]
    alignment.target_space = np.where(target_trained[:, None], target_vectors, np.nan).astype(np.float32)
    # 4. Quality before any model is touched: BLEU-1 and similarity on held-out text.
    t0 = time.perf_counter()
    diagnostics = alignment.config.pop("diagnostics")  # build_alignment's report, folded into the metrics
    metrics = _quality(alignment, source_tokenizer, target_tokenizer, held_texts, diagnostics, config, encoder_path)
    timings["evaluate"] = time.perf_counter() - t0
    timings["total"] = time.perf_counter() - started
    alignment.config.update(
        {
            "source_tokenizer": fingerprints["source"],
            "target_tokenizer": fingerprints["target"],
            "corpus": corpus_info,
            "hyperparameters": asdict(config),
            "special_tokens": diagnostics["special_tokens"],
            "metrics": metrics,
            "timings_seconds": {k: round(v, 2) for k, v in timings.items()},
            "tokswap_version": __version__,
        }
    )
    return alignment


def _load_pair(source_tokenizer, target_tokenizer):
    """Both tokenizers loaded, and checked to decode every token to bytes (early and clearly)."""
    check_local_path(source_tokenizer, "The source tokenizer")
    check_local_path(target_tokenizer, "The target tokenizer")
    source_tokenizer = _load_tokenizer(source_tokenizer)
    target_tokenizer = _load_tokenizer(target_tokenizer)
    for tokenizer in (source_tokenizer, target_tokenizer):
        token_bytes(tokenizer)
    return source_tokenizer, target_tokenizer


def _vectors_of(side: str, tokenizer, train, fingerprint: dict, corpus_info: dict, config, timings: dict, progress):
    """`(GloVe vectors, trained mask)` of one vocabulary: tokenize, count co-occurrences, train (each cached)."""
    t0 = time.perf_counter()
    ids, offsets = _tokenize(train, tokenizer, fingerprint, corpus_info["sha256"], config, progress)
    if len(ids) < config.min_corpus_tokens:
        raise CorpusTooSmallError(
            f"The corpus has {len(ids)} {side} tokens ({corpus_info['num_bytes']} bytes of text); at least "
            f"{config.min_corpus_tokens} tokens are needed to learn co-occurrence vectors (a few hundred KB of "
            "text; the paper uses 1B tokens, a few MB already gives a useful alignment)."
        )
    corpus_info[f"{side}_tokens"] = int(len(ids))
    timings[f"tokenize_{side}"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    cooc_key = _key("cooc", fingerprint["vocab_hash"], corpus_info["sha256"], config.window, config.min_count)
    cooc = _cooccurrences(ids, offsets, len(tokenizer), cooc_key, config, progress)
    timings[f"cooccurrence_{side}"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    glove_key = _key(
        "glove",
        cooc_key,
        config.dim,
        config.iterations,
        config.x_max,
        config.alpha,
        config.learning_rate,
        config.glove_seed,
    )
    vectors = _glove(cooc, glove_key, config, progress)
    timings[f"glove_{side}"] = time.perf_counter() - t0
    return vectors


def _quality(alignment, source_tokenizer, target_tokenizer, held_texts, diagnostics, config, encoder_path) -> dict:
    """The alignment's metrics: BLEU-1 and similarity on held-out segments, the build diagnostics, baselines."""
    segments = _segments(held_texts, config.eval_segments, config.eval_segment_chars)
    metrics = evaluate_alignment(
        alignment,
        source_tokenizer,
        target_tokenizer,
        segments,
        semantic=config.semantic_similarity,
        encoder_path=encoder_path,
    )
    metrics.update({k: v for k, v in diagnostics.items() if k != "special_tokens"})
    if config.evaluate_baselines:
        metrics["baselines"] = evaluate_baselines(
            source_tokenizer,
            target_tokenizer,
            segments,
            semantic=config.semantic_similarity,
            encoder_path=encoder_path,
            seed=config.seed,
        )
    return metrics


def evaluate_baselines(source_tokenizer, target_tokenizer, texts, semantic=True, encoder_path=None, seed=0) -> dict:
    """BLEU-1 (and semantic similarity) of the three reference alignments on `texts`."""
    from tokswap.align.quality import BASELINES, baseline_alignment

    identical = identical_token_pairs(source_tokenizer, target_tokenizer)
    out = {}
    for kind in BASELINES:
        baseline = baseline_alignment(kind, source_tokenizer, target_tokenizer, seed=seed, identical=identical)
        out[kind] = evaluate_alignment(baseline, source_tokenizer, target_tokenizer, texts, semantic, encoder_path)
    return out


# ---------------------------------------------------------------------------------------------- CLI
def summary_table(alignment: TokenAlignment) -> str:
    """A plain-text summary of an alignment's coverage and quality."""
    metrics = alignment.config.get("metrics", {})
    rows = [
        ("source", alignment.source_fingerprint.get("name_or_path", "?")),
        ("target", alignment.target_fingerprint.get("name_or_path", "?")),
        ("target rows", alignment.num_target_rows),
    ]
    rows += [(f"rows: {name}", count) for name, count in alignment.counts_by_row_source().items() if count]
    for key in (
        "identical_raw_string",
        "identical_byte_level",
        "bleu1",
        "semantic_similarity",
        "self_check_precision_at_1",
        "self_check_precision_at_10",
        "max_in_degree",
        "max_in_degree_without_hubness_correction",
    ):
        if key in metrics:
            value = metrics[key]
            rows.append((key.replace("_", " "), f"{value:.4f}" if isinstance(value, float) else value))
    for kind, values in (metrics.get("baselines") or {}).items():
        rows.append((f"baseline {kind} bleu1", f"{values.get('bleu1', float('nan')):.4f}"))
    width = max(len(str(name)) for name, _ in rows)
    return "\n".join(f"{str(name):<{width}}  {value}" for name, value in rows)
