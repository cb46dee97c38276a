"""Rehearsal of the words the swap carved: the pieces of a word the original model expects, read after the same text.

A swap drops the rows of the original's whole words that the new tokenizer spells in pieces (SmolLM2's
" evaporation" is Qwen2.5's " ev" + "aporation"). At a shared byte boundary the self-distillation prediction term
teaches the first piece its share of the original's mass, but the rest of a word is taught only where the text at
hand holds it, and the words a task needs are rare in any text a user has. Rehearsal takes, at the boundaries of a
batch, the carved word the original model expects most there (the text's own next word excluded: the prediction
term already reads it), reads its pieces after the same context, and trains each piece after the first against
the original's distribution at the boundary, kept to its tokens spelled with the pieces read so far (the
continuation targets of the prediction term). No text is written and the teacher runs no extra forward pass: its
distribution at the boundary is already there; the student reads each rehearsed word once more after `context`
tokens of its context. This module picks the words and builds those sequences; the loss on them is
`tokswap.self_distillation.rehearsal_kl`.

```python
from tokswap.self_distillation import SelfDistillationConfig

config = SelfDistillationConfig(output_dir="run", rehearsal_weight=1.0, rehearsal_words=4)
```
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Dict, List, Tuple

import torch

from tokswap.align.vocab import token_bytes

# a space, then letters only: " evaporation"; not "\n   ", "}{\\", or pieces inside a word ("mathbf", "chle")
_WHOLE_WORD = re.compile(r" [^\W\d_]+")


@dataclass
class Rehearsals:
    """The rehearsed words of one batch, as a batch of short student sequences.

    Attributes:
        input_ids / attention_mask (`[n, L]`): bos, up to `context` tokens before the boundary, the word's pieces
            but the last; right-padded.
        rows (`LongTensor`, `[p]`): flat positions (into `[n * L]`) that predict a piece after the first.
        boundary (`LongTensor`, `[p]`): which boundary (row of the teacher's log-probabilities) each position
            rehearses.
        continuations (`list`): per position, (original tokens spelled with the pieces read so far, the piece
            each continues with), from `LeadingPieceGroups.continuations`.
        words (`LongTensor`, `[n]`): the original's token rehearsed in each sequence.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    rows: torch.Tensor
    boundary: torch.Tensor
    continuations: List[Tuple[torch.Tensor, torch.Tensor]]
    words: torch.Tensor


def pick_words(
    teacher_logp: torch.Tensor,
    candidates: torch.Tensor,
    text_next: torch.Tensor,
    windows: torch.Tensor,
    count: int,
    min_prob: float,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """At each boundary the candidate the teacher rates highest other than the text's next token; of those, in each
    window, the `count` most probable with probability at least `min_prob` (per window, so that gradient
    accumulation picks what one large batch would).

    Args:
        teacher_logp (`[m, V]`): the teacher's next-token log-probabilities at the boundaries.
        candidates (`LongTensor`): original tokens the new vocabulary spells in two or more pieces.
        text_next (`LongTensor`, `[m]`): the original's next token in the text at each boundary.
        windows (`LongTensor`, `[m]`): the window (batch row) of each boundary.

    Returns:
        (boundary indices, original token ids), window by window, most probable first.
    """
    device = teacher_logp.device
    empty = torch.zeros(0, dtype=torch.long, device=device)
    if count <= 0 or teacher_logp.shape[0] == 0 or candidates.numel() == 0:
        return empty, empty
    candidates = candidates.to(device)
    scores = teacher_logp.index_select(1, candidates)
    scores = scores.masked_fill(candidates[None, :] == text_next.to(device)[:, None], float("-inf"))
    best, slot = scores.max(dim=1)
    chosen = []
    for window in torch.unique(windows).tolist():
        at = torch.nonzero((windows.to(device) == window) & (best >= math.log(min_prob))).flatten()
        chosen.append(at[torch.argsort(best[at], descending=True, stable=True)[:count]])
    chosen = torch.cat(chosen) if chosen else empty
    return chosen, candidates[slot[chosen]]


def whole_words(tokens: List[int], tokenizer) -> List[int]:
    """The tokens of `tokens` (ids of `tokenizer`, the original's) that spell a whole word: a space, then letters.
    General text makes the original expect line breaks with indentation, LaTeX and pieces inside words as often as
    words; this keeps rehearsal to the words."""
    spelled = token_bytes(tokenizer)
    kept = []
    for token in tokens:
        try:
            text = spelled[token].decode("utf-8")
        except (IndexError, UnicodeDecodeError):
            continue
        if _WHOLE_WORD.fullmatch(text):
            kept.append(token)
    return kept


def build_rehearsals(
    input_ids: torch.Tensor,
    student_rows: torch.Tensor,
    boundaries: torch.Tensor,
    words: torch.Tensor,
    spellings: Dict[int, Tuple[int, ...]],
    continuations: dict,
    context: int,
    pad_id: int,
) -> Rehearsals:
    """Short student sequences that read each picked word's pieces after its boundary's context.

    Args:
        input_ids (`[B, T]`): the batch's student tokens, bos first.
        student_rows (`LongTensor`, `[m]`): flat student position (into `[B * T]`) that predicts each boundary's
            next text.
        boundaries / words: from [`pick_words`].
        spellings: original token -> its new-vocabulary pieces (two or more).
        continuations: `LeadingPieceGroups.continuations`.
        context (`int`): tokens of context kept before the boundary (the bos comes first in any case).
    """
    length = input_ids.shape[1]
    sequences, rows, boundary, targets = [], [], [], []
    for i, (b_index, word) in enumerate(zip(boundaries.tolist(), words.tolist())):
        flat = int(student_rows[b_index])
        row, t = divmod(flat, length)
        start = max(1, t + 1 - context)
        pieces = list(spellings[word])
        sequence = [int(input_ids[row, 0])] + input_ids[row, start : t + 1].tolist() + pieces[:-1]
        first = len(sequence) - len(pieces) + 1  # position of the first piece
        for j in range(1, len(pieces)):
            rows.append((i, first + j - 1))
            boundary.append(b_index)
            targets.append(continuations[tuple(pieces[:j])])
        sequences.append(sequence)
    width = max((len(s) for s in sequences), default=0)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for i, sequence in enumerate(sequences):
        ids[i, : len(sequence)] = torch.tensor(sequence)
        mask[i, : len(sequence)] = 1
    flat_rows = torch.tensor([i * width + p for i, p in rows], dtype=torch.long)
    return Rehearsals(ids, mask, flat_rows, torch.tensor(boundary, dtype=torch.long), targets, words.cpu())


__all__ = ["Rehearsals", "build_rehearsals", "pick_words", "whole_words"]
