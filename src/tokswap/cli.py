"""The `tokswap` command line: `tokswap align | swap | train | distill | eval | push | assets | demo`.

Each feature module contributes its sub-command through a `register_cli(subparsers)` function
that adds a parser and sets `func=callable(args) -> int`. Exit codes: 0 success, 2 a user error
(bad arguments or input, with a message saying what to fix), 1 anything unexpected.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from . import __version__
from .errors import TokswapError

# Sub-command -> (module that registers it, one-line help). Only the module of the command being
# run is imported: each pulls in torch/transformers, and `tokswap --help` should stay instant.
_COMMANDS = {
    "align": ("tokswap.aligner", "learn a token alignment between two tokenizers (TokAlign)"),
    "swap": ("tokswap.swapper", "give a model a new tokenizer, initialized from an alignment"),
    "train": ("tokswap.training", "two-stage vocabulary adaptation on TRL"),
    "distill": ("tokswap.distillation", "token-level distillation from a teacher sharing the vocabulary"),
    "eval": ("tokswap.evaluation", "bits per byte, compression and zero-shot accuracy"),
    "push": ("tokswap.hub", "publish a swapped model or an alignment to the Hub"),
    "assets": ("tokswap.assets", "fetch and list the real tokenizers, models and data sets"),
    "demo": ("tokswap.demo", "the whole job end to end on real assets (the README's main command)"),
}

EPILOG = """examples:
  tokswap assets fetch --all
  tokswap align smollm2 qwen2.5 --output alignments/smollm2-qwen2.5
  tokswap swap smollm2-135m qwen2.5 --alignment alignments/smollm2-qwen2.5 --output smollm2-qwen
  tokswap train smollm2-qwen --dataset corpus.jsonl --output smollm2-qwen-trained
  tokswap eval smollm2-qwen-trained --tasks bpb,arc_easy --limit 200

Run `tokswap COMMAND --help` for a command's options.
"""


def build_parser(command=None) -> argparse.ArgumentParser:
    """The parser; with `command`, that sub-command's module is imported and its full parser added."""
    parser = argparse.ArgumentParser(
        prog="tokswap",
        description="Give a Hugging Face causal LM a new tokenizer (TokAlign) and train it back to health.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"tokswap {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, help_text) in _COMMANDS.items():
        if name == command:
            importlib.import_module(module_name).register_cli(subparsers)
        else:
            subparsers.add_parser(name, help=help_text)
    return parser


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((arg for arg in argv if not arg.startswith("-")), None)
    parser = build_parser(command if command in _COMMANDS else None)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except TokswapError as err:
        print(f"tokswap {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
