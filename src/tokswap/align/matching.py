"""Cross-space matching: for each target token, the most similar source token.

Two GloVe spaces trained separately are not comparable coordinate by coordinate; they are made
comparable through the tokens both vocabularies share (identical pairs):

- `relative_representations` (the TokAlign paper): describe each token by its cosine similarity to a
  set of anchor tokens that exist on both sides, so the coordinates mean the same thing.
- `procrustes_map`: the orthogonal rotation that best maps the target space onto the source space
  on the shared tokens (as in cross-lingual word-embedding alignment). It uses every shared token,
  not just a few hundred anchors, and keeps the full geometry of both spaces.

The nearest-neighbour search runs in chunks of query rows (no `V_t x V_s` matrix is ever built)
and can correct for hubness with CSLS (Conneau et al., 2018): a source token that is close to many
target tokens gets its similarities lowered by its mean similarity to its `k` nearest targets.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch

from tokswap.utils import get_logger

logger = get_logger(__name__)

__all__ = [
    "NeighbourResult",
    "nearest_neighbours",
    "normalize_rows",
    "procrustes_map",
    "relative_representations",
    "precision_at_k",
]


def _as_tensor(x) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        return x.float()
    return torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))


def normalize_rows(x, center: bool = False) -> torch.Tensor:
    """L2-normalize each row (optionally after subtracting the mean row); zero rows stay zero."""
    x = _as_tensor(x)
    if center:
        x = x - x.mean(dim=0, keepdim=True)
    return x / x.norm(dim=1, keepdim=True).clamp_min(1e-12)


def relative_representations(vectors, anchor_ids, center: bool = True, chunk_size: int = 65536) -> torch.Tensor:
    """Each row's cosine similarity to the anchor rows, centered per anchor and L2-normalized.

    Args:
        vectors (`[V, d]`): GloVe vectors of one vocabulary.
        anchor_ids (`[A]` int): ids, in this vocabulary, of the shared anchor tokens. Anchor `j` must
            be the same token on both sides so column `j` means the same thing in both spaces.
        center (`bool`): subtract each anchor column's mean before normalizing (removes the common
            component every token shares, which otherwise dominates the cosine).

    Returns:
        `torch.Tensor` `[V, A]`.
    """
    unit = normalize_rows(vectors)
    anchors = unit[torch.as_tensor(np.asarray(anchor_ids), dtype=torch.long)]
    out = torch.empty(unit.shape[0], anchors.shape[0])
    for start in range(0, unit.shape[0], chunk_size):
        out[start : start + chunk_size] = unit[start : start + chunk_size] @ anchors.T
    return normalize_rows(out, center=center)


def procrustes_map(target_points, source_points) -> torch.Tensor:
    """The orthogonal `W` (`[d, d]`) minimizing `||target_points @ W - source_points||`.

    Rows are paired (row `i` of both is the same token). Solved in closed form from the SVD of
    `target_points.T @ source_points` (Schönemann, 1966).
    """
    t, s = _as_tensor(target_points), _as_tensor(source_points)
    u, _, vh = torch.linalg.svd(t.T @ s)
    return u @ vh


@dataclass
class NeighbourResult:
    """The `k` best keys for each query row.

    Args:
        indices (`[N, k]` long): key rows, best first.
        scores (`[N, k]`): ranking scores (CSLS when the hubness correction is on, else cosine).
        cosine (`[N, k]`): plain cosine similarity of the same pairs.
        max_in_degree (`int`): most queries whose top-1 is one key, with the correction as ranked.
        max_in_degree_uncorrected (`int`): the same for plain cosine ranking.
        top1_uncorrected (`[N]` long): each query's best key by plain cosine.
    """

    indices: torch.Tensor
    scores: torch.Tensor
    cosine: torch.Tensor
    max_in_degree: int
    max_in_degree_uncorrected: int
    top1_uncorrected: Optional[torch.Tensor] = None


def _pca_basis(a: torch.Tensor, b: torch.Tensor, dim: int, sample: int = 5000, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    rows = []
    for x in (a, b):
        take = torch.randperm(x.shape[0], generator=generator)[:sample]
        rows.append(x[take])
    stacked = torch.cat(rows)
    _, _, vh = torch.linalg.svd(stacked - stacked.mean(0, keepdim=True), full_matrices=False)
    return vh[:dim].T.contiguous()


def _rowwise_dot(queries: torch.Tensor, keys: torch.Tensor, index: torch.Tensor, chunk_size: int) -> torch.Tensor:
    """`out[i, j] = queries[i] . keys[index[i, j]]`, in chunks."""
    out = torch.empty(index.shape, dtype=torch.float32)
    step = max(1, chunk_size // 8)
    for start in range(0, index.shape[0], step):
        idx = index[start : start + step]
        out[start : start + step] = torch.einsum("nd,nkd->nk", queries[start : start + step], keys[idx])
    return out


def _key_penalty(candidates: torch.Tensor, cosine: torch.Tensor, num_keys: int, csls_k: int) -> torch.Tensor:
    """CSLS `r_s`: each key's mean cosine to its `csls_k` nearest queries, read off the candidate
    graph (every (query, key) pair where the key is among the query's `candidate_k` nearest).

    A key's nearest queries almost always list it among their own candidates, so this equals the
    exact value except for keys in fewer than `csls_k` lists: they are not hubs, and their missing
    neighbours are filled with the smallest candidate cosine (a bound on what was not kept). It is
    exact when `candidate_k` is the number of keys, and it needs no second pass over the keys
    (a column-wise top-k over every block costs more than the matrix product itself).
    """
    keys = candidates.reshape(-1).numpy()
    values = cosine.reshape(-1).numpy()
    order = np.lexsort((-values, keys))
    keys_sorted, values_sorted = keys[order], values[order]
    group_start = np.searchsorted(keys_sorted, np.arange(num_keys))
    rank = np.arange(len(keys_sorted)) - group_start[keys_sorted]
    keep = rank < csls_k
    fill = float(cosine[:, -1].min()) if cosine.shape[1] else 0.0
    sums = np.full(num_keys, fill * csls_k, dtype=np.float64)
    np.add.at(sums, keys_sorted[keep], values_sorted[keep].astype(np.float64) - fill)
    return torch.from_numpy((sums / csls_k).astype(np.float32))


def _max_in_degree(top1: torch.Tensor, num_keys: int) -> int:
    if top1.numel() == 0:
        return 0
    return int(torch.bincount(top1, minlength=num_keys).max())


@torch.no_grad()
def nearest_neighbours(
    queries,
    keys,
    k: int = 10,
    hubness: Optional[str] = "csls",
    csls_k: int = 10,
    chunk_size: int = 2048,
    candidate_k: int = 64,
    search_dim: Optional[int] = None,
    progress: bool = False,
) -> NeighbourResult:
    """Top-`k` keys for every query by cosine (optionally CSLS), without a dense `N x M` matrix.

    One pass over query chunks computes `chunk @ keys.T` and keeps each query's `candidate_k` best
    keys. Candidates are then re-scored exactly (in the full space); with CSLS, `score(q, s) = 2 cos(q, s) - r_q - r_s` where `r_x` is the mean
    cosine of `x` to its `csls_k` nearest neighbours on the other side (`r_s` read off the
    candidate graph, see `_key_penalty`). The CSLS winner is searched
    among the `candidate_k` nearest by cosine (exact when `candidate_k >= len(keys)`).

    Args:
        queries (`[N, d]`), keys (`[M, d]`): vectors in one space (need not be normalized).
        k (`int`): neighbours to return.
        hubness (`"csls"` or `None`): the hubness correction.
        csls_k (`int`): neighbourhood size for the CSLS penalties.
        chunk_size (`int`): query rows per matrix product (memory ~ `chunk_size * M * 4` bytes).
        candidate_k (`int`): cosine candidates per query that are re-scored.
        search_dim (`int`, optional): search candidates in the top `search_dim` principal
            components of both sets (faster for large `d`), then re-score in the full space.
        progress (`bool`): show a progress bar.

    Returns:
        `NeighbourResult`.
    """
    q = normalize_rows(queries)
    s = normalize_rows(keys)
    num_q, num_k = q.shape[0], s.shape[0]
    if num_q == 0 or num_k == 0:
        empty = torch.zeros(num_q, 0)
        return NeighbourResult(empty.long(), empty, empty, 0, 0)
    k = min(k, num_k)
    csls_k = min(csls_k, num_k, num_q)
    cand_k = min(max(candidate_k, k, csls_k), num_k)
    if search_dim is not None and search_dim < q.shape[1]:
        basis = _pca_basis(q, s, search_dim)
        q_search, s_search = normalize_rows(q @ basis), normalize_rows(s @ basis)
    else:
        q_search, s_search = q, s
    s_search_t = s_search.T.contiguous()

    candidates = torch.empty(num_q, cand_k, dtype=torch.long)
    exact = q_search is q  # searching in the full space: the candidates' cosines are already exact
    cosine = torch.empty(num_q, cand_k) if exact else None
    starts = range(0, num_q, chunk_size)
    if progress:
        from tqdm.auto import tqdm

        starts = tqdm(starts, desc="matching", unit="chunk")
    for start in starts:
        sims = q_search[start : start + chunk_size] @ s_search_t
        top = sims.topk(cand_k, dim=1)
        candidates[start : start + chunk_size] = top.indices
        if exact:
            cosine[start : start + chunk_size] = top.values
        del sims, top

    if not exact:
        cosine = _rowwise_dot(q, s, candidates, chunk_size)
    raw_top1 = candidates.gather(1, cosine.argmax(dim=1, keepdim=True)).squeeze(1)
    max_in_degree_uncorrected = _max_in_degree(raw_top1, num_k)
    if hubness == "csls":
        query_penalty = cosine.topk(csls_k, dim=1).values.mean(dim=1)
        key_penalty = _key_penalty(candidates, cosine, num_k, csls_k)
        scores = 2 * cosine - query_penalty[:, None] - key_penalty[candidates]
    elif hubness in (None, "none"):
        scores = cosine
    else:
        raise ValueError(f"Unknown hubness correction {hubness!r}; use 'csls' or None.")
    best = scores.topk(k, dim=1).indices
    indices = candidates.gather(1, best)
    result = NeighbourResult(
        indices=indices,
        scores=scores.gather(1, best),
        cosine=cosine.gather(1, best),
        max_in_degree=_max_in_degree(indices[:, 0], num_k),
        max_in_degree_uncorrected=max_in_degree_uncorrected,
        top1_uncorrected=raw_top1,
    )
    return result


def precision_at_k(predicted: torch.Tensor, truth, ks=(1, 10)) -> dict:
    """Share of rows whose true key is among the first `k` predicted (`predicted` is `[N, >=k]`)."""
    truth = torch.as_tensor(np.asarray(truth), dtype=torch.long)
    if len(truth) == 0:
        return {f"precision@{k}": float("nan") for k in ks}
    hits = predicted == truth[:, None]
    return {f"precision@{k}": float(hits[:, :k].any(dim=1).float().mean()) for k in ks}
