"""Co-occurrence counting (against a naive reference) and GloVe training."""

from collections import defaultdict

import numpy as np
import pytest

from tokswap.align.cooccurrence import CooccurrenceCounter, CooccurrenceError, CooccurrenceMatrix, count_cooccurrences
from tokswap.align.glove import GloveConfig, GloveError, GloveVectors, load_stanford_vectors, train_glove
from tokswap.errors import TokswapError


def naive_counts(documents, window, symmetric=True, distance_weighting=True, keep=None):
    """The Stanford `cooccur` loop, one token at a time."""
    counts = defaultdict(float)
    for doc in documents:
        doc = [t for t in doc if keep is None or keep[t]]
        for position, center in enumerate(doc):
            for distance in range(1, window + 1):
                if position - distance < 0:
                    break
                context = doc[position - distance]
                weight = 1.0 / distance if distance_weighting else 1.0
                counts[(context, center)] += weight
                if symmetric:
                    counts[(center, context)] += weight
    return counts


def random_documents(seed, count=40, vocab=30, max_len=60):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, vocab, size=rng.integers(0, max_len)) for _ in range(count)]


def as_dict(cooc: CooccurrenceMatrix):
    coo = cooc.matrix.tocoo()
    return {(int(i), int(j)): float(v) for i, j, v in zip(coo.row, coo.col, coo.data)}


@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("distance_weighting", [True, False])
def test_counts_match_naive_reference(symmetric, distance_weighting):
    documents = random_documents(0)
    counter = CooccurrenceCounter(30, window=5, symmetric=symmetric, distance_weighting=distance_weighting)
    counter.update_batch(documents)
    cooc = counter.finalize(min_count=0)
    expected = naive_counts(documents, 5, symmetric, distance_weighting)
    got = as_dict(cooc)
    assert got.keys() == expected.keys()
    for key, value in expected.items():
        assert got[key] == pytest.approx(value, rel=1e-6)
    assert cooc.num_tokens == sum(len(d) for d in documents)
    np.testing.assert_array_equal(cooc.token_counts, np.bincount(np.concatenate(documents), minlength=30))
    if symmetric:
        assert abs(cooc.matrix - cooc.matrix.T).max() == 0


def test_document_boundaries_are_respected():
    counter = CooccurrenceCounter(4, window=15)
    counter.update([0, 1])
    counter.update([2, 3])
    cooc = counter.finalize(min_count=0)
    assert set(as_dict(cooc)) == {(0, 1), (1, 0), (2, 3), (3, 2)}
    assert as_dict(cooc)[(0, 1)] == 1.0


def test_min_count_drops_pairs_of_rare_tokens():
    documents = [np.array([0, 1, 0, 1, 0, 1, 2, 0, 1])]
    cooc = count_cooccurrences(documents, vocab_size=3, window=3, min_count=2, progress=False)
    assert cooc.kept_tokens.tolist() == [True, True, False]
    assert all(2 not in pair for pair in as_dict(cooc))
    expected = {k: v for k, v in naive_counts(documents, 3).items() if 2 not in k}
    assert as_dict(cooc) == pytest.approx(expected)


def test_skip_rare_in_window_reproduces_stanford_cooccur():
    documents = random_documents(1, vocab=40)
    counts = np.bincount(np.concatenate(documents), minlength=40)
    keep = counts >= 12
    cooc = count_cooccurrences(documents, 40, window=4, min_count=12, skip_rare_in_window=True, progress=False)
    assert as_dict(cooc) == pytest.approx(dict(naive_counts(documents, 4, keep=keep)))


def test_chunked_equals_unchunked():
    documents = random_documents(2, count=80, vocab=50)
    whole = CooccurrenceCounter(50, window=6, chunk_tokens=10**9)
    chunked = CooccurrenceCounter(50, window=6, chunk_tokens=37)
    whole.update_batch(documents)
    chunked.update_batch(documents)
    a, b = whole.finalize(min_count=3), chunked.finalize(min_count=3)
    assert (a.matrix != b.matrix).nnz == 0 or abs(a.matrix - b.matrix).max() < 1e-5
    np.testing.assert_array_equal(a.token_counts, b.token_counts)


def test_save_load_round_trip(tmp_path):
    cooc = count_cooccurrences(random_documents(3), 30, window=5, min_count=2, progress=False)
    path = cooc.save(tmp_path / "cooc.npz")
    loaded = CooccurrenceMatrix.load(path)
    assert abs(loaded.matrix - cooc.matrix).max() == 0
    np.testing.assert_array_equal(loaded.token_counts, cooc.token_counts)
    assert (loaded.min_count, loaded.window, loaded.symmetric) == (2, 5, True)
    assert not list(tmp_path.glob(".*tmp*"))


def test_bad_input_errors(tmp_path):
    counter = CooccurrenceCounter(5)
    with pytest.raises(CooccurrenceError, match="outside"):
        counter.update([0, 7])
    with pytest.raises(TokswapError, match="empty"):
        count_cooccurrences([[], []], 5, progress=False)
    with pytest.raises(CooccurrenceError, match="No co-occurrence file"):
        CooccurrenceMatrix.load(tmp_path / "missing.npz")
    finalized = CooccurrenceCounter(5)
    finalized.update([0, 1, 2])
    finalized.finalize(min_count=0)
    with pytest.raises(CooccurrenceError, match="already called"):
        finalized.finalize(min_count=0)
    with pytest.raises(CooccurrenceError, match="finalized"):
        finalized.update([1, 2])
    with pytest.raises(CooccurrenceError, match="two passes"):
        count_cooccurrences(iter([[1, 2]]), 5, skip_rare_in_window=True, progress=False)


# --------------------------------------------------------------------------- GloVe


def planted_corpus(seed=0, groups=2, per_group=20, docs=400, length=40):
    """Documents drawn from one group of tokens each: tokens co-occur only within their group."""
    rng = np.random.default_rng(seed)
    documents = []
    for _ in range(docs):
        group = rng.integers(groups)
        documents.append(rng.integers(0, per_group, size=length) + group * per_group)
    return documents


@pytest.fixture(scope="module")
def planted_cooc():
    return count_cooccurrences(planted_corpus(), vocab_size=41, window=5, min_count=5, progress=False)


def small_config(**overrides):
    settings = dict(dim=16, iterations=8, batch_size=256, seed=3, num_threads=1, device="cpu")
    settings.update(overrides)
    return GloveConfig(**settings)


def test_glove_is_deterministic_under_seed(planted_cooc):
    a = train_glove(planted_cooc, small_config(), progress=False)
    b = train_glove(planted_cooc, small_config(), progress=False)
    c = train_glove(planted_cooc, small_config(seed=4), progress=False)
    np.testing.assert_array_equal(a.vectors, b.vectors)
    assert a.costs == b.costs
    assert not np.array_equal(a.vectors, c.vectors)


def test_glove_two_cpu_threads_give_the_same_vectors(planted_cooc):
    one = train_glove(planted_cooc, small_config(iterations=3), progress=False)
    two = train_glove(planted_cooc, small_config(iterations=3, num_threads=2), progress=False)
    np.testing.assert_array_equal(one.vectors, two.vectors)


def test_glove_cost_decreases_and_groups_separate(planted_cooc):
    result = train_glove(planted_cooc, small_config(iterations=15), progress=False)
    assert result.costs[-1] < 0.5 * result.costs[0]
    assert all(later <= earlier * 1.05 for earlier, later in zip(result.costs, result.costs[1:]))
    # Token 40 never occurs: no vector.
    assert result.trained[:40].all() and not result.trained[40]
    assert not result.vectors[40].any()
    unit = result.vectors[:40] / np.linalg.norm(result.vectors[:40], axis=1, keepdims=True)
    similarity = unit @ unit.T
    group = np.arange(40) // 20
    same = group[:, None] == group[None, :]
    off_diagonal = ~np.eye(40, dtype=bool)
    assert similarity[same & off_diagonal].mean() > similarity[~same].mean() + 0.2
    # Every token's nearest neighbour is in its own group.
    np.fill_diagonal(similarity, -np.inf)
    assert (group[similarity.argmax(1)] == group).all()


def test_glove_matches_per_pair_objective_on_tiny_problem():
    """The reported cost is the C tool's: mean of 0.5 f(X) (w.c + b + b' - log X)^2 at the start."""
    documents = [np.array([0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2])]
    cooc = count_cooccurrences(documents, 3, window=2, min_count=1, progress=False)
    result = train_glove(
        cooc, GloveConfig(dim=4, iterations=1, batch_size=4, num_threads=1, device="cpu"), progress=False
    )
    x = cooc.matrix.tocoo().data
    weights = np.minimum(1.0, (x / 10.0) ** 0.75)
    # Parameters start within 0.5/dim of zero, so the first cost is close to 0.5 f (log X)^2.
    assert result.costs[0] == pytest.approx(np.mean(0.5 * weights * np.log(x) ** 2), rel=0.3)


def test_glove_vectors_save_load(tmp_path, planted_cooc):
    result = train_glove(planted_cooc, small_config(iterations=2), progress=False)
    path = result.save(tmp_path / "glove.npz")
    loaded = GloveVectors.load(path)
    np.testing.assert_array_equal(loaded.vectors, result.vectors)
    np.testing.assert_array_equal(loaded.trained, result.trained)
    assert loaded.config == result.config and loaded.costs == result.costs


def test_load_stanford_vectors(tmp_path):
    path = tmp_path / "vectors.txt"
    path.write_text("7 0.5 -1.0\n2 1.5 2.0\n<unk> 0 0\n")
    loaded = load_stanford_vectors(path, vocab_size=10, dim=2)
    assert loaded.trained.tolist() == [i in (2, 7) for i in range(10)]
    np.testing.assert_allclose(loaded.vectors[7], [0.5, -1.0])
    bad = tmp_path / "words.txt"
    bad.write_text("hello 0.1 0.2\n")
    with pytest.raises(GloveError, match="integer token id"):
        load_stanford_vectors(bad, vocab_size=10)


def test_glove_errors():
    empty = count_cooccurrences([np.array([0, 1])], 3, min_count=5, progress=False)
    with pytest.raises(GloveError, match="empty"):
        train_glove(empty, small_config(), progress=False)
    with pytest.raises(GloveError, match="dim"):
        GloveConfig(dim=0)


@pytest.mark.parametrize("n, batch_size", [(1, 4), (2, 1), (3, 2), (7, 3), (64, 16), (1000, 64), (4097, 512)])
def test_pair_permutation_visits_every_pair_once(n, batch_size):
    import torch

    from tokswap.align.glove import _PairPermutation

    permutation = _PairPermutation(n, batch_size, torch.Generator().manual_seed(n), "cpu")
    chunks = [permutation.chunk(index) for index in range(permutation.num_chunks)]
    assert sorted(torch.cat(chunks).tolist()) == list(range(n))
    # Chunks are computed independently (one per batch, on another thread): the same index, the same pairs.
    assert torch.equal(permutation.chunk(permutation.num_chunks - 1), chunks[-1])
    # About `batch_size` pairs each.
    assert max(chunk.numel() for chunk in chunks) <= 2 * batch_size + 8


def test_pair_permutations_differ_between_keys_and_look_shuffled():
    import torch

    from tokswap.align.glove import _PairPermutation

    generator = torch.Generator().manual_seed(0)
    n = 100_000
    first, second = (
        torch.cat([p.chunk(i) for i in range(p.num_chunks)])
        for p in (_PairPermutation(n, 1000, generator, "cpu") for _ in range(2))
    )
    assert not torch.equal(first, second)
    # A batch is spread over the whole range, not a contiguous block.
    head = first[:1000].double()
    assert head.min() < 0.05 * n and head.max() > 0.95 * n
    assert abs(head.mean().item() - n / 2) < 0.05 * n
    # Correlation between position in the order and pair index is near zero.
    correlation = np.corrcoef(np.arange(n), first.numpy())[0, 1]
    assert abs(correlation) < 0.02


def test_pair_source_reads_the_csr_pairs_in_compact_ids():
    import scipy.sparse as sp
    import torch

    from tokswap.align.glove import _PairSource

    matrix = sp.random(60, 60, density=0.1, random_state=1, format="csr", dtype=np.float32)
    matrix.data += 0.1
    matrix[5] = 0  # an empty row between full ones
    matrix.eliminate_zeros()
    compact = np.full(60, -1, dtype=np.int32)
    compact[np.diff(matrix.indptr) > 0] = np.arange(int((np.diff(matrix.indptr) > 0).sum()), dtype=np.int32)
    pair_ids = torch.from_numpy(np.random.default_rng(0).permutation(matrix.nnz))
    rows, cols, counts = _PairSource(matrix, compact, torch.device("cpu"), torch.float32).batch(pair_ids)
    order = np.sort(pair_ids.numpy())  # a batch comes back in the CSR's order, grouped by word
    assert np.array_equal(rows.numpy(), np.repeat(compact, np.diff(matrix.indptr))[order])
    assert np.array_equal(cols.numpy(), compact[matrix.indices][order])
    assert np.array_equal(counts.numpy(), matrix.data[order])
    assert (np.diff(rows.numpy()) >= 0).all()


def test_chunked_updates_equal_one_block(planted_cooc, monkeypatch):
    import tokswap.align.glove as glove

    whole = train_glove(planted_cooc, small_config(iterations=2), progress=False)
    monkeypatch.setattr(glove, "_UPDATE_CHUNK_ROWS", 3)
    chunked = train_glove(planted_cooc, small_config(iterations=2), progress=False)
    np.testing.assert_array_equal(whole.vectors, chunked.vectors)
