"""Dense, obviously-correct references for the metrics (tests only: n x n on purpose)."""

from __future__ import annotations

import numpy as np
import torch


def dense_weights(edge_index, edge_weight, n, self_loops=False) -> np.ndarray:
    """W[i, j] = weight of the edge j -> i (node i aggregates from j)."""
    w = np.zeros((n, n))
    ew = (
        np.ones(edge_index.shape[1])
        if edge_weight is None
        else np.asarray(edge_weight, dtype=float)
    )
    for e in range(edge_index.shape[1]):
        j, i = int(edge_index[0, e]), int(edge_index[1, e])
        w[i, j] += ew[e]
    if self_loops:
        w += np.eye(n)
    return w


def dense_laplacian(w: np.ndarray) -> np.ndarray:
    """Delta = D^-1 W - I on nodes with neighbours, zero rows on isolated nodes."""
    d = w.sum(1)
    lap = np.zeros_like(w)
    for i in range(len(d)):
        if d[i] > 0:
            lap[i] = w[i] / d[i]
            lap[i, i] -= 1.0
    return lap


def dirichlet(x: np.ndarray, w: np.ndarray) -> float:
    n = x.shape[0]
    total = 0.0
    for i in range(n):
        for j in range(n):
            if w[i, j]:
                total += w[i, j] * np.sum((x[j] - x[i]) ** 2)
    return 0.5 * total / n


def laplacian_energy(x: np.ndarray, w: np.ndarray, measure: str = "counting") -> float:
    lx = dense_laplacian(w) @ x
    sq = np.sum(lx**2, axis=1)
    if measure == "degree":
        sq = sq * w.sum(1)
    return float(sq.sum() / x.shape[0])


def cos(a: np.ndarray, b: np.ndarray) -> float:
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    return 0.0 if na == 0 or nb == 0 else float(a @ b / (na * nb))


def mad_neighbors(x: np.ndarray, w: np.ndarray) -> float:
    per_node = []
    for i in range(x.shape[0]):
        nbrs = [j for j in range(x.shape[0]) if w[i, j]]
        if nbrs:
            per_node.append(np.mean([1 - cos(x[i], x[j]) for j in nbrs]))
    return float(np.mean(per_node))


def mad_global(x: np.ndarray) -> float:
    n = x.shape[0]
    vals = [1 - cos(x[i], x[j]) for i in range(n) for j in range(n) if i != j]
    return float(np.mean(vals))


def rusch(x: np.ndarray, w: np.ndarray) -> float:
    n = x.shape[0]
    total = sum(np.sum((x[i] - x[j]) ** 2) for i in range(n) for j in range(n) if w[i, j])
    return float(np.sqrt(total / n))


def effective_rank(x: np.ndarray) -> float:
    s = np.linalg.svd(x - x.mean(0), compute_uv=False)
    p = s / s.sum()
    p = p[p > 0]
    return float(np.exp(-(p * np.log(p)).sum()))


def to_np(x: torch.Tensor) -> np.ndarray:
    return x.detach().double().cpu().numpy()


# ---------------------------------------------------------------------------------------------
# Extended-precision references (np.longdouble: 64-bit mantissa on x86) over the edge list, for
# the exactness tests.  Differences are taken first, in longdouble, from the float64 inputs.

LD = np.longdouble


def ld(x) -> np.ndarray:
    """float64 tensor/array -> longdouble array (exact)."""
    arr = x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)
    return arr.astype(np.float64).astype(LD)


class LDGraph:
    """Edge list with longdouble weights and P entries, like GraphOperator (no self loops)."""

    def __init__(self, edge_index, edge_weight, n: int) -> None:
        ei = np.asarray(edge_index.cpu() if isinstance(edge_index, torch.Tensor) else edge_index)
        self.src, self.dst, self.n = ei[0].astype(np.int64), ei[1].astype(np.int64), n
        self.w = np.ones(len(self.src), dtype=LD) if edge_weight is None else ld(edge_weight)
        self.deg = np.zeros(n, dtype=LD)
        np.add.at(self.deg, self.dst, self.w)
        safe = np.where(self.deg > 0, self.deg, LD(1))
        self.p = self.w / safe[self.dst]

    def laplacian(self, x: np.ndarray) -> np.ndarray:
        out = np.zeros_like(x)
        np.add.at(out, self.dst, self.p[:, None] * (x[self.src] - x[self.dst]))
        return out

    def edge_sq(self, x: np.ndarray) -> np.ndarray:
        return np.sum((x[self.src] - x[self.dst]) ** 2, axis=1)


def ld_energy(x: np.ndarray, g: LDGraph, order: int, measure: str = "degree") -> LD:
    y = x
    for _ in range(order // 2):
        y = g.laplacian(y)
    if order % 2:
        return LD(0.5) * np.sum(g.w * g.edge_sq(y)) / g.n
    sq = np.sum(y**2, axis=1)
    return np.sum(sq * g.deg if measure == "degree" else sq) / g.n


def ld_rusch(x: np.ndarray, g: LDGraph) -> LD:
    return np.sqrt(np.sum(g.edge_sq(x)) / g.n)


def ld_unit_gap(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """u - v for unit rows of a, b, through d = a - b (the identity is exact; evaluated in
    longdouble).  Zero rows give NaN rows (callers handle them)."""
    na = np.sqrt(np.sum(a * a, axis=1))
    nb = np.sqrt(np.sum(b * b, axis=1))
    d = a - b
    gap = -np.sum(d * (a + b), axis=1) / (na + nb)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (d + b * (gap / nb)[:, None]) / na[:, None]


def ld_cos_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    zero = (np.sum(a * a, axis=1) == 0) | (np.sum(b * b, axis=1) == 0)
    gap = ld_unit_gap(a, b)
    return np.where(zero, LD(1), LD(0.5) * np.sum(np.where(zero[:, None], 0, gap) ** 2, axis=1))


def ld_mad_neighbors(x: np.ndarray, g: LDGraph) -> LD:
    dist = np.zeros(g.n, dtype=LD)
    count = np.zeros(g.n, dtype=LD)
    np.add.at(dist, g.dst, ld_cos_distance(x[g.dst], x[g.src]))
    np.add.at(count, g.dst, LD(1))
    has = count > 0
    return np.sum(dist[has] / count[has]) / max(int(has.sum()), 1)


def ld_mad_global_pairs(x: np.ndarray) -> LD:
    """All ordered pairs explicitly (small n only)."""
    n = x.shape[0]
    i, j = np.nonzero(~np.eye(n, dtype=bool))
    return np.mean(ld_cos_distance(x[i], x[j]))


def ld_cosine_mean(x: np.ndarray, y: np.ndarray) -> LD:
    nx, ny = np.sqrt(np.sum(x * x, axis=1)), np.sqrt(np.sum(y * y, axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        cos = np.where((nx == 0) | (ny == 0), LD(0), np.sum(x * y, axis=1) / (nx * ny))
    return np.mean(cos)


def ld_feature_norm(x: np.ndarray) -> LD:
    return np.sqrt(np.sum(x * x) / x.shape[0])


def ld_effective_rank(x: np.ndarray) -> float:
    """Centred in longdouble (where cancellation happens; differences to row 0 first, then
    their mean), SVD of the result in float64."""
    shifted = x - x[0]
    centred = (shifted - shifted.mean(axis=0)).astype(np.float64)
    s = np.linalg.svd(centred, compute_uv=False).astype(LD)
    if s.sum() == 0:
        return 0.0
    p = s / s.sum()
    p = p[p > 0]
    return float(np.exp(-(p * np.log(p)).sum()))


def ld_mad_global_centred(x: np.ndarray) -> LD:
    """Global MAD through sum_{i != j} 0.5||u_i - u_j||^2 = m sum_i ||u_i - u_bar||^2 (nonzero
    rows), u_i - u_0 in longdouble; checked against :func:`ld_mad_global_pairs` on small n."""
    n = x.shape[0]
    nz = np.sum(x * x, axis=1) > 0
    m = int(nz.sum())
    if m == 0:
        return LD(1)
    rows = x[nz]
    w = ld_unit_gap(rows, np.broadcast_to(rows[0], rows.shape))
    s = np.sum((w - w.mean(axis=0)) ** 2)
    return (m * s + (n * (n - 1) - m * (m - 1))) / LD(n * (n - 1))
