"""Probes: record per-layer measures of any model while it runs.

``Probe`` attaches forward hooks to an ordered list of layers inside a ``with``
block and removes them on exit, also when the forward raises.  Each hook
measures the layer's output on the model's device, in float64, and keeps only
0-d tensors: no host synchronisation per layer, and memory that does not grow
with depth (the previous layer's state is kept for the metrics measured against it:
``mean_cosine_similarity``, ``angular_distance``, ``relative_update``).  Values reach the host
once, in :meth:`Probe.to_frame`.

Which state is layer ``k`` (one convention for every model): layer 0 is the
*input* of the first recorded layer module, layer ``k`` the output of the
``k``-th (``capture="output"``) or the residual stream after block ``k``
(``capture="residual"``):

- oversmooth models (:class:`~oversmooth.nn.DepthModel`): layer 0 is the
  encoder output (the input of ``model.blocks[0]``), layer ``k`` the output of
  block ``k`` (``model.blocks[k-1]``).
- PyG ``BasicGNN`` models (``GCN``, ``GAT``, ``GraphSAGE``, ``GIN``, ``PNA``,
  ``EdgeCNN``): layer 0 is the input of the first convolution, layer ``k`` the
  output of ``model.convs[k-1]``, *before* the activation, norm and dropout
  that BasicGNN applies between convolutions (``capture="residual"``: the state
  after them, i.e. the input of the next convolution).
- ``layers=[m0, m1, ...]``: layer 0 is the input of ``m0``, layer ``k`` the output of ``m{k-1}``
  when the forward calls them in that order (in any case: of the ``k``-th call among them).
- skips in ``forward`` (``h = h + conv(norm(h))`` over ``convs``/``norms`` ModuleLists, e.g.
  a Pre-LN ``TransformerConv`` stack) with ``capture="residual"``: layer ``k`` is the stream
  ``h`` after block ``k`` -- the input of block ``k + 1``'s pre-norm (the conv's input when no
  norm runs before it), and after the last block the input of a final norm, else the model's
  output (see :class:`Probe`).
- models without one module per layer: ``Probe(None, graph)`` and ``probe.record(k, x)``.

Layers are counted in the order the forward *calls* them, not by their place in the list:
layer ``k`` is the output of the ``k``-th layer call (the stream entering the ``k + 1``-th with
``capture="residual"`` between plain layers).  A stack run in another order is measured in the
order it ran, and one module listed for several layers (weight tying, ``ModuleList([conv] *
L)``) gives one row per call.  A layer module that the forward does not call, or calls a
different number of times than the others, is reported: a warning at the end of the forward
naming it, and ``frame.attrs["gaps"]``; calls beyond the ``L`` layers are not recorded (a note
says so).  A layer whose forward calls only its ``conv`` (PyG's DeeperGCN
example runs ``layers[0].conv``) is read from that conv.

Every forward pass of the model is a ``step``; per-graph values on a PyG ``Batch``.
See :class:`Probe`.

Example:
    >>> import torch
    >>> from oversmooth import build_model
    >>> from oversmooth.data import karate
    >>> data = karate()
    >>> model = build_model("postln", depth=4, in_channels=data.num_features, out_channels=2)
    >>> with Probe(model, data.edge_index) as probe, torch.no_grad():
    ...     _ = model(data.x, data.edge_index)
    >>> frame = probe.to_frame()  # one row per layer, 0 (the input to the first block) to 4
    >>> list(frame.columns[:4]), len(frame)
    (['layer', 'laplacian_energy', 'dirichlet_energy', 'relative_energy'], 5)
"""

from __future__ import annotations

import math
import os
import sys
import tempfile
from collections import Counter
import warnings
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeGuard, cast
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

import torch
from torch import Tensor, nn

from oversmooth.config import check_seed
from oversmooth.graph import (
    GraphOperator,
    as_graph,
    by_rows,
    dense_to_rows,
    hetero_hint,
    is_sparse_matrix,
)
from oversmooth.metrics import kernels as K
from oversmooth.metrics.energies import relative_energy
from oversmooth.metrics.registry import (
    DEFAULT_METRICS,
    METRICS,
    NOT_PER_LAYER,
    Metric,
    available_metrics,
    between_kernel,
    check_metrics,
    layer_kernel,
)
from oversmooth.metrics.state import KEEP_VALUES, LayerState, Workspace
from oversmooth.nn.hooks import AttentionWeights, HookPoint
from oversmooth.nn.model import DepthModel

if TYPE_CHECKING:
    import pandas as pd
    from numpy.typing import NDArray

__all__ = [
    "Probe",
    "Metric",
    "METRICS",
    "NOT_PER_LAYER",
    "DEFAULT_METRICS",
    "available_metrics",
    "check_metrics",
    "find_layers",
]


_CAPTURES = ("output", "residual")
_LAYER_LISTS = ("convs", "layers", "blocks")  # ModuleList attributes searched, in this order


def _named_list(model: nn.Module, names: Sequence[str]) -> tuple[str, list[nn.Module]] | None:
    for name in names:
        value = getattr(model, name, None)
        if isinstance(value, nn.ModuleList) and len(value):
            return name, list(value)
    return None


def _module_list(model: nn.Module, names: Sequence[str]) -> list[nn.Module] | None:
    named = _named_list(model, names)
    return None if named is None else named[1]


def find_layers(model: nn.Module, capture: str = "output") -> tuple[list[nn.Module], bool]:
    """The modules whose outputs are layers ``1..L`` and whether they are *blocks* (their
    outputs are the residual stream already); layer 0 is always the input of the first.

    ``capture="output"``: an oversmooth ``DepthModel``'s blocks; a PyG ``BasicGNN``'s
    ``convs``; else the first non-empty ``nn.ModuleList`` among ``model.convs``,
    ``model.layers``, ``model.blocks``, less its weightless per-node modules (activations,
    dropout) where it holds others.  ``capture="residual"``: a ``DepthModel``'s blocks,
    a ``model.blocks`` ModuleList, or PyG ``DeepGCNLayer`` modules (outputs are the stream);
    failing those, the ``output`` layers, whose *inputs* carry the stream (see :class:`Probe`).
    """
    if capture not in _CAPTURES:
        raise ValueError(f"capture: expected one of {', '.join(_CAPTURES)}, received {capture!r}")
    if isinstance(model, DepthModel):
        return list(model.blocks), True
    if capture == "residual":
        blocks = _module_list(model, ["blocks"])
        if blocks is not None:
            # a readout MLP named blocks beside the GNN's convs was measured as the stream,
            # silently (an audit): the energy of its two linear maps read as oversmoothing
            _check_passes_messages(model, blocks)
            return blocks, True
        try:
            from torch_geometric.nn import DeepGCNLayer
        except ImportError:  # pragma: no cover - torch_geometric is a dependency
            DeepGCNLayer = ()
        deep = [m for m in model.modules() if isinstance(m, DeepGCNLayer)]
        if deep:
            return deep, True
    try:
        from torch_geometric.nn.models.basic_gnn import BasicGNN
    except ImportError:  # pragma: no cover - torch_geometric is a dependency
        BasicGNN = ()
    if isinstance(model, BasicGNN):
        return list(model.convs), False
    found = _module_list(model, _LAYER_LISTS)
    if found is not None:
        _check_passes_messages(model, found)
        return _passing(found), False
    hetero = (
        " (a to_hetero model: probe one node type, see Probe)" if _is_hetero_model(model) else ""
    )
    raise ValueError(
        f"layers: cannot find the layers of a {type(model).__name__} automatically{hetero}; "
        "pass layers=[module, ...] (layer k = output of module k), or record the states "
        "yourself: Probe(None, graph) and probe.record(k, x)"
    )


def _maps_nodes_alone(module: nn.Module) -> bool:
    """Whether ``module`` and everything in it maps each node on its own (an activation, a
    norm, dropout, a Linear, an MLP of them): it passes no messages.  ``MultiheadAttention``
    lives among torch's activations and mixes every node (a review)."""
    pointwise = _pointwise_types()
    activation = "torch.nn.modules.activation"
    return all(
        isinstance(sub, pointwise)
        or (type(sub).__module__ == activation and not isinstance(sub, nn.MultiheadAttention))
        for sub in module.modules()
    )


def _bare_pointwise(module: nn.Module) -> bool:
    """A per-node module without weights (an activation, dropout, an identity): no layer of
    its own in any stack."""
    return _maps_nodes_alone(module) and next(module.parameters(), None) is None


def _passing(found: list[nn.Module]) -> list[nn.Module]:
    """The layers of a module list found by its name: all but its weightless per-node modules
    where it holds some beside others (``ModuleList([conv, ReLU(), conv, ReLU()])``, whose
    ReLUs were rows of their own: twice the depth, every rate per layer halved, no word; an
    audit).  Modules with weights stay, per-node or not: a transformer's FFN sublayers, each
    with its norm in a list of 2L norms, are layers of the stream (dropping them broke
    ``capture="residual"`` on such stacks: a review).  :meth:`Probe` notes what was left out."""
    kept = [m for m in found if not _bare_pointwise(m)]
    return kept if kept else found


def _outside_passing(model: nn.Module, layers: Sequence[nn.Module]) -> list[tuple[str, nn.Module]]:
    """PyG message-passing modules of ``model`` outside ``layers`` (each with its name): a
    ``conv_in`` before the list found, a ``conv_out`` after it."""
    try:
        from torch_geometric.nn import MessagePassing
    except ImportError:  # pragma: no cover - torch_geometric is a dependency
        return []
    inside = {id(sub) for m in layers for sub in m.modules()}
    # (named_modules yields a module registered under two names once)
    outside = [
        (name, sub)
        for name, sub in model.named_modules()
        if isinstance(sub, MessagePassing) and id(sub) not in inside
    ]
    # one inside another (a conv wrapping a conv): the outer one is the call
    held = {id(s) for _, m in outside for s in m.modules() if s is not m}
    return [(name, m) for name, m in outside if id(m) not in held]


def _check_passes_messages(model: nn.Module, found: list[nn.Module]) -> None:
    """Refuse a module list found by its name (``model.layers``) whose modules all map each
    node on its own (an activation or :func:`_pointwise_types`: an MLP) while the model has
    PyG message passing elsewhere: an APPNP model's MLP in ``model.layers``, propagated after
    them by one ``APPNP`` module, was probed as two GNN layers (the fall of the energy through
    two linear maps, the ten propagation steps and the output never seen), with no word."""
    if not all(_maps_nodes_alone(m) for m in found):
        # message passing that is not a PyG MessagePassing (DenseGCNConv, attention written
        # with torch_geometric.utils.softmax and index_add_, oversmooth's own blocks)
        return
    passing = _outside_passing(model, found)
    if not passing:  # no PyG message passing anywhere: nothing says the list is not the layers
        return
    kinds = ", ".join(sorted({type(m).__name__ for m in found}))
    where = ", ".join(f"{type(sub).__name__} (model.{name})" for name, sub in passing[:3])
    raise ValueError(
        f"layers: the module list found ({kinds}) maps each node on its own, while {where} "
        "passes messages outside it: these are not the GNN's layers; pass layers=[module, ...] "
        "(layer k = the output of module k), or, for a module that propagates several steps "
        "inside one call (APPNP), record the states yourself: Probe(None, graph) and "
        "probe.record(k, x)"
    )


#: PyG layers whose propagation steps per call are kept under another name than ``K``
STEP_ATTRIBUTES = {
    "GatedGraphConv": "num_layers",
    "ARMAConv": "num_layers",
    "AntiSymmetricConv": "num_iters",
    "MixHopConv": "powers",
}


def _steps_of(module: nn.Module) -> tuple[str, int] | None:
    """The steps ``module`` (a PyG layer) propagates in one call, above 1, with the name it
    keeps them under; else None."""
    name = STEP_ATTRIBUTES.get(type(module).__name__, "K")
    value = getattr(module, name, None)
    if name == "powers" and isinstance(value, (list, tuple)) and value:
        name, value = "largest power", max(value)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 1:
        return None
    return name, int(value)


def _propagation_steps(modules: Sequence[nn.Module]) -> str | None:
    """The note on layers that each propagate several steps in one call (``SGConv(K)``,
    ``TAGConv(K)``, ``APPNP(K)``: an integer ``K`` above 1; ``GatedGraphConv`` and
    ``ARMAConv``'s ``num_layers``, ``AntiSymmetricConv``'s ``num_iters``, ``MixHopConv``'s
    largest power), also inside a layer that wraps one: a row is one call, so depth, decades
    and rates are per layer of that many steps (audits: no word said so).  ``ChebConv``
    keeps no ``K`` and is not named."""
    # a PyG layer's module is imported already: the zoo's own models import no PyG for this
    passing = getattr(sys.modules.get("torch_geometric.nn"), "MessagePassing", None)
    if passing is None:
        return None
    steps: dict[str, str] = {}
    for layer in distinct(modules):
        for m in layer.modules():
            pyg = type(m).__module__.startswith("torch_geometric.")
            # (AntiSymmetricConv is a plain Module around a MessagePassing)
            listed = pyg and type(m).__name__ in STEP_ATTRIBUTES
            found = _steps_of(m) if isinstance(m, passing) or listed else None
            if found is not None:
                steps[type(m).__name__] = f"{found[0]}={found[1]}"
    if not steps:
        return None
    named = ", ".join(f"{name} with {what}" for name, what in sorted(steps.items()))
    return (
        f"the layers propagate several steps in one call ({named}): each row is one call, "
        "so depths, decades and rates are per layer of that many steps, not per "
        "propagation step"
    )


#: the modules that map each node on its own: an MLP made of them passes no messages
_POINTWISE = (
    nn.Linear,
    nn.LazyLinear,
    nn.Identity,
    nn.Dropout,
    nn.AlphaDropout,
    nn.LayerNorm,
    nn.RMSNorm,
    nn.GroupNorm,  # groups of one node's channels
    nn.BatchNorm1d,
    nn.Sequential,
    nn.ModuleList,
)


def _pointwise_types() -> tuple[type, ...]:
    """The module types that map each node's features on its own (a Linear, a norm, dropout,
    containers, PyG's ``MLP`` and ``Linear``; activations are told by their module), so that
    a list of such modules passes no messages between nodes."""
    try:
        from torch_geometric.nn import MLP
        from torch_geometric.nn.dense.linear import Linear as PygLinear
    except ImportError:  # pragma: no cover - torch_geometric is a dependency
        return _POINTWISE
    return (*_POINTWISE, MLP, PygLinear)


def _edge_index_of(graph: object) -> Tensor | None:
    """The ``edge_index`` a Probe was given: the tensor itself, or a ``Data``'s (not a
    :class:`GraphOperator`'s, whose edges may carry the self loops it added)."""
    if isinstance(graph, GraphOperator):
        return None
    index = graph if isinstance(graph, Tensor) else getattr(graph, "edge_index", None)
    if not isinstance(index, Tensor) or index.dim() != 2 or index.size(0) != 2:
        return None
    if index.is_floating_point() or index.is_complex() or index.dtype == torch.bool:
        return None
    return index


def _same_edge_list(a: Tensor, b: Tensor) -> bool:
    """Whether two ``[2, E]`` edge indices hold the same directed edges (in any order, and
    with or without self loops: a Probe with ``self_loops=True`` given the bare edges measures
    the graph a forward given ``add_self_loops(edge_index)`` propagates on; a review)."""
    if a is b:
        return True
    a = a.to(b.device)  # (the Probe's graph on the CPU, the model's on a GPU: the same edges)
    if a.shape == b.shape and torch.equal(a, b):
        return True
    a, b = a[:, a[0] != a[1]], b[:, b[0] != b[1]]
    if a.shape != b.shape:
        return False
    n = int(max(int(a.max()), int(b.max())) + 1) if a.numel() else 1
    key_a, key_b = (a[0] * n + a[1]).sort().values, (b[0] * n + b[1]).sort().values
    return bool(torch.equal(key_a, key_b))


def _plain_weights(index: Tensor | None, weight: Tensor) -> bool:
    """Whether edge weights ``[E]`` on the edges ``index`` ``[2, E]`` leave the unweighted
    graph's energies as they are: every weight 1, or GCN's symmetric normalisation of these
    very edges, ``1 / sqrt(deg(src) deg(dst))`` with ``deg`` the in-degree ``gcn_norm`` counts
    (self loops included): what ``GCNConv`` computes for itself when not given them, so
    measuring the graph without them is what a GCN that normalises itself is measured on
    (a note on GCNII's precomputed ``gcn_norm`` weights, and on weights of 1, said the
    energies were of the unweighted graph as if they should not be: an audit).  Without
    ``index``, only weights of 1."""
    w = weight.detach().to(torch.float64)
    if bool((w == 1).all()):  # (no weights at all weight nothing either)
        return True
    if index is None or w.numel() != index.size(1):
        return False
    src, dst = index[0].long(), index[1].long()
    n = int(index.max()) + 1
    deg = torch.zeros(n, dtype=torch.float64, device=w.device).index_add_(
        0, dst.to(w.device), torch.ones_like(w)
    )
    expected = (deg[src.to(w.device)] * deg[dst.to(w.device)]).rsqrt()
    # float32's rounding at least: a sparse matrix's values are read back in float64
    return bool(torch.allclose(w, expected, rtol=64 * torch.finfo(torch.float32).eps, atol=0.0))


def _layer_graph_notes(graph: object, unweighted: bool, args: tuple, kwargs: dict) -> list[str]:
    """Notes on the graph the first layer call of a first forward propagates on, where the
    model's own arguments did not show it (audits: ``to_undirected`` or ``dropout_edge``
    inside the forward, GCNII's ``gcn_norm`` weights of ``E + n`` entries, were measured on
    the Probe's graph with no word): its ``[2, E']`` integer argument is not the Probe's
    ``edge_index``, or (the Probe's graph unweighted) a floating ``[E']`` argument beside it
    weights those edges."""
    values, inputs = (*args, *kwargs.values()), graph_inputs(args, kwargs)
    notes = []
    other = _other_edges_note(graph, inputs, values)
    if other is not None:
        notes.append(other.replace("the forward's [2, E]", "the first layer's [2, E]", 1))
    mine = _edge_index_of(graph)
    for value in values:
        entries = _matrix_entries(getattr(value, "adj_t", value))
        if entries is None or mine is None:
            continue
        # adj_t[dst, src] as PyG's layers read it: its edges run col -> row
        rows, cols = entries.indices()
        if not _same_edge_list(mine, torch.stack([cols, rows])):
            notes.append(
                f"the first layer's sparse adjacency ({entries.indices().size(1)} entries, read "
                f"as adj_t) is not the edge_index the Probe was given ({mine.size(1)} edges), "
                "and every row is measured on the Probe's: give the Probe the graph the layers "
                "propagate on (Probe(model, Data(adj_t=adj_t, num_nodes=n)))"
            )
        elif unweighted and not _plain_weights(entries.indices().flip(0), entries.values()):
            notes.append(
                "the first layer's sparse adjacency weights its edges (its values differ: a "
                "normalisation such as gcn_norm's, or edge weights), while the Probe's graph "
                "has none: the energies are of the unweighted graph the Probe was given"
            )
        break
    index = [t for t in inputs if t.dim() == 2 and t.size(0) == 2]
    if unweighted and index:
        edges = int(index[0].size(1))
        if any(
            isinstance(v, Tensor)
            and v.is_floating_point()
            and v.dim() == 1
            and v.numel() == edges
            and not _plain_weights(index[0], v)
            for v in values
        ):
            notes.append(
                f"the first layer takes a floating [{edges}] tensor beside its edge_index, "
                "while the Probe's graph has no edge weights: if the layers weight their edges "
                "with it (a normalisation such as gcn_norm's included), the energies are of "
                "the unweighted graph the Probe was given"
            )
    return notes


def _other_edges_note(graph: object, inputs: Sequence[Tensor], values: tuple) -> str | None:
    """The note on a first forward whose ``edge_index`` is not the one the Probe was given
    (the rows are measured on the Probe's graph: DropEdge in a training step, a rewired graph
    were measured on the edges the model did not use, with no word; an audit).  None where the
    forward takes a sparse adjacency (``adj_t``): its ``[2, K]`` integer arguments are then
    something else, such as link prediction's ``edge_label_index`` (a review)."""
    mine = _edge_index_of(graph)
    theirs = [t for t in inputs if t.dim() == 2 and t.size(0) == 2]
    if mine is None or not theirs or any(_sparse_argument(v) for v in values):
        return None
    if any(_same_edge_list(mine, t) for t in theirs):
        return None
    columns = ", ".join(str(t.size(1)) for t in theirs)
    return (
        f"the forward's [2, E] integer argument ({columns} columns, read as its edge_index) is "
        f"not the edge_index the Probe was given ({mine.size(1)} edges), and every row is "
        "measured on the Probe's: give the Probe the graph the model propagates on (if the "
        "forward drops or rewires edges on purpose, the energies are of the graph given)"
    )


def _sparse_argument(value: object) -> bool:
    """A forward argument that is a sparse adjacency (a torch sparse tensor, a torch_sparse
    ``SparseTensor``) or a ``Data`` holding one as ``adj_t``."""
    return is_sparse_matrix(value) or is_sparse_matrix(getattr(value, "adj_t", None))


def edge_states(model: nn.Module | None) -> bool:
    """An oversmooth model whose block states are edge states (``conv="esa"``)."""
    from oversmooth.registry import CONVS

    return isinstance(model, DepthModel) and CONVS[model.config.conv].elements == "edges"


def _is_hetero_model(model: nn.Module) -> bool:
    """A model made by ``torch_geometric.nn.to_hetero`` (a ``GraphModule`` whose submodules
    are ``ModuleDict``s keyed by node or edge types)."""
    return type(model).__name__ == "GraphModule" and any(
        isinstance(m, nn.ModuleDict) for m in model.children()
    )


def _shape(output: object) -> str:
    return f"shape {list(output.shape)}" if isinstance(output, Tensor) else type(output).__name__


def _is_adjacency(graph: Tensor) -> bool:
    """A sparse, floating or bool tensor is an adjacency matrix, not an ``edge_index``."""
    return (
        graph.layout != torch.strided or graph.dtype.is_floating_point or graph.dtype == torch.bool
    )


def _same_edges(a: Tensor, b: Tensor) -> bool:
    """Whether two coalesced sparse COO matrices have the same entries (values equal to a
    relative 1e-6: float32 weights symmetric by construction differ in their last bits)."""
    return (
        a.shape == b.shape
        and torch.equal(a.indices(), b.indices())
        and torch.allclose(a.values(), b.values(), rtol=1e-6, atol=0.0)
    )


def _coalesced(index: Tensor, weight: Tensor, n: int) -> Tensor:
    return torch.sparse_coo_tensor(index, weight.to(torch.float64), (n, n)).coalesce()


def _directed(op: GraphOperator) -> bool:
    """Whether ``op``'s graph differs from its reverse (weights summed over repeated edges)."""
    n = op.num_nodes
    forward = _coalesced(op.edge_index, op.edge_weight, n)
    return not _same_edges(forward, _coalesced(op.edge_index.flip(0), op.edge_weight, n))


def _matrix_entries(matrix: object) -> Tensor | None:
    """A sparse matrix (torch sparse or ``SparseTensor``) as a coalesced float64 COO tensor
    read ``A[row, col]``; None for anything else or one that cannot be read as square."""
    from oversmooth.graph import _sparse_edges

    if not is_sparse_matrix(matrix):
        return None
    try:
        index, weight, n = _sparse_edges(matrix, transposed=False)
    except (ValueError, RuntimeError, TypeError):
        return None
    return _coalesced(index, weight, n)


def _dense_matrix(graph: object) -> TypeGuard[Tensor]:
    """A dense ``[N, N]`` adjacency (floating or bool, strided)."""
    return (
        isinstance(graph, Tensor)
        and graph.layout == torch.strided
        and graph.dim() == 2
        and graph.size(0) == graph.size(1)
        and _is_adjacency(graph)
    )


def _graph_data(value: object) -> bool:
    """A PyG ``Data``/``Batch`` (anything with an ``edge_index`` and ``num_nodes``)."""
    return isinstance(getattr(value, "edge_index", None), Tensor) and hasattr(value, "num_nodes")


def _batch_vector(value: object, nodes: int | None) -> int:
    """The number of graphs of ``value`` when it reads as a ``batch`` vector of ``nodes``
    entries (a 1-D integer tensor from 0 in steps of 0 or 1, with a repeat: a node index never
    repeats), else 0.  Without the node count nothing reads as one: a sorted ``edge_type`` of
    RGCN (length E) was taken for a batch of graphs (a review)."""
    if not (
        isinstance(value, Tensor)
        and value.dim() == 1
        and value.numel() > 1
        and value.numel() == nodes
        and value.device.type != "meta"
        and not value.is_floating_point()
        and value.dtype != torch.bool
    ):
        return 0
    steps = value.diff()
    if int(value[0]) != 0 or not bool(((steps == 0) | (steps == 1)).all()):
        return 0
    return int(value[-1]) + 1 if bool((steps == 0).any()) else 0


def _sample_note(value: object) -> str | None:
    """The note on a ``NeighborLoader`` sample (a ``Data`` with ``n_id`` and ``batch_size``),
    else None."""
    seeds, n_id = getattr(value, "batch_size", None), getattr(value, "n_id", None)
    if not (_graph_data(value) and isinstance(seeds, int) and isinstance(n_id, Tensor)):
        return None
    if seeds >= n_id.numel():  # every node a seed: no outer hop
        return None
    return (
        f"the graph is a NeighborLoader sample ({seeds} seed nodes of {n_id.numel()}): the "
        "energies are of the sampled subgraph, whose outer-hop nodes keep only their edges "
        "toward the seeds, not of the whole graph; run the model on the whole graph to "
        "measure it"
    )


def _normalised_graph_note(graph: object, edge_weight: Tensor | None) -> str | None:
    """The note on a Probe graph whose edge weights are GCN's symmetric normalisation of its
    edges (``gcn_norm``, ``T.GCNNorm``, as PyG's GCNII example prepares Cora): its energies
    are of that weighted graph, self loops weighted in, not of the graph (2-5x lower on Cora
    than the same GCN measured on its ``edge_index``, with no word: an audit); None
    otherwise."""
    index, weight = _edge_index_of(graph), edge_weight
    if weight is None and index is not None:
        weight = getattr(graph, "edge_weight", None)
    if index is None or not isinstance(weight, Tensor):
        adj = graph if is_sparse_matrix(graph) else getattr(graph, "adj_t", None)
        entries = _matrix_entries(adj)
        if entries is None:
            return None
        # adj_t[dst, src], as PyG stores it; a bare matrix is read A[src, dst]
        index = entries.indices() if adj is graph else entries.indices().flip(0)
        weight = entries.values()
    if not weight.is_floating_point() or weight.dim() != 1 or bool((weight == 1).all()):
        return None
    if not _plain_weights(index, weight):
        return None
    return (
        "the graph's edge weights are GCN's symmetric normalisation of its edges (gcn_norm, "
        "T.GCNNorm: 1/sqrt(deg(src) deg(dst)), self loops included), so the energies are of "
        "that weighted graph, not of the graph itself; to measure the graph, as a GCNConv "
        "that normalises for itself is measured, give the Probe the unweighted graph: its "
        "edge_index from before T.GCNNorm, or adj_t's pattern with every value 1"
    )


def _unseen_inputs(
    graph: object, batch: Tensor | None, edges: int | None, values: tuple
) -> list[str]:
    """Notes on what the first forward's arguments hold that the Probe's graph does not say
    (audits; each was measured without a word):

    * a floating ``[E]`` tensor beside a Probe graph of ``edges`` edges without weights
      (``edges`` None: it has weights), as an argument or inside a ``Data`` argument
      (``forward(data)`` reading ``data.edge_weight``): weights the model may use, the Probe
      does not;
    * a ``NeighborLoader`` sample (``n_id`` and ``batch_size``): the energies are the sampled
      subgraph's, whose outer-hop nodes keep only their edges toward the seeds (the input
      features of a 64-seed sample of Cora read 4.4 against 21.1 on the whole graph);
    * a ``batch`` vector of several graphs, with a Probe graph without one: the graphs are
      measured as one (14.2 against their mean 11.8);
    * a directed dense adjacency, the Probe's own graph, taken by the forward: read as
      ``A[src, dst]`` (as ``to_dense_adj`` builds it), while PyG's dense layers (``adj @ x``)
      send messages the other way (a directed ``DenseGCNConv``: 0.161 against 0.076)."""
    notes = []
    inner = [
        getattr(value, name, None)
        for value in values
        if _graph_data(value)
        for name in ("edge_weight", "edge_attr")
    ]
    mine = _edge_index_of(graph)
    if edges is not None and any(
        isinstance(value, Tensor)
        and value.is_floating_point()
        and value.dim() in (1, 2)
        and value.size(0) == edges
        and value.numel() == edges
        and not _plain_weights(mine, value.reshape(-1))
        for value in (*values, *inner)
    ):
        notes.append(
            f"the forward takes a floating [{edges}] tensor beside the graph, while the "
            "Probe's graph has no edge weights: if the model weights its edges with it, "
            "the energies are of the unweighted graph (pass edge_weight= to measure the "
            "weighted one)"
        )
    notes += [note for note in map(_sample_note, values) if note is not None][:1]
    given = batch is not None or isinstance(getattr(graph, "batch", None), Tensor)
    if not given and not (isinstance(graph, Tensor) and graph.dim() == 3):
        # the node count: a Data's own, else the features' rows (the first floating 2-D
        # argument); a vector of another length is no batch vector
        rows = [
            v.size(0)
            for v in values
            if isinstance(v, Tensor) and v.is_floating_point() and v.dim() == 2
        ][:1]
        found = [
            _batch_vector(getattr(v, "batch", None), v.num_nodes) for v in values if _graph_data(v)
        ]
        found += [_batch_vector(v, rows[0] if rows else None) for v in values]
        graphs = max(found, default=0)
        if graphs > 1:
            notes.append(
                f"the forward takes what reads as a batch vector of {graphs} graphs (0, 0, ..., "
                f"{graphs - 1} over the nodes), which the Probe was not given: if it is one, the "
                f"rows measure the {graphs} graphs as one graph, not each graph (averaged); "
                "pass Probe(model, edge_index, batch=batch), or the Batch itself"
            )
    if _dense_matrix(graph) and any(
        isinstance(v, Tensor) and (v is graph or (_dense_matrix(v) and torch.equal(v, graph)))
        for v in values
    ):
        if not torch.equal(graph, graph.transpose(0, 1)):
            notes.append(
                "the Probe reads the dense adjacency the model takes as A[src, dst] (messages "
                "from row to column, as to_dense_adj builds it), and it is not symmetric: a "
                "layer that computes adj @ x (PyG's dense layers) sends them from column to "
                "row, over the reversed graph; for such a model pass "
                "Probe(model, adj.transpose(-2, -1))"
            )
    return notes


def first_tensor(output: object) -> Tensor:
    """The layer state in a module's output or arguments (what a hook receives): the tensor
    itself, or the first element of a tuple or list (e.g. ``(x, attention)`` of
    ``return_attention_weights``); ``TypeError`` saying what to do for anything else."""
    if isinstance(output, Tensor):
        return output
    if isinstance(output, (tuple, list)) and output and isinstance(output[0], Tensor):
        return output[0]  # e.g. (x, attention) from return_attention_weights
    if isinstance(output, dict):
        raise TypeError(
            "layer output: received a dict (a heterogeneous model); probe one node type: "
            "pass layers=[...] of a homogeneous sub-model or call probe.record(k, x[node_type])"
        )
    raise TypeError(
        f"layer output: expected a tensor [num_nodes, channels], received {type(output).__name__}"
    )


def inputs_of(args: tuple, kwargs: dict) -> tuple:
    """A module's positional arguments, or, for a call by keyword (``conv(x=h,
    edge_index=ei)``, where a hook's ``args`` is empty), its keyword values with ``x`` first:
    what :func:`first_tensor` reads the state from."""
    if args or not kwargs:
        return args
    return tuple(v for key, v in sorted(kwargs.items(), key=lambda item: item[0] != "x"))


def input_hook(fn: Callable[[nn.Module, tuple], None]) -> Callable[[nn.Module, tuple, dict], None]:
    """``fn(module, args)`` as a forward pre-hook registered ``with_kwargs=True``: it sees the
    keyword arguments too (:func:`inputs_of`)."""

    def hook(module: nn.Module, args: tuple, kwargs: dict) -> None:
        fn(module, inputs_of(args, kwargs))

    return hook


def _is_norm(module: nn.Module) -> bool:
    """A normalisation layer: torch's LayerNorm, GroupNorm and batch/instance norms, PyG's norms
    and any class whose name ends in ``Norm``."""
    norms = (nn.LayerNorm, nn.GroupNorm, nn.modules.batchnorm._NormBase)
    return isinstance(module, norms) or type(module).__name__.endswith("Norm")


def _holds_norm(module: nn.Module) -> bool:
    """``module`` is, or holds, a normalisation layer (:func:`_is_norm`)."""
    return any(_is_norm(m) for m in module.modules())


def transparent(module: nn.Module) -> bool:
    """A module that hands the stream on normalised, re-scaled or with entries dropped, never
    mixed with anything else: a norm, a dropout, an identity, or a ``Sequential`` of only
    those (``Sequential(LayerNorm, Dropout)``, a pre-norm followed by dropout)."""
    if _is_norm(module) or isinstance(module, (nn.modules.dropout._DropoutNd, nn.Identity)):
        return True
    return (
        isinstance(module, nn.Sequential)
        and len(module) > 0
        and all(transparent(m) for m in module.children())
    )


def _sampled(t: Tensor) -> Tensor:
    """``t``'s entries, flattened, at most :data:`FOLLOW_ENTRIES` of them (a stride through a
    larger state; tensors of one shape give the same positions), detached."""
    return t.detach().reshape(-1)[:: max(1, t.numel() // FOLLOW_ENTRIES)]


def _step_follows(later: Tensor, earlier: Tensor, out: Tensor, zero: bool = False) -> bool:
    """Whether ``later - earlier`` (on :func:`_sampled` entries) is a monotone function of
    ``out`` (sampled alike; :func:`_follows`, its tolerance set by the two operands)."""
    sl, se = _sampled(later), _sampled(earlier)
    return _follows(sl - se, out, sl, se, zero=zero)


def _rectified(*tensors: Tensor) -> bool:
    """Whether no entry of ``tensors`` (on :func:`_sampled` entries) is negative, as in an
    activation's output (ReLU, softmax)."""
    return all(bool((_sampled(t) >= 0).all()) for t in tensors)


def _zeroed(t: Tensor) -> bool:
    """Whether a tenth or more of ``t``'s (sampled) entries are exactly 0, as a dropout or a
    ReLU leaves them."""
    sample = _sampled(t)
    return bool(sample.numel()) and float((sample == 0).to(torch.float64).mean()) >= 0.1


def _correlation(a: Tensor, b: Tensor) -> float:
    """The correlation of ``a``'s and ``b``'s entries (-inf for other shapes or a constant)."""
    if a.shape != b.shape:
        return -math.inf
    a64, b64 = a.detach().double().flatten(), b.detach().double().flatten()
    a64, b64 = a64 - a64.mean(), b64 - b64.mean()
    scale = float(a64.norm() * b64.norm())
    return float(a64 @ b64) / scale if scale > 0 else -math.inf


#: entries :func:`_follows` reads (a stride through larger states)
FOLLOW_ENTRIES = 1 << 17


def _follows(
    d: Tensor,
    out: Tensor,
    *operands: Tensor,
    zero: bool = False,
    turns: int = 0,
    eps: float | None = None,
) -> bool:
    """Whether ``d`` is a monotone function of ``out``, entry by entry (``out`` itself,
    ``relu(out)``, ``0.1 * out``, ``tanh(out)``): sorted by ``out``, ``d`` never falls (or never
    rises) by more than the rounding of the subtraction that made it, 16 units in the last
    place (of ``eps``, else of ``d``'s dtype) of the largest of ``operands`` (``d`` itself when
    none).  With ``turns``, it may turn that many times (``gelu``, ``silu``: one).  Not a
    constant (a constant follows anything), except, with ``zero``, a ``d`` exactly 0
    everywhere (a zero gate: the stream did not move).  Read on at most
    :data:`FOLLOW_ENTRIES` entries, a stride through the state."""
    if d.shape != out.shape or not d.is_floating_point() or not out.is_floating_point():
        return False
    a, b = out.detach().flatten(), d.detach().flatten()
    step = max(1, a.numel() // FOLLOW_ENTRIES)
    a, b = a[::step].double(), b[::step].double()
    if not bool(torch.isfinite(a).all() & torch.isfinite(b).all()) or b.numel() < 2:
        return False
    if zero and not bool(b.any()):
        return True
    scale = max(float(t.detach().abs().max()) for t in (operands or (d,)))
    tol = 16 * (torch.finfo(d.dtype).eps if eps is None else eps) * max(scale, 1e-300)
    if float(b.max() - b.min()) <= tol:
        return False  # a constant follows anything
    order = torch.argsort(a, stable=True)
    jumps = b[order].diff()
    same = a[order].diff() == 0  # equal entries of out must give equal entries of d
    if bool((jumps[same].abs() > tol).any()):
        return False
    signs = torch.sign(jumps[jumps.abs() > tol])
    return int((signs[1:] != signs[:-1]).sum()) <= turns


#: rows a :class:`_StreamTap` holds (roots and inputs) while the residual identity has not told
#: how to read a stack's layer inputs; then it reads them by correlation, with a warning
HELD_ROWS = 4


def outer_modules(model: nn.Module, layers: Sequence[nn.Module]) -> list[nn.Module]:
    """The modules of ``model`` outside its ``layers``: neither inside a layer nor holding one
    (not ``model`` itself, not the lists of layers): norms, heads, activations of the
    forward."""
    layer_ids = {id(layer) for layer in layers}
    inside = {id(m) for layer in layers for m in layer.modules()}
    return [
        m
        for m in model.modules()
        if m is not model
        and id(m) not in inside
        and not any(id(c) in layer_ids for c in m.modules())
    ]


def _in_backward() -> bool:
    """Whether autograd's backward pass is running (where ``torch.utils.checkpoint`` runs the
    checkpointed modules again)."""
    task = getattr(torch._C, "_current_graph_task_id", None)
    return task is not None and task() != -1


def _is_basic_gnn(model: nn.Module) -> bool:
    try:
        from torch_geometric.nn.models.basic_gnn import BasicGNN
    except ImportError:  # pragma: no cover - torch_geometric is a dependency
        return False
    return isinstance(model, BasicGNN)


def _owned(model: nn.Module, modules: Sequence[object], argument: str) -> list[nn.Module]:
    """``modules`` checked to be submodules of ``model`` (``ValueError`` naming ``argument``)."""
    owned = {id(m) for m in model.modules()}
    for k, module in enumerate(modules):
        if not isinstance(module, nn.Module) or id(module) not in owned:
            raise ValueError(
                f"{argument}[{k}]: expected a submodule of the model, "
                f"received {type(module).__name__}"
            )
    return cast(list[nn.Module], list(modules))


@dataclass(frozen=True)
class StreamPlan:
    """Where ``capture="residual"`` reads the stream of a model whose skips live in its
    ``forward`` (its layers are not blocks).

    ``taps`` (given as ``stream=``): the input of ``taps[k]`` is layer ``k``; a tap ``L`` reads
    the stream after the last block.  ``norms``: norms paired one to one with the layers; at run
    time the residual identity tells whether a layer's stream is the input of the norm that made
    its input (Pre-LN, ``h = h + layer(norm(h))``, or ``z = norms[k](h)`` run at the end of a
    block for the next) or its own input (Post-LN); where it shows neither, a layer whose paired
    norm ran in its block before it has the norm's input, any other layer its own.
    ``finals``: the other norms outside the layers; after a Pre-LN last block, the input of the
    first of them to run is layer ``L``.  Nothing given: each layer's input is the stream."""

    taps: tuple[nn.Module, ...] = ()
    norms: tuple[nn.Module, ...] = ()
    finals: tuple[nn.Module, ...] = ()

    def describe(self, names: Mapping[int, str]) -> str:
        def span(modules: Sequence[nn.Module]) -> str:
            return f"{names.get(id(modules[0]), '?')}..{names.get(id(modules[-1]), '?')}"

        if self.taps:
            return f"input of stream=[{span(self.taps)}] (layer k = input of stream[k])"
        if self.norms:
            return (
                f"input of the paired norms [{span(self.norms)}] where the residual identity "
                "shows Pre-LN (else where a norm runs before its layer), else the layer's input; "
                "after the last block the input of a final norm, else the model's output"
            )
        return "input of the next layer; after the last layer the model's output"


def stream_plan(
    model: nn.Module, layers: Sequence[nn.Module], stream: Sequence[nn.Module] | None
) -> StreamPlan:
    """The :class:`StreamPlan` of plain ``layers`` (``ValueError`` when it cannot be told)."""
    if stream is not None:
        taps = _owned(model, stream, "stream")
        if len(taps) not in (len(layers), len(layers) + 1):
            raise ValueError(
                f"stream: expected {len(layers)} modules (one per layer, whose input is the "
                f"stream before it) or {len(layers) + 1} (plus the one whose input is the stream "
                f"after the last block), received {len(taps)}"
            )
        shared = _tied_name(model, taps)
        if shared is not None:
            name, count = shared
            raise ValueError(
                f"stream: {name} is listed {count} times; a module called by several blocks (one "
                "norm shared by all) cannot mark where each layer's stream is, because every "
                "call of it looks like each; leave stream unset (the probe follows a shared "
                "norm or dropout back to its input), or pass distinct modules"
            )
        return StreamPlan(taps=tuple(taps))
    if _is_basic_gnn(model):  # norm after conv, no skip: the input of the next conv
        return StreamPlan()
    inside = {id(m) for layer in layers for m in layer.modules()}
    outside = [m for m in model.modules() if _is_norm(m) and id(m) not in inside]
    nested = {id(c) for m in outside for c in list(m.modules())[1:]}
    outside = [m for m in outside if id(m) not in nested]
    lists = [  # lists of norms outside the layers: candidate pre-norms
        lst
        for lst in model.modules()
        if isinstance(lst, nn.ModuleList)
        and len(lst)
        and all(id(m) not in inside and _is_norm(m) for m in lst)
    ]
    if not lists:  # single norms (an input or a final norm) do not sit between stream and layer
        return StreamPlan()
    if len(lists) == 1 and len(lists[0]) == len(layers):
        # a final norm sits outside every ModuleList: a norm inside one (e.g. the first module
        # of each block's FFN, ffns[k] = Sequential(LayerNorm, ...)) runs inside the blocks
        in_lists = {
            id(m)
            for lst in model.modules()
            if isinstance(lst, nn.ModuleList)
            for m in lst.modules()
        }
        return StreamPlan(
            norms=tuple(lists[0]), finals=tuple(m for m in outside if id(m) not in in_lists)
        )
    names = {id(m): n for n, m in model.named_modules()}
    found = ", ".join(f"{names[id(lst)]} ({len(lst)})" for lst in lists)
    why = f"its lists of norms outside them, {found}, are not one list paired with its layers"
    raise ValueError(
        f"capture='residual': cannot tell where the residual stream of {type(model).__name__} "
        f"runs: its {len(layers)} layers are not blocks and {why}; pass stream=[module, ...], the "
        f"{len(layers)} modules whose input is the stream before each layer (the pre-norms of "
        "a Pre-LN stack, e.g. stream=list(model.norms); the layers themselves when each "
        "layer's input is the stream), plus optionally the module whose input is the stream "
        "after the last block (e.g. a final norm); or layers=[...] of whole blocks"
    )


#: the largest state (bytes) whose held rows a :class:`_StreamTap` copies; larger ones are
#: held as they are and checked unchanged (their version counters) when read
HOLD_COPY_BYTES = 1 << 22


@dataclass
class _Held:
    """A held row's chain (its input first) or a layer's output, copied, or as it was with the
    version counters it had."""

    chain: list[Tensor]
    versions: list[int] | None
    # the chain goes on through a module that ran since the last layer call without making
    # the input (h + drop(relu(conv(h))): the dropout's input is the branch, not the stream)
    ran: bool = False

    def changed(self, last: bool = False) -> bool:
        """Whether a tensor of the chain (``last``: its end, the root) changed in place."""
        if self.versions is None:
            return False
        pairs = list(zip(self.chain, self.versions, strict=True))
        return any(t._version != v for t, v in (pairs[-1:] if last else pairs))


class _StreamTap:
    """Reads the stream of plain layers by a :class:`StreamPlan` during each forward and hands
    each state to ``emit(k, x)``.  ``awaiting`` (set in :meth:`reset`) is left set at the end of
    a forward when the stream after the last block is still to be read (the caller then reads
    the model's output)."""

    def __init__(
        self,
        plan: StreamPlan,
        layers: Sequence[nn.Module],
        emit: Callable[[int, Tensor], None],
        model: nn.Module | None = None,
        chains: bool = False,
    ) -> None:
        self.plan, self.layers, self._emit = plan, list(layers), emit
        self.outer = [] if model is None else outer_modules(model, self.layers)
        # with stream= taps: each module's siblings in its list (tap_makers)
        self.siblings: dict[int, frozenset[int]] = {}
        if model is not None and plan.taps:
            for holder in model.modules():
                if isinstance(holder, (nn.ModuleList, nn.ModuleDict, nn.Sequential)):
                    kin = frozenset(id(c) for c in holder.children())
                    for child in holder.children():
                        self.siblings.setdefault(id(child), kin)
        # PyG's BasicGNN with jk="last" hands its head what it hands each layer, dropout(act(
        # norm(conv(h)))) in whatever order act_first sets (see end_state)
        basic = model is not None and _is_basic_gnn(model) and model.jk_mode == "last"
        self.basic_head: nn.Module | None = getattr(model, "lin", None) if basic else None
        # with jk="cat", "max" or "lstm" its head reads the readout of every layer: the stream
        # after the last block is the last state handed to the JumpingKnowledge module (its
        # row was left out, and the warning's stream=[..., lin] read the readout, 17.9x the
        # stream's energy: an audit)
        readout = (
            model is not None
            and _is_basic_gnn(model)
            and model.jk_mode not in (None, "last")
            and isinstance(getattr(model, "jk", None), nn.Module)
        )
        self.basic_jk: nn.Module | None = getattr(model, "jk", None) if readout else None
        # no taps: a layer fed by a norm or dropout outside the layers is read by the residual
        # identity (see _decide); with paired norms too, which tell only where each norm runs
        # (a norm run after its layer is Post-LN's, or a Pre-LN norm run at the end of a block
        # for the next, z = norms[k](h), whose rows were norm(h)), and give the reading where
        # the identity shows none (_fallback)
        # the norms and dropouts outside the layers (ids), whose outputs _outer_output follows
        self.transparent = {id(m) for m in self.outer if transparent(m)}
        self.chains = chains and not plan.taps and bool(self.transparent)
        # the reading the identity showed in an earlier forward (mode, post): a forward with
        # one layer call (a layer drop, an early exit) cannot show it
        self.known: tuple[str, bool] | None = None
        self.reset()

    def reset(self) -> None:
        """A new forward pass."""
        self.pending: dict[int, Tensor] = {}  # input of a paired norm that ran, by layer
        self.norms_ran = False  # a paired norm ran in this forward (their places say something)
        # per paired norm that ran since the last layer call, (its output, the stream it
        # normalised): its output normalised again by it (norm(norm(h))) is read back to h, not
        # taken for the stream (its rows were norm(h), with no word: an audit)
        self.norm_made: dict[int, tuple[Tensor, Tensor]] = {}
        self.prenorm = False  # the last layer read its stream at its paired norm
        self.awaiting = False  # the stream after the last block is still to be read
        self.width: int | None = None
        self.calls = 0  # layer calls so far: the row of the stream entering the next one
        # id(output) -> (module, input) of the modules outside the layers that ran since the
        # last layer call (the tensors are held, so that their ids stay theirs)
        self.after: dict[int, tuple[nn.Module, Tensor | None, Tensor]] = {}
        self.previous = -1  # the list index of the last layer called
        # (norm j, layer k): the first paired norm seen to run for a layer other than its own
        self.mismatch: tuple[int, int] | None = None
        # chains: id(output) -> (module, input) of the norms and dropouts outside the layers
        # that ran since the last layer call; the rows (root, input) and layer outputs held
        # until the mode is known ("pre": the roots are the stream, "input": the inputs)
        self.made: dict[int, tuple[nn.Module, Tensor]] = {}
        self.mode: str | None = None if self.chains else "input"
        self.held: list[_Held] = []
        self.outs: list[_Held | None] = []
        # per held row: a norm's output of the layer's output (h + norm(layer(h))), else None
        self.normed: list[_Held | None] = []
        # the last row read at its own paired norm: (row, the norm's input, its output, their
        # version counters), and whether the identity was checked against such a pair
        self.own_last: tuple[int, Tensor, Tensor, tuple[int, int]] | None = None
        self.own_checked = False
        # the types of the norms seen making a row's stream, the input of its own paired norm
        # (h = post[k](h + conv(norms[k](h))): post[k - 1] made row k's)
        self.stream_makers: set[type] = set()
        self.ran: list[Tensor] = []  # their inputs, in the order they ran
        self.feeders: dict[int, nn.Module] = {}  # the modules seen making a layer's input
        # with stream= taps: the norms seen making a tap's input (Post-LN blocks with taps at
        # their first modules, h = norms[k](h + block(h))) and those in their lists (ids): such
        # a norm making the output made the stream after the last block, not a final norm of
        # it; a norm of the same type outside their list is a final norm (matching the type
        # read a final LayerNorm's output as the stream: a review)
        self.tap_makers: set[int] = set()
        self.post = False  # read as Post-LN or plain: a norm making the output is the stack's
        self.note: str | None = None  # how the mode was read when the identity did not say
        self.copies: bool | None = None  # held rows copied (small states) or checked unchanged
        self.previous_input: Tensor | None = None  # the last layer call's input
        self.previous_version = -1  # its version counter then
        self.last: Tensor | None = None  # the last state emitted
        self.paired: list[bool] = []  # per held row: its own paired norm ran just before it
        self.held_from = 0  # the row of the first held one
        self.last_out: Tensor | None = None  # the last layer call's output
        self.hidden_input: Tensor | None = None  # the input of a head that hid the end
        self.jk_last: Tensor | None = None  # the last state a BasicGNN handed its jk readout
        self.identity = False  # the mode was read from the residual identity

    def emit(self, k: int, x: Tensor) -> None:
        self.width = x.shape[-1]
        self.last = x
        self._emit(k, x)

    def attach(self) -> list:
        handles = []
        plan, last = self.plan, len(self.layers)
        for k, tap in enumerate(plan.taps):
            handles.append(
                tap.register_forward_pre_hook(input_hook(self._tap_input(k)), with_kwargs=True)
            )
        if not plan.taps:
            for k, layer in enumerate(self.layers):
                handles.append(
                    layer.register_forward_pre_hook(
                        input_hook(self._layer_input(k)), with_kwargs=True
                    )
                )
        for k, norm in enumerate(plan.norms):
            handles.append(
                norm.register_forward_pre_hook(input_hook(self._norm_input(k)), with_kwargs=True)
            )
            handles.append(norm.register_forward_hook(self._norm_output(k)))
        for norm in plan.finals:
            handles.append(
                norm.register_forward_pre_hook(input_hook(self._final_input), with_kwargs=True)
            )
        if self.basic_jk is not None:
            handles.append(self.basic_jk.register_forward_pre_hook(self._jk_input))
        if len(plan.taps) != last + 1:  # always so where self.chains (no taps)
            for layer in self.layers:  # the stream after the last call, whichever layer it was
                handles.append(layer.register_forward_hook(self._after_layer))
            for module in self.outer:
                handles.append(module.register_forward_hook(self._outer_output, with_kwargs=True))
        return handles

    def _jk_input(self, module: nn.Module, args: tuple) -> None:
        states = args[0] if args else None
        if isinstance(states, (list, tuple)) and states and isinstance(states[-1], Tensor):
            self.jk_last = states[-1]

    def _tap_input(self, k: int) -> Callable[[nn.Module, tuple], None]:
        def hook(module: nn.Module, args: tuple) -> None:
            x = first_tensor(args)
            made = self.after.get(id(x)) if k else None
            maker = None if made is None else made[0]
            # (once a list is known, its norms' later taps add nothing)
            if maker is not None and id(maker) not in self.tap_makers and _holds_norm(maker):
                self.tap_makers |= self.siblings.get(id(maker), frozenset((id(maker),)))
            self.emit(k, x)

        return hook

    def _norm_input(self, k: int) -> Callable[[nn.Module, tuple], None]:
        def hook(module: nn.Module, args: tuple) -> None:
            x = first_tensor(args)
            self.norms_ran = True
            # only this norm's own output: another's (a Post-LN block's norm before a Pre-LN
            # block's) is the stream itself
            made = self.norm_made.get(k)
            self.pending[k] = made[1] if made is not None and made[0] is x else x

        return hook

    def _norm_output(self, k: int) -> Callable[[nn.Module, tuple, object], None]:
        def hook(module: nn.Module, args: tuple, output: object) -> None:
            if k in self.pending and isinstance(output, Tensor):
                self.norm_made[k] = (output, self.pending[k])

        return hook

    def _layer_input(self, k: int) -> Callable[[nn.Module, tuple], None]:
        """Layer module ``k`` starts: the stream entering it (its paired norm's input, else its
        own) is the row of its place in the calls, not of its place in the list."""

        def hook(module: nn.Module, args: tuple) -> None:
            stream = self.pending.pop(k, None)
            # a paired norm left over that is neither this layer's nor the previous layer's
            # (Post-LN: norms[j] after layers[j]) ran for another layer: the pairing by place
            # in the lists does not hold (e.g. the layers run in reverse, the norms in order)
            stray = [j for j in self.pending if j != self.previous]
            if stray and self.mismatch is None:
                self.mismatch = (stray[0], k)
            self.pending.clear()  # never read as a later layer's stream
            self.norm_made.clear()
            self.previous = k
            self.awaiting = False
            row, self.calls = self.calls, self.calls + 1
            if self.chains:
                # once a norm ran for another layer's place, no place is trusted
                self._chain_row(row, first_tensor(args), None if self.mismatch else stream)
                return
            self.prenorm = stream is not None
            self.emit(row, first_tensor(args) if stream is None else stream)

        return hook

    def _after_layer(self, module: nn.Module, args: tuple, output: object) -> None:
        self.awaiting = True  # until another layer starts: then this was not the last
        self.after = {}
        try:
            out: Tensor | None = first_tensor(output)  # (x, attention) too
        except TypeError:
            out = None
        self.last_out = out  # (also for the Pre-LN check at the end: Probe._prenorm_end)
        if not self.chains:
            return
        if self.mode is None and len(self.outs) < len(self.held):
            self.outs.append(None if out is None else self._hold([out]))
            self.normed.append(None)

    def _hold(self, chain: list[Tensor]) -> _Held:
        """``chain`` kept until the mode is known: copies while a state is small
        (:data:`HOLD_COPY_BYTES`), else the tensors with their version counters, so that a
        stream updated in place (``h += ...``) is noticed, not read changed."""
        if self.copies is None:
            self.copies = chain[0].numel() * chain[0].element_size() <= HOLD_COPY_BYTES
        if self.copies:
            copied = {id(t): t.detach().clone() for t in chain}
            return _Held([copied[id(t)] for t in chain], None)
        return _Held(list(chain), [t._version for t in chain])

    def _chain_row(self, row: int, x: Tensor, stream: Tensor | None = None) -> None:
        """Layer call ``row`` starts with input ``x``.  Its chain: ``x`` followed back through
        the norms and dropouts outside the layers that made it, or, when none made it but some
        ran since the last layer call (``h + conv(relu(norm(h)))``), ``x`` and the inputs of
        those, the latest first.  Held until the mode is known; then the row is ``x``, or in
        Pre-LN the chain's root (:meth:`_root`).  ``stream``: the input of the layer's own
        paired norm, run just before it (Pre-LN by the places, :class:`StreamPlan`): the
        chain is ``x`` and it, and the row is it whatever the mode; emitted at once while no
        row is held."""
        own = stream is not None
        if stream is not None:
            self._check_own(row, x, stream)
            maker = self.made.get(id(stream)) if row else None  # (row 0: the encoder's)
            if maker is not None and type(maker[0]) not in self.stream_makers:
                if _holds_norm(maker[0]):
                    self.stream_makers.add(type(maker[0]))
        else:
            self.own_last = None
        chain = [x, stream] if stream is not None else self._follow_back(x)
        # two layers read one state: the same tensor, unchanged since (the stream of h += ...
        # is one tensor too, updated in place between the layer calls: each call a new state;
        # read as one, rows 1-3 of such a stack were row 0's values again, cosine 1)
        same = len(chain) == 1 and self.previous_input is x and x._version == self.previous_version
        made = self.made
        self.made, self.ran, self.previous_input = {}, [], x
        self.previous_version = x._version
        if self.mode is not None or (own and not self.held):
            self.prenorm = pre = own or self.mode == "pre"
            if same and self.last is not None:
                self.emit(row, self.last)
            else:
                self.emit(row, chain[-1] if pre else x)
            return
        # a GPS block's branches: the previous row again, the same object
        if same and self.held:
            held = self.held[-1]
        else:
            held = self._hold(chain)
            held.ran = len(chain) > 1 and stream is None and id(x) not in made
        self._hold_row(row, held, own)

    def _check_own(self, row: int, x: Tensor, stream: Tensor) -> None:
        """Row ``row`` is read at its own paired norm's input ``stream`` (Pre-LN by the places;
        ``x`` the norm's output).  On the first two consecutive such rows, the residual identity
        against the layer between them: where ``stream_k - x_{k-1}`` follows the layer's output
        and ``stream_k - stream_{k-1}`` does not, the skip adds the norm's output (``h =
        norm(h); h = h + layer(h)``), so the stream is the layers' inputs, and a note says so
        (the rows, emitted as they come, stay the norms' inputs)."""
        if self.own_checked:  # once per forward: nothing is kept after that
            return
        last, self.own_last = self.own_last, (row, stream, x, (stream._version, x._version))
        if last is None or last[0] != row - 1 or self.last_out is None:
            return
        _, before, before_x, versions = last
        out = self.last_out
        if (before._version, before_x._version) != versions or not (
            stream.shape == before.shape == before_x.shape == out.shape
        ):
            return
        self.own_checked, self.own_last = True, None  # (no state kept past the check)
        sampled = _sampled(out)
        pre = _step_follows(stream, before, sampled, zero=True)
        if not pre and _rectified(stream, before) and not _rectified(out):
            self.note = (
                "capture='residual': each layer's paired norm runs just before it, so the rows "
                "hold the norms' inputs, as in Pre-LN (h = h + layer(norm(h))), but these have "
                "no negative entry where the layers' outputs have, and the residual identity "
                "does not bear the reading out: an activation between the stream and the norm "
                "(h = h + layer(norm(relu(h)))) makes the rows relu(h), not h; a function "
                "call is invisible to the probe, so the reading is unchecked"
            )
        elif not pre and _step_follows(stream, before_x, sampled, zero=True):
            self.note = (
                "capture='residual': each layer's paired norm runs just before it, so the rows "
                "hold the norms' inputs, as in Pre-LN (h = h + layer(norm(h))), but the residual "
                "identity shows the skip adding the norm's output (h = norm(h); h = h + "
                "layer(h)): the state the skips carry is each layer's input, the norm's output; "
                "pass stream=[...] with the layers themselves to record those instead"
            )

    def _follow_back(self, x: Tensor) -> list[Tensor]:
        """``x`` and the inputs of the norms and dropouts outside the layers that made it, or
        that ran since the last layer call when none made it (:meth:`_chain_row`)."""
        chain, seen = [x], 0
        while id(chain[-1]) in self.made and seen <= len(self.made):
            module, inp = self.made[id(chain[-1])]
            self.feeders[id(module)] = module
            chain.append(inp)
            seen += 1
        if len(chain) == 1 and self.ran:  # ran before it: the latest, followed back
            chain.append(self.ran[-1])
            while id(chain[-1]) in self.made and len(chain) <= len(self.made) + 1:
                chain.append(self.made[id(chain[-1])][1])
        return chain

    def _hold_row(self, row: int, held: _Held, own: bool) -> None:
        """Hold ``row`` (``own``: read at its own paired norm's input whatever the mode) and
        decide the mode if the rows held now show it."""
        if not self.held:
            self.held_from = row
        self.held.append(held)
        self.paired.append(own)
        self._decide()

    def _root(self, k: int) -> Tensor:
        """Held row ``k``'s stream in Pre-LN: the end of its chain; for the first row, only as
        far back as the first later row's chain goes (a norm or dropout before the first
        pre-norm, ``h = norm_in(x)``, is the encoder's, and layer 0 is what it makes)."""
        chain = self.held[k].chain
        if k == 0:
            later = next((h.chain for h in self.held[1:] if len(h.chain) > 1), None)
            if later is not None:
                return chain[min(len(later), len(chain)) - 1]
        return chain[-1]

    def _fed(self) -> bool:
        """Whether a held row's input was made by (or ran after) a norm or dropout."""
        return any(len(h.chain) > 1 for h in self.held)

    def _changed(self) -> bool:
        """Whether a held tensor was changed in place since it was held."""
        return any(h.changed() for h in self.held)  # (a layer's output changed in place,
        # relu_(out), is read as it is: the identity holds through the monotone function)

    def _readings(self, k: int) -> set[str]:
        """The readings the residual identity shows between held rows ``k - 1`` and ``k``
        (layer ``k - 1``'s output ``out``, roots ``r`` (:meth:`_root`), inputs ``v``; ``f`` any
        monotone function, :func:`_follows`: the identity, a scale, ``relu``, ``tanh``, or 0 for
        a difference exactly 0): ``pre`` (Pre-LN, ``h = h + f(layer(norm(h)))``: ``r_k -
        r_{k-1} = f(out)``), ``post`` (Post-LN, ``h = norm(h + f(layer(h)))``: ``r_k - v_{k-1}
        = f(out)``), ``plain`` (no skip: ``r_k = f(out)``).  Pre and post are told apart only
        where row ``k - 1`` has a chain (its root is not its input)."""
        found: set[str] = set()
        branch = self._branch(k)
        if branch is None or self.held[k] is self.held[k - 1]:  # two layers read one state
            return found
        out, shape = branch
        ra, va, rb = self._root(k - 1), self.held[k - 1].chain[0], self._root(k)
        if rb.shape != shape:
            return found
        sb = _sampled(rb)
        if _follows(sb, out, sb):
            found.add("plain")
        # the first row's chain shorter than the second's (h = norm(h + conv(drop(h))) in train
        # mode: [drop(h0), h0] against [drop(h1), h1, the norm's input]): its root is the
        # encoder's output, one step short of the second's, and the stream plus the branch is
        # the second root in Post-LN as in Pre-LN, so the pair shows no Pre-LN reading
        shallow = k == 1 and len(self.held[0].chain) < len(self.held[1].chain)
        if ra is not va:
            for name, t in (("pre", ra), ("post", va)):
                if name == "pre" and shallow:
                    continue
                if t.shape == shape and _step_follows(rb, t, out, zero=True):
                    found.add(name)
        return found

    def _branch(self, k: int) -> tuple[Tensor, torch.Size] | None:
        """What the layers between held rows ``k - 1`` and ``k`` output: the last layer's output,
        or, where several layers read the state of row ``k - 1`` (a GPS block's local and
        global layers, ``h = h + conv(z) + attn(z)``), the sum of their outputs; None when one
        is unknown or the shapes differ."""
        j = k - 1
        while j > 0 and self.held[j - 1] is self.held[k - 1]:
            j -= 1
        outs = self.outs[j:k]
        if len(outs) < k - j or any(o is None for o in outs):
            return None
        tensors = [o.chain[0] for o in outs if o is not None]
        if any(t.shape != tensors[0].shape for t in tensors):
            return None
        samples = [_sampled(t) for t in tensors]
        total = samples[0] if len(samples) == 1 else torch.stack(samples).sum(dim=0)
        return total, tensors[0].shape

    def _decide(self) -> None:
        """The mode, once the residual identity shows one reading exactly between two held
        rows: a shared norm, a trained affine, RMSNorm, a norm with a hole (``Identity``) or
        dropout in train mode are read as they are (a shared pre-norm's input was recorded as
        its output: 197 times the energy).  Undecided after :data:`HELD_ROWS` rows, by
        :meth:`_fallback`."""
        k = len(self.held) - 1
        if k < 1 or len(self.outs) < k:
            return
        if self._changed():
            self._fallback()
            return
        # a row read at its own paired norm's input enters a Pre-LN block: the identity after
        # it says nothing of the other rows (Pre-LN and Post-LN blocks in one stack)
        found = set() if self.paired[k - 1] else self._readings(k)
        if len(found) == 1:
            (reading,) = found
            # "plain" through a module that did not make the input (a dropout on the branch,
            # h + drop(relu(conv(h)))) read the branch for the stream: the rows (the inputs)
            # were right, but a warning said the model had no residual stream and pointed to
            # capture='output' (an audit)
            branch = reading == "plain" and self.held[k].ran
            plain = reading == "plain" and self._fed() and not branch
            self.identity = True  # the places of paired norms say nothing more
            self._settle("pre" if reading == "pre" else "input", post=reading == "post" or plain)
            if plain:
                self.note = (
                    "capture='residual': each layer's input follows from the previous layer's "
                    "output alone, with no skip adding the stream back (the model has no "
                    "residual stream); the rows hold the layers' inputs, after the modules "
                    "between them; capture='output' records the layers' outputs"
                )
        elif len(self.held) >= HELD_ROWS:
            self._fallback()

    def _fallback(self) -> None:
        """No pair of rows showed one reading exactly (a function of the branch after the
        layer, ``h + norm2(layer(norm(h)))``, hides the identity).  When no layer after the
        first is fed by a norm or dropout, the inputs (at most an input norm, which layer 0 is
        read after); else the reading whose difference follows the layer's output most closely
        (their correlation) on the first pair whose earlier row is fed, with a warning."""
        held = self.held
        if self._changed():  # the stream is what was updated in place: a root or an input
            roots = any(h.changed(last=True) for h in held)
            self._settle("pre" if roots else "input", checked=False, changed=True)
            return
        readable = len(held) > 1 or len(held[0].chain) > 1  # what a reading would apply to
        if self.known is not None and (readable or self.plan.norms):
            self.identity = True  # what the identity showed in an earlier forward
            self._settle(self.known[0], post=self.known[1])
            return
        # (norms that never ran say nothing: a list defined and not called drew a warning
        # that each ran after its layer, Post-LN: an audit)
        if self.plan.norms and self.norms_ran:
            # the places of the paired norms: a layer whose own norm ran just before it reads
            # the norm's input (its row's chain), any other its own input (Post-LN), said to
            # be unchecked where the identity bears out no pair of the latter (once a norm ran
            # for another layer's place, a warning says that no place is trusted)
            confirmed = self.mismatch is not None or self._places_confirmed()
            self._settle("input", checked=confirmed, remember=False, places=not confirmed)
            return
        if len(held) == 1 and len(held[0].chain) > 1:  # one layer call: nothing to compare
            self._settle("input", checked=False, alone=True)
            return
        if not any(len(h.chain) > 1 for h in held[1:]):
            self._settle("input", remember=False)  # this forward's structure, not a reading
            return
        pairs = [
            k
            for k in range(1, len(held))
            if len(held[k - 1].chain) > 1 and held[k] is not held[k - 1]
        ]
        k = pairs[0] if pairs else 1
        branch = self._branch(k) if k < len(held) else None
        if branch is None or self._root(k).shape != branch[1]:
            self._settle("input", checked=False)
            return
        out, shape = branch
        ra, va, sb = self._root(k - 1), held[k - 1].chain[0], _sampled(self._root(k))
        pre = _correlation(sb - _sampled(ra), out) if ra.shape == shape else -math.inf
        post = _correlation(sb - _sampled(va), out) if va.shape == shape else -math.inf
        self._settle("pre" if pre >= post else "input", checked=False, post=post > pre)

    def _places_confirmed(self) -> bool:
        """Whether the residual identity bears out the paired norms' places (each layer not
        fed by its own norm reads the stream) on a pair of consecutive held rows read so,
        ``k - 1`` and ``k`` with inputs ``x``: Post-LN, ``root_k - x_{k-1}`` a monotone
        function of the layer's output (``h = norm(h + f(layer(h)))``, the root the norm's
        input); or a norm of the branch, ``x_k - x_{k-1}`` the norm's output (``h = h +
        norm(layer(h))``).  True when no such pair was held (nothing to check).  Where it
        fails, the places' reading is a guess: a Pre-LN norm run at the end of each block
        for the next (``z = norms[k](h)``) with a further residual term (an FFN, GCNII's
        initial state) hides the identity and reads the same, its rows ``norm(h)``, as does
        ``h + norm(layer(relu(h)))``, whose rows are ``relu(h)``."""
        held, found = self.held, False
        for k in range(1, len(held)):
            if self.paired[k - 1] or self.paired[k] or held[k] is held[k - 1]:
                continue
            found = True
            before, x = held[k - 1].chain[0], held[k].chain[0]
            branch = self._branch(k)
            root = self._root(k)
            if branch is not None and root is not x:
                out, shape = branch
                if root.shape == before.shape == shape and _step_follows(
                    root, before, out, zero=True
                ):
                    return True
            normed = self.normed[k - 1] if k - 1 < len(self.normed) else None
            if normed is not None and x.shape == before.shape == normed.chain[0].shape:
                if _step_follows(x, before, _sampled(normed.chain[0])):
                    return True
        return not found

    def _settle(
        self,
        mode: str,
        checked: bool = True,
        post: bool = False,
        changed: bool = False,
        alone: bool = False,
        remember: bool = True,
        places: bool = False,
    ) -> None:
        """Emit the held rows by ``mode`` and every later one directly (``changed``: the held
        rows were updated in place, and none is emitted; ``alone``: one layer call, unread;
        ``places``: read by the paired norms' places, which the identity did not bear out)."""
        self.mode, self.prenorm, self.post = mode, mode == "pre", post
        if checked and not changed and remember:
            self.known = (mode, post)
        fed = [m for m in self.feeders.values() if not isinstance(m, nn.Identity)]
        if alone:
            names = ", ".join(sorted({type(m).__name__ for m in fed})) or "a norm or dropout"
            self.note = (
                f"capture='residual': the forward made one layer call, whose input {names} "
                "made, so whether the stream is what goes into it or what comes out cannot be "
                "told (the residual identity needs two); row 0 holds the layer's input; pass "
                "stream=[...] (the modules whose input is the stream before each layer) to say"
            )
        elif changed:
            what = (
                "the inputs of the norms or dropouts before the layers"
                if mode == "pre"
                else "the layers' inputs"
            )
            self.note = (
                f"capture='residual': the stream was updated in place (h += ...) before the "
                f"probe could tell how to read the layers' inputs, so rows 0-{len(self.held) - 1}"
                f" are not recorded, and the later rows hold {what}, the tensors updated in "
                "place, unchecked; write h = h + ..., or pass stream=[...] (the modules whose "
                "input is the stream before each layer)"
            )
        elif places and any(n is not None for n in self.normed):
            self.note = (
                "capture='residual': the rows hold the layers' inputs, as the places of the "
                "paired norms say (each runs on its layer's output, h = h + norm(layer(h))), "
                "but no layer's input moves by the norm's output, so the reading is unchecked: "
                "a function between the stream and the layer (h + norm(layer(relu(h)))) reads "
                "the same, its rows relu(h) instead of h; pass stream=[...] (the modules whose "
                "input is the stream before each layer) to say which"
            )
        elif places:
            self.note = (
                "capture='residual': the rows hold the layers' inputs, as the places of the "
                "paired norms say (each runs after its layer, Post-LN: h = norm(h + "
                "layer(h))), but the residual identity bears this out on no pair of layers, so "
                "the reading is unchecked: a Pre-LN norm run at the end of each block for the "
                "next (z = norms[k](h)) beside a further residual term (an FFN, an initial "
                "residual) reads the same, its rows norm(h) instead of h; pass stream=[...] "
                "(the modules whose input is the stream before each layer) to say which"
            )
        elif not checked and (fed or self._fed()):
            names = ", ".join(sorted({type(m).__name__ for m in fed})) or "a norm or dropout"
            reading = (
                "Pre-LN (h = h + f(layer(norm(h)))): the rows hold the stream before the norm"
                if mode == "pre"
                else "Post-LN or plain (h = norm(f(h + layer(h)))): the rows hold the layers' "
                "inputs"
            )
            self.note = (
                f"capture='residual': {names} outside the layers runs between them, and the "
                "residual identity (the stream plus the layer's output) holds no way exactly, so "
                "whether the stream is what goes into it or what comes out is not checked; read "
                f"as {reading}; pass stream=[...] (the modules whose input is the stream before "
                "each layer) to say which"
            )
        pre = [mode == "pre" or own for own in self.paired]  # own: the paired norm's input
        rows = (
            []
            if changed
            else [self._root(k) if pre[k] else h.chain[0] for k, h in enumerate(self.held)]
        )
        if rows:
            self.prenorm = pre[len(rows) - 1]
        first = self.held_from
        self.held, self.outs, self.paired, self.normed = [], [], [], []
        for row, x in enumerate(rows, start=first):
            self.emit(row, x)

    def release(self) -> None:
        """The forward ended: no state of size n x d is kept until the next (the reading the
        identity showed is)."""
        self.held, self.outs, self.made, self.ran, self.after = [], [], {}, [], {}
        self.normed, self.own_last = [], None
        self.last = self.previous_input = self.last_out = self.hidden_input = None
        self.pending, self.paired = {}, []

    def flush(self, output: object = None) -> None:
        """The forward ended with rows held (the mode not told): the identity read between the
        last of them and the stream after it (:meth:`_end_reading`), else :meth:`_fallback`."""
        if self.chains and self.mode is None and self.held:
            reading = self._end_reading(output) if self.known is None else None
            if reading is None:
                self._fallback()
            else:
                self.identity = True
                self._settle("pre" if reading == "pre" else "input", post=reading == "post")

    def _end_reading(self, output: object) -> str | None:
        """The forward ended undecided (one layer call, or rows whose pairs showed nothing, such
        as a first row without a chain): the residual identity between the last held row and
        the model's output (Pre-LN: the output, or a final norm's input, minus the root;
        Post-LN: the input of the norm that made the output minus the layer's input), when it
        shows exactly one reading."""
        last = len(self.held) - 1
        held, out = self.held[last], self.outs[last] if len(self.outs) > last else None
        if self.paired[last] or len(held.chain) < 2 or out is None:
            return None  # (a row at its own paired norm's input: its block is Pre-LN)
        if not isinstance(output, Tensor) or self._changed():
            return None
        made = self.after.get(id(output))
        end_pre = output
        if made is not None and transparent(made[0]) and made[1] is not None:
            end_pre = made[1]  # a final norm's input
        norm_input = made[1] if made is not None and transparent(made[0]) else None
        found = set()
        root, x, branch = self._root(last), held.chain[0], out.chain[0]
        if end_pre.shape == root.shape == branch.shape:
            if _step_follows(end_pre, root, _sampled(branch)):
                found.add("pre")
        if norm_input is not None and norm_input.shape == x.shape == branch.shape:
            if _step_follows(norm_input, x, _sampled(branch)):
                found.add("post")
        return found.pop() if len(found) == 1 else None

    def _outer_output(self, module: nn.Module, args: tuple, kwargs: dict, output: object) -> None:
        """A module outside the layers ran: after the last layer call, remember what it made of
        what (:meth:`end_state` reads it); with ``chains``, a norm or dropout's output and
        input since the last layer call (:meth:`_chain_row` reads them).  A module handing
        its input on (dropout in eval mode, an identity) adds nothing."""
        if not isinstance(output, Tensor) or not (self.awaiting or self.chains):
            return
        inputs = inputs_of(args, kwargs)
        inp = inputs[0] if inputs and isinstance(inputs[0], Tensor) else None
        if inp is output:
            return
        if self.chains and inp is not None and id(module) in self.transparent:
            self.made[id(output)] = (module, inp)
            if inp is not self.last_out:  # a norm of the last layer's output is the branch's
                self.ran.append(inp)
            elif self.mode is None and self.normed and len(self.normed) == len(self.held):
                self.normed[-1] = self._hold([output])  # h + norm(layer(h)): the branch
        if self.awaiting:
            self.after[id(output)] = (module, inp, output)

    def end_state(self, output: object) -> tuple[Tensor | None, nn.Module | None]:
        """The stream after the last block, read from the model's ``output`` when the forward
        ends with the stream still to be read (``awaiting``): the output itself, unless a
        module outside the layers made it after the last layer call.  Then a norm's output
        gives the norm's input (``return norm(h)``: ``h``), unless the norm is the last layer's
        own Post-LN norm (:meth:`_own_norm`: its output); a module with parameters (a head,
        ``return head(h)``) gives nothing, or the input of the norm that made its input
        (``head(norm(h))``); a parameter-free one given one tensor (an activation) gives the
        output, as the layers' inputs see the stream, and one given a list (a
        ``JumpingKnowledge`` readout of every layer) gives nothing.  Returns the state (None:
        not seen) and the head that hid it (None unless one did)."""
        if self.jk_last is not None:  # a BasicGNN's jk readout: its last state
            return self.jk_last, None
        if isinstance(output, (tuple, list)):  # (h, aux): the first of the stream's width
            output = next(
                (
                    t
                    for t in output
                    if isinstance(t, Tensor) and t.dim() in (2, 3) and t.shape[-1] == self.width
                ),
                None,
            )
        if not isinstance(output, Tensor):
            return None, None
        made = self.after.get(id(output))
        if made is None:
            return output, None
        module, inp, _ = made
        if inp is not None and module is self.basic_head:
            # its input is what the layers read: norm(act(conv)) with act_first and a norm was
            # read at the norm's input (the final-norm rule below), 5x off its energy with no
            # word, and the act-last order only in eval mode (audits)
            return inp, None
        before = None if inp is None else self.after.get(id(inp))
        if transparent(module):
            final = _holds_norm(module)
            if final and before is not None and self._own_norm(before[0]):
                return inp, None  # the last block's own norm, then a final norm
            if self.prenorm and type(module) in self.stream_makers:
                return output, None  # a norm like those that made the earlier rows' streams
            return (output if self._own_norm(module) else inp), None
        if next(module.parameters(), None) is None and inp is not None:
            return output, None  # an activation (one tensor in); a readout of a list is not
        if before is not None and transparent(before[0]):
            normed = _holds_norm(before[0])
            if not self.prenorm and not normed:
                return inp, None  # head(dropout(h)) in train mode: h as the layers see it
            earlier = None if before[1] is None else self.after.get(id(before[1]))
            if normed and earlier is not None and self._own_norm(earlier[0]):
                # head(final_norm(norms[L-1](h + conv(h)))): the final norm's input, as
                # without the head; its output, an affine map of it, was read as layer L (9x
                # the stream's energy with a trained final norm: an audit)
                return before[1], None
            return (inp if self._own_norm(before[0]) else before[1]), None
        self.hidden_input = inp  # what the head read: the Pre-LN check can still use it
        return None, module

    def _own_norm(self, norm: nn.Module) -> bool:
        """``norm`` is a paired norm that ran after its layer (Post-LN: ``h = norms[k](h +
        layers[k](h))``), one seen making the layers' inputs of a Post-LN stack, or any in a
        stack read as Post-LN or plain (the last block's norm in a ``ModuleDict``): its output
        is the stream, the one the layers read.  A final norm after such a norm, or a Pre-LN
        stack's, gives its input."""
        if self.prenorm or not transparent(norm):
            return False
        if id(norm) in self.tap_makers:
            # stream= taps whose inputs such norms made: read as the model's output, the last
            # block's norm was taken for a final norm and its input, h + z, for the stream
            # (an audit: 1.37x the energy of the last row, with no word)
            return True
        return self.post or any(norm is n for n in self.plan.norms) or id(norm) in self.feeders

    @property
    def end_row(self) -> int:
        """The row of the stream after the last block: ``L`` with ``stream=`` taps, else the
        number of layer calls."""
        return len(self.layers) if self.plan.taps else self.calls

    def _final_input(self, module: nn.Module, args: tuple) -> None:
        x = first_tensor(args)
        # (while rows are held, the end is read after them, from the model's output); a norm
        # given the last layer's output is the branch's (h + drop(norm(conv(norm(h))))), not
        # a final norm: its input was read as layer L, the final norm's output then taken
        if x is self.last_out:
            return
        if self.awaiting and self.prenorm and not self.held and x.shape[-1] == self.width:
            self.awaiting = False
            self.emit(self.calls, x)


class _ModuleNames(Mapping[int, str]):
    """``id(module) -> its name in model`` (the class name for the root), built from
    ``model.named_modules()`` on first use: walking a deep model costs milliseconds, and the
    names are needed only to describe a module in a message."""

    def __init__(self, model: nn.Module | None) -> None:
        self._model = model
        self._names: dict[int, str] | None = None

    def _built(self) -> dict[int, str]:
        if self._names is None:
            modules = () if self._model is None else self._model.named_modules()
            self._names = {id(m): name or type(m).__name__ for name, m in modules}
        return self._names

    def __getitem__(self, key: int) -> str:
        return self._built()[key]

    def __iter__(self) -> Iterator[int]:
        return iter(self._built())

    def __len__(self) -> int:
        return len(self._built())


def distinct(modules: Sequence[nn.Module]) -> list[nn.Module]:
    """``modules`` without repeats (by identity), in first-appearance order: the modules to
    hook once each, also when one module stands for several layers (weight tying,
    ``ModuleList([conv] * L)``)."""
    return list({id(m): m for m in modules}.values())


def tied_module(modules: Sequence[nn.Module]) -> tuple[nn.Module, int] | None:
    """The first module listed for several layers (weight tying) and how many, else None."""
    counts = Counter(id(m) for m in modules)
    return next(((m, counts[id(m)]) for m in modules if counts[id(m)] > 1), None)


def _tied_name(model: nn.Module, modules: Sequence[nn.Module]) -> tuple[str, int] | None:
    """The name in ``model`` of the first module listed several times, and how many, else
    None."""
    tied = tied_module(modules)
    if tied is None:
        return None
    module, count = tied
    return _ModuleNames(model).get(id(module), type(module).__name__), count


def _found_notes(model: nn.Module, modules: Sequence[nn.Module]) -> list[str]:
    """The note on a module list found by its name (not a DepthModel's, not a BasicGNN's)
    whose per-node modules are no rows (:func:`_passing`); none when every module of it is a
    layer."""
    named = _named_list(model, _LAYER_LISTS)
    if named is None:
        return []
    name, listed = named
    kept = {id(m) for m in modules}
    if len(modules) >= len(listed) or not kept <= {id(m) for m in listed}:
        return []
    left = sorted({type(m).__name__ for m in listed if id(m) not in kept})
    return [
        f"model.{name} holds weightless per-node modules ({', '.join(left)}) between its "
        f"{len(modules)} other modules: they are no layers of their own (one row per module "
        "with weights, as for PyG's BasicGNN convs); pass layers=[...] to read other states"
    ]


def _outside_note(
    ran: Sequence[str], outside: Sequence[tuple[str, nn.Module]], layers: Sequence[nn.Module]
) -> str:
    """The note on message-passing modules the forward ran outside the layers found."""
    where = ", ".join(
        f"model.{name} ({type(m).__name__})" for name, m in outside if name in set(ran)
    )
    many = len(ran) > 1
    return (
        f"{where} {'pass' if many else 'passes'} messages in the forward outside the "
        f"{len(layers)} layers found: {'their outputs are' if many else 'its output is'} no "
        f"row, so the energy {'they change' if many else 'it changes'} is not measured; pass "
        "layers=[...] in the order they run to read them as layers too"
    )


class LayerCalls:
    """Counts, in each forward, the calls of every layer module, to report the layers that did
    not run or ran a different number of times than the others.  A module listed ``m`` times
    (weight tying) is expected to run ``m`` times.

    A layer whose ``conv`` the forward calls directly, not through the layer (PyG's DeeperGCN
    example runs ``layers[0].conv``), is read from that conv when ``direct`` is given:
    ``direct(k, conv_input, conv_output)``.  ``start(x)`` is called with the input of the
    first layer call of each forward (through a layer or its conv alone): layer 0."""

    def __init__(
        self,
        layers: Sequence[nn.Module],
        names: Mapping[int, str],
        direct: Callable[[int, Tensor, Tensor], None] | None = None,
        start: Callable[[Tensor], None] | None = None,
    ) -> None:
        self.layers, self._direct, self._start = distinct(layers), direct, start
        counts = Counter(id(m) for m in layers)
        self.listed = [counts[id(m)] for m in self.layers]
        self._by_id = names  # read only when a layer is named (a lazy mapping stays unbuilt)
        self.reset()

    @property
    def names(self) -> list[str]:
        """The name of each layer module in the model (its class name when not found)."""
        return [self._by_id.get(id(m), type(m).__name__) for m in self.layers]

    def reset(self) -> None:
        """A new forward pass."""
        self.calls = [0] * len(self.layers)  # calls through the layer module
        self.order: list[int] = []  # the layer modules in the order of their first call
        self.direct = [0] * len(self.layers)  # calls of its conv alone
        self._running = [0] * len(self.layers)
        self._started = False  # a layer call has started in this forward (start called)

    def _first(self, inputs: tuple) -> None:
        """A layer call starts: the first of the forward hands its input to ``start``."""
        if not self._started:
            self._started = True
            if self._start is not None:
                self._start(first_tensor(inputs))

    def attach(self) -> list:
        handles = []
        convs = Counter(id(getattr(layer, "conv", None)) for layer in self.layers)
        for k, layer in enumerate(self.layers):
            handles.append(layer.register_forward_pre_hook(self._enter(k), with_kwargs=True))
            conv = getattr(layer, "conv", None)
            # a conv shared by several layers: a call of it through one of them would read as
            # a direct call of every other's (rows 1..L-1 all held the first block's output)
            if self._direct is not None and isinstance(conv, nn.Module) and convs[id(conv)] == 1:
                handles.append(layer.register_forward_hook(self._leave(k)))
                handles.append(conv.register_forward_hook(self._conv_alone(k), with_kwargs=True))
        return handles

    def _enter(self, k: int) -> Callable[[nn.Module, tuple, dict], None]:
        def hook(module: nn.Module, args: tuple, kwargs: dict) -> None:
            if not self._started:
                self._first(inputs_of(args, kwargs))
            if not self.calls[k]:
                self.order.append(k)
            self.calls[k] += 1
            self._running[k] += 1

        return hook

    def _leave(self, k: int) -> Callable[[nn.Module, tuple, object], None]:
        def hook(module: nn.Module, args: tuple, output: object) -> None:
            self._running[k] -= 1

        return hook

    def _conv_alone(self, k: int) -> Callable[[nn.Module, tuple, dict, object], None]:
        def hook(module: nn.Module, args: tuple, kwargs: dict, output: object) -> None:
            if not self._running[k] and self._direct is not None:
                inp = first_tensor(inputs_of(args, kwargs))
                if not self._started:
                    self._first((inp,))
                self.direct[k] += 1
                self._direct(k, inp, first_tensor(output))

        return hook

    def notes(self) -> list[str]:
        """One line per layer module that did not run like the others in the last forward
        (the rows are the layer calls in the order they ran: see :class:`Probe`)."""
        per_listing = [c / m for c, m in zip(self.calls, self.listed, strict=True)]
        counts = [c for c in per_listing if c]
        usual = max(set(counts), key=counts.count) if counts else 0
        out = []
        if all(calls == usual for calls in per_listing) and usual:
            return []  # every layer ran alike: no names needed
        for k, (name, calls) in enumerate(zip(self.names, self.calls, strict=True)):
            if per_listing[k] == usual and calls:
                continue
            if not calls and self.direct[k]:
                out.append(
                    f"{name}: the forward never calls the module but its .conv directly; its "
                    "layer is read from that conv (the rest of the block does not run)"
                )
            elif not calls:
                out.append(
                    f"{name}: never ran in the forward; the rows are the layer calls that ran, "
                    "in their order"
                )
            else:
                expected = f"{usual * self.listed[k]:g}"
                out.append(
                    f"{name}: ran {calls} times in one forward where {expected} was expected; "
                    "each call is a row, in the order they ran"
                )
        return out


#: entries of a layer's input and the previous call's output that :class:`LayerFeeding`
#: compares (a stride through larger states: a residual sum breaks monotony at nearly every one)
FEED_ENTRIES = 1 << 10
#: rows :class:`LayerFeeding` compares at least, however wide the state: the per-channel tests
#: need rows (at width 256, 1024 entries were 4 rows, and a trained LayerNorm between two convs
#: went unseen: a review)
FEED_ROWS = 48
#: the layer calls :class:`LayerFeeding` compares (a period shows in the first few blocks)
FEED_CALLS = 64


def _fed(x: Tensor, out: Tensor, eps: float) -> bool:
    """Whether a layer's input ``x`` (rows ``[r, w]``, sampled) is a function of the previous
    layer's output ``out`` alone, with no stream added: entry by entry, monotone (``relu``,
    ``tanh``, a norm's affine map in eval mode) or turning once (``gelu``, ``silu``, ``mish``),
    also on the entries dropout kept (those not exactly 0: ``dropout`` in training), or row by
    row an affine map of it (``F.layer_norm``, ``F.normalize``, ``F.rms_norm`` without
    weights; rows of at least 4 entries, so that a line through them says something).  An
    input with the stream added ``h + f(h)`` is none of these: ``h`` moves every entry apart
    (an audit: gelu, dropout and ``F.layer_norm`` between two modules of a block hid it)."""
    if _follows(x, out, turns=1, eps=eps):
        return True
    kept = x != 0
    if 2 <= int(kept.sum()) < x.numel() and _follows(x[kept], out[kept], turns=1, eps=eps):
        return True
    if _columns_follow(x, out, eps) or _normed_columns(x, out, eps):
        return True
    if x.dim() != 2 or x.shape[1] < 4:
        return False
    dx, do = x - x.mean(1, keepdim=True), out - out.mean(1, keepdim=True)
    spread = do.square().sum(1, keepdim=True)
    if not bool((spread > 0).all()) or not bool(dx.abs().amax(1).gt(0).all()):
        return False  # a row of one value is an affine map of anything
    slope = (dx * do).sum(1, keepdim=True) / spread
    scale = max(float(x.abs().max()), float((slope * out).abs().max()), 1e-300)
    return float((dx - slope * do).abs().max()) <= 256 * eps * scale


def _informative(t: Tensor, eps: float) -> bool:
    """Whether a sampled state ``t`` (rows ``[r, w]``) can tell one function of another apart:
    a quarter of its entries (and 8) nonzero, and half its channels (and 2) varying across its
    rows beyond rounding.  A state of few nonzero entries (a nearly dead ``relu`` layer) is a
    monotone map of anything, one whose rows are all equal a norm's bias alone."""
    if t.dim() != 2 or t.shape[0] < 2 or t.shape[1] < 2:
        return False
    if int((t != 0).sum()) < max(8, t.numel() // 4):
        return False
    scale = max(float(t.abs().max()), 1e-300)
    spread = t.amax(0) - t.amin(0)
    return int((spread > 16 * eps * scale).sum()) >= max(2, t.shape[1] // 2)


def _renormed_sum(x: Tensor, y: Tensor, out: Tensor, eps: float) -> bool:
    """Whether ``y`` (rows ``[r, w]``, sampled) is ``norm(h + out)`` where ``x`` is ``norm(h)``
    for some unseen ``h``, with a norm without weights (``LayerNorm`` at initialisation,
    ``F.layer_norm``, ``RMSNorm``, ``F.normalize``): a Pre-LN block's first module reads the
    normed stream, so the next block's input is the norm of the stream plus the block's
    output.  Row by row, ``y`` is then ``a x + b out + c`` with ``a`` and ``b`` of one sign (a
    positive scale of ``h``); rows of at least 6 entries, so that a fit of three terms says
    something.  A trained norm's weight and bias per channel are not fitted: its blocks go
    unseen."""
    if x.dim() != 2 or not (x.shape == y.shape == out.shape) or x.shape[1] < 6:
        return False
    basis = torch.stack([torch.ones_like(x), x, out], dim=2)  # [r, w, 3]
    if not bool(torch.isfinite(basis).all() & torch.isfinite(y).all()):
        return False
    solution = torch.linalg.lstsq(basis, y.unsqueeze(2)).solution  # [r, 3, 1]
    fit = (basis @ solution).squeeze(2)
    a, b = solution[:, 1, 0], solution[:, 2, 0]
    scale = max(float(y.abs().max()), float((b[:, None] * out).abs().max()), 1e-300)
    one_sign = bool(((a > 0) & (b > 0)).all())
    return one_sign and float((y - fit).abs().max()) <= 256 * eps * scale


def _columns_follow(x: Tensor, out: Tensor, eps: float) -> bool:
    """Whether each channel of ``x`` (rows ``[r, w]``, sampled) is a function of the same
    channel of ``out`` alone, monotone or turning once, channel by channel its own (a trained
    ``BatchNorm``, in eval or training mode, then ``relu``; ``PReLU(C)``; a per-channel scale
    then ``gelu``), also on the entries dropout kept: the test of :func:`_fed` with one
    function for every entry missed them, and ``[conv, conv] * L`` with a trained
    ``BatchNorm`` between read a 3-block stack as 6 layers with no word (an audit).  A
    channel constant over the sampled rows (a dead ``relu`` channel) says nothing and is
    passed over; at least half the channels (and two) must move.  A stream added to the
    channels (``h + f(out)``) moves each of them apart from ``out``."""
    # from 4 channels, as the row-affine test: a width-2 layer norm's rows are nearly binary,
    # and followed anything by chance (a review)
    if x.dim() != 2 or x.shape != out.shape or x.shape[0] < 4 or x.shape[1] < 4:
        return False
    moving = 0
    for c in range(x.shape[1]):
        b, a = x[:, c], out[:, c]
        if float(b.max() - b.min()) <= 16 * eps * max(float(b.abs().max()), 1e-300):
            continue  # constant over these rows
        kept = b != 0
        if not (
            _follows(b, a, turns=1, eps=eps)
            or (2 <= int(kept.sum()) < b.numel() and _follows(b[kept], a[kept], turns=1, eps=eps))
        ):
            return False
        moving += 1
    return moving >= max(2, x.shape[1] // 2)


#: the ``eps`` a norm adds to its rows' mean square, tried as the fit's start (PyTorch's and
#: PyG's default 1e-5 among them), so that it starts at the answer for the usual norms
NORM_EPS = (0.0, 1e-12, 1e-8, 1e-6, 1e-5, 1e-4, 1e-3)


def _channel_fit(x: Tensor, u: Tensor, m: Tensor) -> tuple[Tensor, Tensor]:
    """Per channel, the least squares ``x ~ g u + h`` on the entries ``m`` holds: ``(g, h)``
    ``[w]`` each (0 and the mean where a channel's ``u`` does not vary)."""
    n = m.sum(0)
    su, sx = (m * u).sum(0), (m * x).sum(0)
    suu, sux = (m * u * u).sum(0), (m * u * x).sum(0)
    det = n * suu - su * su
    fit = det > 0
    g = torch.where(fit, n * sux - su * sx, 0.0) / torch.where(fit, det, 1.0)
    h = torch.where(n > 0, sx - g * su, 0.0) / n.clamp(min=1)
    return g, h


def _normed_columns(x: Tensor, out: Tensor, eps: float, rounds: int = 400) -> bool:
    """Whether ``x`` (rows ``[r, w]``, sampled) is a norm of ``out``'s rows with a weight and
    bias per channel, ``x[i, c] = g_c a_i (out[i, c] - m_i) + h_c`` (a trained ``LayerNorm``,
    PyG's ``LayerNorm(mode='node')``, ``RMSNorm``: ``m_i`` each row's mean, or 0), also on the
    entries a ``relu`` after it kept: with their affine map the row-affine test of
    :func:`_fed` missed them (an audit).  ``a_i`` starts as ``1 / sqrt(mean square + e)`` for
    the ``e`` of :data:`NORM_EPS` that fits best, then ``a`` and ``g_c, h_c`` are refined by
    alternating least squares; the fit must leave no entry off by more than the rounding (256
    units of ``eps``).  An input left off by over 1e-3 of its scale at the ninth round (a
    stream added) is none, and is given up on then."""
    r, w = x.shape if x.dim() == 2 else (0, 0)
    if r < 4 or w < 4 or x.shape != out.shape:
        return False
    scale = max(float(x.abs().max()), 1e-300)
    tol = 256 * eps * scale
    kept = (x != 0).to(torch.float64)
    # a channel (or row) with under 3 kept entries (a relu after a large negative bias) is
    # left out of the fit: it says too little
    m = kept * (kept.sum(0) >= 3)
    m = m * (m.sum(1, keepdim=True) >= 3)
    rows, channels = int((m.sum(1) > 0).sum()), int((m.sum(0) > 0).sum())
    # twice as many entries as unknowns, from at least 4 channels
    if channels < 4 or int(m.sum()) < 2 * (rows + 2 * channels):
        return False

    def off(a: Tensor, g: Tensor, h: Tensor, v: Tensor) -> float:
        return float(((a * g * v + h - x) * m).abs().max())

    for centred in (True, False):
        v = out - out.mean(1, keepdim=True) if centred else out
        square = v.square().mean(1, keepdim=True)
        if not bool((square > 0).all()):
            continue
        starts = [(square + e).rsqrt() for e in NORM_EPS]
        a = min(starts, key=lambda a: off(a, *_channel_fit(x, a * v, m), v))
        for done in range(1, rounds + 1):
            g, h = _channel_fit(x, a * v, m)
            q = g * v  # per row: x - h ~ a (g v)
            qq = (m * q * q).sum(1, keepdim=True)
            a = torch.where(qq > 0, (m * q * (x - h)).sum(1, keepdim=True), 0.0) / torch.where(
                qq > 0, qq, 1.0
            )
            if done % 8 == 1 or done == rounds:
                left = off(a, g, h, v)
                if left <= tol:
                    return True
                if done > 8 and left > 1e-3 * scale:
                    break
    return False


class LayerFeeding:
    """Whether the modules of a layer list are one per layer, from the calls of a forward.

    Each layer call's input is compared with the previous call's output: *fed* when it is
    that output (the same tensor) or a monotone function of it entry by entry (``relu(out)``,
    dropout in eval mode), with no stream added.  Plain layers are all fed (``h =
    relu(conv(h))``), layers with a skip none (``h = h + conv(norm(h))``).  Fed and unfed
    calls alternating with a period ``p >= 2`` mean ``p`` modules per residual block (``[norm,
    conv] * L`` or ``[conv, conv] * L`` in one list): every call was a row, so the rows inside
    the blocks (``norm(h)``, ``relu(conv(h))``) were read as the stream and the depth counted
    ``p`` times, with no word (an audit).  The calls must make whole blocks, and those that
    start a block (the unfed ones, the first) must share one width, the stream's.  Checked on
    the first forward of at least four calls, on its first :data:`FEED_CALLS`; the entries
    compared are copied during the forward and read to the host once, at its end
    (:meth:`note`), not once per layer."""

    def __init__(self, layers: Sequence[nn.Module], name: str) -> None:
        self.layers, self.name = distinct(layers), name
        self.done = False  # a forward has been checked: the hooks are removed
        self._handles: list = []
        self.reset()

    def reset(self) -> None:
        """A new forward pass."""
        # per layer call after the first: True (its input is the previous output), False (not
        # comparable), or its index among the calls, whose input rows and the previous call's
        # output rows (``inputs``, ``outputs``) are compared at the end
        self.calls: list[bool | int] = []
        self.last: Tensor | None = None  # the previous call's output
        self.count = 0  # the layer calls of the forward
        self.widths: list[int | None] = []  # each compared call's input width
        # every call's input and output rows (one stride through states of one shape: the
        # same rows), for the fed test and the skip around a block (:meth:`skip_period`)
        self.inputs: list[Tensor | None] = []
        self.outputs: list[Tensor | None] = []
        self.input_eps: list[float] = []  # each call's input's unit rounding, in its dtype

    def attach(self) -> list:
        """The hooks (none once a forward was checked: nothing runs per layer after it)."""
        if self.done:
            return []
        self._handles = []
        for layer in self.layers:
            self._handles.append(layer.register_forward_pre_hook(self._enter, with_kwargs=True))
            self._handles.append(layer.register_forward_hook(self._leave))
        return list(self._handles)

    def _enter(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        self.count += 1
        if len(self.calls) >= FEED_CALLS:
            return
        try:
            x: Tensor | None = first_tensor(inputs_of(args, kwargs))
        except TypeError:
            x = None
        self.widths.append(None if x is None or x.dim() == 0 else int(x.shape[-1]))
        self.inputs.append(self._rows(x))
        kind = x.dtype if x is not None and x.is_floating_point() else torch.float64
        self.input_eps.append(torch.finfo(kind).eps)
        self.outputs.append(None)  # until the call returns
        last, self.last = self.last, None
        if last is not None and x is not None:
            comparable = x.shape == last.shape and last.is_floating_point()
            self.calls.append(x is last or (len(self.inputs) - 1 if comparable else False))
        elif self.calls or last is not None:  # a call that cannot be compared: no pattern
            self.calls.append(False)

    def _leave(self, module: nn.Module, args: tuple, output: object) -> None:
        try:
            self.last = first_tensor(output)
        except TypeError:
            self.last = None
        if self.outputs and self.outputs[-1] is None and len(self.outputs) <= FEED_CALLS:
            self.outputs[-1] = self._rows(self.last)

    @staticmethod
    def _rows(x: Tensor | None) -> Tensor | None:
        """Whole rows (a stride through them) of ``x``, copied in float64: a norm of each row
        is told by its rows, not by entries strided across them."""
        if x is None or not x.is_floating_point() or x.dim() == 0:
            return None
        width = max(1, int(x.shape[-1]))
        step = max(1, x.numel() // width // max(FEED_ROWS, FEED_ENTRIES // width))
        return x.detach().reshape(-1, width)[::step].to(torch.float64, copy=True)

    def _read(self) -> list[bool]:
        """The calls' input and output rows read to the host at once (in place), and the
        calls' fed flags from them."""
        rows = [t for t in (*self.inputs, *self.outputs) if t is not None]
        flat = [t.reshape(-1) for t in rows]
        host = iter(torch.cat(flat).cpu().split([t.numel() for t in flat]) if flat else ())
        for held in (self.inputs, self.outputs):
            for i, t in enumerate(held):
                held[i] = None if t is None else next(host).reshape(t.shape)
        fed = []
        for call in self.calls:
            if isinstance(call, bool):
                fed.append(call)
                continue
            x, out = self.inputs[call], self.outputs[call - 1]
            # the rounding the entries were computed with (a float32 model's gelu is monotone
            # to its own, not float64's, last place), at most float32's: bfloat16's would let
            # the row-affine test pass any row (256 eps = 2), every call read fed and no block
            # seen (a review); a 16-bit gelu or layer norm is then missed, an exact map seen
            eps = min(self.input_eps[call], torch.finfo(torch.float32).eps)
            if x is not None and x.numel() and bool((x == x.reshape(-1)[0]).all()):
                # one value everywhere (a dead relu layer's zeros): any function's output, so
                # the previous one's; read unfed, it made a plain stack "blocks of 4" (an audit)
                fed.append(True)
                continue
            fed.append(x is not None and out is not None and _fed(x, out, eps))
        return fed

    def skip_period(self) -> int | None:
        """The number of modules per block that a skip around each block shows (read after
        :meth:`_read`), else None: the input of every ``p``-th call is the input of the call
        ``p`` before it plus (a monotone function of: dropout, a scale) the output of the call
        just before it, ``h = h + conv2(lin(conv1(h)))``, where no call's input is the input of
        the call before it plus that call's output (a skip around every module: one per layer).
        What runs between the modules of a block is then anything (a ``Linear`` between two
        convs hid the blocks from the fed test: an audit).  The sum may be normed or activated
        (``norm(h + z)``, ``relu(h + z)``), the branch end in a norm (``h + norm(z)``), or the
        block start with a norm without weights (``norm(h)`` in, ``norm(h + z)`` next:
        :func:`_renormed_sum`)."""
        ins, outs = self.inputs, self.outputs
        calls = min(len(ins), len(outs))

        f32 = torch.finfo(torch.float32).eps

        def skip(a: int, b: int, zero: bool = False, loose: bool = True) -> bool:
            # input b = a + f(output b - 1); with ``loose`` also the normed and activated sums
            x, y, out = ins[a], ins[b], outs[b - 1]
            if x is None or y is None or out is None or not (x.shape == y.shape == out.shape):
                return False
            # the sum's rounding in its own dtype (a 16-bit sum is off by 2**-8 of it, and the
            # blocks went unseen in bfloat16: a review), at least float32's as before
            unit = self.input_eps[b]
            eps = max(min(unit, f32), unit / 8)
            d = y - x
            if _follows(d, out, x, out, zero=zero, eps=eps):
                return True
            kept = d != 0  # dropout on the branch in training: the entries it kept
            if 2 <= int(kept.sum()) < d.numel() and _follows(d[kept], out[kept], x, eps=eps):
                return True
            if not loose:
                return False
            # a norm ending the branch, h + norm(z); a norm or an activation after the sum,
            # norm(h + z) (Post-LN), relu(h + z); a norm before the block, its input norm(h)
            # and the next block's norm(h + z): each hid the blocks (an audit).  Read only on
            # states that can tell a function apart (_informative): rows all equal (a state
            # oversmoothed to one row) fit a norm's bias alone, and a few nonzero entries any
            # monotone map, so a plain stack with a dead layer was told blocks (an audit)
            if _informative(d, eps) and _fed(d, out, eps):
                return True
            return _informative(y, eps) and (_fed(y, x + out, eps) or _renormed_sum(x, y, out, eps))

        # an input unchanged by a call (its branch exactly 0) counts as a skip around it, not
        # as a block's inside (a dead branch every other layer was told blocks of 2: a review)
        if calls < 4 or all(skip(j, j + 1, zero=True) for j in range(calls - 1)):
            return None
        for p in range(2, calls // 2 + 1):
            starts = range(0, calls - p, p)
            # the normed and activated sums are weaker tests: two blocks' joins, not one
            loose = len(starts) >= 2
            if all(skip(j, j + p, loose=loose) for j in starts) and not any(
                skip(j + i, j + i + 1, zero=True) for j in starts for i in range(p - 1)
            ):
                return p
        return None

    @staticmethod
    def period(fed: Sequence[bool]) -> int | None:
        """The number of modules per block that calls fed as ``fed`` (``fed[i]``: call ``i +
        1``) show, else None: a period with exactly one unfed call (the one that starts a
        block; a width-2 Post-LN stack with one fed call by chance in four was told "blocks
        of 4", whose every module but one takes the previous output: a review)."""
        for p in range(2, (len(fed) + 1) // 2 + 1):
            repeats = all(fed[i] == fed[i + p] for i in range(len(fed) - p))
            if repeats and list(fed[:p]).count(False) == 1:
                return p
        return None

    def note(self) -> str | None:
        """At the end of a forward: the note on a list with several modules per block."""
        if self.done or len(self.calls) < 3:
            self.reset()
            return None
        self.done = True
        for handle in self._handles:
            handle.remove()
        fed = self._read()
        p, calls = self.period(fed), self.count
        skipped = p is None and (p := self.skip_period()) is not None
        # the calls a block starts with (unfed) carry the stream, of one width, and the
        # blocks are whole: a stack with a skip only where the width allows one
        # (h = h + relu(conv(h)) if same shape else relu(conv(h))) alternates too, and was
        # told "blocks of 2" of its layers (a review)
        starts = (
            list(range(0, calls, p))
            if skipped and p
            else [0] + [i + 1 for i, step in enumerate(fed) if not step]
        )
        widths = {self.widths[i] for i in starts if i < len(self.widths)}
        whole = p is not None and calls % p == 0 and len(widths) == 1 and None not in widths
        self.reset()
        if p is None or not whole:
            return None
        how = (
            "the stream skips each block (a block's first module takes the previous block's "
            "input plus its last module's output), so"
            if skipped
            else "in each, all but one module take the previous module's output alone as "
            "input (no stream added), so"
        )
        where = (
            "module per block and capture='residual', with stream=[...]"
            if skipped
            else "module per block (its message passing) and capture='residual', with "
            "stream=[...] where that module's input is not the stream (a norm before it)"
        )
        return (
            f"{self.name}'s {calls} module calls run as blocks of {p}: {how} the {calls} calls "
            f"were read as {calls} layers (each block {p} times) and the rows inside the blocks "
            f"are not the residual stream; pass layers=[...] with one {where}: the modules "
            "whose input is the stream before each block"
        )


def _refuse_hetero(model: nn.Module | None, graph: object) -> None:
    """Refuse a heterogeneous graph or a ``to_hetero`` model, saying what to pass instead:
    the model first (the graph's hint, one edge type, was refused again for a ``to_hetero``
    model: an audit)."""
    if model is not None and _is_hetero_model(model):
        raise ValueError(
            "model: a to_hetero model is not supported; probe one node type of its "
            "homogeneous original (Probe(model, data[node_type...].edge_index)) or run "
            "it on data.to_homogeneous()"
        )
    hetero = hetero_hint(graph)
    if hetero is not None:
        raise ValueError(hetero)


def refuse_compiled(model: nn.Module | None, what: str) -> None:
    """One line for a ``torch.compile`` model: its compiled forward does not run the layers'
    hooks as eager code does (dynamo failed inside the user's forward call)."""
    original = getattr(model, "_orig_mod", None)
    if isinstance(original, nn.Module):
        raise ValueError(
            f"{what}: a torch.compile model; pass the module it compiled, model._orig_mod "
            "(the same weights), and call that one while it is measured"
        )


def _check_steps(reduce: str, every: int) -> tuple[str, int]:
    """``reduce`` (over the graphs of a batch) and ``every`` (forward passes), validated."""
    if reduce not in ("mean", "none"):
        raise ValueError(f"reduce: expected one of 'mean', 'none', received {reduce!r}")
    if isinstance(every, bool) or not isinstance(every, int) or every < 1:
        raise ValueError(f"every: expected a positive integer, received {every!r}")
    return reduce, every


def _check_similarity(dtype: torch.dtype, sample: int | None) -> tuple[torch.dtype, int | None]:
    if dtype not in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        raise ValueError(f"similarity_dtype: expected a floating dtype, received {dtype}")
    if sample is not None and (isinstance(sample, bool) or sample < 1):
        raise ValueError(
            f"similarity_sample: expected a positive number of nodes, received {sample!r}"
        )
    return dtype, sample


def _relative_per_step(energy: NDArray, steps: NDArray, layers: NDArray) -> tuple[NDArray, NDArray]:
    """``relative_energy`` from the Laplacian energies ``[rows, graphs]`` (rows sorted by step,
    then layer): per step, per graph (columns), along the layers; NaN at a layer whose layer
    ``k - 1`` has no row in its step (R compares a layer with the one before it, not with the
    last one recorded).  With it, ``[rows, graphs]`` where the energy at layer ``k - 1`` is 0:
    the ratio is undefined there (0/0 or x/0), not poisoned."""
    import numpy as np

    relative = np.full_like(energy, np.nan)
    zero_before = np.zeros(energy.shape, dtype=bool)
    for step in np.unique(steps):
        at = np.flatnonzero(steps == step)
        relative[at] = relative_energy(torch.from_numpy(energy[at])).numpy()
        follows = np.diff(layers[at]) == 1  # the row before is layer k - 1
        relative[at[1:][~follows]] = np.nan
        zero_before[at[1:][follows]] = energy[at[:-1][follows]] == 0
    return relative, zero_before


#: The note of a Probe given a layer right after another than the layer before it.
OUT_OF_ORDER_NOTE = (
    "a layer was recorded right after another than the layer before it (out of order, or "
    "with a layer left out): the columns measured against the previous layer's state "
    "(mean_cosine_similarity) are NaN there, and relative_energy wherever layer k - 1 has no "
    "row; record the layers of a pass in order 0, 1, ..., L (recording a layer again by hand "
    "starts the next step)"
)

RUN_ORDER_NOTE = (
    "the forward ran the layers in another order than they are listed (a layer after one "
    "listed later): each row sits at its module's place in the list, not at the place it ran "
    "in, and the columns measured against the previous layer's state are NaN there; pass "
    "layers=[...] (and stream=[...]) in the order the forward runs them"
)

#: The note of a stream whose width changes between inner layers (layer 0, the input, is often
#: wider, and a last layer that maps to the classes narrower: neither is noted).
WIDTH_NOTE = (
    "a layer's state is wider or narrower than the layer's before it (e.g. blocks that "
    "concatenate, DeepGCNLayer(block='dense')): the columns measured against the previous "
    "layer's state (mean_cosine_similarity) are NaN there, and the energies are those of the "
    "state as wide as it is"
)

#: The note of a Probe whose recorded forwards ran on different graph inputs.
GRAPH_CHANGED_NOTE = (
    "a recorded forward ran on other graph inputs (edge_index, batch) than the first one, "
    "and every step is measured on the graph the Probe was built with: for the mini-batches "
    "of a loader build one Probe per batch (if the graph changes on purpose, e.g. edges "
    "dropped, the measuring graph stays the one given)"
)


def graph_inputs(args: tuple, kwargs: dict) -> list[Tensor]:
    """The integer tensors among a forward's arguments (``edge_index``, a ``batch`` vector),
    with a ``Data``-like argument's ``edge_index`` and ``batch``: what tells one graph from
    another between forwards."""
    found: list[Tensor] = []
    for value in (*args, *kwargs.values()):
        if isinstance(value, Tensor):
            if not (value.is_floating_point() or value.is_complex() or value.dtype == torch.bool):
                found.append(value)
        elif isinstance(getattr(value, "edge_index", None), Tensor):
            found.append(value.edge_index)
            if isinstance(getattr(value, "batch", None), Tensor):
                found.append(value.batch)
    return found


def _per_graph(layers: NDArray, steps: NDArray, values: dict[str, NDArray]) -> dict[str, NDArray]:
    """The columns of a frame with one row per graph (``reduce="none"``): ``values`` are
    ``[rows, graphs]`` (NaN for a graph id without a node)."""
    import numpy as np

    graphs = next(iter(values.values())).shape[1]
    return {
        "layer": np.repeat(layers, graphs),
        **{c: v.reshape(-1) for c, v in values.items()},
        "step": np.repeat(steps, graphs),
        "graph": np.tile(np.arange(graphs), len(layers)),
    }


def _graph_mean(
    layers: NDArray,
    steps: NDArray,
    values: dict[str, NDArray],
    present: NDArray | None = None,
    no_ratio: NDArray | None = None,
) -> dict[str, NDArray]:
    """The columns of a frame with one row per layer: ``values`` (``[rows, graphs]``) averaged
    over the graphs; with ``present`` (``[rows, graphs]``), over the graphs that have a node
    (a graph id without one has nothing to measure; a NaN of a graph that has nodes still makes
    the mean NaN).  ``no_ratio`` (``[rows, graphs]``): the graphs whose ``relative_energy`` is
    undefined (energy 0 at the layer before), left out of its mean."""
    import numpy as np

    def mean(v: NDArray) -> NDArray:
        if present is None:
            return v.mean(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(present, v, 0.0).sum(axis=1) / present.sum(axis=1)

    out = {"layer": layers, **{c: mean(v) for c, v in values.items()}, "step": steps}
    if "relative_energy" in out and no_ratio is not None and values["relative_energy"].shape[1] > 1:
        # a graph whose energy is 0 has no ratio (0/0, e.g. a one-node graph): the mean is over
        # the graphs where it is defined (NaN where none is).  Only those are left out: a
        # nanmean also dropped a graph made NaN by a NaN in its state, whose other columns
        # were NaN (an audit)
        defined = ~no_ratio if present is None else ~no_ratio & present
        with np.errstate(invalid="ignore", divide="ignore"):
            total = np.where(defined, values["relative_energy"], 0.0).sum(axis=1)
            out["relative_energy"] = total / defined.sum(axis=1)
    return out


def normalised_rows(x: Tensor) -> bool:
    """Whether the rows of ``x`` ``[n, d]`` look like the output of a function that normalises
    each row, as a Pre-LN block's norm would hand its layer: how :class:`Probe` tells, at run
    time, that what it reads as the stream at a layer's input is ``norm(h)``.  Rows that all
    satisfy one equation (:func:`_on_one_surface`): linear in the entries, ``a . y = c``
    (``F.layer_norm`` with any affine: its rows sum to the affine's constant), or in their
    squares, ``b . y^2 = 1`` (``F.normalize``, ``F.rms_norm`` with any weight, a layer norm
    without affine); the mean-0, variance-1 rows of a layer norm were the only kind known, and
    ``F.normalize`` or a trained affine read as the stream with no word (an audit)."""
    dev = _row_deviations(x, rows=None).get("normalised")
    if dev is not None and bool((dev <= 1e-3).to(torch.float64).mean() >= 0.9):
        return True
    return _on_one_surface(x)


#: the widest state whose rows :func:`_on_one_surface` tests (an SVD of ``4 d x d``, up to three
#: times per forward: about 0.3 s at 512 on 2 CPU cores)
SURFACE_WIDTH = 512


def _on_one_surface(x: Tensor, rows: int | None = None) -> bool:
    """Whether the rows of ``x`` (at most ``rows`` of them, at a stride) satisfy one linear
    equation in their entries or in their squares, to the rounding of ``x``'s precision: the
    columns of ``y`` (or ``y^2``) centred and scaled to unit norm, their smallest singular value
    below ``ROW_ROUNDING * d * eps`` (at most 1e-3) times the largest, and the next one well
    above both it and rounding (one equation, not the many of a state of lower rank), with a
    weight on every column (a constant channel's centred column is zero: no equation).
    Centring leaves out the constant the rows share, which a layer norm's bias made correlate
    with every column (a float32 norm with an affine at width 512 was missed: a review).  Rows
    without a negative entry are none (probabilities, one-hot rows).  Needs twice as many rows
    as columns (fewer rows always satisfy some equation); False otherwise."""
    if x.dim() != 2 or not x.is_floating_point() or not 2 <= x.size(1) <= SURFACE_WIDTH:
        return False
    n, d = x.shape
    if n < 2 * (d + 1):
        return False
    # four rows per column are enough to tell one equation from none (an SVD of 4096 x 2048
    # took 14 s, three times per forward: a review)
    z = x.detach()[:: max(1, n // (rows or min(KIND_ROWS, 4 * (d + 1))))].to(torch.float64)
    if not bool(torch.isfinite(z).all()):
        return False
    if not bool((z < 0).any()):
        # rows with no negative entry (probabilities, one-hot or row-normalised features) sum
        # to a constant too, and are no norm's output (a review)
        return False
    eps = torch.finfo(x.dtype).eps
    tol = min(ROW_ROUNDING * d * eps, 1e-3)
    for values_of in (z, z * z):
        system = values_of - values_of.mean(dim=0, keepdim=True)
        scale = torch.linalg.vector_norm(system, dim=0)
        if bool((scale == 0).any()):  # a constant column: an equation of one column
            continue
        system = system / scale
        values = torch.linalg.svdvals(system)
        top, least, next_ = float(values[0]), float(values[-1]), float(values[-2])
        # exactly one equation: a state of lower rank (a narrow encoder through linear layers)
        # satisfies many, and was taken for normalised rows (an audit)
        if not (least <= tol * top and next_ > max(100 * least, 10 * d * eps * top)):
            continue
        # over every column, as a norm's is (a review)
        vector = torch.linalg.svd(system, full_matrices=False)[2][-1]
        weights = vector.abs()
        if not bool((weights >= 0.01 * weights.max()).all()):
            continue
        # and on every row, not only those read: a GAT whose last input held a channel alive
        # on 15 of 2,708 nodes had its output's sampled rows on one plane, and its last row
        # was left out as normalised (2 of 5 seeds; an audit)
        mean = values_of.mean(dim=0, keepdim=True)
        bound = 10 * max(least, d * eps * top)
        square = values_of is not z
        if _equation_holds(x, mean, scale, vector, bound, square):
            return True
    return False


def _equation_holds(
    x: Tensor, mean: Tensor, scale: Tensor, vector: Tensor, bound: float, square: bool
) -> bool:
    """Whether every row ``y`` of ``x`` (or ``y^2``, with ``square``) satisfies the equation
    :func:`_on_one_surface` found on its sampled rows, ``((y - mean) / scale) . vector``
    within ``bound``, rows of zeros aside (a norm maps a zero row to zeros: an isolated node
    of zero features broke a weighted ``F.rms_norm``'s equation, and the normalised output
    was read as the stream: a review); read in blocks of rows."""
    block = max(1, (1 << 20) // max(1, x.size(1)))
    for start in range(0, x.size(0), block):
        y = x.detach()[start : start + block].to(torch.float64)
        if square:
            y = y * y
        if not bool(torch.isfinite(y).all()):
            return False
        off = (((y - mean) / scale) @ vector).abs()
        if float(torch.where(y.any(dim=1), off, 0.0).max()) > bound:
            return False
    return True


#: the row kinds :func:`_row_kind` reads only where a layer's output fed the last layer
SURFACE_KINDS = ("unit-norm", "unit root-mean-square")

#: units in the last place per column that a row function's output is held to (its sum, its
#: log-sum-exp), at most 1e-3
ROW_ROUNDING = 64
#: rows :func:`_row_deviations` reads (a stride through larger states)
KIND_ROWS = 4096


def _row_deviations(x: Tensor | None, rows: int | None = KIND_ROWS) -> dict[str, Tensor]:
    """How far each row of ``x`` (``[n, d]``; at most ``rows`` of them, at a stride; None: all)
    is from what a function applied row by row makes: ``log-probability`` (``log_softmax``: 0
    at most, log-sum-exp 0), ``probability`` (``softmax``: 0 at least, sum 1), ``unit-norm``
    (``F.normalize``), ``unit root-mean-square`` (``F.rms_norm`` without weight), ``normalised``
    (a layer norm with its initial affine: mean 0, variance in [0.5, 1], inf below 0.5; from
    4 columns).  Empty for anything else."""
    if x is None or x.dim() != 2 or x.size(0) == 0 or x.size(1) < 2 or not x.is_floating_point():
        return {}
    step = 1 if rows is None else max(1, x.size(0) // rows)
    z = x.detach()[::step].to(torch.float64)
    inf = torch.tensor(math.inf, dtype=torch.float64, device=z.device)
    out = {
        "log-probability": torch.where((z <= 0).all(dim=1), torch.logsumexp(z, dim=1).abs(), inf),
        "probability": torch.where((z >= 0).all(dim=1), (z.sum(dim=1) - 1).abs(), inf),
    }
    squares = z.pow(2).mean(dim=1)
    out["unit-norm"] = (squares * z.size(1) - 1).abs()  # F.normalize
    out["unit root-mean-square"] = (squares - 1).abs()  # F.rms_norm without a weight
    if z.size(1) >= 4:
        var, mean = torch.var_mean(z, dim=1, correction=0)
        spread = torch.where(var >= 0.5, (var - 1).clamp(min=0), inf)
        out["normalised"] = torch.maximum(mean.abs(), spread)
    return out


def _row_kind(x: Tensor | None, before: Tensor | None, surfaces: bool = True) -> str | None:
    """The kind of rows (:func:`_row_deviations`) that 90% of ``x``'s rows are, to the rounding
    of its precision (:data:`ROW_ROUNDING` units in the last place per column; 1e-3 for a
    norm's mean and variance), while ``before``'s sit far from it (median deviation 0.01 or
    more): a function applied to the stream after the last block.  A stream converging onto
    such rows (label propagation onto probability vectors) is near them before too: its last
    row was left out where a tolerance of 1e-4 was crossed between the last two layers.
    Failing those, and with ``surfaces``, rows on one surface (:func:`_on_one_surface`:
    ``F.normalize``, ``F.rms_norm``) where ``before``'s are not are ``normalised``, as are unit-norm
    and unit root-mean-square rows (without ``surfaces`` those two kinds are not read)."""
    if x is None:
        return None
    eps = torch.finfo(x.dtype).eps if x.is_floating_point() else 0.0
    rounding = min(ROW_ROUNDING * x.size(-1) * eps, 1e-3)  # bfloat16 would allow 4 at width 8
    earlier = _row_deviations(before)
    for kind, dev in _row_deviations(x).items():
        if not surfaces and kind in SURFACE_KINDS:
            continue
        tol = 1e-3 if kind == "normalised" else rounding
        share = float((dev <= tol).to(torch.float64).mean())
        far = kind in earlier and float(earlier[kind].median()) >= 0.01
        if share >= 0.9 and far:
            return kind
    if surfaces and _on_one_surface(x) and before is not None and not _on_one_surface(before):
        # F.normalize(h), F.rms_norm(h) at the output (any weight, or a layer norm's affine):
        # read as the stream after the last block, a last relative energy of a collapse that
        # was none (an audit)
        return "normalised"
    return None


PRENORM_NOTE = (
    "capture='residual': the stream read at the inputs of the first layers has normalised "
    "rows (all on one surface: a layer norm's, with or without its affine, or one norm per "
    "row) but the stream after the last block does not: the blocks look like Pre-LN with a "
    "norm that is a function (h = h + conv(F.layer_norm(h)), F.normalize, F.rms_norm), so "
    "every row before the last holds norm(h), not the stream h; use a norm module "
    "(nn.LayerNorm, one per block or shared: the probe follows it back to its input), pass "
    "stream=[...] (modules whose input is h), or record h yourself: Probe(None, graph) and "
    "probe.record(k, h)"
)


def _autocast(device: torch.device) -> torch.dtype | None:
    """The precision ``torch.autocast`` computes in on ``device`` now, or None (off, or a
    device type autocast does not know)."""
    try:
        if torch.is_autocast_enabled(device.type):
            return torch.get_autocast_dtype(device.type)
    except RuntimeError:  # e.g. 'meta': unknown device type for autocast
        pass
    return None


def _coarsest(dtypes: Iterable[torch.dtype | None]) -> torch.dtype | None:
    """The floating precision of ``dtypes`` with the largest epsilon (None: none is one)."""
    floats = [d for d in dtypes if d is not None and d.is_floating_point]
    return max(floats, key=lambda d: torch.finfo(d).eps, default=None)


class Probe:
    """Record per-layer measures of ``model`` inside a ``with`` block.

    **Which state is layer k** (one convention for every model): layer 0 is the *input*
    of the first layer call of the forward, layer ``k >= 1`` what the ``k``-th call hands on
    (calls counted in the order they run, whatever the module's place in the list; a module
    listed for several layers, weight tying, is one layer per call):

    - ``capture="output"`` (default): the output of the ``k``-th layer call, among the layer
      modules: an oversmooth ``DepthModel``'s blocks (layer 0 = the encoder output), a PyG
      ``BasicGNN``'s ``convs`` (before the activation, norm and dropout BasicGNN applies
      between convolutions), ``layers`` when given, else ``model.convs``/``layers``/``blocks``
      (for a stack run in list order: block ``k``, ``convs[k-1]``, ``layers[k-1]``).
    - ``capture="residual"``: the residual stream.  Blocks whose outputs are the stream are
      used directly (``DepthModel`` blocks, a ``model.blocks`` ModuleList, PyG
      ``DeepGCNLayer``).  Otherwise (convolutions inside a ``forward`` with skip
      connections, or ``layers=`` given) layer ``k < L`` is the stream entering the layer call
      ``k + 1`` and layer ``L`` the stream after the last block:

      * norms outside the layers, one ``ModuleList`` paired with them (``model.norms``): the
        residual identity tells whether layer ``k`` is the *input of the norm* that made the
        layer's input (Pre-LN, ``h = h + conv(norm(h))``, or ``z = norms[k](h)`` run at the
        end of a block for the next: ``h``, not ``norm(h)``), with layer ``L`` the input of
        the first other norm that runs after the last block (a final norm), or the layer's
        own input (Post-LN, PyG's ``BasicGNN``); where it shows neither (a residual FFN after
        each layer), ``norms[k]`` run before ``convs[k]`` in the same block makes it Pre-LN.
      * no norms outside the layers: the layer's input (the state after the skip and
        activation), as for a ``BasicGNN`` (conv -> norm -> activation).
      * anything else (several norm lists, norms not paired with the layers): refused at
        construction; pass ``stream=``.
      * ``stream=[m0, ..., m{L-1}]`` (optionally ``m{L}``): layer ``k`` is the input of ``mk``.

      When no module reads the stream after the last block, layer ``L`` is the model's output
      when it has the width and rows of the stream and no module outside the layers made it
      after the last layer call; a norm that did (``return norm(h)``) gives its input, a
      parameter-free module (an activation) its output, and a head with parameters
      (``return lin(h)``, PyG's ``jk=`` readout) hides the stream, whatever its width, unless
      its input came from a norm (``lin(norm(h))``: ``h``).  Not recorded otherwise (e.g.
      after a classification head; a warning says so).
    - models without one module per layer: ``Probe(None, graph)`` records only what you
      hand to :meth:`record` (``probe.record(k, x)``); it attaches nothing.

    **Graphs**: ``graph`` is anything :func:`~oversmooth.graph.as_graph` accepts: an
    ``edge_index``, a PyG ``Data``/``Batch``, a ``SparseTensor``, a torch sparse or a dense
    adjacency (a dense batch ``[B, N, N]`` takes ``mask=`` ``[B, N]``, as PyG's dense layers
    do; its states ``[B, N, F]`` are then read at the masked nodes), or a
    :class:`GraphOperator`.  With a ``Batch`` (or ``batch=``) every metric is computed per
    graph: ``reduce="mean"`` (default) gives the average over the graphs, one row per layer;
    ``reduce="none"`` one row per graph, with a ``graph`` column.  ``HeteroData`` and dicts are
    refused here, with what to pass instead.

    **Steps**: every forward pass of ``model`` inside the probe is a new ``step`` (0, 1, ...;
    a column of :meth:`to_frame`); ``every=N`` records only passes 0, N, 2N, ...
    ``mean_cosine_similarity``, ``angular_distance`` and ``relative_update`` are NaN at each
    step's first layer.  Per step only the 0-d rows are kept (layer states only with
    ``similarity=True``, and then only for the last step).

    Args:
        model: the model to observe (left unchanged: the probe keeps its state on itself
            and its hooks only inside the ``with`` block), or ``None`` to record states by
            hand with :meth:`record`.
        graph: the graph on which energies are measured (the input graph, without self
            loops unless you add them).  For an edge-set model (``conv="esa"``, whose states
            are edge states) any graph but a :class:`GraphOperator` is taken as the model's
            input graph and energies are measured on its line graph
            (``model.state_graph``); a :class:`GraphOperator` is used as given.
        metrics: names from :func:`available_metrics`; default
            ``laplacian_energy, dirichlet_energy, relative_energy, mean_cosine_similarity,
            feature_norm``.
        layers: modules to record (default: found automatically, see above); not empty.
        capture: ``"output"`` or ``"residual"`` (see above).
        edge_weight: ``[num_edges]`` weights of an ``edge_index`` graph.
        batch: ``[num_nodes]`` graph id of each node (a ``Batch`` brings its own).
        mask: ``[B, N]`` bool, the real nodes of a dense batch ``[B, N, N]`` (PyG's
            ``to_dense_batch`` mask); only with a dense adjacency.
        reduce: ``"mean"`` or ``"none"`` over the graphs of a batch.
        every: record every ``every``-th forward pass only.
        similarity: keep every layer state (compactly) to return the ``L x L``
            similarity matrix; memory then grows with depth, except on the CPU where a
            layer's rows over :data:`SPILL_BYTES` go to a temporary file (``TMPDIR``).
        similarity_dtype: storage of the kept unit rows: float32 (default;
            error ~1e-7) or float16 (half the memory; error ~1e-3 per entry).
        similarity_sample: keep only this many nodes (a seeded uniform sample
            without replacement); each matrix entry is then a sample mean of
            cosines, with standard error at most ``1/sqrt(sample)`` on one graph.  On a
            batch each graph's mean is over its own sampled nodes (a graph with none is
            left out), so a graph given few of the sample weighs as much as the others
            and the bound does not hold: sample more, or keep every node.
        head_energies: for oversmooth attention models, also record each
            block's output energy under each head's own attention
            ``(1/n)||P_h X - X||^2`` as ``head_energy_<h>`` (NaN for global
            attention blocks and layer 0); the attention is read from each layer's
            ``mp.hook_attention`` (:class:`~oversmooth.nn.hooks.HookPoint`).
        self_loops: add self loops to ``graph`` before measuring.
        sample_seed: seed of the similarity node sample.
        stream: with ``capture="residual"`` on layers that are not blocks, the modules whose
            *input* is the stream before each layer (``L`` of them, e.g.
            ``list(model.norms)``), optionally one more whose input is the stream after the
            last block (e.g. a final norm).
    """

    def __init__(
        self,
        model: nn.Module | None,
        graph: object,
        metrics: Sequence[str] = DEFAULT_METRICS,
        *,
        layers: Sequence[nn.Module] | None = None,
        capture: str = "output",
        edge_weight: Tensor | None = None,
        batch: Tensor | None = None,
        mask: Tensor | None = None,
        reduce: str = "mean",
        every: int = 1,
        similarity: bool = False,
        similarity_dtype: torch.dtype = torch.float32,
        similarity_sample: int | None = None,
        head_energies: bool = False,
        self_loops: bool = False,
        sample_seed: int = 0,
        stream: Sequence[nn.Module] | None = None,
    ) -> None:
        _refuse_hetero(model, graph)
        refuse_compiled(model, "model")
        self._init_metrics(metrics)
        self.reduce, self.every = _check_steps(reduce, every)
        self.capture, self.model = capture, model
        modules = self._init_layers(model, layers, capture, stream)
        self.num_layers = len(modules) + 1 if modules else None
        if head_energies and not isinstance(model, DepthModel):
            raise ValueError(
                "head_energies: only oversmooth models expose their attention; "
                "set head_energies=False"
            )
        self.head_energies = head_energies
        self.similarity = similarity
        self.similarity_dtype, self.similarity_sample = _check_similarity(
            similarity_dtype, similarity_sample
        )
        self.sample_seed = check_seed("sample_seed", sample_seed)
        self._init_graph(graph, edge_weight, batch, mask, self_loops)
        if head_energies and (batch is not None or self._batched):
            raise ValueError(
                "head_energies: not available per graph; probe one graph of the batch or set "
                "head_energies=False"
            )
        self._handles: list = []
        self._warned = False
        self._tap = (
            None
            if self._plan is None
            else _StreamTap(
                self._plan,
                modules,
                self._stream_state,
                self.model,
                self.model is not None and not self._plan.taps and not _is_basic_gnn(self.model),
            )
        )
        direct = start = None
        if not self._stream_inputs:  # the tap reads the stream itself, layer 0 included
            direct, start = self._conv_alone, self._layer_zero
        self._calls = LayerCalls(modules, self._names, direct, start)
        self.reset()

    def _list_name(self, modules: Sequence[nn.Module]) -> str:
        """``model.layers`` for the list ``modules`` were found in (or are), else ``layers``."""
        assert self.model is not None
        named = _named_list(self.model, _LAYER_LISTS)
        if named is not None and {id(m) for m in modules} <= {id(m) for m in named[1]}:
            return f"model.{named[0]}"
        return "layers"

    def _init_metrics(self, metrics: Sequence[str] | str) -> None:
        """The columns (:attr:`metrics`, validated) and their kernels from the registry: on one
        layer state, and between the previous layer's state and this one."""
        if isinstance(metrics, str):
            metrics = [m.strip() for m in metrics.split(",") if m.strip()]
        self.metrics = list(dict.fromkeys(metrics))
        if not self.metrics:
            raise ValueError(
                "metrics: expected at least one metric name, received none; pass e.g. "
                "metrics=['laplacian_energy'] or leave the default (oversmooth metrics lists "
                "them)"
            )
        self._layer_fns: dict[str, Callable[[LayerState], Tensor]] = {}
        for name in self.metrics:
            kernel = layer_kernel(name)  # raises for an unknown name
            if kernel is not None:
                self._layer_fns[name] = kernel
        # relative_energy is derived from the Laplacian energy, which is then measured too
        if "relative_energy" in self.metrics and "laplacian_energy" not in self._layer_fns:
            self._layer_fns["laplacian_energy"] = cast(
                Callable[[LayerState], Tensor], METRICS["laplacian_energy"].fn
            )
        self._between_fns = {
            name: fn for name in self.metrics if (fn := between_kernel(name)) is not None
        }

    def _init_layers(
        self,
        model: nn.Module | None,
        layers: Sequence[nn.Module] | None,
        capture: str,
        stream: Sequence[nn.Module] | None,
    ) -> list[nn.Module]:
        """The layer modules, and how the stream is read between them (see :class:`Probe`)."""
        if capture not in _CAPTURES:
            raise ValueError(
                f"capture: expected one of {', '.join(_CAPTURES)}, received {capture!r}"
            )
        if layers is not None and not list(layers):
            raise ValueError(
                "layers: received an empty list, so the probe would record nothing from the "
                "forward; expected the modules whose outputs are layers 1..L (e.g. "
                "layers=list(model.convs)); leave layers unset to find them, or record the "
                "states yourself: Probe(None, graph) and probe.record(k, x)"
            )
        if model is None:
            if layers is not None or stream is not None:
                raise ValueError(
                    "model: None records only what probe.record(k, x) is given; pass the model "
                    "to record its layers, or leave layers and stream unset"
                )
            self.layers, self._stream_inputs, self._plan = [], False, None
            self._check_prenorm = self._check_blocks = False
            self._feeding = None
            self._layer_notes, self._outside = [], []
            self._outside_ran = []
            self._names = _ModuleNames(None)
            return []
        if layers is None:
            modules, are_blocks = find_layers(model, capture)
            # found by a list's name (a DepthModel's blocks and a BasicGNN's convs are known)
            found = not isinstance(model, DepthModel) and not _is_basic_gnn(model)
            self._layer_notes = _found_notes(model, modules) if found else []
            self._outside = _outside_passing(model, modules) if found else []
        else:
            modules, are_blocks = _owned(model, layers, "layers"), False
            self._layer_notes, self._outside = [], []
        self._outside_ran = [0] * len(self._outside)
        steps = _propagation_steps(modules)
        if steps is not None:
            self._layer_notes.append(steps)
        self.layers = modules
        # the stream between plain layer modules (skips in forward): see StreamPlan
        self._stream_inputs = capture == "residual" and not are_blocks and bool(modules)
        # blocks found by their place (model.blocks, DeepGCNLayer) are checked at run time to
        # hand their outputs on unchanged (an oversmooth model's are, by construction)
        self._check_blocks = (
            capture == "residual" and are_blocks and not isinstance(model, DepthModel)
        )
        if stream is not None and not self._stream_inputs:
            raise ValueError(
                "stream: only with capture='residual' on layers that are not blocks (whose "
                "outputs are the stream already); leave stream unset"
            )
        tied = _tied_name(model, modules) if self._stream_inputs else None
        if tied is not None:
            name, count = tied
            raise ValueError(
                f"capture='residual': {name} stands for {count} of the {len(modules)} layers "
                "(weight tying), and the stream between plain layers is read at each one's own "
                "place; use capture='output' (each call of a layer is a row, in the order they "
                "run), or record the stream yourself: Probe(None, graph) and probe.record(k, x)"
            )
        self._plan = stream_plan(model, modules, stream) if self._stream_inputs else None
        # each layer's input (or its paired norm's) taken as the stream (no taps): a Pre-LN
        # block whose norm is a function or shared would hand norm(h) instead, as would a
        # paired norm given a function's output (norms[k](F.layer_norm(h))); checked at run time
        self._check_prenorm = (
            self._plan is not None and not self._plan.taps and not _is_basic_gnn(model)
        )
        self._names = _ModuleNames(model)  # walked only when a message names a module
        # a list of plain layers (not blocks, no stream given) may hold several modules per
        # block: checked on a first forward
        self._feeding = (
            LayerFeeding(modules, self._list_name(modules))
            if not are_blocks and stream is None and len(modules) >= 4
            else None
        )
        return modules

    def _init_graph(
        self,
        graph: object,
        edge_weight: Tensor | None,
        batch: Tensor | None,
        mask: Tensor | None,
        self_loops: bool,
    ) -> None:
        """The measuring operator: built (and validated) now, on the line graph for an edge-set
        model, or from the first state for a plain ``edge_index`` (see :meth:`_graph_for`)."""
        self._graph_arg = graph
        self._batch = batch
        self._edge_weight = edge_weight
        self._input_notes: list[str] = []  # what the first forward's arguments said
        # said at the first record
        self._graph_note = _sample_note(graph) or _normalised_graph_note(graph, edge_weight)
        # a dense batch [B, N, N] given without its node mask: its [B, N] (see
        # _check_first_inputs)
        self._dense_unmasked: tuple[int, ...] | None = None
        if isinstance(graph, Tensor) and graph.layout == torch.strided and graph.dim() == 3:
            self._dense_unmasked = None if mask is not None else tuple(graph.shape[:2])
        self._self_loops = self_loops
        self._operator: GraphOperator | None = None
        # a plain edge_index takes its num_nodes from the first state (trailing isolated
        # nodes); everything else is normalised (and validated) now
        self._lazy = isinstance(graph, Tensor) and not _is_adjacency(graph)
        if mask is not None and self._lazy:
            raise ValueError(
                "mask: only with a dense adjacency [B, N, N]; an edge_index graph takes batch="
            )
        if edge_states(self.model) and not isinstance(graph, GraphOperator):
            # an edge-set model's states are its edges: measure on the input's line graph
            line = cast(DepthModel, self.model).state_graph(
                as_graph(graph, edge_weight=edge_weight, batch=batch)
            )
            self._operator = GraphOperator(
                line.edge_index, num_nodes=line.num_nodes, self_loops=self_loops, batch=line.batch
            )
            self._graph_arg, self._lazy = self._operator, False
        elif not self._lazy:
            self._operator = as_graph(
                graph, edge_weight=edge_weight, batch=batch, mask=mask, self_loops=self_loops
            )
        if self._operator is not None:  # the edge pass's plan, built now (it reads the host)
            K.edge_pairs(self._operator)

    # -- lifecycle ----------------------------------------------------------------------------
    def reset(self) -> None:
        """Forget everything recorded (hooks stay attached)."""
        self._values: dict[int, dict[int, dict[str, Tensor]]] = {}
        self._present: dict[int, Tensor] = {}  # step -> [B] the graph ids with a node (batches)
        self._prev: LayerState | None = None  # the previous layer's state (between metrics)
        self._prev_layer = -1  # the layer of _prev
        self._block_out: Tensor | None = None  # the last block's output (_check_blocks)
        # where reading a device value stalls it (CUDA): each block whose input was not its
        # predecessor's output object, with the device flag of a difference, read at the end
        self._block_gaps: list[tuple[nn.Module, Tensor]] = []
        # the version counter of a state measured without a copy (None for a copy): of the
        # previous state, and of the state being recorded (see _float64_state)
        self._prev_version: int | None = None
        self._next_version: int | None = None
        self._states: dict[int, Tensor | SpilledRows] = {}
        self._sample_index: Tensor | None = None
        self._workspace = Workspace()
        self._stream_width: int | None = None
        self._stream_rows: int | None = None
        self._passes = 0  # forward passes of the model seen
        self._step = 0  # the step being recorded
        self._active = True
        self._in_forward = False  # the model's forward is running (its layer calls are rows)
        # see _layer_graph_notes: checked in every recorded forward until a note is found (a
        # first forward in eval mode showed no DropEdge, and training steps were measured on
        # the Probe's graph with no word: an audit)
        self._layer_graph_wanted = self._layer_graph_unchecked = False
        self._gaps: dict[str, None] = {}  # notes on layers that did not run like the others
        self._calls_made = 0  # layer calls ended in this forward (the rows of their outputs)
        self._first_normalised = self._prenorm_suspect = False  # see PRENORM_NOTE
        self._state_dtype: torch.dtype | None = None
        # the precisions recorded layers (>= 1) were stored or computed in (autocast)
        self._precisions: set[torch.dtype] = set()
        self._attention: dict[int, AttentionWeights] = {}  # layer k -> its block's attention
        # the first recorded forward's integer inputs, and whether a later one's differed
        self._first_inputs: list[tuple[Tensor, int]] | None = None
        self._graph_changed = False

    def __enter__(self) -> Probe:
        self.attach()
        return self

    def __exit__(self, *exc: object) -> None:
        self.detach()

    def attach(self) -> None:
        """Register the hooks (prefer the ``with`` block, which always detaches)."""
        if self._handles or self.model is None:
            return
        try:
            self._handles.append(
                self.model.register_forward_pre_hook(self._on_forward, with_kwargs=True)
            )
            self._handles.append(self.model.register_forward_hook(self._on_forward_end))
            # a forward that raised ends too: its layer calls were rows, later ones outside a
            # forward are none (model.encode(x) after a caught error was read as that pass's
            # next layers, with no word: an audit)
            self._handles.append(
                self.model.register_forward_hook(self._on_forward_raised, always_call=True)
            )
            # first of the layers' hooks: a call outside the forward stops the others recording
            for module in distinct(self.layers):
                self._handles.append(
                    module.register_forward_pre_hook(self._layer_called, with_kwargs=True)
                )
            self._handles.extend(self._calls.attach())
            if self._feeding is not None:
                self._handles.extend(self._feeding.attach())
            for k, (_, module) in enumerate(self._outside):
                self._handles.append(module.register_forward_hook(self._outside_call(k)))
            if self._tap is not None:
                self._handles.extend(self._tap.attach())
            elif self.layers:  # layer 0 comes from self._calls (its first call)
                for module in distinct(self.layers):
                    self._handles.append(module.register_forward_hook(self._layer_output))
                    if self._check_blocks:
                        hook = input_hook(self._block_input)
                        self._handles.append(
                            module.register_forward_pre_hook(hook, with_kwargs=True)
                        )
            if self.head_energies:
                for k, point in self._attention_points():
                    self._handles.append(point.register_forward_hook(self._keep_attention(k)))
        except BaseException:
            self.detach()
            raise

    def detach(self) -> None:
        """Remove every hook this probe registered."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self._attention.clear()

    # -- hooks ----------------------------------------------------------------------------------
    def _layer_called(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        """A layer call outside the model's forward is no row: another method ran the layers
        (``model.encode(x, edge_index)``, PyG's link prediction example, whose model has no
        forward), so no pass began or ended: the first pass's rows were kept, a later pass's
        input was read as the first's layer ``L``, and every later pass was dropped, with no
        word (an audit).  Said once; silent in a backward pass (``torch.utils.checkpoint`` runs
        the layers again there)."""
        if self._in_forward:
            if self._layer_graph_unchecked and self._active:
                self._layer_graph_unchecked = False
                notes = _layer_graph_notes(
                    self._graph_arg, self._unweighted_edges() is not None, args, kwargs
                )
                weighted = any("takes a floating [" in n for n in self._input_notes)
                notes = [n for n in notes if not (weighted and "takes a floating [" in n)]
                self._input_notes += [n for n in notes if n not in self._input_notes]
                if notes:  # said: later forwards are not checked again
                    self._layer_graph_wanted = False
            return
        self._active = False
        if not _in_backward():
            name = self._list_name(self.layers)
            self._note(
                f"{name} ran outside {type(self.model).__name__}'s forward (another method "
                "called it, such as encode): the Probe reads one pass per call of the model's "
                "forward, so these calls are not recorded; probe a module whose forward runs "
                "the layers (a GAE's encoder), run them from the model's forward, or record "
                "the states yourself: Probe(None, graph) and probe.record(k, x)"
            )

    def _on_forward(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        """A new forward pass of the model: a new step (recorded or skipped by ``every``)."""
        self._in_forward = True
        self._step = self._passes
        self._passes += 1
        self._active = self._step % self.every == 0
        if self._active:
            if self._first_inputs is None:
                self._check_first_inputs(args, kwargs)
            self._check_graph_inputs(graph_inputs(args, kwargs))
        # (a forward given other graph inputs than the first is said by GRAPH_CHANGED_NOTE;
        # its layers' graph said again was the same word twice: a review)
        self._layer_graph_unchecked = (
            self._active and self._layer_graph_wanted and not self._graph_changed
        )
        self._prev = self._block_out = None
        self._block_gaps = []
        if self._active and self.similarity:
            self._states = {}  # layer states of the last recorded step only
        self._calls.reset()
        if self._feeding is not None:
            self._feeding.reset()
        self._outside_ran = [0] * len(self._outside)
        self._calls_made = 0  # layer calls ended in this forward (the rows of their outputs)
        self._first_normalised = self._prenorm_suspect = False  # see PRENORM_NOTE
        if self._tap is not None:
            self._tap.reset()

    def _outside_call(self, k: int) -> Callable[[nn.Module, tuple, object], None]:
        def hook(module: nn.Module, args: tuple, output: object) -> None:
            # one channel is a score or a count (SAGPooling's GNN, a degree feature), no
            # layer state (they were named as layers to read: a review)
            out = output if isinstance(output, Tensor) else None
            if out is not None and out.dim() >= 2 and out.size(-1) > 1:
                self._outside_ran[k] += 1

        return hook

    def _check_first_inputs(self, args: tuple, kwargs: dict) -> None:
        """What the first recorded forward's arguments say of the graph the Probe was given,
        before it runs (audits: each measured another graph than the model's, silently):

        * the very sparse matrix the model takes (or a dense copy of it), of a directed graph,
          is refused: PyG layers read a sparse matrix as ``adj_t`` (``A[dst, src]``), the
          Probe reads a bare one as ``A[src, dst]``, so every row measured the reversed graph
          (the Laplacian energy of a directed GCN 9-31% off; the Dirichlet energy, symmetric
          in the direction, right);
        * a node mask ``[B, N]`` with padding, taken by the forward but not given to a Probe
          on a dense batch, is refused: the padded rows counted as isolated nodes in ``1/n``
          (energies 37-52% low);
        * what the arguments hold that the Probe's graph does not say is noted
          (:func:`_unseen_inputs`)."""
        values = (*args, *kwargs.values())
        graph = self._graph_arg
        dense = _dense_matrix(graph)
        if (dense or is_sparse_matrix(graph)) and self._operator is not None:
            if self._takes(graph, values) and _directed(self._operator):
                given = (
                    "a dense copy of the sparse matrix the model takes"
                    if dense
                    else "the sparse matrix the model takes"
                )
                raise ValueError(
                    f"graph: the Probe was given {given}, which PyG layers read as adj_t "
                    "(A[dst, src]) while the Probe reads a bare matrix as A[src, dst]; on this "
                    "directed graph the two differ: pass Probe(model, Data(adj_t=adj_t, "
                    "num_nodes=n)) (read as PyG stores it), or the edge_index"
                )
        if self._dense_unmasked is not None:
            shape = self._dense_unmasked
            for value in values:
                if (
                    isinstance(value, Tensor)
                    and value.dtype == torch.bool
                    and tuple(value.shape) == shape
                    and not bool(value.all())
                ):
                    raise ValueError(
                        f"mask: the forward takes a node mask {list(shape)} with padded nodes, "
                        "which the Probe was not given: its rows would count the padding as "
                        "isolated nodes (in 1/n); pass Probe(model, adj, mask=mask)"
                    )
        notes = _unseen_inputs(graph, self._batch, self._unweighted_edges(), values)
        other = _other_edges_note(graph, graph_inputs(args, kwargs), values)
        notes += [] if other is None else [other]
        # the first layer call's graph is checked where the forward's showed no other
        self._layer_graph_wanted = other is None and _edge_index_of(graph) is not None
        # replaced, not added to: after reset() the next forward is a first one again, and its
        # notes were appended to the last ones (a note repeated, a stale one kept: a review)
        self._input_notes = [note for note in notes if note != self._graph_note]

    @staticmethod
    def _takes(graph: object, values: tuple) -> bool:
        """Whether the forward's arguments hold the sparse matrix ``graph``: the object itself,
        or a sparse argument (or a ``Data``'s ``adj_t``) with the same entries in another
        layout or copy (``adj.to_sparse_csr()``; only the identical object was caught first,
        an audit)."""
        taken = [v for v in values if is_sparse_matrix(v)]
        taken += [v.adj_t for v in values if is_sparse_matrix(getattr(v, "adj_t", None))]
        if any(v is graph for v in taken):
            return True
        if not taken:
            return False
        mine = _matrix_entries(graph.to_sparse() if _dense_matrix(graph) else graph)
        if mine is None:
            return False
        for value in taken:
            theirs = _matrix_entries(value)
            if theirs is not None and _same_edges(mine, theirs):
                return True
        return False

    def _unweighted_edges(self) -> int | None:
        """The number of edges of the Probe's graph when it has no edge weights (an
        ``edge_index`` or a ``Data`` without ``edge_weight``), else None."""
        if self._edge_weight is not None:
            return None
        graph = self._graph_arg
        if isinstance(graph, Tensor) and not _is_adjacency(graph) and graph.dim() == 2:
            return int(graph.size(1))
        index = getattr(graph, "edge_index", None)
        if isinstance(index, Tensor) and getattr(graph, "edge_weight", None) is None:
            return int(index.size(1))
        return None

    def _check_graph_inputs(self, inputs: list[Tensor]) -> None:
        """Note a recorded forward whose integer inputs (``edge_index``, ``batch``) differ from
        the first recorded forward's: every step is measured on the graph the Probe was built
        with, so the mini-batches of a loader would be measured on the first one's graph.  The
        same tensors cost nothing to check; equal copies one comparison per forward."""
        if self._first_inputs is None:
            self._first_inputs = [(t, t._version) for t in inputs]
            return
        same = len(inputs) == len(self._first_inputs) and all(
            (t is first and t._version == version)
            or (t.shape == first.shape and t.device == first.device and torch.equal(t, first))
            for t, (first, version) in zip(inputs, self._first_inputs, strict=True)
        )
        if not same:
            self._graph_changed = True

    def _on_forward_end(self, module: nn.Module, args: tuple, output: object) -> None:
        if self._tap is not None:
            self._tap.flush(output)
        if self._block_gaps:  # one read for the whole forward
            gaps, self._block_gaps = self._block_gaps, []
            changed = torch.stack([flag for _, flag in gaps]).nonzero().flatten().tolist()
            if changed:
                self._gap_between_blocks(gaps[changed[0]][0])
        if self._active and self._tap is not None and self._tap.awaiting:
            self._record_stream_end(output)
        notes = self._calls.notes() + self._input_notes + self._layer_notes
        feeding = None if self._feeding is None else self._feeding.note()
        if feeding is not None:
            self._layer_notes.append(feeding)  # a note of every later forward too
            notes.append(feeding)
        ran = [n for (n, _), calls in zip(self._outside, self._outside_ran, strict=True) if calls]
        if ran:
            notes.append(_outside_note(ran, self._outside, self.layers))
        if self._tap is not None and self._tap.note is not None:
            notes.append(self._tap.note)
        if self._graph_changed:
            notes.append(GRAPH_CHANGED_NOTE)
        mismatch = None if self._tap is None or self._tap.identity else self._tap.mismatch
        if self._prenorm_suspect and mismatch is None:  # (the note on stray norms says it)
            notes.append(PRENORM_NOTE)
        if mismatch is not None and self._tap is not None:
            j, k = mismatch
            norms = self._tap.plan.norms
            notes.append(
                f"capture='residual': the norms paired with the layers by their place in the "
                f"lists ran for other layers ({self._names.get(id(norms[j]), 'norm')} ran "
                f"before {self._names.get(id(self.layers[k]), 'layer')}, not before its own "
                "layer), and the residual identity (the stream plus the layer's output) holds "
                "no way exactly, so the rows hold the layers' inputs (norm(h) in Pre-LN), "
                "unchecked; list the norms in the order of their layers, or pass "
                "stream=[...] (the modules whose input is the stream before each layer, in the "
                "order the layers run)"
            )
        made = self._calls_made if self._tap is None else self._tap.calls
        if made > len(self.layers):  # e.g. the stack run twice in one forward
            notes.append(
                f"the forward made {made} layer calls for {len(self.layers)} layers; the rows "
                f"hold the first {len(self.layers)}"
            )
        new = [note for note in notes if note not in self._gaps]
        if new:
            self._gaps.update(dict.fromkeys(new))
            warnings.warn(
                f"Probe: in {type(self.model).__name__}'s forward: {'; '.join(new)} "
                "(frame.attrs['gaps'])",
                stacklevel=2,
            )
        # nothing of size n x d outlives the pass: only the 0-d rows stay
        self._prev = self._block_out = None
        if self._tap is not None:
            self._tap.release()
        self._attention.clear()
        self._workspace = Workspace()
        # layer calls after the forward are none of its rows: torch.utils.checkpoint runs the
        # checkpointed layers again in backward(), which wrote layer L-1's stream into row L
        self._active = self._in_forward = False

    def _on_forward_raised(self, module: nn.Module, args: tuple, output: object) -> None:
        """After every forward, and after one that raised (``always_call``): the forward is over
        (after :meth:`_on_forward_end`, which has set this already when the forward returned)."""
        self._active = self._in_forward = False

    def _record_stream_end(self, output: object) -> None:
        assert self._tap is not None
        last = self._tap.end_row
        x, head = self._tap.end_state(output)
        self._tap.after = {}
        width, rows = self._stream_width, self._stream_rows
        # the stream has the states' width and, as node rows, their rows (not a pooled readout)
        stream = (
            x is not None
            and x.dim() in (2, 3)
            and width is not None
            and x.shape[-1] == width
            and (x.dim() == 3 or x.size(0) == rows)
        )
        # a function applied after the last block (log_softmax): rows that the stream entering
        # the last layer does not have (a Post-LN stream's rows are normalised throughout)
        if last > cast(int, self.num_layers):  # the stack ran again: rows beyond L (a note)
            return
        # rows of one surface only where a layer's output fed the last layer: at depth 1 the
        # stream entering it is the encoder's, and a Post-LN block's normalised output was
        # refused as a function of the stream (a review)
        kind = _row_kind(x, self._tap.last, surfaces=last >= 2) if stream else None
        if stream and kind is None:
            assert x is not None
            self._stream_end_state(last, x)
            return
        hidden = self._tap.hidden_input
        # node rows of the stream's width only: a pooled readout ([graphs, d],
        # head(mean_pool(h))) is no stream, and a Post-LN model's was read as the end of a
        # Pre-LN one; nor seen through an activation or a dropout (head(F.relu(h)) of a Post-LN
        # stack: its end no longer the last row plus the layer's output): two false warnings
        # (a review)
        if (
            head is not None
            and hidden is not None
            and hidden.shape == (rows, width)
            and not _rectified(hidden)
            and not _zeroed(hidden)
        ):
            # a head hid the end, but what it read is the stream after the last block: a Pre-LN
            # stack with a functional norm and a head had rows norm(h) with no word of it, the
            # check having run at the end only (an audit)
            self._prenorm_suspect = self._prenorm_suspect or self._prenorm_end(hidden)
        if not self._warned:
            self._warned = True
            if kind is not None:
                what = (
                    f"has {kind} rows where the stream entering the last layer has not: a "
                    "function applied after the last block, not the stream"
                )
                how = (
                    "pass stream=[...] with the module whose input is the stream after the last "
                    "block, or record it yourself: Probe(None, graph) and probe.record(k, h)"
                )
            elif head is not None:
                what = (
                    f"is the output of {self._names.get(id(head), type(head).__name__)} (a head "
                    "run after the last layer), not the stream"
                )
                # (layers=[...] was offered too, and does not record it: layers are never
                # taken for blocks, an audit)
                how = (
                    "pass stream=[...]: the modules whose input is the stream before each layer "
                    "(the layers themselves where each layer's input is the stream), then "
                    f"{self._names.get(id(head), type(head).__name__)}, to record it"
                )
            else:
                what = f"({_shape(output)}) is not the stream ({rows} rows of width {width})"
                if isinstance(output, Tensor) and output.dim() == 2 and output.size(0) == rows:
                    # as many rows, another width: a head, or a stream that widens in its
                    # last block (h = proj(h) + conv(h)); the shape cannot tell which
                    what = (
                        f"({_shape(output)}) has another width than the stream entering the "
                        f"last layer ({rows} rows of width {width}), so whether it is the stream "
                        "after it (widened) or a head's output cannot be told"
                    )
                how = (
                    "pass stream=[...]: the modules whose input is the stream before each layer "
                    "(the layers themselves where each layer's input is the stream), then the "
                    "module whose input is the stream after the last block, to record it"
                )
            warnings.warn(
                f"capture='residual': the model's output {what}; layer {last} is not recorded "
                f"({how})",
                stacklevel=2,
            )

    def _stream_state(self, k: int, x: Tensor) -> None:
        if self._active and k < cast(int, self.num_layers):  # not beyond L (a note says so)
            if self._check_prenorm and k < 2:  # the inputs of the first two layers
                # both normalised: an encoder ending in a norm gives a normalised layer 0 only
                normalised = normalised_rows(x)
                self._first_normalised = normalised and (k == 0 or self._first_normalised)
            self.record(k, x)

    def _stream_end_state(self, k: int, x: Tensor) -> None:
        """The stream after the last block: recorded, and compared with the first layer's
        input (see :data:`PRENORM_NOTE`)."""
        if self._prenorm_end(x):
            self._prenorm_suspect = True
        self.record(k, x)

    def _prenorm_end(self, end: Tensor) -> bool:
        """Whether the stream after the last block, ``end``, shows the rows before it to be
        ``norm(h)``: the first layers' inputs were normalised and ``end`` is not, and ``end``
        is not the last row plus (a monotone function of) the last layer's output, as it is
        where those rows were the stream (a Post-LN stack whose last block has no norm,
        ``h = h + relu(conv(h))`` after normalised ones, was said to hold norm(h): an
        audit)."""
        if not (self._check_prenorm and self._first_normalised) or normalised_rows(end):
            return False
        tap = self._tap
        before, out = (tap.last, tap.last_out) if tap is not None else (None, None)
        if before is not None and out is not None and before.shape == end.shape == out.shape:
            if before is not end and _step_follows(end, before, _sampled(out), zero=True):
                return False
        return True

    def _conv_alone(self, k: int, inp: Tensor, out: Tensor) -> None:
        """Layer module ``k`` skipped, its conv called directly: the conv reads the layer (its
        input is layer 0 when it is the first call: :class:`LayerCalls`)."""
        self._called_layer(out)

    def _layer_zero(self, x: Tensor) -> None:
        """Layer 0: the input of the forward's first layer call (handed on by
        :class:`LayerCalls`)."""
        if self._active:
            self.record(0, x)

    def _layer_output(self, module: nn.Module, args: tuple, output: object) -> None:
        x = first_tensor(output) if self._active else None
        if self._check_blocks:
            self._block_out = x
        self._called_layer(x)

    def _block_input(self, module: nn.Module, args: tuple) -> None:
        """A block starts: its input should be the previous block's output (the stream,
        handed on unchanged); a forward that changes it between blocks (``h = h + block(h)``,
        an activation) makes the block outputs other than the stream: said once."""
        out, self._block_out = self._block_out, None
        if out is None or not args or not isinstance(args[0], Tensor):
            return
        x = args[0]
        if x is out:
            return
        if x.shape == out.shape and x.device == out.device and not K.host_reads_free(x):
            # compared on the device, read once at the forward's end (_gap_between_blocks):
            # torch.equal here stalled the pipeline at every block of a model that copies the
            # stream between blocks
            self._block_gaps.append((module, (x != out).any()))
            return
        if x.shape == out.shape and torch.equal(x, out):
            return
        self._gap_between_blocks(module)

    def _gap_between_blocks(self, module: nn.Module) -> None:
        """Say once that ``module``'s input was not the output of the block before it."""
        self._check_blocks = False  # said once (the gaps keep it)
        name = self._names.get(id(module), type(module).__name__)
        self._note(
            f"capture='residual': the input of {name} is not the output of the block before it: "
            "the layers were taken for whole blocks (model.blocks, DeepGCNLayer), whose "
            "outputs are the stream, but the forward changes the state between them (a skip "
            "connection h + block(h), an activation, dropout), so the rows are the blocks' "
            "outputs, not the stream; pass layers=[...] (the same modules) to read the stream "
            "at each layer's input"
        )

    def _called_layer(self, x: Tensor | None) -> None:
        """A layer call ended with output ``x``: it is the next row (layer ``k`` is the output
        of the ``k``-th layer call of the forward, whatever the module's place in the list, so
        a stack run in another order, or one module called for several layers, is measured
        in the order it ran).  Calls beyond the ``L`` layers are not recorded (a note says
        so at the end of the forward)."""
        self._calls_made += 1
        k = self._calls_made
        if x is not None and k < cast(int, self.num_layers):
            self.record(k, x)

    def _attention_points(self) -> list[tuple[int, HookPoint]]:
        """``(k, point)``: the attention hook point of the operator (``mp``) of layer module
        ``k - 1``, whose output is layer ``k``."""
        points = []
        for k, layer in enumerate(self.layers, start=1):
            point = getattr(getattr(layer, "mp", None), "hook_attention", None)
            if isinstance(point, HookPoint):
                points.append((k, point))
        return points

    def _keep_attention(self, k: int) -> Callable[[nn.Module, tuple, object], None]:
        """Keeps (on the probe) the attention of layer ``k``'s block until ``k`` is recorded."""

        def hook(module: nn.Module, args: tuple, output: object) -> None:
            if self._active:
                self._attention[k] = cast(AttentionWeights, output)

        return hook

    def _graph_for(self, x: Tensor) -> tuple[Tensor, GraphOperator]:
        """Node rows of ``x`` and the measuring operator on its device (built or moved once
        and cached)."""
        op = self._operator
        if op is not None and op.device != x.device:
            op = self._operator = op.to(x.device)
        if x.dim() == 3:
            if op is None:
                op = self._operator = as_graph(
                    self._graph_arg,
                    edge_weight=self._edge_weight,
                    batch=self._batch,
                    self_loops=self._self_loops,
                    device=x.device,
                )
            x = dense_to_rows(x, op, "layer state")
        if op is None or op.num_nodes != x.size(0):
            if op is not None:  # built (or taken from the first state) with other rows
                raise ValueError(
                    f"Probe: a layer state has {x.size(0)} rows, the graph the Probe was built "
                    f"with {op.num_nodes} nodes; every forward is measured on that graph: for "
                    "the mini-batches of a loader build one Probe per batch"
                )
            graph = cast(Tensor, self._graph_arg)
            op = self._operator = as_graph(
                graph,
                num_nodes=x.size(0),
                edge_weight=self._edge_weight,
                batch=self._batch,
                self_loops=self._self_loops,
                device=x.device,
            )
        return x, op

    def record(self, k: int, x: Tensor) -> None:
        """Measure ``x`` as the state of layer ``k`` (called by the hooks, or by you).

        ``x`` is ``[num_nodes, channels]``, or a dense ``[B, N, channels]`` state of a dense
        graph (flattened to the masked node rows)."""
        if isinstance(k, bool) or not isinstance(k, int) or k < 0:
            raise ValueError(f"layer: expected an integer >= 0, received {k!r}")
        if self.num_layers is not None and k >= self.num_layers:
            raise ValueError(
                f"layer: expected an index in [0, {self.num_layers - 1}], received {k}"
            )
        x = x.detach()
        if self._graph_note is not None:
            self._note(self._graph_note)
        if x.dim() not in (2, 3):
            raise ValueError(
                f"layer {k}: expected a state [num_nodes, channels] (or dense [B, N, channels]), "
                f"received shape {list(x.shape)}"
            )
        if self.model is None and k in self._values.get(self._step, {}):
            self._step += 1  # a layer recorded again by hand: the next pass (step)
            self._prev = None
            # the matrix is the last pass's alone: the previous pass's deeper layers were set
            # against this pass's states (a model's forward clears them in _on_forward)
            self._states = {}
        x, op = self._graph_for(x)
        buffer = self._float64_state(x)
        state = LayerState(buffer, op, x.dtype in K.NARROW, self._workspace)
        row = {name: fn(state) for name, fn in self._layer_fns.items()}
        state.drop_laplacian()  # only the per-layer columns use it: free it before the rest
        if self._between_fns:
            row.update(self._between(k, state, op))
        if self.head_energies:
            row.update(self._head_energies(k, state.x))
        if op.batch is not None and self._step not in self._present:
            self._present[self._step] = K.graphs_present(op)  # once a step (to_frame)
        self._values.setdefault(self._step, {})[k] = row
        self._state_dtype = x.dtype
        if k > 0:
            self._precisions.add(x.dtype)
            computed = _autocast(x.device)  # the autocast precision, when one is on
            if computed is not None:
                self._precisions.add(computed)
        self._stream_width = x.size(1)
        self._stream_rows = x.size(0)
        if self.similarity:
            self._keep_state(k, x, state)

    def _float64_state(self, x: Tensor) -> Tensor:
        """The float64 state measured for ``x``: a copy in the workspace, or ``x`` itself for a
        large contiguous float64 state of an oversmooth model, whose blocks never write into
        their input.  That state is the next block's input too: a copy would be 256 MiB more at
        the model's peak at 10^6 nodes and 32 channels.  Its version counter, read now, is
        checked when it is read again as the previous state (:meth:`_between`)."""
        shared = (
            isinstance(self.model, DepthModel)
            and x.dtype == torch.float64
            and x.numel() > KEEP_VALUES
            and x.is_contiguous()
        )
        self._next_version = x._version if shared else None
        return x if shared else self._workspace.state(x).copy_(x)

    def _between(self, k: int, state: LayerState, op: GraphOperator) -> dict[str, Tensor]:
        """The metrics of layer ``k`` measured against layer ``k - 1``'s state, the one recorded
        just before it in this step (NaN at a step's first layer, after a layer of another
        width, and when the state recorded before it is another layer's); ``state`` becomes
        the previous one."""
        prev, self._prev = self._prev, state
        prev_layer, self._prev_layer = self._prev_layer, k
        version, self._prev_version = self._prev_version, self._next_version
        if prev is not None and version is not None and prev.x._version != version:
            raise RuntimeError(
                "Probe: the previous layer's state was written in place after it was recorded "
                "(it is measured without a copy); the between-layer metrics would be wrong"
            )
        if prev is not None and prev_layer != k - 1:
            if self.model is None:
                self._note(OUT_OF_ORDER_NOTE)
            elif prev_layer >= k:  # (a layer the forward skipped is noted elsewhere)
                # the forward ran the listed layers in another order: the note on recording by
                # hand did not say that the rows sit at the list's places (an audit: layers run
                # in reverse read the input as the last row)
                self._note(RUN_ORDER_NOTE)
        elif prev is not None and prev.x.shape == state.x.shape:
            return {name: fn(prev, state) for name, fn in self._between_fns.items()}
        elif prev is not None and k >= 2 and prev.x.shape[0] == state.x.shape[0]:
            # the first layer's widening from the input and the last's narrowing to the classes
            # (PyG's GCN(in, 64, L, out_channels=7)) are the usual shape of a stack, not blocks
            # that concatenate: every such model warned, the docs' own example too (an audit)
            if self.num_layers is None or k != self.num_layers - 1:
                self._note(WIDTH_NOTE)
        nan = float("nan")
        missing = (
            state.x.new_tensor(nan) if op.batch is None else state.x.new_full((op.num_graphs,), nan)
        )
        return dict.fromkeys(self._between_fns, missing)

    def _note(self, note: str) -> None:
        """Warn about ``note`` once and keep it in ``frame.attrs["gaps"]``."""
        if note not in self._gaps:
            self._gaps[note] = None
            warnings.warn(f"Probe: {note} (frame.attrs['gaps'])", stacklevel=4)

    def _head_energies(self, k: int, x64: Tensor) -> dict[str, Tensor]:
        """``head_energy_<h>`` of layer ``k`` under the attention its block emitted in this
        forward (NaN without one: layer 0, global blocks)."""
        heads = cast(DepthModel, self.model).config.heads  # checked in __init__
        attention = self._attention.pop(k, None)
        if k == 0 or attention is None:
            nan = x64.new_tensor(float("nan"))
            return {f"head_energy_{h}": nan for h in range(heads)}
        alpha = attention.weights.to(torch.float64)  # [E, h]
        energy = K.head_energies(x64, attention.src, attention.dst, alpha)  # [h]
        return {f"head_energy_{h}": energy[h] for h in range(heads)}

    def _keep_state(self, k: int, x: Tensor, state: LayerState) -> None:
        if self.similarity_sample is not None and self.similarity_sample < x.size(0):
            if self._sample_index is None or self._sample_index.device != x.device:
                gen = torch.Generator().manual_seed(self.sample_seed)
                self._sample_index = torch.randperm(x.size(0), generator=gen)[
                    : self.similarity_sample
                ].to(x.device)
            sample = x[self._sample_index].to(torch.float64)
            rows = unit_rows_as(sample, state.narrow, self.similarity_dtype)
        else:
            # state.unit's rows, formed here and not cached on the state: the state lives on as
            # the previous one through the next layer's forward (at 10^6 nodes and 32
            # channels the cached rows were 256 MiB more at the model's peak)
            rows = unit_rows_as(state.x, state.narrow, self.similarity_dtype)
        self._states[k] = spill_rows(rows) if _spills(rows) else rows

    # -- results --------------------------------------------------------------------------------
    @property
    def recorded_layers(self) -> list[int]:
        """Layers recorded in the last recorded step."""
        if not self._values:
            return []
        return sorted(self._values[max(self._values)])

    @property
    def recorded_steps(self) -> list[int]:
        """Steps (forward passes) that were recorded."""
        return sorted(self._values)

    def to_frame(self) -> pd.DataFrame:
        """One row per recorded step and layer (and graph, with ``reduce="none"`` on a batch):
        ``layer``, one column per metric, then ``step`` [and ``graph``] (one host copy).

        On a batch, every metric is computed per graph; ``reduce="mean"`` averages those
        per-graph values (``relative_energy`` too: each graph's own ratio, then the mean).

        ``frame.attrs`` says what was measured: ``dtype`` (of the model's parameters, e.g.
        ``"float64"``; of the states for a model without any), ``model`` (class name),
        ``capture``, ``seed`` (an oversmooth model's ``config.seed``; None when unknown),
        ``stream`` (how the stream was read with ``capture="residual"`` between plain layers,
        else None), ``layers`` (number of layer states, ``L + 1``), ``missing_layers`` (layers
        without a row in some recorded step) and ``gaps`` (the notes warned about: one line per
        layer module that did not run like the others, calls beyond the layers, a stream that
        looks like ``norm(h)``)."""
        import numpy as np
        import pandas as pd

        per_graph = self.reduce == "none" and self._batched
        rows = [(s, k) for s in sorted(self._values) for k in sorted(self._values[s])]
        if not rows:
            ids = ["step"] + (["graph"] if per_graph else [])
            return self._described(pd.DataFrame({c: [] for c in ["layer", *self.metrics, *ids]}))
        keys, data = self._host_values(rows)
        present = self._present_rows(rows)
        steps = np.array([s for s, _ in rows])
        layers = np.array([k for _, k in rows])
        no_ratio = None
        if "relative_energy" in self.metrics:
            data["relative_energy"], no_ratio = _relative_per_step(
                data["laplacian_energy"], steps, layers
            )
        extra = [c for c in keys if c.startswith("head_energy_")]
        values = {c: data[c] for c in [*self.metrics, *extra]}
        # layer first and the metrics next, as before steps and graphs existed; then the ids
        if present is not None and not present.all():
            values = {c: np.where(present, v, np.nan) for c, v in values.items()}
        if per_graph:
            out = _per_graph(layers, steps, values)
        else:
            out = _graph_mean(layers, steps, values, present, no_ratio)
        return self._described(pd.DataFrame(out))

    def _present_rows(self, rows: list[tuple[int, int]]) -> NDArray | None:
        """``[rows, graphs]`` whether each graph id of the row's step has a node (one host
        copy); None for one graph."""
        if not self._present:
            return None
        steps = sorted(self._present)
        table = torch.stack([self._present[s] for s in steps]).cpu().numpy()
        at = {s: i for i, s in enumerate(steps)}
        return table[[at[s] for s, _ in rows]]

    def _host_values(self, rows: list[tuple[int, int]]) -> tuple[list[str], dict[str, NDArray]]:
        """The recorded columns and their values at ``rows`` (``(step, layer)``), copied to the
        host at once: ``{column: [rows, graphs]}`` (a single graph is one column)."""
        keys = list(self._values[rows[0][0]][rows[0][1]])  # every row holds the same keys
        # [rows, keys, graphs]
        table = (
            torch.stack(
                [torch.stack([self._values[s][k][c].reshape(-1) for c in keys]) for s, k in rows]
            )
            .cpu()
            .numpy()
        )
        return keys, {c: table[:, j, :] for j, c in enumerate(keys)}

    def _described(self, frame: pd.DataFrame) -> pd.DataFrame:
        """``frame`` with what was measured in ``frame.attrs`` (see :meth:`to_frame`)."""
        model = self.model
        params = () if model is None else model.parameters()
        first = next((p for p in params if p.is_floating_point()), None)  # not a list of all
        dtype = first.dtype if first is not None else self._state_dtype
        # states stored, or computed under autocast, in a coarser precision than the weights
        # set the floor: a bfloat16 plateau is not a float32 law
        dtype = _coarsest([dtype, *self._precisions]) or dtype
        seed = model.config.seed if isinstance(model, DepthModel) else None
        layers = len(self.layers) + 1 if self.layers else None
        # by hand (no layers known): the layers below the deepest recorded one
        span = (
            layers
            if layers is not None
            else max((max(v) + 1 for v in self._values.values() if v), default=0)
        )
        missing = sorted(k for k in range(span) if any(k not in v for v in self._values.values()))
        plan = self._plan.describe(self._names) if self._plan is not None else None
        frame.attrs.update(
            {
                "dtype": None if dtype is None else str(dtype).removeprefix("torch."),
                "model": None if model is None else type(model).__name__,
                "capture": self.capture,
                "seed": seed,
                "stream": plan,
                "layers": layers,
                "missing_layers": missing if self._values else [],
                "gaps": list(self._gaps),
            }
        )
        return frame

    @property
    def _batched(self) -> bool:
        op = self._operator
        return op is not None and op.batch is not None

    def similarity_matrix(self) -> Tensor:
        """``[L, L]`` float64 matrix of sim(X^s, X^t) over the recorded layers (needs
        ``similarity=True``).

        Entries between layers of different widths are NaN.  On a batch, each entry is the
        mean over the graphs of each graph's own ``(1/n_g) sum_i cos`` (as every metric is):
        its adjacent-layer entries are the Probe's ``mean_cosine_similarity``.
        """
        if not self.similarity:
            raise ValueError(
                "similarity: this probe was built with similarity=False; pass similarity=True"
            )
        layers = sorted(self._states)
        if not layers:
            raise ValueError(
                "similarity: no layer was recorded yet; run the model inside the with block"
            )
        states = [self._states[k] for k in layers]  # tensors, or rows read back from files
        size = len(layers)
        device = states[0].device
        out = torch.full((size, size), float("nan"), dtype=torch.float64, device=device)
        groups: dict[tuple, list[int]] = {}
        for i, s in enumerate(states):
            groups.setdefault(tuple(s.shape), []).append(i)
        for shape, idx in groups.items():
            n = shape[0]
            weights = self._row_weights(n, device)  # None: one graph, every row 1/n
            gram = torch.zeros(len(idx), len(idx), dtype=torch.float64, device=device)
            step = max(1, (1 << 22) // max(1, len(idx) * shape[1]))
            for start in range(0, n, step):
                block = torch.stack([states[i][start : start + step] for i in idx]).to(
                    torch.float64
                )
                flat = block.reshape(len(idx), -1)
                if weights is None:
                    gram += flat @ flat.T
                else:
                    part = weights[start : start + step].view(1, -1, 1)
                    gram += (block * part).reshape(len(idx), -1) @ flat.T
            index = torch.tensor(idx, device=device)
            out[index.unsqueeze(1), index.unsqueeze(0)] = (
                gram / max(n, 1) if weights is None else gram
            )
        return out.clamp(-1.0, 1.0)  # (rounding put parallel layers at 1 + 2e-16)

    def _row_weights(self, rows: int, device: torch.device) -> Tensor | None:
        """On a batch, each kept row's weight in the mean over graphs of the per-graph means:
        ``1 / (B n_g)`` for a row of graph ``g`` (``n_g`` its kept rows, ``B`` the graphs with
        any); None for one graph."""
        op = self._operator
        if op is None or op.batch is None:
            return None
        if rows == op.num_nodes:
            graph, counts = op.batch, op.graph_nodes
        elif self._sample_index is not None and rows == self._sample_index.numel():
            graph = op.batch.index_select(0, self._sample_index.to(op.batch.device))
            counts = torch.zeros(op.num_graphs, dtype=torch.float64, device=graph.device)
            counts.index_add_(0, graph, torch.ones_like(graph, dtype=torch.float64))
        else:
            return None
        assert counts is not None
        present = (counts > 0).sum()
        return (1.0 / (counts.index_select(0, graph) * present)).to(device)

    def similarity_layers(self) -> list[int]:
        return sorted(self._states)


#: :func:`unit_rows_as` forms the unit rows in blocks of this many float64 values.
UNIT_BLOCK_VALUES = 1 << 20


def unit_rows_as(x64: Tensor, narrow: bool, dtype: torch.dtype) -> Tensor:
    """``K.unit_rows(x64, narrow)`` in ``dtype``, formed a block of rows at a time: the same
    numbers (each row is scaled on its own, and the direct and the scaled path agree bit for
    bit), without an ``[n, d]`` float64 array beside the result (256 MiB at 10^6 nodes and 32
    channels)."""
    rows = max(1, UNIT_BLOCK_VALUES // max(1, x64.size(1)))
    if x64.size(0) <= rows:
        return K.unit_rows(x64, narrow).to(dtype, copy=True)
    return by_rows(lambda part: K.unit_rows(part, narrow).to(dtype), x64, rows)


#: A layer's kept unit rows (the similarity matrix's input) larger than this, on the CPU,
#: are written to a temporary file (in ``tempfile.gettempdir()``: ``TMPDIR``) and read back
#: in blocks when the matrix is formed, so that memory does not grow with depth: at 10^6
#: nodes and 32 channels each layer's rows are 128 MiB.  They stay in memory on a GPU (a copy
#: to the host would synchronise every layer) or where the file cannot be written.
SPILL_BYTES = 64 * 2**20


def _spills(rows: Tensor) -> bool:
    return rows.device.type == "cpu" and rows.numel() * rows.element_size() > SPILL_BYTES


class SpilledRows:
    """Rows ``[n, d]`` of one dtype kept in a temporary file and read back by row slices
    (``rows[a:b]``, a CPU tensor) into memory of the slice's size: the file is never mapped,
    so its pages do not count in the process's resident memory.  The file is removed when
    this object is."""

    def __init__(self, rows: Tensor, path: str) -> None:
        self.shape, self.dtype, self.device = rows.shape, rows.dtype, rows.device
        self.path = path
        self._remove = weakref.finalize(self, _remove_file, path)

    @property
    def row_bytes(self) -> int:
        return int(torch.Size(self.shape[1:]).numel()) * self.dtype.itemsize

    def __getitem__(self, index: slice) -> Tensor:
        start, stop, step = index.indices(self.shape[0])
        if step != 1:
            raise ValueError("SpilledRows: only contiguous row slices can be read")
        count = max(stop - start, 0)
        out = torch.empty((count, *self.shape[1:]), dtype=self.dtype)
        with open(self.path, "rb") as fh:
            fh.seek(start * self.row_bytes)
            got = fh.readinto(out.view(-1).view(torch.uint8).numpy().data)
        if got != count * self.row_bytes:
            raise OSError(f"{self.path}: similarity rows cut short ({got} bytes read)")
        return out


def _remove_file(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


def spill_rows(rows: Tensor) -> Tensor | SpilledRows:
    """``rows`` (contiguous, on the CPU) written to a temporary file, as :class:`SpilledRows`;
    ``rows`` itself when the file cannot be written (no space, no temporary folder)."""
    path = None
    try:
        fd, path = tempfile.mkstemp(prefix="oversmooth-similarity-", suffix=".rows")
        with os.fdopen(fd, "wb") as fh:
            fh.write(rows.contiguous().view(-1).view(torch.uint8).numpy().data)
    except OSError:
        if path is not None:
            _remove_file(path)
        return rows
    return SpilledRows(rows, path)
