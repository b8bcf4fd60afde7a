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
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Sequence

import torch
from torch import Tensor

from oversmooth.graph import GraphOperator
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


@torch.no_grad()
def prune_sensitivity(
    model: DepthModel,
    data: Data,
    layers: Sequence[int] | None = None,
    *,
    mask: str | Tensor | None = None,
    reuse_prefix: bool = True,
    callback: Callable[[int], None] | None = None,
) -> pd.DataFrame:
    """Prune each chosen layer alone and measure what changes.

    Args:
        model: an oversmooth :class:`~oversmooth.nn.DepthModel`.
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
    import pandas as pd

    if not isinstance(model, DepthModel):
        raise TypeError(
            "model: expected an oversmooth DepthModel (built by build_model), "
            f"received {type(model).__name__}"
        )
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
        base_energy = laplacian_energy(h, graph)
        base_logits = model.decoder(h)
        base_norm = base_logits.double().norm().clamp_min(1e-300)
        y = data.y.to(device) if mask_t is not None else None
        mask_t = mask_t.to(device) if mask_t is not None else None
        base_acc = (
            _accuracy(base_logits, y, mask_t) if mask_t is not None and y is not None else None
        )
        rows = []
        for layer in chosen:
            if reuse_prefix:
                out = model.run_blocks(inputs.pop(layer - 1), ctx, start=layer)
            else:
                out = model.run_blocks(model.encoder(x), ctx, skip=[layer - 1])
            logits = model.decoder(out)
            energy = laplacian_energy(out, graph)
            row = {
                "layer": layer,
                "logits_change": (logits - base_logits).double().norm() / base_norm,
                "final_energy": energy,
                "energy_change": (energy - base_energy) / base_energy,
            }
            if mask_t is not None and y is not None and base_acc is not None:  # all set together
                acc = _accuracy(logits, y, mask_t)
                row["accuracy"], row["accuracy_drop"] = acc, base_acc - acc
            rows.append(row)
            if callback is not None:
                callback(layer)
        columns = [c for c in rows[0] if c != "layer"]
        values = torch.stack([torch.stack([r[c] for c in columns]) for r in rows]).cpu().numpy()
        frame = pd.DataFrame({"layer": chosen, **{c: values[:, j] for j, c in enumerate(columns)}})
        frame.attrs["baseline"] = {
            "final_energy": float(base_energy),
            "accuracy": None if base_acc is None else float(base_acc),
        }
        return frame
    finally:
        model.train(was_training)
