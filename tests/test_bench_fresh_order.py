"""The leaderboard's `--stage2-fresh-order`: stage 2 in a data order of its own, a recipe setting in rows, labels and
kept names."""

TRAIN = ["--train-only", "--train-target", "qwen2.5", "--arms", "default"]


def test_fresh_order_is_a_recipe_override_and_off_by_default(lb):
    assert lb.recipe_overrides(lb.parse_args(TRAIN + ["--stage2-fresh-order"]))["stage2_fresh_order"] is True
    assert "stage2_fresh_order" not in lb.recipe_overrides(lb.parse_args(TRAIN))  # rows name only what they override


def test_a_fresh_order_model_is_kept_under_a_name_of_its_own(lb):
    plain = lb.kept_name(lb.parse_args(TRAIN), "default", 5)
    fresh = lb.kept_name(lb.parse_args(TRAIN + ["--stage2-fresh-order"]), "default", 5)
    assert fresh != plain and "-fresh-order" in fresh


def test_the_label_names_the_fresh_order(lb):
    row = {"arm": "default", "recovery": lb.default_recovery(), "train_steps": 200, "stage1_steps": 40}
    assert "stage2 fresh order" in lb.arm_label({**row, "stage2_fresh_order": True})
    assert "fresh order" not in lb.arm_label(row)
