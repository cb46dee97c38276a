"""Chunked nearest-neighbour search, CSLS, Procrustes and relative representations."""

import numpy as np
import pytest
import torch

from tokswap.align.matching import (
    nearest_neighbours,
    normalize_rows,
    precision_at_k,
    procrustes_map,
    relative_representations,
)


def _dense_reference(queries, keys, k, csls_k=None):
    q, s = normalize_rows(queries), normalize_rows(keys)
    cos = q @ s.T
    if csls_k is None:
        scores = cos
    else:
        r_q = cos.topk(csls_k, dim=1).values.mean(1)
        r_s = cos.topk(csls_k, dim=0).values.mean(0)
        scores = 2 * cos - r_q[:, None] - r_s[None, :]
    top = scores.topk(k, dim=1)
    return top.indices, top.values, cos


@pytest.mark.parametrize("hubness", [None, "csls"])
@pytest.mark.parametrize("chunk_size", [7, 64, 1000])
def test_chunked_search_equals_dense_reference(hubness, chunk_size):
    generator = torch.Generator().manual_seed(0)
    queries, keys = torch.randn(203, 16, generator=generator), torch.randn(150, 16, generator=generator)
    result = nearest_neighbours(queries, keys, k=5, hubness=hubness, csls_k=10, chunk_size=chunk_size, candidate_k=150)
    indices, values, cos = _dense_reference(queries, keys, 5, 10 if hubness else None)
    assert torch.equal(result.indices, indices)
    torch.testing.assert_close(result.scores, values, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(result.cosine, cos.gather(1, indices), atol=1e-5, rtol=1e-5)
    assert result.max_in_degree_uncorrected == int(torch.bincount(cos.argmax(1)).max())


def test_candidate_rescoring_and_projection_keep_the_top1():
    generator = torch.Generator().manual_seed(1)
    keys = torch.randn(400, 64, generator=generator)
    truth = torch.randint(0, 400, (300,), generator=generator)
    queries = keys[truth] + 0.3 * torch.randn(300, 64, generator=generator)
    for kwargs in ({"candidate_k": 16}, {"candidate_k": 32, "search_dim": 24}):
        result = nearest_neighbours(queries, keys, k=1, chunk_size=50, **kwargs)
        assert (result.indices[:, 0] == truth).float().mean() > 0.97, kwargs


def test_csls_lowers_hubness():
    generator = torch.Generator().manual_seed(2)
    keys = torch.randn(300, 32, generator=generator)
    hub = keys.mean(0, keepdim=True) * 0 + torch.randn(1, 32, generator=generator)
    keys[0] = hub * 3  # one key near the centre of the queries
    queries = torch.randn(500, 32, generator=generator) + 0.8 * hub
    plain = nearest_neighbours(queries, keys, k=1, hubness=None)
    corrected = nearest_neighbours(queries, keys, k=1, hubness="csls")
    assert corrected.max_in_degree < plain.max_in_degree
    assert corrected.max_in_degree_uncorrected == plain.max_in_degree


def test_procrustes_recovers_a_rotation():
    generator = torch.Generator().manual_seed(3)
    source = torch.randn(500, 20, generator=generator)
    rotation, _ = torch.linalg.qr(torch.randn(20, 20, generator=generator))
    target = source @ rotation.T + 0.01 * torch.randn(500, 20, generator=generator)
    mapped = target @ procrustes_map(target, source)
    assert (mapped - source).abs().max() < 0.1


def test_relative_representations_ignore_rotations():
    generator = torch.Generator().manual_seed(4)
    vectors = torch.randn(100, 12, generator=generator)
    rotation, _ = torch.linalg.qr(torch.randn(12, 12, generator=generator))
    anchors = np.arange(0, 100, 3)
    torch.testing.assert_close(
        relative_representations(vectors, anchors),
        relative_representations(vectors @ rotation, anchors),
        atol=1e-5,
        rtol=1e-5,
    )


def test_precision_at_k():
    predicted = torch.tensor([[1, 2, 3], [4, 5, 6], [7, 8, 9]])
    assert precision_at_k(predicted, [1, 6, 0], ks=(1, 3)) == {
        "precision@1": pytest.approx(1 / 3),
        "precision@3": pytest.approx(2 / 3),
    }
