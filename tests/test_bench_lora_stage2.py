"""The leaderboard's LoRA stage 2 (`--stage2 lora`): a recipe setting of its own, in rows, labels and kept names."""

import pytest

TRAIN = ["--train-only", "--train-target", "qwen2.5", "--arms", "default"]


def test_lora_is_a_recipe_override_and_full_is_the_default(lb):
    lora = lb.parse_args(TRAIN + ["--stage2", "lora", "--lora-r", "16"])
    assert lb.recipe_overrides(lora)["stage2_mode"] == "lora" and lb.recipe_overrides(lora)["lora_r"] == 16
    rank = lb.recipe_overrides(lb.parse_args(TRAIN + ["--stage2", "lora"]))["lora_r"]
    assert rank == 64  # the library's rank, recorded in the row
    full = lb.parse_args(TRAIN + ["--stage2", "full"])
    assert "stage2_mode" not in lb.recipe_overrides(full)  # the library's default: its rows pair with the default's
    assert lb.recipe_overrides(full) == lb.recipe_overrides(lb.parse_args(TRAIN))


def test_lora_rank_needs_lora(lb):
    with pytest.raises(SystemExit):
        lb.parse_args(TRAIN + ["--lora-r", "16"])


def test_a_lora_model_is_kept_under_a_name_of_its_own(lb):
    plain = lb.kept_name(lb.parse_args(TRAIN), "default", 5)
    lora = lb.kept_name(lb.parse_args(TRAIN + ["--stage2", "lora"]), "default", 5)
    rank = lb.kept_name(lb.parse_args(TRAIN + ["--stage2", "lora", "--lora-r", "16"]), "default", 5)
    assert len({plain, lora, rank}) == 3 and "-lora64-" in lora and "-lora16-" in rank


def test_the_label_names_the_lora_stage(lb):
    row = {
        "arm": "default",
        "recovery": lb.default_recovery(),
        "train_steps": 200,
        "stage1_steps": 40,
        "stage1_lr": 6.4e-4,
        "stage2_lr": 2e-4,
        "stage2_mode": "lora",
        "lora_r": 16,
    }
    assert "stage 2 LoRA rank 16" in lb.arm_label(row)


def test_a_row_without_its_rank_ran_the_rank_of_its_time(lb):
    row = {"arm": "default", "recovery": lb.default_recovery(), "train_steps": 200, "stage1_steps": 40}
    assert "stage 2 LoRA rank 64" in lb.arm_label({**row, "stage2_mode": "lora"})


def test_a_lora_row_pairs_with_the_full_stage_2_row_of_its_seed():
    import importlib.util
    import sys
    from pathlib import Path

    bench = Path(__file__).resolve().parents[1] / "bench"
    sys.path.insert(0, str(bench))
    try:
        spec = importlib.util.spec_from_file_location(
            "bench_zero_shot_new_tokens", bench / "bench_zero_shot_new_tokens.py"
        )
        zs = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(zs)
    finally:
        sys.path.remove(str(bench))
    common = {
        "phase": "train",
        "arm": "default",
        "target": "qwen2.5",
        "train_steps": 200,
        "stage1_steps": 40,
        "recovery": "self_distill",
        "method": zs.lb.default_init_method(),
        "stage1_lr": 6.4e-4,
        "stage2_lr": 2e-4,
    }
    full = [{**common, "seed": seed} for seed in (5, 6)]
    lora = {**common, "seed": 6, "stage2_mode": "lora", "lora_r": 64}
    assert zs.is_plain(full[0]) and not zs.is_plain(lora)
    assert zs.plain_reference(full + [lora], lora) is full[1]
