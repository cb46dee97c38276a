"""`tokswap distill STUDENT --teacher MODEL --dataset ... --output DIR`: token-level distillation (`tokswap.distillation`)."""

from __future__ import annotations

from tokswap.cli.run_flags import add_run_arguments
from tokswap.distillation import DIVERGENCES, TokenDistillationConfig, distill
from tokswap.trainer_utils import is_main_process
from tokswap.utils import check_local_path, check_run_dir
from tokswap.utils.cli import examples_formatter

DISTILL_EXAMPLES = """examples:
  tokswap distill smollm2-qwen-trained --teacher Qwen/Qwen2.5-0.5B --dataset corpus.jsonl --output distilled \\
      --max-steps 1000
  tokswap distill smollm2-gemma --teacher google/gemma-3-270m --dataset corpus.txt --output distilled --alpha 0.0 \\
      --divergence reverse_kl --chunk-size 128

The student must already use the teacher's tokenizer (e.g. `tokswap swap smollm2-135m gemma3 --output smollm2-gemma`);
STUDENT_DIR and --teacher are folders or Hub ids.
"""


def register_cli(subparsers) -> None:
    """Add `tokswap distill STUDENT_DIR --teacher T --dataset PATH --output DIR [...]`."""
    parser = subparsers.add_parser(
        "distill",
        help="token-level distillation (CE + KL) from a teacher that shares the student's tokenizer",
        description="Train the student on alpha * CE + (1 - alpha) * T^2 * KL(teacher || student), computed in "
        "chunks of positions. The student must already use the teacher's tokenizer (run `tokswap swap` first).",
    )
    parser.epilog = DISTILL_EXAMPLES
    parser.formatter_class = examples_formatter(parser.formatter_class)
    parser.add_argument("student_dir", help="student model folder (with its tokenizer)")
    parser.add_argument("--teacher", required=True, help="teacher model folder or id (with its tokenizer)")
    parser.add_argument("--dataset", required=True, help=".txt, .jsonl/.json, .parquet, or a dataset folder")
    parser.add_argument("--output", required=True, help="output folder (checkpoints and the final student)")
    parser.add_argument("--alpha", type=float, default=0.5, help="weight of the cross-entropy (default 0.5)")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--divergence", choices=DIVERGENCES, default="forward_kl")
    parser.add_argument("--chunk-size", type=int, default=256, help="positions per logits chunk")
    parser.add_argument("--max-steps", type=int, default=-1, help="optimizer steps (default: one epoch)")
    parser.add_argument("--lr", type=float, default=5e-5, help="peak learning rate")
    add_run_arguments(parser, max_length=1024, batch_size=8, grad_accum=1, save_steps=500, logging_steps=10, seed=42)
    parser.set_defaults(func=_cli_distill)


def _cli_distill(args) -> int:
    from transformers import AutoTokenizer

    from tokswap.cli.run_flags import run_arguments
    from tokswap.trainer_utils import load_model_for_training, load_training_dataset

    # every path before any loading: a typo in --teacher should not cost loading the student first
    check_local_path(args.student_dir, "The student")
    check_local_path(args.teacher, "The teacher")
    check_run_dir(args.output, args.resume)
    config = TokenDistillationConfig(
        output_dir=args.output,
        alpha=args.alpha,
        temperature=args.temperature,
        divergence=args.divergence,
        distill_chunk_size=args.chunk_size,
        max_steps=args.max_steps,
        learning_rate=args.lr,
        lr_scheduler_type="cosine",
        warmup_steps=0.03,
        weight_decay=0.01,
        packing=True,
        activation_checkpointing=False,
        **run_arguments(args),
    )
    dataset = load_training_dataset(args.dataset)
    student, tokenizer = load_model_for_training(args.student_dir)
    teacher, _ = load_model_for_training(args.teacher)
    try:
        teacher_tokenizer = AutoTokenizer.from_pretrained(args.teacher)
    except (OSError, ValueError):
        teacher_tokenizer = None
    trainer = distill(
        student,
        tokenizer,
        teacher,
        dataset,
        config,
        teacher_tokenizer=teacher_tokenizer,
        allow_nonfinite=args.allow_nonfinite,
    )
    trainer.save_model(args.output)  # rank 0 only, like every Trainer save
    if is_main_process():
        tokenizer.save_pretrained(args.output)
    if not is_main_process():
        return 0
    history = [e for e in trainer.state.log_history if "loss" in e]
    if history:
        print(f"{trainer.state.global_step} steps, loss {history[0]['loss']:.4f} -> {history[-1]['loss']:.4f}")
    print(f"saved the distilled student to {args.output}")
    return 0
