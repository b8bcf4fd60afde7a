"""The graph operator shared by the metrics and the models.

Conventions (PyTorch Geometric): ``edge_index[0]`` holds the source and
``edge_index[1]`` the target of each edge, and messages flow from source to
target.  Node ``i`` therefore aggregates over its *in*-neighbours ``j`` (edges
``j -> i``) with weights :math:`\\omega_{ij}` (default 1).

.. math::

    \\mu_i = d_i = \\sum_j \\omega_{ij}, \\qquad
    (PX)_i = \\sum_j \\frac{\\omega_{ij}}{d_i} X_j, \\qquad
    (\\Delta X)_i = \\sum_j \\frac{\\omega_{ij}}{d_i} (X_j - X_i).

``P = D^{-1} W`` is row-stochastic.  An isolated node (``d_i = 0``) has a zero
row in ``P`` and, since the sum defining :math:`\\Delta` is empty, a zero
Laplacian: :math:`(\\Delta X)_i = 0` (not :math:`-X_i`).  On every other node
:math:`\\Delta X = PX - X`.  No division by zero happens anywhere and no
``n x n`` matrix is ever built: ``P`` is stored as a CSR sparse matrix.
"""

from __future__ import annotations

import warnings
from typing import Iterator, Union

import torch
from torch import Tensor

__all__ = [
    "GraphOperator",
    "as_operator",
    "validate_features",
    "check_edge_index",
    "check_edge_weight",
]


def check_edge_index(edge_index: Tensor, num_nodes: int | None) -> int:
    """Validate an ``edge_index`` ``[2, E]`` against ``num_nodes``; return ``num_nodes``."""
    if not isinstance(edge_index, Tensor):
        raise TypeError(
            f"edge_index: expected a torch.Tensor of shape [2, num_edges], "
            f"received {type(edge_index).__name__}"
        )
    if edge_index.dim() != 2 or edge_index.size(0) != 2:
        raise ValueError(
            f"edge_index: expected shape [2, num_edges], received {list(edge_index.shape)}; "
            "transpose an [num_edges, 2] list with edge_index.t()"
        )
    if edge_index.dtype.is_floating_point or edge_index.dtype == torch.bool:
        raise ValueError(
            f"edge_index: expected an integer tensor, received dtype {edge_index.dtype}"
        )
    num_edges = edge_index.size(1)
    lo = int(edge_index.min()) if num_edges else 0
    hi = int(edge_index.max()) if num_edges else -1
    if num_nodes is None:
        num_nodes = hi + 1
    if num_nodes < 0:
        raise ValueError(f"num_nodes: expected a non-negative integer, received {num_nodes}")
    if lo < 0 or hi >= num_nodes:
        raise ValueError(
            f"edge_index: node indices must lie in [0, {num_nodes - 1}] for num_nodes={num_nodes}, "
            f"received values in [{lo}, {hi}]; pass the right num_nodes or fix the edge list"
        )
    return num_nodes


def check_edge_weight(edge_weight: Tensor | None, num_edges: int) -> None:
    """Validate optional edge weights: ``[num_edges]``, real, finite, non-negative."""
    if edge_weight is None:
        return
    if not isinstance(edge_weight, Tensor):
        raise TypeError(
            f"edge_weight: expected a torch.Tensor of shape [{num_edges}], "
            f"received {type(edge_weight).__name__}"
        )
    if edge_weight.dim() != 1 or edge_weight.numel() != num_edges:
        raise ValueError(
            f"edge_weight: expected shape [{num_edges}] (one weight per edge), "
            f"received {list(edge_weight.shape)}"
        )
    if edge_weight.dtype.is_complex or edge_weight.dtype == torch.bool:
        raise ValueError(
            f"edge_weight: expected real non-negative weights, received dtype {edge_weight.dtype}"
        )
    if num_edges and not bool(torch.isfinite(edge_weight).all()):
        raise ValueError("edge_weight: expected finite weights, received NaN or Inf")
    if num_edges and bool((edge_weight < 0).any()):
        raise ValueError(
            f"edge_weight: expected non-negative weights, received a minimum of "
            f"{float(edge_weight.min()):g}"
        )


class GraphOperator:
    """Random-walk operator ``P = D^{-1} W`` and Laplacian ``Delta`` of one graph.

    Built once per graph (validation and index work happen here, never in the
    metrics) and shared by every metric and probe.  Application is a sparse
    CSR product: ``O(|E| d)`` time, ``O(n d)`` memory.

    Args:
        edge_index: ``[2, num_edges]`` integer tensor, source row then target row.
        edge_weight: optional ``[num_edges]`` non-negative weights (default 1).
        num_nodes: number of nodes ``n`` (default ``edge_index.max() + 1``).
        self_loops: add a self loop of weight 1 to every node first.

    Example:
        >>> g = GraphOperator(torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]]))  # path 0-1-2
        >>> g.degree
        tensor([1., 2., 1.], dtype=torch.float64)
        >>> g.laplacian(torch.tensor([[0.0], [1.0], [2.0]], dtype=torch.float64)).flatten()
        tensor([1., 0., -1.], dtype=torch.float64)
    """

    def __init__(
        self,
        edge_index: Tensor,
        edge_weight: Tensor | None = None,
        num_nodes: int | None = None,
        *,
        self_loops: bool = False,
    ) -> None:
        num_nodes = check_edge_index(edge_index, num_nodes)
        check_edge_weight(edge_weight, edge_index.size(1))
        from oversmooth.resources import check_allocation, operator_bytes

        check_allocation(
            f"graph operator ({num_nodes} nodes, {edge_index.size(1)} edges)",
            operator_bytes(num_nodes, edge_index.size(1)),
            edge_index.device,
        )
        device = edge_index.device
        edge_index = edge_index.long()
        weight = (
            torch.ones(edge_index.size(1), dtype=torch.float64, device=device)
            if edge_weight is None
            else edge_weight.to(device=device, dtype=torch.float64)
        )
        if self_loops:
            loop = torch.arange(num_nodes, device=device)
            edge_index = torch.cat([edge_index, torch.stack([loop, loop])], dim=1)
            weight = torch.cat([weight, torch.ones(num_nodes, dtype=torch.float64, device=device)])
        self.num_nodes: int = num_nodes
        self.self_loops: bool = self_loops
        self.edge_index: Tensor = edge_index  # [2, num_edges]
        self.edge_weight: Tensor = weight  # [num_edges], float64
        # d_i = sum of the weights of the edges that enter i
        self.degree: Tensor = torch.zeros(num_nodes, dtype=torch.float64, device=device)
        self.degree.index_add_(0, edge_index[1], weight)
        self.has_neighbors: Tensor = self.degree > 0  # [num_nodes] bool
        self.num_isolated: int = int((~self.has_neighbors).sum())  # one sync, at build time
        inv_degree = torch.where(self.has_neighbors, 1.0 / self.degree.clamp_min(1e-300), 0.0)
        values = weight * inv_degree[edge_index[1]]
        self.edge_prob: Tensor = values  # [num_edges] P's entry w_e / d_target of each edge
        # P[i, j] = w_ij / d_i with i the target: rows are targets, columns sources
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            coo = torch.sparse_coo_tensor(
                torch.stack([edge_index[1], edge_index[0]]), values, (num_nodes, num_nodes)
            ).coalesce()
            self._csr = {torch.float64: coo.to_sparse_csr()}

    @property
    def is_symmetric(self) -> bool:
        """Whether ``W == W^T`` (an undirected graph with symmetric weights); computed once."""
        cached = getattr(self, "_symmetric", None)
        if cached is None:
            n = self.num_nodes
            src, dst = self.edge_index
            fwd = torch.sparse_coo_tensor(
                torch.stack([dst, src]), self.edge_weight, (n, n)
            ).coalesce()
            bwd = torch.sparse_coo_tensor(
                torch.stack([src, dst]), self.edge_weight, (n, n)
            ).coalesce()
            cached = bool(
                torch.equal(fwd.indices(), bwd.indices())
                and torch.allclose(fwd.values(), bwd.values(), rtol=1e-12, atol=0.0)
            )
            self._symmetric: bool | None = cached
        return cached

    @property
    def device(self) -> torch.device:
        return self.edge_index.device

    @property
    def num_edges(self) -> int:
        return self.edge_index.size(1)

    def to(self, device: Union[str, torch.device]) -> "GraphOperator":
        """A copy of the operator on ``device`` (``self`` if already there)."""
        device = torch.device(device)
        if device == self.device:
            return self
        other = object.__new__(GraphOperator)
        other.num_nodes = self.num_nodes
        other.self_loops = self.self_loops
        other.edge_index = self.edge_index.to(device)
        other.edge_weight = self.edge_weight.to(device)
        other.edge_prob = self.edge_prob.to(device)
        other.degree = self.degree.to(device)
        other.has_neighbors = self.has_neighbors.to(device)
        other.num_isolated = self.num_isolated
        other._symmetric = getattr(self, "_symmetric", None)
        other._csr = {torch.float64: self._csr[torch.float64].to(device)}
        return other

    def _matrix(self, dtype: torch.dtype) -> Tensor:
        mat = self._csr.get(dtype)
        if mat is None:
            base = self._csr[torch.float64]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                mat = torch.sparse_csr_tensor(
                    base.crow_indices(), base.col_indices(), base.values().to(dtype), base.shape
                )
            self._csr[dtype] = mat
        return mat

    def propagate(self, x: Tensor) -> Tensor:
        """``P x`` for ``x`` of shape ``[num_nodes, channels]``, in ``x``'s dtype."""
        return self._matrix(x.dtype) @ x

    def laplacian(self, x: Tensor) -> Tensor:
        """``Delta x = sum_j p_ij (x_j - x_i)``: ``P x - x`` on nodes with neighbours, 0 on
        isolated nodes.  Summed from edge differences (exact for near-constant ``x``,
        exactly 0 for constant ``x``), in ``x``'s dtype."""
        src, dst = self.edge_index
        return _edge_laplacian(x, src, dst, self.edge_prob.to(x.dtype))

    def __repr__(self) -> str:
        return (
            f"GraphOperator(num_nodes={self.num_nodes}, num_edges={self.num_edges}, "
            f"self_loops={self.self_loops}, device={self.device})"
        )


GraphLike = Union[GraphOperator, Tensor]


# Edges per chunk are chosen so that one chunk of gathered rows holds at most
# this many float64 values (2 MiB): small enough to stay in cache, large enough
# that the Python loop over chunks costs nothing (measured 5x faster than 32 MiB
# chunks on a 200k-edge graph).
_CHUNK_VALUES = 1 << 18


def _edge_chunks(num_edges: int, channels: int) -> Iterator[slice]:
    step = max(1, _CHUNK_VALUES // max(channels, 1))
    for start in range(0, num_edges, step):
        yield slice(start, start + step)


def _edge_laplacian(
    x64: Tensor, src: Tensor, dst: Tensor, prob: Tensor, out: Tensor | None = None
) -> Tensor:
    r""":math:`(\Delta x)_i = \sum_{e: j \to i} p_e (x_j - x_i)` over an edge list.

    ``prob`` is ``[E]`` (one operator, result ``[n, d]``) or ``[E, h]`` (``h`` operators,
    e.g. attention heads, result ``[n, h, d]``).  Summing ``p (x_j - x_i)`` instead of
    ``P x - x`` makes the result exact for near-constant ``x`` and exactly 0 for constant
    ``x`` (``P``'s row sums are not exactly 1 in floating point); a node with no
    incoming edge gets 0.  ``out`` (zeroed here) saves the allocation.
    """
    shape = (x64.size(0),) + tuple(prob.shape[1:]) + (x64.size(1),)
    out = x64.new_zeros(shape) if out is None else out.zero_()
    heads = prob.size(1) if prob.dim() == 2 else 1
    for part in _edge_chunks(src.numel(), x64.size(1) * heads):
        s, t = src[part], dst[part]
        diff = x64[s] - x64[t]  # [chunk, d]
        if prob.dim() == 2:
            out.index_add_(0, t, diff.unsqueeze(1) * prob[part].unsqueeze(-1))
        else:
            out.index_add_(0, t, diff * prob[part].unsqueeze(1))
    return out


def as_operator(
    graph: GraphLike, num_nodes: int | None = None, device: torch.device | None = None
) -> GraphOperator:
    """Return ``graph`` as a :class:`GraphOperator` on ``device``.

    ``graph`` is either an operator (reused; its ``num_nodes`` must match) or an
    ``edge_index`` tensor (an operator is built on the spot; build one yourself
    and pass it when you measure many tensors on the same graph).
    """
    if isinstance(graph, GraphOperator):
        if num_nodes is not None and graph.num_nodes != num_nodes:
            raise ValueError(
                f"x: expected {graph.num_nodes} rows (the graph's num_nodes), received {num_nodes}"
            )
        op = graph
    elif isinstance(graph, Tensor):
        op = GraphOperator(graph if device is None else graph.to(device), num_nodes=num_nodes)
    else:
        raise TypeError(
            "graph: expected an edge_index tensor or a "
            f"GraphOperator, received {type(graph).__name__}"
        )
    return op.to(device) if device is not None else op


def validate_features(x: Tensor, name: str = "x") -> None:
    """Check that ``x`` is a 2-D floating tensor ``[num_nodes, channels]`` (no host sync)."""
    if not isinstance(x, Tensor):
        raise TypeError(
            f"{name}: expected a torch.Tensor [num_nodes, channels], received {type(x).__name__}"
        )
    if x.dim() != 2:
        raise ValueError(
            f"{name}: expected a 2-D tensor [num_nodes, channels], received shape {list(x.shape)}; "
            "for a single channel use x.unsqueeze(-1)"
        )
    if x.dtype.is_complex:
        raise ValueError(
            f"{name}: expected a real floating-point tensor, received dtype {x.dtype}; "
            "measure x.real and x.imag separately (or torch.view_as_real) instead"
        )
    if not x.dtype.is_floating_point:
        raise ValueError(f"{name}: expected a floating-point tensor, received dtype {x.dtype}")
