"""Training texts picked for the words a swap takes apart: the fewest texts that use the most of them.

A swap drops the source rows of whole words the target spells in pieces (`tokswap.carved_rows.carved_words`:
SmolLM2's " evaporation" becomes Qwen2.5's " ev" + "aporation"), and the swapped model then learns each such word
again only from text that uses it. A short training budget drawn at random from a corpus reads few of them: 800
random windows of SmolLM2's leaderboard corpus hold about 400 of its 9,900 carved words. Picking the windows
greedily, each the one that adds the most words not yet covered, reads several times as many from the same corpus.
Nothing here looks at any evaluation set: the words are the vocabulary's, the texts the user's. Text of several
domains or languages can keep its mix: with `groups`, the picks are made within each group, in proportion to its size.
"""

from __future__ import annotations

import heapq
from typing import Dict, Hashable, List, Mapping, Optional, Sequence

from tokswap.carved_rows import carved_words


def carved_word_sets(texts: Sequence[str], source_tokenizer, target_tokenizer) -> List[frozenset]:
    """The carved words (source ids) each text uses, as the source tokenizer writes it."""
    carved = set(carved_words(source_tokenizer, target_tokenizer).tolist())
    if not texts:
        return []
    encoded = source_tokenizer(list(texts), add_special_tokens=False)["input_ids"]
    return [frozenset(i for i in ids if i in carved) for ids in encoded]


def greedy_cover(sets: Sequence[frozenset], count: int) -> List[int]:
    """Indices of `count` sets picked greedily for the largest union: each pick the set adding the most elements
    not yet covered (the first such index on a tie), then any rest in index order once nothing new is left.

    Lazy evaluation: a set's gain only shrinks as the union grows, so a stale gain on top of the heap is an upper
    bound, recomputed before it is trusted.
    """
    if count < 0:
        raise ValueError(f"count must be >= 0 (got {count})")
    heap = [(-len(s), k) for k, s in enumerate(sets)]
    heapq.heapify(heap)
    covered, picked = set(), []
    while heap and len(picked) < count:
        stale, k = heapq.heappop(heap)
        gain = len(sets[k] - covered)
        if heap and (-gain, k) > heap[0]:  # another set may add more now (or as much, at a lower index)
            heapq.heappush(heap, (-gain, k))
            continue
        if gain == 0:  # the best bound left is 0: nothing adds a word any more
            break
        picked.append(k)
        covered |= sets[k]
    if len(picked) < count:
        chosen = set(picked)
        picked += [k for k in range(len(sets)) if k not in chosen][: count - len(picked)]
    return picked


def proportional_counts(sizes: Mapping[Hashable, int], total: int) -> Dict[Hashable, int]:
    """`total` split over the keys of `sizes` in proportion to them, summing to `total` exactly: each key gets the
    whole part of its share, and the largest remainders one more (the earlier key on a tie)."""
    whole = sum(sizes.values())
    if total < 0 or whole <= 0:
        raise ValueError(f"need total >= 0 and sizes summing above 0 (got total {total}, sizes {dict(sizes)})")
    exact = {key: total * size / whole for key, size in sizes.items()}
    counts = {key: int(x) for key, x in exact.items()}
    position = {key: k for k, key in enumerate(exact)}
    by_remainder = sorted(exact, key=lambda key: (counts[key] - exact[key], position[key]))
    for key in by_remainder[: total - sum(counts.values())]:
        counts[key] += 1
    return counts


def select_carved_windows(
    texts: Sequence[str], source_tokenizer, target_tokenizer, count: int, groups: Optional[Sequence[Hashable]] = None
) -> List[int]:
    """Indices of `count` of `texts` that together use the most distinct carved words, in the order picked.

    Args:
        texts: candidate training texts (windows of a corpus).
        source_tokenizer: the model's original tokenizer.
        target_tokenizer: the tokenizer it is given.
        count: how many to pick (all of them when there are fewer).
        groups: optional label of each text (its domain or language). When given, each group gets its share of
            `count` in proportion to how many texts it has (`proportional_counts`), picked within the group, so
            the picks keep the texts' mix; the indices come group by group, in the order groups first appear.
    """
    count = min(count, len(texts))
    sets = carved_word_sets(texts, source_tokenizer, target_tokenizer)
    if groups is None:
        return greedy_cover(sets, count)
    if len(groups) != len(texts):
        raise ValueError(f"groups has {len(groups)} labels for {len(texts)} texts: give one per text")
    members: Dict[Hashable, List[int]] = {}
    for k, group in enumerate(groups):
        members.setdefault(group, []).append(k)
    wanted = proportional_counts({group: len(ks) for group, ks in members.items()}, count)
    picked = []
    for group, ks in members.items():
        picked += [ks[j] for j in greedy_cover([sets[k] for k in ks], wanted[group])]
    return picked
