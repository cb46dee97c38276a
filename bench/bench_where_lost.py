"""Where the swapped model loses likelihood on zero-shot choices, chunk by chunk (issue 12's zero-shot gap).

Each choice a zero-shot task scores is read by the original SmolLM2 in its tokens and by the swapped model (right
after the swap, the leaderboard's setting and seed) in Qwen2.5's. Both tokenizations end a token at some of the same
bytes; between two such boundaries lies a chunk, whose log-likelihood the two models can be compared on. Every chunk
falls in one class:

- "same token": one token, the same on both sides, not right after a chunk with a new token;
- "same token, after a new token": the same, but the chunk before it holds a new token (what reading a new row costs);
- "new token": the target side holds a token SmolLM2 lacks (its row was initialized by the swap);
- "shared tokens, split otherwise": only tokens both vocabularies have, but the source spells the chunk with others,
  mostly a whole word SmolLM2 has and Qwen2.5 splits (` dries` -> ` d` + `ries`).

Only questions with a new token in some choice are read (the others lose little: results/zero_shot_new_tokens.md).

    python bench/bench_where_lost.py        # PIQA (1,000 questions) and ARC-Easy (570), seed 2; about 10 min

writes bench/results/where_lost.json and where_lost.md.
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import shlex
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_leaderboard as lb  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
CLASSES = ("same token", "same token, after a new token", "new token", "shared tokens, split otherwise")
COMMAND = "python bench/bench_where_lost.py"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", default="piqa,arc_easy")
    parser.add_argument("--limit", type=int, default=1000, help="questions per task (the first ones; ARC-Easy has 570)")
    parser.add_argument("--seed", type=int, default=2, help="GloVe seed of the alignment (the leaderboard's seed 2)")
    return parser.parse_args(argv)


def swapped_model(seed: int):
    """SmolLM2 given Qwen2.5 with the default init, as `bench_leaderboard.py` builds it for training seed `seed`."""
    docs = lb.load_domain_documents()
    _heldout, pieces = lb.split_documents(docs, lb.DOMAINS, 4000, 2_000_000)
    source_tok, target_tok = lb.load_target_tokenizer("smollm2"), lb.load_target_tokenizer("qwen2.5")
    settings = argparse.Namespace(glove_dim=100, glove_iterations=10)
    alignment = lb.compute_alignment(source_tok, target_tok, [p for _, _, p in pieces], seed, settings)
    model, tokenizer = lb.swap(target_tok, alignment, lb.default_init_method(), source_tok, seed)
    return model, tokenizer, source_tok


@torch.no_grad()
def scored_tokens(model, tokenizer, context: str, continuation: str):
    """The continuation's tokens (what the whole text adds after the context's, as the scorer splits) and their
    log-probabilities, read after a BOS/EOS token."""
    context_ids = tokenizer(context, add_special_tokens=False).input_ids
    whole = tokenizer(context + continuation, add_special_tokens=False).input_ids
    prefix = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
    logprobs = torch.log_softmax(model(input_ids=torch.tensor([[prefix] + whole])).logits[0].float(), -1)
    ids = whole[len(context_ids) :]
    start = len(context_ids)
    return ids, np.array([float(logprobs[start + k, token]) for k, token in enumerate(ids)])


def chunk_classes(swapped, source, new_ids: set, tokenizer, source_tok):
    """[(class, swapped minus original nats, chunk text)] of one choice, or None when the two sides split it
    at different bytes (a normalizing tokenizer)."""
    from tokswap.align.byte_offsets import chunk_ids, shared_boundaries, token_byte_ends

    (ids, values), (source_ids, source_values) = swapped, source
    ends, source_ends = token_byte_ends(tokenizer, ids), token_byte_ends(source_tok, source_ids)
    if ends is None or source_ends is None or not len(ends) or ends[-1] != source_ends[-1]:
        return None
    boundaries = shared_boundaries(ends, source_ends)
    chunks, source_chunks = chunk_ids(ends, boundaries), chunk_ids(source_ends, boundaries)
    out, after_new = [], False
    for k in range(len(boundaries)):
        mine = [ids[i] for i in np.nonzero(chunks == k)[0]]
        theirs = [source_ids[i] for i in np.nonzero(source_chunks == k)[0]]
        diff = float(values[chunks == k].sum() - source_values[source_chunks == k].sum())
        if any(i in new_ids for i in mine):
            kind = "new token"
        elif tokenizer.convert_ids_to_tokens(mine) == source_tok.convert_ids_to_tokens(theirs):
            kind = "same token, after a new token" if after_new else "same token"
        else:
            kind = "shared tokens, split otherwise"
        after_new = kind == "new token"
        out.append((kind, diff, tokenizer.decode(mine)))
    return out


def run_task(task: str, limit: int, model, tokenizer, original, source_tok) -> dict:
    from tokswap.evaluation.zero_shot import load_task

    source_vocab = set(source_tok.get_vocab())
    new_ids = {i for token, i in tokenizer.get_vocab().items() if token not in source_vocab}
    diffs, split_words = collections.defaultdict(list), collections.defaultdict(list)
    questions = skipped = 0
    for example in load_task(task, limit=limit):
        pairs = list(zip(example.contexts, example.continuations))
        read = [scored_tokens(model, tokenizer, c, x) for c, x in pairs]
        if not any(new_ids & set(ids) for ids, _ in read):
            continue
        questions += 1
        for (context, continuation), swapped in zip(pairs, read):
            chunks = chunk_classes(swapped, scored_tokens(original, source_tok, context, continuation), new_ids,
                                   tokenizer, source_tok)  # fmt: skip
            if chunks is None:
                skipped += 1
                continue
            for kind, diff, text in chunks:
                diffs[kind].append(diff)
                if kind == "shared tokens, split otherwise":
                    split_words[text].append(diff)
    return {"questions": questions, "choices_skipped": skipped, "classes": summarize(diffs),
            "split_otherwise_most_common": most_common(split_words)}  # fmt: skip


def summarize(diffs: dict) -> dict:
    total = sum(sum(v) for v in diffs.values())
    out = {}
    for kind in CLASSES:
        values = diffs.get(kind, [])
        n = len(values)
        mean = sum(values) / n if n else float("nan")
        std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else float("nan")
        out[kind] = {"chunks": n, "mean_nats": round(mean, 3), "stderr": round(std / math.sqrt(n), 3) if n > 1 else None,
                     "total_nats": round(sum(values), 1), "share_of_loss": round(sum(values) / total, 3)}  # fmt: skip
    return out


def most_common(words: dict, n: int = 12) -> list:
    ranked = sorted(words.items(), key=lambda item: (-len(item[1]), item[0]))[:n]
    return [(text, len(values), round(sum(values) / len(values), 1)) for text, values in ranked]


def render(result: dict) -> str:
    lines = [
        "# Where the swapped model loses likelihood on zero-shot choices",
        "",
        f"Generated by `{result['command']}` (right after the swap: SmolLM2-135M given Qwen2.5, the default init, GloVe seed "
        f"{result['seed']}, the leaderboard's alignment setting). Choices of the questions with a new token in some "
        "choice, cut into chunks at the bytes where both tokenizations end a token; per chunk, the swapped model's "
        "log-likelihood minus the original's (nats; negative: the swap lost it), mean ± standard error. Classes: see "
        "the script's docstring.",
        "",
        "| task | questions | class | chunks | mean (nats) | total (nats) | share of the loss |",
        "|---|---:|---|---:|---:|---:|---:|",
    ]
    for task, r in result["tasks"].items():
        for kind, c in r["classes"].items():
            lines.append(f"| {task} | {r['questions']} | {kind} | {c['chunks']} | {c['mean_nats']:+.2f} ± "
                         f"{c['stderr']:.2f} | {c['total_nats']:+.0f} | {100 * c['share_of_loss']:.0f}% |")  # fmt: skip
    for task, r in result["tasks"].items():
        words = ", ".join(f"`{t!r}` {n} ({d:+.1f})" for t, n, d in r["split_otherwise_most_common"])
        lines += ["", f"{task}, the most frequent chunks split otherwise (chunks, mean nats): {words}"]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.manual_seed(0)
    started = time.perf_counter()
    model, tokenizer, source_tok = swapped_model(args.seed)
    original = lb.load_source_model()
    command = shlex.join([*COMMAND.split(), *(sys.argv[1:] if argv is None else argv)])
    result = {"command": command, "seed": args.seed, "tasks": {}}
    for task in args.tasks.split(","):
        result["tasks"][task] = run_task(task, args.limit, model.eval(), tokenizer, original, source_tok)
        print(task, json.dumps(result["tasks"][task]["classes"]), flush=True)
    result["seconds"] = round(time.perf_counter() - started)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "where_lost.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    (RESULTS / "where_lost.md").write_text(render(result), encoding="utf-8")
    print(render(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
