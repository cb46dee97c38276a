"""Moving a swapped model's decoder weights back toward the original model's (tokswap.body_merge)."""

import copy

import pytest
import torch
from conftest import tiny_llama

from tokswap.body_merge import BodyMergeError, merge_body_with_original


def _swapped_and_trained(original, vocab_size: int, tied: bool):
    """A model with the original's architecture, another vocabulary and every weight changed (as after training)."""
    model = tiny_llama(vocab_size, seed=1, tied=tied)
    with torch.no_grad():
        for weight in model.parameters():  # norms start at 1 in both models
            weight.add_(0.1 * torch.randn_like(weight))
    assert model.get_input_embeddings().weight.shape[0] != original.get_input_embeddings().weight.shape[0]
    return model


@pytest.mark.parametrize("tied", [False, True])
def test_decoder_weights_are_interpolated_and_embeddings_kept(tied):
    original = tiny_llama(40, seed=0, tied=tied)
    model = _swapped_and_trained(original, 56, tied)
    before = copy.deepcopy(model)
    merged = merge_body_with_original(model, original, 0.25)
    reference = dict(original.named_parameters())
    checked = 0
    for (name, weight), (_, old) in zip(model.named_parameters(), before.named_parameters()):
        if weight.shape[0] == 56:  # the embedding matrix or the head: kept
            assert torch.equal(weight, old), name
            continue
        expected = 0.75 * old + 0.25 * reference[name]
        torch.testing.assert_close(weight, expected, rtol=1e-6, atol=1e-6)
        assert not torch.equal(weight, old), name
        checked += 1
    assert merged == checked > 0
    assert torch.equal(model.get_input_embeddings().weight, before.get_input_embeddings().weight)
    assert torch.equal(model.get_output_embeddings().weight, before.get_output_embeddings().weight)
    # the original is only read
    fresh = tiny_llama(40, seed=0, tied=tied).state_dict()
    assert all(torch.equal(p, fresh[n]) for n, p in original.state_dict().items())


def test_end_points():
    original = tiny_llama(40, seed=0)
    model = _swapped_and_trained(original, 56, tied=False)
    untouched = copy.deepcopy(model)
    merge_body_with_original(untouched, original, 0.0)
    assert all(torch.equal(a, b) for a, b in zip(untouched.parameters(), model.parameters()))
    merge_body_with_original(model, original, 1.0)
    body = [n for n, p in model.named_parameters() if p.shape[0] != 56]
    assert all(torch.equal(dict(model.named_parameters())[n], dict(original.named_parameters())[n]) for n in body)


def test_another_architecture_is_refused():
    original = tiny_llama(40, seed=0, layers=1)
    model = _swapped_and_trained(original, 56, tied=False)
    with pytest.raises(BodyMergeError, match="missing in the original model"):
        merge_body_with_original(model, original, 0.5)
    wider = tiny_llama(40, seed=0, hidden=64, heads=4)
    with pytest.raises(BodyMergeError, match="of shape"):
        merge_body_with_original(_swapped_and_trained(wider, 56, tied=False), wider, 0.5)


@pytest.mark.parametrize("weight", [-0.1, 1.5, float("nan")])
def test_weight_out_of_range(weight):
    original = tiny_llama(40, seed=0)
    with pytest.raises(BodyMergeError, match=r"in \[0, 1\]"):
        merge_body_with_original(_swapped_and_trained(original, 56, tied=False), original, weight)


def test_non_finite_result_stops():
    original = tiny_llama(40, seed=0)
    with torch.no_grad():
        original.model.norm.weight[0] = float("inf")
    with pytest.raises(BodyMergeError, match="not finite"):
        merge_body_with_original(_swapped_and_trained(original, 56, tied=False), original, 0.5)
