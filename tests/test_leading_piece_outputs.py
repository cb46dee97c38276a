"""New words' output rows from their first piece's, shifted by what the later pieces cost (tokswap.leading_piece_outputs)."""

import numpy as np
import pytest
import torch
from conftest import tiny_llama

from tokswap.alignment import TokenAlignment
from tokswap.leading_piece_outputs import (
    LeadingPieceConfig,
    LeadingPieceError,
    later_pieces_logprob,
    leading_piece_output_rows,
)
from tokswap.loading import load_tokenizer
from tokswap.new_word_fit import NewWordFitConfig, new_words


@pytest.fixture(scope="module")
def pair():
    smollm2, qwen = load_tokenizer("smollm2"), load_tokenizer("qwen2.5")
    alignment = TokenAlignment(np.zeros(len(qwen), dtype=np.int64))  # IMPORTED rows: shared = same token string
    return smollm2, qwen, alignment


def test_later_pieces_logprob_equals_reading_each_word_alone(pair):
    smollm2, qwen, alignment = pair
    original = tiny_llama(len(smollm2), tokenizer=smollm2, tied=True, layers=2, hidden=32, seed=4).eval()
    words = new_words(alignment, smollm2, qwen, NewWordFitConfig(max_pieces=4))[::400]
    assert len({len(w.pieces) for w in words}) >= 3  # batches mix lengths: padding must not count
    batched = later_pieces_logprob(original, smollm2, words, batch_size=7)
    bos = smollm2.bos_token_id if smollm2.bos_token_id is not None else smollm2.eos_token_id
    for word, value in zip(words, batched):
        ids = torch.tensor([[bos] + word.pieces])
        with torch.no_grad():
            logprobs = torch.log_softmax(original(input_ids=ids).logits[0].float(), -1)
        naive = sum(float(logprobs[i, ids[0, i + 1]]) for i in range(1, len(word.pieces)))
        assert float(value) == pytest.approx(naive, abs=1e-4)


def test_rows_start_at_the_first_piece_and_match_the_target_after_the_prefixes(pair):
    smollm2, qwen, alignment = pair
    original = tiny_llama(len(smollm2), tokenizer=smollm2, tied=True, layers=2, hidden=32, seed=5).eval()
    swapped = tiny_llama(len(qwen), tokenizer=qwen, tied=True, layers=2, hidden=32, seed=6).eval()
    inputs_before = swapped.get_input_embeddings().weight.detach().clone()
    config = LeadingPieceConfig(ridge=1e-6, max_pieces=3)
    report = leading_piece_output_rows(swapped, qwen, original, smollm2, alignment, config)
    words = new_words(alignment, smollm2, qwen, NewWordFitConfig(max_pieces=3))
    head = swapped.get_output_embeddings().weight.detach()
    assert report.num_words == len(words) > 1000 and report.untied
    torch.testing.assert_close(swapped.get_input_embeddings().weight.detach(), inputs_before, rtol=0, atol=0)
    rows = [w.row for w in words]
    changed = (head != inputs_before).any(-1).nonzero().flatten().tolist()
    assert sorted(changed) == sorted(rows)
    # each row is its first piece's row plus a shift in the span of the prefixes' states
    start = original.get_output_embeddings().weight.detach()[[w.pieces[0] for w in words]]
    assert abs(report.gap_after) < 0.05 * abs(report.gap_first_piece)
    assert not torch.allclose(head[rows], start)
    with pytest.raises(LeadingPieceError, match="ridge"):
        LeadingPieceConfig(ridge=0)
    with pytest.raises(LeadingPieceError, match="prefixes"):
        LeadingPieceConfig(prefixes=("The ",))
