"""`tokswap draft SMALL BIG --dataset ... --output DIR`: a draft model for speculative decoding (swap + distill)."""

from __future__ import annotations

from tokswap.drafting import DraftError

EPILOG = """examples:
  tokswap draft smollm2-135m gemma3-270m --output drafts/smollm2-for-gemma --no-distill
  tokswap draft HuggingFaceTB/SmolLM2-135M Qwen/Qwen2.5-Coder-0.5B-Instruct --dataset code.jsonl \\
      --output drafts/smollm2-for-qwen-coder --max-steps 200 --divergence forward_kl
"""


def register_cli(subparsers) -> None:
    """Add `tokswap draft SMALL BIG --output DIR [--dataset PATH ...]`."""
    import argparse

    from tokswap.cli.run_flags import add_run_arguments
    from tokswap.distillation import DIVERGENCES
    from tokswap.init_methods import DEFAULT_INIT_METHOD, INIT_METHODS

    parser = subparsers.add_parser(
        "draft",
        help="make a draft model for speculative decoding: swap SMALL onto BIG's vocabulary, distill it from BIG",
        description="Give SMALL the exact vocabulary of BIG (its vocab_size, special ids and generation config), "
        "then distill it from BIG token by token, so that BIG.generate(..., assistant_model=DRAFT) works with no "
        "tokenizer bridging. The output folder loads with plain transformers.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("small", metavar="SMALL", help="the draft's starting point: Hub id, folder, GGUF or asset name")
    parser.add_argument("big", metavar="BIG", help="the model to draft for: Hub id, folder or asset name")
    parser.add_argument("--output", "-o", required=True, help="folder to write the draft to (new or empty)")
    parser.add_argument("--overwrite", action="store_true", help="replace --output when it holds an earlier draft")
    parser.add_argument("--dataset", help="text to distill on (.txt, .jsonl, .parquet, dataset folder)")
    parser.add_argument("--no-distill", action="store_true", help="only swap (measure the draft before distillation)")
    parser.add_argument("--alignment", help="alignment folder or Hub id (default: prebuilt, else computed)")
    parser.add_argument("--corpus", help="text to compute the alignment on, when it must be computed")
    parser.add_argument("--init-method", default=DEFAULT_INIT_METHOD, choices=sorted(INIT_METHODS))
    parser.add_argument("--divergence", choices=DIVERGENCES, default="forward_kl")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--alpha", type=float, default=0.0, help="weight of the cross-entropy (default 0: pure KD)")
    parser.add_argument("--max-steps", type=int, default=-1, help="optimizer steps (default: one epoch)")
    parser.add_argument(
        "--lr", type=float, default=2e-4, help="peak learning rate (what bench/bench_draft.py measures drafts with)"
    )
    parser.add_argument(
        "--frequency-ranked",
        type=int,
        default=0,
        metavar="K",
        help="also save the K most frequent tokens of --dataset beside the draft, so its output layer can be "
        "restricted to them while generating (tokswap.drafting.frequency_ranked_head; 0: none)",
    )
    add_run_arguments(parser, max_length=512, batch_size=4, grad_accum=1, save_steps=500, logging_steps=10, seed=42)
    parser.set_defaults(func=_cli_draft)


def _cli_draft(args) -> int:
    from tokswap.swapper import TOKSWAP_CONFIG_NAME
    from tokswap.utils import check_local_path, check_output_dir

    check_output_dir(args.output, args.overwrite, TOKSWAP_CONFIG_NAME)
    for given, what in ((args.small, "SMALL"), (args.big, "BIG"), (args.dataset, "The dataset")):
        check_local_path(given, what)
    if not args.no_distill and not args.dataset:
        raise DraftError("Distilling the draft needs text: pass --dataset PATH (or --no-distill to only swap).")
    if args.frequency_ranked < 0 or (args.frequency_ranked and not args.dataset):
        raise DraftError(
            "--frequency-ranked K needs a positive K and --dataset PATH (the text its tokens are ranked on)."
        )
    from tokswap.swapper import make_draft  # upward until this CLI moves to tokswap.cli.draft

    swapper = make_draft(
        args.small, args.big, alignment=args.alignment, corpus=args.corpus, init_method=args.init_method
    )
    if not args.no_distill:
        _distill_draft(swapper, args)
    swapper.save_pretrained(args.output, overwrite=args.overwrite)
    print(
        f"Saved a draft for {args.big} ({swapper.model.config.vocab_size} rows, "
        f"{'distilled' if not args.no_distill else 'not distilled'}) to {args.output}"
    )
    if args.frequency_ranked:
        _save_frequency_ranked(swapper.tokenizer, args)
    return 0


def _save_frequency_ranked(tokenizer, args) -> None:
    from tokswap.drafting import FREQUENCY_RANKED_FILE, rank_tokens_by_frequency, save_frequency_ranked_tokens
    from tokswap.trainer_utils import load_training_dataset

    dataset = load_training_dataset(args.dataset)
    if "text" not in dataset.column_names:
        raise DraftError(f"--frequency-ranked ranks the tokens of a `text` column; {args.dataset} has none.")
    keep_ids, coverage = rank_tokens_by_frequency(tokenizer, dataset["text"], args.frequency_ranked)
    save_frequency_ranked_tokens(args.output, keep_ids, coverage)
    print(
        f"Saved the {args.frequency_ranked} most frequent tokens of the dataset ({100 * coverage:.1f}% of its "
        f"tokens) to {FREQUENCY_RANKED_FILE}: restrict the draft's head to them with "
        "tokswap.drafting.frequency_ranked_head(draft, load_frequency_ranked_tokens(folder))"
    )


def _distill_draft(swapper, args) -> None:
    import tempfile

    from tokswap.cli.run_flags import run_arguments
    from tokswap.distillation import TokenDistillationConfig
    from tokswap.trainer_utils import load_model_for_training, load_training_dataset

    dataset = load_training_dataset(args.dataset)
    teacher, teacher_tokenizer = load_model_for_training(args.big)
    with tempfile.TemporaryDirectory(prefix="tokswap-draft-") as workdir:  # checkpoints; the draft is saved after
        config = TokenDistillationConfig(
            output_dir=workdir,
            alpha=args.alpha,
            temperature=args.temperature,
            divergence=args.divergence,
            max_steps=args.max_steps,
            learning_rate=args.lr,
            lr_scheduler_type="cosine",
            warmup_steps=0.03,
            packing=True,
            **{**run_arguments(args), "resume_from_checkpoint": None},
        )
        swapper.distill(dataset, teacher, config, teacher_tokenizer=teacher_tokenizer)
