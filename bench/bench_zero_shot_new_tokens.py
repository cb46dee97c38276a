"""Where the swapped model's zero-shot accuracy is lost: questions with and without a token new to the source.

Reads the leaderboard's per-question zero-shot outcomes (`results/leaderboard.jsonl`: trained rows and the unswapped
model's, scored on the same questions) and splits each task's questions by whether any of their texts (context plus
each choice), tokenized with the target tokenizer, holds a token that is not in SmolLM2's vocabulary, i.e. a row
the swap had to initialize (`fvt_scaled`: the scaled mean of its pieces), and those again by whether the new token
is in a choice's scored tokens or only in the context. For each group: questions, the paired
difference against the unswapped model and its standard error, and the questions lost and gained. A second split
runs the other way: whether a choice holds a *carved* word, a whole word of SmolLM2's vocabulary that the target
spells in pieces (" evaporation" -> " ev" + "aporation"), whose source row the swap drops. Variants of a
recipe are paired with the recipe, and a recipe given more steps with its shorter schedule, on the same seed. No
model runs:

    python bench/bench_zero_shot_new_tokens.py   # writes bench/results/zero_shot_new_tokens.md
"""

from __future__ import annotations

import collections
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_leaderboard as lb  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def new_token_questions(task: str, n: int, source_vocab: set, target_tok) -> tuple:
    """Per question of `task` (its first `n`, in the scorer's order): where it holds a target token the source lacks
    ("choice": in a scored continuation, "context only", or "none"), and the most frequent such tokens (anywhere, in
    a choice). A fourth value: per question, whether the gold choice's scored tokens hold more new tokens than every
    other choice ("gold more"), fewer than some other ("gold fewer"), or as many ("equal"); a fifth: per question,
    `(each choice's number of new tokens among its scored tokens, the gold choice's index)`."""
    from tokswap.evaluation.zero_shot import load_task

    def tokens(text: str) -> list:
        return target_tok.convert_ids_to_tokens(target_tok(text, add_special_tokens=False).input_ids)

    places, counts, choice_counts, sides, per_question = [], collections.Counter(), collections.Counter(), [], []
    for example in load_task(task, limit=n):
        in_context, in_choice, per_choice = set(), set(), []
        for context, continuation in zip(example.contexts, example.continuations):
            context_tokens = tokens(context)
            whole = tokens(context + continuation)
            in_context.update(t for t in context_tokens if t not in source_vocab)
            # the scored tokens: what the whole text adds after the context's tokens (the scorer's split)
            scored_new = [t for t in whole[len(context_tokens):] if t not in source_vocab]
            in_choice.update(scored_new)
            per_choice.append(len(scored_new))
        places.append("choice" if in_choice else "context only" if in_context else "none")
        counts.update(in_context | in_choice)
        choice_counts.update(in_choice)
        gold, others = per_choice[example.gold], per_choice[: example.gold] + per_choice[example.gold + 1 :]
        sides.append("gold more" if gold > max(others) else "gold fewer" if gold < max(others) else "equal")
        per_question.append((per_choice, example.gold))
    return places, counts, choice_counts, sides, per_question


def most_common(counter: collections.Counter, n: int) -> list:
    """The n largest counts, ties by token: the counters are filled from sets, whose order changes with Python's hash
    seed, so `Counter.most_common` would order ties differently from run to run."""
    return sorted(counter.items(), key=lambda item: (-item[1], item[0]))[:n]


OFFSETS = (0.0, 1.0, 2.0, 4.0)


def group_cells(swapped_all: str, unswapped_all: str, pick: list) -> str:
    """The cells of one group of questions: its size, the paired difference ± se, questions lost and gained."""
    swapped = "".join(swapped_all[k] for k in pick)
    unswapped = "".join(unswapped_all[k] for k in pick)
    diff, se = lb.paired_difference(swapped, unswapped) if len(pick) > 1 else (float("nan"),) * 2
    lost = sum(a == "0" and b == "1" for a, b in zip(swapped, unswapped))
    gained = sum(a == "1" and b == "0" for a, b in zip(swapped, unswapped))
    return f"{len(pick)} | {diff:+.1f} ± {se:.1f} | {lost} | {gained}"


def offset_differences(loglikelihoods: list, per_question: list, original_correct: str, offsets) -> list:
    """Per offset c: each choice's summed log-likelihood plus c per counted token of that choice (`per_question`:
    (counts per choice, gold index)), the argmax recomputed (ties to the lowest index, as the scorer), paired with
    the unswapped model's outcomes: (difference, se) in points."""
    out = []
    for c in offsets:
        swapped = "".join("1" if int(np.argmax(np.array(scores) + c * np.array(counts))) == gold else "0"
                          for scores, (counts, gold) in zip(loglikelihoods, per_question))
        out.append(lb.paired_difference(swapped, original_correct))
    return out


def pooled_lines(pooled: dict, header: str, columns: list) -> list:
    """Rows of arms scored on two or more training seeds: per column, the mean over seeds of the per-seed paired
    difference ± its standard deviation over seeds (the spread a seed adds), and the seeds' range."""
    lines = []
    for key, per_column in pooled.items():
        seeds = len(per_column[0])
        if seeds < 2:
            continue
        cells = [f"{statistics.mean(v):+.1f} ± {statistics.stdev(v):.1f} ({min(v):+.1f} to {max(v):+.1f})"
                 for v in per_column]
        lines.append("| " + " | ".join(str(k) for k in key) + f" | {seeds} | " + " | ".join(cells) + " |")
    if not lines:
        return []
    return ["", header, "", "| " + " | ".join(columns) + " |",
            "|" + "---|" * (len(columns) - 1 - len(per_column)) + "---:|" * (1 + len(per_column)), *lines]


def offset_lines(rows: list, originals: dict, source_vocab: set) -> list:
    """A post-hoc bound on the gold-side bias: each choice's summed log-likelihood (kept by rows since the fourteenth
    session) raised by `c` nats per new token among its scored tokens, the argmax recomputed (ties to the lowest index,
    as the scorer), and the paired difference with the unswapped model. If no `c` brings a task near the unswapped
    model, raising new tokens' scores alone is not the lever for it."""

    pooled = {}
    lines = ["", "## If every new token in a choice scored c nats higher (post hoc, no model run)", "",
             "Rows that kept each choice's log-likelihood: that sum plus c per new token among the choice's scored "
             "tokens, the argmax recomputed, the difference paired with the unswapped model as above (c = 0 is the "
             "measured accuracy).", "",
             "| arm | task | questions | " + " | ".join(f"c = {c:g}" for c in OFFSETS) + " |",
             "|---|---|---:|" + "---:|" * len(OFFSETS)]
    for r in rows:
        # the control (no swap) has no new tokens of its own to offset
        for task, result in (r.get("zero_shot", {}) if r["phase"] == "train" and r["method"] != "none" else {}).items():
            original = originals.get((task, result["num_examples"]))
            if "loglikelihoods" not in result or original is None:
                continue
            *_, per_question = new_token_questions(task, result["num_examples"], source_vocab,
                                                   lb.load_target_tokenizer(r["target"]))
            found = offset_differences(result["loglikelihoods"], per_question, original["correct"], OFFSETS)
            lines.append(f"| {lb.arm_label(r)}, seed {r['seed']} | {task} | {result['num_examples']} | "
                         + " | ".join(f"{diff:+.1f} ± {se:.1f}" for diff, se in found) + " |")
            columns = pooled.setdefault((lb.arm_label(r), task, result["num_examples"]), [[] for _ in OFFSETS])
            for column, (diff, _) in zip(columns, found):
                column.append(diff)
    return lines + pooled_lines(pooled, "The same pooled over the training seeds of each arm (mean ± standard "
                                "deviation over seeds, and range):",
                                ["arm", "task", "questions", "seeds", *(f"c = {c:g}" for c in OFFSETS)])


def carved_word_questions(task: str, n: int, source_tok, target_bytes: set) -> tuple:
    """Per question of `task`: each choice's number of *carved* words among its scored text, i.e. source tokens the
    target vocabulary lacks (by bytes), such as SmolLM2's " evaporation", which Qwen2.5 spells " ev" + "aporation",
    and the gold choice's index; a Counter of the carved words in scored choices (questions holding each); and the set
    of carved words (source ids) in each question's scored choices."""
    from tokswap.align.vocab import token_bytes
    from tokswap.evaluation.zero_shot import load_task

    source_bytes = token_bytes(source_tok)

    def carved(ids: list) -> list:
        return [i for i in ids
                if source_bytes[i] is not None and len(source_bytes[i]) > 1 and source_bytes[i] not in target_bytes]

    per_question, words, id_sets = [], collections.Counter(), []
    for example in load_task(task, limit=n):
        per_choice, in_choice = [], set()
        for context, continuation in zip(example.contexts, example.continuations):
            context_ids = source_tok(context, add_special_tokens=False).input_ids
            whole = source_tok(context + continuation, add_special_tokens=False).input_ids
            found = carved(whole[len(context_ids):])
            per_choice.append(len(found))
            in_choice.update(found)
        words.update(source_tok.convert_ids_to_tokens(sorted(in_choice)))
        per_question.append((per_choice, example.gold))
        id_sets.append(in_choice)
    return per_question, words, id_sets


def carved_word_lines(rows: list, originals: dict) -> list:
    """The paired difference on questions whose scored choices hold a carved word (a whole source word the target
    spells in pieces, so its source row belongs to no target token) against those whose choices hold none; and, among
    the first, by whether the gold choice holds more of them than every other choice."""
    from tokswap.align.vocab import token_bytes
    from tokswap.loading import load_tokenizer

    source_tok = load_tokenizer(lb.SOURCE_TOKENIZER)
    lines = ["", "## Questions whose choices hold a carved word", "",
             "A carved word is a token of SmolLM2's vocabulary that the target's lacks (by bytes), so the target spells "
             "it in pieces and the swap drops its row (SmolLM2's ` evaporation`, Qwen2.5's ` ev` + `aporation`). "
             "Questions are split by whether any choice's scored text, in SmolLM2's tokenization, holds one; difference "
             "and errors as above.", "",
             "| arm | scored | task | questions | group | questions in group | difference (points) | lost | gained |",
             "|---|---|---|---:|---|---:|---:|---:|---:|"]
    cache, top, pooled = {}, {}, {}
    for r, name, when, task, result, original in scored_results(rows, originals):
        if r.get("method") == "none":  # the control has no swap
            continue
        marker = (task, result["num_examples"], r["target"])
        if marker not in cache:
            target_bytes = {b for b in token_bytes(lb.load_target_tokenizer(r["target"])) if b is not None}
            cache[marker] = carved_word_questions(task, result["num_examples"], source_tok, target_bytes)
        per_question, words, _ = cache[marker]
        if not r["target"].endswith(lb.KEPT_WORDS_SUFFIX):  # the lists describe the target as it is
            top[task] = words
        sides = ["none" if not max(counts) else "gold more" if counts[gold] > max(counts[:gold] + counts[gold + 1:])
                 else "other" for counts, gold in per_question]
        groups = [("a choice holds a carved word", ("gold more", "other")), ("no choice holds one", ("none",)),
                  ("... the gold choice holds more carved words", ("gold more",))]
        for label, wanted in groups:
            pick = [k for k, side in enumerate(sides) if side in wanted]
            lines.append(f"| {name} | {when} | {task} | {result['num_examples']} | {label} | "
                         + group_cells(result["correct"], original["correct"], pick) + " |")
            if r["phase"] == "train" and len(pick) > 1:
                key = (lb.arm_label(r), when, task, result["num_examples"], label, len(pick))
                pooled.setdefault(key, [[]])[0].append(lb.paired_difference(
                    "".join(result["correct"][k] for k in pick), "".join(original["correct"][k] for k in pick))[0])
    lines += pooled_lines(pooled, "Pooled over the training seeds of each arm: the mean of the per-seed differences "
                          "(points) ± their standard deviation over seeds, and their range:",
                          ["arm", "scored", "task", "questions", "group", "questions in group", "seeds",
                           "difference over seeds"])
    for task, words in top.items():
        shown = ", ".join(f"`{token!r}` {count}" for token, count in most_common(words, 12))
        lines += ["", f"{task}: the carved words in most scored choices (questions; {len(words)} distinct): {shown}"]
    return (lines + carved_offset_lines(rows, originals, cache) + variant_pair_lines(rows, cache)
            + longer_schedule_lines(rows, cache))


CARVED_OFFSETS = (0.0, 2.0, 4.0, 8.0)


def carved_offset_lines(rows: list, originals: dict, cache: dict) -> list:
    """Post hoc, as `offset_lines` but per carved word: is the carved words' loss a uniform under-rating (which a
    constant would undo) or a wrong ranking among them?"""
    pooled = {}
    lines = ["", "## If every carved word in a choice scored c nats higher (post hoc, no model run)", "",
             "Rows that kept each choice's log-likelihood, as in the table of new tokens above:", "",
             "| arm | task | questions | " + " | ".join(f"c = {c:g}" for c in CARVED_OFFSETS) + " |",
             "|---|---|---:|" + "---:|" * len(CARVED_OFFSETS)]
    for r in rows:
        for task, result in (r.get("zero_shot", {}) if r["phase"] == "train" and r["method"] != "none" else {}).items():
            original = originals.get((task, result["num_examples"]))
            marker = (task, result["num_examples"], r["target"])
            if "loglikelihoods" not in result or original is None or marker not in cache:
                continue
            per_question, *_ = cache[marker]
            found = offset_differences(result["loglikelihoods"], per_question, original["correct"], CARVED_OFFSETS)
            lines.append(f"| {lb.arm_label(r)}, seed {r['seed']} | {task} | {result['num_examples']} | "
                         + " | ".join(f"{diff:+.1f} ± {se:.1f}" for diff, se in found) + " |")
            columns = pooled.setdefault((lb.arm_label(r), task, result["num_examples"]), [[] for _ in CARVED_OFFSETS])
            for column, (diff, _) in zip(columns, found):
                column.append(diff)
    return lines + pooled_lines(pooled, "The same pooled over the training seeds of each arm (mean ± standard "
                                "deviation over seeds, and range):",
                                ["arm", "task", "questions", "seeds", *(f"c = {c:g}" for c in CARVED_OFFSETS)])


# What makes a trained row a variant of its arm's recipe (a row with none of them is the recipe itself)
VARIANT_KEYS = ("task_near_share", "teacher_text_share", "carved_window_share", "new_word_fit", "output_row_fit", "leading_piece",
                "merge_original", "sd_hidden_layers", "sd_rehearsal_weight", "stage2_mode", "stage2_fresh_order")
# a variant of the loss itself (or of what stage 2 trains) is paired with the recipe that lacks it: these recipe keys
# are not compared
LOSS_VARIANT_KEYS = {"stage2_mode": ("stage2_mode", "lora_r"), "stage2_fresh_order": ("stage2_fresh_order",),
                     "sd_hidden_layers": ("sd_hidden_weight", "sd_hidden_layers"),
                     "sd_rehearsal_weight": ("sd_rehearsal_weight", "sd_rehearsal_whole_words", "sd_rehearsal_words",
                                             "sd_rehearsal_min_prob")}


def plain_reference(rows: list, row: dict):
    """The trained row `row` varies: same arm, seed, steps, recovery and recipe, the arm's default init, none of
    `VARIANT_KEYS`, on the same target (for a '+words' target, its plain target: the swap without the kept words);
    None if `row` is itself plain or has no such row."""
    dropped = {key for variant, keys in LOSS_VARIANT_KEYS.items() if row.get(variant) is not None for key in keys}
    target = row["target"].removesuffix(lb.KEPT_WORDS_SUFFIX)

    def recipe_key(r):
        return (r["arm"], r["seed"], r["train_steps"], r["stage1_steps"], r.get("recovery"),
                sorted((k, v) for k, v in lb.row_recipe(r).items() if k not in dropped))

    if is_plain(row) and target == row["target"]:
        return None
    return next((r for r in rows if r["phase"] == "train" and "error" not in r and is_plain(r)
                 and r["target"] == target and recipe_key(r) == recipe_key(row)), None)


def is_plain(r: dict) -> bool:
    """A trained row that is its arm's recipe itself: none of `VARIANT_KEYS`, the arm's own init."""
    return not any(r.get(k) is not None and r.get(k) is not False for k in VARIANT_KEYS) and (
        lb.ARMS.get(r["arm"], (None,))[0] is not None or r["method"] == lb.default_init_method())


def shorter_schedule(rows: list, row: dict):
    """The plain row `row` is a longer schedule of: same arm, seed, recovery and recipe, the same share of stage-1
    steps, fewer steps; the longest such row, or None."""
    def schedule_key(r):
        return (r["arm"], r["seed"], r.get("recovery"), r["method"], sorted(lb.row_recipe(r).items()),
                r["stage1_steps"] * row["train_steps"] == row["stage1_steps"] * r["train_steps"])

    shorter = [r for r in rows if r["phase"] == "train" and "error" not in r and is_plain(r)
               and r["train_steps"] < row["train_steps"] and schedule_key(r) == schedule_key(row)]
    return max(shorter, key=lambda r: r["train_steps"], default=None)


def longer_schedule_lines(rows: list, cache: dict) -> list:
    """Each plain recipe given more steps (the same split between the stages) against its shorter schedule of the
    same seed, on the same questions: what the extra steps buy, on all questions and with and without a carved
    word."""
    lines = ["", "## A recipe given more steps against its shorter schedule, paired (same seed)", "",
             "Difference: the longer schedule's accuracy minus the shorter's on the same questions (points ± the "
             "standard error of the per-question difference); lost and gained against the shorter.", "",
             "| recipe | steps | task | questions | group | questions in group | difference (points) | lost | gained |",
             "|---|---|---|---:|---|---:|---:|---:|---:|"]
    pooled = {}
    for r in rows:
        if r["phase"] != "train" or "error" in r or r.get("method") == "none" or not is_plain(r):
            continue
        base = shorter_schedule(rows, r)
        for task, result in (r.get("zero_shot", {}) if base else {}).items():
            other = base.get("zero_shot", {}).get(task)
            marker = (task, result["num_examples"], r["target"])
            if (other is None or other["num_examples"] != result["num_examples"] or marker not in cache
                    or "correct" not in result or "correct" not in other):
                continue
            per_question = cache[marker][0]
            steps = f"{r['train_steps']} vs {base['train_steps']}"
            for label, pick in (("all", list(range(len(per_question)))),
                                ("a choice holds a carved word", [k for k, (c, _) in enumerate(per_question) if max(c)]),
                                ("no choice holds one", [k for k, (c, _) in enumerate(per_question) if not max(c)])):
                lines.append(f"| {lb.arm_label(r)}, seed {r['seed']} | {steps} | {task} | {result['num_examples']} | "
                             f"{label} | " + group_cells(result["correct"], other["correct"], pick) + " |")
                key = (lb.arm_label(r), steps, task, result["num_examples"], label, len(pick))
                pooled.setdefault(key, [[]])[0].append(lb.paired_difference(
                    "".join(result["correct"][k] for k in pick), "".join(other["correct"][k] for k in pick))[0])
    return lines + pooled_lines(pooled, "The same pooled over the seeds: the mean of the per-seed differences "
                                "(points) ± their standard deviation over seeds, and their range:",
                                ["recipe", "steps", "task", "questions", "group", "questions in group", "seeds",
                                 "difference over seeds"])


def variant_pair_lines(rows: list, cache: dict) -> list:
    """Each variant of a trained recipe (another init, another text mixture, a fit) against the plain recipe of the
    same seed, on the same questions: the variant's own effect, with the unswapped model's noise taken out, on all
    questions and on those with and without a carved word. For text the original model wrote from carved words,
    the questions with a carved word are split by whether one of them was a prompt: the words the text was written
    from against the words it was not."""
    trained = [r for r in rows if r["phase"] == "train" and "error" not in r and r.get("method") != "none"]
    lines = ["", "## Variants of a trained recipe against the recipe itself, paired (same seed, same batches)", "",
             "Difference: the variant's accuracy minus the plain recipe's on the same questions (points ± the standard "
             "error of the per-question difference); lost and gained against the plain recipe. Carved words as in "
             "\"Questions whose choices hold a carved word\"; \"a prompt\" is one of the words the original model's "
             "text was written from (`bench_leaderboard.carved_word_prompts`, the first `teacher_text_samples`).", "",
             "| variant | task | questions | group | questions in group | difference (points) | lost | gained |",
             "|---|---|---:|---|---:|---:|---:|---:|"]
    prompts, configs, pooled, bpb = {}, {}, {}, []
    for r in trained:
        base = plain_reference(rows, r)
        if base is None:
            continue
        if "mean_bpb" in r and "mean_bpb" in base:
            bpb.append((lb.arm_label(r), r["seed"], r["mean_bpb"], base["mean_bpb"]))
        start, samples = r.get("teacher_text_start"), r.get("teacher_text_samples")
        prompted = start in ("carved", "corpus")
        if prompted and (r["target"], start, samples) not in prompts:
            prompts[r["target"], start, samples] = set(carved_prompts(r["target"], samples, start, r["config"]))
            configs[r["target"], start, samples] = r["config"]
        for task, result in r.get("zero_shot", {}).items():
            other = base.get("zero_shot", {}).get(task)
            # carved words as the reference's target spells them: for kept words, the words the plain swap carves
            marker = (task, result["num_examples"], base["target"])
            if other is None or other["num_examples"] != result["num_examples"] or marker not in cache:
                continue
            per_question, _, id_sets = cache[marker]
            groups = [("all", range(len(per_question))),
                      ("a choice holds a carved word", [k for k, (c, _) in enumerate(per_question) if max(c)]),
                      ("no choice holds one", [k for k, (c, _) in enumerate(per_question) if not max(c)])]
            if prompted:
                used = prompts[r["target"], start, samples]
                groups += [("... one of them a prompt", [k for k, ids in enumerate(id_sets) if ids & used]),
                           ("... none of them a prompt", [k for k, ids in enumerate(id_sets) if ids and not ids & used])]
            for label, pick in groups:
                pick = list(pick)
                lines.append(f"| {lb.arm_label(r)}, seed {r['seed']} | {task} | {result['num_examples']} | {label} | "
                             + group_cells(result["correct"], other["correct"], pick) + " |")
                if len(pick) > 1:
                    key = (lb.arm_label(r), task, result["num_examples"], label, len(pick))
                    pooled.setdefault(key, [[]])[0].append(lb.paired_difference(
                        "".join(result["correct"][k] for k in pick), "".join(other["correct"][k] for k in pick))[0])
    lines += pooled_lines(pooled, "The same pooled over the training seeds of each variant: the mean of the per-seed "
                          "differences (points) ± their standard deviation over seeds, and their range:",
                          ["variant", "task", "questions", "group", "questions in group", "seeds",
                           "difference over seeds"])
    return lines + variant_bpb_lines(bpb) + prompt_list_lines(prompts, configs)


def prompt_list_lines(prompts: dict, configs: dict) -> list:
    """How many of each prompt list's words the source tokenizer writes in the run's training corpus: a prompt the
    corpus never uses (an intermediate BPE merge such as " behav") teaches no word a reader meets."""
    if not prompts:
        return []
    lines = ["", "The words each text was written from, against the carved words the source tokenizer writes in the "
             "run's training corpus (`bench_leaderboard.corpus_carved_prompts`):", "",
             "| target | prompts | samples | distinct words | of them in the corpus | carved words in the corpus |",
             "|---|---|---:|---:|---:|---:|"]
    for (target, start, samples), words in sorted(prompts.items()):
        used = set(carved_prompts(target, 10**9, "corpus", configs[target, start, samples]))
        lines.append(f"| {target} | {start} | {samples} | {len(words)} | {len(words & used)} | {len(used)} |")
    return lines


def variant_bpb_lines(bpb: list) -> list:
    """Held-out bits per byte of each variant and of the plain recipe of the same seed after training, and pooled
    over the variant's seeds (mean ± standard deviation over seeds of the per-seed difference)."""
    lines = ["", "Held-out bits per byte after training, the variant against the plain recipe of the same seed "
             "(lower is better; the leaderboard's held-out text):", "",
             "| variant | seed | variant bpb | plain recipe's bpb | difference |", "|---|---:|---:|---:|---:|"]
    per_variant = collections.defaultdict(list)
    for label, seed, mine, plain in bpb:
        lines.append(f"| {label} | {seed} | {mine:.3f} | {plain:.3f} | {mine - plain:+.3f} |")
        per_variant[label].append(mine - plain)
    for label, diffs in per_variant.items():
        if len(diffs) > 1:
            lines.append(f"| {label} | {len(diffs)} seeds | | | {statistics.mean(diffs):+.3f} ± "
                         f"{statistics.stdev(diffs):.3f} |")
    return lines


def carved_prompts(target: str, samples: int, start: str = "carved", config: dict | None = None) -> list:
    """The words the original model's carved-word text was written from (one per sample, `--teacher-text-samples`,
    cycling through the list): for `--teacher-text-start corpus`, the carved words of the training corpus of the
    row's `config`."""
    from tokswap.loading import load_tokenizer

    source_tok, target_tok = load_tokenizer(lb.SOURCE_TOKENIZER), lb.load_target_tokenizer(target)
    if start == "corpus":
        _, pieces = lb.split_documents(lb.load_domain_documents(), config["domains"], config["heldout_bytes"],
                                       config["corpus_bytes"], config.get("tail_heldout_bytes", 0))
        words = lb.corpus_carved_prompts(source_tok, target_tok, [piece for _, _, piece in pieces])
    else:
        words = lb.carved_word_prompts(lb.load_source_model(), source_tok, target_tok)
    return words[:samples]


def init_pair_lines(rows: list, reference: str = "fvt_scaled") -> list:
    """Each init scored right after the swap against `reference` on the same target and questions, paired: what a
    change of init alone does, without the unswapped model's noise in between. A '+words' target is paired with its
    plain target's `reference`: what keeping the carved words does to the same init."""
    scored = [r for r in rows if r["phase"] == "after_swap" and "error" not in r and r.get("zero_shot")]
    base = {(r["target"], task, result["num_examples"]): result for r in scored if r["method"] == reference
            for task, result in r["zero_shot"].items() if "correct" in result}
    lines = ["", f"## Inits right after the swap against `{reference}`, paired", "",
             f"Difference: the init's accuracy minus `{reference}`'s on the same questions (points ± the standard error "
             "of the per-question difference); lost and gained: questions it gets wrong that the reference gets right, "
             "and the reverse.", "",
             "| init | target | task | questions | difference (points) | lost | gained |", "|---|---|---|---:|---:|---:|---:|"]
    for r in scored:
        plain_target = r["target"].removesuffix(lb.KEPT_WORDS_SUFFIX)
        for task, result in r["zero_shot"].items():
            other = base.get((plain_target, task, result["num_examples"]))
            if (r["method"] == reference and plain_target == r["target"]) or other is None or "correct" not in result:
                continue
            diff, se = lb.paired_difference(result["correct"], other["correct"])
            lost = sum(a == "0" and b == "1" for a, b in zip(result["correct"], other["correct"]))
            gained = sum(a == "1" and b == "0" for a, b in zip(result["correct"], other["correct"]))
            lines.append(f"| {r['method']} | {r['target']} | {task} | {result['num_examples']} | {diff:+.1f} ± {se:.1f} "
                         f"| {lost} | {gained} |")
    return lines


# The training command of every trained arm in leaderboard.jsonl (`--heldout-bytes 4000 --corpus-bytes 2000000`):
# its corpus is both the alignment's text and the pool the training windows are drawn from.
TRAINING_CORPUS = dict(heldout_bytes=4000, corpus_bytes=2_000_000)
FREQUENCY_BINS = ((0, "never"), (3, "1-2 times"), (10, "3-9 times"), (float("inf"), "10 times or more"))


def corpus_frequency_lines(top: dict, target: str) -> list:
    """How often the training corpus holds the new tokens of each task's scored choices: what any fit or training
    on that text can reach (the output-row fit takes tokens seen at least 3 times; 200 steps see a fifth of it)."""
    from tokswap.loading import load_tokenizer

    _, pieces = lb.split_documents(lb.load_domain_documents(), lb.DOMAINS, **TRAINING_CORPUS)
    tokenizer = load_tokenizer(target)
    counts = collections.Counter()
    for ids in tokenizer([piece for _, _, piece in pieces], add_special_tokens=False).input_ids:
        counts.update(tokenizer.convert_ids_to_tokens(ids))

    def label(token: str) -> str:
        return next(name for bound, name in FREQUENCY_BINS if (counts[token] < bound if bound else not counts[token]))

    lines = ["", "## New tokens of the scored choices in the training corpus", "",
             f"New tokens in the scored choices by how often the training corpus ({target}; the leaderboard's "
             f"`--heldout-bytes {TRAINING_CORPUS['heldout_bytes']} --corpus-bytes {TRAINING_CORPUS['corpus_bytes']}`) "
             "holds them; tokenization only, no seed:", "",
             "| task | in the corpus | distinct new tokens | (question, token) pairs, token in a choice |", "|---|---|---:|---:|"]
    for task, (_, choice_counts) in top.items():
        for _, name in FREQUENCY_BINS:
            tokens = [t for t in choice_counts if label(t) == name]
            lines.append(f"| {task} | {name} | {len(tokens)} | {sum(choice_counts[t] for t in tokens)} |")
    return lines


def scored_results(rows: list, originals: dict):
    """Every zero-shot result of a swapped or trained row that the unswapped model was scored on with the same
    questions: (row, its name, when scored, task, result, the unswapped model's result)."""
    for r in rows:
        if r["phase"] not in ("train", "after_swap") or "error" in r:
            continue
        name, scorings = row_scorings(r)
        for when, key in scorings:
            for task, result in r.get(key, {}).items():
                original = originals.get((task, result["num_examples"]))
                if "correct" in result and original is not None:
                    yield r, name, when, task, result, original


def row_scorings(row: dict) -> tuple:
    """A leaderboard row's name in the tables and its zero-shot results: (when scored, the row's key) pairs."""
    if row["phase"] == "after_swap":  # phase after_swap with --zero-shot-after-swap: no training, no seed of its own
        return f"{row['method']} on {row['target']} (phase after_swap)", (("right after the swap", "zero_shot"),)
    return f"{lb.arm_label(row)}, seed {row['seed']}", (
        ("right after the swap", "zero_shot_after_swap"), (f"after {row['train_steps']} steps", "zero_shot"))


def main() -> int:
    from tokswap.loading import load_tokenizer

    rows = lb.load_rows(RESULTS / "leaderboard.jsonl")
    originals = {(task, result["num_examples"]): result for r in rows if r["phase"] == "original_zero_shot"
                 for task, result in r["zero_shot"].items() if "correct" in result}
    source_vocab = set(load_tokenizer(lb.SOURCE_TOKENIZER).get_vocab())
    lines = ["# Zero-shot accuracy lost by the swap: questions with and without a new token", "",
             "Generated by `python bench/bench_zero_shot_new_tokens.py` from `leaderboard.jsonl`. A question \"has a "
             "new token\" when its context or any choice, in the target tokenizer, holds a token that is not in "
             "SmolLM2's vocabulary (a row the swap initialized). Difference: swapped minus unswapped accuracy on the "
             "same questions, in points, ± the standard error of the per-question difference. The questions with a new token "
             "are split further by where it is: in a choice's scored tokens (what the scorer sums the log-likelihood "
             "over), or only in the context (e.g. PIQA's `?\\n` before `Answer:`); those in a choice by whether the gold "
             "choice holds more new tokens than the others, fewer, or as many.", "",
             "| arm | scored | task | questions | group | questions in group | difference (points) | lost | gained |",
             "|---|---|---|---:|---|---:|---:|---:|---:|"]
    top, tokenizers = {}, {}
    for r, name, when, task, result, original in scored_results(rows, originals):
        if r["target"] not in tokenizers:
            tokenizers[r["target"]] = lb.load_target_tokenizer(r["target"])
        target_tok = tokenizers[r["target"]]
        places, counts, choice_counts, sides, _ = new_token_questions(task, result["num_examples"],
                                                                   source_vocab, target_tok)
        if not r["target"].endswith(lb.KEPT_WORDS_SUFFIX):  # the lists describe the target as it is
            top[task] = (counts, choice_counts)
        any_side = ("gold more", "gold fewer", "equal")
        # the scorer sums log-likelihoods: which side the new tokens sit on says whether they pull it toward
        # or away from the gold choice
        groups = [("with a new token", ("choice", "context only"), any_side), ("without", ("none",), any_side),
                  ("... in a scored choice", ("choice",), any_side),
                  ("... in the context only", ("context only",), any_side),
                  ("... the gold choice holds more new tokens", ("choice",), ("gold more",)),
                  ("... the gold choice holds fewer", ("choice",), ("gold fewer",)),
                  ("... as many in every choice", ("choice",), ("equal",))]
        for label, wanted, wanted_sides in groups:
            pick = [k for k in range(len(places)) if places[k] in wanted and sides[k] in wanted_sides]
            lines.append(f"| {name} | {when} | {task} | {result['num_examples']} | {label} | "
                         + group_cells(result["correct"], original["correct"], pick) + " |")
    for task, (counts, choice_counts) in top.items():
        shown = ", ".join(f"`{token!r}` {count}" for token, count in most_common(counts, 8))
        lines += ["", f"{task}: the new tokens in most questions (questions holding them): {shown}"]
        shown = ", ".join(f"`{token!r}` {count}" for token, count in most_common(choice_counts, 12))
        lines += ["", f"{task}: the new tokens in most scored choices (questions holding them in a choice; "
                  f"{len(choice_counts)} distinct): {shown}"]
    lines += offset_lines(rows, originals, source_vocab)
    lines += carved_word_lines(rows, originals)
    lines += init_pair_lines(rows)
    lines += corpus_frequency_lines(top, "qwen2.5")
    (RESULTS / "zero_shot_new_tokens.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
