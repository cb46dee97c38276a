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
    >>> from tokswap.glove import GloveConfig, train_glove
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

from .cooccurrence import CooccurrenceMatrix
from .errors import TokswapError
from .utils import atomic_output_file, get_logger

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
        metadata={"help": "Gradient components are clipped to [-grad_clip, grad_clip] before the update (as the C tool)."},
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
    def load(cls, path: Union[str, Path]) -> "GloveVectors":
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
    with open(path, "r", encoding="utf-8") as handle:
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
        self.weight = ((torch.rand(n, dim, generator=generator, dtype=dtype) - 0.5) / dim).to(device)
        self.bias = ((torch.rand(n, generator=generator, dtype=dtype) - 0.5) / dim).to(device)
        self.weight_gradsq = torch.ones(n, dim, dtype=dtype, device=device)
        self.bias_gradsq = torch.ones(n, dtype=dtype, device=device)

    @staticmethod
    def _step(param, gradsq, gradient, learning_rate, clip):
        # The C tool's scaling: temp = eta * clip(g), gradsq accumulates temp^2. It divides by the
        # squared gradients *before* adding temp^2; with a gradient summed over a batch (a frequent
        # token's bias gets thousands of same-sign terms) that first step explodes, so the current
        # gradient is added first, as in standard AdaGrad, which bounds every step.
        scaled = gradient.clamp_(-clip, clip).mul_(learning_rate)
        gradsq.addcmul_(scaled, scaled)
        # Out of place: the other side of the batch may still be reading `param`.
        return param.addcdiv(scaled, gradsq.sqrt(), value=-1.0)

    def update(self, rows, weight_rows, weight_grad, bias_grad, learning_rate, clip):
        gradsq = self.weight_gradsq.index_select(0, rows)
        self.weight.index_copy_(0, rows, self._step(weight_rows, gradsq, weight_grad, learning_rate, clip))
        self.weight_gradsq.index_copy_(0, rows, gradsq)
        bias_gradsq = self.bias_gradsq.index_select(0, rows)
        # The C tool does not clip the bias gradient.
        bias = self._step(self.bias.index_select(0, rows), bias_gradsq, bias_grad, learning_rate, math.inf)
        self.bias.index_copy_(0, rows, bias)
        self.bias_gradsq.index_copy_(0, rows, bias_gradsq)


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


def _train_batch(words, contexts, rows, cols, log_counts, weights, num_tokens, config, pool=None) -> torch.Tensor:
    """One AdaGrad step on a batch of distinct pairs; returns the batch's summed cost (float64, on device)."""
    word_ids, word_index = _compact_ids(rows, num_tokens)
    context_ids, context_index = _compact_ids(cols, num_tokens)
    num_words, num_contexts = word_ids.numel(), context_ids.numel()

    # Order the pairs by (word, context): the batch becomes a CSR matrix over its distinct rows.
    order = _argsort(word_index * num_contexts + context_index)
    word_index, context_index = word_index[order], context_index[order]
    log_counts, weights = log_counts[order], weights[order]
    crow = _row_pointers(word_index, num_words)

    word_rows = words.weight.index_select(0, word_ids)
    context_rows = contexts.weight.index_select(0, context_ids)
    pattern = _csr(crow, context_index, torch.ones_like(log_counts), (num_words, num_contexts))
    dots = torch.sparse.sampled_addmm(pattern, word_rows, context_rows.t(), beta=0.0).values()

    diff = dots + words.bias[word_ids][word_index] + contexts.bias[context_ids][context_index] - log_counts
    weighted_diff = weights * diff
    cost = 0.5 * torch.dot(weighted_diff.double(), diff.double())

    # Summed gradients: d/dw_i = sum_j fdiff_ij c_j ; d/dc_j = sum_i fdiff_ij w_i. The word side and
    # the context side read the gathered rows and write disjoint parameters, so they can run at
    # once on two CPU threads without changing the result.
    def word_side():
        word_grad = _csr(crow, context_index, weighted_diff, (num_words, num_contexts)) @ context_rows
        bias_grad = torch.zeros(num_words, dtype=diff.dtype, device=diff.device).index_add_(0, word_index, weighted_diff)
        words.update(word_ids, word_rows, word_grad, bias_grad, config.learning_rate, config.grad_clip)

    def context_side():
        by_context = _argsort(context_index * num_words + word_index)
        context_crow = _row_pointers(context_index[by_context], num_contexts)
        transposed = _csr(context_crow, word_index[by_context], weighted_diff[by_context], (num_contexts, num_words))
        context_grad = transposed @ word_rows
        bias_grad = torch.zeros(num_contexts, dtype=diff.dtype, device=diff.device).index_add_(
            0, context_index, weighted_diff
        )
        contexts.update(context_ids, context_rows, context_grad, bias_grad, config.learning_rate, config.grad_clip)

    if pool is None:
        word_side()
        context_side()
    else:
        pending = pool.submit(word_side)
        context_side()
        pending.result()
    return cost


def _argsort(keys: torch.Tensor) -> torch.Tensor:
    # numpy's sort is several times faster than torch.argsort on a CPU; keys are distinct, so
    # the order is unique and deterministic either way.
    if keys.device.type == "cpu":
        return torch.from_numpy(np.argsort(keys.numpy()))
    return torch.argsort(keys)


def _shuffled_pairs(csr, compact: np.ndarray, permutation: np.ndarray, chunk: int = 1 << 20):
    """(rows int32, cols int32, counts float32) of the CSR's pairs in `permutation` order, in compact ids.

    Built a chunk at a time so that the only full-size arrays are the three outputs (12 bytes a pair) and
    the permutation: no row-major copy of the pairs exists next to the shuffled one.
    """
    num_pairs = len(permutation)
    rows = np.empty(num_pairs, dtype=np.int32)
    cols = np.empty(num_pairs, dtype=np.int32)
    counts = np.empty(num_pairs, dtype=np.float32)
    indptr = csr.indptr
    for start in range(0, num_pairs, chunk):
        picked = permutation[start : start + chunk]
        rows[start : start + chunk] = compact[np.searchsorted(indptr, picked, side="right") - 1]
        cols[start : start + chunk] = compact[csr.indices[picked]]
        counts[start : start + chunk] = csr.data[picked]
    return rows, cols, counts


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
    if cooc.nnz == 0:
        raise GloveError(
            "The co-occurrence matrix is empty (no pair of tokens above min_count); use a larger corpus "
            "or a lower min_count."
        )
    device = _resolve_device(config.device)
    dtype = getattr(torch, config.dtype)
    csr = cooc.matrix
    if csr.data.size and not (csr.data > 0).all():
        raise GloveError("Co-occurrence values must be positive (log X is fitted); drop zero or negative entries.")
    num_pairs = int(csr.nnz)
    row_lengths = np.diff(csr.indptr)

    # Only tokens that appear in some pair get parameters: compact their ids to 0..n-1.
    trained = row_lengths > 0
    trained[csr.indices] = True
    token_ids = np.flatnonzero(trained)
    compact = np.full(cooc.vocab_size, -1, dtype=np.int32)
    compact[token_ids] = np.arange(token_ids.size, dtype=np.int32)

    generator = torch.Generator().manual_seed(config.seed)
    threads = config.num_threads or torch.get_num_threads()
    # On a CPU the two halves of each step run on two Python threads, each with half the torch
    # threads: independent threads degrade gracefully when other processes share the cores, where
    # torch's OpenMP barriers between small kernels stall.
    split = device.type == "cpu" and threads >= 2
    pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="glove") if split else None
    with _torch_threads(max(1, threads // 2) if split else config.num_threads), _shutdown(pool):
        # Shuffle once (the C tool's `shuffle` step); each iteration then visits the pairs in a new
        # random order of small blocks, so batches differ between iterations at no memory cost.
        # The pairs are kept as int32, int32, float32 (12 bytes a pair), built a chunk at a time.
        permutation = torch.randperm(num_pairs, generator=generator, dtype=torch.int32).numpy()
        rows, cols, counts = _shuffled_pairs(csr, compact, permutation)
        del permutation
        rows, cols = torch.from_numpy(rows).to(device), torch.from_numpy(cols).to(device)
        counts = torch.from_numpy(counts).to(device=device, dtype=dtype)

        words = _AdaGradRows(token_ids.size, config.dim, generator, dtype, device)
        contexts = _AdaGradRows(token_ids.size, config.dim, generator, dtype, device)

        blocks_per_batch = 16
        block = max(1, config.batch_size // blocks_per_batch)
        num_blocks = math.ceil(num_pairs / block)
        num_batches = math.ceil(num_blocks / blocks_per_batch)
        offsets = torch.arange(block, device=device)
        costs = []
        bar = tqdm(total=config.iterations * num_batches, desc="GloVe", unit="batch", disable=not progress)
        with torch.no_grad():
            for iteration in range(config.iterations):
                started = time.perf_counter()
                block_order = torch.randperm(num_blocks, generator=generator).to(device)
                # Summed on the device: no host synchronization per batch on a GPU.
                total_cost = torch.zeros((), dtype=torch.float64, device=device)
                for batch_start in range(0, num_blocks, blocks_per_batch):
                    chosen = block_order[batch_start : batch_start + blocks_per_batch]
                    index = (chosen[:, None] * block + offsets).reshape(-1)
                    index = index[index < num_pairs]
                    batch_counts = counts[index]
                    weights = (batch_counts / config.x_max).pow_(config.alpha).clamp_(max=1.0)
                    total_cost += _train_batch(
                        words, contexts, rows[index].long(), cols[index].long(),
                        batch_counts.log(), weights, token_ids.size, config, pool,
                    )
                    bar.update(1)
                cost = float(total_cost) / num_pairs
                if not math.isfinite(cost):
                    raise GloveError(
                        f"GloVe diverged at iteration {iteration + 1} (cost {cost}); lower learning_rate or batch_size."
                    )
                costs.append(cost)
                bar.set_postfix(iteration=iteration + 1, cost=f"{cost:.4f}")
                logger.debug("GloVe iteration %d: cost %.6f (%.1f s)", iteration + 1, cost, time.perf_counter() - started)
        bar.close()
        del rows, cols, counts  # free the pairs before the full-vocabulary output is allocated
        summed = (words.weight + contexts.weight).to(device="cpu", dtype=torch.float32).numpy()
        del words, contexts

    vectors = np.zeros((cooc.vocab_size, config.dim), dtype=np.float32)
    vectors[token_ids] = summed
    if costs:
        logger.info("GloVe: %d iterations on %d pairs, final cost %.4f.", len(costs), num_pairs, costs[-1])
    return GloveVectors(vectors=vectors, trained=trained, config=config, costs=costs)
