"""Output rows of new words started from their first piece's row, then shifted by what the later pieces cost.

The original model predicts " whipping" as " wh" then "ipping": log p(word | text) = log p(" wh" | text) +
log p("ipping" | text, " wh"). The first term is where the context speaks; the second hardly depends on it. A pieces
mean blends " wh"'s output row with "ipping"'s, so a context that makes " wh" likely makes the new word far less so:
the swapped model under-predicts new words exactly where they belong.

Here each new word's output row starts as the original model's output row of its first piece, and is then moved, by
the smallest change, so that after a few generic prefixes the swapped model's log-probability of the word equals the
original's log-probability of the first piece there plus that of the later pieces after the first (read once, after
the BOS token). Input rows are left alone: a model with tied embeddings is untied first.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, List, Optional, Tuple

import torch

from tokswap.alignment import TokenAlignment
from tokswap.errors import TokswapError
from tokswap.new_word_fit import NewWord, NewWordFitConfig, _prefix_ids, new_words, untie_embeddings


class LeadingPieceError(TokswapError):
    """Raised for a configuration or a model the leading-piece output rows cannot be built with."""


@dataclass
class LeadingPieceConfig:
    """Configuration of [`leading_piece_output_rows`].

    Parameters:
        prefixes (`tuple[str, ...]`): texts after which the new words' log-probabilities are matched.
        ridge (`float`): how hard the shift is kept small, relative to the mean squared prefix state.
        word_pattern (`str`): a regular expression a new token's text must match in full.
        max_pieces (`int`): new words of 2 to this many source pieces are moved.
        batch_size (`int`): words per forward pass of the original model.
    """

    prefixes: Tuple[str, ...] = field(
        default=(
            "The",
            "I have a",
            "This is the",
            "You can",
            "It was a",
            "We need to",
            "Put the",
            "How to",
            "She said the",
            "There is no",
            "Use a",
            "They will",
        ),  # fmt: skip
        metadata={"help": "Texts after which each new word's log-probability is matched."},
    )
    ridge: float = field(default=0.1, metadata={"help": "Penalty on the shift, relative to the mean squared state."})
    word_pattern: str = field(
        default=r" [^\W\d_]{2,}", metadata={"help": "Regular expression a new token's text must match in full."}
    )
    max_pieces: int = field(default=6, metadata={"help": "Move new words of 2 to this many source pieces."})
    batch_size: int = field(default=1024, metadata={"help": "Words per forward pass of the original model."})

    def __post_init__(self):
        self.prefixes = tuple(self.prefixes)
        if not self.prefixes or any(not p or p != p.rstrip() for p in self.prefixes):
            raise LeadingPieceError("prefixes must be non-empty texts without trailing whitespace.")
        if not self.ridge > 0:
            raise LeadingPieceError(f"ridge must be positive (got {self.ridge}).")
        if self.max_pieces < 2 or self.batch_size < 1:
            raise LeadingPieceError("max_pieces must be >= 2 and batch_size >= 1.")


@dataclass
class LeadingPieceReport:
    """What [`leading_piece_output_rows`] did: words moved, the mean gap (original minus swapped log-probability at
    the prefixes, nats) with the pieces-mean rows, with the first-piece rows, and after the shift; seconds."""

    num_words: int
    gap_before: float
    gap_first_piece: float
    gap_after: float
    seconds: float
    untied: bool


@torch.no_grad()
def later_pieces_logprob(original, source_tokenizer, words: List[NewWord], batch_size: int = 1024) -> torch.Tensor:
    """Per word, log p(pieces 2..k | BOS, piece 1) under the original model (0 for a one-piece word)."""
    prefix = _prefix_ids(source_tokenizer)
    out = torch.zeros(len(words))
    order = sorted(range(len(words)), key=lambda i: len(words[i].pieces))  # similar lengths batch together
    device = original.get_input_embeddings().weight.device
    for start in range(0, len(order), batch_size):
        index = order[start : start + batch_size]
        pieces = [words[i].pieces for i in index]
        longest = max(len(p) for p in pieces)
        ids = torch.tensor([prefix + p + [p[-1]] * (longest - len(p)) for p in pieces], device=device)
        first = len(prefix)  # the position of piece 1; it predicts piece 2
        logprobs = torch.log_softmax(original(input_ids=ids).logits[:, first:-1].float(), -1)
        picked = logprobs.gather(2, ids[:, first + 1 :, None])[:, :, 0].cpu()
        valid = torch.arange(longest - 1)[None, :] < torch.tensor([len(p) - 1 for p in pieces])[:, None]
        out[index] = (picked * valid).sum(1)
    return out


@torch.no_grad()
def _last_states(model, tokenizer, prefixes) -> torch.Tensor:
    """The model's last hidden state (the output layer's input) at the end of each prefix."""
    device = model.get_input_embeddings().weight.device
    states = []
    for text in prefixes:
        ids = torch.tensor([_prefix_ids(tokenizer) + tokenizer(text, add_special_tokens=False)["input_ids"]])
        states.append(model.base_model(input_ids=ids.to(device)).last_hidden_state[0, -1].float().cpu())
    return torch.stack(states)


@torch.no_grad()
def _first_piece_logprobs(original, source_tokenizer, prefixes, first: torch.Tensor) -> torch.Tensor:
    """[prefix, word]: the original model's log-probability of each word's first piece after each prefix."""
    device = original.get_input_embeddings().weight.device
    rows = []
    for text in prefixes:
        ids = _prefix_ids(source_tokenizer) + source_tokenizer(text, add_special_tokens=False)["input_ids"]
        logits = original(input_ids=torch.tensor([ids], device=device)).logits[0, -1].float().cpu()
        rows.append(torch.log_softmax(logits, -1)[first])
    return torch.stack(rows)


def _gap(head_weight: torch.Tensor, states: torch.Tensor, rows: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """[prefix, word]: target minus the swapped model's log-probability of each word after each prefix."""
    weight = head_weight.float()
    normalizer = torch.logsumexp(states @ weight.T, -1)
    return target - (states @ weight[rows].T - normalizer[:, None])


def leading_piece_output_rows(
    model,
    tokenizer,
    original,
    source_tokenizer,
    alignment: TokenAlignment,
    config: Optional[LeadingPieceConfig] = None,
    progress: Optional[Callable[[str], None]] = None,
) -> LeadingPieceReport:
    """Start each new word's output row from its first piece's and shift it by what its later pieces cost.

    Args:
        model: the swapped causal LM (untied first if tied; only output rows of new words change).
        tokenizer: its (target) tokenizer.
        original: the model before the swap (the source model), with `source_tokenizer`.
        source_tokenizer: the source tokenizer.
        alignment: the swap's [`TokenAlignment`] (which rows are new).
        config: a [`LeadingPieceConfig`] (defaults if None).
        progress: called with a line of progress now and then.

    Returns:
        a [`LeadingPieceReport`].
    """
    config = config or LeadingPieceConfig()
    started = time.perf_counter()
    selection = NewWordFitConfig(word_pattern=config.word_pattern, min_pieces=2, max_pieces=config.max_pieces)
    words = new_words(alignment, source_tokenizer, tokenizer, selection)
    if not words:
        raise LeadingPieceError("No new word to move: the target vocabulary adds no word the source splits.")
    rest = later_pieces_logprob(original, source_tokenizer, words, config.batch_size)
    if progress:
        progress(f"leading-piece output rows: read the later pieces of {len(words)} new words")
    first = torch.tensor([w.pieces[0] for w in words])
    target = _first_piece_logprobs(original, source_tokenizer, config.prefixes, first) + rest[None, :]
    untied = untie_embeddings(model)
    head = model.get_output_embeddings()
    rows = torch.tensor([w.row for w in words])
    states = _last_states(model, tokenizer, config.prefixes)
    gap_before = float(_gap(head.weight.detach(), states, rows, target).mean())
    with torch.no_grad():
        head.weight[rows] = original.get_output_embeddings().weight.detach()[first].to(head.weight)
        gap_first = _gap(head.weight.detach(), states, rows, target)
        gram = (states @ states.T).double()
        gram += config.ridge * float(gram.diagonal().mean()) * torch.eye(len(states), dtype=torch.double)
        shift = (gap_first.T.double() @ torch.linalg.inv(gram) @ states.double()).float()
        if not torch.isfinite(shift).all():
            raise LeadingPieceError("The shift of the new words' output rows is not finite; the rows were not moved.")
        head.weight[rows] += shift.to(head.weight)
    gap_after = float(_gap(head.weight.detach(), states, rows, target).mean())
    return LeadingPieceReport(
        num_words=len(words),
        gap_before=round(gap_before, 4),
        gap_first_piece=round(float(gap_first.mean()), 4),
        gap_after=round(gap_after, 4),
        seconds=round(time.perf_counter() - started, 1),
        untied=untied,
    )
