"""A small real two-stage run on this CPU: SmolLM2-135M swapped to the Qwen2.5 tokenizer, TokAlign init vs
random init, the same budget for both. Writes loss curves in bits per byte (PNG) and held-out numbers.

    python bench/bench_training.py --stage1-steps 30 --stage2-steps 30 --out bench/results

Training losses (nats per token) are converted to bits per byte with the training data's bytes per token
under the Qwen2.5 tokenizer, so both inits share one scale. Held-out bits per byte
(`tokswap.evaluation.bits_per_byte`) are measured before training, after stage 1 and after stage 2.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from portable import portable  # noqa: E402  (bench/portable.py)


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def compute_alignment(args, target: str, texts: list):
    """The alignment both arms share, computed on the training corpus with a small GloVe (seed 0)."""
    from tokswap.align.pipeline import AlignmentConfig, align_tokenizers

    log(f"alignment {args.source_tokenizer} -> {target} (GloVe {args.glove_dim} dims, {args.glove_iterations} iterations)")
    config = AlignmentConfig(dim=args.glove_dim, iterations=args.glove_iterations)
    return align_tokenizers(args.source_tokenizer, target, corpus=texts, config=config, progress=False)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", default="smollm2-135m")
    parser.add_argument("--source-tokenizer", default="smollm2")
    parser.add_argument("--alignment", default=None,
                        help="a saved TokenAlignment folder (else computed on the training corpus, see --glove-dim)")
    parser.add_argument("--glove-dim", type=int, default=100, help="GloVe size when the alignment is computed")
    parser.add_argument("--glove-iterations", type=int, default=10)
    parser.add_argument("--target", default="qwen2.5")
    parser.add_argument("--inits", default="tokalign,random")
    parser.add_argument("--stage1-steps", type=int, default=30)
    parser.add_argument("--stage2-steps", type=int, default=30)
    # the paper's rates, pinned: this bench reproduces the paper's TokAlign-vs-random comparison, and its published
    # numbers must not move when the library's default changes
    parser.add_argument("--stage1-lr", type=float, default=6.4e-4)
    parser.add_argument("--stage2-lr", type=float, default=5e-5)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--corpus-bytes", type=int, default=2_000_000)
    parser.add_argument("--heldout-texts", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the data order, the random init and training; 0 writes training_bench.json and "
                             "the curve plot, others training_bench_seed<N>.json")
    parser.add_argument("--out", default="bench/results")
    parser.add_argument("--workdir", default=None, help="checkpoints (default: a temp folder)")
    args = parser.parse_args(argv)

    import tempfile

    import torch

    from tokswap.offline.assets import model_path
    from tokswap.offline.corpus import build_corpus
    from tokswap.evaluation import bits_per_byte
    from tokswap.swapper import TokenizerSwapper
    from tokswap.training import VocabAdaptationConfig, adapt_vocabulary

    torch.set_num_threads(2)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="tokswap-bench-training-"))

    log(f"corpus ({args.corpus_bytes} bytes)")
    corpus = build_corpus(total_bytes=args.corpus_bytes, seed=0)
    train = corpus["train"].select_columns(["text"]).shuffle(seed=args.seed)
    heldout = [t for t in corpus["test"]["text"] if len(t) > 200][: args.heldout_texts]

    alignment = args.alignment or compute_alignment(args, args.target, list(train["text"]))
    results = {"settings": portable(vars(args)), "runs": {}}
    for init in args.inits.split(","):
        log(f"swap {args.source} -> {args.target} with init={init}")
        start = time.perf_counter()
        # the asset folder, not the bare name: the swapper would look the name up on the (unreachable) Hub
        swapper = TokenizerSwapper.from_pretrained(
            str(model_path(args.source)), args.target, init_method=init, source_tokenizer=args.source_tokenizer,
            alignment=alignment, seed=args.seed,
        )
        model, tokenizer = swapper.model, swapper.tokenizer
        swap_seconds = time.perf_counter() - start
        if init == args.inits.split(",")[0]:
            sample = list(train.select(range(min(2000, len(train))))["text"])
            n_bytes = sum(len(t.encode("utf-8")) for t in sample)
            n_tokens = sum(len(ids) + 1 for ids in tokenizer(sample)["input_ids"])  # + eos added by TRL
            bytes_per_token = n_bytes / n_tokens
            results["train_bytes_per_token"] = bytes_per_token
            log(f"{bytes_per_token:.3f} bytes per token on the training data")

        def heldout_bpb():
            model.eval()
            value = bits_per_byte(model, tokenizer, heldout, batch_size=4, max_length=args.max_length, progress=False)
            return float(getattr(value, "bits_per_byte", value))

        run = {"swap_seconds": round(swap_seconds, 1), "heldout_bpb": {}}
        run["heldout_bpb"]["before"] = heldout_bpb()
        log(f"held-out bpb before training: {run['heldout_bpb']['before']:.3f}")
        config = VocabAdaptationConfig(
            output_dir=str(workdir / init),
            stage1_max_steps=args.stage1_steps,
            stage2_max_steps=0,
            stage1_learning_rate=args.stage1_lr,
            stage2_learning_rate=args.stage2_lr,
            per_device_train_batch_size=args.batch_size,
            max_length=args.max_length,
            logging_steps=1,
            save_steps=10_000,
            save_final_model=False,
            seed=42 + args.seed,
        )
        start = time.perf_counter()
        stage1 = adapt_vocabulary(model, tokenizer, train, config)
        run["stage1_seconds"] = round(time.perf_counter() - start, 1)
        model = stage1.model
        run["heldout_bpb"]["after_stage1"] = heldout_bpb()
        log(f"held-out bpb after stage 1: {run['heldout_bpb']['after_stage1']:.3f} ({run['stage1_seconds']} s)")
        curve = [e["loss"] for e in stage1.stage1_log_history if "loss" in e]
        if args.stage2_steps > 0:
            config.stage1_max_steps, config.stage2_max_steps = 0, args.stage2_steps
            start = time.perf_counter()
            stage2 = adapt_vocabulary(model, tokenizer, train, config)
            run["stage2_seconds"] = round(time.perf_counter() - start, 1)
            model = stage2.model
            run["heldout_bpb"]["after_stage2"] = heldout_bpb()
            log(f"held-out bpb after stage 2: {run['heldout_bpb']['after_stage2']:.3f} ({run['stage2_seconds']} s)")
            curve += [e["loss"] for e in stage2.stage2_log_history if "loss" in e]
        else:
            run["heldout_bpb"]["after_stage2"] = float("nan")
            stage2 = None
        run["train_loss_nats"] = curve
        run["train_bpb"] = [loss / math.log(2) / results["train_bytes_per_token"] for loss in curve]
        results["runs"][init] = run
        del swapper, model, stage1, stage2

    name = "training_bench.json" if args.seed == 0 else f"training_bench_seed{args.seed}.json"
    with open(out / name, "w") as handle:
        json.dump(results, handle, indent=2)
    if args.seed != 0:
        return 0

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for init, run in results["runs"].items():
        ax.plot(range(1, len(run["train_bpb"]) + 1), run["train_bpb"], label=f"{init} init")
    ax.axvline(args.stage1_steps + 0.5, color="grey", linestyle="--", linewidth=1)
    ax.text(args.stage1_steps + 1, ax.get_ylim()[1] * 0.95, "stage 2", color="grey", va="top")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("training loss (bits per byte)")
    ax.set_title(f"SmolLM2-135M -> {args.target} tokenizer, {args.batch_size}x{args.max_length} tokens/step")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "training_curves.png", dpi=120)

    print(f"{'init':<10}{'bpb before':>12}{'after stage 1':>15}{'after stage 2':>15}{'first train bpb':>17}{'last train bpb':>16}")
    for init, run in results["runs"].items():
        b = run["heldout_bpb"]
        print(f"{init:<10}{b['before']:>12.3f}{b['after_stage1']:>15.3f}{b['after_stage2']:>15.3f}"
              f"{run['train_bpb'][0]:>17.3f}{run['train_bpb'][-1]:>16.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
