"""GloVe training in PyTorch, on CPU or CUDA, from a `CooccurrenceMatrix`.

The objective, weighting and optimizer follow the Stanford GloVe C tool: minimize
`sum_ij f(X_ij) (w_i . c_j + b_i + b'_j - log X_ij)^2` with `f(X) = min(1, (X / x_max)^alpha)`,
AdaGrad with squared gradients starting at 1 (so the first step size is the learning rate), the
learning rate folded into the gradient as the C tool does, parameters drawn from
`uniform(-0.5, 0.5) / dim`, and word + context vectors summed at the end.

The C tool updates one pair at a time from several threads without locks. Here a step takes a
batch of `batch_size` pairs drawn without replacement, and every word/context row touched by the
batch gets one AdaGrad update with its gradient summed over the batch. The batch is computed
with sparse kernels so that no `batch x dim` matrix is ever materialized:

- the dot products `w_i . c_j` of the batch's pairs: `torch.sparse.sampled_addmm` over the
  (unique rows x unique columns) pattern of the batch;
- the summed gradients `sum_j fdiff_ij c_j` and `sum_i fdiff_ij w_i`: two CSR x dense products.

Memory: besides the caller's co-occurrence matrix, training holds only the parameters and their
AdaGrad state (4 x [trained tokens, dim]) and a few MB per batch. Pairs are read straight from the
CSR in a fresh seeded pseudo-random order every iteration (a Feistel permutation computed on
demand), where the C tool writes a shuffled copy of the pairs to disk and streams it; gradients
are computed and applied a block of rows at a time.

This makes one pass over the pairs faster than the C tool's per-pair loop on a CPU (see
bench/bench_glove.py), and the same code runs on a GPU. On a CPU with two or more threads, the
word half and the context half of each step run on two Python threads (each with half of torch's
threads): they write disjoint parameters, so the result does not change, and independent threads
keep their speed when other processes share the cores, where OpenMP barriers between many small
kernels stall.

Determinism: on CPU, with the same `seed` and co-occurrences, training is bit-for-bit
reproducible (all reductions have a fixed order: sorted distinct rows, CSR products reduced row by
row, no atomics); 1 and 2 threads give identical vectors (tested). On CUDA the sparse kernels may
reduce in a different order from run to run, so results agree only to rounding.

Example:
    >>> from tokswap.align.glove import GloveConfig, train_glove
    >>> vectors = train_glove(cooc, GloveConfig(dim=300, iterations=15))
    >>> vectors.save("glove.npz")
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import math
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional, Union

import numpy as np
import torch

from tokswap.align.cooccurrence import CooccurrenceMatrix
from tokswap.errors import TokswapError
from tokswap.utils import atomic_output_file, get_logger

logger = get_logger(__name__)

GLOVE_FORMAT_VERSION = 1


class GloveError(TokswapError):
    """Raised for GloVe inputs that cannot be trained on (empty co-occurrences, bad settings, bad files)."""


@dataclass
class GloveConfig:
    """Settings of `train_glove`. The defaults are the TokAlign reference's (Stanford GloVe's)."""

    dim: int = field(default=300, metadata={"help": "Dimension of the word vectors."})
    iterations: int = field(default=15, metadata={"help": "Passes over all non-zero co-occurrence pairs."})
    x_max: float = field(
        default=10.0, metadata={"help": "Co-occurrence count at which the weighting function f(X) reaches 1."}
    )
    alpha: float = field(default=0.75, metadata={"help": "Exponent of the weighting function f(X) = (X/x_max)^alpha."})
    learning_rate: float = field(default=0.05, metadata={"help": "Initial AdaGrad learning rate (the C tool's -eta)."})
    grad_clip: float = field(
        default=100.0,
        metadata={
            "help": "Gradient components are clipped to [-grad_clip, grad_clip] before the update (as the C tool)."
        },
    )
    seed: int = field(default=0, metadata={"help": "Seed of the initialization and of the pair shuffling."})
    batch_size: int = field(
        default=1 << 16,
        metadata={
            "help": "Co-occurrence pairs per update step. Larger batches run faster per pair but update each "
            "row less often; 2**16 trains as well as the C tool's per-pair updates on 20M-token corpora."
        },
    )
    device: Optional[str] = field(
        default=None, metadata={"help": "Device to train on: 'cpu', 'cuda', 'cuda:1'... Default: CUDA if available."}
    )
    dtype: str = field(default="float32", metadata={"help": "Parameter dtype: 'float32' or 'float64'."})
    num_threads: Optional[int] = field(
        default=None, metadata={"help": "CPU threads for training (torch.set_num_threads); default: torch's setting."}
    )

    def __post_init__(self):
        if self.dim < 1:
            raise GloveError(f"dim must be at least 1, got {self.dim}.")
        if self.iterations < 0:
            raise GloveError(f"iterations must be non-negative, got {self.iterations}.")
        if self.batch_size < 1:
            raise GloveError(f"batch_size must be at least 1, got {self.batch_size}.")
        if self.x_max <= 0 or self.learning_rate <= 0:
            raise GloveError("x_max and learning_rate must be positive.")
        if self.dtype not in ("float32", "float64"):
            raise GloveError(f"dtype must be 'float32' or 'float64', got {self.dtype!r}.")

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class GloveVectors:
    """Trained GloVe vectors of one vocabulary.

    Attributes:
        vectors (`np.ndarray` float32 [V, dim]): word + context vector of each token id; zeros for
            tokens that were not trained.
        trained (`np.ndarray` bool [V]): tokens that had at least `min_count` occurrences and at
            least one co-occurrence pair.
        config (`GloveConfig`): the training settings.
        costs (`list[float]`): mean weighted squared error per iteration (the C tool's "cost").
    """

    vectors: np.ndarray
    trained: np.ndarray
    config: GloveConfig = field(default_factory=GloveConfig)
    costs: list = field(default_factory=list)

    @property
    def vocab_size(self) -> int:
        return int(self.vectors.shape[0])

    def save(self, path: Union[str, Path]) -> Path:
        """Write to one `.npz` file (temporary file, then rename)."""
        path = Path(path)
        with atomic_output_file(path) as handle:
            np.savez(
                handle,
                format_version=np.int64(GLOVE_FORMAT_VERSION),
                vectors=self.vectors.astype(np.float32, copy=False),
                trained=self.trained.astype(bool, copy=False),
                costs=np.asarray(self.costs, dtype=np.float64),
                config=np.asarray(json.dumps(self.config.to_dict())),
            )
        return path

    @classmethod
    def load(cls, path: Union[str, Path]) -> GloveVectors:
        """Read vectors written by `save`."""
        path = Path(path)
        if not path.is_file():
            raise GloveError(f"No GloVe vectors at {path}; train them first with train_glove().")
        try:
            with np.load(path, allow_pickle=False) as data:
                if int(data["format_version"]) > GLOVE_FORMAT_VERSION:
                    raise GloveError(f"{path} was written by a newer tokswap; upgrade tokswap to read it.")
                config = GloveConfig(**json.loads(str(data["config"])))
                return cls(data["vectors"], data["trained"], config, [float(c) for c in data["costs"]])
        except (KeyError, ValueError, OSError) as error:
            if isinstance(error, GloveError):
                raise
            raise GloveError(f"{path} is not a tokswap GloVe file ({error}); retrain the vectors.") from error


def load_stanford_vectors(path: Union[str, Path], vocab_size: int, dim: Optional[int] = None) -> GloveVectors:
    """Read vectors written by the Stanford GloVe C tool (`-binary 0`) for a token-id corpus.

    The corpus given to the C tool must have been written as whitespace-separated integer token
    ids, so each line of its output is `<id> <v_1> ... <v_dim>` (an optional `V dim` header line
    is skipped; `<unk>` lines are ignored).

    Args:
        path: the C tool's `<save-file>.txt`.
        vocab_size: the tokenizer's full length; ids at or above it are an error.
        dim: expected dimension (checked if given).

    Returns:
        `GloveVectors` with `trained` set for the ids the file contains.
    """
    path = Path(path)
    if not path.is_file():
        raise GloveError(f"No GloVe C-tool vectors at {path}.")
    ids, rows = [], []
    with open(path, encoding="utf-8") as handle:
        for line_number, line in enumerate(handle):
            parts = line.rstrip("\n").split(" ")
            if line_number == 0 and len(parts) == 2:
                continue  # "-write-header 1": vocabulary size and dimension
            if not parts[0] or parts[0] == "<unk>":
                continue
            try:
                token_id = int(parts[0])
            except ValueError as error:
                raise GloveError(
                    f"{path}:{line_number + 1}: word {parts[0]!r} is not an integer token id; the C tool must be "
                    "run on a corpus of whitespace-separated token ids."
                ) from error
            if not 0 <= token_id < vocab_size:
                raise GloveError(f"{path}:{line_number + 1}: token id {token_id} is outside [0, {vocab_size}).")
            ids.append(token_id)
            rows.append(np.asarray(parts[1:], dtype=np.float32))
    if not rows:
        raise GloveError(f"{path} holds no vectors.")
    width = rows[0].shape[0]
    if dim is not None and width != dim:
        raise GloveError(f"{path} has {width}-dimensional vectors, expected {dim}.")
    vectors = np.zeros((vocab_size, width), dtype=np.float32)
    vectors[np.asarray(ids)] = np.stack(rows)
    trained = np.zeros(vocab_size, dtype=bool)
    trained[np.asarray(ids)] = True
    return GloveVectors(vectors, trained, GloveConfig(dim=width), [])


def _resolve_device(device: Optional[str]) -> torch.device:
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


@contextlib.contextmanager
def _shutdown(pool):
    try:
        yield
    finally:
        if pool is not None:
            pool.shutdown(wait=True)


@contextlib.contextmanager
def _torch_threads(num_threads: Optional[int]):
    if num_threads is None:
        yield
        return
    previous = torch.get_num_threads()
    torch.set_num_threads(num_threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


class _AdaGradRows:
    """A [n, dim] parameter matrix plus a bias vector, with the C tool's AdaGrad state."""

    def __init__(self, n: int, dim: int, generator: torch.Generator, dtype, device):
        # Drawn on CPU from a seeded generator so that CPU and CUDA runs start identically.
        # In place: no temporaries of the parameters' size.
        self.weight = torch.rand(n, dim, generator=generator, dtype=dtype).sub_(0.5).div_(dim).to(device)
        self.bias = torch.rand(n, generator=generator, dtype=dtype).sub_(0.5).div_(dim).to(device)
        self.weight_gradsq = torch.ones(n, dim, dtype=dtype, device=device)
        self.bias_gradsq = torch.ones(n, dtype=dtype, device=device)
        self._gathered = torch.empty(0, dim, dtype=dtype, device=device)

    def gather(self, rows: torch.Tensor) -> torch.Tensor:
        """A copy of the weight rows `rows`, in a buffer reused from batch to batch (valid until the next call).

        A fresh [rows, dim] matrix per batch would cost page faults, and the allocator keeps freed
        blocks of that size around, which adds to the peak.
        """
        if self._gathered.shape[0] < rows.numel():
            # With headroom, so that the buffer rarely has to grow again.
            self._gathered = torch.empty(
                min(self.weight.shape[0], int(rows.numel() * 1.125) + 64),
                self.weight.shape[1],
                dtype=self.weight.dtype,
                device=self.weight.device,
            )
        return torch.index_select(self.weight, 0, rows, out=self._gathered[: rows.numel()])

    def update_rows(self, rows, current, gradient, learning_rate, clip):
        """One AdaGrad step of the weight rows `rows` (whose current values are `current`), in place on
        `gradient`, which is consumed.

        The C tool's scaling: temp = eta * clip(g), gradsq accumulates temp^2. It divides by the squared
        gradients *before* adding temp^2; with a gradient summed over a batch (a frequent token's row
        gets thousands of same-sign terms) that first step explodes, so the current gradient is added
        first, as in standard AdaGrad, which bounds every step.
        """
        scaled = gradient.clamp_(-clip, clip).mul_(learning_rate)
        gradsq = self.weight_gradsq.index_select(0, rows).addcmul_(scaled, scaled)
        self.weight_gradsq.index_copy_(0, rows, gradsq)
        # `current` is a gathered copy that the other half of the batch may still read: not written.
        step = scaled.div_(gradsq.sqrt_())
        self.weight.index_copy_(0, rows, torch.sub(current, step, out=step))

    def update_bias(self, rows, gradient, learning_rate):
        # The C tool does not clip the bias gradient.
        scaled = gradient.mul_(learning_rate)
        gradsq = self.bias_gradsq.index_select(0, rows).addcmul_(scaled, scaled)
        self.bias_gradsq.index_copy_(0, rows, gradsq)
        self.bias.index_copy_(0, rows, self.bias.index_select(0, rows) - scaled / gradsq.sqrt())


def _csr(crow, col, values, shape):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "sparse CSR support is in beta"
        return torch.sparse_csr_tensor(crow, col, values, shape, check_invariants=False)


def _row_pointers(sorted_rows: torch.Tensor, num_rows: int) -> torch.Tensor:
    crow = torch.zeros(num_rows + 1, dtype=torch.int64, device=sorted_rows.device)
    crow[1:] = torch.bincount(sorted_rows, minlength=num_rows).cumsum(0)
    return crow


def _compact_ids(ids: torch.Tensor, num_tokens: int):
    """The sorted distinct values of `ids` and the position of each entry among them.

    A bincount over the vocabulary replaces a sort (torch.unique sorts, which dominates on a CPU).
    """
    present = torch.bincount(ids, minlength=num_tokens) > 0
    distinct = torch.nonzero(present).squeeze(1)
    position = torch.cumsum(present, 0) - 1
    return distinct, position[ids]


@dataclass
class _Batch:
    """Everything about a batch that does not depend on the parameters (computed ahead, off the critical path)."""

    word_ids: torch.Tensor  # distinct compact word ids, sorted
    word_index: torch.Tensor  # per pair: position of its word in word_ids (pairs grouped by word)
    context_ids: torch.Tensor
    context_index: torch.Tensor
    crow: torch.Tensor  # CSR row pointers of the pairs over word_ids
    by_context: torch.Tensor  # the pairs' order grouped by context
    context_crow: torch.Tensor  # CSR row pointers of that order over context_ids
    context_index_by_context: torch.Tensor  # context_index in that order (sorted)
    word_index_by_context: torch.Tensor  # word_index in that order
    log_counts: torch.Tensor
    weights: torch.Tensor


def _prepare_batch(source, pair_ids, num_tokens, config) -> _Batch:
    rows, cols, counts = source.batch(pair_ids)
    word_ids, word_index = _compact_ids(rows, num_tokens)
    context_ids, context_index = _compact_ids(cols, num_tokens)
    num_words, num_contexts = word_ids.numel(), context_ids.numel()
    by_context = _argsort(context_index * num_words + word_index)
    context_index_by_context = context_index[by_context]
    return _Batch(
        word_ids=word_ids,
        word_index=word_index,
        context_ids=context_ids,
        context_index=context_index,
        # The pairs come in the CSR's order, so grouped by word: the batch is a CSR over its distinct rows.
        crow=_row_pointers(word_index, num_words),
        by_context=by_context,
        context_crow=_row_pointers(context_index_by_context, num_contexts),
        context_index_by_context=context_index_by_context,
        word_index_by_context=word_index[by_context],
        log_counts=counts.log(),
        weights=(counts / config.x_max).pow_(config.alpha).clamp_(max=1.0),
    )


def _train_batch(words, contexts, batch: _Batch, config, pool=None) -> torch.Tensor:
    """One AdaGrad step on a prepared batch of distinct pairs; returns its summed cost (float64, on device)."""
    num_words, num_contexts = batch.word_ids.numel(), batch.context_ids.numel()
    word_rows = words.gather(batch.word_ids)
    context_rows = contexts.gather(batch.context_ids)
    pattern = _csr(batch.crow, batch.context_index, torch.ones_like(batch.log_counts), (num_words, num_contexts))
    dots = torch.sparse.sampled_addmm(pattern, word_rows, context_rows.t(), beta=0.0).values()

    biases = words.bias[batch.word_ids][batch.word_index] + contexts.bias[batch.context_ids][batch.context_index]
    diff = dots.add_(biases).sub_(batch.log_counts)
    weighted_diff = batch.weights * diff
    cost = 0.5 * torch.dot(weighted_diff.double(), diff.double())

    # Summed gradients: d/dw_i = sum_j fdiff_ij c_j ; d/dc_j = sum_i fdiff_ij w_i. The word side and
    # the context side read the gathered rows and write disjoint parameters, so they can run at
    # once on two CPU threads without changing the result.
    def word_side():
        _update_side(
            words,
            batch.word_ids,
            word_rows,
            batch.crow,
            batch.word_index,
            batch.context_index,
            weighted_diff,
            context_rows,
            config,
        )

    def context_side():
        _update_side(
            contexts,
            batch.context_ids,
            context_rows,
            batch.context_crow,
            batch.context_index_by_context,
            batch.word_index_by_context,
            weighted_diff[batch.by_context],
            word_rows,
            config,
        )

    if pool is None:
        word_side()
        context_side()
    else:
        pending = pool.submit(word_side)
        context_side()
        pending.result()
    return cost


# Rows updated at once: bounds the gradient and AdaGrad temporaries to a few MB whatever the batch.
_UPDATE_CHUNK_ROWS = 1024


def _update_side(params, ids, current, crow, row_index, other_index, weighted_diff, other_rows, config):
    """AdaGrad step of one side (words or contexts) from the batch as a CSR over its distinct rows
    (`crow`; `row_index` and `other_index` give each pair's row and column, in the CSR's order).

    The gradient `CSR @ other_rows` is computed and applied `_UPDATE_CHUNK_ROWS` rows at a time, so
    no `rows x dim` gradient or AdaGrad temporary of the whole batch exists.
    """
    num_rows = ids.numel()
    bias_grad = torch.zeros(num_rows, dtype=weighted_diff.dtype, device=weighted_diff.device)
    params.update_bias(ids, bias_grad.index_add_(0, row_index, weighted_diff), config.learning_rate)
    bounds = crow.tolist() if crow.device.type == "cpu" else None
    for start in range(0, num_rows, _UPDATE_CHUNK_ROWS):
        stop = min(start + _UPDATE_CHUNK_ROWS, num_rows)
        first, last = (bounds[start], bounds[stop]) if bounds is not None else (int(crow[start]), int(crow[stop]))
        block = _csr(
            crow[start : stop + 1] - first,
            other_index[first:last],
            weighted_diff[first:last],
            (stop - start, other_rows.shape[0]),
        )
        params.update_rows(
            ids[start:stop], current[start:stop], block @ other_rows, config.learning_rate, config.grad_clip
        )


def _sort(values: torch.Tensor) -> torch.Tensor:
    if values.device.type == "cpu":
        return torch.from_numpy(np.sort(values.numpy()))
    return torch.sort(values).values


def _argsort(keys: torch.Tensor) -> torch.Tensor:
    # numpy's sort is several times faster than torch.argsort on a CPU; keys are distinct, so
    # the order is unique and deterministic either way.
    if keys.device.type == "cpu":
        return torch.from_numpy(np.argsort(keys.numpy()))
    return torch.argsort(keys)


class _PairPermutation:
    """A seeded pseudo-random order of the pair indices `0..n-1`, computed on demand: no index array is stored.

    A balanced Feistel network permutes the smallest power-of-four domain that covers `n` (less than
    `4 n`). Chunk `k` is the image of a contiguous range of domain positions, keeping the values below
    `n`: over all chunks every pair index comes exactly once, with no cycle walking (whose long tail of
    small passes dominated the cost). Chunks have about `batch_size` pairs each. Every GloVe iteration
    draws new round keys, so each pass visits the pairs in a fresh random order, with memory
    independent of the number of pairs. This replaces the C tool's `shuffle` step and its on-disk copy
    of the pairs.
    """

    # Three rounds already make a pseudo-random permutation (Luby-Rackoff); this only has to shuffle.
    ROUNDS = 3

    def __init__(self, n: int, batch_size: int, generator: torch.Generator, device):
        if n < 1:
            raise GloveError("Cannot permute an empty set of pairs.")
        self.n = n
        self.half_bits, self.domain, self.span, self.num_chunks = self.geometry(n, batch_size)
        self.half_mask = (1 << self.half_bits) - 1
        self.keys = torch.randint(0, 1 << 31, (self.ROUNDS,), generator=generator, dtype=torch.int64).tolist()
        self.device = device

    @staticmethod
    def geometry(n: int, batch_size: int):
        """(half bits, domain size, domain positions per chunk, number of chunks) for `n` pairs."""
        half_bits = (max(2, (n - 1).bit_length()) + 1) // 2
        domain = 1 << (2 * half_bits)
        span = max(1, math.ceil(batch_size * domain / n))
        return half_bits, domain, span, math.ceil(domain / span)

    @staticmethod
    def _mix(x: torch.Tensor) -> torch.Tensor:
        # Two multiply-xorshift rounds on 32-bit values; constants below 2**31 keep every product in int64.
        x = (x * 0x7FEB352D) & 0xFFFFFFFF
        x = x ^ (x >> 15)
        x = (x * 0x5BD1E995) & 0xFFFFFFFF
        return x ^ (x >> 13)

    def _encrypt(self, x: torch.Tensor) -> torch.Tensor:
        left, right = x >> self.half_bits, x & self.half_mask
        for key in self.keys:
            left, right = right, left ^ (self._mix((right ^ key) & 0xFFFFFFFF) & self.half_mask)
        return (left << self.half_bits) | right

    def chunk(self, index: int) -> torch.Tensor:
        """The pair indices of chunk `index` (int64; possibly empty for a tiny `n`)."""
        start = index * self.span
        values = self._encrypt(torch.arange(start, min(start + self.span, self.domain), device=self.device))
        return values[values < self.n]


class _PairSource:
    """Batches of (word, context, count) drawn straight from the co-occurrence CSR, in compact ids.

    Nothing per pair is copied: a batch's pair indices come from `_PairPermutation`, its word ids from
    a binary search of the CSR's row pointers, its contexts and counts from the CSR's own arrays.
    """

    def __init__(self, csr, compact: np.ndarray, device, dtype):
        as_tensor = torch.from_numpy if device.type == "cpu" else (lambda a: torch.from_numpy(a).to(device))
        self.indptr = as_tensor(np.ascontiguousarray(csr.indptr, dtype=np.int64))
        self.indices = as_tensor(np.ascontiguousarray(csr.indices))
        self.counts = as_tensor(np.ascontiguousarray(csr.data))
        self.compact = as_tensor(compact.astype(np.int64))
        self.dtype = dtype

    def batch(self, pair_ids: torch.Tensor):
        """(words, contexts, counts) of the pairs `pair_ids`, ordered by word (the CSR's order)."""
        # A batch is a set: sorting it groups the pairs by word for free and reads the CSR in order.
        pair_ids = _sort(pair_ids)
        rows = torch.searchsorted(self.indptr, pair_ids, right=True) - 1
        return (
            self.compact[rows],
            self.compact[self.indices[pair_ids].long()],
            self.counts[pair_ids].to(self.dtype),
        )


def _release_freed_memory():
    """Hand memory freed by the training step back to the system (glibc keeps freed blocks below its
    mmap threshold, up to 32 MB each, for reuse, which would count toward the peak of what follows)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass  # not glibc: nothing to do


def train_glove(
    cooc: CooccurrenceMatrix,
    config: Optional[GloveConfig] = None,
    progress: bool = True,
) -> GloveVectors:
    """Train GloVe vectors on co-occurrence counts.

    Args:
        cooc (`CooccurrenceMatrix`):
            Counts from `count_cooccurrences`; tokens below its `min_count` get no vector.
        config (`GloveConfig`, *optional*):
            Training settings; the defaults are the reference's (300 dims, 15 iterations).
        progress (`bool`, defaults to `True`):
            Show a tqdm bar with the cost of each iteration.

    Returns:
        `GloveVectors` covering the whole vocabulary (`trained` marks the tokens with a vector).
    """
    from tqdm.auto import tqdm

    config = config or GloveConfig()
    csr = _checked_counts(cooc)
    device, dtype = _resolve_device(config.device), getattr(torch, config.dtype)
    num_pairs = int(csr.nnz)
    trained, token_ids, compact = _trained_tokens(csr, cooc.vocab_size)
    generator = torch.Generator().manual_seed(config.seed)
    threads = config.num_threads or torch.get_num_threads()
    # On a CPU the two halves of each step run on two Python threads, each with half the torch
    # threads: independent threads degrade gracefully when other processes share the cores, where
    # torch's OpenMP barriers between small kernels stall.
    split = device.type == "cpu" and threads >= 2
    pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="glove") if split else None
    prefetch = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="glove-prefetch") if split else None
    with _torch_threads(max(1, threads // 2) if split else config.num_threads), _shutdown(pool), _shutdown(prefetch):
        # The pairs are read straight from the CSR in a new pseudo-random order every iteration (the C
        # tool writes a shuffled copy to disk instead): no per-pair array beyond the caller's counts.
        source = _PairSource(csr, compact, device, dtype)
        words = _AdaGradRows(token_ids.size, config.dim, generator, dtype, device)
        contexts = _AdaGradRows(token_ids.size, config.dim, generator, dtype, device)
        num_batches = _PairPermutation.geometry(num_pairs, config.batch_size)[3]
        costs = []
        bar = tqdm(total=config.iterations * num_batches, desc="GloVe", unit="batch", disable=not progress)
        with torch.no_grad():
            for iteration in range(config.iterations):
                started = time.perf_counter()
                permutation = _PairPermutation(num_pairs, config.batch_size, generator, device)
                total_cost = _train_iteration(
                    source, permutation, token_ids.size, words, contexts, config, pool, prefetch, bar
                )
                cost = float(total_cost) / num_pairs
                if not math.isfinite(cost):
                    raise GloveError(
                        f"GloVe diverged at iteration {iteration + 1} (cost {cost}); lower learning_rate or batch_size."
                    )
                costs.append(cost)
                bar.set_postfix(iteration=iteration + 1, cost=f"{cost:.4f}")
                logger.debug(
                    "GloVe iteration %d: cost %.6f (%.1f s)", iteration + 1, cost, time.perf_counter() - started
                )
        bar.close()
        del source
        vectors = _summed_vectors(words, contexts, token_ids, cooc.vocab_size, config.dim, device)
    if costs:
        logger.info("GloVe: %d iterations on %d pairs, final cost %.4f.", len(costs), num_pairs, costs[-1])
    return GloveVectors(vectors=vectors, trained=trained, config=config, costs=costs)


def _checked_counts(cooc: CooccurrenceMatrix):
    """The CSR counts, refused when empty or not all positive (log X is fitted)."""
    if cooc.nnz == 0:
        raise GloveError(
            "The co-occurrence matrix is empty (no pair of tokens above min_count); use a larger corpus "
            "or a lower min_count."
        )
    csr = cooc.matrix
    if csr.data.size and not (csr.data > 0).all():
        raise GloveError("Co-occurrence values must be positive (log X is fitted); drop zero or negative entries.")
    return csr


def _trained_tokens(csr, vocab_size: int):
    """`(trained mask, token ids, compact map)`: only tokens that appear in some pair get parameters, with
    their ids compacted to 0..n-1."""
    trained = np.diff(csr.indptr) > 0
    trained[csr.indices] = True
    token_ids = np.flatnonzero(trained)
    compact = np.full(vocab_size, -1, dtype=np.int32)
    compact[token_ids] = np.arange(token_ids.size, dtype=np.int32)
    return trained, token_ids, compact


def _train_iteration(source, permutation, num_rows, words, contexts, config, pool, prefetch, bar) -> torch.Tensor:
    """One pass over every pair in `permutation`'s order; returns the summed cost (on the device: no host
    synchronization per batch on a GPU)."""
    total_cost = torch.zeros((), dtype=torch.float64, device=words.weight.device)

    def prepare(index):
        pair_ids = permutation.chunk(index)
        return _prepare_batch(source, pair_ids, num_rows, config) if pair_ids.numel() else None

    # On a CPU the next batch is prepared on another thread while this one trains: that
    # work needs no parameters, and it fills the core left idle by the serial part of a step.
    upcoming = prefetch.submit(prepare, 0) if prefetch is not None else None
    for index in range(permutation.num_chunks):
        if prefetch is not None:
            batch = upcoming.result()
            if index + 1 < permutation.num_chunks:
                upcoming = prefetch.submit(prepare, index + 1)
        else:
            batch = prepare(index)
        if batch is not None:
            total_cost += _train_batch(words, contexts, batch, config, pool)
        bar.update(1)
    return total_cost


def _summed_vectors(words, contexts, token_ids, vocab_size: int, dim: int, device) -> np.ndarray:
    """Word + context vectors, summed in place, one float32 row per vocabulary id (zeros for untrained ids).

    The AdaGrad state goes first, so the output never coexists with the training state.
    """
    del words.weight_gradsq, contexts.weight_gradsq
    summed = words.weight.add_(contexts.weight)
    del contexts.weight  # the caller's training state holds no other copy
    _release_freed_memory()
    vectors = np.zeros((vocab_size, dim), dtype=np.float32)
    vectors[token_ids] = summed.to(device="cpu", dtype=torch.float32).numpy()
    return vectors
