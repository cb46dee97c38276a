"""Co-occurrence counting against counts worked out by hand (GloVe's `cooccur`: window 15, weight 1/d)."""

import numpy as np
import pytest

from tokswap.align.cooccurrence import CooccurrenceMatrix, count_cooccurrences


def dense(cooc: CooccurrenceMatrix) -> np.ndarray:
    return cooc.matrix.toarray().astype(np.float64)


def test_window_15_weights_each_pair_by_one_over_distance():
    # a b c a  (a=0, b=1, c=2): pairs (a,b) d=1, (a,c) d=2, (a,a) d=3, (b,c) d=1, (b,a) d=2, (c,a) d=1
    cooc = count_cooccurrences([[0, 1, 2, 0]], vocab_size=3, window=15, min_count=1, progress=False)
    expected = np.array(
        [
            [2 / 3, 1 + 1 / 2, 1 / 2 + 1],  # a-a counted from both sides; a-b: d=1 and d=2; a-c: d=2 and d=1
            [1 + 1 / 2, 0, 1],
            [1 / 2 + 1, 1, 0],
        ]
    )
    np.testing.assert_allclose(dense(cooc), expected, rtol=1e-6)
    np.testing.assert_array_equal(cooc.token_counts, [2, 1, 1])
    assert cooc.window == 15 and cooc.num_tokens == 4


def test_counts_are_symmetric_by_default_and_one_sided_when_asked():
    ids = [[3, 1, 4, 1, 5, 2, 6, 5, 3, 5]]
    both = dense(count_cooccurrences(ids, vocab_size=7, window=4, min_count=1, progress=False))
    np.testing.assert_array_equal(both, both.T)
    left = dense(count_cooccurrences(ids, vocab_size=7, window=4, min_count=1, symmetric=False, progress=False))
    # one-sided counts are X[left, right] only: 6 never comes before 4, 4 comes before 6 at d=4
    assert left[3, 1] == pytest.approx(1 + 1 / 3)  # 3 -> 1 at d=1 and d=3
    assert left[6, 4] == 0 and left[4, 6] == pytest.approx(1 / 4)
    # the symmetric matrix is the one-sided one plus its transpose
    np.testing.assert_allclose(both, left + left.T, rtol=1e-6)


def test_the_window_ends_at_distance_15():
    ids = np.zeros(17, dtype=np.int64)
    ids[0], ids[15], ids[16] = 1, 2, 3  # 1-2 at distance 15 (inside), 1-3 at distance 16 (outside)
    counts = dense(count_cooccurrences([ids], vocab_size=4, window=15, min_count=1, progress=False))
    assert counts[1, 2] == pytest.approx(1 / 15) and counts[2, 1] == pytest.approx(1 / 15)
    assert counts[1, 3] == 0 and counts[3, 1] == 0
    assert counts[2, 3] == pytest.approx(1.0)


def test_rare_tokens_lose_their_pairs_but_keep_their_count():
    # token 2 appears once: with min_count=2 every pair touching it goes, the others stay as counted
    cooc = count_cooccurrences([[0, 1, 2, 0, 1]], vocab_size=3, window=2, min_count=2, progress=False)
    counts = dense(cooc)
    assert counts[2].sum() == 0 and counts[:, 2].sum() == 0
    # 0-1: d=1 (pos 0,1), d=1 (pos 3,4), d=2 (pos 1,3) -> 2.5 each way
    assert counts[0, 1] == pytest.approx(2.5) and counts[1, 0] == pytest.approx(2.5)
    np.testing.assert_array_equal(cooc.token_counts, [2, 2, 1])
    np.testing.assert_array_equal(cooc.kept_tokens, [True, True, False])
