"""What each recovery objective costs per training step, measured side by side in one run.

SmolLM2-135M (tokswap asset `smollm2-135m`) is given the Qwen2.5 tokenizer (`fvt_scaled`, the default init) and
trained by `adapt_vocabulary` on the same windows of text by each arm in turn: the leaderboard's windows (at most 112
Qwen2.5 tokens, each one training sequence of either recovery, unpacked, 4 per step; `bench_leaderboard.training_windows`),
so every arm reads the same tokens in the same batches:

- `ce`: plain cross-entropy (`recovery="ce"`);
- `prediction`: self-distillation from the original model, cross-entropy + its next-token distribution at shared
  byte boundaries (`self_distill_split_weight=0`: the default before the split term);
- `default`: the same + the split term (`tokswap.group_split`): the library default.

Each arm runs `--steps` steps of stage 1 (embeddings + head) and as many of stage 2 (everything); a callback times
every optimizer step, and the first step of each stage (data loading, warm caches) is left out. The arms take
turns, `--rounds` times, so a slow spell of the machine falls on all of them; the ratios are of the medians of
each arm's step times, per stage and for a 1 : 4 mix of the two (the default schedule, 40 + 160):

    python bench/bench_recovery_cost.py            # writes bench/results/recovery_cost.{jsonl,md}
    python bench/bench_recovery_cost.py --table    # re-renders the markdown from the jsonl
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from transformers import TrainerCallback

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_init_methods import domain_documents, shared_rows_alignment, split_corpus  # noqa: E402
from bench_leaderboard import TRAIN_MAX_LENGTH, training_windows  # noqa: E402
from portable import portable  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
# arm -> the VocabAdaptationConfig fields that differ between arms
ARMS = {
    "ce": {"recovery": "ce"},
    "prediction": {"recovery": "self_distill", "self_distill_prediction_weight": 1.0, "self_distill_split_weight": 0.0},
    "default": {"recovery": "self_distill", "self_distill_prediction_weight": 1.0, "self_distill_split_weight": 1.0},
}
SCHEDULE = (40, 160)  # the default's stage-1 and stage-2 steps at 200, for the mixed ratio


class StepTimer(TrainerCallback):
    """Wall seconds of every optimizer step of one trainer."""

    def __init__(self):
        self.seconds, self._start = [], None

    def on_step_begin(self, args, state, control, **kwargs):
        self._start = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        self.seconds.append(time.perf_counter() - self._start)


class StageTimers(TrainerCallback):
    """One `StepTimer` per stage: a new trainer (stage 2) starts a new list at `on_train_begin`."""

    def __init__(self):
        self.stages = []

    def on_train_begin(self, args, state, control, **kwargs):
        self.stages.append(StepTimer())

    def on_step_begin(self, *a, **k):
        self.stages[-1].on_step_begin(*a, **k)

    def on_step_end(self, *a, **k):
        self.stages[-1].on_step_end(*a, **k)


def time_arm(arm, swapped, tokenizer, data, steps, original, source, workdir) -> list:
    """Per-stage step seconds (first step of each stage dropped) of one arm from a copy of the swapped model."""
    from tokswap.training import VocabAdaptationConfig, adapt_vocabulary

    timers = StageTimers()
    config = VocabAdaptationConfig(
        output_dir=workdir, stage1_max_steps=steps, stage2_max_steps=steps, per_device_train_batch_size=4,
        max_length=TRAIN_MAX_LENGTH, packing=False, logging_steps=steps, save_steps=100000, save_final_model=False, seed=0, **ARMS[arm],
    )
    teacher = {"teacher_model": original, "teacher_tokenizer": source} if arm != "ce" else {}
    adapt_vocabulary(copy.deepcopy(swapped), tokenizer, data, config, callbacks=[timers], **teacher)
    return [t.seconds[1:] for t in timers.stages]


def measure(arms: list, steps: int, rounds: int) -> list:
    from datasets import Dataset
    from transformers import AutoModelForCausalLM

    from tokswap.loading import load_tokenizer
    from tokswap.offline import assets
    from tokswap.swapper import TokenizerSwapper

    torch.manual_seed(0)
    source, target = load_tokenizer("smollm2"), load_tokenizer("qwen2.5")
    _, train = split_corpus(domain_documents(), 3000, 1_000_000)
    # shuffled like the leaderboard's batches, so each batch mixes the domains
    texts = random.Random(0).sample(train, 32)
    windows = training_windows(texts, target, source)
    data = Dataset.from_dict({"text": random.Random(0).sample(windows, 8 * steps)})
    path = assets.model_path("smollm2-135m")
    original = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    swapper = TokenizerSwapper.from_pretrained(copy.deepcopy(original), target, source_tokenizer=source,
                                               alignment=shared_rows_alignment(source, target),
                                               init_method="fvt_scaled")
    rows = []
    for round_ in range(rounds):
        for arm in arms:
            with tempfile.TemporaryDirectory() as workdir:
                stage1, stage2 = time_arm(arm, swapper.model, swapper.tokenizer, data, steps, original, source,
                                          workdir)
            row = {"arm": arm, "round": round_, "steps": steps, "stage1_seconds": [round(s, 3) for s in stage1],
                   "stage2_seconds": [round(s, 3) for s in stage2], "torch_threads": torch.get_num_threads()}
            print(json.dumps(row), flush=True)
            rows.append(row)
    return rows


def summary(rows: list) -> dict:
    """arm -> median step seconds per stage (over every round) and for the 40 + 160 mix."""
    out = {}
    for arm in dict.fromkeys(r["arm"] for r in rows):
        runs = [r for r in rows if r["arm"] == arm]
        first = [s for r in runs for s in r["stage1_seconds"]]
        second = [s for r in runs for s in r["stage2_seconds"]]
        one, two = statistics.median(first), statistics.median(second)
        mixed = (SCHEDULE[0] * one + SCHEDULE[1] * two) / sum(SCHEDULE)
        out[arm] = {"stage1": one, "stage2": two, "mixed": mixed, "rounds": len(runs), "steps": len(first) + len(second),
                    "stage1_std": statistics.stdev(first), "stage2_std": statistics.stdev(second)}
    return out


def render(rows: list, command: str) -> str:
    stats = summary(rows)
    base = stats.get("ce")
    lines = ["# What each recovery objective costs per training step", "",
             "Written by `bench/bench_recovery_cost.py` (SmolLM2-135M -> Qwen2.5, `fvt_scaled`, the leaderboard's windows, 4 per step, unpacked, "
             "CPU). Median wall seconds per optimizer step over every round, std in brackets (the first step of each stage left out); "
             "the arms took turns in one process, so the ratios compare like with like. `mixed`: the default "
             f"schedule's {SCHEDULE[0]} stage-1 and {SCHEDULE[1]} stage-2 steps.", "",
             "| arm | rounds | timed steps | stage 1 s/step (std) | stage 2 s/step (std) | mixed s/step | x cross-entropy (stage 1 / "
             "stage 2 / mixed) |",
             "|---|---:|---:|---:|---:|---:|---|"]
    for arm, s in stats.items():
        ratio = (f"{s['stage1'] / base['stage1']:.2f} / {s['stage2'] / base['stage2']:.2f} / "
                 f"{s['mixed'] / base['mixed']:.2f}") if base else "—"
        lines.append(f"| {arm} | {s['rounds']} | {s['steps']} | {s['stage1']:.2f} ({s['stage1_std']:.2f}) | "
                     f"{s['stage2']:.2f} ({s['stage2_std']:.2f}) | {s['mixed']:.2f} | {ratio} |")
    if "prediction" in stats and "default" in stats:
        lines += ["", f"The split term alone: {stats['default']['mixed'] / stats['prediction']['mixed']:.2f}x the "
                  "mixed step time of self-distillation without it (compare the steps' std: a step's time varies with "
                  "its batch)."]
    lines += ["", "Command:", "", f"    {command}", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    parser.add_argument("--steps", type=int, default=8, help="optimizer steps per stage per arm and round")
    parser.add_argument("--rounds", type=int, default=2, help="times each arm runs, the arms taking turns")
    parser.add_argument("--output", default=str(RESULTS / "recovery_cost.jsonl"))
    parser.add_argument("--table", action="store_true", help="only re-render the markdown from --output")
    args = parser.parse_args(argv)
    output = Path(args.output)
    if args.table:
        record = json.loads(output.read_text())
    else:
        given = argv if argv is not None else sys.argv[1:]
        command = " ".join(["python bench/bench_recovery_cost.py", *(portable(a) for a in given)])
        record = {"command": command.strip(), "rows": measure(args.arms, args.steps, args.rounds)}
        output.write_text(json.dumps(record) + "\n")
    text = render(record["rows"], record["command"])
    output.with_suffix(".md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
