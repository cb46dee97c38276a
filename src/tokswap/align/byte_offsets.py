"""Where two tokenizations of one text agree: token boundaries at the same byte.

Self-distillation across a swap compares the original model (reading the text in the old tokens) with
the swapped model (reading it in the new tokens). The two can be compared wherever both tokenizations
end a token at the same byte of the text: up to such a boundary both models have read exactly the same
text, so they should assign it the same likelihood and be in the same hidden state. Those boundaries
cut the text into *chunks* (one or more tokens of each side).

Byte positions are computed from each token's own bytes (`tokswap.align.vocab.token_bytes`), never from
character offsets, so byte-level pieces of one character (CJK, emoji) and byte-fallback tokens
(`<0xE4>`) land exactly.

```python
from tokswap.align.byte_offsets import token_byte_ends, shared_boundaries

student_ends = token_byte_ends(student_tokenizer, student_ids, text)
teacher_ends = token_byte_ends(teacher_tokenizer, teacher_ids, text)
boundaries = shared_boundaries(student_ends, teacher_ends)      # byte positions both sides end a token at
```
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from tokswap.align.vocab import token_bytes

_METASPACE = "\u2581".encode("utf-8")


def _spelling(tokenizer) -> tuple:
    """(bytes of each token id as it appears in the text, their lengths with -1 for none), cached.

    SentencePiece-style vocabularies write spaces as `▁` inside tokens (`▁▁▁▁`, `▁world`), also in added
    tokens that `token_bytes` keeps verbatim: here every `▁` is the space it stands for.
    """
    cached = getattr(tokenizer, "_tokswap_spelling", None)
    if cached is None:
        pieces = list(token_bytes(tokenizer))
        if sum(1 for token in tokenizer.get_vocab() if token.startswith("\u2581")) >= 100:
            pieces = [None if b is None else b.replace(_METASPACE, b" ") for b in pieces]
        lengths = np.array([-1 if b is None else len(b) for b in pieces], dtype=np.int64)
        cached = (pieces, lengths)
        try:
            tokenizer._tokswap_spelling = cached
        except AttributeError:  # a tokenizer that refuses new attributes: recompute next time
            pass
    return cached


def token_byte_ends(tokenizer, ids, text: Optional[str] = None) -> Optional[np.ndarray]:
    """The byte offset in the text at which each token ends (cumulative token bytes).

    Args:
        tokenizer: the tokenizer that produced `ids`.
        ids: token ids of the text, without special tokens.
        text (`str`, *optional*): the text; when given, the tokens' bytes must spell it exactly (a
            prefix space the tokenizer adds on its own is allowed and skipped).

    Returns:
        `np.ndarray` of int64 (one end per token, non-decreasing), or None when the tokens do not
        spell the text (a normalizing tokenizer: lower-casing, NFKC...), where byte positions mean
        nothing.
    """
    ids = np.asarray(ids, dtype=np.int64)
    pieces, lengths = _spelling(tokenizer)
    if len(ids) and (ids.max() >= len(lengths) or (lengths[ids] < 0).any()):
        return None
    ends = np.cumsum(lengths[ids])
    if text is None:
        return ends
    spelled = b"".join(pieces[i] for i in ids.tolist())
    wanted = text.encode("utf-8")
    if spelled == wanted:
        return ends
    if spelled == b" " + wanted:  # SentencePiece's dummy prefix: the text starts one byte later
        return ends - 1
    return None


def shared_boundaries(first_ends: np.ndarray, second_ends: np.ndarray) -> np.ndarray:
    """Byte positions (> 0) where both tokenizations end a token, ascending."""
    shared = np.intersect1d(first_ends, second_ends, assume_unique=False)
    return shared[shared > 0]


def chunk_ids(ends: np.ndarray, boundaries: np.ndarray) -> np.ndarray:
    """For each token, the index of the chunk it belongs to: the first boundary at or after its end.

    Tokens past the last boundary get -1 (their chunk is incomplete on at least one side).
    """
    chunk = np.searchsorted(boundaries, ends, side="left")
    chunk[chunk >= len(boundaries)] = -1
    return chunk.astype(np.int64)


@dataclass
class AlignedWindow:
    """One training example: the same text span in both tokenizations, cut at shared boundaries.

    `*_ids` exclude the bos token the collator prepends; `*_chunks[i]` is the chunk of token i
    (0..num_chunks-1; every token belongs to a complete chunk).
    """

    student_ids: list
    teacher_ids: list
    student_chunks: list
    teacher_chunks: list
    num_chunks: int


def aligned_windows(
    student_ids, student_ends, teacher_ids, teacher_ends, max_student_tokens: int, max_teacher_tokens: int
) -> list:
    """Cut one document's two tokenizations into windows that end at shared boundaries.

    Each window holds at most `max_student_tokens` student tokens and `max_teacher_tokens` teacher
    tokens, starts where the previous one ended, and ends at the last shared boundary that fits; a
    stretch with no shared boundary that fits (very rare: one giant token) is skipped.

    Returns:
        `list[AlignedWindow]`
    """
    boundaries = shared_boundaries(student_ends, teacher_ends)
    windows = []
    if not len(boundaries):
        return windows
    # the number of tokens of each side that end at or before each boundary
    student_count = np.searchsorted(student_ends, boundaries, side="right")
    teacher_count = np.searchsorted(teacher_ends, boundaries, side="right")
    start, s0, t0 = 0, 0, 0  # index of the first boundary after the window start; tokens consumed so far
    while start < len(boundaries):
        fits = np.flatnonzero(
            (student_count[start:] - s0 <= max_student_tokens) & (teacher_count[start:] - t0 <= max_teacher_tokens)
        )
        if not len(fits):  # no boundary fits after this point: skip to the next boundary
            s0, t0 = student_count[start], teacher_count[start]
            start += 1
            continue
        stop = start + int(fits[-1])  # the last boundary that fits (counts are non-decreasing)
        s1, t1 = int(student_count[stop]), int(teacher_count[stop])
        local = boundaries[start : stop + 1]
        windows.append(
            AlignedWindow(
                student_ids=[int(i) for i in student_ids[s0:s1]],
                teacher_ids=[int(i) for i in teacher_ids[t0:t1]],
                student_chunks=chunk_ids(student_ends[s0:s1], local).tolist(),
                teacher_chunks=chunk_ids(teacher_ends[t0:t1], local).tolist(),
                num_chunks=len(local),
            )
        )
        s0, t0, start = s1, t1, stop + 1
    return windows
