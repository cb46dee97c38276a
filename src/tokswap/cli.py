"""The `tokswap` command line: `tokswap align | swap | train | distill | eval | push | assets | demo`.

Each feature module contributes its sub-commands through a `register_cli(subparsers)` function
that adds a parser and sets `func=callable(args) -> int`. Exit codes: 0 success, 2 a user error
(bad arguments or input, with a message saying what to fix), 1 anything unexpected.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from . import __version__
from .errors import TokswapError

# Modules that register sub-commands, in the order they appear in `--help`.
_COMMAND_MODULES = (
    "tokswap.aligner",
    "tokswap.swapper",
    "tokswap.training",
    "tokswap.distillation",
    "tokswap.evaluation",
    "tokswap.hub",
    "tokswap.assets",
    "tokswap.demo",
)

EPILOG = """examples:
  tokswap assets fetch --all
  tokswap align smollm2 qwen2.5 --output alignments/smollm2-qwen2.5
  tokswap swap HuggingFaceTB/SmolLM2-135M Qwen/Qwen2.5-0.5B --output smollm2-qwen
  tokswap train smollm2-qwen --dataset corpus.jsonl --output smollm2-qwen-trained
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tokswap",
        description="Give a Hugging Face causal LM a new tokenizer (TokAlign) and train it back to health.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"tokswap {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in _COMMAND_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as err:
            if err.name == module_name:  # feature not present in this build
                continue
            raise
        register = getattr(module, "register_cli", None)
        if register is not None:
            register(subparsers)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
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
