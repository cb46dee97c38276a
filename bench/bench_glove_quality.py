"""Alignment quality with tokswap's GloVe vs the Stanford GloVe C tool's vectors, same co-occurrences,
same matching code.

Both tokenizers' id streams of one corpus go through the C tool (vocab_count, cooccur, shuffle, glove;
built in a temporary folder, never kept) and through tokswap (`count_cooccurrences` in the C tool's mode,
`train_glove`), with the same window, min count, dimensions and iterations. The two sets of vectors are
then matched by the same `tokswap.align.pipeline.build_alignment` and scored by the same BLEU-1 on held-out text.

    python bench/bench_glove_quality.py --source smollm2 --target qwen2.5 --corpus-bytes 8000000 \
        --dim 100 --iterations 10 --output bench/results/glove_quality.md
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_glove import DEFAULT_GLOVE_REPO, build_stanford_glove, run_c_tool  # noqa: E402


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def tokenize(tokenizer, texts, batch=256):
    documents = []
    for start in range(0, len(texts), batch):
        for ids in tokenizer(texts[start : start + batch], add_special_tokens=False)["input_ids"]:
            if ids:
                documents.append(np.asarray(ids, dtype=np.int64))
    return documents


COLUMNS = ("BLEU-1", "self-check P@1", "P@10", "GloVe-matched rows")


def summarize(paths: list, output: str, argv) -> int:
    """Mean ± std over runs of this script (one per seed), read back from their markdown tables."""
    import statistics

    values, diffs = {}, []  # vectors -> column -> [one value per run]; each run's BLEU-1 difference (unrounded)
    for path in paths:
        for line in Path(path).read_text(encoding="utf-8").splitlines():
            if line.startswith("BLEU-1 difference (tokswap - C tool): "):
                diffs.append(float(line.split(": ")[1].split()[0]))
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if cells[0] in ("tokswap", "C tool"):
                for column, cell in zip(COLUMNS, cells[1:]):
                    values.setdefault(cells[0], {}).setdefault(column, []).append(float(cell))
    runs = {len(v) for columns in values.values() for v in columns.values()} | {len(diffs)}
    if runs != {len(paths)}:
        raise SystemExit(f"expected one tokswap and one C tool row in each of {len(paths)} files")

    def cell(xs: list, digits: int) -> str:
        return f"{statistics.mean(xs):.{digits}f} ± {statistics.stdev(xs):.{digits}f}"

    lines = ["# Alignment quality: tokswap GloVe vs the Stanford C tool's vectors, over seeds", "",
             f"Command: `python bench/bench_glove_quality.py {' '.join(argv)}`", "",
             f"Mean ± std over {len(paths)} runs (" + ", ".join(f"`{Path(p).name}`" for p in paths) + "), each a "
             "seed of both tools' GloVe on the same counts; same matching and BLEU-1 as each run.", "",
             "| vectors | " + " | ".join(COLUMNS) + " |", "|---|" + "---|" * len(COLUMNS)]
    for name, columns in values.items():
        lines.append(f"| {name} | " + " | ".join(cell(columns[c], 1 if c == "GloVe-matched rows" else 4)
                                                for c in COLUMNS) + " |")
    lines += ["", "BLEU-1 difference per seed (tokswap - C tool, points): " + ", ".join(f"{d:+.2f}" for d in diffs)
              + f"; mean {statistics.mean(diffs):+.2f} (goal: no worse than -0.5).", ""]
    text = "\n".join(lines)
    print(text)
    Path(output).write_text(text, encoding="utf-8")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", default="smollm2")
    parser.add_argument("--target", default="qwen2.5")
    parser.add_argument("--corpus-bytes", type=int, default=8_000_000)
    parser.add_argument("--dim", type=int, default=100)
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--window", type=int, default=15)
    parser.add_argument("--min-count", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--c-memory", type=float, default=4.0)
    parser.add_argument("--glove-repo", default=DEFAULT_GLOVE_REPO)
    parser.add_argument("--seed", type=int, default=0,
                        help="tokswap's GloVe seed; the C tool's shuffle and glove get seed + 1 (its seed must be > 0)")
    parser.add_argument("--output", default="bench/results/glove_quality.md")
    parser.add_argument("--summarize", nargs="+", default=None, metavar="RUN.md",
                        help="no run: mean ± std over the tables of these runs (one per seed), written to --output")
    args = parser.parse_args(argv)
    if args.summarize:
        return summarize(args.summarize, args.output, sys.argv[1:] if argv is None else argv)
    args.c_seed = args.seed + 1

    from tokswap.align.cooccurrence import count_cooccurrences
    from tokswap.align.glove import GloveConfig, load_stanford_vectors, train_glove
    from tokswap.align.pipeline import AlignmentConfig, _segments, build_alignment, evaluate_alignment
    from tokswap.loading import load_tokenizer
    from tokswap.offline.corpus import build_corpus

    started = time.perf_counter()
    corpus = build_corpus(total_bytes=args.corpus_bytes, seed=0)
    train_texts = [t for t in corpus["train"]["text"] if t.strip()]
    config = AlignmentConfig(dim=args.dim, iterations=args.iterations, window=args.window, min_count=args.min_count)
    eval_texts = _segments(list(corpus["test"]["text"]), config.eval_segments, config.eval_segment_chars)
    tokenizers = {side: load_tokenizer(name) for side, name in (("source", args.source), ("target", args.target))}
    work = Path(tempfile.mkdtemp(prefix="bench_glove_quality_"))
    build = None
    vectors = {"tokswap": {}, "C tool": {}}
    seconds = {"tokswap": 0.0, "C tool": 0.0}
    try:
        build = build_stanford_glove(args.glove_repo)
        for side, tokenizer in tokenizers.items():
            documents = tokenize(tokenizer, train_texts)
            vocab_size = len(tokenizer)
            log(f"{side}: {sum(d.size for d in documents):,} tokens")
            corpus_txt = work / f"{side}.txt"
            with open(corpus_txt, "w") as handle:
                for doc in documents:
                    handle.write(" ".join(map(str, doc.tolist())) + "\n")
            side_work = work / side
            side_work.mkdir()
            t0 = time.perf_counter()
            run_c_tool(build, corpus_txt, side_work, args, args.iterations)
            seconds["C tool"] += time.perf_counter() - t0
            c_vectors = load_stanford_vectors(side_work / "vectors.txt", vocab_size, dim=args.dim)
            vectors["C tool"][side] = (c_vectors.vectors, c_vectors.trained)
            t0 = time.perf_counter()
            # The C tool's counting mode: out-of-vocabulary tokens are skipped before the window is taken.
            cooc = count_cooccurrences(documents, vocab_size=vocab_size, window=args.window, min_count=args.min_count,
                                       skip_rare_in_window=True, progress=False)
            ours = train_glove(cooc, GloveConfig(dim=args.dim, iterations=args.iterations, num_threads=args.threads,
                                                     seed=args.seed),
                               progress=False)
            seconds["tokswap"] += time.perf_counter() - t0
            vectors["tokswap"][side] = (ours.vectors, ours.trained)
            log(f"{side}: C tool trained {int(c_vectors.trained.sum()):,} tokens, tokswap {int(ours.trained.sum()):,}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if build is not None:
            shutil.rmtree(build.parents[1], ignore_errors=True)  # the temporary clone of the C tool

    results = {}
    for name, sides in vectors.items():
        alignment = build_alignment(tokenizers["source"], tokenizers["target"], *sides["source"], *sides["target"],
                                    config=config)
        metrics = evaluate_alignment(alignment, tokenizers["source"], tokenizers["target"], eval_texts, semantic=False)
        diagnostics = alignment.config["diagnostics"]
        results[name] = {
            "bleu1": metrics["bleu1"], "glove_seconds": round(seconds[name], 1),
            **{k: diagnostics[k] for k in ("self_check_precision_at_1", "self_check_precision_at_10", "glove_matched",
                                           "max_in_degree", "identical_trained_both")},
        }
        log(f"{name}: {results[name]}")

    ours, c = results["tokswap"], results["C tool"]
    lines = [
        "# Alignment quality: tokswap GloVe vs the Stanford C tool's vectors",
        "",
        f"Command: `python bench/bench_glove_quality.py {' '.join(sys.argv[1:] if argv is None else argv)}` "
        f"({(time.perf_counter() - started) / 60:.1f} min).",
        "",
        f"{args.source} -> {args.target}, `tokswap.offline.corpus.build_corpus({args.corpus_bytes})` train split for GloVe, "
        f"{len(eval_texts)} held-out segments for BLEU-1; window {args.window}, min count {args.min_count}, "
        f"{args.dim} dims, {args.iterations} iterations, {args.threads} threads, seed {args.seed} (C tool "
        f"{args.c_seed}); the same counts (C tool mode), the "
        "same `build_alignment` (Procrustes + CSLS) and the same BLEU-1.",
        "",
        "| vectors | BLEU-1 | self-check P@1 | P@10 | GloVe-matched rows | max in-degree | GloVe seconds (both sides) |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        lines.append(f"| {name} | {r['bleu1']:.4f} | {r['self_check_precision_at_1']:.4f} | "
                     f"{r['self_check_precision_at_10']:.4f} | {r['glove_matched']} | {r['max_in_degree']} | "
                     f"{r['glove_seconds']} |")
    lines += ["", f"BLEU-1 difference (tokswap - C tool): {100 * (ours['bleu1'] - c['bleu1']):+.2f} points "
              "(goal: no worse than -0.5).", ""]
    text = "\n".join(lines)
    print(text)
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(text, encoding="utf-8")
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
