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
        transfer (`bool`): also correct the rows of new tokens the text lacks, by what the fit did to the others.
        transfer_holdout_every (`int`): every n-th fitted row is held out to choose (or refuse) the correction.
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
    transfer: bool = field(
        default=False,
        metadata={
            "help": "Also move the output rows of new tokens the text lacks, by a ridge map from a fitted row's init "
            "to its change learned on the fitted rows; kept only if it raises the likelihood of fitted tokens held "
            "out of the map."
        },
    )
    transfer_holdout_every: int = field(
        default=5, metadata={"help": "Every n-th fitted row is held out of the map to choose its ridge."}
    )

    def __post_init__(self):
        names = ("window_tokens", "max_positions", "min_occurrences", "epochs", "batch_positions")
        for name in names + ("transfer_holdout_every",):
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
    rows_transferred: int = 0
    transfer_nll_before: Optional[float] = None
    transfer_nll_after: Optional[float] = None
    transfer_ridge: Optional[float] = None


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


RIDGES = (0.01, 0.1, 1.0, 10.0)


def _ridge_map(init: torch.Tensor, change: torch.Tensor, ridge: float) -> torch.Tensor:
    """Least squares from [init row, 1] to the row's change, the weights (not the offset) penalized by `ridge` x the
    mean squared feature, so the penalty does not depend on the rows' scale."""
    features = torch.cat([init, torch.ones(len(init), 1)], 1).double()
    gram = features.T @ features
    size = init.shape[1]
    scale = float(gram.diagonal()[:size].mean())
    gram[range(size), range(size)] += ridge * (scale if scale > 0 else 1.0)  # all-zero inits: only the offset
    return torch.linalg.solve(gram, features.T @ change.double()).float()


def _mapped(init: torch.Tensor, mapping: torch.Tensor) -> torch.Tensor:
    return init + torch.cat([init, torch.ones(len(init), 1)], 1) @ mapping


def _choose_ridge(positions: _Positions, weight, bias, free, init, fitted, config: OutputRowFitConfig):
    """(nats per position with every n-th fitted row back at its init, with it moved by the map learned on the
    others at the best ridge, that ridge or None when no ridge beats the init). Every position counts: a row raised
    too far costs wherever its token does not come next."""
    held = torch.arange(len(free)) % config.transfer_holdout_every == 0
    if held.all() or not held.any():
        return None, None, None
    trial = weight.float().clone()
    trial[free[~held]] = fitted[~held]
    check = _RowFit(positions, trial, bias, free[held])
    everywhere = torch.arange(len(positions.targets)).split(8192)

    def nll(rows: torch.Tensor) -> float:
        with torch.no_grad():
            return sum(float(check.loss(rows, part)) * len(part) for part in everywhere) / len(positions.targets)

    before = nll(init[held])
    best = (before, None)
    for ridge in RIDGES:
        after = nll(_mapped(init[held], _ridge_map(init[~held], fitted[~held] - init[~held], ridge)))
        if after < best[0]:
            best = (after, ridge)
    return before, best[0], best[1]


def _transfer(
    head, positions: _Positions, candidates, free, init, fitted, config: OutputRowFitConfig, progress
) -> dict:
    """Move the rows of the candidates the fit could not reach by the map from init to change learned on the fitted
    rows, if a held-out check keeps it; the report's transfer fields."""
    weight = head.weight.detach()
    if progress:
        progress(f"output-row fit: checking the transfer on {len(free) // config.transfer_holdout_every} held-out rows")
    before, after, ridge = _choose_ridge(positions, weight, getattr(head, "bias", None), free, init, fitted, config)
    rest = candidates[~torch.isin(candidates, free)]
    if progress and before is not None:
        verdict = f"kept (ridge {ridge:g})" if ridge is not None else "refused"
        progress(f"output-row fit: transfer {verdict}; held-out rows {before:.5f} -> {after:.5f} nats per position")
    if ridge is None or not len(rest):
        return {"transfer_nll_before": before, "transfer_nll_after": after}
    moved = _mapped(weight[rest].float(), _ridge_map(init, fitted - init, ridge))
    if not torch.isfinite(moved).all():
        raise OutputRowFitError("The transferred output rows are not finite; nothing was changed.")
    with torch.no_grad():
        head.weight[rest] = moved.to(head.weight.dtype)
    return {
        "rows_transferred": len(rest),
        "transfer_nll_before": round(before, 5),
        "transfer_nll_after": round(after, 5),
        "transfer_ridge": ridge,
    }


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
    init = weight[free].float()  # a copy: the fitted rows are written over `weight` below
    before, (after, epoch, fitted) = _optimize(fit, init, config, progress)
    if not torch.isfinite(fitted).all():
        raise OutputRowFitError("The fitted output rows are not finite; nothing was changed.")
    with torch.no_grad():
        head.weight[free] = fitted.to(head.weight.dtype)
    transferred = {}
    if config.transfer and epoch:
        transferred = _transfer(head, positions, candidates, free, init, fitted, config, progress)
    return OutputRowFitReport(
        rows_fitted=len(free) if epoch else 0,
        train_positions=int((~positions.heldout).sum()),
        heldout_positions=int(positions.heldout.sum()),
        heldout_nll_before=round(before, 5),
        heldout_nll_after=round(after, 5),
        best_epoch=epoch,
        seconds=round(time.perf_counter() - started, 1),
        **transferred,
    )
