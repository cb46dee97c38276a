"""Two-stage vocabulary adaptation on TRL's `SFTTrainer` (TokAlign's progressive tuning).

After a tokenizer swap the body of the model is intact but its input and output embeddings speak a
new vocabulary. TokAlign trains the model back in two stages:

1. only the input embeddings and the output head (learning rate 6.4e-4), everything else frozen;
2. the whole model (learning rate 5e-5 in the paper; 2e-4 here, measured better at 50-200 steps), or LoRA
   adapters on the body with the embeddings fully trainable.

Both stages are plain `trl.SFTTrainer` runs configured by [`VocabAdaptationConfig`], so checkpoints,
resuming, logging integrations (`report_to`) and `accelerate launch` work as in any TRL script.

Example:

```python
from tokswap.training import VocabAdaptationConfig, adapt_vocabulary

config = VocabAdaptationConfig(output_dir="smollm2-qwen-trained", stage1_max_steps=500, stage2_max_steps=2000)
result = adapt_vocabulary(model, tokenizer, train_dataset, config)
result.model.generate(...)
```
"""

from __future__ import annotations

import functools
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

import torch

from tokswap.errors import (
    NonFiniteError,
    TrainingError,
    check_fraction,
    check_positive,
    check_positive_int,
)
from tokswap.modeling import (
    align_special_token_ids,
    embedding_module_names,
    embedding_parameters,
    embeddings_are_tied,
    freeze_all_but_embeddings,
    freeze_embedding_rows,
    restrict_embedding_updates_to_batch,
)
from tokswap.trainer_utils import (
    _check_dataset,
    _checked_checkpoint,
    _existing_checkpoint,
    _nothing_to_resume,
    _restore_forward,
    _wants_latest,
    _world_size,
    bf16_supported,
    check_finite,
    checkpoint_problem,
    is_main_process,
    latest_checkpoint,
    launched_on_cpus,
    load_model_for_training,
    load_training_dataset,
    never_shrink_vocabulary,
    pick_attn_implementation,
    prepare_run_dir,
    resolve_resume_checkpoint,
    with_non_finite_check,
)
from tokswap.utils import check_run_dir, get_logger

logger = get_logger(__name__)

STAGE2_MODES = ("full", "lora", "none")
RECOVERY_MODES = ("auto", "self_distill", "ce")
FROZEN_ROWS_MODES = ("none", "copied")


# --------------------------------------------------------------------------------------------------
# Non-finite values: a NaN weight makes every loss NaN, and Trainer would happily "train" on it
# --------------------------------------------------------------------------------------------------


# --------------------------------------------------------------------------------------------------
# Hardware choices
# --------------------------------------------------------------------------------------------------


# --------------------------------------------------------------------------------------------------
# Config
# --------------------------------------------------------------------------------------------------


# Integer options of VocabAdaptationConfig that must be >= 1, with the `tokswap train` flag setting each.
_POSITIVE_INT_OPTIONS = {
    "per_device_train_batch_size": "--batch-size",
    "gradient_accumulation_steps": "--grad-accum",
    "max_length": "--max-length",
    "save_steps": "--save-steps",
    "logging_steps": "--logging-steps",
    "lora_r": "--lora-r",
    "lora_alpha": "--lora-alpha",
}


@dataclass
class VocabAdaptationConfig:
    r"""
    Recipe for training a model back to health after a tokenizer swap, defaulting to the TokAlign paper.

    Each stage is one `SFTTrainer` run whose `SFTConfig` is built from these fields (plus `sft_kwargs`, which
    override anything). Budgets: give each stage a number of optimizer steps (`stage1_max_steps`) or of
    training tokens (`stage1_tokens`, converted to steps with `per_device_train_batch_size *
    gradient_accumulation_steps * max_length * world_size` tokens per step, as packed sequences are full);
    with neither, a stage runs one epoch. A budget of 0 skips the stage. Measured on SmolLM2-135M (bench/RESULTS.md):
    at a small budget a short stage 1 (a fifth of the steps) recovers faster than the paper's long one.

    Parameters:
        output_dir (`str`): Where the stage checkpoints go (`<output_dir>/stage1`, `<output_dir>/stage2`) and
            where the final model and tokenizer are saved.
        stage1_learning_rate (`float`, defaults to `6.4e-4`): Peak learning rate of stage 1 (embeddings only).
        stage2_learning_rate (`float`, defaults to `2e-4`): Peak learning rate of stage 2 (whole model or LoRA).
        stage2 (`str`, defaults to `"full"`): `"full"` trains every parameter, `"lora"` trains LoRA adapters on
            the body plus the full embeddings, `"none"` skips stage 2.
        recovery (`str`, defaults to `"auto"`): what both stages train on. With the model before the swap as
            `teacher_model` (`TokenizerSwapper.train` passes it) and raw text, self-distillation from it: the
            swapped model's cross-entropy plus matching the original's next-token distribution at shared byte
            boundaries. Otherwise plain cross-entropy (`"ce"` forces it).
    """

    output_dir: str = field(
        default="tokswap-adapted",
        metadata={"help": "Where stage checkpoints (<output_dir>/stage1, /stage2) and the final model are written."},
    )
    # Budgets
    stage1_max_steps: Optional[int] = field(
        default=None,
        metadata={"help": "Optimizer steps of stage 1 (embeddings only). 0 skips the stage. Overrides stage1_tokens."},
    )
    stage2_max_steps: Optional[int] = field(
        default=None,
        metadata={
            "help": "Optimizer steps of stage 2 (whole model or LoRA). 0 skips the stage. Overrides stage2_tokens."
        },
    )
    stage1_tokens: Optional[int] = field(
        default=None,
        metadata={"help": "Training tokens of stage 1, converted to optimizer steps."},
    )
    stage2_tokens: Optional[int] = field(
        default=None,
        metadata={"help": "Training tokens of stage 2, converted to optimizer steps."},
    )
    # Optimization (the paper's recipe)
    stage1_learning_rate: float = field(
        default=6.4e-4, metadata={"help": "Peak learning rate of stage 1 (input embeddings and output head)."}
    )
    stage2_learning_rate: float = field(
        default=2e-4, metadata={"help": "Peak learning rate of stage 2 (the paper: 5e-5; 2e-4 beat 1e-4 here)."}
    )
    stage1_frozen_rows: str = field(
        default="none",
        metadata={
            "help": "Stage 1: 'copied' keeps the rows copied unchanged from the source model (byte-identical tokens "
            "and specials) fixed, so only the new tokens' rows train (needs the alignment, which "
            "`TokenizerSwapper.train` passes); 'none' trains every row."
        },
    )
    sparse_embedding_updates: bool = field(
        default=False,
        metadata={
            "help": "A row of the input embeddings / output head learns only from batches holding its token, so the "
            "rows of tokens the training text lacks keep their init instead of drifting under Adam."
        },
    )
    stage2_fresh_order: bool = field(
        default=False,
        metadata={
            "help": "Stage 2 reads the training data in an order of its own (data seed `seed + 1`). Off, both stages "
            "draw the same seeded order, so stage 2 first re-reads every batch stage 1 read: 40 + 160 steps of a "
            "large dataset read 640 distinct examples, the first 160 twice; on, stage 1's recur only by chance."
        },
    )
    optim: str = field(default="adamw_torch", metadata={"help": "Optimizer name understood by transformers (AdamW)."})
    lr_scheduler_type: str = field(default="cosine", metadata={"help": "Learning-rate schedule of each stage."})
    warmup_ratio: float = field(
        default=0.03, metadata={"help": "Fraction of each stage's steps used for linear warmup."}
    )
    weight_decay: float = field(default=0.01, metadata={"help": "AdamW weight decay."})
    max_grad_norm: float = field(default=1.0, metadata={"help": "Gradient clipping norm."})
    bf16: Optional[bool] = field(
        default=None,
        metadata={"help": "bf16 mixed precision. None chooses it when a CUDA GPU supports it (never on CPU)."},
    )
    # Data
    packing: bool = field(default=True, metadata={"help": "Pack tokenized documents into full sequences."})
    max_length: int = field(default=1024, metadata={"help": "Sequence length (the packed block size)."})
    dataset_text_field: str = field(
        default="text", metadata={"help": "Column holding raw text (ignored for pre-tokenized `input_ids` datasets)."}
    )
    per_device_train_batch_size: int = field(default=8, metadata={"help": "Sequences per device per micro-batch."})
    gradient_accumulation_steps: int = field(default=1, metadata={"help": "Micro-batches per optimizer step."})
    activation_checkpointing: bool = field(
        default=False, metadata={"help": "Recompute activations in backward to save memory (slower)."}
    )
    # Stage 2 variant
    stage2: str = field(default="full", metadata={"help": "Stage 2: 'full', 'lora' or 'none'."})
    lora_r: int = field(default=64, metadata={"help": "LoRA rank (stage2='lora')."})
    lora_alpha: int = field(default=128, metadata={"help": "LoRA scaling alpha (stage2='lora')."})
    lora_dropout: float = field(default=0.05, metadata={"help": "LoRA dropout (stage2='lora')."})
    lora_target_modules: Optional[Union[list[str], str]] = field(
        default=None,
        metadata={"help": "Modules given LoRA adapters. None means every linear layer except the output head."},
    )
    merge_adapters: bool = field(
        default=True, metadata={"help": "Merge the LoRA adapters into the weights at the end (stage2='lora')."}
    )
    # Recovery objective
    recovery: str = field(
        default="auto",
        metadata={
            "help": "'auto' (default): self_distill when the original model is given as teacher (TokenizerSwapper."
            "train gives it) and the data is raw text, else ce; 'self_distill': the model before the swap teaches "
            "the swapped one on the same text (tokswap.self_distillation; the best bits per byte after 200 steps "
            "in bench/results/leaderboard.md; a step takes 1.9x a ce step, bench/results/recovery_cost.md); 'ce': "
            "plain next-token cross-entropy."
        },
    )
    merge_original_weight: float = field(
        default=0.0,
        metadata={
            "help": "After stage 2, move the decoder weights this share of the way back to the model before the swap "
            "(WiSE-FT, tokswap.body_merge; embeddings are kept); 0 keeps the trained weights. Needs the original "
            "model as teacher_model (TokenizerSwapper.train passes it)."
        },
    )
    self_distill_ce_weight: float = field(
        default=1.0, metadata={"help": "Self-distillation: weight of the cross-entropy on the new tokens."}
    )
    self_distill_likelihood_weight: float = field(
        default=0.0, metadata={"help": "Self-distillation: weight of matching the original model's chunk likelihoods."}
    )
    self_distill_hidden_weight: float = field(
        default=0.0, metadata={"help": "Self-distillation: weight of matching its hidden states at shared boundaries."}
    )
    self_distill_prediction_weight: float = field(
        default=1.0,
        metadata={
            "help": "Self-distillation: weight of matching the original model's next-token distribution at shared "
            "boundaries, grouped by leading piece (0: off; with the cross-entropy, the measured best)."
        },
    )
    self_distill_split_weight: float = field(
        default=1.0,
        metadata={
            "help": "Self-distillation: weight of dividing each leading-piece group's mass among the new vocabulary's "
            "merges as the original model's next-token distribution after that piece does (tokswap.group_split; "
            "0: off; with the prediction term, the measured best)."
        },
    )
    self_distill_likelihood_loss: str = field(
        default="binary_kl", metadata={"help": "Self-distillation chunk-likelihood loss: 'binary_kl' or 'abs'."}
    )
    self_distill_hidden_layers: str = field(
        default="last", metadata={"help": "Self-distillation hidden states matched: 'last' or 'all' layers."}
    )
    self_distill_rehearsal_weight: float = field(
        default=0.0,
        metadata={
            "help": "Self-distillation: weight of rehearsing the pieces of the carved words the original model "
            "expects at shared boundaries (tokswap.carved_rehearsal; 0: off)."
        },
    )
    self_distill_rehearsal_whole_words: bool = field(
        default=False,
        metadata={"help": "Self-distillation: rehearse only whole words (a space, then letters)."},
    )
    self_distill_rehearsal_words: int = field(
        default=4, metadata={"help": "Self-distillation: carved words rehearsed per window."}
    )
    self_distill_rehearsal_min_prob: float = field(
        default=0.01, metadata={"help": "Self-distillation: least probability of a rehearsed word."}
    )
    # Checkpoints and logging
    save_steps: int = field(
        default=500, metadata={"help": "Save a checkpoint every N optimizer steps (and at the end)."}
    )
    save_total_limit: Optional[int] = field(default=None, metadata={"help": "Keep at most N checkpoints per stage."})
    save_final_model: bool = field(
        default=True, metadata={"help": "Save the adapted model and tokenizer to `output_dir` at the end."}
    )
    resume_from_checkpoint: Optional[Union[str, bool]] = field(
        default=None,
        metadata={
            "help": "True resumes from the newest checkpoint under output_dir; a path resumes from that checkpoint "
            "(inside <output_dir>/stage1 or /stage2)."
        },
    )
    report_to: Union[str, list[str]] = field(
        default="none", metadata={"help": "Where logs go: 'none', 'tensorboard', 'wandb', 'trackio', 'all', ..."}
    )
    logging_steps: int = field(default=10, metadata={"help": "Log every N optimizer steps."})
    seed: int = field(default=42, metadata={"help": "Random seed of both stages."})
    sft_kwargs: dict[str, Any] = field(
        default_factory=dict,
        metadata={"help": "Extra `SFTConfig` arguments applied to both stages (they override the fields above)."},
    )

    def __post_init__(self):
        if self.stage2 not in STAGE2_MODES:
            raise TrainingError(f"stage2={self.stage2!r} is not one of {STAGE2_MODES}.")
        if self.stage1_frozen_rows not in FROZEN_ROWS_MODES:
            raise TrainingError(f"stage1_frozen_rows={self.stage1_frozen_rows!r} is not one of {FROZEN_ROWS_MODES}.")
        if self.recovery not in RECOVERY_MODES:
            raise TrainingError(f"recovery={self.recovery!r} is not one of {RECOVERY_MODES}.")
        for name in ("stage1_max_steps", "stage2_max_steps", "stage1_tokens", "stage2_tokens"):
            value = getattr(self, name)
            if value is not None and value < 0:
                flag = "--" + name.replace("_max", "").replace("_", "-")
                raise TrainingError(f"{name} ({flag}) must be >= 0 (0 skips the stage), got {value}.")
        check_fraction(TrainingError, "warmup_ratio", self.warmup_ratio)
        # Zero or negative sizes are accepted by TRL and fail much later (or loop over nothing): refuse them here.
        for name, flag in _POSITIVE_INT_OPTIONS.items():
            check_positive_int(TrainingError, name, getattr(self, name), flag)
        for name, flag in (("stage1_learning_rate", "--stage1-lr"), ("stage2_learning_rate", "--stage2-lr")):
            check_positive(TrainingError, name, getattr(self, name), flag)
        check_positive_int(TrainingError, "save_total_limit", self.save_total_limit, optional=True)
        check_fraction(TrainingError, "lora_dropout", self.lora_dropout)
        check_fraction(
            TrainingError, "merge_original_weight", self.merge_original_weight, "--merge-original", closed=True
        )
        if self.merge_original_weight and self.stage2 == "lora" and not self.merge_adapters:
            raise TrainingError(
                "merge_original_weight moves merged weights: with stage2='lora' keep merge_adapters=True (drop --no-merge)."
            )
        if self.bf16 and not bf16_supported():
            raise TrainingError(
                "bf16=True needs a CUDA GPU with bf16 support; none is visible. Leave bf16 unset to choose automatically."
            )

    def tokens_per_step(self) -> int:
        """Training tokens consumed by one optimizer step across all processes."""
        return self.per_device_train_batch_size * self.gradient_accumulation_steps * self.max_length * _world_size()

    def stage_max_steps(self, stage: int) -> Optional[int]:
        """Optimizer steps of `stage` (1 or 2): an explicit step count, else the token budget in steps, else
        None (one epoch)."""
        steps = getattr(self, f"stage{stage}_max_steps")
        if steps is not None:
            return int(steps)
        tokens = getattr(self, f"stage{stage}_tokens")
        if tokens is not None:
            return int(math.ceil(tokens / self.tokens_per_step()))
        return None

    def stage_output_dir(self, stage: int) -> str:
        return os.path.join(self.output_dir, f"stage{stage}")

    def to_sft_config(self, stage: int, **overrides):
        """Build the `trl.SFTConfig` of one stage.

        Args:
            stage (`int`): 1 or 2.
            **overrides: extra `SFTConfig` arguments (applied after `sft_kwargs`).

        Returns:
            `trl.SFTConfig`
        """
        from trl import SFTConfig

        return SFTConfig(**self._stage_kwargs(stage, overrides))

    def to_self_distillation_config(self, stage: int, **overrides):
        """Build the [`~tokswap.self_distillation.SelfDistillationConfig`] of one stage (self-distillation recovery)."""
        from tokswap.self_distillation import SelfDistillationConfig

        kwargs = self._stage_kwargs(stage, overrides)
        kwargs.pop("packing", None)  # windows are cut at shared boundaries, never packed
        return SelfDistillationConfig(
            ce_weight=self.self_distill_ce_weight,
            likelihood_weight=self.self_distill_likelihood_weight,
            hidden_weight=self.self_distill_hidden_weight,
            prediction_weight=self.self_distill_prediction_weight,
            split_weight=self.self_distill_split_weight,
            likelihood_loss=self.self_distill_likelihood_loss,
            hidden_layers=self.self_distill_hidden_layers,
            rehearsal_weight=self.self_distill_rehearsal_weight,
            rehearsal_whole_words=self.self_distill_rehearsal_whole_words,
            rehearsal_words=self.self_distill_rehearsal_words,
            rehearsal_min_prob=self.self_distill_rehearsal_min_prob,
            **kwargs,
        )

    def _stage_kwargs(self, stage: int, overrides: dict) -> dict:
        """The trainer arguments of one stage, shared by the cross-entropy and self-distillation configs."""
        max_steps = self.stage_max_steps(stage)
        kwargs = dict(
            output_dir=self.stage_output_dir(stage),
            learning_rate=self.stage1_learning_rate if stage == 1 else self.stage2_learning_rate,
            max_steps=-1 if max_steps is None else max_steps,
            num_train_epochs=1.0,
            optim=self.optim,
            lr_scheduler_type=self.lr_scheduler_type,
            # transformers 5 reads a float in [0, 1) as a ratio of the total steps
            warmup_steps=float(self.warmup_ratio),
            weight_decay=self.weight_decay,
            max_grad_norm=self.max_grad_norm,
            bf16=bf16_supported() if self.bf16 is None else self.bf16,
            packing=self.packing,
            max_length=self.max_length,
            dataset_text_field=self.dataset_text_field,
            per_device_train_batch_size=self.per_device_train_batch_size,
            gradient_accumulation_steps=self.gradient_accumulation_steps,
            # Passed explicitly: TRL's default turns it on through a deprecated alias, which warns
            activation_checkpointing=self.activation_checkpointing,
            save_strategy="steps",
            save_steps=self.save_steps,
            save_total_limit=self.save_total_limit,
            report_to=self.report_to,
            logging_steps=self.logging_steps,
            # show NaN/inf losses in the logs (NonFiniteLossCallback stops on them) instead of averaging them away
            logging_nan_inf_filter=False,
            seed=self.seed,
        )
        if stage == 2 and self.stage2_fresh_order:
            kwargs["data_seed"] = self.seed + 1  # the sampler's order; `seed` still seeds everything else
        if launched_on_cpus():
            kwargs["use_cpu"] = True  # see launched_on_cpus: otherwise every process trains alone
        kwargs.update(self.sft_kwargs)
        kwargs.update(overrides)
        return kwargs


@dataclass
class AdaptationResult:
    """What `adapt_vocabulary` returns.

    Args:
        model: the adapted model (a `PeftModel` only when stage 2 used LoRA with `merge_adapters=False`).
        stage1_log_history / stage2_log_history (`list[dict]`): the `Trainer` log history of each stage
            (empty for a skipped stage).
        stage1_output_dir / stage2_output_dir (`str` or None): checkpoint folders of the stages that ran.
        final_output_dir (`str` or None): where the final model and tokenizer were saved.
        global_steps (`dict[int, int]`): the final global step of each stage that ran.
    """

    model: Any
    stage1_log_history: list = field(default_factory=list)
    stage2_log_history: list = field(default_factory=list)
    stage1_output_dir: Optional[str] = None
    stage2_output_dir: Optional[str] = None
    final_output_dir: Optional[str] = None
    global_steps: dict = field(default_factory=dict)


# --------------------------------------------------------------------------------------------------
# Model helpers: embeddings by identity, special tokens, vocabulary size
# --------------------------------------------------------------------------------------------------


# --------------------------------------------------------------------------------------------------
# Checkpoints
# --------------------------------------------------------------------------------------------------


def _plan_resume(config: VocabAdaptationConfig) -> tuple[Optional[str], Optional[str]]:
    """Decide which checkpoint each stage resumes from: (stage-1 checkpoint, stage-2 checkpoint)."""
    resume = config.resume_from_checkpoint
    if not resume:
        return None, None
    if _wants_latest(resume):
        stage2 = latest_checkpoint(config.stage_output_dir(2))
        if stage2 is not None:
            return None, stage2  # stage 2's checkpoint already holds everything stage 1 produced
        stage1 = latest_checkpoint(config.stage_output_dir(1))
        if stage1 is None:
            raise _nothing_to_resume(TrainingError, f"{config.output_dir} (stage1/, stage2/)")
        return stage1, None
    path = _existing_checkpoint(resume, TrainingError)
    if path.parent.name == "stage2":
        return None, str(_checked_checkpoint(path, TrainingError))
    if path.parent.name == "stage1":
        return str(_checked_checkpoint(path, TrainingError)), None
    raise TrainingError(
        f"Cannot tell which stage {resume} belongs to: pass a checkpoint inside <output_dir>/stage1 or "
        "<output_dir>/stage2, or resume_from_checkpoint=True."
    )


# --------------------------------------------------------------------------------------------------
# The two stages
# --------------------------------------------------------------------------------------------------


def _lora_config(model, config: VocabAdaptationConfig):
    from peft import LoraConfig

    tied = embeddings_are_tied(model)
    return LoraConfig(
        r=config.lora_r,
        lora_alpha=config.lora_alpha,
        lora_dropout=config.lora_dropout,
        # "all-linear" leaves out the output head, which must be trained fully instead
        target_modules=config.lora_target_modules or "all-linear",
        # the new vocabulary lives in these: train them fully, found by identity not by name
        modules_to_save=embedding_module_names(model),
        ensure_weight_tying=tied,
        task_type="CAUSAL_LM",
    )


@functools.cache
def stage_trainer_class():
    """TRL's `SFTTrainer` as one cross-entropy stage runs it: its telemetry ping only ever goes to the public Hub."""
    from trl import SFTTrainer

    from tokswap.telemetry import PublicHubTelemetryMixin

    class StageTrainer(PublicHubTelemetryMixin, SFTTrainer):
        pass

    return StageTrainer


def _run_stage(
    stage, model, tokenizer, train_dataset, eval_dataset, config, resume, callbacks, peft_config=None, teacher=None
):
    with never_shrink_vocabulary(model), _restore_forward(model):
        if teacher is None:
            trainer = stage_trainer_class()(
                model=model,
                args=config.to_sft_config(stage),
                train_dataset=train_dataset,
                eval_dataset=eval_dataset,
                processing_class=tokenizer,
                peft_config=peft_config,
                callbacks=callbacks,
            )
        else:
            from tokswap.self_distillation import SelfDistillationTrainer

            trainer = SelfDistillationTrainer(
                model=model,
                teacher_model=teacher[0],
                teacher_tokenizer=teacher[1],
                args=config.to_self_distillation_config(stage),
                train_dataset=train_dataset,
                eval_dataset=eval_dataset,
                processing_class=tokenizer,
                peft_config=peft_config,
                callbacks=callbacks,
            )
        handles = restrict_embedding_updates_to_batch(trainer.model) if config.sparse_embedding_updates else []
        try:
            trainer.train(resume_from_checkpoint=resume)
        finally:
            for handle in handles:
                handle.remove()
    trainer.save_state()
    return trainer.model, list(trainer.state.log_history), trainer.state.global_step


def adapt_vocabulary(
    model,
    tokenizer,
    train_dataset,
    config: Optional[VocabAdaptationConfig] = None,
    eval_dataset=None,
    callbacks=None,
    teacher_model=None,
    teacher_tokenizer=None,
    allow_nonfinite: bool = False,
    alignment=None,
) -> AdaptationResult:
    """Train a swapped model on its new vocabulary in two stages (TokAlign's recipe) with TRL's `SFTTrainer`.

    Stage 1 trains only the input embeddings and the output head (tied-aware: a tied weight is one parameter);
    stage 2 trains the whole model, or LoRA adapters plus the full embeddings (`config.stage2="lora"`). The
    model's special-token ids are aligned with the tokenizer's first, so TRL's silent rewrite changes nothing,
    and the (padded) vocabulary is never shrunk to `len(tokenizer)`.

    Args:
        model (`PreTrainedModel`): a causal LM, typically fresh out of `tokswap swap`.
        tokenizer (`PreTrainedTokenizerBase`): its (new) tokenizer.
        train_dataset (`datasets.Dataset` or `IterableDataset`): a `"text"` column (raw text, packed) or an
            `"input_ids"` column (pre-tokenized).
        config (`VocabAdaptationConfig`, *optional*): the recipe; the paper's defaults when omitted.
        eval_dataset (*optional*): evaluated by both stages when `sft_kwargs` sets an `eval_strategy`.
        teacher_model / teacher_tokenizer (*optional*): the model *before* the swap and its own tokenizer. With them
            (and `config.recovery` "auto" or "self_distill") both stages train by self-distillation across the swap
            (`tokswap.self_distillation`) on the same text instead of plain cross-entropy.
        callbacks (`list[TrainerCallback]`, *optional*): added to both stages' trainers. A
            `NonFiniteLossCallback` is always added: a NaN/inf loss or gradient norm stops the run with an error.
        allow_nonfinite (`bool`, defaults to `False`): only warn when the model's weights hold NaN/inf values
            (by default that is a `NonFiniteError` before training starts).
        alignment ([`TokenAlignment`], *optional*): the swap's alignment; needed by
            `config.stage1_frozen_rows="copied"` to know which rows were copied unchanged.

    Returns:
        [`AdaptationResult`]
    """
    config = config or VocabAdaptationConfig()
    _check_dataset(train_dataset, config.dataset_text_field)
    check_run_dir(config.output_dir, config.resume_from_checkpoint)  # before any work; marked when training starts
    frozen_rows = _stage1_frozen_rows(config, alignment)
    check_finite(model, "the model to train", allow_nonfinite)
    callbacks = with_non_finite_check(callbacks)
    align_special_token_ids(model, tokenizer)
    teacher = _recovery_teacher(config, teacher_model, teacher_tokenizer, train_dataset)
    _check_merge_original(config, teacher_model)
    if teacher is not None:  # both tokenizations are built once and shared by the two stages
        train_dataset = _self_distillation_data(train_dataset, tokenizer, teacher, config)
        eval_dataset = _self_distillation_data(eval_dataset, tokenizer, teacher, config)
    resume1, resume2 = _plan_resume(config)
    prepare_run_dir(config.output_dir, "adapt_vocabulary", config.resume_from_checkpoint)
    result = AdaptationResult(model=model)
    data = (train_dataset, eval_dataset)
    model = _stage1(model, tokenizer, data, config, resume1, resume2, callbacks, teacher, result, frozen_rows)
    model = _stage2(model, tokenizer, data, config, resume2, callbacks, teacher, result)
    _merge_original(model, config, teacher_model)
    model.requires_grad_(True)
    result.model = model
    if config.save_final_model and is_main_process():
        model.save_pretrained(config.output_dir)
        tokenizer.save_pretrained(config.output_dir)
        result.final_output_dir = config.output_dir
    return result


def _check_merge_original(config: VocabAdaptationConfig, original) -> None:
    """Before training: `merge_original_weight` needs the model before the swap."""
    if config.merge_original_weight and original is None:
        raise TrainingError(
            "merge_original_weight needs the model before the swap: pass teacher_model= (TokenizerSwapper.train does "
            "this for you), or set merge_original_weight=0."
        )


def _merge_original(model, config: VocabAdaptationConfig, original) -> None:
    """After stage 2: the decoder weights moved `merge_original_weight` of the way back to the original's."""
    if config.merge_original_weight:
        from tokswap.body_merge import merge_body_with_original

        merged = merge_body_with_original(model, original, config.merge_original_weight)
        logger.info(
            "Moved %d decoder weights %g of the way back to the original.", merged, config.merge_original_weight
        )


def _self_distillation_data(dataset, tokenizer, teacher, config: VocabAdaptationConfig):
    """The dataset tokenized by both the swapped model's and the teacher's tokenizers (None stays None)."""
    if dataset is None:
        return None
    from tokswap.self_distillation import build_self_distillation_dataset

    return build_self_distillation_dataset(
        _text_column(dataset, config.dataset_text_field), tokenizer, teacher[1], config.max_length
    )


def _stage1_frozen_rows(config: VocabAdaptationConfig, alignment):
    """The target ids stage 1 keeps fixed (None: every row trains)."""
    if config.stage1_frozen_rows == "none":
        return None
    if alignment is None or alignment.row_sources is None:
        raise TrainingError(
            "stage1_frozen_rows='copied' needs the swap's alignment to know which rows were copied: pass "
            "alignment= to adapt_vocabulary, or train through TokenizerSwapper.train."
        )
    return alignment.copied_rows()


def _stage1(
    model, tokenizer, data, config, resume1, resume2, callbacks, teacher, result: AdaptationResult, frozen_rows=None
):
    """Stage 1: only the input embeddings and the output head train (minus `frozen_rows`). Skipped when stage 2
    resumes (its log is read back from the stage-1 folder)."""
    if config.stage_max_steps(1) != 0 and resume2 is None:
        freeze_all_but_embeddings(model)
        trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
        logger.info("Stage 1: training %d embedding parameters (lr %g).", trainable, config.stage1_learning_rate)
        handles = [] if frozen_rows is None else freeze_embedding_rows(model, frozen_rows)
        if handles:
            logger.info("Stage 1: %d rows copied from the source model stay fixed.", len(frozen_rows))
        try:
            model, history, step = _run_stage(1, model, tokenizer, *data, config, resume1, callbacks, teacher=teacher)
        finally:
            for handle in handles:
                handle.remove()
        result.stage1_log_history, result.stage1_output_dir = history, config.stage_output_dir(1)
        result.global_steps[1] = step
    elif resume2 is not None:
        state_file = Path(config.stage_output_dir(1), "trainer_state.json")
        if state_file.is_file():
            result.stage1_log_history = json.loads(state_file.read_text()).get("log_history", [])
    return model


def _stage2(model, tokenizer, data, config, resume2, callbacks, teacher, result: AdaptationResult):
    """Stage 2: the whole model, or LoRA adapters plus the full embeddings (merged at the end when asked)."""
    if config.stage2 == "none" or config.stage_max_steps(2) == 0:
        return model
    model.requires_grad_(True)
    peft_config = _lora_config(model, config) if config.stage2 == "lora" else None
    logger.info("Stage 2 (%s): lr %g.", config.stage2, config.stage2_learning_rate)
    model, history, step = _run_stage(
        2, model, tokenizer, *data, config, resume2, callbacks, peft_config=peft_config, teacher=teacher
    )
    result.stage2_log_history, result.stage2_output_dir = history, config.stage_output_dir(2)
    result.global_steps[2] = step
    if peft_config is not None and config.merge_adapters:
        model = merge_lora_adapters(model)
    return model


def _recovery_teacher(config: VocabAdaptationConfig, teacher_model, teacher_tokenizer, dataset):
    """(teacher model, teacher tokenizer) when the run self-distills, else None."""
    if config.recovery == "ce" or (config.recovery == "auto" and (teacher_model is None or teacher_tokenizer is None)):
        return None
    if config.recovery == "auto" and config.dataset_text_field not in (getattr(dataset, "column_names", None) or []):
        # self-distillation tokenizes raw text with both tokenizers; pre-tokenized data can only train by CE
        logger.info(
            "recovery='auto': the dataset has no %r column, so training is plain CE.", config.dataset_text_field
        )
        return None
    if teacher_model is None or teacher_tokenizer is None:
        raise TrainingError(
            "recovery='self_distill' needs the model before the swap and its tokenizer: pass teacher_model= and "
            "teacher_tokenizer= (TokenizerSwapper.train does this for you), or use recovery='ce'."
        )
    check_finite(teacher_model, "the self-distillation teacher (the model before the swap)")
    return teacher_model, teacher_tokenizer


def _text_column(dataset, text_field: str):
    """The raw texts of a training set (self-distillation tokenizes them with both tokenizers itself)."""
    columns = getattr(dataset, "column_names", None) or []
    if text_field not in columns:
        raise TrainingError(
            f"Self-distillation reads raw text, but the dataset has columns {columns} and no {text_field!r} column. "
            "Pass a text dataset, or use recovery='ce' for pre-tokenized data."
        )
    return dataset[text_field]


def merge_lora_adapters(peft_model):
    """Merge LoRA adapters into the base weights and return the plain model.

    The fully trained embedding copies (`modules_to_save`) replace the originals; a tied input/output weight
    stays tied (re-tied if PEFT untied it while merging).
    """
    base = peft_model.get_base_model()
    was_tied = embeddings_are_tied(base) or bool(getattr(base.config.get_text_config(), "tie_word_embeddings", False))
    merged = peft_model.merge_and_unload()
    if was_tied and not embeddings_are_tied(merged):
        output, inputs = merged.get_output_embeddings(), merged.get_input_embeddings()
        if torch.equal(output.weight, inputs.weight):
            output.weight = inputs.weight
    return merged


# --------------------------------------------------------------------------------------------------
# Datasets from files (CLI)
# --------------------------------------------------------------------------------------------------


def __getattr__(name):
    # re-exported from tokswap.trainer_utils, where it is built on first use (it subclasses transformers' callback)
    if name == "NonFiniteLossCallback":
        from tokswap import trainer_utils

        return trainer_utils.NonFiniteLossCallback
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "AdaptationResult",
    "NonFiniteError",
    "NonFiniteLossCallback",  # noqa: F822 (built on first access by the module __getattr__)
    "TrainingError",
    "VocabAdaptationConfig",
    "adapt_vocabulary",
    "align_special_token_ids",
    "bf16_supported",
    "check_finite",
    "embedding_module_names",
    "embedding_parameters",
    "embeddings_are_tied",
    "freeze_all_but_embeddings",
    "checkpoint_problem",
    "latest_checkpoint",
    "resolve_resume_checkpoint",
    "load_model_for_training",
    "load_training_dataset",
    "merge_lora_adapters",
    "never_shrink_vocabulary",
    "pick_attn_implementation",
]
