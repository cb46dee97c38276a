"""The run flags `tokswap train`, `tokswap distill` and `tokswap draft` share (sequence, batch, checkpoints,
logging), and their translation into trainer-config keyword arguments."""

from __future__ import annotations


def _parse_report_to(value: str):
    parts = [p.strip() for p in value.split(",") if p.strip()]
    return parts[0] if len(parts) == 1 else parts


def add_run_arguments(parser, *, max_length, batch_size, grad_accum, save_steps, logging_steps, seed) -> None:
    """The run flags `tokswap train` and `tokswap distill` share (sequence, batch, checkpoints, logging)."""
    parser.add_argument("--max-length", type=int, default=max_length, help="sequence (packing block) length")
    parser.add_argument("--batch-size", type=int, default=batch_size, help="per device")
    parser.add_argument("--grad-accum", type=int, default=grad_accum)
    parser.add_argument("--save-steps", type=int, default=save_steps)
    parser.add_argument("--logging-steps", type=int, default=logging_steps)
    parser.add_argument("--report-to", default="none", help="comma-separated: none, tensorboard, wandb, trackio, ...")
    parser.add_argument("--seed", type=int, default=seed)
    parser.add_argument(
        "--allow-nonfinite",
        action="store_true",
        help="only warn when a model's weights hold NaN/inf values (default: refuse to train)",
    )
    parser.add_argument(
        "--resume",
        nargs="?",
        const=True,
        default=None,
        metavar="CHECKPOINT",
        help="resume from the newest checkpoint under --output, or from CHECKPOINT",
    )


def run_arguments(args) -> dict:
    """Config keyword arguments for the flags added by `add_run_arguments`."""
    return dict(
        max_length=args.max_length,
        per_device_train_batch_size=args.batch_size,
        gradient_accumulation_steps=args.grad_accum,
        save_steps=args.save_steps,
        logging_steps=args.logging_steps,
        report_to=_parse_report_to(args.report_to),
        seed=args.seed,
        resume_from_checkpoint=args.resume,
    )
