"""Fitting new words' input rows to the original model's hidden states (tokswap.new_word_fit)."""

import copy
import re

import numpy as np
import pytest
import torch
from conftest import tiny_llama

from tokswap.alignment import RowSource, TokenAlignment
from tokswap.loading import load_tokenizer
from tokswap.new_word_fit import (
    NewWordFitConfig,
    NewWordFitError,
    fit_new_word_rows,
    mix_output_rows,
    new_words,
    untie_embeddings,
)


@pytest.fixture(scope="module")
def smollm2():
    return load_tokenizer("smollm2")


def _identity_alignment(tokenizer, new_rows):
    """Every row maps to itself; `new_rows` are marked as initialized by a fallback (not shared)."""
    n = len(tokenizer)
    codes = np.full(n, RowSource.IDENTICAL, dtype=np.int8)
    codes[new_rows] = RowSource.FALLBACK
    return TokenAlignment(np.arange(n), np.ones(n, dtype=np.float32), codes)


def _word_rows(tokenizer, words):
    return [tokenizer.convert_tokens_to_ids(w) for w in words]


def test_new_words_on_a_real_pair(smollm2):
    qwen = load_tokenizer("qwen2.5")
    n = len(qwen)
    alignment = TokenAlignment(np.zeros(n, dtype=np.int64))  # IMPORTED rows: shared = same token string
    config = NewWordFitConfig(max_pieces=3)
    words = new_words(alignment, smollm2, qwen, config)
    source_vocab = smollm2.get_vocab()
    assert len(words) > 1000
    for word in words[:: max(1, len(words) // 500)]:
        assert re.fullmatch(r" [^\W\d_]{2,}", word.text)
        assert qwen.convert_ids_to_tokens(word.row) not in source_vocab
        assert 2 <= len(word.pieces) <= 3
        assert smollm2.decode(word.pieces) == word.text
    toaster = [w for w in words if w.text == " toaster"]
    assert toaster and len(toaster[0].pieces) == 2
    assert [w.row for w in words] == sorted(w.row for w in words)
    assert len(new_words(alignment, smollm2, qwen, NewWordFitConfig(max_pieces=3, max_words=7))) == 7


def test_fit_recovers_known_rows_and_leaves_the_rest(smollm2, tmp_path):
    """With the pieces being the token itself, the original's own row reproduces the teacher's states exactly: the
    fit must find it from a random start; shared rows, output rows and the teacher stay as they were."""
    words = ["Ġhouse", "Ġwater", "Ġgarden", "Ġmachine", "Ġpeople", "Ġsimple"]
    rows = _word_rows(smollm2, words)
    teacher = tiny_llama(len(smollm2), tokenizer=smollm2, tied=True, layers=2, hidden=32, seed=1).eval()
    student = copy.deepcopy(teacher)
    with torch.no_grad():
        student.get_input_embeddings().weight[rows] = torch.randn(len(rows), 32) * 0.05
    before_in = student.get_input_embeddings().weight.detach().clone()
    teacher_before = {k: v.clone() for k, v in teacher.state_dict().items()}
    alignment = _identity_alignment(smollm2, rows)
    config = NewWordFitConfig(min_pieces=1, iterations=300, learning_rate=0.3, num_layers=2)
    report = fit_new_word_rows(student, teacher, alignment, smollm2, smollm2, config)

    assert report.num_words == len(rows) and report.untied
    assert report.loss_after < 0.02 * report.loss_before
    fitted = student.get_input_embeddings().weight.detach()
    truth = teacher.get_input_embeddings().weight.detach()
    rel = (fitted[rows] - truth[rows]).norm(dim=-1) / truth[rows].norm(dim=-1)
    start = (before_in[rows] - truth[rows]).norm(dim=-1) / truth[rows].norm(dim=-1)
    assert (rel < 0.2 * start).all(), (rel, start)
    others = torch.ones(len(smollm2), dtype=torch.bool)
    others[rows] = False
    assert torch.equal(fitted[others], before_in[others])
    # untied: the output rows keep the values the tied matrix had before the fit
    assert student.get_output_embeddings().weight.data_ptr() != student.get_input_embeddings().weight.data_ptr()
    assert torch.equal(student.get_output_embeddings().weight.detach(), before_in)
    assert student.config.tie_word_embeddings is False
    assert all(torch.equal(v, teacher_before[k]) for k, v in teacher.state_dict().items())
    assert all(p.requires_grad for p in student.parameters()) and all(p.requires_grad for p in teacher.parameters())
    # an untied model saves and reloads with its two matrices apart
    student.save_pretrained(tmp_path / "untied")
    reloaded = type(student).from_pretrained(tmp_path / "untied")
    assert torch.equal(reloaded.get_input_embeddings().weight.detach(), fitted)
    assert torch.equal(reloaded.get_output_embeddings().weight.detach(), before_in)


def test_fit_is_deterministic_and_batch_independent(smollm2):
    """Each word's row depends on that word alone: the batch it is fitted in changes it by float rounding only."""
    words = ["Ġhouse", "Ġwater", "Ġgarden", "Ġmachine", "Ġpeople"]
    rows = _word_rows(smollm2, words)
    teacher = tiny_llama(len(smollm2), tokenizer=smollm2, tied=True, seed=2).eval()
    alignment = _identity_alignment(smollm2, rows)
    start = copy.deepcopy(teacher)
    with torch.no_grad():
        start.get_input_embeddings().weight[rows] += (
            torch.randn(len(rows), 32, generator=torch.Generator().manual_seed(0)) * 0.05
        )
    results = []
    for batch_size in (5, 5, 2):
        student = copy.deepcopy(start)
        config = NewWordFitConfig(min_pieces=1, iterations=10, batch_size=batch_size, num_layers=2)
        fit_new_word_rows(student, teacher, alignment, smollm2, smollm2, config)
        results.append(student.get_input_embeddings().weight.detach()[rows])
    moved = (results[0] - start.get_input_embeddings().weight.detach()[rows]).abs().max()
    assert torch.equal(results[0], results[1])
    assert (results[0] - results[2]).abs().max() < 1e-3 * moved


def test_output_weight_mixes_the_fitted_rows_into_the_output_rows_only(smollm2):
    """`output_weight` w: each fitted word's output row is w x its fitted input row + (1 - w) x its init; every other
    output row and every input row are what the fit alone gives."""
    words = ["Ġhouse", "Ġwater", "Ġgarden"]
    rows = _word_rows(smollm2, words)
    teacher = tiny_llama(len(smollm2), tokenizer=smollm2, tied=True, layers=2, hidden=32, seed=3).eval()
    start = copy.deepcopy(teacher)
    with torch.no_grad():
        start.get_input_embeddings().weight[rows] = torch.randn(
            len(rows), 32, generator=torch.Generator().manual_seed(1)
        )
    init = start.get_input_embeddings().weight.detach().clone()
    alignment = _identity_alignment(smollm2, rows)
    students = {}
    for weight in (0.0, 0.25, 1.0):
        students[weight] = copy.deepcopy(start)
        config = NewWordFitConfig(min_pieces=1, iterations=5, num_layers=2, output_weight=weight)
        fit_new_word_rows(students[weight], teacher, alignment, smollm2, smollm2, config)
    fitted = students[0.0].get_input_embeddings().weight.detach()
    assert not torch.equal(fitted[rows], init[rows])
    others = torch.ones(len(smollm2), dtype=torch.bool)
    others[rows] = False
    for weight, student in students.items():
        assert torch.equal(student.get_input_embeddings().weight.detach(), fitted)
        output = student.get_output_embeddings().weight.detach()
        torch.testing.assert_close(output[rows], weight * fitted[rows] + (1 - weight) * init[rows])
        assert torch.equal(output[others], init[others])


def test_mix_output_rows_refuses_tied_embeddings():
    with pytest.raises(NewWordFitError, match="untied"):
        mix_output_rows(tiny_llama(64, tied=True), [3, 4], 0.5)


def test_untie_embeddings_only_unties_tied_models(smollm2):
    tied = tiny_llama(64, tied=True)
    assert untie_embeddings(tied)
    assert tied.get_output_embeddings().weight.data_ptr() != tied.get_input_embeddings().weight.data_ptr()
    torch.testing.assert_close(tied.get_output_embeddings().weight, tied.get_input_embeddings().weight)
    assert not untie_embeddings(tiny_llama(64, tied=False))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"prefixes": ()}, "prefixes"),
        ({"prefixes": ("The ",)}, "trailing whitespace"),
        ({"iterations": 0}, "iterations"),
        ({"min_pieces": 3, "max_pieces": 2}, "max_pieces"),
        ({"learning_rate": float("nan")}, "learning_rate"),
        ({"word_pattern": "("}, "regular expression"),
        ({"max_words": -1}, "max_words"),
        ({"output_weight": 1.5}, "output_weight"),
        ({"output_weight": -0.1}, "output_weight"),
    ],
)
def test_config_validation(kwargs, message):
    with pytest.raises(NewWordFitError, match=message):
        NewWordFitConfig(**kwargs)
