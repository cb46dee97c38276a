"""The `tokswap` command line: `tokswap align | swap | train | distill | draft | eval | push | assets | demo`.

Each sub-command lives in its own module, `tokswap.cli.<command>`, whose `register_cli(subparsers)` adds
a parser and sets `func=callable(args) -> int`; the feature modules never parse arguments. Exit codes: 0 success, 2 a user error
(bad arguments or input, with a message saying what to fix), 1 anything unexpected.

A user error is one line on stderr; `--debug` (anywhere on the line) or `TOKSWAP_DEBUG=1` shows
its traceback instead.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from tokswap.constants import ENV_DEBUG, __version__
from tokswap.errors import TokswapError

# Sub-command -> (module that registers it, one-line help). Only the module of the command being
# run is imported: each pulls in torch/transformers, and `tokswap --help` should stay instant.
_COMMANDS = {
    "align": ("tokswap.cli.align", "learn a token alignment between two tokenizers (TokAlign)"),
    "swap": ("tokswap.cli.swap", "give a model a new tokenizer, initialized from an alignment"),
    "train": ("tokswap.cli.train", "two-stage vocabulary adaptation on TRL"),
    "distill": ("tokswap.cli.distill", "token-level distillation from a teacher sharing the vocabulary"),
    "draft": ("tokswap.cli.draft", "make a draft model for speculative decoding (swap + distill from the big model)"),
    "eval": ("tokswap.cli.eval", "bits per byte, compression and zero-shot accuracy"),
    "push": ("tokswap.cli.push", "publish a swapped model or an alignment to the Hub"),
    "assets": ("tokswap.cli.assets", "fetch and list the real tokenizers, models and data sets"),
    "demo": ("tokswap.cli.demo", "the whole job end to end on real assets (the README's main command)"),
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
    parser.add_argument(
        "--debug",
        action="store_true",
        help="show the traceback of a user error instead of one line (or set TOKSWAP_DEBUG=1)",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, help_text) in _COMMANDS.items():
        if name == command:
            importlib.import_module(module_name).register_cli(subparsers)
        else:
            subparsers.add_parser(name, help=help_text)
    return parser


def _debug_requested(argv: list) -> bool:
    return "--debug" in argv or os.environ.get(ENV_DEBUG, "").strip().lower() in ("1", "true", "yes", "on")


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = _debug_requested(argv)
    # accepted after the sub-command too, where its own parser would not know it
    argv = [arg for arg in argv if arg != "--debug"]
    command = next((arg for arg in argv if not arg.startswith("-")), None)
    parser = build_parser(command if command in _COMMANDS else None)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except TokswapError as err:
        if debug:
            raise
        print(f"tokswap {args.command}: error: {_one_line(err)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    finally:
        _leave_process_group()


def _leave_process_group() -> None:
    """End a torchrun / accelerate launch cleanly: a gloo group left open can abort the process at exit."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def _one_line(err: Exception) -> str:
    """The message on one line: a multi-line message would read as several errors."""
    return " ".join(str(err).split())


if __name__ == "__main__":
    sys.exit(main())
