"""GloVe-style token co-occurrence counting, streamed, sparse and vectorized.

The counts follow the Stanford GloVe `cooccur` tool: a token at distance `d <= window` to the left
of another adds `1/d` to `X[left, right]` (and to `X[right, left]` when the window is symmetric);
windows never cross document boundaries. Documents are buffered into chunks; each chunk is
counted with numpy (one vectorized pass per distance, no Python loop per token) and merged into a
running scipy.sparse accumulator, so memory is bounded by the chunk size plus the number of
distinct pairs, whatever the corpus size.

Example:
    >>> from tokswap.align.cooccurrence import count_cooccurrences
    >>> cooc = count_cooccurrences(token_id_arrays, vocab_size=len(tokenizer), window=15, min_count=5)
    >>> cooc.save("cooc.npz")
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional, Union

import numpy as np
import scipy.sparse as sp

from tokswap.errors import TokswapError
from tokswap.utils import atomic_output_file, get_logger

logger = get_logger(__name__)

COOCCURRENCE_FORMAT_VERSION = 1

# Pairs built per sparse conversion: bounds the temporaries (row, col: int32, weight: float64
# = 16 bytes a pair) independently of `chunk_tokens` and `window`.
_MAX_PAIRS_PER_BLOCK = 2_000_000


class CooccurrenceError(TokswapError):
    """Raised for bad input to co-occurrence counting (ids out of range, empty corpus, bad file)."""


def _index_dtype(vocab_size: int):
    return np.int32 if vocab_size < np.iinfo(np.int32).max else np.int64


@dataclass
class CooccurrenceMatrix:
    """Co-occurrence counts of one tokenized corpus.

    Attributes:
        matrix (`scipy.sparse.csr_matrix` of float32, shape [V, V]):
            `X[i, j]`, the distance-weighted count of token `j` in the window of token `i`. Pairs
            with a token below `min_count` are removed.
        token_counts (`np.ndarray` of int64, shape [V]):
            How often each token id occurs in the corpus (before the min-count filter).
        min_count (`int`):
            Tokens occurring fewer times than this have no pairs (as Stanford GloVe's `vocab_count
            -min-count`).
        window (`int`), symmetric (`bool`), distance_weighting (`bool`):
            The counting settings, kept for provenance.
    """

    matrix: sp.csr_matrix
    token_counts: np.ndarray
    min_count: int = 5
    window: int = 15
    symmetric: bool = True
    distance_weighting: bool = True

    @property
    def vocab_size(self) -> int:
        return int(self.token_counts.shape[0])

    @property
    def kept_tokens(self) -> np.ndarray:
        """Bool mask [V] of the tokens with at least `min_count` occurrences."""
        return self.token_counts >= self.min_count

    @property
    def num_tokens(self) -> int:
        """Number of tokens in the counted corpus."""
        return int(self.token_counts.sum())

    @property
    def nnz(self) -> int:
        """Number of non-zero pairs (the number of terms in the GloVe objective)."""
        return int(self.matrix.nnz)

    def to_triples(self):
        """Return `(rows int32, cols int32, values float32)` of the non-zero pairs, row-major."""
        csr = self.matrix
        rows = np.repeat(np.arange(csr.shape[0], dtype=np.int32), np.diff(csr.indptr))
        return rows, csr.indices.astype(np.int32, copy=False), csr.data.astype(np.float32, copy=False)

    def save(self, path: Union[str, Path]) -> Path:
        """Write the counts to one `.npz` file (written to a temporary file, then renamed)."""
        path = Path(path)
        csr = self.matrix
        with atomic_output_file(path) as handle:
            np.savez(
                handle,
                format_version=np.int64(COOCCURRENCE_FORMAT_VERSION),
                shape=np.asarray(csr.shape, dtype=np.int64),
                indptr=csr.indptr,
                indices=csr.indices,
                data=csr.data.astype(np.float32, copy=False),
                token_counts=self.token_counts.astype(np.int64, copy=False),
                settings=np.asarray(
                    [self.min_count, self.window, int(self.symmetric), int(self.distance_weighting)],
                    dtype=np.int64,
                ),
            )
        return path

    @classmethod
    def load(cls, path: Union[str, Path]) -> CooccurrenceMatrix:
        """Read counts written by `save`."""
        path = Path(path)
        if not path.is_file():
            raise CooccurrenceError(f"No co-occurrence file at {path}; count them first with count_cooccurrences().")
        try:
            with np.load(path, allow_pickle=False) as data:
                version = int(data["format_version"])
                if version > COOCCURRENCE_FORMAT_VERSION:
                    raise CooccurrenceError(
                        f"{path} was written by a newer tokswap (format {version}); upgrade tokswap to read it."
                    )
                shape = tuple(int(x) for x in data["shape"])
                matrix = sp.csr_matrix((data["data"], data["indices"], data["indptr"]), shape=shape)
                token_counts = data["token_counts"]
                min_count, window, symmetric, weighting = (int(x) for x in data["settings"])
        except (KeyError, ValueError, OSError) as error:
            if isinstance(error, CooccurrenceError):
                raise
            raise CooccurrenceError(f"{path} is not a tokswap co-occurrence file ({error}); recount it.") from error
        return cls(matrix, token_counts, min_count, window, bool(symmetric), bool(weighting))

    def __repr__(self) -> str:
        return (
            f"CooccurrenceMatrix(vocab_size={self.vocab_size}, num_tokens={self.num_tokens}, nnz={self.nnz}, "
            f"kept_tokens={int(self.kept_tokens.sum())}, min_count={self.min_count}, window={self.window}, "
            f"symmetric={self.symmetric})"
        )


class CooccurrenceCounter:
    """Accumulate GloVe co-occurrence weights over a stream of documents.

    Args:
        vocab_size (`int`):
            Token ids must lie in `[0, vocab_size)`.
        window (`int`, defaults to 15):
            Context tokens up to this distance are counted.
        symmetric (`bool`, defaults to `True`):
            Count context on both sides (`X` is then symmetric), as GloVe's default.
        distance_weighting (`bool`, defaults to `True`):
            Weight a pair at distance `d` by `1/d` (else 1).
        chunk_tokens (`int`, defaults to 2,000,000):
            Tokens buffered before a vectorized counting pass; bounds the working memory.
        keep_mask (`np.ndarray` of bool, *optional*):
            If given, tokens outside the mask are removed from the stream *before* windowing, so
            the window spans the next kept tokens. This reproduces Stanford GloVe's `cooccur`
            exactly (it skips out-of-vocabulary words); `count_cooccurrences(...,
            skip_rare_in_window=True)` builds the mask in a first pass.

    Example:
        >>> counter = CooccurrenceCounter(vocab_size=50_000)
        >>> for ids in documents:
        ...     counter.update(ids)
        >>> cooc = counter.finalize(min_count=5)
    """

    def __init__(
        self,
        vocab_size: int,
        window: int = 15,
        symmetric: bool = True,
        distance_weighting: bool = True,
        chunk_tokens: int = 2_000_000,
        keep_mask: Optional[np.ndarray] = None,
    ):
        if vocab_size <= 0:
            raise CooccurrenceError(f"vocab_size must be positive, got {vocab_size}.")
        if window < 1:
            raise CooccurrenceError(f"window must be at least 1, got {window}.")
        if chunk_tokens < 1:
            raise CooccurrenceError(f"chunk_tokens must be at least 1, got {chunk_tokens}.")
        if keep_mask is not None:
            keep_mask = np.asarray(keep_mask, dtype=bool)
            if keep_mask.shape != (vocab_size,):
                raise CooccurrenceError(f"keep_mask must have shape ({vocab_size},), got {keep_mask.shape}.")
        self.vocab_size = int(vocab_size)
        self.window = int(window)
        self.symmetric = bool(symmetric)
        self.distance_weighting = bool(distance_weighting)
        self.chunk_tokens = int(chunk_tokens)
        self.keep_mask = keep_mask
        self._index_dtype = _index_dtype(self.vocab_size)
        self.token_counts = np.zeros(self.vocab_size, dtype=np.int64)
        # One-directional counts: M[left, right] for `left` before `right`. The symmetric matrix
        # is M + M.T, formed once in finalize(): half the pairs to sort and merge. M is kept as a
        # few partial sums of decreasing size (merged like a binary counter), so the total merge
        # work grows as N log N with the corpus, where one running sum would copy it per block.
        self._partial_sums: list = []
        self._finalized = False
        self._buffer: list = []
        self._buffered_tokens = 0
        self.num_documents = 0

    # ------------------------------------------------------------------ input
    def update(self, ids) -> None:
        """Add one document (a 1-D array or list of token ids)."""
        if self._finalized:
            raise CooccurrenceError("This counter was finalized; start a new CooccurrenceCounter to count more.")
        array = np.asarray(ids)
        if array.ndim != 1:
            raise CooccurrenceError(f"update() takes one document as a 1-D sequence of ids, got shape {array.shape}.")
        if array.size == 0:
            return
        if not np.issubdtype(array.dtype, np.integer):
            raise CooccurrenceError(f"Token ids must be integers, got dtype {array.dtype}.")
        low, high = int(array.min()), int(array.max())
        if low < 0 or high >= self.vocab_size:
            raise CooccurrenceError(
                f"Token id {low if low < 0 else high} is outside [0, {self.vocab_size}); "
                "pass the tokenizer's full length (len(tokenizer)) as vocab_size."
            )
        array = array.astype(self._index_dtype, copy=False)
        self._buffer.append(array)
        self._buffered_tokens += array.size
        self.num_documents += 1
        if self._buffered_tokens >= self.chunk_tokens:
            self._flush()

    def update_batch(self, documents: Iterable) -> None:
        """Add several documents (each a 1-D array or list of ids)."""
        for ids in documents:
            self.update(ids)

    # --------------------------------------------------------------- counting
    def _flush(self) -> None:
        if not self._buffer:
            return
        lengths = np.fromiter((len(doc) for doc in self._buffer), dtype=np.int64, count=len(self._buffer))
        tokens = np.concatenate(self._buffer)
        self._buffer = []
        self._buffered_tokens = 0
        self.token_counts += np.bincount(tokens, minlength=self.vocab_size)

        if self.keep_mask is not None:
            doc_ids = np.repeat(np.arange(lengths.size, dtype=np.int64), lengths)
            kept = self.keep_mask[tokens]
            tokens, doc_ids = tokens[kept], doc_ids[kept]
            lengths = np.bincount(doc_ids, minlength=lengths.size)
        if tokens.size < 2:
            return
        # Position of each token inside its document: a pair (k, k+d) stays inside one document
        # exactly when the right token sits at position >= d.
        starts = np.zeros(lengths.size, dtype=np.int64)
        np.cumsum(lengths[:-1], out=starts[1:])
        position = np.arange(tokens.size, dtype=np.int64) - np.repeat(starts, lengths)

        rows, cols, weights, pending = [], [], [], 0
        for distance in range(1, min(self.window, tokens.size - 1) + 1):
            inside = position[distance:] >= distance
            left = tokens[:-distance][inside]
            if left.size == 0:
                continue
            rows.append(left)
            cols.append(tokens[distance:][inside])
            weight = 1.0 / distance if self.distance_weighting else 1.0
            weights.append(np.full(left.size, weight, dtype=np.float64))
            pending += left.size
            if pending >= _MAX_PAIRS_PER_BLOCK:
                self._merge(rows, cols, weights)
                rows, cols, weights, pending = [], [], [], 0
        if pending:
            self._merge(rows, cols, weights)

    def _merge(self, rows: list, cols: list, weights: list) -> None:
        # Each list is emptied as soon as it is concatenated, and `_sum_pairs` frees its inputs as it
        # goes: at most about two copies of the block's pairs exist at once.
        arrays = []
        for pieces in (rows, cols, weights):
            arrays.append(np.concatenate(pieces))
            pieces.clear()
        block = _sum_pairs(arrays, self.vocab_size)
        self._partial_sums.append(block)
        # Adding two canonical CSR matrices is a linear merge; merge while neighbours are of similar size.
        while len(self._partial_sums) >= 2 and self._partial_sums[-2].nnz <= 2 * self._partial_sums[-1].nnz:
            newer = self._partial_sums.pop()
            older = self._partial_sums.pop()
            self._partial_sums.append(older + newer)
            del older, newer

    # ----------------------------------------------------------------- output
    def finalize(self, min_count: int = 5) -> CooccurrenceMatrix:
        """Count what is still buffered and return the co-occurrence matrix.

        Args:
            min_count (`int`, defaults to 5):
                Pairs involving a token seen fewer than `min_count` times are removed.

        Returns:
            `CooccurrenceMatrix` with float32 values (accumulated in float64).

        The counter is consumed (its partial sums are released as the result is built): count
        another corpus with a new `CooccurrenceCounter`.
        """
        if self._finalized:
            raise CooccurrenceError("finalize() was already called on this counter; start a new CooccurrenceCounter.")
        self._flush()
        self._finalized = True
        # Rare tokens are dropped from the one-directional counts (half the pairs), and each
        # intermediate is released as soon as the next exists: the peak is about three copies of
        # the one-directional pairs.
        matrix = sp.csr_matrix((self.vocab_size, self.vocab_size), dtype=np.float64)
        while self._partial_sums:  # smallest first
            matrix = self._partial_sums.pop() + matrix
        matrix = _drop_tokens(matrix, self.token_counts >= min_count)
        if self.symmetric:
            transposed = matrix.T.tocsr()
            matrix = matrix + transposed
            del transposed
        matrix.sum_duplicates()
        data = matrix.data.astype(np.float32)
        matrix = sp.csr_matrix((data, matrix.indices, matrix.indptr), shape=matrix.shape)
        return CooccurrenceMatrix(
            matrix=matrix,
            token_counts=self.token_counts.copy(),
            min_count=int(min_count),
            window=self.window,
            symmetric=self.symmetric,
            distance_weighting=self.distance_weighting,
        )


def _sum_pairs(pairs: list, size: int) -> sp.csr_matrix:
    """Sum duplicate (row, col) pairs into a canonical CSR matrix in linear time.

    `pairs` is `[rows, cols, weights]`; it is emptied, so that the inputs are freed once sorted.
    Two stable counting sorts (by column, then by row) leave the columns of each row sorted, so
    duplicates are adjacent and no comparison sort is needed; scipy's public COO -> CSR path sorts
    every row instead, which is the bottleneck of counting.
    """
    rows, cols, weights = pairs
    pairs.clear()
    try:
        from scipy.sparse import _sparsetools
    except ImportError:  # pragma: no cover - private module moved: fall back to the public path
        block = sp.coo_matrix((weights, (rows, cols)), shape=(size, size)).tocsr()
        block.sum_duplicates()
        return block
    count = rows.size
    index_dtype = np.int32 if max(count, size) < np.iinfo(np.int32).max else np.int64
    rows = rows.astype(index_dtype, copy=False)
    cols = cols.astype(index_dtype, copy=False)
    by_col_ptr = np.empty(size + 1, dtype=index_dtype)
    by_col_rows = np.empty(count, dtype=index_dtype)
    by_col_weights = np.empty(count, dtype=weights.dtype)
    _sparsetools.coo_tocsr(size, size, count, cols, rows, weights, by_col_ptr, by_col_rows, by_col_weights)
    weight_dtype = weights.dtype
    del rows, cols, weights
    indptr = np.empty(size + 1, dtype=index_dtype)
    indices = np.empty(count, dtype=index_dtype)
    data = np.empty(count, dtype=weight_dtype)
    _sparsetools.csr_tocsc(size, size, by_col_ptr, by_col_rows, by_col_weights, indptr, indices, data)
    del by_col_ptr, by_col_rows, by_col_weights
    block = sp.csr_matrix((data, indices, indptr), shape=(size, size))
    block.has_sorted_indices = True
    block.sum_duplicates()
    return block


def _drop_tokens(matrix: sp.csr_matrix, kept: np.ndarray) -> sp.csr_matrix:
    """Remove every entry whose row or column token is not in `kept` (shape stays [V, V])."""
    row_lengths = np.diff(matrix.indptr)
    keep = kept[matrix.indices]
    keep &= np.repeat(kept, row_lengths)
    if keep.all():  # e.g. rare tokens were skipped while counting: nothing to copy
        return matrix
    # Kept entries before each row start, from one cumulative sum (no per-entry row array).
    kept_before = np.zeros(keep.size + 1, dtype=matrix.indptr.dtype)
    np.cumsum(keep, out=kept_before[1:])
    indptr = kept_before[matrix.indptr]
    del kept_before
    return sp.csr_matrix((matrix.data[keep], matrix.indices[keep], indptr), shape=matrix.shape)


def count_cooccurrences(
    sequences: Iterable,
    vocab_size: int,
    window: int = 15,
    min_count: int = 5,
    symmetric: bool = True,
    distance_weighting: bool = True,
    chunk_tokens: int = 2_000_000,
    skip_rare_in_window: bool = False,
    progress: bool = True,
    total: Optional[int] = None,
) -> CooccurrenceMatrix:
    """Count GloVe co-occurrences over tokenized documents.

    Args:
        sequences (iterable of 1-D int arrays or lists):
            One entry per document; windows never cross entries.
        vocab_size (`int`):
            The tokenizer's full length (`len(tokenizer)`); ids must lie below it.
        window (`int`, defaults to 15), symmetric (`bool`, defaults to `True`),
        distance_weighting (`bool`, defaults to `True`), chunk_tokens (`int`, defaults to 2,000,000):
            See `CooccurrenceCounter`.
        min_count (`int`, defaults to 5):
            Tokens seen fewer times get no pairs.
        skip_rare_in_window (`bool`, defaults to `False`):
            Reproduce Stanford GloVe exactly: tokens below `min_count` are removed from the stream
            before windowing (so windows reach further). Needs two passes, so `sequences` must be
            re-iterable (a list, a `datasets.Dataset` column...). With `False`, pairs with rare
            tokens are simply dropped after one pass.
        progress (`bool`, defaults to `True`):
            Show a tqdm progress bar.
        total (`int`, *optional*):
            Number of documents, for the progress bar when `sequences` has no `len()`.

    Returns:
        `CooccurrenceMatrix`.
    """
    from tqdm.auto import tqdm

    if total is None and hasattr(sequences, "__len__"):
        total = len(sequences)
    keep_mask = None
    if skip_rare_in_window:
        if iter(sequences) is sequences:
            raise CooccurrenceError(
                "skip_rare_in_window=True needs two passes over the corpus; pass a list or a dataset, not an iterator."
            )
        counts = np.zeros(vocab_size, dtype=np.int64)
        for ids in tqdm(sequences, total=total, desc="Counting tokens", unit="doc", disable=not progress):
            ids = np.asarray(ids)
            if ids.size and (ids.min() < 0 or ids.max() >= vocab_size):
                raise CooccurrenceError(f"Token ids must lie in [0, {vocab_size}); pass len(tokenizer) as vocab_size.")
            counts += np.bincount(ids.astype(np.int64, copy=False), minlength=vocab_size)
        keep_mask = counts >= min_count
    counter = CooccurrenceCounter(
        vocab_size,
        window=window,
        symmetric=symmetric,
        distance_weighting=distance_weighting,
        chunk_tokens=chunk_tokens,
        keep_mask=keep_mask,
    )
    bar = tqdm(sequences, total=total, desc="Counting co-occurrences", unit="doc", disable=not progress)
    for ids in bar:
        counter.update(ids)
    if counter.token_counts.sum() + counter._buffered_tokens == 0:
        raise CooccurrenceError("The corpus is empty: no tokens to count co-occurrences from.")
    cooc = counter.finalize(min_count=min_count)
    logger.info(
        "Counted %d tokens: %d non-zero pairs, %d of %d tokens kept (min count %d).",
        cooc.num_tokens,
        cooc.nnz,
        int(cooc.kept_tokens.sum()),
        vocab_size,
        min_count,
    )
    return cooc
