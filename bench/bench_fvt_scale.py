"""Choosing the scale of `fvt_scaled` on text the leaderboard does not score.

SmolLM2-135M given the Qwen2.5 tokenizer with FVT, the rows of tokens made of two or more source pieces
multiplied by a factor; bits per byte on two random pieces (about 8 KB) per domain (en, de, zh, code) of the
*alignment corpus* of `bench_leaderboard.py` (the same split: never the held-out documents). One JSON line per
factor:

    python bench/bench_fvt_scale.py 1.0 0.9 0.8 > bench/results/fvt_scale.jsonl
"""

import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_leaderboard as lb  # noqa: E402
from bench_init_methods import shared_rows_alignment  # noqa: E402


def main(factors):
    from tokswap.loading import load_tokenizer
    from tokswap.offline import assets
    from tokswap.init_methods import ScaledFVTInit

    _, pieces = lb.split_documents(lb.load_domain_documents(), lb.DOMAINS, 4000, 2_000_000)
    by_domain = {}
    for domain, _, piece in pieces:
        by_domain.setdefault(domain, []).append(piece)
    validation = {}
    for domain in ("en", "de", "zh", "code"):
        chosen = by_domain[domain][:]
        random.Random(0).shuffle(chosen)
        validation[domain] = ("\n\n".join(chosen[:2]), [])
    source, target = load_tokenizer("smollm2"), lb.load_target_tokenizer("qwen2.5")
    alignment = shared_rows_alignment(source, target)
    for factor in factors:
        model, tokenizer = lb.swap(target, alignment, ScaledFVTInit(scale=factor), source, 0)
        scores = lb.bits_per_byte(model, tokenizer, validation)
        print(json.dumps({"scale": factor, **{k: round(v, 3) for k, v in scores.items()},
                          "mean": round(sum(scores.values()) / len(scores), 4)}), flush=True)


if __name__ == "__main__":
    main([float(x) for x in sys.argv[1:]])
