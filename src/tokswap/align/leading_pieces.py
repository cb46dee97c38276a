"""Two vocabularies' next-token distributions made comparable: every token grouped by the piece it starts with.

Where two tokenizations of a text both end a token at the same byte, the original model and the swapped one
predict the same next text, each over its own vocabulary. The two distributions differ in grain: the original
may have " dries" whole where the new vocabulary spells " d" + "ries", and the new one may have " whipping" where
the original spells " wh" + "ipping". Both describe the same event when grouped by the *original* tokenizer's
first token of what comes next:

- a new-vocabulary token `t` belongs to the group of the original's first token of `t`'s text
  (" whipping" -> " wh"; " d" -> " d");
- an original token `s` belongs to the group of the new-vocabulary token its text starts with, when spelled with
  the new tokenizer (" dries" -> " d" -> group " d"); an original token that is also a new-vocabulary token (the
  same bytes) takes that token's group, so two identical tokenizers give identical groups.

The group's probability is then "the next text starts this way" on both sides (up to how a tokenizer splits a
token's text alone versus in context), and the original model's grouped distribution teaches the swapped model
where mass belongs, including on rows no text at hand holds. Inside an original token the new vocabulary spells in
several pieces (after " d" of " dries") the original's distribution at the boundary still says what comes next:
`continuations` lists, for each run of pieces that starts some original token's spelling, those tokens and the
piece each continues with. Within one group, `splits` says how its mass divides: the new-vocabulary tokens of
the group of " wh" (" wh" itself, " whipping", " whale", ...) differ in the original's *second* token of their
text ("ipping", "ale", or none), and the original's distribution after " wh" weighs those. Tokens without a byte
meaning or whole characters
(a byte of an emoji), special tokens, padding rows, and tokens whose text the original starts with such a byte
share one "other" group. Original tokens whose group holds no new-vocabulary token get group -1
(dropped; the distribution is renormalized over the rest).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import torch

from tokswap.align.vocab import special_token_ids, token_bytes


@dataclass
class LeadingPieceGroups:
    """Group of every row of both output layers.

    Attributes:
        student (`torch.LongTensor`, `[student rows]`): group of each new-vocabulary token, in `[0, num_groups)`.
        teacher (`torch.LongTensor`, `[teacher rows]`): group of each original token, or -1 (dropped).
        num_groups (`int`): the original vocabulary's size plus one ("other", the last group).
        continuations (`dict`): for a run of new-vocabulary pieces that starts an original token's spelling (" d"
            of " dries" = " d" + "ries"), the original tokens spelled so (`LongTensor`) and the piece each continues
            with (`LongTensor`): what the original predicts *inside* one of its tokens.
        splits (`dict`): for an original token whose group holds new-vocabulary tokens that the original spells
            in two or more pieces (" wh": " whipping" = " wh" + "ipping"), the group's members (`LongTensor`), the
            slot of each (`LongTensor`) and the original's second token of each slot (`LongTensor`, -1: the member
            spelled with that one token alone). Groups with a single slot are left out: nothing to divide.
    """

    student: torch.Tensor
    teacher: torch.Tensor
    num_groups: int
    continuations: Dict[Tuple[int, ...], Tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)
    splits: Dict[int, Tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = field(default_factory=dict)
    spellings: Dict[int, Tuple[int, ...]] = field(default_factory=dict)


def _texts(tokenizer, rows: int) -> List[Optional[str]]:
    """Each row's token as text, or None (no byte meaning, not whole UTF-8, special, or a padding row)."""
    specials = special_token_ids(tokenizer)
    spelled = token_bytes(tokenizer)
    out: List[Optional[str]] = [None] * rows
    for idx, data in enumerate(spelled[:rows]):
        if not data or idx in specials:
            continue
        try:
            out[idx] = data.decode("utf-8")
        except UnicodeDecodeError:
            continue
    return out


def _spellings(tokenizer, texts: List[Optional[str]]) -> List[List[int]]:
    """The token ids `tokenizer` spells each text with ([] for None)."""
    present = [i for i, text in enumerate(texts) if text]
    backend = getattr(tokenizer, "_tokenizer", None)
    batch = [texts[i] for i in present]
    if backend is not None and hasattr(backend, "encode_batch"):
        encoded = [e.ids for e in backend.encode_batch(batch, add_special_tokens=False)]
    else:
        encoded = tokenizer(batch, add_special_tokens=False)["input_ids"]
    out: List[List[int]] = [[] for _ in texts]
    for i, ids in zip(present, encoded):
        out[i] = list(ids)
    return out


def leading_piece_groups(student_tokenizer, teacher_tokenizer, student_rows: int, teacher_rows: int):
    """Group the rows of a swapped model's and its original's output layers by leading piece (module docstring).

    Args:
        student_tokenizer: the swapped model's (new) tokenizer.
        teacher_tokenizer: the original model's tokenizer.
        student_rows / teacher_rows (`int`): rows of each output layer (padding rows included).

    Returns:
        [`LeadingPieceGroups`]
    """
    other = teacher_rows
    teacher_texts = _texts(teacher_tokenizer, teacher_rows)
    student_texts = _texts(student_tokenizer, student_rows)
    student_spellings = _spellings(teacher_tokenizer, student_texts)
    # a leading piece without whole characters (a byte of an emoji) is "other" on the teacher's side too
    student = torch.tensor(
        [
            i if 0 <= i < teacher_rows and teacher_texts[i] is not None else other
            for i in (pieces[0] if pieces else -1 for pieces in student_spellings)
        ]
    )
    student_by_text = {}
    for idx, text in enumerate(student_texts):
        if text is not None:
            student_by_text.setdefault(text, idx)
    spelled_with_student = _spellings(
        student_tokenizer, [t if t not in student_by_text else None for t in teacher_texts]
    )
    teacher = torch.full((teacher_rows,), other, dtype=torch.long)
    for idx, text in enumerate(teacher_texts):
        if text is None:
            continue
        same = student_by_text.get(text, (spelled_with_student[idx] or [-1])[0])
        if 0 <= same < student_rows:
            teacher[idx] = student[same]
    held = torch.zeros(teacher_rows + 1, dtype=torch.bool)
    held[student] = True
    teacher[~held[teacher]] = -1
    return LeadingPieceGroups(
        student=student,
        teacher=teacher,
        num_groups=teacher_rows + 1,
        continuations=_continuations(spelled_with_student, student_rows),
        splits=_splits(student_spellings, student.tolist(), other),
        spellings={
            idx: tuple(pieces)
            for idx, pieces in enumerate(spelled_with_student)
            if len(pieces) > 1 and max(pieces) < student_rows
        },
    )


def _splits(spellings: List[List[int]], student_groups: List[int], other: int) -> Dict[int, Tuple[torch.Tensor, ...]]:
    """{original token: (the group's members, each member's slot, each slot's second original token or -1)}."""
    by_group: Dict[int, Tuple[list, list]] = {}
    for student_id, (group, pieces) in enumerate(zip(student_groups, spellings)):
        if group == other:
            continue
        members, seconds = by_group.setdefault(group, ([], []))
        members.append(student_id)
        seconds.append(pieces[1] if len(pieces) > 1 else -1)
    out = {}
    for group, (members, seconds) in by_group.items():
        unique, slot = torch.unique(torch.tensor(seconds), return_inverse=True)
        if len(unique) > 1:
            out[group] = (torch.tensor(members), slot, unique)
    return out


def _continuations(spellings: List[List[int]], student_rows: int) -> Dict[Tuple[int, ...], Tuple[torch.Tensor, ...]]:
    """{student pieces read so far: (original tokens spelled so, the new-vocabulary piece each continues with)}."""
    grouped: Dict[Tuple[int, ...], Tuple[list, list]] = {}
    for teacher_id, pieces in enumerate(spellings):
        if len(pieces) < 2 or max(pieces) >= student_rows:
            continue
        for k in range(1, len(pieces)):
            ids, nexts = grouped.setdefault(tuple(pieces[:k]), ([], []))
            ids.append(teacher_id)
            nexts.append(pieces[k])
    return {prefix: (torch.tensor(ids), torch.tensor(nexts)) for prefix, (ids, nexts) in grouped.items()}
