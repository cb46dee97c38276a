"""The published numbers stay traced: README.md and bench/RESULTS.md against bench/results/ (no model runs)."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "command",
    [
        ["bench/check_published.py"],
        ["bench/check_published.py", "--cited"],
        ["bench/check_published.py", "--one-seed"],
        ["bench/check_published.py", "--integers"],
        ["bench/bench_derived.py", "--check"],
    ],
)
def test_published_numbers_are_traced_to_results(command):
    done = subprocess.run([sys.executable, *command], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


MACHINE_PATH = re.compile(r"(?:^|[^A-Za-z0-9_.~])/(?:work|tmp|home|root|Users|var|opt|mnt|srv|private)/")


def test_results_files_hold_no_paths_of_one_machine():
    tracked = subprocess.run(["git", "ls-files", "bench/results"], cwd=REPO, capture_output=True, text=True, check=True)
    found = [
        f"{name}:{number}"
        for name in tracked.stdout.split()
        for number, line in enumerate((REPO / name).read_text(encoding="utf-8", errors="replace").splitlines(), 1)
        if MACHINE_PATH.search(line)
    ]
    assert not found, f"absolute paths of one machine in tracked results: {found[:5]}"


def test_leaderboard_rows_record_their_command_without_machine_paths():
    sys.path.insert(0, str(REPO / "bench"))
    import bench_leaderboard as lb

    command = lb.command_line(["--keep-models", "/scratch/me/kept", "--output", str(REPO / "bench/results/x.jsonl")])
    assert command == "python bench/bench_leaderboard.py --keep-models .../kept --output bench/results/x.jsonl"
    assert not MACHINE_PATH.search(command)


def test_one_seed_check_flags_a_lone_seed_and_passes_pairs_and_deterministic_runs():
    import importlib.util

    spec = importlib.util.spec_from_file_location("_check_published", REPO / "bench" / "check_published.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    lone = "Intro text. After 50 steps (seed 2) ARC-Easy is -1.9 ± 1.8 points. Next sentence."
    assert [item.split(": ")[0] for item in module.one_seed(lone)] == ["1"]
    assert "-1.9" in module.one_seed(lone)[0]
    assert module.one_seed("After 50 steps (seeds 2 and 3) ARC-Easy is -1.9 and -3.0.") == []
    assert module.one_seed("Seed 2 gives 1.705 and seed 3 gives 1.695.") == []
    assert module.one_seed("Right after the swap (seed 2; no training, deterministic) it is 1.885.") == []
    assert module.one_seed("The fourth seed ran for 200 steps.") == []  # no measured decimal
    assert module.one_seed("about one seed-to-seed std, 0.013 apart.") == []
    # a lone-seed figure inside a sentence about several seeds is still one seed
    assert len(module.one_seed("Over seeds 4-6 it ties; HellaSwag -1.0 ± 0.8 (seed 4).")) == 1
    assert module.one_seed("Over seeds 0 and 1: 58.7% (seed 0) and 58.1% (seed 1).") == []


def test_alignment_summary_averages_reports_of_old_and_new_label_spellings(tmp_path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("_bench_alignment", REPO / "bench" / "bench_alignment.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    quality = "| smollm2 -> qwen2.5 | 39234 | 39234 | 17409 | **{bleu}** | 0.6000 | 0.6000 | 0.0006 | **0.9800** | 0.9400 | 0.9400 | 0.0740 |"
    old = "| smollm2 -> qwen2.5 | **Procrustes + CSLS + confidence gate 0.9 (the default)** | {p1} | 0.8500 | 11 | 4866 | 0.6263 |"
    new = "| smollm2 -> qwen2.5 | Procrustes + CSLS + gate 0.9 (default) | {p1} | 0.8500 | 13 | 4866 | 0.6263 |"
    first, second = tmp_path / "a.md", tmp_path / "b.md"
    old_kept = "| smollm2 -> qwen2.5 | Procrustes + CSLS, every match kept | 0.7600 | 0.8500 | 20 | 17216 | 0.6263 |"
    new_kept = (
        "| smollm2 -> qwen2.5 | Procrustes + CSLS, every match kept (no gate) | 0.7400 | 0.8500 | 24 | 17216 | 0.6263 |"
    )
    first.write_text(quality.format(bleu="0.6200") + "\n\n" + old.format(p1="0.7600") + "\n" + old_kept + "\n")
    second.write_text(quality.format(bleu="0.6300") + "\n\n" + new_kept + "\n" + new.format(p1="0.7400") + "\n")
    output = tmp_path / "summary.md"
    assert module.summarize([str(first), str(second)], str(output), ["--summarize"]) == 0
    text = output.read_text()
    # BLEU-1 0.62 and 0.63: mean 0.625, std 0.0071; margins over 0.60 of 2 and 3 points
    assert "| smollm2 -> qwen2.5 | 0.6250 ± 0.0071 | 0.6000 ± 0.0000 | 2.5 ± 0.7 |" in text
    assert (
        "| smollm2 -> qwen2.5 | Procrustes + CSLS + gate 0.9 (default) | 0.7500 ± 0.0141 | 0.8500 ± 0.0000 | 12.0 ± 1.4 |"
        in text
    )
    assert "| Procrustes + CSLS, no gate | 0.7500 ± 0.0141 | 0.8500 ± 0.0000 | 22.0 ± 2.8 |" in text


def test_report_average_averages_differing_numbers_and_refuses_different_commands(tmp_path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("_report_average", REPO / "bench" / "report_average.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    run = "# Bench\n\nCommand: `python bench/b.py --tokens 5 --results {out}` (took {t} min)\n\n| a | {x} s | 0.66 | qwen3 |\n"
    paths = []
    for index, (t, x) in enumerate([("3.1", "7.8"), ("3.3", "8.2"), ("3.2", "8.0")]):
        paths.append(tmp_path / f"run{index}.md")
        paths[-1].write_text(run.format(out=f"r/run{index}.md", t=t, x=x))
    text = module.average_report_groups(paths, "python bench/b.py --summarize ...")
    assert "## `python bench/b.py --tokens 5`" in text
    assert "(took 3.2 ± 0.1 min)" in text
    assert "| a | 8.0 ± 0.2 s | 0.66 | qwen3 |" in text  # equal numbers stay as printed
    other = tmp_path / "other.md"
    other.write_text(run.format(out="r/o.md", t="3.1", x="7.8").replace("--tokens 5", "--tokens 6"))
    with pytest.raises(ValueError, match="different commands"):
        module.average_reports([paths[0], other], "python bench/b.py --summarize ...")
    words = tmp_path / "words.md"
    words.write_text(run.format(out="r/w.md", t="3.1", x="7.8").replace("| a |", "| b |"))
    with pytest.raises(ValueError, match="beyond their numbers"):
        module.average_reports([paths[0], words], "python bench/b.py --summarize ...")


def test_integer_check_skips_code_years_and_abbreviations_and_flags_the_rest():
    import importlib.util

    spec = importlib.util.spec_from_file_location("_check_published_ints", REPO / "bench" / "check_published.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text = "Fitted 24,158 rows in 2,360 s; in 2026, `--steps 999`, 262k, 1.5 and 12,345.\n```\n4444\n```\nthen 5555."
    assert module.untraced_integers(text, [24158.0, 2360.49]) == ["1: 12,345", "5: 5555"]


def test_leaderboard_rows_keep_the_recipe_they_ran_after_the_defaults_change():
    """Rows written before the default recovery became self-distillation (and before self-distilling rows recorded
    their weights) keep their label and get a command that re-runs what they ran, not today's default."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_bench_leaderboard", REPO / "bench" / "bench_leaderboard.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    base = "python bench/bench_leaderboard.py --train-only --stage1-lr 0.00064 --stage2-lr 0.0001"
    old_default = {
        "phase": "train",
        "arm": "default",
        "recovery": "ce",
        "command": base + " --arms default",
        "train_steps": 200,
        "stage1_steps": 40,
        "stage1_lr": 6.4e-4,
        "stage2_lr": 1e-4,
    }
    old_sd = {
        **old_default,
        "arm": "self_distill",
        "recovery": "self_distill",
        "command": base + " --arms self_distill",
    }
    assert module.default_recovery() == "self_distill"  # the library's "auto", as the bench runs it
    assert "ce recovery" in module.arm_label(old_default)
    assert "sd weights ce 1 / likelihood 1 / hidden 1 / prediction 0" in module.arm_label(old_sd)
    assert module.unrecorded_flags(old_default) == {"--default-recovery": "ce"}
    assert module.unrecorded_flags(old_sd) == {
        "--sd-ce-weight": "1",
        "--sd-likelihood-weight": "1",
        "--sd-hidden-weight": "1",
        "--sd-prediction-weight": "0",
        "--sd-split-weight": "0",
    }
    args = module.parse_args(["--train-only", "--stage1-lr", "0.00064", "--stage2-lr", "0.0001"])
    new_sd = {**old_sd, **module.run_recipe(args, "self_distill")}  # a row written today records the weights
    assert module.unrecorded_flags(new_sd) == {
        "--sd-ce-weight": "1",
        "--sd-likelihood-weight": "0",
        "--sd-hidden-weight": "0",
        "--sd-prediction-weight": "1",
        "--sd-split-weight": "1",
    }
    assert module.row_recipe(new_sd)["sd_prediction_weight"] == 1.0
    assert module.arm_label(new_sd).endswith("prediction 1 / split 1)")
    assert "split" not in module.arm_label(old_sd)  # named only where it ran
    assert module.row_recipe(old_sd) != module.run_recipe(args, "self_distill")  # the old row is not today's arm


def test_leaderboard_mixes_other_text_at_its_share_even_when_it_is_scarce():
    """`mixed_windows` keeps the asked share of mixed-in windows: by adding them when they are plenty (the task-near
    runs, whose batches must not change), by dropping corpus windows when they are few (the original model's text)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_bench_leaderboard", REPO / "bench" / "bench_leaderboard.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    corpus = [f"c{i}" for i in range(100)]
    plenty, few = [f"n{i}" for i in range(500)], [f"n{i}" for i in range(30)]
    mixed = module.mixed_windows(corpus, plenty, 0.5, seed=2)
    assert sorted(w for w in mixed if w[0] == "c") == sorted(corpus) and sum(w[0] == "n" for w in mixed) == 100
    assert mixed == module.shuffled(corpus + module.shuffled(plenty, 2)[:100], 2)  # as before the scarce case
    scarce = module.mixed_windows(corpus, few, 0.5, seed=2)
    assert sum(w[0] == "n" for w in scarce) == 30 and sum(w[0] == "c" for w in scarce) == 30
    assert len(set(scarce)) == 60 and module.mixed_windows(corpus, few, 0.5, seed=2) == scarce
    assert sum(w[0] == "n" for w in module.mixed_windows(corpus, few, 0.25, seed=2)) == 30
    assert len(module.mixed_windows(corpus, few, 0.25, seed=2)) == 120


def test_leaderboard_pools_seeds_question_by_question_and_places_the_goal_line():
    """`pooled_difference` averages the per-seed paired differences and gives both standard errors; `goal_verdict`
    calls the goal met or missed only when the whole 95% interval is on one side of -3 points."""
    import importlib.util
    import math
    import statistics

    spec = importlib.util.spec_from_file_location("_bench_leaderboard", REPO / "bench" / "bench_leaderboard.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    original = {"correct": "1111100000"}
    seeds = [{"correct": "1111000000"}, {"correct": "0111100001"}]  # -10 and 0 points
    pooled = module.pooled_difference(seeds, original)
    assert math.isclose(pooled["mean"], -5.0)
    per_question = [-0.5, 0, 0, 0, -0.5, 0, 0, 0, 0, 0.5]
    assert math.isclose(pooled["se_questions"], 100 * statistics.stdev(per_question) / math.sqrt(10))
    assert math.isclose(pooled["se_seeds"], statistics.stdev([-10.0, 0.0]) / math.sqrt(2))
    half = 1.96 * max(pooled["se_questions"], pooled["se_seeds"])
    assert math.isclose(pooled["low"], -5.0 - half) and math.isclose(pooled["high"], -5.0 + half)
    assert module.goal_verdict(-2.9, 1.0).startswith("within")
    assert module.goal_verdict(-6.0, -3.1).startswith("missed")
    assert module.goal_verdict(-6.9, 0.6).startswith("undecided")


def test_leaderboard_counts_a_rescored_swap_once_and_pairs_its_zero_shot_with_the_original():
    """A phase 'after_swap' row scored again to add zero-shot tasks replaces the first one in the tables (it is the
    same deterministic swap, not a second seed), and its tasks are paired with the unswapped model's."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_bench_leaderboard", REPO / "bench" / "bench_leaderboard.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    bpb = {"en": 1.0, "ja": 2.0}
    first = {
        "phase": "after_swap",
        "target": "qwen2.5",
        "method": "fvt_scaled",
        "seed": 0,
        "deterministic": True,
        "bpb": bpb,
        "mean_bpb": 1.5,
    }
    rescored = {**first, "zero_shot": {"piqa": {"acc": 0.4, "num_examples": 5, "correct": "01100"}}}
    other_seed = {**first, "method": "focus", "deterministic": False, "mean_bpb": 1.7}
    original = {
        "phase": "original_zero_shot",
        "zero_shot": {"piqa": {"acc": 0.6, "num_examples": 5, "correct": "11100"}},
    }
    rows = [first, other_seed, {**other_seed, "seed": 1, "mean_bpb": 1.9}, rescored, original]
    assert module.latest_scores(rows) == [other_seed, {**other_seed, "seed": 1, "mean_bpb": 1.9}, rescored, original]
    table = module.after_swap_table(rows)
    assert "| fvt_scaled (deterministic) | **1.500 (1)** |" in table  # not "(2)"
    assert "| focus | 1.800 ± 0.141 (2) |" in table  # two seeds stay two
    paired = module.paired_zero_shot_table(rows)
    assert any(
        line.startswith(
            "| fvt_scaled on qwen2.5 (phase after_swap) | right after the swap | piqa | 5 | "
            "0.600 | 0.400 | -20.0 ± 20.0 |"
        )
        for line in paired
    )


def test_draft_summary_gives_forward_costs_per_run_with_mean_and_std():
    import importlib.util

    spec = importlib.util.spec_from_file_location("_bench_draft", REPO / "bench" / "bench_draft.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    costs = [
        {
            "big_ms": 100.0,
            "swapped_draft_ms": 50.0,
            "draft_to_big_ratio": 0.5,
            "verify_to_one_token": {"2": 0.8},
            "frequency_ranked": {"16384": {"draft_ms": 30.0, "draft_to_big_ratio": 0.3}},
            "without_small_batch_matmul": {"verify_to_one_token": {"2": 2.0}},
        },
        {
            "big_ms": 110.0,
            "swapped_draft_ms": 54.0,
            "draft_to_big_ratio": 0.49,
            "verify_to_one_token": {"2": 0.9},
            "frequency_ranked": {"16384": {"draft_ms": 32.0, "draft_to_big_ratio": 0.29}},
            "without_small_batch_matmul": {"verify_to_one_token": {"2": 2.2}},
        },
    ]
    lines = module.cost_summary_lines(costs)
    assert "| big model, one token (ms) | 100 / 110 | 105.0 ± 7.1 |" in lines
    assert "| swapped draft / big model | 0.5 / 0.49 | 0.495 ± 0.007 |" in lines
    assert "| swapped draft, 16384-token head (ms) | 30 / 32 | 31.0 ± 1.4 |" in lines
    assert "| big model over 2 tokens / one token | 0.8 / 0.9 | 0.850 ± 0.071 |" in lines
    assert "| big model over 2 tokens / one token, without small_batch_matmul | 2 / 2.2 | 2.100 ± 0.141 |" in lines
    assert not any("original SmolLM2" in line for line in lines)  # a quantity no run measured is left out
    assert module.cost_summary_lines([{}, {}]) == []  # agreement-only runs time nothing


def _check_stale_in_a_scratch_repo(tmp_path, monkeypatch):
    """check_stale.py pointed at a new git repository under tmp_path, and a `commit(message)` with a fresh second."""
    import importlib.util
    import os

    spec = importlib.util.spec_from_file_location("_check_stale", REPO / "bench" / "check_stale.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    repo, results = tmp_path, tmp_path / "bench" / "results"
    results.mkdir(parents=True)
    monkeypatch.setattr(module, "REPO", repo)
    monkeypatch.setattr(module, "RESULTS", results)
    monkeypatch.setattr(module, "RERUNS", repo / "bench" / "results_reruns.json")
    clock = iter(range(1_700_000_000, 1_700_100_000, 100))  # one commit per distinct second

    def commit(message):
        stamp = f"{next(clock)} +0000"
        env = {**os.environ, "GIT_AUTHOR_DATE": stamp, "GIT_COMMITTER_DATE": stamp}
        for args in (["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", message]):
            subprocess.run(["git", *args], cwd=repo, check=True, env=env)
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()

    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    return module, repo, results, commit


def test_check_stale_lists_files_older_than_their_script_and_honours_recorded_reruns(tmp_path, monkeypatch):
    module, repo, results, commit = _check_stale_in_a_scratch_repo(tmp_path, monkeypatch)
    (repo / "bench" / "b.py").write_text("print(1)\n")
    (results / "x.md").write_text("Command: `python bench/b.py`\n\n| 1.23 |\n")
    commit("first")
    assert module.stale_files() == []
    (repo / "bench" / "b.py").write_text("print(2)\n")
    commit("the script changes")
    assert [(name, script) for name, script, _ in module.stale_files()] == [("x.md", "bench/b.py")]
    assert module.record([str(results / "x.md")]) == 0  # re-run, byte for byte the same
    assert module.stale_files() == []
    (results / "x.md").write_text("Command: `python bench/b.py`\n\n| 1.24 |\n")  # the file no longer as recorded
    assert module.record([str(results / "x.md")]) == 2  # uncommitted: refused
    commit("re-run")
    assert module.stale_files() == []
    (repo / "bench" / "b.py").write_text("print(3)\n")
    cosmetic = commit("cosmetic")
    assert len(module.stale_files()) == 1
    ledger = json.loads((repo / "bench" / "results_reruns.json").read_text())
    ledger["unaffected_commits"] = {cosmetic[:7]: "prints differently"}
    (repo / "bench" / "results_reruns.json").write_text(json.dumps(ledger))
    assert module.stale_files() == []


def test_check_stale_lists_files_made_from_a_results_file_committed_after_them(tmp_path, monkeypatch):
    module, repo, results, commit = _check_stale_in_a_scratch_repo(tmp_path, monkeypatch)
    (repo / "bench" / "a.py").write_text("print(1)\n")
    (repo / "bench" / "s.py").write_text("print(2)\n")
    (results / "runs.jsonl").write_text('{"bpb": 1.5}\n')
    (results / "runs.md").write_text("Generated by `python bench/a.py`\n\n| 1.5 |\n")
    header = "Generated by `python bench/s.py` from `runs.jsonl` and from `gone.jsonl`.\n\n"
    (results / "summary.md").write_text(header + "| 1.5 |\n")
    commit("first")
    assert module.inputs_of(results / "summary.md") == ["runs.jsonl"]  # a name with no file is not an input
    assert module.inputs_of(results / "runs.md") == []  # its own .jsonl is not an input of a file
    assert module.stale_inputs() == []
    (results / "runs.jsonl").write_text('{"bpb": 1.5}\n{"bpb": 1.4}\n')
    commit("a new run appended")
    assert module.stale_inputs() == [("summary.md", "runs.jsonl")]
    assert module.stale_files() == []  # no script changed: only the input check sees it
    assert module.record([str(results / "summary.md")]) == 0  # re-made byte for byte the same
    assert module.stale_inputs() == []
    (results / "runs.jsonl").write_text('{"bpb": 1.3}\n')
    commit("the input changes again")
    assert module.stale_inputs() == [("summary.md", "runs.jsonl")]  # the record names the input's older commit
    (results / "summary.md").write_text(header + "| 1.3 |\n")
    commit("re-made")
    assert module.stale_inputs() == []


def test_check_rerun_tells_a_re_made_row_from_a_changed_one(tmp_path):
    """bench/check_rerun.py passes a re-run whose deterministic rows equal the published ones, fails one that differs
    in any domain, and says so when a row has no published match."""
    published = [json.loads(line) for line in (REPO / "bench/results/leaderboard.jsonl").read_text().splitlines()]
    row = next(r for r in published if r.get("phase") == "after_swap" and r.get("deterministic") and "bpb" in r)

    def run(rows):
        path = tmp_path / "rerun.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        return subprocess.run(
            [sys.executable, "bench/check_rerun.py", str(path), "--output", str(tmp_path / "out.md")],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )

    assert run([row]).returncode == 0
    changed = json.loads(json.dumps(row))
    domain = next(iter(changed["bpb"]))
    changed["bpb"][domain] += 0.001
    done = run([changed])
    assert done.returncode == 1 and "DIFFERENT" in done.stdout
    unknown = dict(row, target="no-such-target")
    assert run([unknown]).returncode == 2


def check_rerun(tmp_path, rows: list) -> tuple[int, str]:
    """Run bench/check_rerun.py on `rows` as a re-run file: (exit code, the markdown it wrote)."""
    path = tmp_path / "rerun.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out.md"
    done = subprocess.run(
        [sys.executable, "bench/check_rerun.py", str(path), "--output", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done.returncode, out.read_text()


def test_check_rerun_holds_a_trained_row_to_its_recipes_spread(tmp_path):
    """A trained row is not deterministic: bench/check_rerun.py passes one within the spread of its recipe's published
    seeds, fails one far outside it, and says so when the recipe has fewer than two published seeds."""
    published = [json.loads(line) for line in (REPO / "bench/results/leaderboard.jsonl").read_text().splitlines()]
    extras = ("teacher_text_share", "task_near_share", "output_row_fit", "new_word_fit", "merge_original", "kept_as")
    row = next(  # a seed of the default recipe after 200 steps, which has seven
        r
        for r in published
        if r.get("phase") == "train"
        and r.get("arm") == "default"
        and r.get("train_steps") == 200
        and r.get("method") == "fvt_scaled"
        and r.get("sd_split_weight") == 1
        and not any(k in r for k in extras)
    )

    code, text = check_rerun(tmp_path, [row])
    assert code == 0 and "1 within the spread" in text and "its own seed's row" in text
    code, text = check_rerun(tmp_path, [dict(row, mean_bpb=row["mean_bpb"] + 0.5)])
    assert code == 1 and "OUTSIDE the spread" in text
    code, text = check_rerun(tmp_path, [dict(row, method="no-such-init")])
    assert code == 2 and "no spread" in text


def test_check_rerun_holds_the_unswapped_models_answers_and_pairs_a_trained_rows(tmp_path):
    """The unswapped model's zero-shot answers are deterministic: bench/check_rerun.py passes a re-run that gives the
    published answer to every question and fails one with an answer changed. A trained row's zero-shot is shown
    paired with the unswapped model and with its own seed's published row."""
    published = [json.loads(line) for line in (REPO / "bench/results/leaderboard.jsonl").read_text().splitlines()]
    original = next(
        r
        for r in published
        if r.get("phase") == "original_zero_shot" and "correct" in r["zero_shot"].get("arc_easy", {})
    )
    trained = next(
        r
        for r in published
        if r.get("phase") == "train"
        and r.get("kept_as") == "qwen2.5-default-seed6-200steps"
        and r.get("sd_split_weight") == 1
        and "arc_easy:test_rc_0shot" in r.get("zero_shot", {})
    )

    code, text = check_rerun(tmp_path, [original, trained])
    assert code == 0 and "the published answer to every question" in text
    assert "its own seed's published row" in text and "(0 answers moved)" in text
    flipped = json.loads(json.dumps(original))
    answers = flipped["zero_shot"]["arc_easy"]["correct"]
    flipped["zero_shot"]["arc_easy"]["correct"] = ("1" if answers[0] == "0" else "0") + answers[1:]
    code, text = check_rerun(tmp_path, [flipped])
    assert code == 1 and "1 answers unlike the published" in text


def test_control_table_states_the_range_of_every_200_step_row(lb):
    """The range the README quotes for every swapped recipe against the control is printed by the script, so a new
    row moves it instead of leaving a hand-read range stale; rows of other budgets stay out of it."""

    def row(method, arm, steps, correct, seed=2):
        acc = correct.count("1") / len(correct)
        return {
            "phase": "train",
            "method": method,
            "arm": arm,
            "seed": seed,
            "train_steps": steps,
            "stage1_steps": steps // 5,
            "stage1_lr": 6.4e-4,
            "stage2_lr": 2e-4,
            "recovery": "ce",
            "zero_shot": {"piqa": {"acc": acc, "correct": correct, "num_examples": len(correct)}},
        }

    rows = [
        row("none", "unswapped_ce", 200, "1111111111"),
        row("fvt_scaled", "default", 200, "1111111100"),
        row("fvt", "fvt_ce", 200, "1111111110"),
        row("none", "unswapped_ce", 50, "1111111111"),
        row("fvt_scaled", "default", 50, "0000000000"),
    ]
    text = "\n".join(lb.control_paired_table(rows))
    assert "piqa from -20.0 to -10.0 points over 2 rows" in text and "(the seeds that have one: 2)" in text
