"""Kept models of the leaderboard: a recipe with other self-distillation weights is saved under a name of its own."""

import argparse


def weights(lb, **changes):
    values = {key: None for key in lb.SD_WEIGHT_KEYS}
    values.update(changes)
    return argparse.Namespace(**values)


def test_the_library_weights_keep_the_plain_name(lb):
    assert lb.sd_weights_tag(weights(lb)) == ""
    assert lb.sd_weights_tag(weights(lb, **lb.default_sd_weights())) == ""


def test_other_weights_name_only_what_differs(lb):
    defaults = lb.default_sd_weights()
    changed = weights(lb, **{**defaults, "sd_prediction_weight": 3.0, "sd_split_weight": 3.0})
    assert lb.sd_weights_tag(changed) == "-sd-prediction3-split3"
    assert lb.sd_weights_tag(weights(lb, sd_hidden_weight=0.5)) == "-sd-hidden0.5"


def test_every_layer_matched_is_a_name_of_its_own(lb):
    last = weights(lb, sd_hidden_weight=10.0, sd_hidden_layers="last")
    every = weights(lb, sd_hidden_weight=10.0, sd_hidden_layers="all")
    assert lb.sd_weights_tag(last) == "-sd-hidden10"
    assert lb.sd_weights_tag(every) == "-sd-hidden10-hidden-all"
