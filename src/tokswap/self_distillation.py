"""Self-distillation across a tokenizer swap: the original model teaches its swapped self.

After a swap, the model's body is intact but its embeddings speak a new vocabulary. The model *before*
the swap, reading the same text in its own tokens, is the best teacher there is: no other model and no
new data are needed. The two tokenizations are aligned by bytes (`tokswap.align.byte_offsets`); wherever
both end a token at the same byte, both models have read the same text, and the student is trained to

- give each chunk of text between shared boundaries the teacher's likelihood (as ALM does:
  `likelihood_loss="binary_kl"` compares the chunk's probability p as a Bernoulli event,
  `"abs"` the absolute difference of log-likelihoods), weight `likelihood_weight`;
- be in the teacher's hidden state at each shared boundary (mean squared difference of the final
  hidden states, or of every layer's, each layer's squared error divided by the teacher's mean squared norm at
  those boundaries, since the residual stream's scale grows a hundredfold from the first layers to the last),
  weight `hidden_weight`;
- predict what comes next as the teacher does, weight `prediction_weight`: at each shared boundary,
  KL(teacher || student) of the two next-token distributions grouped by the piece the next text starts with
  (`tokswap.align.leading_pieces`: " dries" and " d" in one group, " whipping" and " wh" in another); inside a
  teacher token the student spells in several pieces (after " d" of " dries"), KL of the student's next piece
  against the teacher's distribution at the boundary, kept to the teacher tokens spelled with the pieces read so
  far and summed by the piece each continues with. Unlike the chunk likelihood, it reaches every row the teacher
  gives mass, not only the tokens the text holds;
- divide each group's mass among the new vocabulary's merges as the teacher does, weight `split_weight`: where the
  text's next teacher token (" wh") starts merges the student has (" whipping", " whale"), the teacher's
  distribution after reading it weighs them (`tokswap.group_split`);
- plus the ordinary next-token cross-entropy on its own tokens, weight `ce_weight`.

All parts are sums over the batch divided by the number of scored student tokens in the whole
(gradient-accumulated) batch, so accumulation gives the same update as one large batch. Logits are
computed `chunk_size` positions at a time (student chunks recomputed in backward), so neither model's
`[batch, length, vocab]` logits ever exist.

```python
from tokswap.self_distillation import SelfDistillationConfig, SelfDistillationTrainer

config = SelfDistillationConfig(output_dir="run", max_steps=200, per_device_train_batch_size=4, max_length=128)
trainer = SelfDistillationTrainer(model=swapped_model, teacher_model=original_model, args=config,
                                  train_dataset=text_dataset, processing_class=new_tokenizer,
                                  teacher_tokenizer=original_tokenizer)
trainer.train()
```
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional, Union

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint
from trl import SFTConfig, SFTTrainer

from tokswap.align.byte_offsets import aligned_windows, token_byte_ends
from tokswap.errors import TokswapError
from tokswap.telemetry import PublicHubTelemetryMixin
from tokswap.utils import get_logger

logger = get_logger(__name__)

LIKELIHOOD_LOSSES = ("binary_kl", "abs")
HIDDEN_LAYERS = ("last", "all")


class SelfDistillationError(TokswapError):
    """Self-distillation cannot run as configured (the message says what to change)."""


# --------------------------------------------------------------------------------------------------
# Config
# --------------------------------------------------------------------------------------------------


@dataclass
class SelfDistillationConfig(SFTConfig):
    r"""
    Configuration of [`SelfDistillationTrainer`]: everything of `trl.SFTConfig` plus the loss weights.

    The dataset is tokenized by the trainer itself (both tokenizations of each text, cut into windows at shared
    byte boundaries), so `dataset_kwargs={"skip_prepare_dataset": True}` and `remove_unused_columns=False` are set.

    Parameters:
        ce_weight (`float`, defaults to `1.0`): weight of the cross-entropy on the student's own tokens.
        likelihood_weight (`float`, defaults to `0.0`): weight of matching the teacher's likelihood of each chunk.
        hidden_weight (`float`, defaults to `0.0`): weight of matching the teacher's hidden states at shared
            boundaries.
        likelihood_loss (`str`, defaults to `"binary_kl"`): `"binary_kl"` or `"abs"`.
        hidden_layers (`str`, defaults to `"last"`): `"last"` (the final, normed hidden state) or `"all"`
            (every layer's output, each layer's error relative to the teacher's squared norm, averaged).
        prediction_weight (`float`, defaults to `1.0`): weight of matching the teacher's next-token distribution at
            shared boundaries, grouped by leading piece.
        split_weight (`float`, defaults to `1.0`): weight of dividing each group's mass among the student's merges
            as the teacher's next distribution after the group's piece does (`tokswap.group_split`). The defaults
            (cross-entropy + prediction + split) are the combination measured best in bench/results/leaderboard.md.
        rehearsal_weight (`float`, defaults to `0.0`): weight of rehearsing, at each batch's boundaries, the pieces
            of the carved words the teacher expects there (`tokswap.carved_rehearsal`); 0 is off.
        rehearsal_words (`int`, defaults to `4`): words rehearsed per window, the teacher's most probable first.
        rehearsal_context (`int`, defaults to `32`): student tokens of context read before each rehearsed word.
        rehearsal_min_prob (`float`, defaults to `0.01`): the least probability the teacher gives a word it rehearses.
        rehearsal_whole_words (`bool`, defaults to `False`): rehearse only carved tokens that are whole words (a space,
            then letters), not indentation, LaTeX or pieces inside words.
        teacher_max_length (`int`, *optional*): teacher tokens per window (default `2 * max_length`).
        chunk_size (`int`, defaults to `256`): positions whose logits are computed at once.
    """

    ce_weight: float = field(default=1.0, metadata={"help": "Weight of the cross-entropy on the student's tokens."})
    likelihood_weight: float = field(
        default=0.0, metadata={"help": "Weight of matching the teacher's likelihood of each aligned chunk of text."}
    )
    hidden_weight: float = field(
        default=0.0, metadata={"help": "Weight of matching the teacher's hidden states at shared token boundaries."}
    )
    prediction_weight: float = field(
        default=1.0,
        metadata={
            "help": "Weight of matching the teacher's next-token distribution at shared boundaries, both grouped by "
            "the piece the next text starts with (tokswap.align.leading_pieces)."
        },
    )
    split_weight: float = field(
        default=1.0,
        metadata={
            "help": "Weight of dividing each leading-piece group's mass among the student's merges (' whipping' in "
            "the group of ' wh') as the teacher's next-token distribution after that piece does."
        },
    )
    rehearsal_weight: float = field(
        default=0.0,
        metadata={
            "help": "Weight of rehearsing, after the same context, the pieces of the carved words the teacher "
            "expects at shared boundaries (tokswap.carved_rehearsal); 0: off."
        },
    )
    rehearsal_words: int = field(default=4, metadata={"help": "Carved words rehearsed per window."})
    rehearsal_context: int = field(
        default=32, metadata={"help": "Student tokens of context read before each rehearsed word."}
    )
    rehearsal_min_prob: float = field(
        default=0.01, metadata={"help": "Least probability the teacher gives a word it rehearses."}
    )
    rehearsal_whole_words: bool = field(
        default=False, metadata={"help": "Rehearse only whole words (a space, then letters)."}
    )
    likelihood_loss: str = field(
        default="binary_kl", metadata={"help": "'binary_kl' (chunk probability as a Bernoulli event) or 'abs'."}
    )
    hidden_layers: str = field(default="last", metadata={"help": "'last' (final normed state) or 'all' layers."})
    teacher_max_length: Optional[int] = field(
        default=None, metadata={"help": "Teacher tokens per window (default: 2 * max_length)."}
    )
    chunk_size: int = field(default=256, metadata={"help": "Positions whose logits are computed at once."})
    bf16: Optional[bool] = field(
        default=None, metadata={"help": "bf16 mixed precision; None uses it when a CUDA GPU supports it."}
    )

    def __post_init__(self):
        from tokswap.trainer_utils import bf16_supported, launched_on_cpus

        if self.bf16 is None and not self.fp16:
            self.bf16 = bf16_supported()
        if launched_on_cpus():
            self.use_cpu = True  # join the CPU process group (torchrun / accelerate launch without a GPU)
        if self.activation_checkpointing is None:
            self.activation_checkpointing = bool(self.gradient_checkpointing)
        self.dataset_kwargs = {**(self.dataset_kwargs or {}), "skip_prepare_dataset": True}
        self.remove_unused_columns = False
        super().__post_init__()
        weights = ("ce_weight", "likelihood_weight", "hidden_weight", "prediction_weight", "split_weight")
        for name in weights:
            if not getattr(self, name) >= 0:
                raise SelfDistillationError(f"{name} must be >= 0, got {getattr(self, name)}.")
        if not self.rehearsal_weight >= 0:
            raise SelfDistillationError(f"rehearsal_weight must be >= 0, got {self.rehearsal_weight}.")
        if self.rehearsal_words < 1 or self.rehearsal_context < 1 or not 0 < self.rehearsal_min_prob < 1:
            raise SelfDistillationError(
                "rehearsal_words and rehearsal_context must be >= 1 and rehearsal_min_prob in (0, 1), got "
                f"{self.rehearsal_words}, {self.rehearsal_context}, {self.rehearsal_min_prob}."
            )
        if sum(getattr(self, name) for name in weights) <= 0:
            raise SelfDistillationError(f"At least one of {', '.join(weights)} must be > 0.")
        if self.likelihood_loss not in LIKELIHOOD_LOSSES:
            raise SelfDistillationError(f"likelihood_loss={self.likelihood_loss!r} is not one of {LIKELIHOOD_LOSSES}.")
        if self.hidden_layers not in HIDDEN_LAYERS:
            raise SelfDistillationError(f"hidden_layers={self.hidden_layers!r} is not one of {HIDDEN_LAYERS}.")
        if self.max_length is None or self.max_length < 2:
            raise SelfDistillationError(f"max_length must be >= 2, got {self.max_length}.")
        if self.chunk_size < 1:
            raise SelfDistillationError(f"chunk_size must be >= 1, got {self.chunk_size}.")


# --------------------------------------------------------------------------------------------------
# Data: both tokenizations, cut at shared boundaries
# --------------------------------------------------------------------------------------------------


def _bos_id(tokenizer) -> int:
    for token_id in (tokenizer.bos_token_id, tokenizer.eos_token_id):
        if token_id is not None:
            return int(token_id)
    raise SelfDistillationError("The tokenizer has neither a bos nor an eos token to start each window with.")


def _encode(tokenizer, texts: list) -> list:
    backend = getattr(tokenizer, "_tokenizer", None)
    if backend is not None and hasattr(backend, "encode_batch"):
        return [e.ids for e in backend.encode_batch(texts, add_special_tokens=False)]
    return tokenizer(texts, add_special_tokens=False)["input_ids"]


def build_self_distillation_dataset(
    texts, tokenizer, teacher_tokenizer, max_length: int, teacher_max_length: Optional[int] = None
):
    """Tokenize each text with both tokenizers and cut it into windows at shared byte boundaries.

    Args:
        texts (`list[str]` or a `datasets.Dataset` with a "text" column): the training text.
        tokenizer: the student's (new) tokenizer.
        teacher_tokenizer: the teacher's (original) tokenizer.
        max_length (`int`): student positions per window, the bos token included.
        teacher_max_length (`int`, *optional*): teacher positions per window (default `2 * max_length`).

    Returns:
        `datasets.Dataset` with columns `input_ids`, `labels` (the student's ids, bos first; -100 at the bos),
        `teacher_input_ids`, `student_chunks`, `teacher_chunks` (chunk of each position, -1 at the bos).
    """
    from datasets import Dataset

    if hasattr(texts, "column_names"):
        if "text" not in texts.column_names:
            raise SelfDistillationError(
                f"Self-distillation reads raw text: the dataset has columns {texts.column_names}, no 'text' column."
            )
        texts = texts["text"]
    teacher_max_length = teacher_max_length or 2 * max_length
    student_bos, teacher_bos = _bos_id(tokenizer), _bos_id(teacher_tokenizer)
    rows = {k: [] for k in ("input_ids", "labels", "teacher_input_ids", "student_chunks", "teacher_chunks")}
    unaligned = 0
    for start in range(0, len(texts), 256):
        batch = [t for t in texts[start : start + 256] if t]
        for text, s_ids, t_ids in zip(batch, _encode(tokenizer, batch), _encode(teacher_tokenizer, batch)):
            s_ends, t_ends = token_byte_ends(tokenizer, s_ids, text), token_byte_ends(teacher_tokenizer, t_ids, text)
            if s_ends is None or t_ends is None:
                unaligned += 1
                continue
            for window in aligned_windows(s_ids, s_ends, t_ids, t_ends, max_length - 1, teacher_max_length - 1):
                rows["input_ids"].append([student_bos] + window.student_ids)
                rows["labels"].append([-100] + window.student_ids)
                rows["teacher_input_ids"].append([teacher_bos] + window.teacher_ids)
                rows["student_chunks"].append([-1] + window.student_chunks)
                rows["teacher_chunks"].append([-1] + window.teacher_chunks)
    if unaligned:
        logger.warning(
            "%d texts were left out of self-distillation: a tokenizer's tokens do not spell them byte for byte "
            "(a normalizing tokenizer).",
            unaligned,
        )
    if not rows["input_ids"]:
        raise SelfDistillationError(
            "No training window could be built: the texts are empty or neither tokenizer spells them byte for byte."
        )
    return Dataset.from_dict(rows)


def _pad(sequences: list, value: int) -> torch.Tensor:
    length = max(len(s) for s in sequences)
    return torch.tensor([list(s) + [value] * (length - len(s)) for s in sequences], dtype=torch.long)


def collate_self_distillation(examples: list, student_pad: int = 0, teacher_pad: int = 0) -> dict:
    """Right-pad a list of dataset rows into tensors (padding: -100 labels, -1 chunks, mask 0)."""
    batch = {
        "input_ids": _pad([e["input_ids"] for e in examples], student_pad),
        "labels": _pad([e["labels"] for e in examples], -100),
        "student_chunks": _pad([e["student_chunks"] for e in examples], -1),
        "teacher_input_ids": _pad([e["teacher_input_ids"] for e in examples], teacher_pad),
        "teacher_chunks": _pad([e["teacher_chunks"] for e in examples], -1),
    }
    batch["attention_mask"] = _pad([[1] * len(e["input_ids"]) for e in examples], 0)
    batch["teacher_attention_mask"] = _pad([[1] * len(e["teacher_input_ids"]) for e in examples], 0)
    return batch


# --------------------------------------------------------------------------------------------------
# The loss
# --------------------------------------------------------------------------------------------------


@dataclass
class SelfDistillationLossOutput:
    """`loss` (normalized, differentiable) and its parts, summed over the batch (detached)."""

    loss: torch.Tensor
    ce_sum: torch.Tensor
    likelihood_sum: torch.Tensor
    hidden_sum: torch.Tensor
    num_tokens: int
    num_chunks: int
    prediction_sum: Optional[torch.Tensor] = None
    split_sum: Optional[torch.Tensor] = None


def _token_logprobs_chunk(hidden, targets, head, transform):
    logits = transform(head(hidden))
    logits = logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits
    return logits.gather(-1, targets[:, None]).squeeze(-1) - torch.logsumexp(logits, dim=-1)


def token_logprobs(hidden, input_ids, head, transform=None, chunk_size: int = 256, recompute: bool = True):
    """log p(token t | tokens < t) for every position t >= 1, computed `chunk_size` positions at a time.

    Args:
        hidden (`[batch, length, d]`): final hidden states; position t-1 predicts token t.
        input_ids (`[batch, length]`)
        head: the output head; transform: logit scale / soft-cap (identity by default).
        recompute (`bool`): drop each chunk's logits after the forward and rebuild them in backward.

    Returns:
        `[batch, length]` log-probabilities, 0 at position 0.
    """
    transform = transform or (lambda x: x)
    batch, length = input_ids.shape
    flat_hidden = hidden[:, :-1].reshape(-1, hidden.shape[-1])
    flat_targets = input_ids[:, 1:].reshape(-1).to(hidden.device)
    parts = []
    use_checkpoint = recompute and torch.is_grad_enabled() and flat_hidden.requires_grad
    for start in range(0, flat_hidden.shape[0], chunk_size):
        args = (flat_hidden[start : start + chunk_size], flat_targets[start : start + chunk_size])
        if use_checkpoint:
            parts.append(checkpoint(_token_logprobs_chunk, *args, head, transform, use_reentrant=False))
        else:
            parts.append(_token_logprobs_chunk(*args, head, transform))
    logprobs = torch.cat(parts).reshape(batch, length - 1) if parts else hidden.new_zeros(batch, 0)
    return F.pad(logprobs, (1, 0))


def _log1mexp(x: torch.Tensor) -> torch.Tensor:
    """log(1 - exp(x)) for x <= 0, stable at both ends (x clamped just below 0)."""
    x = x.clamp(max=-1e-7)
    return torch.where(x > -math.log(2.0), torch.log(-torch.expm1(x)), torch.log1p(-torch.exp(x)))


def _chunk_sums(values: torch.Tensor, chunks: torch.Tensor, num_chunks: int, offsets: torch.Tensor) -> torch.Tensor:
    """Sum `values[b, t]` into global chunk slots `offsets[b] + chunks[b, t]` (positions with chunk -1 skipped)."""
    keep = chunks >= 0
    slots = (chunks + offsets[:, None])[keep]
    return values.new_zeros(num_chunks).index_add(0, slots, values[keep])


def _last_positions(chunks: torch.Tensor, num_chunks: int, offsets: torch.Tensor) -> torch.Tensor:
    """For each global chunk, the flat index (b * length + t) of its last token."""
    batch, length = chunks.shape
    keep = chunks >= 0
    flat_index = torch.arange(batch * length, device=chunks.device).reshape(batch, length)
    slots = (chunks + offsets[:, None])[keep]
    return torch.full((num_chunks,), -1, dtype=torch.long, device=chunks.device).scatter_reduce(
        0, slots, flat_index[keep], reduce="amax"
    )


def _first_positions(chunks: torch.Tensor, num_chunks: int, offsets: torch.Tensor) -> torch.Tensor:
    """For each global chunk, the flat index (b * length + t) of its first token."""
    batch, length = chunks.shape
    keep = chunks >= 0
    flat_index = torch.arange(batch * length, device=chunks.device).reshape(batch, length)
    slots = (chunks + offsets[:, None])[keep]
    return torch.full((num_chunks,), batch * length, dtype=torch.long, device=chunks.device).scatter_reduce(
        0, slots, flat_index[keep], reduce="amin"
    )


def group_logprobs(logits: torch.Tensor, groups: torch.Tensor, num_groups: int) -> torch.Tensor:
    """`[n, num_groups]` log-probability of each group of tokens under softmax(`logits`) (`[n, vocab]`).

    A per-group log-sum-exp, shifted by each group's largest entry so small groups keep their precision. Tokens of
    group -1 are left out and the rest renormalized; an empty group gets -inf.
    """
    logits = logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits
    return _grouped_from_logp(torch.log_softmax(logits, dim=-1), groups, num_groups)


# Below this a group's summed probability is taken again with a per-group shift: exp() of log-probabilities
# under about -69 nats nears float32's denormals and loses precision.
_FAINT = 1e-30


def _grouped_from_logp(logp: torch.Tensor, groups: torch.Tensor, num_groups: int) -> torch.Tensor:
    """[`group_logprobs`] of rows that are already log-probabilities."""
    slots = torch.where(groups >= 0, groups, num_groups).to(logp.device)
    index = slots.expand_as(logp)
    empty = torch.bincount(slots, minlength=num_groups + 1) == 0
    # log-probabilities are <= 0, so exp() cannot overflow: one pass, no shift, for all but the faint groups
    summed = logp.new_zeros((logp.shape[0], num_groups + 1)).scatter_add(1, index, torch.exp(logp))
    out = torch.log(summed.clamp(min=_FAINT)).masked_fill(empty, -math.inf)
    faint = torch.nonzero(((summed < _FAINT) & ~empty).any(dim=1)).flatten()
    if faint.numel():
        out = out.index_copy(0, faint, _shifted_group_logprobs(logp.index_select(0, faint), slots, num_groups))
    out = out[:, :num_groups]
    if bool((groups < 0).any()):
        out = out - torch.logsumexp(out, dim=-1, keepdim=True)
    return out


def _shifted_group_logprobs(logp: torch.Tensor, slots: torch.Tensor, num_groups: int) -> torch.Tensor:
    """Per-group log-sum-exp shifted by each group's largest entry, so the faintest group keeps its precision
    (`[n, num_groups + 1]`, the last column the dropped tokens, -inf where a group is empty)."""
    index = slots.expand_as(logp)
    with torch.no_grad():  # the shift only keeps exp() in range; any constant gives the same value and gradient
        peak = logp.new_full((logp.shape[0], num_groups + 1), -math.inf).scatter_reduce(1, index, logp, "amax")
        empty = torch.isinf(peak)
        peak = peak.masked_fill(empty, 0.0)
    summed = logp.new_zeros(peak.shape).scatter_add(1, index, torch.exp(logp - peak.gather(1, index)))
    return (torch.log(summed + empty.float()) + peak).masked_fill(empty, -math.inf)


def _identity(x):
    return x


def _maybe_recompute(function, *args, recompute: bool):
    """`function(*args)`, its activations rebuilt in backward instead of kept when `recompute`."""
    return checkpoint(function, *args, use_reentrant=False) if recompute else function(*args)


def _prediction_kl_chunk(hidden, teacher_logp, head, transform, groups, num_groups):
    student_logp = group_logprobs(transform(head(hidden)), groups, num_groups)
    p = teacher_logp.exp()
    # where the teacher gives a group nothing it adds nothing (0 * log 0 = 0)
    per_group = torch.where(p > 0, p * (teacher_logp.masked_fill(p == 0, 0.0) - student_logp), 0.0)
    return per_group.sum()


def prediction_kl(
    student_hidden,
    teacher_hidden,
    student_head,
    teacher_head,
    groups,
    *,
    chunk_size: int = 256,
    student_transform=None,
    teacher_transform=None,
) -> torch.Tensor:
    """Sum over rows of KL(teacher || student) between the two next-token distributions grouped by leading piece.

    Args:
        student_hidden (`[n, d]`) / teacher_hidden (`[n, dt]`): final hidden states at the same n boundaries.
        student_head / teacher_head: output heads.
        groups ([`~tokswap.align.leading_pieces.LeadingPieceGroups`]): the rows' groups.
        chunk_size (`int`): rows whose logits are computed at once (student chunks recomputed in backward).
    """
    device = student_hidden.device
    student_groups, teacher_groups = groups.student.to(device), groups.teacher.to(device)
    total = student_hidden.new_zeros((), dtype=torch.float32)
    recompute = torch.is_grad_enabled() and student_hidden.requires_grad
    for start in range(0, student_hidden.shape[0], chunk_size):
        with torch.no_grad():
            teacher_logits = (teacher_transform or _identity)(teacher_head(teacher_hidden[start : start + chunk_size]))
            teacher_logp = group_logprobs(teacher_logits.to(device), teacher_groups, groups.num_groups)
        args = (student_hidden[start : start + chunk_size], teacher_logp, student_head, student_transform or _identity)
        total = total + _maybe_recompute(
            _prediction_kl_chunk, *args, student_groups, groups.num_groups, recompute=recompute
        )
    return total


def _student_rows_chunk(hidden, targets, boundary, teacher_logp, head, transform, groups, num_groups):
    """One chunk of student rows: each row's log-probability of its next token and, over the rows at `boundary`
    (indices into the chunk), the grouped KL against `teacher_logp`. One head product serves both terms."""
    logits = transform(head(hidden))
    logits = logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits
    logp = torch.log_softmax(logits, dim=-1)
    token_lp = logp.gather(-1, targets[:, None]).squeeze(-1)
    if boundary.numel() == 0:
        return token_lp, logp.new_zeros(())
    student_logp = _grouped_from_logp(logp.index_select(0, boundary), groups, num_groups)
    p = teacher_logp.exp()
    # where the teacher gives a group nothing it adds nothing (0 * log 0 = 0)
    kl = torch.where(p > 0, p * (teacher_logp.masked_fill(p == 0, 0.0) - student_logp), 0.0).sum()
    return token_lp, kl


def student_row_terms(
    student_hidden,
    input_ids,
    rows,
    student_head,
    *,
    boundary_rows=None,
    teacher_hidden=None,
    teacher_rows=None,
    teacher_head=None,
    groups=None,
    chunk_size: int = 256,
    student_transform=None,
    teacher_transform=None,
):
    """Next-token log-probabilities at `rows` and the grouped prediction KL at `boundary_rows`, in one pass over
    the student's head.

    The boundary rows are a subset of the rows (a chunk's first token is always scored), so computing their
    logits once serves both terms: one head product (and one recomputation) where there were two; chunks of `chunk_size` rows are recomputed in backward.

    Args:
        student_hidden (`[B, L, d]`): final hidden states; flat row r = b * L + t predicts token t + 1.
        input_ids (`[B, L]`): the student's tokens.
        rows (`LongTensor`, `[n]`): ascending flat rows whose next token is scored.
        boundary_rows / teacher_rows (`LongTensor`, `[m]`, *optional*): flat student / teacher rows just before
            each shared boundary, where the grouped KL is taken; `teacher_hidden` (`[B, Lt, dt]`), `teacher_head`
            and `groups` ([`~tokswap.align.leading_pieces.LeadingPieceGroups`]) are then needed.

    Returns:
        (`[B, L]` log-probability of each token given the ones before, 0 where not scored; the KL sum, a scalar)
    """
    transform = student_transform or _identity
    batch, length = input_ids.shape
    device = student_hidden.device
    flat_hidden = student_hidden.reshape(-1, student_hidden.shape[-1])
    flat_ids = input_ids.reshape(-1).to(device)
    if boundary_rows is None or boundary_rows.numel() == 0:
        boundary_at = torch.zeros(0, dtype=torch.long, device=device)
    else:
        boundary_at = torch.searchsorted(rows, boundary_rows.to(device))
        found = rows[boundary_at.clamp(max=len(rows) - 1)] == boundary_rows.to(device)
        if not bool(found.all()):
            raise SelfDistillationError("Every shared boundary's row must be a scored row.")
        order = torch.argsort(boundary_at)
        boundary_at, teacher_rows = boundary_at[order], teacher_rows.to(device)[order]
        flat_teacher = teacher_hidden.reshape(-1, teacher_hidden.shape[-1]).detach()
        teacher_groups, student_groups = groups.teacher.to(device), groups.student.to(device)
    recompute = torch.is_grad_enabled() and flat_hidden.requires_grad
    parts, kl = [], flat_hidden.new_zeros((), dtype=torch.float32)
    for start in range(0, len(rows), chunk_size):
        chunk_rows = rows[start : start + chunk_size]
        lo, hi = torch.searchsorted(boundary_at, torch.tensor([start, start + len(chunk_rows)], device=device)).tolist()
        boundary = boundary_at[lo:hi] - start
        teacher_logp, args = None, (None, 0)
        if hi > lo:
            with torch.no_grad():
                teacher_logits = (teacher_transform or _identity)(
                    teacher_head(flat_teacher.index_select(0, teacher_rows[lo:hi]))
                )
                teacher_logp = group_logprobs(teacher_logits.to(device), teacher_groups, groups.num_groups)
            args = (student_groups, groups.num_groups)
        token_lp, part_kl = _maybe_recompute(
            _student_rows_chunk,
            flat_hidden.index_select(0, chunk_rows),
            flat_ids.index_select(0, chunk_rows + 1),
            boundary,
            teacher_logp,
            student_head,
            transform,
            *args,
            recompute=recompute,
        )
        parts.append(token_lp)
        kl = kl + part_kl
    values = torch.cat(parts) if parts else flat_hidden.new_zeros(0, dtype=torch.float32)
    logprobs = values.new_zeros(batch * length).index_copy(0, rows + 1, values)
    return logprobs.reshape(batch, length), kl


def _inside_positions(input_ids, student_chunks, teacher_at, offsets, continuations) -> list:
    """Student positions inside a teacher token: (flat position that predicts the next piece, flat teacher position
    that predicts the chunk, teacher ids spelled with the pieces read so far, the piece each continues with)."""
    out = []
    length = input_ids.shape[1]
    ids, chunks, offsets, teacher_at = (
        input_ids.tolist(),
        student_chunks.tolist(),
        offsets.tolist(),
        teacher_at.tolist(),
    )
    for b, (row_ids, row_chunks) in enumerate(zip(ids, chunks)):
        current, read = -1, []
        for t, (token, chunk) in enumerate(zip(row_ids, row_chunks)):
            if chunk < 0:
                continue
            if chunk != current:
                current, read = chunk, []
            entry = continuations.get(tuple(read)) if read else None
            if entry is not None:
                out.append((b * length + t - 1, teacher_at[offsets[b] + chunk], *entry))
            read.append(token)
    return out


def _inside_kl_chunk(hidden, rows, pieces, log_q, head, transform):
    logits = transform(head(hidden))
    logits = logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits
    log_p = torch.log_softmax(logits, dim=-1)[rows, pieces]
    return (log_q.exp() * (log_q - log_p)).sum()


def inside_kl(
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
    """Sum over student positions inside a teacher token of KL(teacher's continuation || student's next piece).

    Args:
        student_hidden (`[N, d]`) / teacher_hidden (`[Nt, dt]`): flat final hidden states of both models.
        positions: from `_inside_positions`.
    """
    device = student_hidden.device
    total = student_hidden.new_zeros((), dtype=torch.float32)
    recompute = torch.is_grad_enabled() and student_hidden.requires_grad
    for start in range(0, len(positions), chunk_size):
        part = positions[start : start + chunk_size]
        student_at = torch.tensor([p[0] for p in part], device=device)
        teacher_at = torch.tensor([p[1] for p in part], device=device)
        with torch.no_grad():
            logits = (teacher_transform or _identity)(teacher_head(teacher_hidden.index_select(0, teacher_at)))
            logits = logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits
            targets = _continuation_targets(torch.log_softmax(logits.to(device), dim=-1), part)
        args = (student_hidden.index_select(0, student_at), *targets, student_head, student_transform or _identity)
        total = total + _maybe_recompute(_inside_kl_chunk, *args, recompute=recompute)
    return total


def _continuation_targets(teacher_lp: torch.Tensor, part: list):
    """(row, piece, log q) triples: per position, the teacher's probability of each next piece, summed over the
    tokens spelled with the pieces read so far and renormalized over them."""
    device = teacher_lp.device
    rows, pieces, log_q = [], [], []
    for i, (_, _, teacher_ids, nexts) in enumerate(part):
        unique, slot = torch.unique(nexts.to(device), return_inverse=True)
        lp = teacher_lp[i, teacher_ids.to(device)]
        peak = lp.max()
        summed = torch.zeros(len(unique), dtype=lp.dtype, device=device).index_add(0, slot, (lp - peak).exp())
        grouped = summed.log() + peak
        rows.append(torch.full((len(unique),), i, device=device))
        pieces.append(unique)
        log_q.append(grouped - torch.logsumexp(grouped, 0))
    return torch.cat(rows), torch.cat(pieces), torch.cat(log_q)


def rehearsal_kl(student_hidden, rehearsals, teacher_logp, student_head, student_transform=None) -> torch.Tensor:
    """Sum over rehearsed positions (`tokswap.carved_rehearsal`) of KL(teacher's continuation || student's next
    piece), the continuation targets of `inside_kl` taken from the teacher's distribution at each word's boundary.

    Args:
        student_hidden (`[n, L, d]`): the student's final hidden states over `rehearsals.input_ids`.
        rehearsals ([`~tokswap.carved_rehearsal.Rehearsals`])
        teacher_logp (`[m, V]`): the teacher's log-probabilities at the boundaries.
    """
    if rehearsals.rows.numel() == 0:
        return student_hidden.new_zeros((), dtype=torch.float32)
    device = student_hidden.device
    flat = student_hidden.reshape(-1, student_hidden.shape[-1]).index_select(0, rehearsals.rows.to(device))
    parts = [(None, None, ids, nexts) for ids, nexts in rehearsals.continuations]
    with torch.no_grad():
        targets = _continuation_targets(teacher_logp.index_select(0, rehearsals.boundary.to(device)), parts)
    return _inside_kl_chunk(flat, *targets, student_head, student_transform or _identity)


def rehearsal_picks(teacher_hidden, inputs, teacher_head, carved, count: int, min_prob: float, teacher_transform=None):
    """The carved words a batch rehearses (`tokswap.carved_rehearsal.pick_words` at its shared boundaries).

    Args:
        teacher_hidden (`[B, Lt, d]`): the teacher's final hidden states over `inputs["teacher_input_ids"]`.
        inputs: a batch of [`collate_self_distillation`].
        carved (`LongTensor`): original tokens the new vocabulary spells in pieces (`LeadingPieceGroups.spellings`).

    Returns:
        (flat student row of each boundary, the teacher's log-probabilities there, the picked boundaries, the picked
        original tokens), or None when the batch has no shared boundary or picks no word.
    """
    from tokswap.carved_rehearsal import pick_words

    device = teacher_hidden.device
    student_chunks, teacher_chunks = inputs["student_chunks"].to(device), inputs["teacher_chunks"].to(device)
    per_row = (student_chunks.max(dim=1).values + 1).clamp(min=0)
    offsets, num_chunks = torch.cumsum(per_row, 0) - per_row, int(per_row.sum())
    if num_chunks == 0:
        return None
    student_rows, teacher_rows = _boundary_positions(student_chunks, teacher_chunks, num_chunks, offsets)
    with torch.no_grad():
        flat_teacher = teacher_hidden.reshape(-1, teacher_hidden.shape[-1]).index_select(0, teacher_rows)
        logits = (teacher_transform or _identity)(teacher_head(flat_teacher))
        logits = logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits
        teacher_logp = torch.log_softmax(logits, dim=-1)
        text_next = inputs["teacher_input_ids"].to(device).reshape(-1).index_select(0, teacher_rows + 1)
    windows = torch.div(student_rows, inputs["input_ids"].shape[1], rounding_mode="floor")
    boundaries, words = pick_words(teacher_logp, carved, text_next, windows, count, min_prob)
    if boundaries.numel() == 0:
        return None
    return student_rows, teacher_logp, boundaries, words


def _likelihood_gap(teacher_ll: torch.Tensor, student_ll: torch.Tensor, kind: str) -> torch.Tensor:
    """Per chunk: the Bernoulli KL of the two chunk probabilities ("binary_kl") or |log-likelihood difference|."""
    if kind == "binary_kl":
        p = teacher_ll.exp()
        return p * (teacher_ll - student_ll) + (1 - p) * (_log1mexp(teacher_ll) - _log1mexp(student_ll))
    return (teacher_ll - student_ll).abs()


def _hidden_sum(pairs, student_chunks, teacher_chunks, num_chunks, offsets, relative=False) -> torch.Tensor:
    """Mean squared difference of (student, teacher) hidden states at each chunk's last token, averaged over pairs;
    `relative`: each pair's squared error over the teacher's mean squared norm at these boundaries (a scale-free
    error, so no layer outweighs the others by its size)."""
    student_at = _last_positions(student_chunks, num_chunks, offsets)
    teacher_at = _last_positions(teacher_chunks, num_chunks, offsets)
    total = 0.0
    for s_states, t_states in pairs:
        s_rows = s_states.reshape(-1, s_states.shape[-1]).index_select(0, student_at).float()
        t_states = t_states.to(s_states.device)
        t_rows = t_states.reshape(-1, t_states.shape[-1]).index_select(0, teacher_at).float().detach()
        error = (s_rows - t_rows).pow(2).mean(-1)
        if relative:
            error = error / t_rows.pow(2).mean(-1).mean().clamp(min=torch.finfo(torch.float32).tiny)
        total = total + error.sum() / len(pairs)
    return total


def _boundary_positions(student_chunks, teacher_chunks, num_chunks, offsets):
    """Flat (student, teacher) positions that predict each chunk: the bos, or the previous chunk's last token."""
    student_at = _first_positions(student_chunks, num_chunks, offsets) - 1
    teacher_at = _first_positions(teacher_chunks, num_chunks, offsets) - 1
    return student_at, teacher_at


def _inside_sum(
    student_hidden,
    teacher_hidden,
    input_ids,
    student_chunks,
    teacher_at,
    offsets,
    student_head,
    teacher_head,
    groups,
    **kwargs,
):
    """The prediction part inside teacher tokens: the continuation KL of each piece after the first."""
    inside = _inside_positions(input_ids, student_chunks, teacher_at, offsets, groups.continuations)
    if not inside:
        return student_hidden.new_zeros((), dtype=torch.float32)
    flat_student = student_hidden.reshape(-1, student_hidden.shape[-1])
    flat_teacher = teacher_hidden.reshape(-1, teacher_hidden.shape[-1]).detach()
    return inside_kl(flat_student, flat_teacher, inside, student_head, teacher_head, **kwargs)


def _split_sum(
    student_hidden,
    teacher_hidden,
    teacher_input_ids,
    student_chunks,
    teacher_chunks,
    num_chunks,
    offsets,
    student_head,
    teacher_head,
    groups,
    **kwargs,
):
    """The split part (`tokswap.group_split`): at each shared boundary whose next original token has merges in
    the new vocabulary, KL of how the group's mass divides among them."""
    from tokswap.group_split import split_kl, split_positions

    student_at, teacher_at = _boundary_positions(student_chunks, teacher_chunks, num_chunks, offsets)
    positions = split_positions(teacher_input_ids, teacher_at, student_at, groups.splits)
    if not positions:
        return student_hidden.new_zeros((), dtype=torch.float32)
    flat_student = student_hidden.reshape(-1, student_hidden.shape[-1])
    flat_teacher = teacher_hidden.reshape(-1, teacher_hidden.shape[-1]).detach()
    return split_kl(flat_student, flat_teacher, positions, student_head, teacher_head, **kwargs)


def _rows_to_score(scored, student_chunks, need_logprobs: bool, boundary_rows=None) -> torch.Tensor:
    """Ascending flat rows whose next token gets a log-probability: every scored or chunked token's (none when only
    the prediction needs logits), with each shared boundary's row among them."""
    wanted = scored | (student_chunks >= 0) if need_logprobs else torch.zeros_like(scored)
    wanted[:, 0] = False  # nothing predicts the first token
    rows = torch.nonzero(wanted.reshape(-1)).flatten() - 1
    if boundary_rows is not None:
        rows = torch.unique(torch.cat([rows, boundary_rows.to(rows.device)]))
    return rows


def _likelihood_sum(student_lp, teacher, chunks, kind: str) -> torch.Tensor:
    """The chunk-likelihood part: each aligned chunk's likelihood under both models, compared by `kind`."""
    teacher_hidden, teacher_input_ids, teacher_head, teacher_transform, chunk_size = teacher
    student_chunks, teacher_chunks, num_chunks, offsets = chunks
    with torch.no_grad():
        teacher_lp = token_logprobs(
            teacher_hidden, teacher_input_ids, teacher_head, teacher_transform, chunk_size, False
        )
        teacher_ll = _chunk_sums(teacher_lp.float(), teacher_chunks, num_chunks, offsets)
    student_ll = _chunk_sums(student_lp.float(), student_chunks, num_chunks, offsets)
    return _likelihood_gap(teacher_ll, student_ll, kind).sum()


def self_distillation_loss(
    student_hidden: torch.Tensor,
    teacher_hidden: torch.Tensor,
    input_ids: torch.Tensor,
    teacher_input_ids: torch.Tensor,
    student_chunks: torch.Tensor,
    teacher_chunks: torch.Tensor,
    student_head,
    teacher_head,
    *,
    labels: Optional[torch.Tensor] = None,
    ce_weight: float = 1.0,
    likelihood_weight: float = 1.0,
    hidden_weight: float = 1.0,
    likelihood_loss: str = "binary_kl",
    prediction_weight: float = 0.0,
    split_weight: float = 0.0,
    groups=None,
    student_layers: Optional[list] = None,
    teacher_layers: Optional[list] = None,
    chunk_size: int = 256,
    num_items_in_batch: Optional[Union[int, torch.Tensor]] = None,
    student_transform=None,
    teacher_transform=None,
) -> SelfDistillationLossOutput:
    """The self-distillation loss of one batch (see the module docstring).

    Args:
        student_hidden (`[B, L, d]`) / teacher_hidden (`[B, Lt, d]`): final hidden states of both models.
        input_ids / teacher_input_ids: both tokenizations (bos first).
        student_chunks / teacher_chunks: chunk of each position within its row (-1: bos or padding).
        student_head / teacher_head: output heads (`get_output_embeddings()`).
        labels (*optional*): the student's scored tokens (-100 elsewhere); default: every chunked position.
        ce_weight, likelihood_weight, hidden_weight, likelihood_loss, prediction_weight, split_weight: see
            [`SelfDistillationConfig`].
        groups ([`~tokswap.align.leading_pieces.LeadingPieceGroups`], *optional*): needed when `prediction_weight`
            or `split_weight` is > 0.
        student_layers / teacher_layers (*optional*): lists of per-layer hidden states to match at the
            boundaries instead of the final ones (`hidden_layers="all"`), each layer's error relative to the
            teacher's mean squared norm there.
        chunk_size (`int`): positions whose logits are computed at once.
        num_items_in_batch (*optional*): scored student tokens in the whole accumulated batch (the normalizer).
        student_transform / teacher_transform: logit scale / soft-cap.

    Returns:
        [`SelfDistillationLossOutput`]
    """
    device = student_hidden.device
    student_chunks, teacher_chunks = student_chunks.to(device), teacher_chunks.to(device)
    teacher_hidden = teacher_hidden.to(device)
    if labels is None:
        labels = torch.where(student_chunks >= 0, input_ids.to(device), -100)
    scored = labels.to(device) != -100
    num_tokens = int(scored.sum())
    normalizer = torch.as_tensor(num_tokens if num_items_in_batch is None else num_items_in_batch, device=device)
    normalizer = normalizer.clamp(min=1)

    # chunk counts per row -> global chunk slots
    per_row = (student_chunks.max(dim=1).values + 1).clamp(min=0)
    offsets = torch.cumsum(per_row, 0) - per_row
    num_chunks = int(per_row.sum())
    total = student_hidden.new_zeros((), dtype=torch.float32) + 0.0 * student_hidden.sum()
    ce_sum = likelihood_sum = hidden_sum = prediction_sum = split_sum = torch.zeros((), device=device)
    if (prediction_weight > 0 or split_weight > 0) and num_chunks and groups is None:
        raise SelfDistillationError(
            "prediction_weight or split_weight > 0 needs the rows' leading-piece groups (groups=)."
        )
    options = dict(chunk_size=chunk_size, student_transform=student_transform, teacher_transform=teacher_transform)
    predict = prediction_weight > 0 and num_chunks > 0
    if predict:
        boundary_rows, teacher_rows = _boundary_positions(student_chunks, teacher_chunks, num_chunks, offsets)
        boundary = dict(boundary_rows=boundary_rows, teacher_rows=teacher_rows, teacher_hidden=teacher_hidden,
                        teacher_head=teacher_head, groups=groups)  # fmt: skip
    need_logprobs = ce_weight > 0 or likelihood_weight > 0
    if need_logprobs or predict:
        rows = _rows_to_score(scored, student_chunks, need_logprobs, boundary_rows if predict else None)
        student_lp, boundary_kl = student_row_terms(
            student_hidden, input_ids.to(device), rows, student_head, **(boundary if predict else {}), **options
        )
        if need_logprobs:
            ce_sum = -(student_lp * scored).sum()
            total = total + ce_weight * ce_sum
        if predict:
            prediction_sum = boundary_kl
    if likelihood_weight > 0 and num_chunks:
        teacher = (teacher_hidden, teacher_input_ids.to(device), teacher_head, teacher_transform, chunk_size)
        chunks = (student_chunks, teacher_chunks, num_chunks, offsets)
        likelihood_sum = _likelihood_sum(student_lp, teacher, chunks, likelihood_loss)
        total = total + likelihood_weight * likelihood_sum
    if hidden_weight > 0 and num_chunks:
        pairs = (
            [(student_hidden, teacher_hidden)] if student_layers is None else list(zip(student_layers, teacher_layers))
        )
        hidden_sum = _hidden_sum(pairs, student_chunks, teacher_chunks, num_chunks, offsets, student_layers is not None)
        total = total + hidden_weight * hidden_sum
    shared = (student_chunks, teacher_chunks, num_chunks, offsets, student_head, teacher_head, groups)
    if predict:
        inside = (student_chunks, teacher_rows, offsets, student_head, teacher_head, groups)
        prediction_sum = prediction_sum + _inside_sum(student_hidden, teacher_hidden, input_ids, *inside, **options)
        total = total + prediction_weight * prediction_sum
    if split_weight > 0 and num_chunks:
        split_sum = _split_sum(student_hidden, teacher_hidden, teacher_input_ids.to(device), *shared, **options)
        total = total + split_weight * split_sum
    parts = (ce_sum.detach(), likelihood_sum.detach(), hidden_sum.detach())
    return SelfDistillationLossOutput(
        total / normalizer, *parts, num_tokens, num_chunks, prediction_sum.detach(), split_sum.detach()
    )


# --------------------------------------------------------------------------------------------------
# Trainer
# --------------------------------------------------------------------------------------------------


def _forward_states(model, input_ids, attention_mask, all_layers: bool):
    """(final hidden states, per-layer outputs or None) without building full logits."""
    try:
        outputs = model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            output_hidden_states=True,
            use_cache=False,
            logits_to_keep=1,
        )
    except TypeError as err:
        if "logits_to_keep" not in str(err):
            raise
        outputs = model(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True, use_cache=False)
    states = outputs.hidden_states
    return states[-1], (list(states[1:]) if all_layers else None)


class SelfDistillationTrainer(PublicHubTelemetryMixin, SFTTrainer):
    """`SFTTrainer` that trains a swapped model to match the original model across the swap (see
    [`SelfDistillationConfig`] and the module docstring).

    Args:
        model: the swapped (student) model.
        teacher_model: the original model, with its original vocabulary. Frozen and kept in eval mode.
        args ([`SelfDistillationConfig`], *optional*)
        train_dataset: raw text (a `"text"` column) or the output of [`build_self_distillation_dataset`].
        processing_class: the student's (new) tokenizer.
        teacher_tokenizer: the teacher's (original) tokenizer.
        **kwargs: passed to `SFTTrainer`.
    """

    _tag_names = ["trl", "sft", "tokswap", "self-distillation"]
    _name = "SelfDistillation"

    def __init__(
        self,
        model,
        teacher_model,
        args: Optional[SelfDistillationConfig] = None,
        train_dataset=None,
        eval_dataset=None,
        processing_class=None,
        teacher_tokenizer=None,
        **kwargs,
    ):
        from tokswap.modeling import align_special_token_ids

        if args is None:
            args = SelfDistillationConfig(output_dir="tokswap-self-distilled")
        elif not isinstance(args, SelfDistillationConfig):
            raise SelfDistillationError(f"args must be a SelfDistillationConfig, got {type(args).__name__}.")
        if teacher_model is None or teacher_tokenizer is None or processing_class is None:
            raise SelfDistillationError(
                "Self-distillation needs the original model (teacher_model), its tokenizer (teacher_tokenizer) and "
                "the swapped model's tokenizer (processing_class)."
            )
        tokenizer = getattr(processing_class, "tokenizer", processing_class)
        align_special_token_ids(model, tokenizer)
        train_dataset = self._windows(train_dataset, tokenizer, teacher_tokenizer, args)
        eval_dataset = self._windows(eval_dataset, tokenizer, teacher_tokenizer, args)
        student_pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        teacher_pad = teacher_tokenizer.pad_token_id if teacher_tokenizer.pad_token_id is not None else 0
        collator = kwargs.pop("data_collator", None) or (
            lambda rows: collate_self_distillation(rows, student_pad, teacher_pad)
        )
        super().__init__(
            model=model,
            args=args,
            data_collator=collator,
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
            processing_class=processing_class,
            **kwargs,
        )
        from tokswap.distillation import logits_transform

        teacher_model.eval()
        teacher_model.requires_grad_(False)
        self.teacher_model = teacher_model.to(self.accelerator.device)
        self._student_transform = logits_transform(self.accelerator.unwrap_model(self.model))
        self._teacher_transform = logits_transform(teacher_model)
        self._groups = None
        if args.prediction_weight > 0 or args.split_weight > 0 or args.rehearsal_weight > 0:
            from tokswap.align.leading_pieces import leading_piece_groups

            self._groups = leading_piece_groups(
                tokenizer,
                teacher_tokenizer,
                self.accelerator.unwrap_model(self.model).get_output_embeddings().weight.shape[0],
                teacher_model.get_output_embeddings().weight.shape[0],
            )
            carved = sorted(self._groups.spellings)
            if args.rehearsal_whole_words:
                from tokswap.carved_rehearsal import whole_words

                carved = whole_words(carved, teacher_tokenizer)
            self._carved = torch.tensor(carved, dtype=torch.long)
        self._pad_id = student_pad

    @staticmethod
    def _windows(dataset, tokenizer, teacher_tokenizer, args):
        if dataset is None or (hasattr(dataset, "column_names") and "teacher_input_ids" in dataset.column_names):
            return dataset
        return build_self_distillation_dataset(
            dataset, tokenizer, teacher_tokenizer, args.max_length, args.teacher_max_length
        )

    def _get_num_items_in_batch(self, batch_samples, device):
        # counted here whatever the model's forward accepts: the loss is always normalized by it
        count = sum(batch["labels"][..., 1:].ne(-100).sum() for batch in batch_samples)
        if self.args.average_tokens_across_devices and self.args.world_size > 1:
            count = self.accelerator.gather(count.to(device)).sum()
        return count.to(device) if torch.is_tensor(count) else count

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        mode = "train" if self.model.training else "eval"
        all_layers = self.args.hidden_layers == "all" and self.args.hidden_weight > 0
        student_hidden, student_layers = _forward_states(
            model, inputs["input_ids"], inputs["attention_mask"], all_layers
        )
        self.teacher_model.eval()
        with torch.no_grad():
            teacher_hidden, teacher_layers = _forward_states(
                self.teacher_model, inputs["teacher_input_ids"], inputs["teacher_attention_mask"], all_layers
            )
        student = self.accelerator.unwrap_model(model)
        out = self_distillation_loss(
            student_hidden,
            teacher_hidden,
            inputs["input_ids"],
            inputs["teacher_input_ids"],
            inputs["student_chunks"],
            inputs["teacher_chunks"],
            student.get_output_embeddings(),
            self.teacher_model.get_output_embeddings(),
            labels=inputs["labels"],
            ce_weight=self.args.ce_weight,
            likelihood_weight=self.args.likelihood_weight,
            hidden_weight=self.args.hidden_weight,
            likelihood_loss=self.args.likelihood_loss,
            prediction_weight=self.args.prediction_weight,
            split_weight=self.args.split_weight,
            groups=self._groups,
            student_layers=student_layers,
            teacher_layers=teacher_layers,
            chunk_size=self.args.chunk_size,
            num_items_in_batch=num_items_in_batch,
            student_transform=self._student_transform,
            teacher_transform=self._teacher_transform,
        )
        loss = out.loss
        if self.args.rehearsal_weight > 0:
            normalizer = torch.as_tensor(out.num_tokens if num_items_in_batch is None else num_items_in_batch)
            rehearsal_sum, words = self._rehearse(model, student, inputs, teacher_hidden)
            loss = loss + self.args.rehearsal_weight * rehearsal_sum / normalizer.to(loss.device).clamp(min=1)
            self._metrics[mode]["rehearsal_loss"].append(rehearsal_sum.item() / max(words, 1))
            self._metrics[mode]["rehearsed_words"].append(float(words))
        if self.args.average_tokens_across_devices and num_items_in_batch is not None:
            loss = loss * self.accelerator.num_processes  # DDP averages gradients; the normalizer is global
        self._log_parts(mode, out, student_hidden.device)
        if return_outputs:
            return loss, {"loss": loss}
        return loss

    def _rehearse(self, model, student, inputs, teacher_hidden):
        """(the rehearsal KL sum of this batch, words rehearsed): `tokswap.carved_rehearsal`."""
        from tokswap.carved_rehearsal import build_rehearsals

        picked = rehearsal_picks(
            teacher_hidden, inputs, self.teacher_model.get_output_embeddings(), self._carved, self.args.rehearsal_words,
            self.args.rehearsal_min_prob, self._teacher_transform,
        )  # fmt: skip
        if picked is None:
            return teacher_hidden.new_zeros((), dtype=torch.float32), 0
        student_rows, teacher_logp, boundaries, words = picked
        groups = self._groups
        batch = build_rehearsals(
            inputs["input_ids"].cpu(), student_rows.cpu(), boundaries.cpu(), words.cpu(), groups.spellings,
            groups.continuations, self.args.rehearsal_context, self._pad_id,
        )  # fmt: skip
        device = inputs["input_ids"].device
        hidden, _ = _forward_states(model, batch.input_ids.to(device), batch.attention_mask.to(device), False)
        kl = rehearsal_kl(hidden, batch, teacher_logp, student.get_output_embeddings(), self._student_transform)
        return kl, len(words)

    def _log_parts(self, mode, out, device):
        gather = self.accelerator.gather_for_metrics
        tokens = gather(torch.tensor(float(out.num_tokens), device=device)).sum()
        chunks = gather(torch.tensor(float(out.num_chunks), device=device)).sum()
        if tokens > 0:
            self._metrics[mode]["ce_loss"].append((gather(out.ce_sum.float().reshape(1)).sum() / tokens).item())
        if chunks > 0:
            self._metrics[mode]["chunk_likelihood_loss"].append(
                (gather(out.likelihood_sum.float().reshape(1)).sum() / chunks).item()
            )
            self._metrics[mode]["hidden_loss"].append((gather(out.hidden_sum.float().reshape(1)).sum() / chunks).item())
            if self.args.prediction_weight > 0:
                self._metrics[mode]["prediction_loss"].append(
                    (gather(out.prediction_sum.float().reshape(1)).sum() / chunks).item()
                )
            if self.args.split_weight > 0:
                self._metrics[mode]["split_loss"].append(
                    (gather(out.split_sum.float().reshape(1)).sum() / chunks).item()
                )


def self_distill(
    student,
    tokenizer,
    teacher,
    teacher_tokenizer,
    train_dataset,
    config: Optional[SelfDistillationConfig] = None,
    eval_dataset=None,
    callbacks=None,
) -> SelfDistillationTrainer:
    """Train `student` (a swapped model) to match `teacher` (the model before the swap); returns the trainer."""
    from tokswap.trainer_utils import train_single_stage

    config = config or SelfDistillationConfig(output_dir="tokswap-self-distilled")
    trainer = SelfDistillationTrainer(
        model=student,
        teacher_model=teacher,
        args=config,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        processing_class=tokenizer,
        teacher_tokenizer=teacher_tokenizer,
        callbacks=callbacks,
    )
    return train_single_stage(trainer, SelfDistillationError)


__all__ = [
    "SelfDistillationConfig",
    "SelfDistillationError",
    "SelfDistillationTrainer",
    "build_self_distillation_dataset",
    "collate_self_distillation",
    "group_logprobs",
    "inside_kl",
    "prediction_kl",
    "rehearsal_kl",
    "rehearsal_picks",
    "self_distill",
    "self_distillation_loss",
    "token_logprobs",
]
