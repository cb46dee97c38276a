"""BLEU-1 and the source -> target map of `tokswap.align.quality`, on cases worked out by hand."""

import numpy as np
import pytest

from tokswap.align.quality import BASELINES, baseline_alignment, bleu1, semantic_similarity, source_to_target_map
from tokswap.alignment import RowSource, TokenAlignment


def test_bleu1_of_an_identical_pair_is_one():
    texts = [[5, 3, 9, 3], [1, 2]]
    assert bleu1(np.arange(10), texts, texts) == pytest.approx(1.0)


def test_bleu1_of_a_disjoint_pair_is_zero():
    mapping = np.arange(10) + 10  # every source id lands on a target id the reference never uses
    assert bleu1(mapping, [[1, 2, 3], [4]], [[1, 2, 3], [4]]) == 0.0


def test_bleu1_is_corpus_level_clipped_precision_times_brevity():
    # candidates: [1, 1, 2] vs [1, 2, 2] -> 2 clipped matches; [3] vs [3, 4, 5] -> 1 match
    # precision 3/4, candidate length 4 < reference length 6: BP = exp(1 - 6/4)
    value = bleu1(np.arange(6), [[1, 1, 2], [3]], [[1, 2, 2], [3, 4, 5]])
    assert value == pytest.approx(0.75 * np.exp(1 - 6 / 4))


def test_bleu1_maps_source_ids_through_the_alignment():
    # source 0 -> target 2 and source 1 -> target 0: the mapped text [2, 0] equals the reference
    alignment = TokenAlignment(
        target_to_source=np.array([1, 2, 0]),
        scores=np.ones(3, dtype=np.float32),
        row_sources=np.full(3, RowSource.IDENTICAL, dtype=np.int8),
    )
    np.testing.assert_array_equal(source_to_target_map(alignment, 3), [2, 0, 1])
    assert bleu1(alignment, [[0, 1]], [[2, 0]]) == pytest.approx(1.0)
    assert bleu1(alignment, [[0, 1]], [[0, 2]]) == pytest.approx(1.0)  # unigram: the order does not count
    assert bleu1(alignment, [[0, 1]], [[1, 1]]) == 0.0


def test_bleu1_and_similarity_refuse_unpaired_inputs():
    with pytest.raises(ValueError, match="same number"):
        bleu1(np.arange(3), [[1], [2]], [[1]])
    with pytest.raises(ValueError, match="one decoded text per text"):
        semantic_similarity(["a", "b"], ["a"])
    assert np.isnan(semantic_similarity([], []))  # nothing to compare: no encoder is loaded


def _word_level_tokenizer(words):
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import WhitespaceSplit
    from transformers import PreTrainedTokenizerFast

    vocab = {"[UNK]": 0, **{w: i + 1 for i, w in enumerate(words)}}
    backend = Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]")


def test_identical_baselines_pair_shared_words_and_the_random_one_does_not_try():
    source = _word_level_tokenizer(["alpha", "beta", "gamma", "delta"])
    target = _word_level_tokenizer(["gamma", "omega", "alpha"])  # gamma=1, omega=2, alpha=3
    for kind in ("string_identical_random", "byte_identical_random"):
        baseline = baseline_alignment(kind, source, target, seed=0)
        assert baseline.target_to_source[1] == 3 and baseline.target_to_source[3] == 1  # gamma, alpha
        assert baseline.row_sources[1] == RowSource.IDENTICAL and baseline.row_sources[2] == RowSource.IMPORTED
    random = baseline_alignment("random_permutation", source, target, seed=0)
    assert (random.row_sources == RowSource.IMPORTED).all() and len(set(random.target_to_source.tolist())) == 4
    assert set(BASELINES) == {"random_permutation", "string_identical_random", "byte_identical_random"}
    with pytest.raises(ValueError, match="Unknown baseline"):
        baseline_alignment("nearest", source, target)
