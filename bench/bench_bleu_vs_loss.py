"""The paper's figure 5 at small scale: alignment quality (BLEU-1) against the initial loss of the swapped model.

Usage:
    python bench/bench_bleu_vs_loss.py --output bench/results/demo.md --plot bench/results/demo_bleu_vs_loss.png
    python bench/bench_bleu_vs_loss.py --summarize SEED0.json SEED1.json ... --output SUMMARY.md   # mean ± std over shuffle seeds

Alignments of graded quality are made from one TokAlign alignment (SmolLM2 -> Qwen2.5; computed with the
demo's settings on the default corpus unless `--alignment DIR` is given) by sending a fraction of its
rows to uniformly random source tokens (seeded):
- series "glove": a fraction of the GloVe-matched rows only (identical-token rows kept);
- series "matched": the same fraction of all GloVe-matched *and* identical-token rows.
Each alignment is scored by BLEU-1 (`tokswap.align.quality.bleu1` on held-out segments; the reverse map is
derived from `target_to_source` for every alignment, so all points are scored the same way) and used to
swap SmolLM2-135M's vocabulary (`tokalign` init, no training); the loss is measured right after the swap
on held-out text of each domain (`tokswap.evaluation.bits_per_byte`), in bits per byte and in nats per
target token. The paper reports that higher BLEU-1 goes with lower initial loss.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import platform
import sys
import time
from pathlib import Path

import numpy as np

START_MARK = "<!-- bench_bleu_vs_loss:start -->"
END_MARK = "<!-- bench_bleu_vs_loss:end -->"


def degrade(alignment, fraction: float, rows: str, num_source_rows: int, seed: int):
    """A copy of `alignment` with `fraction` of its `rows` ("glove" or "matched") sent to random sources."""
    from tokswap.alignment import RowSource, TokenAlignment

    codes = [RowSource.GLOVE] if rows == "glove" else [RowSource.GLOVE, RowSource.IDENTICAL]
    candidates = np.flatnonzero(np.isin(alignment.row_sources, codes))
    rng = np.random.default_rng(seed)
    chosen = rng.choice(candidates, size=int(round(fraction * len(candidates))), replace=False)
    target_to_source = alignment.target_to_source.copy()
    target_to_source[chosen] = rng.integers(0, num_source_rows, size=len(chosen))
    scores = alignment.scores.copy()
    return TokenAlignment(
        target_to_source=target_to_source, scores=scores, row_sources=alignment.row_sources.copy(),
        fallback_indptr=alignment.fallback_indptr, fallback_indices=alignment.fallback_indices,
        config={k: v for k, v in alignment.config.items() if k in ("source_tokenizer", "target_tokenizer")},
        source_to_target=None,  # BLEU-1 is then derived from target_to_source, like every other point
    ), len(chosen), len(candidates)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--alignment", default=None, help="alignment folder (default: computed with the demo's settings)")
    parser.add_argument("--target", default="qwen2.5")
    parser.add_argument("--fractions", default="0,0.25,0.5,0.75,1")
    parser.add_argument("--series", default="glove,matched", help="comma-separated: glove, matched")
    parser.add_argument("--corpus-bytes", type=int, default=2_000_000)
    parser.add_argument("--eval-bytes", type=int, default=4_000, help="held-out bytes per domain for the loss")
    parser.add_argument("--segments", type=int, default=400, help="held-out segments for BLEU-1")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", default=None, help="markdown file; the section between the bench markers is replaced")
    parser.add_argument("--plot", default=None, help="PNG of BLEU-1 against the initial loss")
    parser.add_argument("--json", default=None)
    parser.add_argument("--summarize", nargs="+", default=None, metavar="JSON",
                        help="summarize runs' --json files (one per shuffle seed) into --output; runs nothing")
    args = parser.parse_args(argv)
    if args.summarize:
        return summarize(args.summarize, args.output, argv)

    import torch
    from transformers import AutoModelForCausalLM

    from tokswap import TokenAlignment
    from tokswap.align.pipeline import AlignmentConfig, _segments, align_tokenizers
    from tokswap.align.quality import bleu1, source_to_target_map
    from tokswap.cli.demo import DemoConfig, heldout_by_domain
    from tokswap.evaluation import LN2, bits_per_byte
    from tokswap.loading import load_tokenizer
    from tokswap.offline.assets import model_path
    from tokswap.offline.corpus import build_corpus
    from tokswap.surgery import swap_vocabulary

    started = time.perf_counter()
    torch.manual_seed(args.seed)
    source_tok, target_tok = load_tokenizer("smollm2"), load_tokenizer(args.target)
    corpus = build_corpus(args.corpus_bytes, seed=0)
    if args.alignment:
        alignment = TokenAlignment.from_pretrained(args.alignment)
    else:
        demo = DemoConfig()
        alignment = align_tokenizers(source_tok, target_tok, corpus=corpus, config=AlignmentConfig(
            dim=demo.glove_dim, iterations=demo.glove_iterations, semantic_similarity=False,
            corpus_bytes=args.corpus_bytes))
    align_seconds = time.perf_counter() - started
    heldout = heldout_by_domain(corpus, args.eval_bytes)
    segments = _segments(list(corpus["test"]["text"]), args.segments, 600)
    source_ids = source_tok(segments, add_special_tokens=False)["input_ids"]
    target_ids = target_tok(segments, add_special_tokens=False)["input_ids"]
    base = AutoModelForCausalLM.from_pretrained(str(model_path("smollm2-135m")), dtype=torch.float32)
    num_source_rows = base.get_input_embeddings().weight.shape[0]

    points = []
    fractions = [float(f) for f in args.fractions.split(",")]
    for series in [s for s in args.series.split(",") if s]:
        for fraction in fractions:
            if fraction == 0 and any(p["fraction"] == 0 for p in points):
                # The untouched alignment is the same in every series: reuse its numbers.
                _, _, candidates = degrade(alignment, 0.0, series, num_source_rows, args.seed)
                point = dict(next(p for p in points if p["fraction"] == 0), series=series, rows_in_series=candidates)
                points.append(point)
                continue
            t0 = time.perf_counter()
            degraded, changed, candidates = degrade(alignment, fraction, series, num_source_rows, args.seed)
            mapping = source_to_target_map(degraded, len(source_tok))
            score = bleu1(mapping, source_ids, target_ids)
            model = copy.deepcopy(base)
            swap_vocabulary(model, degraded, target_tok, init_method="tokalign", source_tokenizer=source_tok,
                            seed=args.seed)
            nats = num_bytes = num_tokens = 0
            per_domain = {}
            for domain, texts in heldout.items():
                value = bits_per_byte(model, target_tok, texts, progress=False)
                per_domain[domain] = value.bits_per_byte
                nats += value.nats
                num_bytes += value.num_bytes
                num_tokens += value.num_tokens
            del model
            point = {"series": series, "fraction": fraction, "rows_changed": changed, "rows_in_series": candidates,
                     "bleu1": score, "bpb": nats / (LN2 * num_bytes), "nats_per_token": nats / num_tokens,
                     "bpb_by_domain": per_domain, "seconds": round(time.perf_counter() - t0, 1)}
            points.append(point)
            print(f"{series:8s} {fraction:4.2f}  BLEU-1 {score:.4f}  bpb {point['bpb']:.4f}  "
                  f"nats/token {point['nats_per_token']:.3f}  ({point['seconds']} s)", flush=True)
    elapsed = time.perf_counter() - started

    bleus = np.array([p["bleu1"] for p in points])
    losses = np.array([p["nats_per_token"] for p in points])
    bpbs = np.array([p["bpb"] for p in points])
    corr_nats = float(np.corrcoef(bleus, losses)[0, 1]) if len(points) > 2 else math.nan
    corr_bpb = float(np.corrcoef(bleus, bpbs)[0, 1]) if len(points) > 2 else math.nan

    header = "| series | fraction shuffled | rows changed | BLEU-1 | initial bits/byte | initial nats/token |"
    lines = [header, "|---|---|---|---|---|---|"]
    for p in points:
        lines.append(f"| {p['series']} | {p['fraction']:.2f} | {p['rows_changed']} / {p['rows_in_series']} | "
                     f"{p['bleu1']:.4f} | {p['bpb']:.4f} | {p['nats_per_token']:.3f} |")
    table = "\n".join(lines)
    print(table)
    print(f"Pearson r(BLEU-1, nats/token) = {corr_nats:.3f}; r(BLEU-1, bits/byte) = {corr_bpb:.3f}; {elapsed:.0f} s")

    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 4.2))
        for series, marker in (("glove", "o"), ("matched", "s")):
            chosen = [p for p in points if p["series"] == series]
            if chosen:
                ax.plot([p["bleu1"] for p in chosen], [p["nats_per_token"] for p in chosen], marker=marker,
                        label=f"shuffled: {series} rows")
                for p in chosen:
                    ax.annotate(f"{int(p['fraction'] * 100)}%", (p["bleu1"], p["nats_per_token"]), fontsize=7,
                                textcoords="offset points", xytext=(4, 4))
        ax.set_xlabel("alignment BLEU-1 (held-out text)")
        ax.set_ylabel("initial loss after the swap (nats per token)")
        ax.set_title(f"SmolLM2-135M -> {args.target}: BLEU-1 vs initial loss (r = {corr_nats:.2f})")
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        Path(args.plot).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(args.plot, dpi=110)
        plt.close(fig)

    command = "python bench/bench_bleu_vs_loss.py " + " ".join(argv if argv is not None else sys.argv[1:])
    section = "\n".join([
        START_MARK,
        "## Alignment quality (BLEU-1) vs initial loss (paper figure 5, small scale)",
        "",
        f"Command: `{command.strip()}`  ",
        f"Time: {elapsed:.0f} s ({align_seconds:.0f} s of it getting the base alignment), "
        f"{platform.machine()}, Python {platform.python_version()}.",
        "",
        "A fraction of the alignment's rows is sent to random source tokens; BLEU-1 on held-out segments; "
        "the loss is SmolLM2-135M's right after the swap (tokalign init, no training) on "
        f"{args.eval_bytes} held-out bytes per domain.",
        "",
        table,
        "",
        f"Pearson correlation between BLEU-1 and the initial loss: {corr_nats:.3f} (nats/token), "
        f"{corr_bpb:.3f} (bits/byte). Negative = better alignments start from a lower loss, as the paper reports.",
        "",
        f"Plot: `{args.plot}`" if args.plot else "",
        END_MARK,
    ])
    if args.output:
        path = Path(args.output)
        text = path.read_text(encoding="utf-8") if path.exists() else ""
        if START_MARK in text and END_MARK in text:
            before, rest = text.split(START_MARK, 1)
            text = before + section + rest.split(END_MARK, 1)[1]
        else:
            text = (text.rstrip() + "\n\n" if text else "") + section + "\n"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path}")
    if args.json:
        Path(args.json).write_text(json.dumps({"points": points, "pearson_nats": corr_nats, "pearson_bpb": corr_bpb},
                                              indent=1))
    return 0


def summarize(paths: list, output, argv=None) -> int:
    """Mean ± std over shuffle seeds of every point's BLEU-1 and initial bits per byte, and of Pearson's r."""
    import statistics

    runs = [json.loads(Path(p).read_text()) for p in paths]

    def spread(values: list, digits: int) -> str:
        if len(values) < 2:
            return f"{values[0]:.{digits}f}"
        return f"{statistics.mean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}"

    keys = [(p["series"], p["fraction"]) for p in runs[0]["points"]]
    lines = ["# Alignment quality (BLEU-1) vs initial loss over shuffle seeds (paper figure 5, small scale)", "",
             "Written by `python bench/bench_bleu_vs_loss.py " + " ".join(argv if argv is not None else sys.argv[1:])
             + "` from one run per seed (each file's command is in the markdown next to it).", "",
             f"{len(runs)} shuffle seeds; mean ± std.", "",
             "| series | fraction shuffled | BLEU-1 | initial bits/byte |", "|---|---|---|---|"]
    for series, fraction in keys:
        chosen = [next(p for p in r["points"] if p["series"] == series and p["fraction"] == fraction) for r in runs]
        lines.append(f"| {series} | {fraction:.2f} | {spread([p['bleu1'] for p in chosen], 4)} | "
                     f"{spread([p['bpb'] for p in chosen], 4)} |")
    lines += ["", "Pearson correlation between BLEU-1 and the initial loss (bits/byte): "
              + spread([r["pearson_bpb"] for r in runs], 3) + "; (nats/token): "
              + spread([r["pearson_nats"] for r in runs], 3) + "."]
    text = "\n".join(lines) + "\n"
    print(text)
    if output:
        Path(output).write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
