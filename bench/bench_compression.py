"""The paper's Table 1 at small scale: how many tokens each target tokenizer needs, language by language,
compared with the source model's (SmolLM2) tokenizer.

Usage:
    python bench/bench_compression.py --output bench/results/compression.md

Text: `tokswap.offline.corpus.heldout_by_language()` (held-out chunks of Wikipedia, the Debian handbook, man
pages, code, math, and UDHR articles 26-30 in hundreds of languages; never trained on). Token counts
exclude special tokens. `change = 100 * (target - source) / source`: negative means the target tokenizer
needs fewer tokens than SmolLM2's (compresses better).

Rows: every language with at least `--min-bytes` bytes of held-out text (the big Wikipedia/handbook
languages), plus "code" and "math"; then
- "mean of the rows shown": the unweighted mean of the per-row changes (the paper's "Avg."),
- "mean over all N languages": the same over every held-out language (mostly short UDHR texts),
- "all text pooled": total target tokens vs total source tokens over everything.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

SOURCE = "smollm2"
TARGETS = ("qwen2.5", "llama3", "gemma3", "gpt-neox")


def measure(source_name: str, target_names, min_bytes: int, max_docs: int) -> dict:
    """Token counts of every tokenizer on every held-out language, and the change vs the source."""
    from tokswap.loading import load_tokenizer
    from tokswap.offline.corpus import heldout_by_language
    from tokswap.evaluation import compression

    heldout = heldout_by_language(max_docs_per_language=max_docs)
    names = [source_name, *target_names]
    tokenizers = {name: load_tokenizer(name) for name in names}
    counts = {name: {} for name in names}
    seconds = {}
    for name, tokenizer in tokenizers.items():
        started = time.perf_counter()
        for language, texts in heldout.items():
            counts[name][language] = compression(tokenizer, texts)["num_tokens"]
        seconds[name] = time.perf_counter() - started
    num_bytes = {language: sum(len(t.encode("utf-8")) for t in texts) for language, texts in heldout.items()}

    def change(target: str, language: str) -> float:
        source_tokens = counts[source_name][language]
        return 100.0 * (counts[target][language] - source_tokens) / source_tokens

    shown = sorted((lang for lang in heldout if lang not in ("code", "math") and num_bytes[lang] >= min_bytes),
                   key=lambda lang: -num_bytes[lang]) + [lang for lang in ("code", "math") if lang in heldout]
    summary = {}
    for target in target_names:
        pooled_source = sum(counts[source_name].values())
        pooled_target = sum(counts[target].values())
        summary[target] = {
            "mean_shown": sum(change(target, lang) for lang in shown) / len(shown),
            "mean_all_languages": sum(change(target, lang) for lang in heldout) / len(heldout),
            "pooled": 100.0 * (pooled_target - pooled_source) / pooled_source,
        }
    return {
        "source": source_name,
        "targets": list(target_names),
        "languages_shown": shown,
        "num_languages": len(heldout),
        "num_bytes": num_bytes,
        "tokens": counts,
        "change_pct": {t: {lang: change(t, lang) for lang in heldout} for t in target_names},
        "summary": summary,
        "vocab_sizes": {name: len(tok) for name, tok in tokenizers.items()},
        "tokenize_seconds": seconds,
    }


def render(result: dict) -> str:
    source = result["source"]
    targets = result["targets"]
    header = ["language", "bytes", f"{source} tokens"] + [f"{t}" for t in targets]
    rows = []
    for lang in result["languages_shown"]:
        rows.append([lang, str(result["num_bytes"][lang]), str(result["tokens"][source][lang])]
                    + [f"{result['change_pct'][t][lang]:+.1f} %" for t in targets])
    rows.append(["**mean of the rows shown**", "", ""]
                + [f"**{result['summary'][t]['mean_shown']:+.1f} %**" for t in targets])
    rows.append([f"mean over all {result['num_languages']} languages", "", ""]
                + [f"{result['summary'][t]['mean_all_languages']:+.1f} %" for t in targets])
    total_bytes = sum(result["num_bytes"].values())
    rows.append(["all text pooled", str(total_bytes), str(sum(result["tokens"][source].values()))]
                + [f"{result['summary'][t]['pooled']:+.1f} %" for t in targets])
    rows.append(["vocabulary size", "", str(result["vocab_sizes"][source])]
                + [str(result["vocab_sizes"][t]) for t in targets])
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    lines = ["| " + " | ".join(h.ljust(w) for h, w in zip(header, widths)) + " |",
             "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    lines += ["| " + " | ".join(c.ljust(w) for c, w in zip(row, widths)) + " |" for row in rows]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", default=SOURCE, help="the model's current tokenizer (default: %(default)s)")
    parser.add_argument("--targets", default=",".join(TARGETS), help="comma-separated target tokenizers")
    parser.add_argument("--min-bytes", type=int, default=15_000,
                        help="show languages with at least this many held-out bytes (default: %(default)s)")
    parser.add_argument("--max-docs", type=int, default=50, help="held-out chunks per language (default: %(default)s)")
    parser.add_argument("--output", default=None, help="write a markdown report here")
    parser.add_argument("--json", default=None, help="write the raw numbers as JSON here")
    args = parser.parse_args(argv)

    started = time.perf_counter()
    result = measure(args.source, [t for t in args.targets.split(",") if t], args.min_bytes, args.max_docs)
    elapsed = time.perf_counter() - started
    table = render(result)
    print(table)
    print(f"\n{elapsed:.1f} s")
    command = "python bench/bench_compression.py " + " ".join(argv if argv is not None else sys.argv[1:])
    if args.output:
        text = (
            "# Compression: change in token count vs the source tokenizer (paper Table 1, small scale)\n\n"
            f"Command: `{command.strip()}`  \n"
            f"Time: {elapsed:.1f} s on {platform.machine()} ({platform.python_version()}), "
            "including building the held-out set when it is not cached.\n\n"
            f"Source tokenizer: `{result['source']}` (SmolLM2). Text: `tokswap.offline.corpus.heldout_by_language()` "
            "(never trained on). Cells: `100 * (target tokens - source tokens) / source tokens`; "
            "negative = the target tokenizer needs fewer tokens. Special tokens are not counted.\n\n"
            + table + "\n"
        )
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(text, encoding="utf-8")
        print(f"wrote {args.output}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1, ensure_ascii=False), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
