"""tokswap.carved_windows: training texts picked greedily for the carved words they use."""

import itertools

import pytest

from tokswap.carved_windows import carved_word_sets, greedy_cover, proportional_counts, select_carved_windows


@pytest.fixture(scope="module")
def pair():
    from tokswap.loading import load_tokenizer

    return load_tokenizer("smollm2"), load_tokenizer("qwen2.5")


def _union(sets, picked):
    return set().union(*(sets[k] for k in picked)) if picked else set()


def test_greedy_cover_takes_the_largest_gain_each_time_lowest_index_on_a_tie():
    sets = [frozenset(s) for s in ({1, 2}, {1, 2, 3, 4}, {5, 6}, {3, 4, 5}, {7}, {6, 7})]
    # {1,2,3,4} first (4 new); then {5,6} and {6,7} add 2 each, {3,4,5} only 1: index 2 wins the tie; then {7}
    # and {6,7} add 1 each: index 4
    assert greedy_cover(sets, 3) == [1, 2, 4]
    assert _union(sets, greedy_cover(sets, 3)) == set(range(1, 8))


def test_greedy_cover_matches_a_naive_greedy_on_random_sets():
    import random

    rng = random.Random(0)
    for _ in range(50):
        sets = [frozenset(rng.sample(range(40), rng.randint(0, 8))) for _ in range(30)]
        covered, naive = set(), []
        for _ in range(10):
            gains = [(len(s - covered), -k) for k, s in enumerate(sets) if k not in naive]
            best_gain, minus_k = max(gains)
            if best_gain == 0:
                break
            naive.append(-minus_k)
            covered |= sets[-minus_k]
        picked = greedy_cover(sets, 10)
        assert picked[: len(naive)] == naive
        assert len(picked) == 10 and len(set(picked)) == 10


def test_greedy_cover_fills_up_in_index_order_once_nothing_is_new():
    sets = [frozenset({1}), frozenset({1}), frozenset(), frozenset({2})]
    assert greedy_cover(sets, 4) == [0, 3, 1, 2]
    assert greedy_cover(sets, 0) == []
    with pytest.raises(ValueError, match="count"):
        greedy_cover(sets, -1)


def test_greedy_cover_is_never_beaten_by_the_best_single_pick_and_reaches_the_optimum_on_a_small_case():
    sets = [frozenset(s) for s in ({1, 2, 3}, {3, 4}, {4, 5, 6}, {1, 6}, {2, 5})]
    picked = greedy_cover(sets, 2)
    best = max(len(sets[a] | sets[b]) for a, b in itertools.combinations(range(len(sets)), 2))
    assert len(_union(sets, picked)) == best == 6


def test_carved_word_sets_name_the_words_qwen_spells_in_pieces(pair):
    smollm2, qwen = pair
    texts = ["Water is lost by evaporation and photosynthesis.", "The cat sat on the mat.", ""]
    sets = carved_word_sets(texts, smollm2, qwen)
    words = [sorted(smollm2.convert_ids_to_tokens(sorted(s))) for s in sets]
    # SmolLM2 has both words whole; Qwen2.5 spells " evaporation" as " ev" + "aporation"
    assert "Ġevaporation" in words[0]
    assert len(qwen(" evaporation", add_special_tokens=False)["input_ids"]) >= 2
    assert words[1] == [] and words[2] == []


def test_select_carved_windows_prefers_the_text_with_more_new_words(pair):
    smollm2, qwen = pair
    texts = [
        "The cat sat on the mat.",
        "Evaporation: water turns to vapour by evaporation.",
        "We study photosynthesis, evaporation and magnetism at school.",
    ]
    picked = select_carved_windows(texts, smollm2, qwen, 2)
    assert picked[0] == 2
    assert select_carved_windows(texts, smollm2, qwen, 10) == picked + [k for k in range(3) if k not in picked]


def test_proportional_counts_split_the_total_in_proportion_and_sum_to_it():
    counts = proportional_counts({"en": 635, "code": 564, "math": 969}, 800)
    assert counts == {"en": 234, "code": 208, "math": 358}  # 234.3, 208.1, 357.6: the largest remainder rounds up
    assert sum(counts.values()) == 800
    assert proportional_counts({"a": 1, "b": 1, "c": 1}, 2) == {"a": 1, "b": 1, "c": 0}  # ties to the earlier
    assert proportional_counts({"a": 3, "b": 1}, 0) == {"a": 0, "b": 0}
    with pytest.raises(ValueError, match="total"):
        proportional_counts({"a": 0}, 3)


def test_select_carved_windows_keeps_the_groups_mix(pair):
    source, target = pair
    carved = " evaporation"  # SmolLM2 has it whole, Qwen2.5 in pieces (the test above)
    texts = ["The cat sat.", f"Water and{carved}.", "Der Hund.", f"Die{carved} und", "Ein Tag.", "Noch ein Tag."]
    groups = ["en", "en", "de", "de", "de", "de"]
    picked = select_carved_windows(texts, source, target, 3, groups=groups)
    assert [groups[k] for k in picked] == ["en", "de", "de"]  # 2 of 6 texts are English: 1 of 3 picks
    assert picked[:2] == [1, 3]  # within each group, the text with the carved word first
    with pytest.raises(ValueError, match="one per text"):
        select_carved_windows(texts, source, target, 3, groups=groups[:-1])
