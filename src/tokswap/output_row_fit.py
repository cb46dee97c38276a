"""Output rows of new tokens fitted by likelihood on text, with the rest of the model frozen.

Right after the swap a new token's output row is its init (e.g. the scaled mean of its pieces' rows), and a row
decides how likely the model predicts the token. A pieces mean predicts a whole word far too rarely: at a position
where " whipping" comes next, the original model rates its first piece high and the later pieces low, and their mean
sits in between. Training repairs only the rows of the words its few batches happen to hold.

Here, with every other weight frozen, the model's last hidden states over a text are computed once; the output rows
of the new tokens that occur in it are then fitted by maximum likelihood of the text's next tokens, under the exact
softmax over the whole vocabulary (every position counts, so raising a row costs wherever its token does not come
next). The rest of the vocabulary's share of each softmax is computed once, so a step costs only the fitted rows.
Windows of the text are held out, and the rows of the epoch with the best held-out likelihood are kept. A model with
tied embeddings is untied first: the input rows keep their init.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable, List, Optional, Sequence

import torch

from tokswap.alignment import TokenAlignment
from tokswap.errors import TokswapError
from tokswap.init_methods import padding_row_mask, shared_row_mask
from tokswap.new_word_fit import untie_embeddings


class OutputRowFitError(TokswapError):
    """Raised for a configuration, a text or a model the fit cannot run with."""


@dataclass
class OutputRowFitConfig:
    """Configuration of [`fit_output_rows`].

    Parameters:
        window_tokens (`int`): the text is read in windows of this many tokens (each after a BOS/EOS token).
        max_positions (`int`): read windows holding a candidate token until this many positions are collected.
        min_occurrences (`int`): fit a candidate row when its token comes next at least this many times.
        epochs (`int`): passes over the training positions.
        batch_positions (`int`): positions per Adam step.
        learning_rate (`float`): Adam's step, relative to the RMS entry of the output matrix.
        heldout_every (`int`): every n-th window is held out to choose the epoch.
        seed (`int`): order of the positions.
    """

    window_tokens: int = field(default=128, metadata={"help": "Tokens per window the text is read in."})
    max_positions: int = field(default=100_000, metadata={"help": "Positions collected (windows with a candidate)."})
    min_occurrences: int = field(default=3, metadata={"help": "Fit a row when its token comes next this many times."})
    epochs: int = field(default=4, metadata={"help": "Passes over the training positions."})
    batch_positions: int = field(default=2048, metadata={"help": "Positions per Adam step."})
    learning_rate: float = field(
        default=0.1, metadata={"help": "Adam step size, relative to the RMS entry of the output matrix."}
    )
    heldout_every: int = field(default=10, metadata={"help": "Every n-th window is held out to choose the epoch."})
    seed: int = field(default=0, metadata={"help": "Seed of the order of positions."})

    def __post_init__(self):
        for name in ("window_tokens", "max_positions", "min_occurrences", "epochs", "batch_positions"):
            if getattr(self, name) < 1:
                raise OutputRowFitError(f"OutputRowFitConfig.{name} must be at least 1, not {getattr(self, name)}.")
        if self.heldout_every < 2:
            raise OutputRowFitError(f"OutputRowFitConfig.heldout_every must be at least 2, not {self.heldout_every}.")
        if not (self.learning_rate > 0 and math.isfinite(self.learning_rate)):
            raise OutputRowFitError(f"OutputRowFitConfig.learning_rate must be positive, not {self.learning_rate}.")


@dataclass
class OutputRowFitReport:
    """What [`fit_output_rows`] did: rows fitted, positions read, held-out loss (nats per position) before and after."""

    rows_fitted: int
    train_positions: int
    heldout_positions: int
    heldout_nll_before: float
    heldout_nll_after: float
    best_epoch: int
    seconds: float


def initialized_rows(alignment: TokenAlignment) -> List[int]:
    """The target rows the swap initialized: neither a token both vocabularies share nor padding."""
    mask = ~shared_row_mask(alignment) & ~padding_row_mask(alignment)
    return mask.nonzero()[0].tolist()


@dataclass
class _Positions:
    """Last hidden states and next tokens of the collected positions, and which are held out."""

    hidden: torch.Tensor
    targets: torch.Tensor
    heldout: torch.Tensor


def _windows(tokenizer, texts: Sequence[str], candidates: torch.Tensor, config: OutputRowFitConfig) -> List[List[int]]:
    """Windows (prefix token first) whose next tokens hold a candidate, until `max_positions` positions."""
    prefix = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
    wanted = set(candidates.tolist())
    windows, positions = [], 0
    for text in texts:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        for start in range(0, len(ids), config.window_tokens):
            window = ids[start : start + config.window_tokens]
            if wanted.isdisjoint(window):
                continue
            windows.append(([prefix] if prefix is not None else []) + window)
            positions += len(windows[-1]) - 1
            if positions >= config.max_positions:
                return windows
    return windows


@torch.no_grad()
def _read(model, windows: List[List[int]], config: OutputRowFitConfig, progress) -> _Positions:
    """The decoder's last hidden state at every position of every window (the lm_head's input), in batches."""
    hidden, targets, heldout = [], [], []
    device = model.get_input_embeddings().weight.device
    for first in range(0, len(windows), 8):
        batch = windows[first : first + 8]
        longest = max(len(w) for w in batch)
        # right padding: a causal model's earlier positions never see it, and its positions are dropped
        ids = torch.tensor([w + [w[-1]] * (longest - len(w)) for w in batch], device=device)
        states = model.base_model(input_ids=ids).last_hidden_state.float()
        for row, window in enumerate(batch):
            hidden.append(states[row, : len(window) - 1].cpu())
            targets.append(torch.tensor(window[1:]))
            held = (first + row) % config.heldout_every == config.heldout_every - 1
            heldout.append(torch.full((len(window) - 1,), held))
        if progress and (first // 8) % 25 == 0:
            progress(f"output-row fit: read {first + len(batch)}/{len(windows)} windows")
    return _Positions(torch.cat(hidden), torch.cat(targets), torch.cat(heldout))


def _check_linear_head(model, window: List[int]) -> None:
    """The fit assumes logits = hidden @ W.T (+ b); a model that caps or scales its logits is refused."""
    head = model.get_output_embeddings()
    ids = torch.tensor([window], device=head.weight.device)
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0].float()
        read = head(model.base_model(input_ids=ids).last_hidden_state)[0].float()
    if not torch.allclose(logits, read, atol=1e-3, rtol=1e-4):
        raise OutputRowFitError(
            "The model's logits are not its output layer applied to its last hidden state (soft-capping or "
            "scaling?); the output-row fit does not apply to it."
        )


def _frozen_log_normalizer(hidden, weight, bias, free: torch.Tensor, chunk: int = 2048) -> torch.Tensor:
    """Per position, log-sum-exp of the logits of every row that stays fixed."""
    out = torch.empty(len(hidden))
    for start in range(0, len(hidden), chunk):
        logits = hidden[start : start + chunk] @ weight.T
        if bias is not None:
            logits += bias
        logits[:, free] = -math.inf
        out[start : start + chunk] = torch.logsumexp(logits, -1)
    return out


class _RowFit:
    """The fitted rows' loss: mean negative log-likelihood of the next tokens, the fixed rows' share precomputed."""

    def __init__(self, positions: _Positions, weight, bias, free: torch.Tensor):
        self.positions, self.free = positions, free
        self.bias = None if bias is None else bias[free].float()
        self.fixed_normalizer = _frozen_log_normalizer(positions.hidden, weight.float(), bias, free)
        slot = torch.full((weight.shape[0],), -1, dtype=torch.long)
        slot[free] = torch.arange(len(free))
        self.slot = slot[positions.targets]  # the target's index among the fitted rows, or -1
        fixed = (positions.hidden * weight.float()[positions.targets]).sum(-1)
        self.fixed_target = fixed + (0 if bias is None else bias.float()[positions.targets])

    def loss(self, rows: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        logits = self.positions.hidden[index] @ rows.T
        if self.bias is not None:
            logits = logits + self.bias
        normalizer = torch.logaddexp(self.fixed_normalizer[index], torch.logsumexp(logits, -1))
        slot = self.slot[index]
        fitted = logits.gather(1, slot.clamp(min=0)[:, None])[:, 0]
        target = torch.where(slot >= 0, fitted, self.fixed_target[index])
        return (normalizer - target).mean()

    @torch.no_grad()
    def heldout_loss(self, rows: torch.Tensor, chunk: int = 8192) -> float:
        index = torch.nonzero(self.positions.heldout).flatten()
        total = sum(float(self.loss(rows, part)) * len(part) for part in index.split(chunk))
        return total / max(len(index), 1)


def _optimize(fit: _RowFit, start: torch.Tensor, config: OutputRowFitConfig, progress):
    """Adam over the training positions; the rows of the best held-out epoch (epoch 0: the init) and that epoch."""
    rows = start.clone().requires_grad_(True)
    rms = float(start.pow(2).mean().sqrt()) or 1.0
    optimizer = torch.optim.Adam([rows], lr=config.learning_rate * rms)
    train = torch.nonzero(~fit.positions.heldout).flatten()
    generator = torch.Generator().manual_seed(config.seed)
    best = (fit.heldout_loss(start), 0, start.clone())
    before = best[0]
    for epoch in range(1, config.epochs + 1):
        for index in train[torch.randperm(len(train), generator=generator)].split(config.batch_positions):
            loss = fit.loss(rows, index)
            if not torch.isfinite(loss):
                raise OutputRowFitError(f"The output-row fit's loss is not finite ({float(loss)}) at epoch {epoch}.")
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        heldout = fit.heldout_loss(rows.detach())
        if progress:
            progress(f"output-row fit: epoch {epoch}/{config.epochs}, held-out {heldout:.4f} nats (init {before:.4f})")
        if heldout < best[0]:
            best = (heldout, epoch, rows.detach().clone())
    return before, best


def fit_output_rows(
    model,
    tokenizer,
    texts: Sequence[str],
    rows: Sequence[int],
    config: Optional[OutputRowFitConfig] = None,
    progress: Optional[Callable[[str], None]] = None,
) -> OutputRowFitReport:
    """Fit the output rows among `rows` whose tokens occur in `texts`, by likelihood of the texts, all else frozen.

    Args:
        model: a swapped causal LM (its output layer is `get_output_embeddings()`); untied first if tied.
        tokenizer: its tokenizer.
        texts: text to fit on (e.g. the alignment corpus); only windows holding a candidate token are read.
        rows: candidate row ids, e.g. the rows the swap initialized (`initialized_rows(alignment)`).
        config: an [`OutputRowFitConfig`] (defaults if None).
        progress: called with a line of progress now and then.

    Returns:
        an [`OutputRowFitReport`]. The model's output rows are changed in place (only the fitted ones).
    """
    config = config or OutputRowFitConfig()
    started = time.perf_counter()
    candidates = torch.as_tensor(list(rows), dtype=torch.long)
    windows = _windows(tokenizer, texts, candidates, config) if len(candidates) else []
    if not windows:
        raise OutputRowFitError("No text window holds a candidate token: give text where the new tokens occur.")
    _check_linear_head(model, windows[0][:16])
    positions = _read(model, windows, config, progress)
    counts = torch.bincount(
        positions.targets[~positions.heldout], minlength=model.get_output_embeddings().weight.shape[0]
    )
    free = candidates[counts[candidates] >= config.min_occurrences]
    if not len(free) or not positions.heldout.any():
        raise OutputRowFitError(
            f"Too little text: {len(free)} candidate tokens occur {config.min_occurrences}+ times in "
            f"{len(positions.targets)} positions; give more text or lower min_occurrences."
        )
    untie_embeddings(model)
    head = model.get_output_embeddings()
    weight = head.weight.detach()
    fit = _RowFit(positions, weight, getattr(head, "bias", None), free)
    before, (after, epoch, fitted) = _optimize(fit, weight[free].float(), config, progress)
    if not torch.isfinite(fitted).all():
        raise OutputRowFitError("The fitted output rows are not finite; nothing was changed.")
    with torch.no_grad():
        head.weight[free] = fitted.to(head.weight.dtype)
    return OutputRowFitReport(
        rows_fitted=len(free) if epoch else 0,
        train_positions=int((~positions.heldout).sum()),
        heldout_positions=int(positions.heldout.sum()),
        heldout_nll_before=round(before, 5),
        heldout_nll_after=round(after, 5),
        best_epoch=epoch,
        seconds=round(time.perf_counter() - started, 1),
    )
