"""Dense, obviously-correct references for the metrics (tests only: n x n on purpose)."""

from __future__ import annotations

import numpy as np
import torch


def dense_weights(edge_index, edge_weight, n, self_loops=False) -> np.ndarray:
    """W[i, j] = weight of the edge j -> i (node i aggregates from j)."""
    w = np.zeros((n, n))
    ew = np.ones(edge_index.shape[1]) if edge_weight is None else np.asarray(edge_weight, dtype=float)
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
