"""Init methods that combine shared tokens in a target-side space: OMP and FOCUS."""

import numpy as np
import pytest
import torch

from tokswap.alignment import RowSource, TokenAlignment
from tokswap.init_methods import (
    INIT_METHODS,
    InitMethodError,
    OMPInit,
    get_init_method,
    orthogonal_matching_pursuit,
)

TEXTS = [f"line {i}: shared words and some new words {i * 13} appear here, again and again." for i in range(60)]


def test_omp_recovers_a_vector_in_the_span_of_k_atoms():
    torch.manual_seed(0)
    dictionary = torch.randn(300, 128)
    chosen = torch.tensor([[3, 77, 120, 299], [5, 6, 7, 8], [0, 150, 151, 152]])
    coefficients = torch.randn(3, 4)
    targets = torch.einsum("bk,bkd->bd", coefficients, dictionary[chosen])
    picked, coef = orthogonal_matching_pursuit(dictionary, targets, k=4, candidates=300, ridge=0.0)
    for row in range(3):
        got = dict(zip(picked[row].tolist(), coef[row].tolist()))
        want = dict(zip(chosen[row].tolist(), coefficients[row].tolist()))
        assert set(got) == set(want)
        assert all(abs(got[i] - want[i]) < 1e-4 for i in want)
    rebuilt = torch.einsum("bk,bkd->bd", coef, dictionary[picked])
    assert torch.allclose(rebuilt, targets, atol=1e-4)


def test_omp_with_a_prefilter_smaller_than_the_dictionary_still_finds_close_atoms():
    torch.manual_seed(1)
    dictionary = torch.randn(2000, 64)
    target = dictionary[[10]] * 2.0  # one atom, scaled
    picked, coef = orthogonal_matching_pursuit(dictionary, target, k=3, candidates=16, ridge=0.0)
    assert picked[0, 0].item() == 10 and abs(coef[0, 0].item() - 2.0) < 1e-4
    assert coef[0, 1:].abs().max() < 1e-4  # nothing left to explain


@pytest.fixture(scope="module")
def pair(train_bpe_tokenizer):
    source, target = train_bpe_tokenizer(TEXTS, 290), train_bpe_tokenizer(TEXTS, 330)
    source_vocab = source.get_vocab()
    n = len(target)
    target_to_source = np.zeros(n, dtype=np.int64)
    codes = np.full(n, RowSource.FALLBACK, dtype=np.int8)
    for token, target_id in target.get_vocab().items():
        if token in source_vocab:
            target_to_source[target_id], codes[target_id] = source_vocab[token], RowSource.IDENTICAL
    return source, target, target_to_source, codes


def _alignment(pair, space):
    source, target, target_to_source, codes = pair
    return TokenAlignment(target_to_source.copy(), row_sources=codes.copy(), target_space=space)


def test_omp_needs_a_target_space_and_focus_falls_back_to_its_variant(pair):
    source, target, *_ = pair
    weight = torch.randn(len(source), 8)
    with pytest.raises(InitMethodError, match="donor"):
        get_init_method("omp").initialize(
            weight, _alignment(pair, None), source_tokenizer=source, target_tokenizer=target
        )
    kwargs = dict(source_tokenizer=source, target_tokenizer=target)
    focus = get_init_method("focus").initialize(weight, _alignment(pair, None), **kwargs)
    variant = get_init_method("focus_fvt").initialize(weight, _alignment(pair, None), **kwargs)
    assert torch.equal(focus, variant)


def test_omp_applies_target_space_coefficients_to_source_rows(pair):
    source, target, target_to_source, codes = pair
    shared = np.flatnonzero(codes == RowSource.IDENTICAL)
    new = np.flatnonzero(codes == RowSource.FALLBACK)
    assert len(shared) > 10 and len(new) > 10
    rng = np.random.default_rng(0)
    space = rng.standard_normal((len(target), 256)).astype(np.float32)
    a, b = shared[3], shared[7]
    space[new[0]] = 0.25 * space[a] - 1.5 * space[b]  # a new token exactly in the span of two shared ones
    space[new[1]] = np.nan  # no vector: keeps the pieces mean (FVT)
    weight = torch.randn(len(source), 8, dtype=torch.float64)
    alignment = _alignment(pair, space)
    # tokensurgeon's setting (raw vectors, no ridge): the fit is exact and its coefficients carry over as they are
    out = OMPInit(ridge=0.0, normalize=False).initialize(
        weight, alignment, source_tokenizer=source, target_tokenizer=target
    )
    expected = 0.25 * weight[target_to_source[a]] - 1.5 * weight[target_to_source[b]]
    assert torch.allclose(out[new[0]], expected, atol=1e-4)
    fvt = get_init_method("fvt").initialize(weight, alignment, source_tokenizer=source, target_tokenizer=target)
    assert torch.allclose(out[new[1]], fvt[new[1]])
    assert torch.equal(out[shared], weight[target_to_source[shared]])  # shared rows untouched


def test_focus_is_a_sparsemax_combination_of_shared_rows(pair):
    source, target, target_to_source, codes = pair
    shared = np.flatnonzero(codes == RowSource.IDENTICAL)
    new = np.flatnonzero(codes == RowSource.FALLBACK)
    rng = np.random.default_rng(1)
    space = rng.standard_normal((len(target), 64)).astype(np.float32)
    space[new[0]] = space[shared[5]]  # the auxiliary vector of a shared token: FOCUS copies that token's row
    weight = torch.randn(len(source), 8, dtype=torch.float64)
    out = get_init_method("focus").initialize(
        weight, _alignment(pair, space), source_tokenizer=source, target_tokenizer=target
    )
    assert torch.allclose(out[new[0]], weight[target_to_source[shared[5]]].to(out.dtype), atol=1e-5)
    # every new row lies in the convex hull of the shared rows: its weights are a distribution
    assert torch.isfinite(out[new]).all()


def test_registry_marks_seed_dependence():
    assert INIT_METHODS["omp"].uses_seed and INIT_METHODS["tokalign"].uses_seed
    assert not INIT_METHODS["fvt"].uses_seed and not INIT_METHODS["mean"].uses_seed


def test_fvt_scaled_shrinks_only_multi_piece_rows(pair):
    from tokswap.init_methods import source_pieces

    source, target, target_to_source, codes = pair
    new = np.flatnonzero(codes == RowSource.FALLBACK)
    indptr, _ = source_pieces(source, target, new, len(source))
    lengths = np.diff(indptr)
    assert (lengths > 1).any()
    weight = torch.randn(len(source), 8, dtype=torch.float64)
    kwargs = dict(source_tokenizer=source, target_tokenizer=target)
    fvt = get_init_method("fvt").initialize(weight, _alignment(pair, None), **kwargs)
    scaled = get_init_method("fvt_scaled").initialize(weight, _alignment(pair, None), **kwargs)
    multi, single = new[lengths > 1], new[lengths == 1]
    assert torch.allclose(scaled[multi], 0.9 * fvt[multi])
    assert torch.equal(scaled[single], fvt[single])
    shared = np.flatnonzero(codes != RowSource.FALLBACK)
    assert torch.equal(scaled[shared], fvt[shared])


def test_omp_default_rows_stay_in_the_source_rows_scale(pair):
    """The default (unit vectors, ridge 0.1) keeps new rows within the norms of the rows it combines."""
    source, target, target_to_source, codes = pair
    new = np.flatnonzero(codes == RowSource.FALLBACK)
    rng = np.random.default_rng(2)
    space = rng.standard_normal((len(target), 16)).astype(np.float32)  # low-dimensional: raw OMP would overfit
    weight = torch.randn(len(source), 8, dtype=torch.float64)
    out = get_init_method("omp").initialize(
        weight, _alignment(pair, space), source_tokenizer=source, target_tokenizer=target
    )
    raw = OMPInit(ridge=0.0, normalize=False).initialize(
        weight, _alignment(pair, space), source_tokenizer=source, target_tokenizer=target
    )
    limit = weight.norm(dim=1).max()
    assert out[new].norm(dim=1).max() <= 2 * limit
    assert out[new].norm(dim=1).max() < raw[new].norm(dim=1).max()


def test_fvt_carved_gives_a_carved_piece_the_rows_of_the_source_words_it_was_carved_from():
    """SmolLM2 has " evaporation" whole, Qwen2.5 spells it " ev" + "aporation": "aporation" gets that word's row."""
    from tokswap.loading import load_tokenizer

    smollm2, qwen = load_tokenizer("smollm2"), load_tokenizer("qwen2.5")
    s, q = smollm2.get_vocab(), qwen.get_vocab()
    target_to_source = np.zeros(len(qwen), dtype=np.int64)
    codes = np.full(len(qwen), RowSource.FALLBACK, dtype=np.int8)
    for token, target_id in q.items():
        if token in s:
            target_to_source[target_id], codes[target_id] = s[token], RowSource.IDENTICAL
    alignment = TokenAlignment(target_to_source, row_sources=codes)
    weight = torch.randn(len(smollm2), 8, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    kwargs = dict(source_tokenizer=smollm2, target_tokenizer=qwen)
    carved = get_init_method("fvt_carved").initialize(weight, alignment, **kwargs)
    scaled = get_init_method("fvt_scaled").initialize(weight, alignment, **kwargs)
    assert "Ġevaporation" in s and "Ġevaporation" not in q
    assert torch.allclose(carved[q["aporation"]], weight[s["Ġevaporation"]], atol=1e-6)
    assert torch.allclose(carved[q["Ġmetam"]], weight[[s["Ġmetamorph"], s["Ġmetamorphosis"]]].mean(0), atol=1e-6)
    # shared rows, and new tokens that no source-only word is spelled with, keep fvt_scaled's rows
    assert torch.equal(carved[q["Ġev"]], weight[s["Ġev"]])
    assert torch.equal(carved[q["Ġwhipping"]], scaled[q["Ġwhipping"]])
    changed = (carved != scaled).any(1).nonzero().flatten().tolist()
    assert 500 < len(changed) < 2000
    tokens = qwen.convert_ids_to_tokens(changed)
    assert not any(token in s for token in tokens)


def test_carved_words_lists_the_source_words_the_target_spells_in_pieces():
    """SmolLM2 has " evaporation", Qwen2.5 spells it in two pieces; words both have, and non-words, are not."""
    from tokswap.carved_rows import carved_words
    from tokswap.loading import load_tokenizer

    smollm2, qwen = load_tokenizer("smollm2"), load_tokenizer("qwen2.5")
    s, q = smollm2.get_vocab(), qwen.get_vocab()
    words = carved_words(smollm2, qwen)
    listed = set(words.tolist())
    assert s["Ġevaporation"] in listed and s["Ġmetamorphosis"] in listed
    assert s["Ġthe"] not in listed and s["Ġev"] not in listed  # Qwen2.5 has them: nothing was carved
    assert (np.diff(words) > 0).all()  # ascending: BPE's merge order
    tokens = smollm2.convert_ids_to_tokens(words.tolist())
    assert not any(token in q for token in tokens)
    assert all(
        len(qwen(smollm2.convert_tokens_to_string([t]), add_special_tokens=False).input_ids) >= 2 for t in tokens[:200]
    )
    assert not any(t.strip("Ġ").isdigit() or "Ċ" in t for t in tokens)  # letters only
