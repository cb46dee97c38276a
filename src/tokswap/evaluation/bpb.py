"""Bits per byte: a model's total negative log-likelihood of a text, in bits, over the text's UTF-8 bytes (the
number that compares models across tokenizers)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Iterable, List, Optional, Sequence, Tuple, Union

import torch
from tqdm.auto import tqdm

from tokswap.evaluation.common import (
    DEFAULT_MAX_LOGITS,
    LN2,
    EvaluationError,
    _check_ids_fit,
    _encode_many,
    _forward_params,
    _model_device,
    _model_max_length,
    _output_vocab_size,
    default_prefix_token_id,
)


@dataclass
class BitsPerByte:
    """Result of `bits_per_byte`.

    Attributes:
        bits_per_byte: `nats / (ln 2 * num_bytes)`.
        nats: total negative log-likelihood of all texts, natural log.
        num_bytes: UTF-8 bytes of the texts (the denominator; independent of the tokenizer).
        num_tokens: tokens scored (text tokens, excluding the prefix token).
    """

    bits_per_byte: float
    nats: float
    num_bytes: int
    num_tokens: int

    @property
    def bits_per_token(self) -> float:
        return self.nats / (LN2 * self.num_tokens) if self.num_tokens else float("nan")

    @property
    def token_perplexity(self) -> float:
        return math.exp(self.nats / self.num_tokens) if self.num_tokens else float("nan")

    def to_dict(self) -> dict:
        out = asdict(self)
        out["bits_per_token"] = self.bits_per_token
        out["token_perplexity"] = self.token_perplexity
        return out


def _windows(num_tokens: int, max_length: int, stride: int) -> List[Tuple[int, int, int]]:
    """Split the scoring of `num_tokens` tokens into model windows.

    The sequence is `s = [prefix] + tokens` (length `num_tokens + 1`); target `s[j]` (j >= 1)
    is predicted from `s[:j]`. Each window is `(c, a, b)`: the model reads `s[c:b-1]` (at most
    `max_length` tokens) and the targets `s[a:b]` are counted; `a..b` tile `1..num_tokens+1`.
    """
    windows = []
    a = 1
    end = num_tokens + 1
    while a < end:
        b = min(end, a + stride)
        c = max(0, b - 1 - max_length)
        windows.append((c, a, b))
        a = b
    return windows


def _batches_by_budget(
    lengths: Sequence[int], order: Sequence[int], batch_size: int, vocab: int, max_logits: int
) -> Iterable[List[int]]:
    """Group indices (already sorted longest first) into batches under a logits-size budget."""
    batch: List[int] = []
    width = 0
    for idx in order:
        new_width = max(width, lengths[idx])
        if batch and (len(batch) >= batch_size or (len(batch) + 1) * new_width * vocab > max_logits):
            yield batch
            batch, new_width = [], lengths[idx]
        batch.append(idx)
        width = new_width
    if batch:
        yield batch


@torch.no_grad()
def bits_per_byte(
    model,
    tokenizer,
    texts: Union[str, Sequence[str]],
    batch_size: int = 8,
    max_length: int = 1024,
    stride: Optional[int] = None,
    progress: bool = True,
    prefix_token_id: Optional[int] = None,
    max_logits: int = DEFAULT_MAX_LOGITS,
) -> BitsPerByte:
    """Bits per UTF-8 byte of `texts` under `model` (comparable across tokenizers).

    Each text is scored on its own: `[prefix_token] + tokens(text)`, every text token counted
    (see `default_prefix_token_id`), summed negative log-likelihood in nats, divided by
    `ln 2 * bytes`. Texts longer than `max_length` tokens are scored in windows.

    Args:
        model: a causal LM (`model(input_ids, attention_mask=...)` returning `.logits`). Its output
            head may have more rows than the tokenizer has tokens (padded vocabularies are fine:
            the softmax runs over all rows).
        tokenizer: the tokenizer that goes with `model`.
        texts: one text or a list of texts; empty texts are skipped.
        batch_size: windows per forward pass (lowered automatically when the logits of a batch
            would exceed `max_logits` values).
        max_length: model inputs per window (clipped to `config.max_position_embeddings`).
        stride: new tokens scored per window. `None` = `max_length` (no overlap). Smaller values
            give each window `max_length - stride` tokens of already-scored context.
        progress: show a tqdm bar.
        prefix_token_id: the document-start token; default `default_prefix_token_id(tokenizer)`.
        max_logits: budget on batch x positions x vocabulary values held at once.

    Returns:
        `BitsPerByte(bits_per_byte, nats, num_bytes, num_tokens)`.
    """
    if isinstance(texts, str):
        texts = [texts]
    texts = [t for t in texts if t]
    if max_length < 2:
        raise EvaluationError(f"max_length must be at least 2, got {max_length}.")
    max_length = _model_max_length(model, max_length)
    stride = max_length if stride is None else int(stride)
    if not 1 <= stride <= max_length:
        raise EvaluationError(f"stride must be between 1 and max_length ({max_length}), got {stride}.")
    prefix = default_prefix_token_id(tokenizer) if prefix_token_id is None else int(prefix_token_id)
    num_bytes = sum(len(t.encode("utf-8")) for t in texts)
    if not texts:
        return BitsPerByte(float("nan"), 0.0, 0, 0)

    sequences = [[prefix] + ids for ids in _encode_many(tokenizer, texts)]
    max_id = max(max(seq) for seq in sequences)
    _check_ids_fit(model, max_id, tokenizer)

    # Every window of every text: (text index, c, a, b).
    jobs = [
        (text_idx, *window)
        for text_idx, seq in enumerate(sequences)
        for window in _windows(len(seq) - 1, max_length, stride)
    ]
    lengths = [b - 1 - c for _, c, _, b in jobs]
    order = sorted(range(len(jobs)), key=lambda i: -lengths[i])
    vocab = _output_vocab_size(model) or len(tokenizer)
    was_training = getattr(model, "training", False)
    model.eval()
    total_nats = 0.0
    num_tokens = 0
    bar = tqdm(
        total=sum(b - a for _, _, a, b in jobs), desc="bits per byte", unit="tok", disable=not progress, leave=False
    )
    try:
        for batch in _batches_by_budget(lengths, order, batch_size, vocab, max_logits):
            logits = _window_logits(model, [jobs[i] for i in batch], sequences, max(lengths[i] for i in batch), prefix)
            for row, i in enumerate(batch):
                total_nats += _window_nats(logits[row], jobs[i], sequences)
                num_tokens += jobs[i][3] - jobs[i][2]
            bar.update(sum(jobs[i][3] - jobs[i][2] for i in batch))
    finally:
        bar.close()
        if was_training:
            model.train()
    return BitsPerByte(total_nats / (LN2 * num_bytes), total_nats, num_bytes, num_tokens)


def _window_logits(model, windows, sequences, width: int, pad_id: int) -> torch.Tensor:
    """One forward pass over a batch of windows `(text index, c, a, b)`, right-padded to `width`."""
    input_ids = torch.full((len(windows), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(windows), width), dtype=torch.long)
    for row, (text_idx, c, _, b) in enumerate(windows):
        window = sequences[text_idx][c : b - 1]
        input_ids[row, : len(window)] = torch.tensor(window)
        attention[row, : len(window)] = 1
    device = _model_device(model)
    kwargs = {"attention_mask": attention.to(device)}
    if "use_cache" in _forward_params(model):
        kwargs["use_cache"] = False
    return model(input_ids.to(device), **kwargs).logits


def _window_nats(logits: torch.Tensor, window, sequences) -> float:
    """Summed negative log-likelihood (nats) of a window's counted targets `s[a:b]`; position p of the window
    predicts `s[c + p + 1]`."""
    text_idx, c, a, b = window
    rows = logits[a - 1 - c : b - 1 - c].float()
    targets = torch.tensor(sequences[text_idx][a:b], device=rows.device)
    return float(torch.nn.functional.cross_entropy(rows, targets, reduction="sum"))
