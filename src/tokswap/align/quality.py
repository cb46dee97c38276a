"""How good is an alignment before any model is touched (TokAlign paper, section 3.2).

- `bleu1`: tokenize held-out text with the source tokenizer, map every source id to a target id,
  and compare with the target tokenizer's own tokenization of the same text (corpus-level BLEU-1:
  clipped unigram precision times the brevity penalty).
- `semantic_similarity`: decode the mapped target ids back to text and compare it with the original
  text with a sentence encoder (all-MiniLM-L6-v2, offline): mean cosine similarity.
- `baseline_alignment`: the reference points: a random permutation, identical *strings* + random
  rows, identical *bytes* + random rows.

Direction. The paper maps source ids to target ids (`M_{s->t}`); a `TokenAlignment` is stored
target -> source (what model surgery needs). The source -> target map used for evaluation is
`source_to_target_map`: the alignment's own `source_to_target` array when it has one (identical
target token, else the nearest target in the matched space), otherwise derived from the stored
direction: for each source id, the target rows mapped to it that are identical/special first, then
the one with the highest score (ties: lowest id); source ids no target maps to get a random target
(seeded), exactly like the random rows of the baselines.
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from tokswap.alignment import RowSource, TokenAlignment
from tokswap.utils import get_logger

logger = get_logger(__name__)

__all__ = ["baseline_alignment", "bleu1", "semantic_similarity", "source_to_target_map"]

BASELINES = ("random_permutation", "string_identical_random", "byte_identical_random")


def source_to_target_map(alignment: TokenAlignment, num_source_rows: int, seed: int = 0) -> np.ndarray:
    """The source id -> target id map used to evaluate `alignment` (see the module docstring)."""
    if alignment.source_to_target is not None and len(alignment.source_to_target) >= num_source_rows:
        return alignment.source_to_target[:num_source_rows]
    rng = np.random.default_rng(seed)
    result = rng.integers(0, alignment.num_target_rows, size=num_source_rows, dtype=np.int64)
    targets = np.arange(alignment.num_target_rows)
    exact = np.isin(alignment.row_sources, [RowSource.IDENTICAL, RowSource.SPECIAL])
    # Order so that, per source id, the preferred target comes *last* (later writes win).
    order = np.lexsort((-targets, alignment.scores, exact))
    sources = alignment.target_to_source[order]
    inside = sources < num_source_rows
    result[sources[inside]] = targets[order][inside]
    return result


def bleu1(
    alignment,
    source_ids_corpus: Sequence[Sequence[int]],
    target_ids_corpus: Sequence[Sequence[int]],
    num_source_rows: Optional[int] = None,
) -> float:
    """Corpus-level BLEU-1 of the source tokenization mapped to target ids against the target's own.

    Args:
        alignment (`TokenAlignment` or `np.ndarray`): the alignment, or directly a source -> target
            id array.
        source_ids_corpus / target_ids_corpus: the same texts tokenized by each tokenizer (no
            special tokens), one id sequence per text.
        num_source_rows (`int`, optional): size of the source vocabulary (default: covers the ids).

    Returns:
        `float` in [0, 1]: `BP * sum(clipped matches) / sum(candidate lengths)` where the candidate
        is the mapped source sequence and `BP = min(1, exp(1 - ref_len / cand_len))`.
    """
    if len(source_ids_corpus) != len(target_ids_corpus):
        raise ValueError("bleu1 needs the same number of source and target sequences (one per text).")
    if isinstance(alignment, TokenAlignment):
        if num_source_rows is None:
            num_source_rows = 1 + max((int(np.max(s)) for s in source_ids_corpus if len(s)), default=0)
            num_source_rows = max(num_source_rows, int(alignment.target_to_source.max()) + 1)
        mapping = source_to_target_map(alignment, num_source_rows)
    else:
        mapping = np.asarray(alignment, dtype=np.int64)
    matches = candidate_length = reference_length = 0
    for source_ids, target_ids in zip(source_ids_corpus, target_ids_corpus):
        candidate = mapping[np.asarray(source_ids, dtype=np.int64)]
        reference = np.asarray(target_ids, dtype=np.int64)
        candidate_length += len(candidate)
        reference_length += len(reference)
        if not len(candidate) or not len(reference):
            continue
        cand_tokens, cand_counts = np.unique(candidate, return_counts=True)
        ref_tokens, ref_counts = np.unique(reference, return_counts=True)
        _, cand_at, ref_at = np.intersect1d(cand_tokens, ref_tokens, assume_unique=True, return_indices=True)
        matches += int(np.minimum(cand_counts[cand_at], ref_counts[ref_at]).sum())
    if candidate_length == 0:
        return 0.0
    brevity = 1.0 if candidate_length > reference_length else float(np.exp(1 - reference_length / candidate_length))
    return brevity * matches / candidate_length


_ENCODERS: dict = {}


def semantic_similarity(
    texts: Sequence[str],
    decoded_texts: Sequence[str],
    encoder_path=None,
    batch_size: int = 64,
) -> float:
    """Mean cosine similarity of each text and its round-tripped version under a sentence encoder.

    Args:
        texts: the original texts.
        decoded_texts: the same texts after source tokenization, mapping and target decoding.
        encoder_path: a sentence-transformers model folder; default: all-MiniLM-L6-v2 from
            `tokswap.offline.assets.minilm_path()` (fetched once, used offline).
        batch_size (`int`): encoder batch size.
    """
    if len(texts) != len(decoded_texts):
        raise ValueError("semantic_similarity needs one decoded text per text.")
    if not len(texts):
        return float("nan")
    if encoder_path is None:
        from tokswap.offline.assets import minilm_path

        encoder_path = minilm_path()
    key = str(encoder_path)
    if key not in _ENCODERS:
        from sentence_transformers import SentenceTransformer

        _ENCODERS[key] = SentenceTransformer(key, device="cpu")
    encoder = _ENCODERS[key]
    a = encoder.encode(list(texts), batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True)
    b = encoder.encode(list(decoded_texts), batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True)
    return float(np.mean(np.sum(a * b, axis=1)))


def baseline_alignment(kind: str, source_tokenizer, target_tokenizer, seed: int = 0, identical=None) -> TokenAlignment:
    """A reference alignment to compare against.

    Args:
        kind (`str`): `"random_permutation"` (every target row a random source row),
            `"string_identical_random"` (tokens with the same vocabulary *string* map to each other,
            the rest random) or `"byte_identical_random"` (tokens with the same *bytes*, see
            `tokswap.align.vocab.identical_token_pairs`, the rest random).
        seed (`int`): random seed.
        identical (`IdenticalPairs`, optional): precomputed byte-identical pairs.
    """
    from tokswap.align.vocab import _vocab_by_id, identical_token_pairs

    if kind not in BASELINES:
        raise ValueError(f"Unknown baseline {kind!r}; choose one of {BASELINES}.")
    num_source, num_target = len(source_tokenizer), len(target_tokenizer)
    rng = np.random.default_rng(seed)
    if num_target <= num_source:
        target_to_source = rng.permutation(num_source)[:num_target].astype(np.int64)
    else:
        target_to_source = rng.integers(0, num_source, size=num_target, dtype=np.int64)
    row_sources = np.full(num_target, RowSource.IMPORTED, dtype=np.int8)
    scores = np.zeros(num_target, dtype=np.float32)
    if kind == "string_identical_random":
        source_vocab = {token: idx for idx, token in enumerate(_vocab_by_id(source_tokenizer)) if token is not None}
        for idx, token in enumerate(_vocab_by_id(target_tokenizer)):
            if token is not None and token in source_vocab:
                target_to_source[idx] = source_vocab[token]
                row_sources[idx] = RowSource.IDENTICAL
                scores[idx] = 1.0
    elif kind == "byte_identical_random":
        pairs = identical if identical is not None else identical_token_pairs(source_tokenizer, target_tokenizer)
        target_to_source[pairs.target_ids] = pairs.source_ids
        row_sources[pairs.target_ids] = RowSource.IDENTICAL
        scores[pairs.target_ids] = 1.0
    return TokenAlignment(
        target_to_source=target_to_source,
        scores=scores,
        row_sources=row_sources,
        config={"baseline": kind, "seed": seed},
    )
