"""`tokswap align SRC TGT --output DIR`: learn a token alignment between two tokenizers (`tokswap.align.pipeline`)."""

from __future__ import annotations

from tokswap.align.pipeline import AlignmentConfig, align_tokenizers, check_corpus_path, summary_table
from tokswap.alignment import ALIGNMENT_CONFIG_NAME
from tokswap.utils import check_local_path, check_output_dir
from tokswap.utils.cli import add_dataclass_arguments, dataclass_kwargs, examples_formatter


def _cli_align(args) -> int:
    check_output_dir(args.output, args.overwrite, ALIGNMENT_CONFIG_NAME)  # before the long alignment run
    check_local_path(args.source_tokenizer, "The source tokenizer")
    check_local_path(args.target_tokenizer, "The target tokenizer")
    corpus = None if args.corpus in (None, "default") else args.corpus
    check_corpus_path(corpus)
    config = AlignmentConfig(**dataclass_kwargs(args, AlignmentConfig))
    alignment = align_tokenizers(
        args.source_tokenizer, args.target_tokenizer, corpus=corpus, config=config, progress=not args.quiet
    )
    alignment.save_pretrained(args.output, overwrite=args.overwrite)
    print(summary_table(alignment))
    print(f"saved to {args.output}")
    return 0


ALIGN_EXAMPLES = """examples:
  tokswap align smollm2 qwen2.5 --output alignments/smollm2-qwen2.5
  tokswap align gpt-neox gemma3 --corpus my_corpus.jsonl --dim 100 --iterations 10 --output alignments/neox-gemma3
  tokswap align HuggingFaceTB/SmolLM2-135M Qwen/Qwen2.5-0.5B --output alignments/smollm2-qwen2.5 --overwrite
"""


def register_cli(subparsers) -> None:
    """Add `tokswap align SRC TGT --output DIR` to the tokswap command line."""
    parser = subparsers.add_parser(
        "align",
        help="learn a token alignment between two tokenizers (TokAlign)",
        description="Learn which source token each target token inherits its parameters from: tokenize a corpus "
        "with both tokenizers, train GloVe vectors per vocabulary, pair identical tokens by bytes and match the rest.",
    )
    parser.epilog = ALIGN_EXAMPLES
    parser.formatter_class = examples_formatter(parser.formatter_class)
    parser.add_argument(
        "source_tokenizer", help="source tokenizer: asset name (smollm2, gpt-neox...), folder or Hub id"
    )
    parser.add_argument("target_tokenizer", help="target tokenizer: asset name (qwen2.5, gemma3...), folder or Hub id")
    parser.add_argument(
        "--corpus",
        default="default",
        help="'default' (tokswap's mixed corpus, --corpus-bytes of it), a .jsonl/.txt file or a dataset "
        "folder (default: default)",
    )
    parser.add_argument(
        "--output", required=True, help="folder for alignment.safetensors + alignment_config.json (new or empty)"
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace --output when it holds an earlier alignment (never other folders)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    add_dataclass_arguments(parser, AlignmentConfig, skip=("cache",), types={"num_proc": int, "search_dim": int})
    parser.add_argument("--no-cache", dest="cache", action="store_false", default=None, help="recompute every stage")
    parser.set_defaults(func=_cli_align)
