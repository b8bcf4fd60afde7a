"""Probes: record per-layer measures of any model while it runs.

``Probe`` attaches forward hooks to an ordered list of layers inside a ``with``
block and removes them on exit, also when the forward raises.  Each hook
measures the layer's output on the model's device, in float64, and keeps only
0-d tensors: no host synchronisation per layer, and memory that does not grow
with depth (one previous state is kept for ``cosine_prev``).  Values reach the
host once, in :meth:`Probe.to_frame`.

Which state is layer ``k``:

- oversmooth models (:class:`~oversmooth.nn.DepthModel`): layer 0 is the
  encoder output, layer ``k`` the output of block ``k`` (``model.blocks[k-1]``).
- PyG ``BasicGNN`` models (``GCN``, ``GAT``, ``GraphSAGE``, ``GIN``, ``PNA``,
  ``EdgeCNN``): layer 0 is the input of the first convolution, layer ``k`` the
  output of ``model.convs[k-1]``, *before* the activation, norm and dropout
  that BasicGNN applies between convolutions.
- ``layers=[m0, m1, ...]``: layer ``k`` is the output of module ``k``.
- models without one module per layer: call ``probe.record(k, x)`` yourself.

Example:
    >>> with Probe(model, data.edge_index) as probe:
    ...     model(data.x, data.edge_index)
    >>> probe.to_frame()  # columns: layer, laplacian_energy, dirichlet_energy, relative_energy, ...
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable, Sequence, cast

import torch
from torch import Tensor, nn

from oversmooth import metrics as M
from oversmooth.graph import GraphLike, GraphOperator, as_operator
from oversmooth.nn.model import DepthModel
from oversmooth.resources import check_energy_order

if TYPE_CHECKING:
    import pandas as pd

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


class _Workspace:
    """Float64 buffers reused from layer to layer (the state copy and its Laplacian), so
    that measuring a layer allocates less of size ``n x d`` (fresh allocations of that size
    cost page faults on every layer).  ``cosine_prev`` keeps its own copy of the previous
    layer's unit rows."""

    def __init__(self) -> None:
        self.key: tuple | None = None

    def buffers(self, x: Tensor) -> tuple[Tensor, Tensor]:
        key = (tuple(x.shape), x.device)
        if key != self.key:
            make = lambda: torch.empty(x.shape, dtype=torch.float64, device=x.device)  # noqa: E731
            self.state, self.lap = make(), make()
            rows = (M._edge_chunk_rows(x.size(1)), x.size(1))  # edge-chunk scratch
            self.scratch = (
                torch.empty(rows, dtype=torch.float64, device=x.device),
                torch.empty(rows, dtype=torch.float64, device=x.device),
            )
            self.key = key
        return self.state, self.lap


class _LayerCache:
    """Intermediate results shared by the metrics of one layer state (each computed at most
    once).  Every value comes from the exact kernels of :mod:`oversmooth.metrics`."""

    def __init__(self, x: Tensor, op: GraphOperator, workspace: _Workspace) -> None:
        self.x, self._lap_buf = workspace.buffers(x)
        self._scratch = workspace.scratch
        self.x.copy_(x)  # float64 copy of the state
        self.op = op
        self._lap: Tensor | None = None
        self._edge_sum: Tensor | None = None
        self._unit: Tensor | None = None
        self._poison: Tensor | None = None

    @property
    def poison(self) -> Tensor:  # 0-d: 0 when every entry is finite, else NaN (one pass)
        if self._poison is None:
            self._poison = M._poison(self.x)
        return self._poison

    @property
    def lap(self) -> Tensor:  # [n, d] Delta x from edge differences (0 on isolated nodes)
        if self._lap is None:  # one pass over the edges gives Delta x and the Dirichlet sum
            self._lap, self._edge_sum = M._laplacian_and_edge_sum(
                self.x, self.op, self._lap_buf, self._scratch, self.poison
            )
        return self._lap

    @property
    def edge_sum(self) -> Tensor:  # 0-d sum_e w_e ||x_src - x_dst||^2
        if self._edge_sum is None:
            self.lap
        assert self._edge_sum is not None  # set by self.lap
        return self._edge_sum

    @property
    def unit(self) -> Tensor:  # [n, d] unit rows (zero rows stay zero)
        if self._unit is None:
            self._unit = M._unit_rows(self.x)
        return self._unit


def _energy(order: int, measure: str = "degree") -> Callable[[_LayerCache], Tensor]:
    # every order reuses the layer's one pass over the edges (Laplacian and Dirichlet sum)
    return lambda c: M._energy_kernel(
        c.x, c.op, order, measure, lap=c.lap, edge_sum=c.edge_sum, poison=c.poison
    )


@dataclass(frozen=True)
class Metric:
    """One per-layer measure: the column a :class:`Probe` records (and ``--metrics`` names).

    ``kind`` is ``layer`` (``fn(cache)`` gives the 0-d float64 value of one layer state),
    ``derived`` (computed from the previous layer too; ``fn`` is None) or ``pattern``
    (a family of names, ``energy_<m>``).  ``default``: recorded when no list is given.
    """

    name: str
    help: str
    kind: str = "layer"
    fn: Callable[[_LayerCache], Tensor] | None = None
    default: bool = False


# The one registry of metric names: the Probe, `--metrics` and `oversmooth metrics` read it.
# The defaults come first, in the column order of a Probe's table.
METRICS: dict[str, Metric] = {
    m.name: m
    for m in (
        Metric(
            "laplacian_energy",
            "E2 = (1/n) ||PX - X||_F^2, P = D^-1 W (counting measure)",
            fn=_energy(2, "counting"),
            default=True,
        ),
        Metric(
            "dirichlet_energy",
            "E1 = (1/n) * 1/2 sum_ij w_ij ||X_j - X_i||^2",
            fn=_energy(1),
            default=True,
        ),
        Metric(
            "relative_energy",
            "R(X^k) = (E(X^k) - E(X^k-1)) / E(X^k-1); -> 0 is the curse of depth",
            kind="derived",
            default=True,
        ),
        Metric(
            "cosine_prev",
            "sim(X^k-1, X^k) = (1/n) sum_i cos(X^k-1_i, X^k_i)",
            kind="derived",
            default=True,
        ),
        Metric(
            "feature_norm", "sqrt((1/n) ||X||_F^2)", fn=lambda c: M._feature_norm(c.x), default=True
        ),
        Metric(
            "laplacian_energy_degree",
            "E2 in the degree measure: node i weighted by its degree "
            "d_i (laplacian_energy(measure='degree'))",
            fn=_energy(2, "degree"),
        ),
        Metric(
            "energy_<m>",
            "E_m for an order 1 <= m <= 1000, e.g. energy_3: E_2k = (1/n) int "
            "|Delta^k X|^2 dmu, E_2k+1 = (1/n) int |grad Delta^k X|^2 dmu",
            kind="pattern",
        ),
        Metric(
            "rusch_dirichlet",
            "sqrt((1/n) sum_i sum_{j in N_i} ||X_i - X_j||^2) (Rusch et al. "
            "2023; rusch_dirichlet_energy)",
            fn=lambda c: M.rusch_dirichlet_energy(c.x, c.op),
        ),
        Metric(
            "mad",
            "(1/n') sum_i mean_{j in N_i} (1 - cos(X_i, X_j)) (mean_average_distance)",
            fn=lambda c: M._mad_neighbors(c.x, c.op),
        ),
        Metric(
            "mad_global",
            "mean over all pairs i != j of 1 - cos(X_i, X_j) "
            "(mean_average_distance(variant='global'))",
            fn=lambda c: M._mad_global(c.x),
        ),
        Metric(
            "effective_rank",
            "exp(entropy of normalised singular values of X - mean)",
            fn=lambda c: M._effective_rank(c.x),
        ),
    )
}
# Measures that are not per-layer columns (not accepted by --metrics), listed beside them.
NOT_PER_LAYER: dict[str, str] = {
    "layer_similarity": "L x L matrix of sim(X^s, X^t) over all layer pairs: "
    "Probe(similarity=True); `oversmooth analyze` writes similarity.csv",
}
DEFAULT_METRICS = tuple(name for name, m in METRICS.items() if m.default)
_ENERGY_M = re.compile(r"^energy_([1-9][0-9]*)$")


def available_metrics() -> list[str]:
    """Every metric name a probe accepts (``energy_<m>`` for any order ``1 <= m <= 1000``)."""
    return list(METRICS)


def _metric_fn(name: str) -> Callable[[_LayerCache], Tensor] | None:
    metric = METRICS.get(name)
    if metric is not None and metric.kind != "pattern":
        return metric.fn  # None for a derived metric
    match = _ENERGY_M.match(name)
    if match:
        order = int(match.group(1))
        check_energy_order(order)
        return _energy(order)
    raise ValueError(
        f"metrics: unknown name {name!r}; expected any of {', '.join(available_metrics())}"
    )


def check_metrics(names: Iterable[str]) -> list[str]:
    """Validate metric names (``ValueError`` listing the valid ones) and return them as a list."""
    names = list(names)
    for name in names:
        _metric_fn(name)
    return names


def find_layers(model: nn.Module) -> tuple[list[nn.Module], bool]:
    """The modules whose outputs are layers 1..L, and whether layer 0 is the
    *input* of the first one (PyG) rather than a module output (ours: encoder)."""
    if isinstance(model, DepthModel):
        return [model.encoder, *model.blocks], False
    try:
        from torch_geometric.nn.models.basic_gnn import BasicGNN
    except ImportError:  # pragma: no cover - torch_geometric is a dependency
        BasicGNN = ()
    if isinstance(model, BasicGNN):
        return list(model.convs), True
    raise ValueError(
        f"layers: cannot find the layers of a {type(model).__name__} automatically; "
        "pass layers=[module, ...] (layer k = output of module k) or call probe.record(k, x)"
    )


def _first_tensor(output: object) -> Tensor:
    if isinstance(output, Tensor):
        return output
    if isinstance(output, (tuple, list)) and output and isinstance(output[0], Tensor):
        return output[0]  # e.g. (x, attention) from return_attention_weights
    raise TypeError(
        f"layer output: expected a tensor [num_nodes, channels], received {type(output).__name__}"
    )


class Probe:
    """Record per-layer measures of ``model`` inside a ``with`` block.

    Args:
        model: the model to observe (left unchanged).
        graph: ``edge_index`` or :class:`GraphOperator` on which energies are
            measured (the input graph, without self loops unless you add them).
        metrics: names from :func:`available_metrics`; default
            ``laplacian_energy, dirichlet_energy, relative_energy, cosine_prev, feature_norm``.
        layers: modules whose outputs are the layers (default: found
            automatically); ``[]`` attaches nothing (use :meth:`record`).
        similarity: keep every layer state (compactly) to return the ``L x L``
            similarity matrix; memory then grows with depth.
        similarity_dtype: storage of the kept unit rows: float32 (default;
            error ~1e-7) or float16 (half the memory; error ~1e-3 per entry).
        similarity_sample: keep only this many nodes (a seeded uniform sample
            without replacement); each matrix entry is then a sample mean of
            cosines, with standard error at most ``1/sqrt(sample)``.
        head_energies: for oversmooth attention models, also record each
            block's output energy under each head's own attention
            ``(1/n)||P_h X - X||^2`` as ``head_energy_<h>`` (NaN for global
            attention blocks and layer 0).
        self_loops: add self loops to ``graph`` before measuring.
        seed: seed of the similarity node sample.
    """

    def __init__(
        self,
        model: nn.Module,
        graph: GraphLike,
        metrics: Sequence[str] = DEFAULT_METRICS,
        *,
        layers: Sequence[nn.Module] | None = None,
        similarity: bool = False,
        similarity_dtype: torch.dtype = torch.float32,
        similarity_sample: int | None = None,
        head_energies: bool = False,
        self_loops: bool = False,
        seed: int = 0,
    ) -> None:
        if isinstance(metrics, str):
            metrics = [m.strip() for m in metrics.split(",") if m.strip()]
        self.metrics = list(dict.fromkeys(metrics))
        self._fns = {name: _metric_fn(name) for name in self.metrics}
        # relative_energy is derived from the Laplacian energy, which is then measured too
        self._measured = [m for m in self.metrics if self._fns[m] is not None]
        if "relative_energy" in self.metrics and "laplacian_energy" not in self._measured:
            self._fns["laplacian_energy"] = METRICS["laplacian_energy"].fn
            self._measured.append("laplacian_energy")
        self.model = model
        if layers is None:
            self.layers, self._input_is_layer0 = find_layers(model)
        else:
            self.layers, self._input_is_layer0 = list(layers), False
            owned = {id(m) for m in model.modules()}
            for k, module in enumerate(self.layers):
                if not isinstance(module, nn.Module) or id(module) not in owned:
                    raise ValueError(
                        f"layers[{k}]: expected a submodule of the model, "
                        f"received {type(module).__name__}"
                    )
        self.num_layers = (
            len(self.layers) + (1 if self._input_is_layer0 else 0) if self.layers else None
        )
        if head_energies and not isinstance(model, DepthModel):
            raise ValueError(
                "head_energies: only oversmooth models expose their attention; "
                "set head_energies=False"
            )
        self.head_energies = head_energies
        self.similarity = similarity
        if similarity_dtype not in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
            raise ValueError(
                f"similarity_dtype: expected a floating dtype, received {similarity_dtype}"
            )
        self.similarity_dtype = similarity_dtype
        if similarity_sample is not None and (
            isinstance(similarity_sample, bool) or similarity_sample < 1
        ):
            raise ValueError(
                "similarity_sample: expected a positive number of nodes, "
                f"received {similarity_sample!r}"
            )
        self.similarity_sample = similarity_sample
        self.seed = seed
        self._graph_arg = graph
        self._self_loops = self_loops
        self._operator: GraphOperator | None = None
        self._handles: list = []
        self.reset()

    # -- lifecycle ----------------------------------------------------------------------------
    def reset(self) -> None:
        """Forget everything recorded (hooks stay attached)."""
        self._values: dict[int, dict[str, Tensor]] = {}
        self._prev: Tensor | None = None  # unit rows of the previous state
        self._states: dict[int, Tensor] = {}
        self._sample_index: Tensor | None = None
        self._workspace = _Workspace()

    def __enter__(self) -> "Probe":
        self.attach()
        return self

    def __exit__(self, *exc: object) -> None:
        self.detach()

    def attach(self) -> None:
        """Register the hooks (prefer the ``with`` block, which always detaches)."""
        if self._handles:
            return
        try:
            if self._input_is_layer0 and self.layers:
                self._handles.append(
                    self.layers[0].register_forward_pre_hook(self._pre_hook_layer0)
                )
            offset = 1 if self._input_is_layer0 else 0
            for k, module in enumerate(self.layers):
                self._handles.append(
                    module.register_forward_hook(self._make_hook(k + offset, module))
                )
            if self.head_energies:
                for block in self.model.blocks:  # type: ignore[union-attr]
                    block.mp.keep_attention = True
        except BaseException:
            self.detach()
            raise

    def detach(self) -> None:
        """Remove every hook this probe registered."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        if self.head_energies:
            for block in self.model.blocks:  # type: ignore[union-attr]
                block.mp.keep_attention = False
                block.mp.last_attention = block.mp.last_edges = block.mp.last_energy = None

    # -- hooks ----------------------------------------------------------------------------------
    def _pre_hook_layer0(self, module: nn.Module, args: tuple) -> None:
        self.record(0, _first_tensor(args))

    def _make_hook(self, k: int, module: nn.Module) -> Callable[[nn.Module, tuple, object], None]:
        def hook(mod: nn.Module, args: tuple, output: object) -> None:
            self.record(k, _first_tensor(output), module=mod)

        return hook

    def _graph_for(self, x: Tensor) -> GraphOperator:
        """The measuring operator on ``x``'s device, built (or moved) once and cached."""
        op = self._operator
        if op is None or op.device != x.device or op.num_nodes != x.size(0):
            graph = self._graph_arg
            if isinstance(graph, GraphOperator):
                if self._self_loops:
                    graph = GraphOperator(
                        graph.edge_index, graph.edge_weight, graph.num_nodes, self_loops=True
                    )
                op = as_operator(graph, num_nodes=x.size(0), device=x.device)
            else:
                op = GraphOperator(
                    graph.to(x.device), num_nodes=x.size(0), self_loops=self._self_loops
                )
            self._operator = op
        return op

    def record(self, k: int, x: Tensor, module: nn.Module | None = None) -> None:
        """Measure ``x`` as the state of layer ``k`` (called by the hooks, or by you)."""
        if isinstance(k, bool) or not isinstance(k, int) or k < 0:
            raise ValueError(f"layer: expected an integer >= 0, received {k!r}")
        if self.num_layers is not None and k >= self.num_layers:
            raise ValueError(
                f"layer: expected an index in [0, {self.num_layers - 1}], received {k}"
            )
        x = x.detach()
        if x.dim() != 2:
            raise ValueError(
                f"layer {k}: expected a state [num_nodes, channels], received shape {list(x.shape)}"
            )
        op = self._graph_for(x)
        cache = _LayerCache(x, op, self._workspace)
        row = {
            name: cast(Callable[[_LayerCache], Tensor], self._fns[name])(cache)
            for name in self._measured
        }
        if "cosine_prev" in self.metrics:
            prev = self._prev
            if prev is None or prev.shape != x.shape:
                row["cosine_prev"] = cache.x.new_tensor(float("nan"))
            else:  # (1/n) sum_i cos(a_i, b_i), zero rows give 0 (metrics.mean_cosine_similarity)
                row["cosine_prev"] = M._mean_unit_cosine(prev, cache.unit)
            self._prev = cache.unit
        if self.head_energies:
            row.update(self._head_energies(k, cache.x, op, module))
        self._values[k] = row
        if self.similarity:
            self._keep_state(k, x)

    def _head_energies(
        self, k: int, x64: Tensor, op: GraphOperator, module: nn.Module | None
    ) -> dict[str, Tensor]:
        heads = cast(DepthModel, self.model).config.heads  # checked in __init__
        nan = x64.new_tensor(float("nan"))
        mp = getattr(module, "mp", None)
        if k == 0 or mp is None or mp.last_attention is None:
            return {f"head_energy_{h}": nan for h in range(heads)}
        src, dst = mp.last_edges
        energy = M._head_energies(x64, src, dst, mp.last_attention.to(torch.float64))  # [h]
        mp.last_attention = None
        return {f"head_energy_{h}": energy[h] for h in range(heads)}

    def _keep_state(self, k: int, x: Tensor) -> None:
        if self.similarity_sample is not None and self.similarity_sample < x.size(0):
            if self._sample_index is None or self._sample_index.device != x.device:
                gen = torch.Generator().manual_seed(self.seed)
                self._sample_index = torch.randperm(x.size(0), generator=gen)[
                    : self.similarity_sample
                ].to(x.device)
            x = x[self._sample_index]
        self._states[k] = M._unit_rows(x.to(torch.float64)).to(self.similarity_dtype)

    # -- results --------------------------------------------------------------------------------
    @property
    def recorded_layers(self) -> list[int]:
        return sorted(self._values)

    def to_frame(self) -> "pd.DataFrame":
        """One row per recorded layer: ``layer`` then one column per metric (one host copy)."""
        import pandas as pd

        layers = self.recorded_layers
        if not layers:
            return pd.DataFrame({"layer": [], **{m: [] for m in self.metrics}})
        keys = list(self._values[layers[0]])  # every row holds the same keys
        table = (
            torch.stack([torch.stack([self._values[k][c] for c in keys]) for k in layers])
            .cpu()
            .numpy()
        )
        data = {"layer": layers, **{c: table[:, j] for j, c in enumerate(keys)}}
        if "relative_energy" in self.metrics:
            data["relative_energy"] = M.relative_energy(
                torch.from_numpy(data["laplacian_energy"])
            ).numpy()
        extra = [c for c in keys if c.startswith("head_energy_")]
        return pd.DataFrame({c: data[c] for c in ["layer", *self.metrics, *extra]})

    def similarity_matrix(self) -> Tensor:
        """``[L, L]`` float64 matrix of sim(X^s, X^t) over the recorded layers (needs
        ``similarity=True``).

        Entries between layers of different widths are NaN.
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
        states = [self._states[k] for k in layers]
        size = len(layers)
        device = states[0].device
        out = torch.full((size, size), float("nan"), dtype=torch.float64, device=device)
        groups: dict[tuple, list[int]] = {}
        for i, s in enumerate(states):
            groups.setdefault(tuple(s.shape), []).append(i)
        for shape, idx in groups.items():
            n = shape[0]
            gram = torch.zeros(len(idx), len(idx), dtype=torch.float64, device=device)
            step = max(1, (1 << 22) // max(1, len(idx) * shape[1]))
            for start in range(0, n, step):
                block = torch.stack([states[i][start : start + step] for i in idx]).to(
                    torch.float64
                )
                flat = block.reshape(len(idx), -1)
                gram += flat @ flat.T
            index = torch.tensor(idx, device=device)
            out[index.unsqueeze(1), index.unsqueeze(0)] = gram / max(n, 1)
        return out

    def similarity_layers(self) -> list[int]:
        return sorted(self._states)
