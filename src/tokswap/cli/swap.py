"""`tokswap swap SRC TGT --output DIR`: give a causal LM a new tokenizer and save it (`TokenizerSwapper`)."""

from __future__ import annotations

from typing import Any

from tokswap.constants import TOKSWAP_CONFIG_NAME
from tokswap.init_methods import DEFAULT_INIT_METHOD, INIT_METHODS
from tokswap.swapper import SwapperError, TokenizerSwapper
from tokswap.utils import check_output_dir
from tokswap.utils.cli import examples_formatter

SWAP_EXAMPLES = """examples:
  tokswap swap smollm2-135m qwen2.5 --output smollm2-qwen
  tokswap swap HuggingFaceTB/SmolLM2-135M Qwen/Qwen2.5-0.5B --alignment alignments/smollm2-qwen2.5 \\
      --init-method tokalign --output smollm2-qwen-tokalign
  tokswap swap smollm2-135m qwen2.5 --donor qwen2.5-coder-0.5b --init-method focus --output smollm2-qwen-focus
"""


def register_cli(subparsers) -> None:
    """`tokswap swap SRC TGT --output DIR [--alignment ...] [--init-method ...]`."""
    parser = subparsers.add_parser(
        "swap",
        help="give a causal LM a new tokenizer (embedding surgery) and save it",
        description="Load SRC (a causal LM), give it the vocabulary of TGT (a tokenizer or model), initialize the "
        "new embedding rows from the alignment, and save a plain transformers model folder.",
    )
    parser.epilog = SWAP_EXAMPLES
    parser.formatter_class = examples_formatter(parser.formatter_class)
    parser.add_argument("source", metavar="SRC", help="source model: Hub id, folder, GGUF file or tokswap asset name")
    parser.add_argument("target", metavar="TGT", help="target tokenizer: Hub id or folder of a tokenizer or model")
    parser.add_argument("--output", "-o", required=True, help="folder to write the swapped model to (new or empty)")
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace --output when it holds an earlier `tokswap swap` result (never other folders)",
    )
    parser.add_argument(
        "--alignment", help="alignment folder or Hub id (default: prebuilt for the pair, else computed)"
    )
    parser.add_argument(
        "--trust-unverified",
        action="store_true",
        help="use an --alignment whose checksums or vocabulary hashes are missing or do not match "
        "(older tokswap, edited files); refused by default",
    )
    parser.add_argument(
        "--init-method",
        default=DEFAULT_INIT_METHOD,
        choices=sorted(INIT_METHODS),
        help=f"how new rows are initialized (default: {DEFAULT_INIT_METHOD}, the measured best)",
    )
    parser.add_argument(
        "--donor",
        default=None,
        help="a model that already uses TGT's tokenizer: its embeddings guide the omp/focus inits",
    )
    parser.add_argument(
        "--keep-source-words",
        action="store_true",
        help="extend TGT's vocabulary with SRC's whole words it spells in pieces, so each keeps its row "
        "(the vocabulary is then no longer exactly TGT's: for compression, not for distilling from or drafting "
        "for a TGT model)",
    )
    parser.add_argument(
        "--pad-to-multiple-of", type=int, default=64, help="pad the vocabulary to a multiple (default 64)"
    )
    parser.add_argument("--corpus", help="text file or folder to compute the alignment on, when it must be computed")
    parser.add_argument("--dtype", default=None, help="model dtype, e.g. float32, bfloat16 (default: the checkpoint's)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random init methods")
    parser.add_argument("--revision", default=None, help="source model revision")
    parser.add_argument("--trust-remote-code", action="store_true", help="allow custom model code from the Hub")
    _add_fit_arguments(parser)
    parser.add_argument(
        "--allow-nonfinite",
        action="store_true",
        help="only warn when the source model's weights hold NaN/inf values (default: refuse)",
    )
    parser.set_defaults(func=_cli_swap)


def _add_fit_arguments(parser) -> None:
    parser.add_argument(
        "--fit-new-words",
        action="store_true",
        help="fit new whole words' input rows to the original model's hidden states (untie embeddings; minutes)",
    )
    parser.add_argument(
        "--fit-output-rows",
        nargs="?",
        const=True,
        default=None,
        metavar="TEXT",
        help="fit the output rows of the new tokens that occur in TEXT (.txt/.jsonl/dataset folder; default: "
        "--corpus) by its likelihood, all else frozen (untie embeddings; minutes)",
    )
    parser.add_argument(
        "--fit-output-transfer",
        action="store_true",
        help="with --fit-output-rows: also move the output rows of new tokens TEXT lacks by what the fit did to the "
        "others (kept only if it helps fitted rows held out of it)",
    )
    parser.add_argument(
        "--fit-max-words",
        type=int,
        default=None,
        help="with --fit-new-words: fit at most this many words, lowest ids first (default: all)",
    )
    parser.add_argument(
        "--fit-output-weight",
        type=float,
        default=None,
        metavar="W",
        help="with --fit-new-words: each fitted word's output row becomes W x its fitted input row + (1 - W) x its "
        "init (0-1; default 0: output rows keep their init)",
    )


def _cli_swap(args) -> int:
    check_output_dir(args.output, args.overwrite, TOKSWAP_CONFIG_NAME)  # before minutes of loading and surgery
    if args.fit_max_words is not None and (args.fit_max_words < 1 or not args.fit_new_words):
        raise SwapperError("--fit-max-words takes a positive number and goes with --fit-new-words.")
    if args.fit_output_weight is not None and (not 0 <= args.fit_output_weight <= 1 or not args.fit_new_words):
        raise SwapperError("--fit-output-weight takes a number from 0 to 1 and goes with --fit-new-words.")
    fit_text = args.corpus if args.fit_output_rows is True else args.fit_output_rows
    if args.fit_output_rows and not fit_text:
        raise SwapperError("--fit-output-rows needs text: give a file or folder after it, or --corpus.")
    if args.fit_output_transfer and not args.fit_output_rows:
        raise SwapperError("--fit-output-transfer goes with --fit-output-rows.")
    from tokswap.align.pipeline import check_corpus_path

    for path in {args.corpus, fit_text} - {None}:
        check_corpus_path(path)
    swapper = TokenizerSwapper.from_pretrained(
        args.source,
        args.target,
        alignment=args.alignment,
        init_method=args.init_method,
        corpus=args.corpus,
        pad_to_multiple_of=args.pad_to_multiple_of,
        seed=args.seed,
        donor=args.donor,
        allow_nonfinite=args.allow_nonfinite,
        trust_unverified=args.trust_unverified,
        keep_source_words=args.keep_source_words,
        **_model_kwargs(args),
    )
    if args.fit_new_words:
        from tokswap.new_word_fit import NewWordFitConfig

        report = swapper.fit_new_words(
            NewWordFitConfig(max_words=args.fit_max_words, output_weight=args.fit_output_weight or 0.0)
        )
        print(
            f"Fitted {report.num_words} new words' input rows (matching loss {report.loss_before:.3f} -> "
            f"{report.loss_after:.3f}, {report.seconds:.0f} s)"
        )
    if fit_text:
        from tokswap.output_row_fit import OutputRowFitConfig

        fitted = swapper.fit_output_rows(fit_text, OutputRowFitConfig(transfer=args.fit_output_transfer))
        print(
            f"Fitted {fitted.rows_fitted} new tokens' output rows (held-out loss {fitted.heldout_nll_before:.3f} -> "
            f"{fitted.heldout_nll_after:.3f} nats per token, {fitted.seconds:.0f} s)"
            + (f"; moved {fitted.rows_transferred} more by what the fit learned" if fitted.rows_transferred else "")
        )
    swapper.save_pretrained(args.output, overwrite=args.overwrite)
    counts = swapper.swap_record["alignment"]["row_source_counts"]
    print(
        f"Saved {swapper.swap_record['architecture']} with the vocabulary of {args.target} "
        f"({swapper.swap_record['target_vocab_size']} tokens, padded to {swapper.swap_record['padded_vocab_size']}; "
        f"init '{swapper.init_method}'; rows: {counts}) to {args.output}"
    )
    return 0


def _model_kwargs(args) -> dict:
    """`from_pretrained` keyword arguments from --dtype, --revision and --trust-remote-code."""
    model_kwargs: dict[str, Any] = {}
    if args.dtype:
        import torch

        if not hasattr(torch, args.dtype) or not isinstance(getattr(torch, args.dtype), torch.dtype):
            raise SwapperError(f"Unknown --dtype {args.dtype!r}; use e.g. float32, bfloat16, float16.")
        model_kwargs["dtype"] = getattr(torch, args.dtype)
    if args.revision:
        model_kwargs["revision"] = args.revision
    if args.trust_remote_code:
        model_kwargs["trust_remote_code"] = True
    return model_kwargs
