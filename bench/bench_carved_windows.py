"""Which carved words a run reads when half its windows are picked for them, against windows drawn at random.

`bench_leaderboard.py --carved-window-share 0.5` trains on windows of which half are picked greedily from a larger
corpus (`--carved-window-pool-bytes`, the same domains and held-out documents) for the carved words they use
(`tokswap.carved_windows`: SmolLM2's whole words that Qwen2.5 spells in pieces), the other half drawn at random from
the leaderboard's corpus. The picks depend on the text and the two tokenizers alone, so what they read is counted here
without training: distinct carved words, how many of the carved words in the scored choices of ARC-Easy's 570
validation questions and 1,000 PIQA questions they hold (`bench_zero_shot_new_tokens`), and the questions all of
whose carved words they hold; against them, as many windows drawn at random from the leaderboard's corpus, in the
order each of `--seeds` shuffles them (not a run's own batches, whose order the trainer's sampler sets; mean and
standard deviation over the seeds, then each seed's value). Also: the picked windows' domains. With `--balance`
(the run's `--carved-window-balance`), the picks keep the corpus's domain mix; with `--domains` too (the run's
`--carved-window-domains`), only those domains' share is picked, the others' drawn at random from the corpus.

    python bench/bench_carved_windows.py --seeds 5 6 > bench/results/carved_windows.md
    python bench/bench_carved_windows.py --seeds 5 6 --share 1 --balance > bench/results/carved_windows_balanced.md
    python bench/bench_carved_windows.py --seeds 5 6 --share 1 --balance --domains en \
        > bench/results/carved_windows_balanced_en.md
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_leaderboard as lb  # noqa: E402
import bench_zero_shot_new_tokens as zs  # noqa: E402


def domain_windows(pieces: list, target_tok, source_tok) -> tuple:
    """The windows `training_windows` makes of `pieces` (grouped by domain, in order) and the domain of each."""
    windows, domains = [], []
    for domain in dict.fromkeys(d for d, _, _ in pieces):
        made = lb.training_windows([p for d, _, p in pieces if d == domain], target_tok, source_tok)
        windows += made
        domains += [domain] * len(made)
    return windows, domains


def cell(values: list, fmt: str = "{:.1f}") -> str:
    spread = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{fmt.format(statistics.mean(values))} ± {fmt.format(spread)} ({', '.join(str(v) for v in values)})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[5, 6], help="window orders, one count per seed")
    parser.add_argument("--train-steps", type=int, default=200, help="the leaderboard run's")
    parser.add_argument("--share", type=float, default=0.5, help="the run's --carved-window-share")
    parser.add_argument("--balance", action="store_true", help="the run's --carved-window-balance")
    parser.add_argument("--domains", nargs="+", default=None, choices=lb.DOMAINS,
                        help="the run's --carved-window-domains (with --balance)")
    parser.add_argument("--pool-bytes", type=int, default=8_000_000, help="the run's --carved-window-pool-bytes")
    parser.add_argument("--heldout-bytes", type=int, default=4000, help="the leaderboard run's")
    parser.add_argument("--corpus-bytes", type=int, default=2_000_000, help="the leaderboard run's")
    args = parser.parse_args()
    if args.domains and not args.balance:
        parser.error("--domains goes with --balance")

    from tokswap.align.vocab import token_bytes
    from tokswap.carved_windows import carved_word_sets, greedy_cover
    from tokswap.loading import load_tokenizer

    source_tok, target_tok = load_tokenizer(lb.SOURCE_TOKENIZER), lb.load_target_tokenizer("qwen2.5")
    docs = lb.load_domain_documents()
    _, pieces = lb.split_documents(docs, list(lb.DOMAINS), args.heldout_bytes, args.corpus_bytes)
    windows = lb.training_windows([piece for _, _, piece in pieces], target_tok, source_tok)
    _, pool_pieces = lb.split_documents(docs, list(lb.DOMAINS), args.heldout_bytes, args.pool_bytes)
    pool, pool_domains = domain_windows(pool_pieces, target_tok, source_tok)
    count = round(args.share * args.train_steps * lb.TRAIN_BATCH)
    # the same windows the leaderboard run mixes in
    run_args = lb.parse_args(
        f"--heldout-bytes {args.heldout_bytes} --corpus-bytes {args.corpus_bytes} --train-steps {args.train_steps} "
        f"--stage1-steps 0 --carved-window-share {args.share} --carved-window-pool-bytes {args.pool_bytes}".split()
        + ["--carved-window-balance"] * args.balance
        + (["--carved-window-domains", *args.domains] if args.domains else [])
    )
    with contextlib.redirect_stdout(sys.stderr):  # its log line is not part of the table
        picked_texts = lb.carved_windows(run_args, target_tok, source_tok)
    if not args.balance:  # the plain pick is one greedy cover of the whole pool
        assert picked_texts == [pool[k] for k in greedy_cover(carved_word_sets(pool, source_tok, target_tok), count)]
    picked_words = frozenset().union(*carved_word_sets(picked_texts, source_tok, target_tok))

    target_bytes = set(token_bytes(target_tok))
    tasks = {}
    for task, n in (("arc_easy", 570), ("piqa", 1000)):
        _, _, id_sets = zs.carved_word_questions(task, n, source_tok, target_bytes)
        tasks[task] = id_sets

    def counts(words: frozenset) -> list:
        out = [len(words)]
        for id_sets in tasks.values():
            in_choices = frozenset().union(*id_sets)
            out += [len(words & in_choices), sum(1 for s in id_sets if s and s <= words)]
        return out

    window_sets = carved_word_sets(windows, source_tok, target_tok)
    total = args.train_steps * lb.TRAIN_BATCH
    random_counts, mixed_counts = [], []
    for seed in args.seeds:
        order = lb.shuffled(list(range(len(windows))), seed)
        random_counts.append(counts(frozenset().union(*(window_sets[k] for k in order[:total]))))
        # mixed_windows keeps as many random windows as picked ones
        rest = frozenset().union(*(window_sets[k] for k in order[: total - count]))
        mixed_counts.append(counts(picked_words | rest))

    arc_words = len(frozenset().union(*tasks["arc_easy"]))
    piqa_words = len(frozenset().union(*tasks["piqa"]))
    arc_q = sum(1 for s in tasks["arc_easy"] if s)
    piqa_q = sum(1 for s in tasks["piqa"] if s)
    print("# Carved words a run reads: windows picked for them against windows drawn at random\n")
    print(
        f"Leaderboard corpus: {len(windows):,} windows ({args.corpus_bytes:,} B of training pieces); pool: "
        f"{len(pool):,} windows ({args.pool_bytes:,} B of training pieces, the same held-out documents). "
        f"{count} windows picked for carved words; a run reads {total} windows "
        f"({args.train_steps} steps x {lb.TRAIN_BATCH}).\n"
    )
    header = (
        "| windows | distinct carved words | of ARC-Easy's {} in choices | ARC-Easy questions with all "
        "their carved words (of {}) | of PIQA's {} in choices | PIQA questions with all (of {}) |"
    )
    print(header.format(arc_words, arc_q, piqa_words, piqa_q))
    print("|---|---:|---:|---:|---:|---:|")
    seeds = ", ".join(str(s) for s in args.seeds)
    print(
        f"| {total} drawn at random (seeds {seeds}) | "
        + " | ".join(cell([c[i] for c in random_counts]) for i in range(5))
        + " |"
    )
    if count < total:
        print(
            f"| {count} picked + {total - count} drawn at random (seeds {seeds}) | "
            + " | ".join(cell([c[i] for c in mixed_counts]) for i in range(5))
            + " |"
        )
    label = f"{count} picked{' in the corpus domain mix' if args.balance else ''} alone"
    if args.domains:
        picked_in = " / ".join(run_args.carved_window_domains)
        label = f"{count} in the corpus domain mix, {picked_in} picked, the rest at random"
    print(
        f"| {label} | "
        + " | ".join(str(v) for v in counts(picked_words))
        + " |"
    )
    corpus_windows, corpus_domains = domain_windows(pieces, target_tok, source_tok)
    domain_of = {**dict(zip(corpus_windows, corpus_domains)), **dict(zip(pool, pool_domains))}
    shares = collections.Counter(domain_of[text] for text in picked_texts)
    pool_shares = collections.Counter(pool_domains)
    print("\nDomains of the picked windows (and of the pool and the leaderboard corpus, in windows):\n")
    corpus_shares = collections.Counter(corpus_domains)
    print("| domain | picked | pool | leaderboard corpus |")
    print("|---|---:|---:|---:|")
    for domain in lb.DOMAINS:
        print(
            f"| {domain} | {shares.get(domain, 0)} | {pool_shares.get(domain, 0):,} | "
            f"{corpus_shares.get(domain, 0):,} |"
        )
    print("\nCommand:\n")
    name = "carved_windows_balanced.md" if args.balance else "carved_windows.md"
    name = name.replace(".md", "".join(f"_{d}" for d in run_args.carved_window_domains or []) + ".md")
    print("    python bench/bench_carved_windows.py " + " ".join(sys.argv[1:]) + f" > bench/results/{name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
