"""Benchmark the alignment engine on real tokenizer pairs and the matching at full vocabulary scale.

Usage:
    python bench/bench_alignment.py --corpus-bytes 3000000 --dim 100 --iterations 10 \
        --output bench/results/alignment.md

For each pair (SmolLM2 -> Qwen2.5, GPT-NeoX -> Qwen2.5, GPT-NeoX -> Gemma-3) on the default corpus
(`tokswap.offline.corpus.build_corpus`): identical-token counts (raw strings vs bytes), BLEU-1 and semantic
similarity of our alignment against three baselines, the self-check precision, the largest
in-degree with and without CSLS, and the paper's relative-representation matching for comparison.
Then the matching of a 152k-row target space to a 49k-row source space (random vectors, 300 dims):
seconds and peak memory, measured in a fresh subprocess each.

Over GloVe seeds: run it with `--seed N --output bench/results/alignment_seedN.md --skip-matching-bench`, then
`--summarize bench/results/alignment.md bench/results/alignment_seed1.md ... --output
bench/results/alignment_seeds.md` for mean ± std of every quality column and of the margins over the baseline.
The matching at scale alone (a timing: run it with nothing else running): `--pairs none --output
bench/results/alignment_matching.md`. The random baselines over their own seeds (no GloVe; the same held-out
segments): `--baseline-seeds 0 1 2 --output bench/results/alignment_baselines.md`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

PAIRS = (("smollm2", "qwen2.5"), ("gpt-neox", "qwen2.5"), ("gpt-neox", "gemma3"))

_MATCH_SNIPPET = r"""
import json, resource, sys, time, torch
from tokswap.align.matching import nearest_neighbours
num_targets, num_sources, dim, search_dim, chunk = (int(x) for x in sys.argv[1:6])
g = torch.Generator().manual_seed(0)
keys = torch.randn(num_sources, dim, generator=g)
queries = keys[torch.randint(0, num_sources, (num_targets,), generator=g)] + torch.randn(num_targets, dim, generator=g)
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t = time.perf_counter()
cpu = time.process_time()
r = nearest_neighbours(queries, keys, k=10, hubness="csls", chunk_size=chunk,
                       search_dim=search_dim or None)
seconds = time.perf_counter() - t
print(json.dumps({"seconds": seconds, "cpu_seconds": time.process_time() - cpu, "threads": torch.get_num_threads(), "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
                  "inputs_gb": (queries.numel() + keys.numel()) * 4 / 2**30,
                  "max_in_degree": r.max_in_degree, "max_in_degree_uncorrected": r.max_in_degree_uncorrected}))
"""


def bench_matching(num_targets=152_000, num_sources=49_152, dim=300, search_dim=0, chunk=2048) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", _MATCH_SNIPPET, str(num_targets), str(num_sources), str(dim), str(search_dim), str(chunk)],
        check=True, capture_output=True, text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def fmt(x, digits=4):
    return f"{x:.{digits}f}" if isinstance(x, float) else str(x)


# Method labels in the self-check table, old and new spellings, by what each label contains (first match wins).
METHODS = (("gate 0.9", "Procrustes + CSLS + gate 0.9 (default)"), ("every match kept", "Procrustes + CSLS, no gate"),
           ("no CSLS", "Procrustes, no CSLS"), ("(paper)", "relative reps, 300 anchors (paper)"),
           ("relative", "relative reps, 300 anchors + CSLS"))


def _method_label(cell: str) -> str:
    return next(label for key, label in METHODS if key in cell)


def _read_report(path: str) -> tuple:
    """The quality table (pair -> [BLEU ours, BLEU byte-id+random, sim ours, sim byte-id+random]) and the
    self-check table ((pair, method) -> [P@1, P@10, max in-degree]) of one report."""
    quality, checks = {}, {}
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        cells = [c.strip().strip("*") for c in line.strip().strip("|").split("|")]
        if " -> " not in cells[0]:
            continue
        if len(cells) == 12:
            quality[cells[0]] = [float(cells[i]) for i in (4, 5, 8, 9)]
        elif len(cells) == 7:
            checks[(cells[0], _method_label(cells[1]))] = [float(cells[i]) for i in (2, 3, 4)]
    return quality, checks


def summarize(paths: list, output: str, argv) -> int:
    """Mean ± std over reports of this script (one per GloVe seed), read back from their markdown tables."""
    runs = [_read_report(p) for p in paths]
    if any(set(q) != set(runs[0][0]) or set(c) != set(runs[0][1]) for q, c in runs):
        raise SystemExit(f"the reports {paths} do not hold the same pairs and methods")

    def cell(xs: list, digits: int, scale: float = 1.0) -> str:
        xs = [scale * x for x in xs]
        return f"{statistics.mean(xs):.{digits}f} ± {statistics.stdev(xs):.{digits}f}"

    lines = ["# Alignment benchmark over GloVe seeds", "", f"Command: `python bench/bench_alignment.py {' '.join(argv)}`",
             "", f"Mean ± std over {len(paths)} reports (" + ", ".join(f"`{Path(p).name}`" for p in paths) + "), "
             "one GloVe seed each (the seed also draws the self-check's held-out pairs); the corpus, its split and "
             "the random baselines are the same in every report. Margins are in points (100 x the difference).", "",
             "| pair | BLEU-1 ours | BLEU-1 byte-id+random | BLEU-1 margin (points) | sim ours | sim byte-id+random "
             "| sim margin (points) |", "|---|---|---|---|---|---|---|"]
    for pair in runs[0][0]:
        values = list(zip(*(q[pair] for q, _ in runs)))  # column -> one value per run
        bleu_margin = [a - b for a, b in zip(values[0], values[1])]
        sim_margin = [a - b for a, b in zip(values[2], values[3])]
        lines.append(f"| {pair} | {cell(values[0], 4)} | {cell(values[1], 4)} | {cell(bleu_margin, 1, 100)} | "
                     f"{cell(values[2], 4)} | {cell(values[3], 4)} | {cell(sim_margin, 1, 100)} |")
    lines += ["", "| pair | method | self-check P@1 | P@10 | max in-degree |", "|---|---|---|---|---|"]
    for pair, method in runs[0][1]:
        values = list(zip(*(c[(pair, method)] for _, c in runs)))
        lines.append(f"| {pair} | {method} | {cell(values[0], 4)} | {cell(values[1], 4)} | {cell(values[2], 1)} |")
    text = "\n".join(lines) + "\n"
    print(text)
    Path(output).write_text(text, encoding="utf-8")
    return 0


def baseline_spread(args) -> int:
    """BLEU-1 and similarity of each random baseline on the alignment's held-out segments, once per seed."""
    from tokswap.align.pipeline import AlignmentConfig, _prepare_corpus, _segments, evaluate_baselines
    from tokswap.loading import load_tokenizer
    from tokswap.offline.corpus import build_corpus

    config = AlignmentConfig()
    _, held, _ = _prepare_corpus(build_corpus(total_bytes=args.corpus_bytes, seed=0), config)
    segments = _segments(held, config.eval_segments, config.eval_segment_chars)
    lines = ["# Alignment benchmark: the random baselines over seeds", "",
             f"Command: `python bench/bench_alignment.py {' '.join(args.argv)}`", "",
             f"Each baseline drawn with seeds {', '.join(map(str, args.baseline_seeds))} and scored on the {len(segments)} "
             "held-out segments the alignment reports use (the corpus and its split at seed 0). Mean ± std over seeds.",
             "", "| pair | baseline | BLEU-1 | similarity | BLEU-1 per seed |", "|---|---|---|---|---|"]
    for pair in args.pairs.split(","):
        source_name, target_name = pair.split(":")
        source, target = load_tokenizer(source_name), load_tokenizer(target_name)
        runs = [evaluate_baselines(source, target, segments, seed=seed) for seed in args.baseline_seeds]
        for kind in runs[0]:
            bleu = [run[kind]["bleu1"] for run in runs]
            sim = [run[kind]["semantic_similarity"] for run in runs]
            lines.append(f"| {source_name} -> {target_name} | {kind} | {statistics.mean(bleu):.4f} ± "
                         f"{statistics.stdev(bleu):.4f} | {statistics.mean(sim):.4f} ± {statistics.stdev(sim):.4f} | "
                         + ", ".join(f"{b:.4f}" for b in bleu) + " |")
        print(lines[-3:], flush=True)
    text = "\n".join(lines) + "\n"
    Path(args.output).write_text(text, encoding="utf-8")
    print(text)
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus-bytes", type=int, default=3_000_000)
    parser.add_argument("--dim", type=int, default=100)
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--min-count", type=int, default=5)
    parser.add_argument("--pairs", default=",".join(f"{s}:{t}" for s, t in PAIRS),
                        help="source:target pairs, comma-separated; 'none' runs only the matching benchmark")
    parser.add_argument("--seed", type=int, default=0,
                        help="GloVe and self-check hold-out seed (the corpus, its split and the baselines stay seed 0)")
    parser.add_argument("--skip-matching-bench", action="store_true")
    parser.add_argument("--matching-repeats", type=int, default=1,
                        help="time the matching this many times per search space (a fresh process each); mean ± std")
    parser.add_argument("--output", default="bench/results/alignment.md")
    parser.add_argument("--summarize", nargs="+", default=None, metavar="REPORT.md",
                        help="no run: mean ± std over these reports (one per seed), written to --output")
    parser.add_argument("--baseline-seeds", nargs="+", type=int, default=None, metavar="SEED",
                        help="no GloVe: score only the random baselines, once per seed, on the held-out segments")
    args = parser.parse_args(argv)
    args.argv = sys.argv[1:] if argv is None else argv
    if args.summarize:
        return summarize(args.summarize, args.output, args.argv)
    if args.baseline_seeds:
        return baseline_spread(args)

    from tokswap.align.pipeline import AlignmentConfig, align_tokenizers
    from tokswap.loading import load_tokenizer
    from tokswap.offline.corpus import build_corpus

    started = time.perf_counter()
    corpus = None if args.pairs == "none" else build_corpus(total_bytes=args.corpus_bytes, seed=0)
    results = []
    for pair in [] if args.pairs == "none" else args.pairs.split(","):
        source_name, target_name = pair.split(":")
        source, target = load_tokenizer(source_name), load_tokenizer(target_name)
        row = {"pair": f"{source_name} -> {target_name}"}
        # The seed moves GloVe's init and the self-check hold-out; the corpus and its split stay fixed, so seeds
        # differ only in the training randomness whose spread the published margins need.
        base = dict(dim=args.dim, iterations=args.iterations, min_count=args.min_count, glove_seed=args.seed,
                    anchor_seed=args.seed)
        t0 = time.perf_counter()
        main_run = align_tokenizers(source, target, corpus=corpus, progress=False,
                                    config=AlignmentConfig(**base, evaluate_baselines=True))
        row["seconds"] = time.perf_counter() - t0
        row["main"] = main_run.config["metrics"]
        row["timings"] = main_run.config["timings_seconds"]
        row["corpus"] = {k: main_run.config["corpus"][k] for k in ("num_bytes", "source_tokens", "target_tokens")}
        row["row_sources"] = main_run.counts_by_row_source()
        for name, extra in (("procrustes_csls_nogate", dict(min_match_precision=None)),
                            ("procrustes_no_csls", dict(hubness_correction="none", min_match_precision=None)),
                            ("relative_300_csls", dict(method="relative", min_match_precision=None)),
                            ("relative_300_no_csls", dict(method="relative", hubness_correction="none", min_match_precision=None))):
            variant = align_tokenizers(source, target, corpus=corpus, progress=False,
                                       config=AlignmentConfig(**base, semantic_similarity=False, **extra))
            row[name] = variant.config["metrics"]
        results.append(row)
        print(json.dumps(row, indent=1, default=str), flush=True)

    matching = []
    if not args.skip_matching_bench:
        for search_dim in [d for d in (0, 128) for _ in range(args.matching_repeats)]:
            result = bench_matching(search_dim=search_dim)
            result["search_dim"] = search_dim or "full (300)"
            matching.append(result)
            print(json.dumps(result), flush=True)
    total = time.perf_counter() - started
    write_report(args, results, matching, total)
    return 0


def write_report(args, results, matching, total) -> None:
    lines = [
        "# Alignment benchmark",
        "",
        f"Command: `python bench/bench_alignment.py {' '.join(args.argv)}` (total {total / 60:.1f} min on the 2-core "
        f"CPU; load average at the end {__import__('os').getloadavg()[0]:.1f}).",
        "",
    ]
    if results:
        lines += quality_lines(args, results)
    if matching:
        lines += matching_lines(matching)
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {args.output}")


def quality_lines(args, results) -> list:
    lines = [
        f"Corpus: `tokswap.offline.corpus.build_corpus(total_bytes={args.corpus_bytes}, seed=0)` (train split for GloVe, test "
        f"split for BLEU-1/similarity). GloVe: {args.dim} dims, {args.iterations} iterations (the paper: 300/15), window 15, x_max 10, alpha 0.75, min count "
        f"{args.min_count}. Matching: Procrustes on all identical pairs both GloVe spaces trained (90%), "
        "CSLS k=10; 10% of those pairs held out for the self-check.",
        "",
        "## Identical tokens and quality",
        "",
        "| pair | identical raw | identical bytes | trained on both | BLEU-1 ours | BLEU-1 byte-id+random | "
        "BLEU-1 string-id+random | BLEU-1 random perm | sim ours | sim byte-id+random | sim string-id+random | "
        "sim random perm |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in results:
        m, b = row["main"], row["main"].get("baselines", {})
        lines.append(
            f"| {row['pair']} | {m['identical_raw_string']} | {m['identical_byte_level']} | {m['identical_trained_both']} | "
            f"**{fmt(m['bleu1'])}** | {fmt(b['byte_identical_random']['bleu1'])} | "
            f"{fmt(b['string_identical_random']['bleu1'])} | {fmt(b['random_permutation']['bleu1'])} | "
            f"**{fmt(m.get('semantic_similarity', float('nan')))}** | "
            f"{fmt(b['byte_identical_random'].get('semantic_similarity', float('nan')))} | "
            f"{fmt(b['string_identical_random'].get('semantic_similarity', float('nan')))} | "
            f"{fmt(b['random_permutation'].get('semantic_similarity', float('nan')))} |"
        )
    lines += [
        "",
        "## Cross-space matching: self-check and hubness",
        "",
        "Self-check: identical pairs held out of the fit; precision of recovering their source token among all "
        "trained source tokens. In-degree: most target tokens matched (by GloVe) to one source token.",
        "",
        "| pair | method | self-check P@1 | P@10 | max in-degree | GloVe-matched rows | BLEU-1 |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in results:
        for name, label in (("main", "Procrustes + CSLS + gate 0.9 (default)"),
                            ("procrustes_csls_nogate", "Procrustes + CSLS, every match kept (no gate)"),
                            ("procrustes_no_csls", "Procrustes, no CSLS"),
                            ("relative_300_csls", "relative reps, 300 anchors + CSLS"),
                            ("relative_300_no_csls", "relative reps, 300 anchors (paper)")):
            m = row[name]
            lines.append(
                f"| {row['pair']} | {label} | {fmt(m['self_check_precision_at_1'])} | "
                f"{fmt(m['self_check_precision_at_10'])} | {m['max_in_degree']} | {m.get('glove_matched', '')} | "
                f"{fmt(m['bleu1'])} |"
            )
    lines += ["", "Rows by how they were decided (default method):", ""]
    for row in results:
        lines.append(f"- {row['pair']}: {row['row_sources']}; corpus {row['corpus']}; timings (s) {row['timings']}")
    return lines


def _spread(runs: list, key: str, digits: int) -> str:
    xs = [r[key] for r in runs]
    return f"{statistics.mean(xs):.{digits}f} ± {statistics.stdev(xs):.{digits}f}"


def matching_lines(matching) -> list:
    lines = [
        "",
        "## Matching at scale: 152,000 target rows x 49,152 source rows, 300 dims, CSLS, top-10",
        "",
        "Random vectors, fresh subprocess per row; peak RSS includes the inputs (~0.23 GB) and torch.",
        "",
        "| search space | wall seconds | CPU seconds (all threads) | CPU seconds / threads | peak RSS (GB) |",
        "|---|---|---|---|---|",
    ]
    for m in matching:
        lines.append(f"| {m['search_dim']} | {m['seconds']:.1f} | {m['cpu_seconds']:.1f} | "
                     f"{m['cpu_seconds'] / m['threads']:.1f} | {m['peak_rss_gb']:.2f} |")
    spaces = {m["search_dim"]: [r for r in matching if r["search_dim"] == m["search_dim"]] for m in matching}
    for space, runs in spaces.items():
        if len(runs) > 1:
            lines.append(f"| {space}, mean ± std of {len(runs)} runs | {_spread(runs, 'seconds', 1)} | "
                         f"{_spread(runs, 'cpu_seconds', 1)} | | {_spread(runs, 'peak_rss_gb', 2)} |")
    return lines


if __name__ == "__main__":
    sys.exit(main())
