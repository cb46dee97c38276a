"""Whether today's code re-makes the leaderboard's rows: compare a re-run with the published rows.

check_stale.py knows when a bench script changed after its results; it cannot see a change in the library those
scripts call. Deterministic rows (right after the swap with a deterministic init, and the original model) must come out
the same whatever changed since, so re-run some into another file and compare:

    python bench/bench_leaderboard.py --targets qwen2.5 llama3 gemma3 gpt-neox --methods fvt fvt_scaled --seeds 0 \
        --heldout-bytes 4000 --corpus-bytes 2000000 --glove-dim 100 --glove-iterations 10 --output RERUN.jsonl
    python bench/check_rerun.py RERUN.jsonl

Each deterministic row of the re-run is matched with the published rows of the same phase, target, method, seed,
setting and held-out text; it passes when its bits per byte equal theirs in every domain.

A trained row is not deterministic (CPU kernels sum in a thread-dependent order), so it is checked against the spread
of its recipe instead: the published rows of the same arm and recipe (the leaderboard table's group), target, init,
setting and held-out text. It passes when its final mean bits per byte lies within SPREAD_SDS standard deviations of
their mean over seeds (at least two seeds); the published row of its own seed, when there is one, is shown beside it.
Re-run a trained seed into another file (`--train-only ... --train-seeds N --output RERUN.jsonl`), then:

    python bench/check_rerun.py RERUN.jsonl --output bench/results/rerun_trained.md

Exit 1 on any difference (or a trained row outside the spread), 2 when a row has no published match (nothing was
checked for it). Writes the outcome to bench/results/rerun_check.md (`--output`), with both commands.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
from pathlib import Path

from bench_leaderboard import arm_label, paired_difference, portable

PUBLISHED = Path(__file__).resolve().parent / "results" / "leaderboard.jsonl"
KEY = ("phase", "target", "method", "seed", "config", "heldout_bytes")
TRAINED_KEY = ("target", "method", "recovery", "config", "heldout_bytes")
SPREAD_SDS = 3.0  # a re-run further than this many seed-to-seed standard deviations from the mean is not the recipe


def rows_of(path: Path) -> list:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def compare(rerun: list, published: list) -> tuple[list, list, list]:
    """(same, different, unmatched) lines, one per deterministic row of `rerun`."""
    same, different, unmatched = [], [], []
    for row in rerun:
        if not row.get("deterministic") or "bpb" not in row:
            continue
        name = f"{row['phase']} {row.get('target')} {row.get('method')} seed {row.get('seed')}"
        matches = [p for p in published if all(p.get(k) == row.get(k) for k in KEY) and "bpb" in p]
        if not matches:
            unmatched.append(name)
        elif all(p["bpb"] == row["bpb"] for p in matches):
            same.append(f"{name}: {row['mean_bpb']} bits per byte, as the {len(matches)} published row(s)")
        else:
            theirs = sorted({p["mean_bpb"] for p in matches})
            different.append(f"{name}: {row['mean_bpb']} re-run, published {theirs}")
    return same, different, unmatched


def same_recipe(row: dict, other: dict) -> bool:
    return (
        other.get("phase") == "train"
        and "error" not in other
        and "mean_bpb" in other
        and all(other.get(k) == row.get(k) for k in TRAINED_KEY)
        and arm_label(other) == arm_label(row)
    )


def compare_trained(rerun: list, published: list) -> tuple[list, list, list]:
    """(within, outside, unmatched) lines, one per trained row of `rerun`: its final mean bits per byte against the
    published seeds of the same recipe (mean ± SPREAD_SDS standard deviations)."""
    within, outside, unmatched = [], [], []
    for row in rerun:
        if row.get("phase") != "train" or "error" in row or "mean_bpb" not in row:
            continue
        name = f"{arm_label(row)}, {row.get('target')}, seed {row.get('seed')}"
        group = [p for p in published if same_recipe(row, p)]
        if len({p["seed"] for p in group}) < 2:
            unmatched.append(f"{name}: {len(group)} published row(s), no spread to check against")
            continue
        values = [p["mean_bpb"] for p in group]
        mean, sd = statistics.mean(values), statistics.stdev(values)
        own = [p for p in group if p.get("seed") == row.get("seed")]
        line = f"{name}: {row['mean_bpb']} re-run; published {mean:.5f} ± {sd:.5f} over {len(values)} rows" + "".join(
            f"; its own seed's row {p['mean_bpb']} ({row['mean_bpb'] - p['mean_bpb']:+.5f}, at most "
            f"{max(abs(row['bpb'][d] - p['bpb'][d]) for d in row['bpb']):.5f} in a domain)"
            for p in own
        )
        (within if abs(row["mean_bpb"] - mean) <= SPREAD_SDS * sd else outside).append(line)
    return within, outside, unmatched


def zero_shot_of(row: dict, rows: list) -> dict:
    """A trained row's zero-shot results, with the tasks its kept model was scored on later (its kept_scores rows)."""
    found = dict(row.get("zero_shot", {}))
    for other in rows:
        if (
            other.get("phase") == "kept_scores"
            and other.get("of") == row.get("time")
            and row.get("kept_as")
            and other.get("kept_as") == row.get("kept_as")
        ):
            found.update(other["zero_shot"])
    return {task: result for task, result in found.items() if "correct" in result}


def original_outcomes(rows: list) -> dict:
    """{(task, questions): result} of the unswapped model's zero-shot rows, the last of each."""
    return {
        (task, result["num_examples"]): result
        for row in rows
        if row.get("phase") == "original_zero_shot"
        for task, result in row["zero_shot"].items()
        if "correct" in result
    }


def compare_zero_shot(rerun: list, published: list) -> tuple[list, list, list]:
    """(same, different, trained) lines. The unswapped model's outcomes are deterministic: each re-run task must give
    the published answer to every question. A trained row's are not: each task is shown against the unswapped model
    and against its own seed's published row on the same questions (paired), to read, not to pass or fail."""
    same, different, trained = [], [], []
    theirs = original_outcomes(published)
    for (task, questions), result in original_outcomes(rerun).items():
        match = theirs.get((task, questions))
        if match is None:
            continue
        changed = sum(a != b for a, b in zip(result["correct"], match["correct"], strict=True))
        line = f"the unswapped model, {task} ({questions} questions): {result['acc']:.4f}"
        (same if not changed else different).append(
            line
            + (
                ", the published answer to every question"
                if not changed
                else f", {changed} answers unlike the published"
            )
        )
    originals = {**theirs, **original_outcomes(rerun)}
    for row in rerun:
        if row.get("phase") != "train" or "error" in row:
            continue
        own = [p for p in published if same_recipe(row, p) and p.get("seed") == row.get("seed")]
        own_results = zero_shot_of(own[-1], published) if own else {}
        for task, result in zero_shot_of(row, rerun).items():
            questions = result["num_examples"]
            line = (
                f"{arm_label(row)}, {row.get('target')}, seed {row.get('seed')}, {task} ({questions} questions): "
                f"{result['acc']:.3f}"
            )
            if (task, questions) in originals:
                diff, se = paired_difference(result["correct"], originals[task, questions]["correct"])
                line += f", {diff:+.1f} ± {se:.1f} points against the unswapped model"
            mine = own_results.get(task)
            if mine and mine["num_examples"] == questions:
                diff, se = paired_difference(result["correct"], mine["correct"])
                flips = sum(a != b for a, b in zip(result["correct"], mine["correct"], strict=True))
                line += (
                    f"; its own seed's published row {mine['acc']:.3f}, {diff:+.1f} ± {se:.1f} ({flips} answers moved)"
                )
            trained.append(line)
    return same, different, trained


def render(command: str, rerun: list, deterministic: tuple, trained: tuple, zero_shot: tuple = ([], [], [])) -> str:
    (same, different, unmatched), (within, outside, untrained) = deterministic, trained
    made_by = sorted({row["command"] for row in rerun if row.get("command")})
    lines = [
        "# Leaderboard rows, re-made by today's code",
        "",
        f"Generated by `{command}`, comparing a re-run made by "
        + ", ".join(f"`{c}`" for c in made_by)
        + " with the published rows of results/leaderboard.jsonl. A deterministic row (same phase, target, method, "
        "seed, setting and held-out text) must give the same bits per byte in every domain; a trained row's final "
        f"mean bits per byte must lie within {SPREAD_SDS:g} standard deviations of its recipe's published seeds.",
        "",
        f"{len(same)} re-made exactly, {len(different)} different, {len(unmatched)} without a published row.",
    ]
    if within or outside or untrained:
        lines.append(
            f"Trained: {len(within)} within the spread, {len(outside)} outside it, {len(untrained)} without a spread."
        )
    lines.append("")
    lines += [f"- same: {line}" for line in same]
    lines += [f"- DIFFERENT: {line}" for line in different]
    lines += [f"- unmatched: {line}" for line in unmatched]
    lines += [f"- within the spread: {line}" for line in within]
    lines += [f"- OUTSIDE the spread: {line}" for line in outside]
    lines += [f"- no spread: {line}" for line in untrained]
    same_answers, other_answers, trained_answers = zero_shot
    if same_answers or other_answers or trained_answers:
        lines += [
            "",
            "Zero-shot: the unswapped model's answers must be the published ones; a trained row's accuracy is "
            "shown paired with the unswapped model and with its own seed's published row, where it has the task "
            "(difference in points ± its standard error over questions).",
            "",
        ]
        lines += [f"- same: {line}" for line in same_answers]
        lines += [f"- DIFFERENT: {line}" for line in other_answers]
        lines += [f"- trained: {line}" for line in trained_answers]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rerun", help="a bench_leaderboard.py --output file")
    parser.add_argument("--output", default=str(PUBLISHED.parent / "rerun_check.md"))
    args = parser.parse_args(argv)
    if not Path(args.rerun).is_file():
        print(f"no such file: {args.rerun}; give a bench_leaderboard.py --output file", file=sys.stderr)
        return 2
    rerun, published = rows_of(Path(args.rerun)), rows_of(PUBLISHED)
    same, different, unmatched = compare(rerun, published)
    within, outside, untrained = compare_trained(rerun, published)
    same_answers, other_answers, trained_answers = compare_zero_shot(rerun, published)
    different = different + other_answers
    command = portable(shlex.join(["python", "bench/check_rerun.py", *(sys.argv[1:] if argv is None else argv)]))
    text = render(
        command,
        rerun,
        (same, [d for d in different if d not in other_answers], unmatched),
        (within, outside, untrained),
        (same_answers, other_answers, trained_answers),
    )
    Path(args.output).write_text(text, encoding="utf-8")
    for label, found in (
        ("same     ", same),
        ("DIFFERENT", different),
        ("unmatched", unmatched),
        ("within   ", within),
        ("OUTSIDE  ", outside),
        ("no spread", untrained),
        ("answers  ", same_answers),
        ("trained  ", trained_answers),
    ):
        for line in found:
            print(label, line)
    print(
        f"{len(same)} re-made exactly, {len(different)} different, {len(unmatched)} without a published row; trained: "
        f"{len(within)} within the spread, {len(outside)} outside it, {len(untrained)} without a spread",
        file=sys.stderr,
    )
    if different or outside:
        return 1
    return 2 if unmatched or untrained or not (same or within) else 0


if __name__ == "__main__":
    sys.exit(main())
