"""Layer pruning sensitivity (seed paper §5, Table 8).

Pruning layer ``k`` replaces block ``k`` (``model.blocks[k-1]``) by the identity,
``X^k = X^{k-1}``, and runs the rest of the network unchanged.  At
initialisation the sensitivity is the relative Frobenius change of the logits
and the relative change of the final Laplacian energy; with labels and a mask
it is also the accuracy drop.

Cost: one full forward records the block inputs of the chosen layers
(``len(layers) * n * d`` floats held at once), then each pruned run restarts
from its layer instead of recomputing the unchanged prefix:
``L + sum_k (L - k)`` block evaluations instead of ``len(layers) * L``.  With
``reuse_prefix=False`` nothing is held and every run starts from the input.

Any other model (a PyG ``GCN``, a custom module): its layers are the ones
:func:`~oversmooth.probe.find_layers` finds (a ``BasicGNN``'s ``convs``, else
``model.convs``/``layers``/``blocks``), and pruning layer ``k`` replaces that module's
output by its input through a forward hook -- possible only where the two have the same
shape (a ``ValueError`` names the layer and both shapes otherwise).  For a block with a
skip connection inside (``x + f(x)``) that is the identity; for a bare convolution
inside a residual ``forward`` it removes the convolution's contribution only if the model adds
it to its input (prune the blocks then).  Every pruned run is a full forward
(``len(layers) * L`` layer evaluations), and the final energy is measured on the model's
output.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from collections.abc import Callable, Sequence

import torch
from torch import Tensor, nn

from oversmooth.graph import GraphOperator, as_graph
from oversmooth.metrics import laplacian_energy
from oversmooth.nn.model import DepthModel

if TYPE_CHECKING:
    import pandas as pd
    from torch_geometric.data import Data

__all__ = ["prune_sensitivity", "check_layers"]


def check_layers(layers: Sequence[int] | None, depth: int) -> list[int]:
    """Validate 1-based layer numbers against the depth (default: every layer)."""
    if layers is None:
        return list(range(1, depth + 1))
    out = []
    for k in layers:
        if isinstance(k, bool) or not isinstance(k, int):
            raise ValueError(f"layers: expected integers in [1, {depth}], received {k!r}")
        if not 1 <= k <= depth:
            raise ValueError(
                f"layers: expected layer numbers in [1, {depth}] for a depth-{depth} model, "
                f"received {k}"
            )
        out.append(k)
    if not out:
        raise ValueError("layers: expected at least one layer number")
    return sorted(set(out))


def _resolve_mask(data: Data, mask: str | Tensor | None) -> Tensor | None:
    if mask is None:
        return None
    if isinstance(mask, str):
        value = getattr(data, mask, None)
        if value is None:
            raise ValueError(
                f"mask: the data has no attribute {mask!r}; "
                "expected e.g. 'test_mask' or a boolean tensor"
            )
        mask = value
    if not isinstance(mask, Tensor) or mask.dtype != torch.bool or mask.numel() != data.num_nodes:
        raise ValueError(
            f"mask: expected a boolean tensor of {data.num_nodes} entries or the name of one"
        )
    if getattr(data, "y", None) is None:
        raise ValueError("mask: accuracy needs labels, but the data has no y")
    return mask


def _accuracy(logits: Tensor, y: Tensor, mask: Tensor) -> Tensor:
    return (logits[mask].argmax(dim=1) == y[mask]).double().mean()


@dataclass
class _Baseline:
    """The unpruned model's output, against which every pruned layer is measured."""

    logits: Tensor
    energy: Tensor
    norm: Tensor  # ||logits||, the scale of logits_change (computed once)
    y: Tensor | None
    mask: Tensor | None
    acc: Tensor | None

    @classmethod
    def of(
        cls, logits: Tensor, energy: Tensor, data: Data, mask: Tensor | None, device: Any
    ) -> _Baseline:
        norm = logits.double().norm().clamp_min(1e-300)
        if mask is None:
            return cls(logits, energy, norm, None, None, None)
        y, mask = data.y.to(device), mask.to(device)
        return cls(logits, energy, norm, y, mask, _accuracy(logits, y, mask))

    def row(self, layer: int, logits: Tensor, energy: Tensor) -> dict:
        row = {
            "layer": layer,
            "logits_change": (logits - self.logits).double().norm() / self.norm,
            "final_energy": energy,
            "energy_change": (energy - self.energy) / self.energy,
        }
        if self.y is not None and self.mask is not None and self.acc is not None:
            acc = _accuracy(logits, self.y, self.mask)
            row["accuracy"], row["accuracy_drop"] = acc, self.acc - acc
        return row


@torch.no_grad()
def prune_sensitivity(
    model: nn.Module,
    data: Data,
    layers: Sequence[int] | None = None,
    *,
    mask: str | Tensor | None = None,
    reuse_prefix: bool = True,
    callback: Callable[[int], None] | None = None,
) -> pd.DataFrame:
    """Prune each chosen layer alone and measure what changes.

    Args:
        model: an oversmooth :class:`~oversmooth.nn.DepthModel`, or any model whose
            layers :func:`~oversmooth.probe.find_layers` finds, called as
            ``model(x, edge_index)`` (plus ``edge_weight=`` when the data has weights).
        data: a PyG ``Data`` with ``x`` and ``edge_index`` (and ``y`` for accuracy).
        layers: 1-based layer numbers to prune one at a time (default: all).
        mask: nodes on which to measure accuracy (``"test_mask"`` or a boolean
            tensor); no accuracy columns without it.
        reuse_prefix: restart each pruned run from its layer (see module docstring).
        callback: called with each layer number once its pruned run is done (progress).

    Returns:
        pandas DataFrame, one row per pruned layer: ``layer``, ``logits_change``
        (:math:`\\|Z_k - Z\\|_F / \\|Z\\|_F`), ``final_energy``, ``energy_change``
        (relative to the unpruned final energy) and, with a mask, ``accuracy``
        and ``accuracy_drop`` (unpruned minus pruned).  ``frame.attrs["baseline"]``
        holds the unpruned ``final_energy`` and ``accuracy``.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model: expected a torch.nn.Module, received {type(model).__name__}")
    if not isinstance(model, DepthModel):
        return _prune_any(model, data, layers, mask, callback)
    depth = len(model.blocks)
    chosen = check_layers(layers, depth)
    mask_t = _resolve_mask(data, mask)
    was_training = model.training
    model.eval()
    try:
        device = next(model.parameters()).device
        x, edge_index = data.x.to(device), data.edge_index.to(device)
        edge_weight = getattr(data, "edge_weight", None)
        edge_weight = None if edge_weight is None else edge_weight.to(device)
        graph = GraphOperator(edge_index, edge_weight, num_nodes=data.num_nodes)
        ctx = model.context(edge_index, x.size(0), getattr(data, "batch", None), edge_weight)
        h = model.encoder(x)
        wanted = {k - 1 for k in chosen} if reuse_prefix else set()
        inputs: dict[int, Tensor] = {}
        for k, block in enumerate(model.blocks):
            if k in wanted:
                inputs[k] = h  # the input of block k, i.e. X^{k} in 0-based block terms
            h = block(h, ctx)
        base = _Baseline.of(model.decoder(h), laplacian_energy(h, graph), data, mask_t, device)
        rows = []
        for layer in chosen:
            if reuse_prefix:
                out = model.run_blocks(inputs.pop(layer - 1), ctx, start=layer)
            else:
                out = model.run_blocks(model.encoder(x), ctx, skip=[layer - 1])
            logits = model.decoder(out)
            energy = laplacian_energy(out, graph)
            rows.append(base.row(layer, logits, energy))
            if callback is not None:
                callback(layer)
        return _frame(rows, chosen, base.energy, base.acc)
    finally:
        model.train(was_training)


def _frame(
    rows: list[dict], chosen: list[int], base_energy: Tensor, base_acc: Tensor | None
) -> pd.DataFrame:
    import pandas as pd

    columns = [c for c in rows[0] if c != "layer"]
    values = torch.stack([torch.stack([r[c] for c in columns]) for r in rows]).cpu().numpy()
    frame = pd.DataFrame({"layer": chosen, **{c: values[:, j] for j, c in enumerate(columns)}})
    frame.attrs["baseline"] = {
        "final_energy": float(base_energy),
        "accuracy": None if base_acc is None else float(base_acc),
    }
    return frame


def _identity_hook(layer: int) -> Callable[[nn.Module, tuple, object], object]:
    """Forward hook that hands on the module's input instead of its output."""

    def hook(module: nn.Module, args: tuple, output: object) -> object:
        from oversmooth.probe import _first_tensor

        inp, out = _first_tensor(args), _first_tensor(output)
        if inp.shape != out.shape:
            raise ValueError(
                f"layers: layer {layer} ({type(module).__name__}) cannot be pruned: its input "
                f"{list(inp.shape)} and output {list(out.shape)} differ in shape; choose "
                "layers whose input and output have the same width"
            )
        return inp if isinstance(output, Tensor) else (inp, *output[1:])  # type: ignore[index]

    return hook


def _prune_any(
    model: nn.Module,
    data: Data,
    layers: Sequence[int] | None,
    mask: str | Tensor | None,
    callback: Callable[[int], None] | None,
) -> pd.DataFrame:
    """:func:`prune_sensitivity` of any model through identity hooks on its layers."""
    from oversmooth.probe import find_layers

    modules, _ = find_layers(model)
    chosen = check_layers(layers, len(modules))
    mask_t = _resolve_mask(data, mask)
    was_training = model.training
    model.eval()
    try:
        param = next(iter(model.parameters()), None)
        device = param.device if param is not None else data.x.device
        x, edge_index = data.x.to(device), data.edge_index.to(device)
        edge_weight = getattr(data, "edge_weight", None)
        kwargs = {} if edge_weight is None else {"edge_weight": edge_weight.to(device)}
        graph = as_graph(data, device=device)

        def run() -> Tensor:
            out = model(x, edge_index, **kwargs)
            if not isinstance(out, Tensor):
                raise TypeError(
                    f"model: expected the forward to return a tensor, received {type(out).__name__}"
                )
            return out

        logits = run()
        base = _Baseline.of(logits, laplacian_energy(logits, graph), data, mask_t, device)
        rows = []
        for layer in chosen:
            handle = modules[layer - 1].register_forward_hook(_identity_hook(layer))
            try:
                logits = run()
            finally:
                handle.remove()
            energy = laplacian_energy(logits, graph)
            rows.append(base.row(layer, logits, energy))
            if callback is not None:
                callback(layer)
        return _frame(rows, chosen, base.energy, base.acc)
    finally:
        model.train(was_training)
