"""Which carved words a rehearsal run reads, and how many of them the zero-shot tasks' answers hold.

`SelfDistillationConfig(rehearsal_weight=...)` (`tokswap.carved_rehearsal`) rehearses, at each window's shared
boundaries, the carved words the original model expects (SmolLM2's whole words that Qwen2.5 spells in pieces). The
words it picks depend on the original model and the text alone, not on the student, so they can be counted without
training: here on `--windows` training windows of the leaderboard's corpus, drawn in the order each of `--seeds`
shuffles them (as many windows as a 200-step run reads; not that run's own batches, whose order the trainer's sampler
sets; each count is the mean and standard deviation over the seeds, then each seed's value), with
the trainer's defaults (4 words per window, probability at least 0.01), over all carved tokens and over whole words
only (`rehearsal_whole_words`: a space, then letters), and whole words at 16 per window down to 0.001. Against them:
the carved words in the scored choices of ARC-Easy's 570 validation questions and 1,000 PIQA questions
(`bench_zero_shot_new_tokens`).

    python bench/bench_rehearsed_words.py --seeds 5 6 > bench/results/rehearsed_words.md
"""

from __future__ import annotations

import argparse
import collections
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_leaderboard as lb  # noqa: E402
import bench_zero_shot_new_tokens as zs  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[5, 6], help="window orders, one count per seed")
    parser.add_argument("--windows", type=int, default=800, help="200 steps x 4 windows")
    parser.add_argument("--heldout-bytes", type=int, default=4000, help="the leaderboard run's")
    parser.add_argument("--corpus-bytes", type=int, default=2_000_000, help="the leaderboard run's")
    args = parser.parse_args()

    from tokswap.align.leading_pieces import leading_piece_groups
    from tokswap.align.vocab import token_bytes
    from tokswap.carved_rehearsal import whole_words
    from tokswap.loading import load_tokenizer
    from tokswap.self_distillation import (
        SelfDistillationConfig,
        build_self_distillation_dataset,
        collate_self_distillation,
        rehearsal_picks,
    )

    defaults = SelfDistillationConfig(output_dir="unused", max_length=lb.TRAIN_MAX_LENGTH, report_to="none")
    source_tok, target_tok = load_tokenizer(lb.SOURCE_TOKENIZER), lb.load_target_tokenizer("qwen2.5")
    _, pieces = lb.split_documents(lb.load_domain_documents(), list(lb.DOMAINS), args.heldout_bytes,
                                   args.corpus_bytes)
    windows = lb.training_windows([piece for _, _, piece in pieces], target_tok, source_tok)
    teacher = lb.load_source_model().eval()
    groups = leading_piece_groups(target_tok, source_tok, len(target_tok), teacher.get_output_embeddings().weight.shape[0])
    carved = torch.tensor(sorted(groups.spellings), dtype=torch.long)
    words = torch.tensor(whole_words(carved.tolist(), source_tok), dtype=torch.long)
    count, floor = defaults.rehearsal_words, defaults.rehearsal_min_prob
    # name -> (candidates, words per window, least probability): the defaults, whole words, and whole words read
    # four times as often down to a tenth of the probability (what reaching the tasks' words would cost)
    selections = {"all carved tokens": (carved, count, floor), "whole words only": (words, count, floor),
                  f"whole words, {4 * count} per window at {floor / 10:g}": (words, 4 * count, floor / 10)}

    def count_picks(seed: int) -> tuple[int, int, dict[str, collections.Counter]]:
        texts = lb.shuffled(windows, seed)[: args.windows]
        data = build_self_distillation_dataset(texts, target_tok, source_tok, lb.TRAIN_MAX_LENGTH)
        picked = {name: collections.Counter() for name in selections}
        boundaries = 0
        for start in range(0, len(data), 8):
            batch = collate_self_distillation([data[i] for i in range(start, min(start + 8, len(data)))])
            with torch.no_grad():
                hidden = teacher(input_ids=batch["teacher_input_ids"], attention_mask=batch["teacher_attention_mask"],
                                 output_hidden_states=True).hidden_states[-1]
            boundaries += int((batch["student_chunks"].max(dim=1).values + 1).clamp(min=0).sum())
            for name, (tokens, per_window, least) in selections.items():
                found = rehearsal_picks(hidden, batch, teacher.get_output_embeddings(), tokens, per_window, least)
                if found is not None:
                    picked[name].update(found[3].tolist())
            print(f"seed {seed}: {min(start + 8, len(data))} / {len(data)} windows", file=sys.stderr, flush=True)
        return len(data), boundaries, picked

    runs = [count_picks(seed) for seed in args.seeds]

    def spread(values: list[int]) -> str:
        """Mean ± standard deviation over the seeds, then each seed's value (std 0 with one seed)."""
        std = statistics.stdev(values) if len(values) > 1 else 0.0
        return f"{statistics.mean(values):,.1f} ± {std:,.1f} ({' / '.join(f'{v:,}' for v in values)})"

    target_bytes = set(token_bytes(target_tok))
    seeds = " ".join(str(seed) for seed in args.seeds)
    lines = ["# The carved words a rehearsal run reads", "",
             f"Generated by `python bench/bench_rehearsed_words.py --seeds {seeds} --windows {args.windows}`. "
             f"{runs[0][0]} training windows per seed (the first {args.windows} of the corpus's windows in the order "
             f"each seed shuffles them); each count is the mean ± standard deviation over seeds {seeds}, then each "
             f"seed's value. Unless named, the trainer's defaults: {count} words per window at "
             f"probability {floor:g} or more. SmolLM2 has {len(carved):,} tokens that Qwen2.5 "
             "spells in two or more pieces; "
             f"{len(words):,} of them are whole words (a space, then letters).", "",
             "| | " + " | ".join(selections) + " |", "|---|" + "---:|" * len(selections),
             "| shared boundaries read | " + " | ".join(spread([r[1] for r in runs]) for _ in selections) + " |",
             "| words rehearsed (occurrences) | "
             + " | ".join(spread([sum(r[2][name].values()) for r in runs]) for name in selections) + " |",
             "| distinct words rehearsed | "
             + " | ".join(spread([len(r[2][name]) for r in runs]) for name in selections) + " |", ""]
    lines += ["| task | questions | rehearsing | distinct carved words in scored choices | of them rehearsed | "
              "questions with a carved word in a choice | of them with a rehearsed one |",
              "|---|---:|---|---:|---:|---:|---:|"]
    for task, n in (("arc_easy", 570), ("piqa", 1000)):
        per_question, _, id_sets = zs.carved_word_questions(task, n, source_tok, target_bytes)
        in_choices = set().union(*id_sets)
        holding = [ids for ids in id_sets if ids]
        for name in selections:
            reached = [set(r[2][name]) for r in runs]
            lines.append(f"| {task} | {len(per_question)} | {name} | {len(in_choices)} | "
                         f"{spread([len(in_choices & words_read) for words_read in reached])} | {len(holding)} | "
                         f"{spread([sum(1 for ids in holding if ids & words_read) for words_read in reached])} |")
    for name in selections:
        counts = sum((r[2][name] for r in runs), collections.Counter())
        top = ", ".join(f"`{source_tok.convert_ids_to_tokens(w)}` {c}" for w, c in counts.most_common(30))
        lines += ["", f"Most rehearsed ({name}), summed over the seeds: {top}."]
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
