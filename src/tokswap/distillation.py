"""Token-level distillation from a teacher that shares the student's vocabulary (TokAlign, section 4.2.2).

Once a student has been given the teacher's tokenizer (`tokswap swap`), both models predict distributions
over the same ids, and the student can learn the teacher's whole next-token distribution at every position:

    loss = alpha * CE(student, labels) + (1 - alpha) * T^2 * D(teacher_T || student_T)

with D the forward KL (default), the reverse KL, or the Jensen-Shannon divergence, over positions whose label
is not -100, normalized by the number of such positions in the whole (gradient-accumulated) batch.

Neither model's `[batch, length, vocab]` logits are ever built: both backbones return their final hidden
states, and the output heads are applied to `distill_chunk_size` positions at a time. Student chunks are
recomputed during backward (`torch.utils.checkpoint`), so at most one chunk of logits is alive. With a
262k vocabulary and 1024 positions this is the difference between gigabytes and a few hundred megabytes
(`bench/bench_distill_memory.py`).

Example:

```python
from tokswap.distillation import TokenDistillationConfig, TokenDistillationTrainer

config = TokenDistillationConfig(output_dir="smollm2-gemma-distilled", alpha=0.5, temperature=1.0, max_steps=1000)
trainer = TokenDistillationTrainer(model=student, teacher_model=teacher, args=config,
                                   train_dataset=dataset, processing_class=tokenizer)
trainer.train()
```
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Union

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint
from trl import SFTConfig, SFTTrainer

from tokswap.alignment import tokenizer_fingerprint
from tokswap.errors import TokswapError, check_positive, check_positive_int
from tokswap.modeling import align_special_token_ids
from tokswap.telemetry import PublicHubTelemetryMixin
from tokswap.trainer_utils import (
    bf16_supported,
    check_finite,
    launched_on_cpus,
    train_single_stage,
    with_non_finite_check,
)
from tokswap.utils import check_local_path, get_logger

logger = get_logger(__name__)

DIVERGENCES = ("forward_kl", "reverse_kl", "jsd")


class DistillationError(TokswapError):
    """The teacher and the student cannot be distilled as given (the message says what to change)."""


# --------------------------------------------------------------------------------------------------
# Config
# --------------------------------------------------------------------------------------------------


@dataclass
class TokenDistillationConfig(SFTConfig):
    r"""
    Configuration of [`TokenDistillationTrainer`]: everything of `trl.SFTConfig` plus the distillation loss.

    Unlike TRL, `bf16` defaults to "when a CUDA GPU supports it" (TRL's `True` raises on a CPU), and
    `activation_checkpointing` follows `gradient_checkpointing` without the deprecation warning.

    Parameters:
        alpha (`float`, *optional*, defaults to `0.5`):
            Weight of the cross-entropy on the labels; the divergence to the teacher gets `1 - alpha`.
        temperature (`float`, *optional*, defaults to `1.0`):
            Both distributions are softened by this temperature; the divergence is scaled by `T^2` so that its
            gradients keep their size.
        divergence (`str`, *optional*, defaults to `"forward_kl"`):
            `"forward_kl"` = KL(teacher || student) (mass-covering), `"reverse_kl"` = KL(student || teacher)
            (mode-seeking), or `"jsd"` (Jensen-Shannon with equal weights).
        distill_chunk_size (`int`, *optional*, defaults to `256`):
            Positions whose logits are computed at once. Memory grows linearly with it.
        teacher_model_init_kwargs (`dict`, *optional*):
            Keyword arguments for `AutoModelForCausalLM.from_pretrained` when the teacher is given as a path or id.
    """

    alpha: float = field(
        default=0.5, metadata={"help": "Weight of the cross-entropy; the divergence to the teacher gets 1 - alpha."}
    )
    temperature: float = field(default=1.0, metadata={"help": "Softmax temperature of both distributions."})
    divergence: str = field(
        default="forward_kl", metadata={"help": "'forward_kl' (KL(teacher||student)), 'reverse_kl' or 'jsd'."}
    )
    distill_chunk_size: int = field(
        default=256, metadata={"help": "Positions whose logits are computed at once (memory grows with it)."}
    )
    teacher_model_init_kwargs: Optional[Union[dict[str, Any], str]] = field(
        default=None, metadata={"help": "from_pretrained kwargs used when the teacher is given as a path or id."}
    )
    bf16: Optional[bool] = field(
        default=None, metadata={"help": "bf16 mixed precision; None uses it when a CUDA GPU supports it."}
    )
    logging_nan_inf_filter: bool = field(
        default=False,
        metadata={
            "help": "Average NaN/inf losses away in the logs (TRL's default). Off here: a NaN loss is logged "
            "as such and stops the run (NonFiniteLossCallback)."
        },
    )

    def __post_init__(self):
        self._check_ranges()  # before SFTConfig's own checks, whose errors name no fix
        if launched_on_cpus():
            self.use_cpu = True  # join the CPU process group (torchrun / accelerate launch without a GPU)
        if self.bf16 is None and not self.fp16:
            self.bf16 = bf16_supported()
        if self.activation_checkpointing is None:
            self.activation_checkpointing = bool(self.gradient_checkpointing)
        if isinstance(self.teacher_model_init_kwargs, str):
            import json

            self.teacher_model_init_kwargs = json.loads(self.teacher_model_init_kwargs)
        super().__post_init__()
        if self.divergence not in DIVERGENCES:
            raise DistillationError(f"divergence={self.divergence!r} is not one of {DIVERGENCES}.")

    def _check_ranges(self) -> None:
        """Refuse sizes, steps and rates that TRL accepts silently (`max_steps=-3` would run a whole epoch)."""
        if (
            isinstance(self.max_steps, bool)
            or not isinstance(self.max_steps, int)
            or not (self.max_steps == -1 or self.max_steps >= 1)
        ):
            raise DistillationError(
                f"max_steps (--max-steps) must be -1 (one epoch) or an integer >= 1, got {self.max_steps!r}."
            )
        for name, flag in (
            ("per_device_train_batch_size", "--batch-size"),
            ("gradient_accumulation_steps", "--grad-accum"),
            ("distill_chunk_size", "--chunk-size"),
        ):
            check_positive_int(DistillationError, name, getattr(self, name), flag)
        check_positive_int(DistillationError, "max_length", self.max_length, "--max-length", optional=True)
        # transformers reads a float in (0, 1) as a fraction of the run, so these only have to be > 0
        for name, flag in (("save_steps", "--save-steps"), ("logging_steps", "--logging-steps")):
            check_positive(DistillationError, name, getattr(self, name), flag, optional=True)
        check_positive(DistillationError, "learning_rate", self.learning_rate, "--lr")
        check_positive(DistillationError, "temperature", self.temperature, "--temperature")
        if self.max_steps == -1:
            check_positive(DistillationError, "num_train_epochs", self.num_train_epochs)
        if not 0.0 <= self.alpha <= 1.0:
            raise DistillationError(f"alpha (--alpha) must be in [0, 1], got {self.alpha}.")


# --------------------------------------------------------------------------------------------------
# The chunked loss
# --------------------------------------------------------------------------------------------------


@dataclass
class DistillationLossOutput:
    """`loss` (normalized, differentiable) and its parts, summed over the scored positions (detached)."""

    loss: torch.Tensor
    ce_sum: torch.Tensor
    divergence_sum: torch.Tensor
    num_positions: int


def logits_transform(model) -> Callable[[torch.Tensor], torch.Tensor]:
    """What the model does to `lm_head(hidden)` before returning logits: a logit scale and a final soft-cap,
    read from its config (identity for most models)."""
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    scale = getattr(config, "logit_scale", None)
    if scale is None and getattr(config, "logits_scaling", None):
        scale = 1.0 / config.logits_scaling  # Granite divides by it
    softcap = getattr(config, "final_logit_softcapping", None)
    if scale in (None, 1.0) and not softcap:
        return _identity
    return functools.partial(_scale_and_softcap, scale=1.0 if scale is None else float(scale), softcap=softcap)


def _identity(logits):
    return logits


def _scale_and_softcap(logits, scale, softcap):
    if scale != 1.0:
        logits = logits * scale
    if softcap:
        logits = torch.tanh(logits / softcap) * softcap
    return logits


def _gathered_head(head):
    """Under FSDP2 the head's weight is a sharded DTensor outside the model's forward: gather it once per loss
    call (differentiably, so gradients reach the shards) instead of once per chunk."""
    weight = getattr(head, "weight", None)
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # torch built without distributed
        return head
    if not isinstance(weight, DTensor):
        return head
    full_weight = weight.full_tensor()
    bias = getattr(head, "bias", None)
    full_bias = bias.full_tensor() if isinstance(bias, DTensor) else bias
    return functools.partial(F.linear, weight=full_weight, bias=full_bias)


def _upcast(tensor: torch.Tensor) -> torch.Tensor:
    # half-precision logits are upcast for the softmaxes; float64 stays float64 (the equality tests use it)
    return tensor.float() if tensor.dtype in (torch.float16, torch.bfloat16) else tensor


def _chunk_losses(
    student_hidden,
    teacher_hidden,
    labels,
    *,
    student_head,
    teacher_head,
    student_transform,
    teacher_transform,
    vocab_size,
    temperature,
    divergence,
):
    """[CE sum, divergence sum] over one chunk of positions. The teacher part runs without gradients."""
    student_logits = _upcast(student_transform(student_head(student_hidden)))
    ce_sum = F.cross_entropy(student_logits, labels, reduction="sum")
    with torch.no_grad():
        teacher_logits = _upcast(teacher_transform(teacher_head(teacher_hidden)))[:, :vocab_size]
        teacher_logp = torch.log_softmax(teacher_logits / temperature, dim=-1)
        del teacher_logits
        teacher_p = teacher_logp.exp()
    # only the tokenizer's ids: padding rows of either head are in neither distribution
    student_logq = torch.log_softmax(student_logits[:, :vocab_size] / temperature, dim=-1)
    del student_logits
    if divergence == "forward_kl":
        with torch.no_grad():
            teacher_neg_entropy = (teacher_p * teacher_logp).sum()
        div_sum = teacher_neg_entropy - (teacher_p * student_logq).sum()
    elif divergence == "reverse_kl":
        div_sum = (student_logq.exp() * (student_logq - teacher_logp)).sum()
    else:  # jsd: mixture m = (p + q) / 2
        log_m = torch.logaddexp(teacher_logp, student_logq) - math.log(2.0)
        student_q = student_logq.exp()
        div_sum = 0.5 * (teacher_p * (teacher_logp - log_m)).sum() + 0.5 * (student_q * (student_logq - log_m)).sum()
    return torch.stack([ce_sum.to(div_sum.dtype), div_sum])


def token_distillation_loss(
    student_hidden: torch.Tensor,
    teacher_hidden: torch.Tensor,
    labels: torch.Tensor,
    student_head: Callable[[torch.Tensor], torch.Tensor],
    teacher_head: Callable[[torch.Tensor], torch.Tensor],
    vocab_size: int,
    alpha: float = 0.5,
    temperature: float = 1.0,
    divergence: str = "forward_kl",
    chunk_size: int = 256,
    num_items_in_batch: Optional[Union[int, torch.Tensor]] = None,
    student_transform: Callable = _identity,
    teacher_transform: Callable = _identity,
    shift_labels: bool = True,
) -> DistillationLossOutput:
    """`alpha * CE + (1 - alpha) * T^2 * D(teacher_T || student_T)`, computed `chunk_size` positions at a time.

    Args:
        student_hidden (`torch.Tensor` of shape `[batch, length, hidden]`): the student's final hidden states.
        teacher_hidden (`torch.Tensor` of shape `[batch, length, teacher_hidden]`): the teacher's, for the same ids.
        labels (`torch.LongTensor` of shape `[batch, length]`): next-token targets, -100 where not scored.
        student_head / teacher_head: the output heads (e.g. `model.get_output_embeddings()`).
        vocab_size (`int`): `len(tokenizer)`; columns past it (padding rows of a head) are left out of both
            distributions. The cross-entropy uses the student's full head, like ordinary training.
        alpha, temperature, divergence: see [`TokenDistillationConfig`].
        chunk_size (`int`): positions per chunk.
        num_items_in_batch (*optional*): the normalizer (scored positions in the whole accumulated batch);
            defaults to the scored positions here.
        student_transform / teacher_transform: logit scale / soft-cap (see `logits_transform`).
        shift_labels (`bool`): labels are aligned with the inputs (position t predicts label t+1), as in
            `transformers`; pass False for pre-shifted labels.

    Returns:
        [`DistillationLossOutput`]
    """
    if divergence not in DIVERGENCES:
        raise DistillationError(f"divergence={divergence!r} is not one of {DIVERGENCES}.")
    if shift_labels:
        student_hidden, teacher_hidden, labels = student_hidden[:, :-1], teacher_hidden[:, :-1], labels[:, 1:]
    labels = labels.to(student_hidden.device)
    mask = labels != -100
    student_rows = student_hidden[mask]
    teacher_rows = teacher_hidden.to(student_hidden.device)[mask].detach()
    targets = labels[mask]
    num_positions = int(targets.numel())
    normalizer = num_positions if num_items_in_batch is None else num_items_in_batch
    normalizer = torch.as_tensor(normalizer, device=student_hidden.device).clamp(min=1)

    chunk_fn = functools.partial(
        _chunk_losses,
        student_head=_gathered_head(student_head),
        teacher_head=_gathered_head(teacher_head),
        student_transform=student_transform,
        teacher_transform=teacher_transform,
        vocab_size=vocab_size,
        temperature=temperature,
        divergence=divergence,
    )
    recompute = torch.is_grad_enabled() and student_rows.requires_grad
    sums = student_hidden.new_zeros(2, dtype=torch.promote_types(student_hidden.dtype, torch.float32))
    sums = sums + 0.0 * student_hidden.sum()  # keeps the loss connected to the graph when nothing is scored
    for start in range(0, num_positions, chunk_size):
        stop = min(start + chunk_size, num_positions)
        args = (student_rows[start:stop], teacher_rows[start:stop], targets[start:stop])
        # the checkpoint drops this chunk's logits after the forward and rebuilds them in backward
        part = checkpoint(chunk_fn, *args, use_reentrant=False) if recompute else chunk_fn(*args)
        sums = sums + part
    ce_sum, div_sum = sums[0], sums[1]
    loss = (alpha * ce_sum + (1.0 - alpha) * temperature**2 * div_sum) / normalizer
    return DistillationLossOutput(loss, ce_sum.detach(), div_sum.detach(), num_positions)


# --------------------------------------------------------------------------------------------------
# Trainer
# --------------------------------------------------------------------------------------------------


def _head_rows(model) -> int:
    head = model.get_output_embeddings()
    if head is None:
        raise DistillationError(f"{type(model).__name__} has no output head (get_output_embeddings() is None).")
    return head.weight.shape[0]


def _check_same_vocabulary(student_vocab, teacher_vocab, student_fp, teacher_fp) -> None:
    """Refuse two vocabularies that differ, naming the swap that kept source words when that is the cause."""
    if student_vocab == teacher_vocab:
        return
    teacher_name, student_name = teacher_fp["name_or_path"] or "?", student_fp["name_or_path"] or "?"
    extends = len(student_vocab) > len(teacher_vocab) and all(
        student_vocab.get(token) == index for token, index in teacher_vocab.items()
    )
    if extends:
        raise DistillationError(
            f"The student's vocabulary extends the teacher's ({teacher_name}) by "
            f"{len(student_vocab) - len(teacher_vocab)} tokens (a swap with keep_source_words): token-level "
            "distillation needs one vocabulary. Swap without keep_source_words to distill from this teacher, "
            "or recover with self-distillation from the original model (`swapper.train()`)."
        )
    raise DistillationError(
        f"The teacher's tokenizer ({teacher_name}, {teacher_fp['vocab_size']} tokens) "
        f"differs from the student's ({student_name}, {student_fp['vocab_size']} tokens). "
        "Token-level distillation compares the two next-token distributions id by id, so both must use one "
        "vocabulary: swap the student's tokenizer first (`tokswap swap STUDENT TEACHER`), then distill."
    )


def check_teacher_compatible(tokenizer, teacher_model, teacher_tokenizer=None, student_model=None) -> int:
    """Refuse a teacher that does not share the student's vocabulary; return the number of compared ids.

    Args:
        tokenizer: the student's tokenizer.
        teacher_model: the teacher model.
        teacher_tokenizer (*optional*): the teacher's tokenizer; compared by vocabulary hash when given.
        student_model (*optional*): checked to have at least `len(tokenizer)` output rows.

    Returns:
        `int`: `len(tokenizer)`, the number of leading logit columns both distributions use.
    """
    vocab_size = len(tokenizer)
    if teacher_tokenizer is not None:
        student_fp, teacher_fp = tokenizer_fingerprint(tokenizer), tokenizer_fingerprint(teacher_tokenizer)
        same_fingerprint = (student_fp["vocab_size"], student_fp["vocab_hash"]) == (
            teacher_fp["vocab_size"],
            teacher_fp["vocab_hash"],
        )
        # The fingerprint also covers special-token roles (e.g. a pad token set for training); ids that mean the
        # same tokens are all distillation needs.
        if not same_fingerprint:
            _check_same_vocabulary(tokenizer.get_vocab(), teacher_tokenizer.get_vocab(), student_fp, teacher_fp)
    # The base vocabulary must be covered by both heads. A few added tokens past a head's rows (Gemma-3's
    # tokenizer has 262145 entries for 262144 rows) can never be predicted by it: leave them out of the divergence.
    base_vocab_size = min(vocab_size, int(getattr(tokenizer, "vocab_size", vocab_size) or vocab_size))
    models = [("teacher", teacher_model)] + ([("student", student_model)] if student_model is not None else [])
    for role, model in models:
        rows = _head_rows(model)
        if rows < base_vocab_size:
            raise DistillationError(
                f"The {role}'s output head has {rows} rows but the tokenizer has {vocab_size} tokens: they do not "
                "share a vocabulary. Swap the student's tokenizer to the teacher's first."
            )
        if rows < vocab_size:
            logger.warning(
                "The %s's output head has %d rows for %d tokens: ids >= %d (added tokens) are left out of the "
                "divergence.",
                role,
                rows,
                vocab_size,
                rows,
            )
            vocab_size = rows
    return vocab_size


def _hidden_states(model, model_inputs):
    """Final (normed) hidden states from the model's own forward, which computes logits for one position only."""
    try:
        outputs = model(**model_inputs, output_hidden_states=True, logits_to_keep=1)
    except TypeError as err:  # a model whose forward has no `logits_to_keep`: full logits, more memory
        if "logits_to_keep" not in str(err):
            raise
        outputs = model(**model_inputs, output_hidden_states=True)
    return outputs.hidden_states[-1]


class TokenDistillationTrainer(PublicHubTelemetryMixin, SFTTrainer):
    """`SFTTrainer` whose loss is `alpha * CE + (1 - alpha) * T^2 * D(teacher_T || student_T)` (see
    [`TokenDistillationConfig`]), computed in chunks so that no full-vocabulary logits tensor is built.

    Args:
        model: the student (a model, or a path / id).
        teacher_model: the teacher (a model, or a path / id loaded with `args.teacher_model_init_kwargs`). It is
            frozen, kept in eval mode and moved to the student's device.
        args ([`TokenDistillationConfig`], *optional*)
        train_dataset, eval_dataset, processing_class: as for `SFTTrainer`; `processing_class` is the student's
            tokenizer and must be the teacher's too.
        teacher_tokenizer (*optional*): the teacher's tokenizer for the compatibility check (loaded from the
            teacher's path when the teacher is given as one).
        allow_nonfinite (`bool`, defaults to `False`): only warn when the student's or the teacher's weights hold
            NaN/inf values (by default that is a `NonFiniteError`).
        **kwargs: passed to `SFTTrainer`. A `NonFiniteLossCallback` is always added to `callbacks`: a NaN/inf
            loss or gradient norm stops the run with an error.
    """

    _tag_names = ["trl", "sft", "tokswap", "distillation"]
    _name = "TokenDistillation"

    def __init__(
        self,
        model,
        teacher_model,
        args: Optional[TokenDistillationConfig] = None,
        train_dataset=None,
        eval_dataset=None,
        processing_class=None,
        teacher_tokenizer=None,
        allow_nonfinite: bool = False,
        **kwargs,
    ):
        if args is None:
            args = TokenDistillationConfig(output_dir="tokswap-distilled")
        elif not isinstance(args, TokenDistillationConfig):
            raise DistillationError(
                f"args must be a TokenDistillationConfig, got {type(args).__name__}: it carries alpha, temperature, "
                "divergence and distill_chunk_size."
            )
        if teacher_model is None:
            raise DistillationError("A teacher_model is required.")
        if isinstance(teacher_model, str):
            from transformers import AutoModelForCausalLM, AutoTokenizer

            check_local_path(teacher_model, "The teacher")
            init_kwargs = dict(args.teacher_model_init_kwargs or {})
            init_kwargs.setdefault("trust_remote_code", args.trust_remote_code)
            if teacher_tokenizer is None:
                try:
                    teacher_tokenizer = AutoTokenizer.from_pretrained(teacher_model)
                except (OSError, ValueError):
                    logger.warning(
                        "No tokenizer found with the teacher %s: only its vocabulary size is checked.", teacher_model
                    )
            teacher_model = AutoModelForCausalLM.from_pretrained(teacher_model, **init_kwargs)
        check_finite(teacher_model, "the teacher", allow_nonfinite)
        if not isinstance(model, str):  # a student given by path is checked once SFTTrainer has loaded it
            check_finite(model, "the student", allow_nonfinite)
        kwargs["callbacks"] = with_non_finite_check(kwargs.get("callbacks"))
        if processing_class is not None and not isinstance(model, str):
            # align first so SFTTrainer's silent rewrite of the special ids is a no-op
            align_special_token_ids(model, getattr(processing_class, "tokenizer", processing_class))
            self._vocab_size = check_teacher_compatible(
                getattr(processing_class, "tokenizer", processing_class), teacher_model, teacher_tokenizer, model
            )
        super().__init__(
            model=model,
            args=args,
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
            processing_class=processing_class,
            **kwargs,
        )
        if isinstance(model, str):
            check_finite(self.model, "the student", allow_nonfinite)
        tokenizer = getattr(self.processing_class, "tokenizer", self.processing_class)
        self._vocab_size = check_teacher_compatible(tokenizer, teacher_model, teacher_tokenizer, self.model)

        teacher_model.eval()
        teacher_model.requires_grad_(False)
        if self.is_deepspeed_enabled:
            from trl.models.utils import prepare_deepspeed

            self.teacher_model = prepare_deepspeed(teacher_model, self.accelerator)
        else:
            self.teacher_model = teacher_model.to(self.accelerator.device)
        self._teacher_unwrapped = teacher_model
        self._student_transform = logits_transform(self.accelerator.unwrap_model(self.model))
        self._teacher_transform = logits_transform(teacher_model)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        mode = "train" if self.model.training else "eval"
        labels = inputs["labels"]
        model_inputs = {k: v for k, v in inputs.items() if k not in ("labels", "shift_labels")}
        model_inputs["use_cache"] = False

        student_hidden = _hidden_states(model, model_inputs)
        self.teacher_model.eval()
        with torch.no_grad():
            teacher_hidden = _hidden_states(self.teacher_model, model_inputs)

        student = self.accelerator.unwrap_model(model)
        out = token_distillation_loss(
            student_hidden,
            teacher_hidden,
            labels,
            student_head=student.get_output_embeddings(),
            teacher_head=self._teacher_unwrapped.get_output_embeddings(),
            vocab_size=self._vocab_size,
            alpha=self.args.alpha,
            temperature=self.args.temperature,
            divergence=self.args.divergence,
            chunk_size=self.args.distill_chunk_size,
            num_items_in_batch=num_items_in_batch,
            student_transform=self._student_transform,
            teacher_transform=self._teacher_transform,
        )
        loss = out.loss
        # like SFTTrainer: num_items_in_batch counts every rank's tokens and DDP averages the gradients
        if self.args.average_tokens_across_devices and num_items_in_batch is not None:
            loss = loss * self.accelerator.num_processes

        device = student_hidden.device
        count = self.accelerator.gather_for_metrics(torch.tensor(float(out.num_positions), device=device)).sum()
        ce = self.accelerator.gather_for_metrics(out.ce_sum.float().reshape(1)).sum()
        div = self.accelerator.gather_for_metrics(out.divergence_sum.float().reshape(1)).sum()
        if count > 0:
            self._metrics[mode]["ce_loss"].append((ce / count).item())
            self._metrics[mode][self.args.divergence].append((div / count).item())

        if return_outputs:
            with torch.no_grad():
                outputs = model(**model_inputs)
            return loss, outputs
        return loss


def distill(
    student,
    tokenizer,
    teacher,
    train_dataset,
    config: Optional[TokenDistillationConfig] = None,
    eval_dataset=None,
    teacher_tokenizer=None,
    callbacks=None,
    allow_nonfinite: bool = False,
) -> TokenDistillationTrainer:
    """Distill `teacher` into `student` (which must already use the teacher's tokenizer) and return the trainer.

    Args:
        student: the student model (e.g. a swapped model after `adapt_vocabulary`).
        tokenizer: the shared tokenizer.
        teacher: the teacher model, or its path / id.
        train_dataset: a `"text"` or `"input_ids"` dataset.
        config ([`TokenDistillationConfig`], *optional*)
        eval_dataset (*optional*)
        teacher_tokenizer (*optional*): checked against `tokenizer`.
        callbacks (*optional*): `TrainerCallback`s (a `NonFiniteLossCallback` is always added).
        allow_nonfinite (`bool`, defaults to `False`): only warn when a model's weights hold NaN/inf values.

    Returns:
        [`TokenDistillationTrainer`]: after training; the student is `trainer.model`, the logs
        `trainer.state.log_history`.
    """
    config = config or TokenDistillationConfig(output_dir="tokswap-distilled")
    trainer = TokenDistillationTrainer(
        model=student,
        teacher_model=teacher,
        args=config,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        processing_class=tokenizer,
        teacher_tokenizer=teacher_tokenizer,
        callbacks=callbacks,
        allow_nonfinite=allow_nonfinite,
    )
    return train_single_stage(trainer, DistillationError)


# --------------------------------------------------------------------------------------------------
__all__ = [
    "DIVERGENCES",
    "DistillationError",
    "DistillationLossOutput",
    "TokenDistillationConfig",
    "TokenDistillationTrainer",
    "check_teacher_compatible",
    "distill",
    "logits_transform",
    "token_distillation_loss",
]
