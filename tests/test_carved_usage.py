"""tokswap.carved_usage: which target tokens stand for a carved source word in a text, and how their rows mix."""

import numpy as np
import pytest
import torch
from conftest import tiny_llama

from tokswap.align.byte_offsets import token_byte_ends
from tokswap.carved_rows import carved_words
from tokswap.carved_usage import (
    CarvedUsageConfig,
    CarvedUsageError,
    carved_usage_rows,
    count_carved_usage,
    inside_pairs,
)


@pytest.fixture(scope="module")
def pair():
    from tokswap.loading import load_tokenizer

    return load_tokenizer("smollm2"), load_tokenizer("qwen2.5")


def _pairs(smollm2, qwen, text):
    s_ids = smollm2(text, add_special_tokens=False)["input_ids"]
    q_ids = qwen(text, add_special_tokens=False)["input_ids"]
    carved = np.zeros(len(smollm2), dtype=bool)
    carved[carved_words(smollm2, qwen)] = True
    ends = token_byte_ends(smollm2, s_ids, text), token_byte_ends(qwen, q_ids, text)
    t_in, s_in = inside_pairs(s_ids, ends[0], q_ids, ends[1], carved)
    return qwen.convert_ids_to_tokens(t_in.tolist()), smollm2.convert_ids_to_tokens(s_in.tolist())


def test_inside_pairs_finds_the_pieces_of_carved_words_and_nothing_else(pair):
    smollm2, qwen = pair
    targets, sources = _pairs(smollm2, qwen, "Water is lost by evaporation from the sea, 水 and 🙂 too.")
    # " evaporation" is one SmolLM2 token; Qwen2.5 spells it " ev" + "aporation": both pieces stand for it
    assert targets == ["Ġev", "aporation"] and sources == ["Ġevaporation", "Ġevaporation"]
    # a word both vocabularies have whole, CJK and emoji bytes: nothing is inside a carved word
    targets, _ = _pairs(smollm2, qwen, "The sea 水 🙂 is wide.")
    assert targets == []


def test_count_carved_usage_counts_totals_and_inside_occurrences(pair):
    smollm2, qwen = pair
    texts = ["Rain follows evaporation.", "Then evaporation again.", "An ev charger."]
    usage = count_carved_usage(smollm2, qwen, texts, len(qwen))
    q, s = qwen.get_vocab(), smollm2.get_vocab()
    counted = {
        (qwen.convert_ids_to_tokens(int(t)), smollm2.convert_ids_to_tokens(int(w))): int(c)
        for t, w, c in zip(usage.targets, usage.sources, usage.counts)
    }
    assert counted[("aporation", "Ġevaporation")] == 2
    assert counted[("Ġev", "Ġevaporation")] == 2
    # " ev" occurs three times: twice inside " evaporation", once as itself (" ev charger")
    assert usage.totals[q["Ġev"]] == 3
    assert s["Ġevaporation"] in set(usage.sources.tolist())


def test_rows_mix_by_usage_share_and_untouched_rows_stay_exact(pair):
    smollm2, qwen = pair
    q, s = qwen.get_vocab(), smollm2.get_vocab()
    source = tiny_llama(len(smollm2), hidden=16, layers=1, tied=True, seed=0).eval()
    model = tiny_llama(len(qwen), hidden=16, layers=1, tied=True, seed=1).eval()
    before = model.get_input_embeddings().weight.detach().clone()
    texts = ["Rain follows evaporation.", "Then evaporation again.", "An ev charger."]
    report = carved_usage_rows(model, source, smollm2, qwen, texts)
    after = model.get_input_embeddings().weight.detach()
    word = source.get_input_embeddings().weight.detach()[s["Ġevaporation"]]
    # "aporation" is only ever " evaporation"'s tail: it takes that row whole
    torch.testing.assert_close(after[q["aporation"]], word)
    # " ev" stood for the word 2 times of 3
    torch.testing.assert_close(after[q["Ġev"]], before[q["Ġev"]] / 3 + 2 * word / 3)
    # a token never inside a carved word keeps its row bit for bit
    assert torch.equal(after[q["Ġcharger"]], before[q["Ġcharger"]])
    assert report.rows_moved >= 2 and 0 < report.mean_share <= 1
    # tied: the head is the same matrix
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight


def test_untied_output_rows_mix_from_the_source_output_rows(pair):
    smollm2, qwen = pair
    q, s = qwen.get_vocab(), smollm2.get_vocab()
    source = tiny_llama(len(smollm2), hidden=16, layers=1, tied=False, seed=0).eval()
    model = tiny_llama(len(qwen), hidden=16, layers=1, tied=False, seed=1).eval()
    carved_usage_rows(model, source, smollm2, qwen, ["It is evaporation."])
    torch.testing.assert_close(
        model.get_output_embeddings().weight[q["aporation"]], source.get_output_embeddings().weight[s["Ġevaporation"]]
    )
    torch.testing.assert_close(
        model.get_input_embeddings().weight[q["aporation"]], source.get_input_embeddings().weight[s["Ġevaporation"]]
    )


def test_config_refuses_bad_values():
    with pytest.raises(CarvedUsageError, match="max_share"):
        CarvedUsageConfig(max_share=0)
    with pytest.raises(CarvedUsageError, match="min_occurrences"):
        CarvedUsageConfig(min_occurrences=0)
