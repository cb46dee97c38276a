"""Fitting new tokens' output rows by likelihood of a text, the rest frozen (tokswap.output_row_fit)."""

import copy
import dataclasses

import pytest
import torch
from conftest import tiny_llama

from tokswap.loading import load_tokenizer
from tokswap.output_row_fit import (
    OutputRowFitConfig,
    OutputRowFitError,
    _mapped,
    _read,
    _ridge_map,
    _RowFit,
    _windows,
    fit_output_rows,
)

TEXT = (
    "The house by the water had a garden. People said the garden was simple, and the water was cold. "
    "A machine in the house made the water warm for the people of the garden. "
)
WORDS = ["Ġgarden", "Ġwater", "Ġmachine"]


@pytest.fixture(scope="module")
def smollm2():
    return load_tokenizer("smollm2")


def _texts(n: int = 30) -> list:
    return [TEXT * 2 for _ in range(n)]


def _model(tokenizer, tied: bool = True):
    return tiny_llama(len(tokenizer), tokenizer=tokenizer, tied=tied, layers=2, hidden=32, seed=3).eval()


def _naive_nll(model, positions) -> float:
    """Cross-entropy of the held-out next tokens from the full logits, written the plain way."""
    with torch.no_grad():
        logits = model.get_output_embeddings()(positions.hidden[positions.heldout])
    return float(torch.nn.functional.cross_entropy(logits.float(), positions.targets[positions.heldout]))


def test_loss_equals_the_full_softmax_cross_entropy(smollm2):
    model = _model(smollm2, tied=False)
    rows = torch.tensor(smollm2.convert_tokens_to_ids(WORDS))
    config = OutputRowFitConfig(window_tokens=16, heldout_every=3)
    positions = _read(model, _windows(smollm2, _texts(3), rows, config), config, None)
    weight = model.get_output_embeddings().weight.detach()
    fit = _RowFit(positions, weight, None, rows)
    moved = weight[rows] + 0.3 * torch.randn(len(rows), weight.shape[1])
    changed = copy.deepcopy(model)
    with torch.no_grad():
        changed.get_output_embeddings().weight[rows] = moved
    assert fit.heldout_loss(moved) == pytest.approx(_naive_nll(changed, positions), abs=1e-5)
    # and the hidden states read are the ones the model's own logits come from
    ids = torch.tensor([_windows(smollm2, _texts(1), rows, config)[0]])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, :-1]
    first = model.get_output_embeddings()(positions.hidden[: ids.shape[1] - 1])
    torch.testing.assert_close(first, logits, atol=1e-5, rtol=1e-5)


def test_fit_raises_the_likelihood_and_changes_only_the_fitted_output_rows(smollm2):
    model = _model(smollm2, tied=True)
    inputs_before = model.get_input_embeddings().weight.detach().clone()
    rows = smollm2.convert_tokens_to_ids(WORDS + ["Ġzebra"])  # a candidate the text never holds
    config = OutputRowFitConfig(window_tokens=32, epochs=3, batch_positions=256, learning_rate=0.5)
    report = fit_output_rows(model, smollm2, _texts(), rows, config)
    head = model.get_output_embeddings().weight.detach()
    assert model.config.tie_word_embeddings is False and head.data_ptr() != inputs_before.data_ptr()
    torch.testing.assert_close(model.get_input_embeddings().weight.detach(), inputs_before, rtol=0, atol=0)
    changed = (head != inputs_before).any(-1).nonzero().flatten().tolist()
    assert sorted(changed) == sorted(rows[:3]) and report.rows_fitted == 3
    assert report.best_epoch >= 1 and report.heldout_nll_after < report.heldout_nll_before - 0.05
    assert report.heldout_positions > 0 and report.train_positions > 4 * report.heldout_positions


def test_fit_is_deterministic(smollm2):
    rows = smollm2.convert_tokens_to_ids(WORDS)
    config = OutputRowFitConfig(window_tokens=32, epochs=2, batch_positions=128)
    first, second = _model(smollm2), _model(smollm2)
    fit_output_rows(first, smollm2, _texts(10), rows, config)
    fit_output_rows(second, smollm2, _texts(10), rows, config)
    torch.testing.assert_close(first.get_output_embeddings().weight, second.get_output_embeddings().weight)


def test_errors(smollm2):
    rows = smollm2.convert_tokens_to_ids(WORDS)
    with pytest.raises(OutputRowFitError, match="No text window holds a candidate"):
        fit_output_rows(_model(smollm2), smollm2, ["Nothing of the kind here."], rows)
    with pytest.raises(OutputRowFitError, match="Too little text"):
        fit_output_rows(_model(smollm2), smollm2, _texts(1), rows, OutputRowFitConfig(min_occurrences=1000))
    with pytest.raises(OutputRowFitError, match="heldout_every"):
        OutputRowFitConfig(heldout_every=1)
    with pytest.raises(OutputRowFitError, match="learning_rate"):
        OutputRowFitConfig(learning_rate=float("nan"))


def test_a_model_with_capped_logits_is_refused(smollm2):
    from transformers import Gemma2Config, Gemma2ForCausalLM

    config = Gemma2Config(vocab_size=len(smollm2), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                          num_attention_heads=2, num_key_value_heads=1, head_dim=16, final_logit_softcapping=2.0)  # fmt: skip
    torch.manual_seed(0)
    model = Gemma2ForCausalLM(config).eval()
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(50)  # logits far beyond the cap
    with pytest.raises(OutputRowFitError, match="soft-capping"):
        fit_output_rows(model, smollm2, _texts(2), smollm2.convert_tokens_to_ids(WORDS))


def test_the_transfer_map_recovers_an_affine_change_exactly():
    generator = torch.Generator().manual_seed(0)
    init = torch.randn(400, 8, generator=generator)
    matrix, offset = torch.randn(8, 8, generator=generator), torch.randn(8, generator=generator)
    mapping = _ridge_map(init, init @ matrix + offset, ridge=1e-9)
    fresh = torch.randn(5, 8, generator=generator)
    torch.testing.assert_close(_mapped(fresh, mapping), fresh + fresh @ matrix + offset, atol=1e-4, rtol=1e-4)


def test_transfer_moves_only_the_rows_the_text_lacks_and_only_when_the_held_out_check_keeps_it(smollm2):
    words = WORDS + ["Ġhouse", "Ġpeople", "Ġcold", "Ġwarm", "Ġsimple", "Ġsaid", "Ġmade"]
    lacking = smollm2.convert_tokens_to_ids(["Ġzebra", "Ġviolin"])
    rows = smollm2.convert_tokens_to_ids(words) + lacking
    config = OutputRowFitConfig(window_tokens=32, epochs=3, batch_positions=256, learning_rate=0.5)
    plain, moved = _model(smollm2), _model(smollm2)
    with torch.no_grad():  # a shared deficit the fit repairs on the words it sees: all candidates start at zero
        for model in (plain, moved):
            model.get_output_embeddings().weight[rows] = 0.0
    fit_output_rows(plain, smollm2, _texts(), rows, config)
    report = fit_output_rows(moved, smollm2, _texts(), rows, dataclasses.replace(config, transfer=True))
    before, after = plain.get_output_embeddings().weight.detach(), moved.get_output_embeddings().weight.detach()
    changed = (before != after).any(-1).nonzero().flatten().tolist()
    assert report.rows_fitted == len(words) and report.transfer_ridge is not None
    assert sorted(changed) == sorted(lacking) and report.rows_transferred == len(lacking)
    assert report.transfer_nll_after < report.transfer_nll_before


def test_transfer_is_refused_when_it_does_not_help_the_held_out_rows(smollm2):
    rows = smollm2.convert_tokens_to_ids(WORDS + ["Ġzebra"])
    config = OutputRowFitConfig(
        window_tokens=32, epochs=3, batch_positions=256, transfer=True, transfer_holdout_every=2
    )
    model = _model(smollm2, tied=False)
    reference = _model(smollm2, tied=False)
    report = fit_output_rows(model, smollm2, _texts(), rows, config)
    fit_output_rows(reference, smollm2, _texts(), rows, dataclasses.replace(config, transfer=False))
    kept = report.transfer_ridge is not None
    assert report.rows_transferred == (1 if kept else 0)
    assert kept == (report.transfer_nll_after < report.transfer_nll_before)
    same = torch.equal(model.get_output_embeddings().weight, reference.get_output_embeddings().weight)
    assert same != kept
