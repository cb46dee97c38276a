"""`tokswap train MODEL --dataset ... --output DIR`: two-stage vocabulary adaptation (`tokswap.training`)."""

from __future__ import annotations

import json
from pathlib import Path

from tokswap.cli.run_flags import add_run_arguments, run_arguments
from tokswap.constants import ALIGNMENT_SUBFOLDER
from tokswap.training import (
    FROZEN_ROWS_MODES,
    RECOVERY_MODES,
    STAGE2_MODES,
    TrainingError,
    VocabAdaptationConfig,
    _check_dataset,
    adapt_vocabulary,
    is_main_process,
    load_model_for_training,
    load_training_dataset,
)
from tokswap.utils import check_local_path, check_run_dir
from tokswap.utils.cli import examples_formatter

TRAIN_EXAMPLES = """examples:
  tokswap train smollm2-qwen --dataset corpus.jsonl --output smollm2-qwen-trained --stage1-steps 500 --stage2-steps 500
  tokswap train smollm2-qwen --dataset corpus.txt --output run --stage2 lora --lora-r 16 --recovery ce
  torchrun --nproc_per_node 2 -m tokswap.cli train smollm2-qwen --dataset corpus.jsonl --output run
  accelerate launch --config_file templates/accelerate/multi_gpu.yaml -m tokswap.cli train smollm2-qwen \\
      --dataset corpus.jsonl --output run
"""


def register_cli(subparsers) -> None:
    """Add `tokswap train MODEL_DIR --dataset PATH --output DIR [...]`."""
    parser = subparsers.add_parser(
        "train",
        help="two-stage vocabulary adaptation (embeddings, then the whole model or LoRA) with TRL",
        description="Train a swapped model on its new vocabulary: stage 1 trains only the embeddings and the "
        "output head, stage 2 the whole model (or LoRA adapters). Runs under `accelerate launch` for multi-GPU.",
    )
    parser.epilog = TRAIN_EXAMPLES
    parser.formatter_class = examples_formatter(parser.formatter_class)
    parser.add_argument(
        "model_dir", help="model folder (or Hub id) with its tokenizer, e.g. the output of `tokswap swap`"
    )
    parser.add_argument(
        "--dataset", required=True, help=".txt, .jsonl/.json, .parquet, a save_to_disk folder, or a folder of files"
    )
    parser.add_argument(
        "--output", required=True, help="output folder: checkpoints in stage1/ and stage2/, final model at the top"
    )
    defaults = VocabAdaptationConfig()
    parser.add_argument("--stage1-steps", type=int, default=None, help="optimizer steps of stage 1 (0 skips it)")
    parser.add_argument("--stage2-steps", type=int, default=None, help="optimizer steps of stage 2 (0 skips it)")
    parser.add_argument("--stage1-tokens", type=int, default=None, help="token budget of stage 1 (instead of steps)")
    parser.add_argument("--stage2-tokens", type=int, default=None, help="token budget of stage 2 (instead of steps)")
    parser.add_argument("--stage2", choices=STAGE2_MODES, default=defaults.stage2, help="what stage 2 trains")
    parser.add_argument("--stage1-lr", type=float, default=defaults.stage1_learning_rate)
    parser.add_argument("--stage2-lr", type=float, default=defaults.stage2_learning_rate)
    parser.add_argument(
        "--stage1-frozen-rows",
        choices=FROZEN_ROWS_MODES,
        default=defaults.stage1_frozen_rows,
        help="copied: stage 1 keeps the rows copied unchanged from the source model fixed (needs "
        f"MODEL_DIR/{ALIGNMENT_SUBFOLDER}, written by `tokswap swap`); none: every row trains",
    )
    parser.add_argument(
        "--sparse-embedding-updates",
        action="store_true",
        help="an embedding / head row learns only from batches holding its token (unseen rows keep their init)",
    )
    parser.add_argument(
        "--stage2-fresh-order",
        action="store_true",
        help="stage 2 reads the data in an order of its own instead of re-reading stage 1's batches first",
    )
    parser.add_argument("--lora-r", type=int, default=defaults.lora_r)
    parser.add_argument("--lora-alpha", type=int, default=defaults.lora_alpha)
    _add_recovery_arguments(parser, defaults)
    parser.add_argument("--no-merge", action="store_true", help="keep LoRA adapters separate (stage2=lora)")
    parser.add_argument("--no-packing", action="store_true", help="pad instead of packing sequences")
    parser.add_argument("--activation-checkpointing", action="store_true", help="trade compute for memory")
    add_run_arguments(
        parser,
        max_length=defaults.max_length,
        batch_size=defaults.per_device_train_batch_size,
        grad_accum=defaults.gradient_accumulation_steps,
        save_steps=defaults.save_steps,
        logging_steps=defaults.logging_steps,
        seed=defaults.seed,
    )
    parser.set_defaults(func=_cli_train)


def _cli_train(args) -> int:
    check_local_path(args.model_dir, "The model")  # before the dataset is read
    check_run_dir(args.output, args.resume)
    config = VocabAdaptationConfig(
        output_dir=args.output,
        stage1_max_steps=args.stage1_steps,
        stage2_max_steps=args.stage2_steps,
        stage1_tokens=args.stage1_tokens,
        stage2_tokens=args.stage2_tokens,
        stage2=args.stage2,
        stage1_learning_rate=args.stage1_lr,
        stage2_learning_rate=args.stage2_lr,
        stage1_frozen_rows=args.stage1_frozen_rows,
        sparse_embedding_updates=args.sparse_embedding_updates,
        stage2_fresh_order=args.stage2_fresh_order,
        lora_r=args.lora_r,
        lora_alpha=args.lora_alpha,
        merge_adapters=not args.no_merge,
        packing=not args.no_packing,
        activation_checkpointing=args.activation_checkpointing,
        recovery=args.recovery,
        merge_original_weight=args.merge_original,
        **run_arguments(args),
    )
    dataset = load_training_dataset(args.dataset)
    _check_dataset(dataset, config.dataset_text_field)  # before the model is loaded
    alignment = _cli_alignment(args.model_dir) if config.stage1_frozen_rows != "none" else None
    teacher = _cli_teacher_name(args)  # before the model is loaded
    model, tokenizer = load_model_for_training(args.model_dir)
    teacher_model, teacher_tokenizer = _load_teacher(teacher, model)
    result = adapt_vocabulary(
        model,
        tokenizer,
        dataset,
        config,
        teacher_model=teacher_model,
        teacher_tokenizer=teacher_tokenizer,
        allow_nonfinite=args.allow_nonfinite,
        alignment=alignment,
    )
    if not is_main_process():  # the other ranks of a torchrun / accelerate launch trained along; rank 0 reports
        return 0
    for stage, history in ((1, result.stage1_log_history), (2, result.stage2_log_history)):
        losses = [entry["loss"] for entry in history if "loss" in entry]
        if losses:
            print(
                f"stage {stage}: {result.global_steps.get(stage, '?')} steps, loss {losses[0]:.4f} -> {losses[-1]:.4f}"
            )
    print(f"saved the adapted model to {result.final_output_dir}")
    return 0


def _add_recovery_arguments(parser, defaults) -> None:
    """What training recovers toward: --recovery, --teacher (the model before the swap), --merge-original."""
    parser.add_argument(
        "--recovery",
        choices=RECOVERY_MODES,
        default=defaults.recovery,
        help="auto (default): self_distill when the original model is known (--teacher, or the source model "
        "recorded in MODEL_DIR/tokswap_config.json), else ce; self_distill: the model before the swap teaches "
        "the swapped one; ce: plain cross-entropy (faster)",
    )
    parser.add_argument(
        "--teacher",
        default=None,
        help="the original model (before the swap) for self-distillation; default: the recorded source",
    )
    parser.add_argument(
        "--merge-original",
        type=float,
        default=defaults.merge_original_weight,
        metavar="W",
        help="after stage 2, move the decoder weights a share W of the way back to the model before the swap",
    )


def _cli_alignment(model_dir: str):
    """The alignment `tokswap swap` saved beside the model (MODEL_DIR/alignment)."""
    folder = Path(model_dir, ALIGNMENT_SUBFOLDER)
    if not folder.is_dir():
        raise TrainingError(
            f"--stage1-frozen-rows copied needs the swap's alignment in {folder}, which is not there: train a folder "
            "written by `tokswap swap`, or use --stage1-frozen-rows none."
        )
    from tokswap.alignment import TokenAlignment

    return TokenAlignment.from_pretrained(folder)


def _cli_teacher_name(args):
    """The original model for self-distillation or --merge-original: --teacher, else the source recorded by
    `tokswap swap`; None when the run does not use one."""
    needed = args.recovery == "self_distill" or args.merge_original > 0
    if not needed and args.recovery == "ce":
        return None
    teacher = args.teacher
    record = Path(args.model_dir, "tokswap_config.json")
    if teacher is None and record.is_file():
        teacher = json.loads(record.read_text(encoding="utf-8")).get("source_model")
    if not teacher and needed:
        raise TrainingError(
            "--recovery self_distill and --merge-original need the model before the swap: pass --teacher MODEL (a "
            "folder, Hub id or tokswap asset name), or use --recovery ce and --merge-original 0."
        )
    return teacher or None


def _load_teacher(teacher, model):
    """(model, tokenizer) of `teacher` in `model`'s dtype, or (None, None)."""
    if teacher is None:
        return None, None
    from tokswap.loading import load_model, model_tokenizer

    return load_model(teacher, dtype=model.dtype), model_tokenizer(teacher)
