"""Recovery after a swap: self-distillation from the original model vs plain cross-entropy, same batches.

SmolLM2-135M (tokswap asset `smollm2-135m`) is given the Qwen2.5 tokenizer with the `fvt` init, then trained
for N stage-1 steps (embeddings + head, lr 6.4e-4, 4 x 128 tokens) on the same windows of text in the same
order, by arm:

- `ce`: `SelfDistillationTrainer` with only the cross-entropy weight (the plain next-token loss, on exactly the
  windows the other arms see);
- `sd`: cross-entropy + chunk-likelihood matching + hidden-state matching (the first self-distillation recipe; the
  library's default since is measured by `bench_leaderboard.py` and costed by `bench_recovery_cost.py`);
- `ll`: cross-entropy + chunk-likelihood matching; `hid`: cross-entropy + hidden-state matching;
- `hid10` / `sd10`: as `hid` / `sd` with the hidden-state weight at 10;
- `swap_scaled` / `ce_scaled`: as `swap` / `ce` from the `fvt_scaled` init (the library's default init).

Held-out text: the first whole documents of four domains (en, code, de, zh), 3,000 bytes each, never in the
training text (`bench_init_methods.split_corpus`). Prints one JSON line per arm (bits per byte per domain and
their mean; `swap` is the model right after the swap):

    python bench/bench_self_distill.py swap,ce,sd 20 > bench/results/self_distill.jsonl
    python bench/bench_self_distill.py hid10,sd10 20 >> bench/results/self_distill.jsonl
    python bench/bench_self_distill.py swap_scaled,ce_scaled 20 >> bench/results/self_distill.jsonl
    python bench/bench_self_distill.py ce,sd,hid10,sd10 20 --seed 1 >> bench/results/self_distill.jsonl
    python bench/bench_self_distill.py ce_scaled 20 --seed 1 | grep '^{"arm"' >> bench/results/self_distill.jsonl
    python bench/bench_self_distill.py --table      # writes bench/results/self_distill.md from the jsonl

`--seed N` (default 0) shuffles the training windows and seeds the trainer with N; the swap itself has no
randomness (`swap` rows need no second seed).
"""

import copy
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_init_methods import bits_per_byte, domain_documents, shared_rows_alignment, split_corpus  # noqa: E402

WEIGHTS = {"ce_scaled": (1, 0, 0), "swap_scaled": None, "ce": (1, 0, 0), "sd": (1, 1, 1), "ll": (1, 1, 0), "hid": (1, 0, 1), "hid10": (1, 0, 10), "sd10": (1, 1, 10)}


def main(arms, steps, seed=0):
    from datasets import Dataset
    from transformers import AutoModelForCausalLM

    from tokswap.loading import load_tokenizer
    from tokswap.offline import assets
    from tokswap.swapper import TokenizerSwapper
    from tokswap.training import VocabAdaptationConfig, adapt_vocabulary

    torch.manual_seed(seed)
    heldout, train = split_corpus(domain_documents(), 3000, 1_000_000)
    heldout = {k: heldout[k] for k in ("en", "code", "de", "zh")}
    source, target = load_tokenizer("smollm2"), load_tokenizer("qwen2.5")
    alignment = shared_rows_alignment(source, target)
    path = assets.model_path("smollm2-135m")
    original = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()

    def score(model, tokenizer):
        model.eval()
        result = {d: bits_per_byte(model, tokenizer, text) for d, text in heldout.items()}
        result["mean"] = sum(result.values()) / len(result)
        return result

    pieces = [p for text in train for p in (text[i : i + 600] for i in range(0, len(text), 600))]
    random.Random(seed).shuffle(pieces)
    data = Dataset.from_dict({"text": pieces[:4000]})
    for arm in arms:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
        # arms ending in _scaled start from the fvt_scaled init (the library default) instead of fvt
        init = "fvt_scaled" if arm.endswith("_scaled") else "fvt"
        swapper = TokenizerSwapper.from_pretrained(model, copy.deepcopy(target), alignment=alignment,
                                                   init_method=init, source_tokenizer=source)
        if arm.startswith("swap"):
            print(json.dumps({"arm": arm, **score(swapper.model, swapper.tokenizer)}), flush=True)
            continue
        ce, likelihood, hidden = WEIGHTS[arm]
        started = time.time()
        with tempfile.TemporaryDirectory() as workdir:
            config = VocabAdaptationConfig(
                output_dir=workdir, stage1_max_steps=steps, stage2_max_steps=0, per_device_train_batch_size=4,
                max_length=128, logging_steps=10, save_steps=100000, save_final_model=False, seed=seed,
                recovery="self_distill", self_distill_ce_weight=ce, self_distill_likelihood_weight=likelihood,
                self_distill_hidden_weight=hidden,
            )
            result = adapt_vocabulary(swapper.model, swapper.tokenizer, data, config, teacher_model=original,
                                      teacher_tokenizer=source)
        print(json.dumps({"arm": arm, "steps": steps, "seed": seed, "seconds": round(time.time() - started),
                          **score(result.model, swapper.tokenizer),
                          "log": [{k: round(v, 3) for k, v in e.items() if isinstance(v, float)}
                                  for e in result.stage1_log_history[-2:]]}), flush=True)


RESULTS = Path(__file__).resolve().parent / "results"
LABELS = {**{arm: str(w) for arm, w in WEIGHTS.items()}, "swap": "right after the swap",
          "swap_scaled": "right after the swap (fvt_scaled)", "ce_scaled": "(1, 0, 0), fvt_scaled init"}


def _mean_std(values: list) -> str:
    if len(values) == 1:
        return f"{values[0]:.4f}"
    return f"{statistics.mean(values):.4f} ± {statistics.stdev(values):.4f}"


def write_table() -> str:
    """`results/self_distill.md` from `results/self_distill.jsonl` (one line per arm, seeds averaged)."""
    rows = [json.loads(line) for line in (RESULTS / "self_distill.jsonl").read_text().splitlines() if line.strip()]
    by_arm = {}
    for r in rows:
        by_arm.setdefault(r["arm"], []).append(r)
    lines = [
        "# Recovery after the swap: self-distillation vs cross-entropy (SmolLM2-135M -> Qwen2.5, `fvt` init)", "",
        "Written by `python bench/bench_self_distill.py --table` from `self_distill.jsonl`, whose rows came from:", "",
        "    python bench/bench_self_distill.py swap,ce,sd 20 > bench/results/self_distill.jsonl",
        "    python bench/bench_self_distill.py hid10,sd10 20 >> bench/results/self_distill.jsonl",
        "    python bench/bench_self_distill.py swap_scaled,ce_scaled 20 >> bench/results/self_distill.jsonl",
        "    python bench/bench_self_distill.py ce,sd,hid10,sd10 20 --seed 1 >> bench/results/self_distill.jsonl",
        "    python bench/bench_self_distill.py ce_scaled 20 --seed 1 | grep '^{\"arm\"' >> bench/results/self_distill.jsonl", "",
        "20 stage-1 steps (embeddings + tied head, lr 6.4e-4, 4 x 128 tokens), identical windows of text in the same "
        "order for every arm of a seed (the seed shuffles the windows and seeds the trainer); bits per byte on held-out "
        "whole documents (en, code, de, zh; 3,000 bytes each). Per-domain columns are means over the arm's seeds; "
        "the mean column gives mean ± std where there are two seeds. Loss weights are (cross-entropy, chunk "
        "likelihood, hidden state). Train seconds per seed: the first seed's were measured while other jobs shared the "
        "two cores and are not comparable across arms; the second seed ran alone.", "",
        "| arm | weights | seeds | en | code | de | zh | mean | train seconds |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for arm, runs in by_arm.items():
        cells = " | ".join(f"{statistics.mean(r[d] for r in runs):.4f}" for d in ("en", "code", "de", "zh"))
        seconds = " / ".join(str(r.get("seconds", r.get("secs", "-"))) for r in runs)
        lines.append(f"| {arm} | {LABELS[arm]} | {len(runs)} | {cells} | **{_mean_std([r['mean'] for r in runs])}** "
                     f"| {seconds} |")
    swap = by_arm["swap"][0]["mean"]
    trained = {arm: [swap - r["mean"] for r in runs] for arm, runs in by_arm.items()
               if not arm.startswith("swap") and not arm.endswith("_scaled")}
    means = {arm: statistics.mean(v) for arm, v in trained.items()}
    spread = max(means.values()) - min(means.values())
    noise = max((statistics.stdev(v) for v in trained.values() if len(v) > 1), default=None)
    verdict = (f"the arms' means lie within {spread:.4f} of each other"
               + (f", against a seed-to-seed std of up to {noise:.4f}: " + ("a tie" if spread <= 2 * noise else "not a tie")
                  if noise is not None else ""))
    lines += ["", f"Recovered right after the swap -> after {rows[-1].get('steps', '?')} steps: "
              + ", ".join(f"`{arm}` {_mean_std(v)}" for arm, v in trained.items())
              + f" bits per byte (all from the `fvt` init); {verdict}."]
    text = "\n".join(lines) + "\n"
    (RESULTS / "self_distill.md").write_text(text)
    return text


if __name__ == "__main__":
    if sys.argv[1] == "--table":
        print(write_table())
    else:
        seed = int(sys.argv[sys.argv.index("--seed") + 1]) if "--seed" in sys.argv else 0
        main(sys.argv[1].split(","), int(sys.argv[2]), seed)
