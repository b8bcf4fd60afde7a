"""Edge-set attention (ESA; Buterez et al., "An end-to-end attention-based approach for
learning on graphs"): the set elements are the graph's edges, not its nodes.

- **Elements.**  One element per *stored* edge: an undirected graph stored with both
  directions has two elements per undirected edge, ``(u, v)`` and ``(v, u)`` (ESA takes the
  edge list as given).  The initial state of edge ``e = (u, v)`` is
  ``Linear([h_u || h_v || a_e])`` with ``h`` the node encoder's output and ``a_e`` the
  edge attributes (``edge_attr``, when the model has ``edge_channels > 0``).
- **M blocks** (masked attention): two edges attend to each other when they share an
  endpoint (source or target, either role) -- the line-graph adjacency of
  :func:`line_graph`, a sparse list of ordered edge pairs; the aggregation core
  (:class:`~oversmooth.nn.conv.MultiHeadMessagePassing`, ``conv="esa"``) runs ``san``'s
  scorer (:class:`~oversmooth.nn.scorers.SANScorer`) on it unchanged, on either back-end,
  with the self pair added by :class:`~oversmooth.nn.conv.GraphContext` as for nodes.
- **S blocks**: attention over all edges of each graph (an edge belongs to its source
  node's graph).
- **Readout**: node ``v`` takes the mean of the states of its incident edges (source or
  target; a node without edges gets zeros), then the decoder: node logits, as every model
  of the zoo returns.

The line graph has :math:`\\sum_v c_v^2` ordered pairs before the self pairs and the pairs
counted twice (two edges sharing both endpoints) are removed, with :math:`c_v` the number
of stored edges incident to ``v``; :data:`MAX_LINE_GRAPH_PAIRS` caps it.  For Cora (10,556
stored edges, undirected max degree 168) :math:`\\sum_v c_v^2 = 4 \\sum_v \\deg(v)^2`
= 460,632 and the line graph has 428,964 ordered pairs (40.6 per edge).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import Tensor, nn

from oversmooth.graph import GraphOperator, check_edge_index
from oversmooth.nn.conv import GraphContext
from oversmooth.nn.model import MODEL_CLASSES, DepthModel, ModelConfig

__all__ = [
    "MAX_LINE_GRAPH_PAIRS",
    "EdgeEncoder",
    "EdgeSetModel",
    "edge_to_node_mean",
    "line_graph",
    "line_graph_size",
]

#: Budget of :func:`line_graph`: at most this many ordered pairs :math:`\sum_v c_v^2`
#: (about 50 bytes of int64 index work per pair while building, 2.5 GB at the cap; 16 kept per
#: pair; then the ``[pairs, heads, head_dim]`` messages of every M block).
MAX_LINE_GRAPH_PAIRS = 50_000_000


def _incidence(edge_index: Tensor, num_nodes: int) -> tuple[Tensor, Tensor]:
    """``(node, edge)`` of every incidence, sorted by node: each stored edge is incident to
    its source and its target (a self loop once)."""
    num_edges = edge_index.size(1)
    ids = torch.arange(num_edges, device=edge_index.device)
    loop = edge_index[0] == edge_index[1]
    node = torch.cat([edge_index[0], edge_index[1][~loop]])
    edge = torch.cat([ids, ids[~loop]])
    order = torch.argsort(node, stable=True)
    return node[order], edge[order]


def line_graph_size(edge_index: Tensor, num_nodes: int | None = None) -> int:
    """:math:`\\sum_v c_v^2`: the ordered edge pairs :func:`line_graph` enumerates (before
    removing self pairs and duplicates), ``c_v`` the stored edges incident to ``v``."""
    num_nodes = check_edge_index(edge_index, num_nodes)
    node, _ = _incidence(edge_index.long(), num_nodes)
    count = torch.bincount(node, minlength=num_nodes)
    return int((count * count).sum())


def line_graph(
    edge_index: Tensor, num_nodes: int | None = None, *, max_pairs: int = MAX_LINE_GRAPH_PAIRS
) -> Tensor:
    """The line graph of ``edge_index`` as an ``edge_index`` over its edges: ``[2, P]``.

    Edges ``a != b`` are adjacent when they share an endpoint (``a``'s source or target is
    ``b``'s source or target); both ordered pairs ``(a, b)`` and ``(b, a)`` are listed, each
    once, sorted by ``a`` then ``b``; no self pair ``(a, a)``.  Edges are numbered by their
    column in ``edge_index``.  Built without any ``E x E`` matrix: for each node, every
    ordered pair of its incident edges (:math:`\\sum_v c_v^2` pairs, refused above
    ``max_pairs``), then duplicates removed.

    Example:
        >>> line_graph(torch.tensor([[0, 1], [1, 2]]))  # path 0-1-2: edges 0 and 1 share 1
        tensor([[0, 1],
                [1, 0]])
    """
    num_nodes = check_edge_index(edge_index, num_nodes)
    edge_index = edge_index.long()
    num_edges = edge_index.size(1)
    node, edge = _incidence(edge_index, num_nodes)
    count = torch.bincount(node, minlength=num_nodes)  # [num_nodes] c_v
    total = int((count * count).sum())
    if total > max_pairs:
        raise ValueError(
            f"line graph: expected at most {max_pairs:,} ordered edge pairs (sum over nodes of "
            f"incident edges squared), received {total:,} for {num_edges:,} edges (largest "
            f"node: {int(count.max()):,} incident edges); use a smaller or sparser graph, or "
            "pass max_pairs"
        )
    start = torch.cumsum(count, 0) - count  # [num_nodes] first incidence of each node
    per_slot = count[node]  # [I] c_v of the incidence's node
    first = torch.repeat_interleave(edge, per_slot)  # [total]
    # the j-th copy of a slot pairs it with the j-th incident edge of the same node
    slot_start = torch.cumsum(per_slot, 0) - per_slot
    within = torch.arange(total, device=edge.device) - torch.repeat_interleave(slot_start, per_slot)
    second = edge[torch.repeat_interleave(start[node], per_slot) + within]
    keep = first != second
    key = torch.unique(first[keep] * max(num_edges, 1) + second[keep])  # sorted
    return torch.stack([key // max(num_edges, 1), key % max(num_edges, 1)])


def edge_to_node_mean(states: Tensor, edge_index: Tensor, num_nodes: int) -> Tensor:
    """Each node's mean over the states ``[E, d]`` of its incident edges (source or
    target; a self loop counted once): ``[num_nodes, d]``, zeros for a node without edges."""
    node, edge = _incidence(edge_index.long(), num_nodes)
    out = states.new_zeros(num_nodes, states.size(1)).index_add_(0, node, states[edge])
    count = torch.bincount(node, minlength=num_nodes).clamp_min(1).to(states.dtype)
    return out / count.unsqueeze(1)


class EdgeEncoder(nn.Module):
    """Node encoder, then the edge states ``Linear([h_src || h_dst || edge_attr])``."""

    def __init__(self, nodes: nn.Module, hidden: int, edge_channels: int) -> None:
        super().__init__()
        self.nodes = nodes
        self.edge_channels = edge_channels
        self.lift = nn.Linear(2 * hidden + edge_channels, hidden)

    def forward(self, x: Tensor, edge_index: Tensor, edge_attr: Tensor | None = None) -> Tensor:
        h = self.nodes(x)  # [num_nodes, hidden]
        parts = [h[edge_index[0]], h[edge_index[1]]]
        if self.edge_channels:
            if edge_attr is None:
                raise ValueError(
                    f"edge_attr: expected [{edge_index.size(1)}, {self.edge_channels}] (the "
                    f"model has edge_channels={self.edge_channels}), received None"
                )
            attr = edge_attr.view(-1, 1) if edge_attr.dim() == 1 else edge_attr
            if attr.shape != (edge_index.size(1), self.edge_channels):
                raise ValueError(
                    f"edge_attr: expected shape [{edge_index.size(1)}, {self.edge_channels}], "
                    f"received {list(edge_attr.shape)}"
                )
            parts.append(attr.to(h.dtype))
        elif edge_attr is not None:
            raise ValueError(
                "edge_attr: the model was built with edge_channels=0; build it with "
                "edge_channels=<attribute size> or pass edge_attr=None"
            )
        return self.lift(torch.cat(parts, dim=1))  # [num_edges, hidden]


class EdgeSetModel(DepthModel):
    """A :class:`~oversmooth.nn.DepthModel` whose blocks run over the edges (``conv="esa"``).

    Same call as every model, ``model(x, edge_index, batch=None, *, edge_attr=None,
    skip=None)``, same node logits ``[num_nodes, out_channels]``; the block states (what a
    :class:`~oversmooth.probe.Probe` records) are edge states ``[num_edges, hidden]``, so
    energies are measured on :meth:`state_graph`, the line graph.  ``edge_weight`` is
    refused: pass weights as a one-channel ``edge_attr``.
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__(config)
        self.encoder = EdgeEncoder(  # type: ignore[assignment]  # the node encoder inside
            self.encoder, config.hidden, config.edge_channels
        )

    def context(
        self,
        edge_index: Tensor,
        num_nodes: int,
        batch: Tensor | None = None,
        edge_weight: Tensor | None = None,
    ) -> GraphContext:
        """The line-graph context of the blocks (its ``batch``: the graph of each edge)."""
        check_edge_index(edge_index, num_nodes)
        if edge_weight is not None:
            raise ValueError(
                "edge_weight: conv='esa' attends over edges and takes no edge weights; pass "
                "them as edge_attr of a model built with edge_channels=1"
            )
        if edge_index.size(1) == 0:
            raise ValueError("edge_index: conv='esa' needs at least one edge, received none")
        edge_batch = None if batch is None else batch[edge_index[0]]
        return GraphContext.build(
            line_graph(edge_index, num_nodes),
            edge_index.size(1),
            edge_batch,
            dtype=self.decoder.weight.dtype,
        )

    def state_graph(self, graph: GraphOperator) -> GraphOperator:
        """The operator of the block states, given the input graph's: its line graph (unit
        weights; the batch vector of a batch mapped to the edges by their source)."""
        edge_index = graph.edge_index
        if graph.self_loops:  # the probe's added loops are no edges of the model's input
            n = graph.num_nodes
            edge_index = edge_index[:, : edge_index.size(1) - n]
        batch = None if graph.batch is None else graph.batch[edge_index[0]]
        return GraphOperator(
            line_graph(edge_index, graph.num_nodes), num_nodes=edge_index.size(1), batch=batch
        )

    def forward(
        self,
        x: Tensor,
        edge_index: Tensor,
        batch: Tensor | None = None,
        *,
        edge_weight: Tensor | None = None,
        edge_attr: Tensor | None = None,
        skip: Iterable[int] | None = None,
    ) -> Tensor:
        skipped = self.check_input(x, skip)
        ctx = self.context(edge_index, x.size(0), batch, edge_weight)
        # the encoder's output [num_edges, hidden] is handed over, not kept in this frame
        dtype = self.decoder.weight.dtype
        h = self.run_blocks(self.encoder(x.to(dtype), edge_index, edge_attr), ctx, skip=skipped)
        return self.decoder(edge_to_node_mean(h, edge_index, x.size(0)))


MODEL_CLASSES["edges"] = EdgeSetModel
