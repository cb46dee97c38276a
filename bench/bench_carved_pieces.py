"""How a swapped model reads the words the swap carved: the first piece against the rest, beside the original's one token.

SmolLM2 has " evaporation" as one token; Qwen2.5 spells it " ev" + "aporation", and the swap drops the word's row.
Where the original pays log p(" evaporation" | context) the swapped model pays log p(" ev" | context) plus
log p("aporation" | context, " ev"). This script takes every carved word (`tokswap.carved_rows.carved_words`) in the
scored choices of ARC-Easy, reads the choices with the original model and with swapped models, and reports per
word, in nats: the original's log-probability of the word, the swapped model's of its first piece and of the rest,
and the swapped total minus the original's. The first piece answers "does the model expect this word here" (its
mass should be at least the original's for the word); the rest answers "does it know how the word goes on".

Words are split by whether they are among the first `--prompts` words the original model's carved-word text is
written from (`bench_leaderboard.carved_word_prompts`, `--teacher-text-start carved`): for a model trained on that
text, the words it read against those it did not; for any other model, the same split as a control. They are split
again by whether the source tokenizer writes them in the leaderboard's training corpus (`--teacher-text-start
corpus` writes its text from those words, `bench_leaderboard.corpus_carved_prompts`).

    python bench/bench_carved_pieces.py --keep-models DIR --models after-swap:6 qwen2.5-default-seed6-200steps ...

Models: `after-swap:N` (SmolLM2 given Qwen2.5 with the default init, GloVe seed N, as the leaderboard builds it for
training seed N) and folders under `--keep-models` (`bench_leaderboard.py --keep-models`, named `...-seedN-...`).
Every model is read on the same word occurrences, so a trained model is also compared with the after-swap model of
its seed word by word (the change training made, paired), and a model kept for several seeds is pooled over them
(mean ± standard deviation over seeds). Writes bench/results/carved_pieces.json and carved_pieces.md.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_leaderboard as lb  # noqa: E402
from bench_where_lost import scored_tokens, swapped_model  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
COMMAND = "python bench/bench_carved_pieces.py"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", default="arc_easy,arc_easy:test_rc_0shot")
    parser.add_argument("--limit", type=int, default=2376, help="questions per task (the first ones)")
    parser.add_argument("--keep-models", help="the folder of bench_leaderboard.py's kept models")
    parser.add_argument("--models", nargs="+", default=["after-swap:6"],
                        help="`after-swap:N` (GloVe seed N) and/or folder names under --keep-models")
    parser.add_argument("--prompts", type=int, default=480, help="how many carved-word prompts count as prompted")
    parser.add_argument("--heldout-bytes", type=int, default=4000, help="the leaderboard run's (its training corpus)")
    parser.add_argument("--corpus-bytes", type=int, default=2_000_000, help="the leaderboard run's")
    return parser.parse_args(argv)


def carved_spans(source_tok, ids: list, carved: set) -> list:
    """(position, source id, start byte, end byte) of each carved word among the continuation's source tokens."""
    from tokswap.align.byte_offsets import token_byte_ends

    ends = token_byte_ends(source_tok, ids)
    if ends is None:
        return []
    starts = np.concatenate([[0], ends[:-1]])
    return [(k, i, int(a), int(b)) for k, (i, a, b) in enumerate(zip(ids, starts, ends)) if i in carved]


def piece_values(tokenizer, ids: list, values: np.ndarray, spans: list):
    """Per span: (first piece's log-probability, the rest's), or None where the target's tokens do not start and end
    at the word's bytes (a piece shared with the next word)."""
    from tokswap.align.byte_offsets import token_byte_ends

    ends = token_byte_ends(tokenizer, ids)
    out = []
    for _, _, a, b in spans:
        if ends is None:
            out.append(None)
            continue
        starts = np.concatenate([[0], ends[:-1]])
        inside = np.nonzero((starts >= a) & (ends <= b))[0]
        if not len(inside) or starts[inside[0]] != a or ends[inside[-1]] != b:
            out.append(None)
            continue
        out.append((float(values[inside[0]]), float(values[inside[1:]].sum())))
    return out


def read_words(task: str, limit: int, model, tokenizer, original, source_tok, carved: set, cache: dict) -> list:
    """[(source id, original's nats, first piece's, the rest's)] over the carved words of every scored choice."""
    from tokswap.evaluation.zero_shot import load_task

    words = []
    for q, example in enumerate(load_task(task, limit=limit)):
        for c, (context, continuation) in enumerate(zip(example.contexts, example.continuations)):
            key = (task, q, c)
            if key not in cache:
                source_ids, source_values = scored_tokens(original, source_tok, context, continuation)
                cache[key] = (carved_spans(source_tok, source_ids, carved), source_values)
            spans, source_values = cache[key]
            if not spans:
                continue
            ids, values = scored_tokens(model, tokenizer, context, continuation)
            for (pos, i, _, _), pieces in zip(spans, piece_values(tokenizer, ids, values, spans)):
                if pieces is not None:
                    words.append((i, float(source_values[pos]), *pieces))
    return words


def summarize(words: list, splits: dict) -> dict:
    out = {}
    for group in GROUPS:
        pick = [w for w in words if group in group_of(w, splits)]
        if len(pick) < 2:
            continue
        columns = list(zip(*pick))
        row = {"words": len(pick), "distinct": len(set(columns[0]))}
        for name, values in (("original", columns[1]), ("first_piece", columns[2]), ("rest", columns[3]),
                             ("difference", [f + r - o for _, o, f, r in pick])):
            row[name] = [round(statistics.mean(values), 3), round(statistics.stdev(values) / len(values) ** 0.5, 3)]
        out[group] = row
    return out


GROUPS = ("all", "prompted", "not prompted", "in the corpus", "not in the corpus")


def group_of(word, splits: dict) -> tuple:
    """The groups a word occurrence counts in: all, and for each split ({"prompted": ids, "in the corpus": ids})
    the split's name or "not " + it."""
    return ("all", *(name if word[0] in ids else f"not {name}" for name, ids in splits.items()))


def paired_change(words: list, reference: list, splits: dict) -> dict:
    """Per group: the mean ± standard error, over the same word occurrences, of this model's total log-probability
    of the word minus the reference model's (nats; positive: the word became likelier)."""
    if [w[0] for w in words] != [w[0] for w in reference]:
        raise SystemExit("the models read different word occurrences: compare models of one target tokenizer")
    deltas = {group: [] for group in GROUPS}
    for mine, theirs in zip(words, reference):
        for group in group_of(mine, splits):
            deltas[group].append(mine[2] + mine[3] - theirs[2] - theirs[3])
    return {group: [round(statistics.mean(v), 3), round(statistics.stdev(v) / len(v) ** 0.5, 3), len(v)]
            for group, v in deltas.items() if len(v) > 1}


def seed_of(name: str):
    """(the model's name without its seed, the seed): `after-swap:6` -> ("after-swap", 6)."""
    if name.startswith("after-swap:"):
        return "after-swap", int(name.split(":")[1])
    found = re.search(r"-seed(\d+)-", name)
    return (name.replace(found.group(0), "-seedN-"), int(found.group(1))) if found else (name, None)


def pooled(result: dict) -> dict:
    """{(model without seed, task, group, column): [per-seed means]} for models read on two or more seeds."""
    out = {}
    for name, tasks in result["models"].items():
        base, seed = seed_of(name)
        for task, groups in tasks.items():
            for group, r in groups.items():
                for column in ("first_piece", "rest", "difference"):
                    out.setdefault((base, task, group, column), {})[seed] = r[column][0]
            for group, change in result["changes"].get(name, {}).get(task, {}).items():
                out.setdefault((base, task, group, "change"), {})[seed] = change[0]
    return {key: list(per_seed.values()) for key, per_seed in out.items() if len(per_seed) > 1}


def render(result: dict) -> str:
    lines = ["# How swapped models read the words the swap carved", "",
             f"Generated by `{result['command']}`. Every carved word (a whole word SmolLM2 has as one token and Qwen2.5 "
             "spells in pieces) in the scored choices of each task; per word, in nats (mean ± standard error over "
             "words): the original model's log-probability of its one token, the swapped model's of the first piece "
             "and of the rest of the pieces, and the swapped total minus the original's. \"Prompted\": among the first "
             f"{result['prompts']} words the original model's carved-word text was written from. Of SmolLM2's tokens, "
             f"{result['carved_words']:,} are carved words for Qwen2.5 (`tokswap.carved_rows.carved_words`), "
             f"{result['whole_words']:,} of them start with a space and read as whole words (the prompts' pool, "
             "`bench_leaderboard.carved_word_prompts`). \"In the corpus\": among the "
             f"{result['corpus_words']:,} carved words the source tokenizer writes in the leaderboard's training corpus "
             "(`bench_leaderboard.corpus_carved_prompts`, the words `--teacher-text-start corpus` writes from). Models are named by their seed: `after-swap:N` is GloVe seed "
             "N; a kept model's `seedN` is its training seed, whose alignment uses GloVe seed N.", "",
             "| model | task | words | distinct | original | first piece | rest | difference |",
             "|---|---|---|---:|---:|---:|---:|---:|"]
    for model, tasks in result["models"].items():
        for task, groups in tasks.items():
            for group, r in groups.items():
                cells = " | ".join(f"{r[k][0]:+.2f} ± {r[k][1]:.2f}" for k in ("original", "first_piece", "rest",
                                                                            "difference"))
                lines.append(f"| {model} | {task} | {group}: {r['words']} | {r['distinct']} | {cells} |")
    lines += ["", "## Against the after-swap model of the same seed, word by word", "",
              "The model's total log-probability of each carved word minus the after-swap model's (same GloVe seed, "
              "same word occurrences; nats, mean ± standard error over words): what training did to each group.", "",
              "| model | task | group | words | change (nats) |", "|---|---|---|---:|---:|"]
    for model, tasks in result["changes"].items():
        for task, groups in tasks.items():
            for group, (mean, se, n) in groups.items():
                lines.append(f"| {model} | {task} | {group} | {n} | {mean:+.2f} ± {se:.2f} |")
    pools = pooled(result)
    if pools:
        lines += ["", "## Pooled over seeds", "",
                  "Models read on two or more seeds: the mean over seeds of each seed's figure ± its standard deviation "
                  "over seeds (first piece and rest: the swapped model's log-probability of each; difference: the "
                  "swapped total minus the original's; change: against the after-swap model of the same seed).", "",
                  "| model | task | group | figure | seeds | mean ± std over seeds (nats) |", "|---|---|---|---|---:|---:|"]
        for (model, task, group, column), values in pools.items():
            lines.append(f"| {model} | {task} | {group} | {column} | {len(values)} | {statistics.mean(values):+.2f} ± "
                         f"{statistics.stdev(values):.2f} |")
    return "\n".join(lines) + "\n"


def load_model(name: str, args):
    from transformers import AutoModelForCausalLM

    from tokswap.loading import load_tokenizer

    if name.startswith("after-swap:"):
        model, tokenizer, _ = swapped_model(seed_of(name)[1])
        return model.eval(), tokenizer
    folder = Path(args.keep_models) / name
    return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval(), load_tokenizer(str(folder))


def main(argv=None) -> int:
    from tokswap.carved_rows import carved_words
    from tokswap.loading import load_tokenizer

    args = parse_args(argv)
    if any(not m.startswith("after-swap:") for m in args.models) and not args.keep_models:
        raise SystemExit("kept models need --keep-models DIR")
    started = time.perf_counter()
    source_tok, target_tok, original = load_tokenizer(lb.SOURCE_TOKENIZER), lb.load_target_tokenizer("qwen2.5"), \
        lb.load_source_model()
    carved = set(carved_words(source_tok, target_tok).tolist())
    whole = lb.carved_word_prompts(original, source_tok, target_tok)
    _, pieces = lb.split_documents(lb.load_domain_documents(), list(lb.DOMAINS), args.heldout_bytes, args.corpus_bytes)
    in_corpus = lb.corpus_carved_prompts(source_tok, target_tok, [piece for _, _, piece in pieces])
    splits = {"prompted": set(whole[: args.prompts]), "in the corpus": set(in_corpus)}
    command = lb.portable(shlex.join([*COMMAND.split(), *(sys.argv[1:] if argv is None else argv)]))
    result = {"command": command, "prompts": args.prompts, "carved_words": len(carved), "whole_words": len(whole),
              "corpus_words": len(in_corpus), "models": {}, "changes": {}}
    cache, read = {}, {}
    for name in args.models:
        model, tokenizer = load_model(name, args)
        result["models"][name] = {}
        for task in args.tasks.split(","):
            read[name, task] = read_words(task, args.limit, model, tokenizer, original, source_tok, carved, cache)
            result["models"][name][task] = summarize(read[name, task], splits)
            print(name, task, json.dumps(result["models"][name][task]), flush=True)
        reference = f"after-swap:{seed_of(name)[1]}"
        if not name.startswith("after-swap:") and reference in args.models[: args.models.index(name)]:
            result["changes"][name] = {task: paired_change(read[name, task], read[reference, task], splits)
                                       for task in args.tasks.split(",")}
    result["seconds"] = round(time.perf_counter() - started)
    (RESULTS / "carved_pieces.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    (RESULTS / "carved_pieces.md").write_text(render(result), encoding="utf-8")
    print(render(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
