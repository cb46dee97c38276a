"""How a leading-piece group's mass divides among the new vocabulary's merges, taught by the original model.

The grouped KL of self-distillation (`tokswap.self_distillation`, `prediction_weight`) teaches the swapped model
the mass of each group of next tokens: " wh", " whipping", " whale", ... together get what the original gives
" wh". It says nothing of how that mass divides, so a merge no training text holds (" whipping") keeps whatever
share its init gave it, and the cross-entropy only ever pushes it down. The original model knows the share: after
reading " wh" it gives "ipping" some probability. At each shared boundary, the text's own next original token
p (" wh") is read by the original, whose next-token distribution at p is

    P(second piece | context, p),

and it divides the group of p among the group's slots (`LeadingPieceGroups.splits`): each merge slot gets the
probability of its second piece; the slot of p alone (the member the original spells with p itself) gets the
rest. The student's share of each slot is its softmax restricted to the group's members. The term is
KL(original's shares || student's shares), summed over the boundaries whose next original token has a split.
Since the text's next token is drawn from the text, the sum is a sampled estimate of the grouped KL's missing
half: by the chain rule, KL over the finer partition = KL over groups + E_group[KL within the group].

Only the second original token is read, so merges of three or more pieces share the slot of their second piece,
and a slot's mass is an approximation where the original spells the merge's text differently in context.
"""

from __future__ import annotations

from typing import List, Tuple

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

SplitPosition = Tuple[int, int, torch.Tensor, torch.Tensor, torch.Tensor]


def split_positions(teacher_input_ids: torch.Tensor, teacher_at: torch.Tensor, student_at: torch.Tensor, splits):
    """Shared boundaries whose next original token has a split.

    Args:
        teacher_input_ids (`[B, Lt]`): the original tokenization.
        teacher_at / student_at (`LongTensor`, `[n]`): flat positions (row * length + t) just before each chunk's
            first token, in each tokenization.
        splits: `LeadingPieceGroups.splits`.

    Returns:
        `list` of (flat student position that predicts the chunk, flat original position of the chunk's first
        token, which predicts what follows it, members, member slots, slot second pieces).
    """
    flat = teacher_input_ids.reshape(-1)
    firsts = flat.index_select(0, (teacher_at + 1).to(flat.device)).tolist()
    out: List[SplitPosition] = []
    for s_at, t_at, first in zip(student_at.tolist(), teacher_at.tolist(), firsts):
        entry = splits.get(first)
        if entry is not None:
            out.append((s_at, t_at + 1, *entry))
    return out


def _segment_logsumexp(values: torch.Tensor, segments: torch.Tensor, count: int) -> torch.Tensor:
    """log-sum-exp of `values` per segment id in `[0, count)` (every segment non-empty)."""
    with torch.no_grad():  # the shift only keeps exp() in range
        peak = values.new_full((count,), -torch.inf).scatter_reduce(0, segments, values, "amax")
    summed = values.new_zeros(count).index_add(0, segments, torch.exp(values - peak[segments]))
    return torch.log(summed) + peak


def _slot_targets(teacher_logp: torch.Tensor, part: list):
    """Flat per-slot layout of a chunk of positions: (row of each member, member ids, slot id of each member,
    position of each slot, the original's log share of each slot)."""
    device = teacher_logp.device
    rows, members, member_slots, slot_rows, log_q = [], [], [], [], []
    slots_so_far = 0
    for i, (_, _, ids, slot, seconds) in enumerate(part):
        merged = seconds >= 0
        mass = teacher_logp[i, seconds.clamp(min=0).to(device)].exp() * merged.to(device)
        if bool((~merged).any()):  # the member spelled with the first piece alone takes what no merge continues
            mass = torch.where(merged.to(device), mass, (1 - mass.sum()).clamp(min=0))
        rows.append(torch.full((len(ids),), i, device=device))
        members.append(ids.to(device))
        member_slots.append(slot.to(device) + slots_so_far)
        slot_rows.append(torch.full((len(seconds),), i, device=device))
        log_q.append(torch.log(mass / mass.sum()))
        slots_so_far += len(seconds)
    return tuple(torch.cat(parts) for parts in (rows, members, member_slots, slot_rows, log_q))


def _member_logits(hidden, rows, members, head):
    """Logits of each position's group members, flat. A plain linear head is multiplied by the rows of the chunk's
    members only (its groups hold a few thousand tokens at most, the vocabulary 150k); any other head runs whole."""
    weight, bias = getattr(head, "weight", None), getattr(head, "bias", None)
    if type(head) is not torch.nn.Linear or type(weight) not in (torch.Tensor, torch.nn.Parameter):
        return head(hidden)[rows, members]
    unique, slot = torch.unique(members, return_inverse=True)
    part_bias = None if bias is None else bias.index_select(0, unique)
    return F.linear(hidden, weight.index_select(0, unique), part_bias)[rows, slot]


def _split_kl_chunk(hidden, rows, members, member_slots, slot_rows, log_q, head, transform):
    member_logits = transform(_member_logits(hidden, rows, members, head))
    member_logits = member_logits.float() if member_logits.dtype in (torch.float16, torch.bfloat16) else member_logits
    slot_lse = _segment_logsumexp(member_logits, member_slots, len(log_q))
    group_lse = _segment_logsumexp(member_logits, rows, hidden.shape[0])
    log_p = slot_lse - group_lse[slot_rows]
    q = log_q.exp()
    return torch.where(q > 0, q * (log_q.masked_fill(q == 0, 0.0) - log_p), 0.0).sum()


def split_kl(
    student_hidden,
    teacher_hidden,
    positions: list,
    student_head,
    teacher_head,
    *,
    chunk_size: int = 256,
    student_transform=None,
    teacher_transform=None,
) -> torch.Tensor:
    """Sum over `positions` of KL(original's division of the group || the student's), module docstring.

    Args:
        student_hidden (`[N, d]`) / teacher_hidden (`[Nt, dt]`): flat final hidden states of both models.
        positions: from [`split_positions`].
        student_head / teacher_head: output heads; student_transform / teacher_transform: logit scale / soft-cap.
        chunk_size (`int`): positions whose logits are computed at once (student chunks recomputed in backward).
    """
    identity = lambda x: x  # noqa: E731
    device = student_hidden.device
    total = student_hidden.new_zeros((), dtype=torch.float32)
    recompute = torch.is_grad_enabled() and student_hidden.requires_grad
    for start in range(0, len(positions), chunk_size):
        part = positions[start : start + chunk_size]
        with torch.no_grad():
            teacher_at = torch.tensor([p[1] for p in part], device=teacher_hidden.device)
            logits = (teacher_transform or identity)(teacher_head(teacher_hidden.index_select(0, teacher_at)))
            logits = logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits
            targets = _slot_targets(torch.log_softmax(logits.to(device), dim=-1), part)
        hidden = student_hidden.index_select(0, torch.tensor([p[0] for p in part], device=device))
        args = (hidden, *targets, student_head, student_transform or identity)
        if recompute:
            total = total + checkpoint(_split_kl_chunk, *args, use_reentrant=False)
        else:
            total = total + _split_kl_chunk(*args)
    return total
