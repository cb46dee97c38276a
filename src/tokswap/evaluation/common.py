"""What every evaluation shares: the model's device, input limits and vocabulary, the prefix token rule, batch
encoding, and the standard error of a mean."""

from __future__ import annotations

import inspect
import math
from typing import List, Optional, Sequence

import numpy as np
import torch

from tokswap.errors import TokswapError

LN2 = math.log(2.0)


# Upper bound on the number of logits (batch x positions x vocabulary) held at once: 2**28
# float32 values is 1 GiB. Batches are shrunk below `batch_size` when a big vocabulary
# (Qwen: 151k, Gemma: 262k) times long windows would exceed it.
DEFAULT_MAX_LOGITS = 1 << 28


class EvaluationError(TokswapError):
    """Raised when an evaluation cannot run as asked (missing data, tokenizer/model mismatch...)."""


def _model_device(model) -> torch.device:
    try:
        return next(model.parameters()).device
    except (StopIteration, AttributeError):
        return torch.device("cpu")


def _forward_params(model) -> set:
    """Names of keyword arguments the model's forward accepts explicitly."""
    try:
        return set(inspect.signature(model.forward).parameters)
    except (TypeError, ValueError):
        return set()


def _model_max_length(model, requested: int) -> int:
    config = getattr(model, "config", None)
    limit = getattr(config, "max_position_embeddings", None) if config is not None else None
    if isinstance(limit, int) and limit > 0:
        return min(requested, limit)
    return requested


def _output_vocab_size(model) -> Optional[int]:
    """Rows of the output head (can exceed `len(tokenizer)` when the vocabulary is padded)."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    weight = getattr(head, "weight", None)
    if weight is not None:
        return int(weight.shape[0])
    config = getattr(model, "config", None)
    return getattr(config, "vocab_size", None)


def _check_ids_fit(model, max_id: int, tokenizer) -> None:
    vocab = _output_vocab_size(model)
    if vocab is not None and max_id >= vocab:
        raise EvaluationError(
            f"The tokenizer produced token id {max_id}, but the model's output layer has only {vocab} rows: "
            f"this tokenizer ({len(tokenizer)} tokens) does not belong to this model. Pass the tokenizer the "
            "model was swapped to (the one saved next to it)."
        )


def _tokenizer_adds_bos(tokenizer) -> bool:
    """True when `tokenizer(text)` itself starts with BOS (Llama-3, Gemma): the model expects it."""
    bos = getattr(tokenizer, "bos_token_id", None)
    if bos is None:
        return False
    try:
        ids = tokenizer("a", add_special_tokens=True)["input_ids"]
    except Exception:  # noqa: BLE001 - exotic tokenizers: assume no automatic BOS
        return False
    return len(ids) > 0 and ids[0] == bos


def default_prefix_token_id(tokenizer) -> int:
    """The token that stands before every document when all of its tokens are scored.

    Like lm-evaluation-harness: the tokenizer's BOS token if it defines one, else its EOS token
    (for GPT-2-style tokenizers EOS doubles as the document separator the model was trained on).

    Raises:
        EvaluationError: if the tokenizer has neither.
    """
    for attr in ("bos_token_id", "eos_token_id"):
        value = getattr(tokenizer, attr, None)
        if isinstance(value, (list, tuple)):
            value = value[0] if value else None
        if value is not None:
            return int(value)
    raise EvaluationError(
        "The tokenizer has neither a BOS nor an EOS token, so the first token of a text cannot be "
        "scored. Pass `prefix_token_id=` (the id of the token your model saw at document starts)."
    )


def _encode_many(tokenizer, texts: Sequence[str], chunk: int = 256) -> List[List[int]]:
    """Tokenize without special tokens, in chunks (fast tokenizers parallelize inside a batch)."""
    out: List[List[int]] = []
    for start in range(0, len(texts), chunk):
        batch = list(texts[start : start + chunk])
        encoded = tokenizer(batch, add_special_tokens=False, verbose=False)["input_ids"]
        out.extend(list(ids) for ids in encoded)
    return out


def _mean_stderr(values: Sequence[float]) -> float:
    """Standard error of the mean with the sample standard deviation (the harness's `mean_stderr`)."""
    n = len(values)
    if n < 2:
        return float("nan")
    arr = np.asarray(values, dtype=np.float64)
    return float(arr.std(ddof=1) / math.sqrt(n))
