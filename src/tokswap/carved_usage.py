"""Rows of the pieces the target spells the source's whole words with, mixed by how the text uses them.

SmolLM2 has " photosynthesis" as one token; Qwen2.5 spells it " photos" + "ynthesis". Both pieces are in SmolLM2's
vocabulary too, so the swap copies their rows, and those rows mean what SmolLM2 made of them: " photos" the pictures,
"ynthesis" a rare fragment. Yet in text tokenized the new way, "ynthesis" nearly always *is* the word
" photosynthesis", and the row that knows the word belongs to no target token and is dropped. `tokswap.carved_rows`
gives carved pieces the words' rows, but only pieces the source lacks; 94% of the whole words SmolLM2 -> Qwen2.5 takes
apart end in a piece both vocabularies share.

Here the corpus decides. Both tokenizations of each text are laid side by side by byte offsets; a target token lying
strictly inside one source token that is a carved word (`tokswap.carved_rows.carved_words`) stands, there, for that
word. For each target token, `p` is the share of its occurrences that do, and its row becomes

    (1 - p) * its row  +  p * (the mean of those words' source rows, weighted by how often each)

so a piece used only inside " photosynthesis" takes that word's row, " ing" (inside 194 carved words, but mostly
itself) hardly moves, and a token the corpus never shows inside a carved word keeps its row exactly. Input and output
rows are mixed alike (one matrix when tied).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

import numpy as np
import torch

from tokswap.align.byte_offsets import token_byte_ends
from tokswap.carved_rows import carved_words
from tokswap.errors import TokswapError


class CarvedUsageError(TokswapError):
    """Raised for a configuration or inputs the carved-usage rows cannot be built from."""


@dataclass
class CarvedUsageConfig:
    """Configuration of [`carved_usage_rows`].

    Parameters:
        min_occurrences (`int`): a target token moves only if it lies inside carved words at least this often.
        max_share (`float`): the most of a row the carved words may take (1.0: all of it).
        batch_size (`int`): texts tokenized at once.
    """

    min_occurrences: int = field(
        default=1, metadata={"help": "Move a target token only if the corpus shows it inside carved words this often."}
    )
    max_share: float = field(default=1.0, metadata={"help": "The most of a row the carved words' rows may take."})
    batch_size: int = field(default=256, metadata={"help": "Texts tokenized at once."})

    def __post_init__(self):
        if self.min_occurrences < 1:
            raise CarvedUsageError(f"min_occurrences must be >= 1 (got {self.min_occurrences}).")
        if not 0.0 < self.max_share <= 1.0:
            raise CarvedUsageError(f"max_share must be in (0, 1] (got {self.max_share}).")
        if self.batch_size < 1:
            raise CarvedUsageError(f"batch_size must be >= 1 (got {self.batch_size}).")


@dataclass
class CarvedUsage:
    """Counts over a corpus: `totals[t]` occurrences of target token t; `(targets, sources, counts)` how often a
    target token lay strictly inside each carved source word (one entry per pair, sorted by target then source)."""

    totals: np.ndarray
    targets: np.ndarray
    sources: np.ndarray
    counts: np.ndarray


@dataclass
class CarvedUsageReport:
    """What [`carved_usage_rows`] did: rows moved (shared with the source / new), the occurrences counted, the mean
    share `p` of the moved rows, the carved words used, and seconds."""

    rows_moved: int
    shared_rows_moved: int
    occurrences: int
    mean_share: float
    words_used: int
    seconds: float


def _encode(tokenizer, texts: list) -> list:
    backend = getattr(tokenizer, "_tokenizer", None)
    if backend is not None and hasattr(backend, "encode_batch"):
        return [e.ids for e in backend.encode_batch(texts, add_special_tokens=False)]
    return tokenizer(texts, add_special_tokens=False)["input_ids"]


def inside_pairs(source_ids, source_ends, target_ids, target_ends, carved: np.ndarray):
    """For one text: (target ids, source ids) of every target token lying strictly inside a carved source token.

    Args:
        source_ids / target_ids: the two tokenizations; `*_ends` each token's end byte (`token_byte_ends`).
        carved (`np.ndarray` of bool): per source id, whether it is a carved word.
    """
    source_ids, target_ids = np.asarray(source_ids), np.asarray(target_ids)
    source_starts = np.concatenate([[0], source_ends[:-1]])
    target_starts = np.concatenate([[0], target_ends[:-1]])
    # the source token holding each target token's first byte
    holder = np.searchsorted(source_ends, target_starts, side="right")
    valid = holder < len(source_ids)
    holder = np.minimum(holder, len(source_ids) - 1)
    inside = (
        valid
        & (target_ends <= source_ends[holder])
        & ((target_ends - target_starts) < (source_ends[holder] - source_starts[holder]))
        & (target_ends > target_starts)
    )
    inside &= carved[source_ids[holder]]
    return target_ids[inside], source_ids[holder[inside]]


def count_carved_usage(
    source_tokenizer, target_tokenizer, texts: Sequence[str], num_target_rows: int, batch_size: int = 256
) -> CarvedUsage:
    """Count, over `texts`, each target token's occurrences and those strictly inside each carved source word."""
    words = carved_words(source_tokenizer, target_tokenizer)
    num_source = max(len(source_tokenizer), int(words.max()) + 1 if len(words) else 0)
    carved = np.zeros(num_source, dtype=bool)
    carved[words] = True
    totals = np.zeros(num_target_rows, dtype=np.int64)
    pair_keys = []
    for start in range(0, len(texts), batch_size):
        batch = list(texts[start : start + batch_size])
        for text, s_ids, t_ids in zip(batch, _encode(source_tokenizer, batch), _encode(target_tokenizer, batch)):
            if not s_ids or not t_ids:
                continue
            s_ends = token_byte_ends(source_tokenizer, s_ids, text)
            t_ends = token_byte_ends(target_tokenizer, t_ids, text)
            if s_ends is None or t_ends is None:  # a normalizing tokenizer: byte positions mean nothing
                continue
            totals += np.bincount(np.asarray(t_ids), minlength=num_target_rows)[:num_target_rows]
            t_in, s_in = inside_pairs(s_ids, s_ends, t_ids, t_ends, carved)
            pair_keys.append(t_in.astype(np.int64) * num_source + s_in)
    keys = np.concatenate(pair_keys) if pair_keys else np.zeros(0, dtype=np.int64)
    unique, counts = np.unique(keys, return_counts=True)
    return CarvedUsage(totals, unique // num_source, unique % num_source, counts)


def usage_mixing(usage: CarvedUsage, config: CarvedUsageConfig):
    """Per moved target row: its share `p` and the weights of the source words it mixes in (CSR over `rows`)."""
    rows, first = np.unique(usage.targets, return_index=True)
    inside = np.add.reduceat(usage.counts, first) if len(rows) else np.zeros(0, dtype=np.int64)
    keep = inside >= config.min_occurrences
    share = np.minimum(inside / np.maximum(usage.totals[rows], 1), config.max_share)
    indptr = np.concatenate([first, [len(usage.targets)]])
    weights = usage.counts / np.repeat(inside, np.diff(indptr)).astype(np.float64) if len(rows) else usage.counts
    return rows, share, indptr, weights, keep


@torch.no_grad()
def carved_usage_rows(
    model,
    source_model,
    source_tokenizer,
    target_tokenizer,
    texts: Sequence[str],
    shared_rows: Optional[np.ndarray] = None,
    config: Optional[CarvedUsageConfig] = None,
    progress: Optional[Callable[[str], None]] = None,
) -> CarvedUsageReport:
    """Mix into each target row the source rows of the carved words it stands for in `texts` (module docstring).

    Args:
        model: the swapped model (its rows are changed in place).
        source_model: the model before the swap (its rows are read).
        source_tokenizer / target_tokenizer: the two tokenizers.
        texts: the corpus the usage is counted on (the alignment corpus: text the user has).
        shared_rows (`np.ndarray` of bool, *optional*): target rows the swap copied from a source row with the same
            bytes, only to report how many of the moved rows were shared.
        config (`CarvedUsageConfig`, *optional*): defaults above.
        progress (`Callable[[str], None]`, *optional*): called with a line of progress.
    """
    config = config or CarvedUsageConfig()
    started = time.perf_counter()
    matrices = [(model.get_input_embeddings().weight, source_model.get_input_embeddings().weight)]
    out_new, out_old = model.get_output_embeddings(), source_model.get_output_embeddings()
    if out_new is not None and out_new.weight is not matrices[0][0]:
        if out_old is None:
            raise CarvedUsageError("The swapped model has its own output rows but the source model has none.")
        matrices.append((out_new.weight, out_old.weight))
    usage = count_carved_usage(source_tokenizer, target_tokenizer, texts, matrices[0][0].shape[0], config.batch_size)
    rows, share, indptr, weights, keep = usage_mixing(usage, config)
    moved = rows[keep]
    if progress:
        progress(f"carved usage: {len(moved)} target rows stand for carved words in {len(texts)} texts")
    for new, old in matrices:
        for k in np.flatnonzero(keep):
            part = slice(indptr[k], indptr[k + 1])
            sources = torch.as_tensor(usage.sources[part], device=old.device)
            w = torch.as_tensor(weights[part], dtype=torch.float32, device=old.device)
            mixed = (w[:, None] * old.index_select(0, sources).float()).sum(0)
            row = int(rows[k])
            new[row] = ((1.0 - share[k]) * new[row].float() + share[k] * mixed.to(new.device)).to(new.dtype)
        if not torch.isfinite(new).all():
            raise CarvedUsageError("Mixing the carved words' rows produced non-finite values; nothing was saved.")
    shared = int(shared_rows[moved].sum()) if shared_rows is not None and len(moved) else 0
    return CarvedUsageReport(
        rows_moved=int(len(moved)),
        shared_rows_moved=shared,
        occurrences=int(sum(usage.counts[indptr[k] : indptr[k + 1]].sum() for k in np.flatnonzero(keep))),
        mean_share=float(share[keep].mean()) if keep.any() else 0.0,
        words_used=int(len(np.unique(usage.sources))),
        seconds=round(time.perf_counter() - started, 1),
    )
