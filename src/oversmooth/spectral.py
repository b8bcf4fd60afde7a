"""What linear diffusion predicts: the spectrum of ``P = D^{-1} W`` that sets its decay rate.

Under ``X <- P X`` the component of ``X`` along an eigenvector of ``P`` with eigenvalue
``lambda`` is multiplied by ``lambda`` at every step.  On a connected graph the eigenvalue 1
belongs to the constant vectors, which carry no Laplacian energy, so the Laplacian energy
``E_2(X) = (1/n) ||PX - X||_F^2`` falls asymptotically by the factor

.. math::  \\rho^2, \\qquad \\rho = \\max(|\\lambda_2|, |\\lambda_{\\min}|)

per step, where ``rho`` is the second-largest eigenvalue modulus (SLEM).  A bipartite
component has ``lambda_min = -1``: its states ``X`` oscillate between two alternating shapes
and its energy settles at a positive constant, never decaying.

``P`` is similar to the symmetric ``S = D^{-1/2} W D^{-1/2}`` when ``W`` is symmetric, so the
eigenvalues are real and are computed from ``S`` with a sparse Lanczos solver (small
components with a dense solver on the component alone); no ``n x n`` matrix of the whole
graph is built.  Directed graphs (``W`` not symmetric) are refused: their ``P`` may have
complex eigenvalues, and no single rate describes them.

For a disconnected graph every component keeps its own constant vector; the headline numbers
are those of the largest connected component (as the name says), and
:attr:`SpectralGap.graph_energy_ratio` is the slowest rate over all components (two or more
nodes), the one that governs the whole graph's energy: the energy is a sum over components,
each term falls like its own ``rho_c^(2k)``, and the largest ``rho_c`` wins as ``k`` grows.

Which energy does not matter for the rate.  Any quadratic form ``q(X) = ||M X||_F^2`` that
vanishes exactly on the vectors constant on each component (the project's Laplacian energy
``(1/n)||P_0 X - X||^2`` with ``P_0 = D^{-1} W`` of the input graph, its degree-weighted form,
the Dirichlet energy) falls asymptotically by ``rho^2`` per step under ``X <- P X`` -- provided
the slowest mode is excited, i.e. ``X_0`` has a component along an eigenvector of modulus
``rho`` (true for almost every ``X_0``, not for one built orthogonal to it).  Two slow modes of
equal modulus and opposite sign (``lambda_2 = -lambda_min``) make the per-step ratio oscillate
around ``rho^2`` instead of settling on it; with self loops (the lazy walk) that is rare.

``self_loops=True`` gives exactly the ``P = D~^{-1} A~`` of the zoo's GCN mean and of the
``diffusion`` model (:class:`oversmooth.nn.conv.GraphContext`): every node gets a self loop of
weight 1 and a self loop already in the graph is replaced by it, not added to.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from oversmooth.graph import check_edge_index, check_edge_weight

__all__ = ["SpectralGap", "spectral_gap", "halving_steps"]

_DENSE_MAX = 256  # components up to this size are solved densely (size^2 floats, ~0.5 MB)
#: restarts ARPACK gets per eigenproblem: Cora, CiteSeer and CSBM graphs of 1,000 and 3,000
#: nodes converge within 100 (the same values as with ARPACK's default of 10 x size); a slowly
#: mixing component (a path of 2,000 nodes: 1 - lambda_2 = 8e-7) took 22 s to converge, and a
#: weighted path of 1,000 nodes or a path of 2,900 never did (an audit)
_ARPACK_RESTARTS = 300
#: a component ARPACK does not solve within :data:`_ARPACK_RESTARTS` is solved densely up to
#: this size (size^2 float64: 128 MiB; a path of 2,900 nodes took 1.5 s on 2 cores); a larger
#: one gets ARPACK's own limit (10 x size restarts: a 20 x 300 grid converged in 1.9 s, a ring
#: of 4,200 nodes in 32 s)
_DENSE_FALLBACK_MAX = 4096


@dataclass(frozen=True)
class SpectralGap:
    """The spectrum of ``P = D^{-1} W`` that sets the decay of linear diffusion.

    Attributes:
        lambda2: second-largest eigenvalue of ``P`` on the largest connected component.
        lambda_min: smallest eigenvalue of ``P`` there (``-1`` iff that component is bipartite).
        slem: second-largest eigenvalue modulus ``max(|lambda2|, |lambda_min|)``.
        energy_ratio: ``slem ** 2``, the factor by which diffusion's Laplacian energy falls per
            step on the largest component, asymptotically.
        halving_steps: steps for that energy to halve, ``log 2 / -log(energy_ratio)``
            (``inf`` when it does not decay).
        nodes: size of the largest connected component.
        num_nodes: nodes in the graph.
        num_components: connected components with two or more nodes.
        isolated: nodes without an edge to another node (a self loop alone included; their
            Laplacian is 0 by convention).
        bipartite: whether the largest component is bipartite.
        bipartite_components: components (two or more nodes) that are bipartite.
        graph_energy_ratio: the largest per-step ratio over all components: the asymptotic
            rate of the whole graph (1 when any component is bipartite).
        graph_halving_steps: steps for the whole graph's energy to halve at that rate
            (``inf`` when it does not decay).
        slowest_nodes: size of the component that sets ``graph_energy_ratio`` (the largest
            such component on a tie).
        self_loops: whether every node has a unit self loop (``W`` off the diagonal, ``+ I``).
    """

    lambda2: float
    lambda_min: float
    slem: float
    energy_ratio: float
    halving_steps: float
    nodes: int
    num_nodes: int
    num_components: int
    isolated: int
    bipartite: bool
    bipartite_components: int
    graph_energy_ratio: float
    graph_halving_steps: float
    slowest_nodes: int
    self_loops: bool

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        """One sentence that says what the numbers mean, and for which part of the graph."""
        where = (
            "the graph"
            if self.num_components == 1 and not self.isolated
            else f"the largest connected component ({self.nodes} of {self.num_nodes} nodes)"
        )
        if self.energy_ratio >= 1.0:
            rate = "its energy does not decay (a bipartite component's states oscillate)"
        elif self.energy_ratio == 0.0:
            rate = "diffusion takes its energy to zero in one step"
        else:
            rate = (
                f"diffusion's energy falls by {self.energy_ratio:.4g} per step, "
                f"halving every {self.halving_steps:.3g} steps"
            )
        text = (
            f"On {where}: lambda_2 = {self.lambda2:.6g}, lambda_min = {self.lambda_min:.6g}, "
            f"SLEM = {self.slem:.6g}; {rate}."
        )
        if self.bipartite_components and not self.bipartite:
            text += (
                f" {self.bipartite_components} smaller component(s) are bipartite, so the "
                "whole graph's energy does not decay to zero under X <- PX."
            )
        elif self.graph_energy_ratio > self.energy_ratio and self.graph_energy_ratio < 1.0:
            text += (
                f" A smaller component decays more slowly ({self.graph_energy_ratio:.4g} per "
                "step), which sets the whole graph's rate."
            )
        return text


def halving_steps(ratio: float) -> float:
    """Steps for a quantity that falls by ``ratio`` per step to halve: ``log 2 / -log ratio``
    (``inf`` when ``ratio >= 1``, ``0`` when ``ratio == 0``)."""
    if ratio <= 0.0:
        return 0.0
    return math.log(2.0) / -math.log(ratio) if ratio < 1.0 else math.inf


def _weights(graph: Any, edge_weight: Tensor | None, num_nodes: int | None) -> Any:
    """The sparse ``W`` (scipy CSR, float64) of an edge list or a PyG ``Data``."""
    import scipy.sparse as sp

    edge_index = graph
    if not isinstance(graph, Tensor) and hasattr(graph, "edge_index"):
        edge_index = graph.edge_index
        num_nodes = graph.num_nodes if num_nodes is None else num_nodes
        if edge_weight is None:
            edge_weight = getattr(graph, "edge_weight", None)
    num_nodes = check_edge_index(edge_index, num_nodes)
    check_edge_weight(edge_weight, int(edge_index.size(1)))
    src, dst = edge_index.detach().cpu().numpy().astype(np.int64)
    w = (
        np.ones(src.size)
        if edge_weight is None
        else edge_weight.detach().cpu().to(torch.float64).numpy()
    )
    # row = target, column = source: (PX)_i sums over edges j -> i
    return sp.csr_matrix((w, (dst, src)), shape=(num_nodes, num_nodes), dtype=np.float64)


def _check_symmetric(w: Any) -> None:
    """Every edge's weight equals its reverse's to 1e-12 of the larger of the two: each pair
    on its own scale (a tolerance on the heaviest edge of the graph let a one-way edge of
    weight 1 pass beside edges of 1e13, and the symmetric solver then read it as two-way)."""
    diff = abs(w - w.T).tocoo()
    if not diff.nnz:
        return
    a = abs(w)
    pair = np.maximum(np.asarray(a[diff.row, diff.col]), np.asarray(a[diff.col, diff.row])).ravel()
    unequal = diff.data > 1e-12 * pair
    if np.any(unequal):
        pattern = (w != 0).astype(np.int8)
        if (pattern - pattern.T).nnz == 0:  # every edge has its reverse: the weights differ
            received = (
                "one whose edges all appear both ways but with different total weights "
                f"({int(unequal.sum()) // 2} pairs; repeated edges add up)"
            )
        else:
            received = "a directed one"
        raise ValueError(
            "spectral_gap: expected an undirected graph (every edge j -> i with the same weight "
            f"as i -> j), received {received}; make it undirected first, e.g. "
            "torch_geometric.utils.to_undirected(edge_index, edge_weight)"
        )


def _component_spectrum(s: Any) -> tuple[float, float]:
    """(lambda_2, lambda_min) of the symmetric normalised matrix of one connected component of
    more than :data:`_DENSE_MAX` nodes (smaller ones: :func:`_small_spectra`): ARPACK within
    :data:`_ARPACK_RESTARTS` restarts; else densely up to :data:`_DENSE_FALLBACK_MAX` nodes,
    and ARPACK with its own limit beyond; else ``ValueError`` (a reference then says it was
    not computed, and why)."""
    size = s.shape[0]
    from scipy.sparse.linalg import ArpackNoConvergence

    try:
        return _arpack_spectrum(s, _ARPACK_RESTARTS)
    except ArpackNoConvergence:  # a RuntimeError: it stopped the whole analysis
        if size <= _DENSE_FALLBACK_MAX:
            values = np.linalg.eigvalsh(s.toarray())  # ascending
            return float(values[-2]), float(values[0])
    try:
        return _arpack_spectrum(s, None)
    except ArpackNoConvergence:
        raise ValueError(
            f"spectral_gap: the eigensolver did not converge on a connected component of "
            f"{size} nodes (a slowly mixing graph, such as a long path or ring: lambda_2 too "
            f"close to 1), which is too large to solve densely (more than "
            f"{_DENSE_FALLBACK_MAX} nodes)"
        ) from None


def _arpack_spectrum(s: Any, restarts: int | None) -> tuple[float, float]:
    """(lambda_2, lambda_min) by ARPACK from a fixed start, within ``restarts`` (None: its own
    default, 10 x size); ``ArpackNoConvergence`` when it does not converge."""
    from scipy.sparse.linalg import eigsh

    start = np.random.default_rng(0).standard_normal(s.shape[0])  # fixed: reproducible results
    top = eigsh(s, k=2, which="LA", v0=start, tol=0.0, maxiter=restarts, return_eigenvectors=False)
    low = eigsh(s, k=1, which="SA", v0=start, tol=0.0, maxiter=restarts, return_eigenvectors=False)
    return float(np.sort(top)[0]), float(low[0])


def _parity_conflict(w: Any, labels: np.ndarray, count: int) -> np.ndarray:
    """Per component: True when some edge joins two nodes at the same BFS depth parity
    (an odd cycle), i.e. the component is not bipartite.  One BFS for all components, from
    a virtual root joined to one node of each."""
    import scipy.sparse as sp
    from scipy.sparse.csgraph import shortest_path

    n = w.shape[0]
    _, first = np.unique(labels, return_index=True)
    hub = sp.csr_matrix((np.ones(count), (np.full(count, n), first)), shape=(n + 1, n + 1))
    pattern = sp.bmat([[w, None], [None, sp.csr_matrix((1, 1))]], format="csr") + hub
    depth = shortest_path(pattern, unweighted=True, directed=False, indices=n)[:n]
    coo = w.tocoo()
    same = (depth[coo.row] % 2 == depth[coo.col] % 2) & (coo.data != 0)
    conflict = np.zeros(count, dtype=bool)
    conflict[labels[coo.row[same]]] = True
    return conflict


def _diffusion_weights(
    graph: Any, edge_weight: Tensor | None, num_nodes: int | None, self_loops: bool
) -> tuple[Any, int]:
    """The validated, undirected ``W`` (scipy CSR, float64, repeated edges merged), with a unit
    self loop on every node when ``self_loops``, and the number of isolated nodes before it."""
    import scipy.sparse as sp

    w = _weights(graph, edge_weight, num_nodes)
    w.sum_duplicates()
    w.eliminate_zeros()
    _check_symmetric(w)
    n = w.shape[0]
    # no edge to another node, before any self loop (a node whose only edge is a self loop
    # is isolated too: it diffuses nothing; it was counted in a component, an audit)
    isolated = int(np.count_nonzero(np.diff(w.indptr) - (w.diagonal() != 0) == 0))
    if self_loops:  # the zoo's neighbourhood N(i) ∪ {i}: a unit self loop replaces any other
        w = (w - sp.diags(w.diagonal()) + sp.identity(n, dtype=np.float64)).tocsr()
        w.eliminate_zeros()
    return w, isolated


def _components(w: Any) -> tuple[np.ndarray, np.ndarray]:
    """The component of every node and the size of every component; ``ValueError`` when no
    component has two or more nodes (nothing diffuses)."""
    from scipy.sparse.csgraph import connected_components

    count, labels = connected_components(w, directed=False)
    sizes = np.bincount(labels, minlength=count)
    if not np.any(sizes >= 2):
        raise ValueError(
            "spectral_gap: expected a graph with at least one edge between two nodes, "
            f"received {w.shape[0]} node(s) without one; nothing diffuses"
        )
    return labels, sizes


def _symmetric_normalised(w: Any) -> Any:
    """``S = D^{-1/2} W D^{-1/2}`` (an isolated node's row and column stay zero)."""
    import scipy.sparse as sp

    degree = np.asarray(w.sum(axis=1)).ravel()
    inv_sqrt = np.zeros(w.shape[0])
    inv_sqrt[degree > 0] = 1.0 / np.sqrt(degree[degree > 0])
    return sp.diags(inv_sqrt) @ w @ sp.diags(inv_sqrt)


def _component_spectra(
    s: Any, labels: np.ndarray, sizes: np.ndarray, bipartite: np.ndarray
) -> dict[int, tuple[float, float]]:
    """``(lambda_2, lambda_min)`` of every component with two or more nodes, by component:
    the small ones (up to :data:`_DENSE_MAX` nodes) densely, a batch of equal sizes at a time
    (:func:`_small_spectra`), the others with ARPACK (:func:`_component_spectrum`)."""
    order = np.argsort(labels, kind="stable")
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    spectra = _small_spectra(s, labels, sizes, order, bounds)
    for c in np.flatnonzero(sizes > _DENSE_MAX):
        nodes = order[bounds[c] : bounds[c + 1]]
        spectra[int(c)] = _component_spectrum(s[nodes][:, nodes].tocsr())
    for c in np.flatnonzero(bipartite):
        # exact: the spectrum of a bipartite graph is symmetric about 0
        spectra[int(c)] = (spectra[int(c)][0], -1.0)
    return dict(sorted(spectra.items()))


#: how many matrix entries one batch of :func:`_small_spectra` holds at most (32 MiB)
_BATCH_VALUES = 1 << 22


def _small_spectra(
    s: Any, labels: np.ndarray, sizes: np.ndarray, order: np.ndarray, bounds: np.ndarray
) -> dict[int, tuple[float, float]]:
    """``(lambda_2, lambda_min)`` of every component of 2 to :data:`_DENSE_MAX` nodes: their
    dense matrices filled from ``s``'s entries (each node at its rank in its component, the
    order of ``s[nodes][:, nodes]``), solved by one batched ``eigvalsh`` per size and
    :data:`_BATCH_VALUES` entries.  The same LAPACK call on the same matrix as one component
    at a time, so the same values; CiteSeer's 389 small components took 40 ms one at a time
    (two sparse slicings each) on 2 cores.  The entries are sorted once by (size, component),
    so each batch reads its own entries only (reading all of them for every size took 2.3 s
    on a graph of 3 million entries with 255 sizes of small component, an audit)."""
    small = (sizes >= 2) & (sizes <= _DENSE_MAX)
    spectra: dict[int, tuple[float, float]] = {}
    if not small.any():
        return spectra
    rank = np.empty(len(labels), dtype=np.int64)  # each node's rank within its component
    rank[order] = np.arange(len(labels)) - bounds[labels[order]]
    coo = s.tocoo()
    comp = labels[coo.row]  # edges never join two components
    inside = small[comp]
    comp, row, col, data = comp[inside], coo.row[inside], coo.col[inside], coo.data[inside]
    count = len(sizes)
    key = sizes[comp].astype(np.int64) * count + comp  # by size, then by component
    by_key = np.argsort(key, kind="stable")
    key, comp, row, col, data = key[by_key], comp[by_key], row[by_key], col[by_key], data[by_key]
    ids = np.flatnonzero(small)
    for size in np.unique(sizes[ids]):
        size = int(size)
        group = ids[sizes[ids] == size]  # ascending
        step = max(1, _BATCH_VALUES // size**2)
        for first in range(0, len(group), step):
            part = group[first : first + step]
            lo = np.searchsorted(key, size * count + part[0])
            hi = np.searchsorted(key, size * count + part[-1], side="right")
            slot = np.searchsorted(part, comp[lo:hi])  # the entry's component's place in part
            blocks = np.zeros((len(part), size, size))
            np.add.at(blocks, (slot, rank[row[lo:hi]], rank[col[lo:hi]]), data[lo:hi])
            values = np.linalg.eigvalsh(blocks)  # [components, size], ascending
            for c, lam2, lam_min in zip(part, values[:, -2], values[:, 0], strict=True):
                spectra[int(c)] = (float(lam2), float(lam_min))
    return spectra


#: eigenvalue moduli below this are the eigensolver's rounding, not the graph's: 0 (a complete
#: graph with self loops, P = J/n, gave a SLEM of 1.8e-16 and "halves every 0.00956 steps")
ROUNDING_ZERO = 1e-12


def _slem(lam2: float, lam_min: float) -> float:
    """The second-largest eigenvalue modulus (0 where it is below :data:`ROUNDING_ZERO`)."""
    slem = max(abs(lam2), abs(lam_min))
    return slem if slem >= ROUNDING_ZERO else 0.0


def _slowest(spectra: dict[int, tuple[float, float]], sizes: np.ndarray) -> tuple[float, int]:
    """The whole graph's per-step energy ratio (the slowest component's, at most 1) and the size
    of the component that sets it (the largest on a tie)."""
    ratio, size = max((_slem(*spectrum) ** 2, int(sizes[c])) for c, spectrum in spectra.items())
    return min(ratio, 1.0), size


def spectral_gap(
    graph: Any,
    edge_weight: Tensor | None = None,
    num_nodes: int | None = None,
    self_loops: bool = False,
) -> SpectralGap:
    """The eigenvalues of ``P = D^{-1} W`` that predict how fast linear diffusion smooths.

    Args:
        graph: an ``edge_index`` ``[2, E]`` (PyG convention) or a PyG ``Data`` (its
            ``edge_index``, ``num_nodes`` and ``edge_weight`` are used).  The graph must be
            undirected.
        edge_weight: optional non-negative weights ``[E]``.
        num_nodes: number of nodes (default: from the graph).
        self_loops: give every node a self loop of weight 1, replacing any self loop the graph
            has (the augmented adjacency of GCN and of Cai & Wang 2020, exactly the ``P`` of
            the zoo's GCN mean and of the ``diffusion`` model): the walk becomes lazy, no
            component is periodic.

    Returns:
        A :class:`SpectralGap`; ``summary()`` says it in one sentence.
    """
    if not isinstance(self_loops, bool):
        raise ValueError(f"self_loops: expected True or False, received {self_loops!r}")
    w, isolated = _diffusion_weights(graph, edge_weight, num_nodes, self_loops)
    labels, sizes = _components(w)
    bipartite = ~_parity_conflict(w, labels, len(sizes)) & (sizes >= 2)
    spectra = _component_spectra(_symmetric_normalised(w), labels, sizes, bipartite)
    largest = int(np.argmax(sizes))
    lam2, lam_min = spectra[largest]
    slem = _slem(lam2, lam_min)
    ratio = min(slem**2, 1.0)
    graph_ratio, slowest = _slowest(spectra, sizes)
    return SpectralGap(
        lambda2=lam2,
        lambda_min=lam_min,
        slem=slem,
        energy_ratio=ratio,
        halving_steps=halving_steps(ratio),
        nodes=int(sizes[largest]),
        num_nodes=int(w.shape[0]),
        num_components=len(spectra),
        isolated=isolated,
        bipartite=bool(bipartite[largest]),
        bipartite_components=int(np.count_nonzero(bipartite)),
        graph_energy_ratio=graph_ratio,
        graph_halving_steps=halving_steps(graph_ratio),
        slowest_nodes=slowest,
        self_loops=self_loops,
    )
