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
:func:`~oversmooth.probe.find_layers` finds with ``capture="residual"`` (blocks such as PyG's
``DeepGCNLayer`` or a ``model.blocks`` list, except a list of bare PyG convolutions, or of
block modules that return their branch (``h = h + blk(h)``), that the forward does not chain,
else a ``BasicGNN``'s ``convs``, else ``model.convs``/``layers``), and
pruning layer ``k`` takes the whole block out of the residual
stream, read as ``Probe(capture="residual")`` reads it:

- a block (its output is the stream) is replaced by its input: the identity;
- a layer whose skip lives in ``forward`` (``h = h + f(norm(h))``, Pre-LN) gets a zero
  output, so that the step hands ``h`` on unchanged -- not ``h + norm(h)``;
- a layer without a skip (``h = conv(h)``) has its output replaced by its input.

The first of the last two that leaves the stream unchanged (to 1e-6) is used; where neither
does (e.g. an activation after the conv that changes its input), the layer's output is
replaced by its input and a warning says that this is not the identity on the stream.  Where
the stream after the layer is not seen (the last block before a head), the layer is removed
the way the layer before it was, and the warning says so.  ``frame.attrs["pruned_as"]``
(``block``, ``zero`` or ``input`` per layer) and ``frame.attrs["identity_on_stream"]``
(True, False, or None: not seen) record it.  A layer module the forward never calls (PyG's
DeeperGCN calls ``layers[0].conv`` directly) is refused.  Every pruned run is a full forward
(one or two per layer).  The final energy is measured on the stream after the last layer,
the state a ``Probe(capture="residual")`` records as layer ``L`` and the zoo's models measure
(``X^L``, the decoder's input), where it is seen; otherwise (a head after the last block and
no final norm) on the model's output.  ``frame.attrs["energy_on"]`` says which (``"stream"``
or ``"output"``).
"""

from __future__ import annotations

import math
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar
from collections.abc import Callable, Iterator, Sequence

import torch
from torch import Tensor, nn

from oversmooth.config import check_layers
from oversmooth.graph import GraphOperator, as_graph
from oversmooth.metrics import laplacian_energy
from oversmooth.nn.model import DepthModel

if TYPE_CHECKING:
    import pandas as pd
    from torch_geometric.data import Data

    from oversmooth.probe import LayerCalls, StreamPlan

__all__ = ["prune_sensitivity"]


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


def _correct(logits: Tensor, y: Tensor, mask: Tensor) -> Tensor:
    return logits[mask].argmax(dim=1) == y[mask]


#: level of the paired interval of each accuracy drop (``drop_low``, ``drop_high``)
DROP_LEVEL = 0.95


def drop_interval(lost: int, gained: int, nodes: int, level: float = DROP_LEVEL) -> tuple:
    """An exact interval of an accuracy drop from the nodes it changed, paired on the same
    nodes: ``lost`` right before pruning and wrong after, ``gained`` the reverse, of ``nodes``
    measured.  Given the ``m = lost + gained`` nodes whose prediction changed, ``lost`` is
    binomial in ``m``; its Clopper-Pearson interval for the share ``q`` gives the drop's,
    ``(2q - 1) m / nodes``.  ``(0, 0)`` where no prediction changed.  A drop of 0.37 points on
    541 test nodes (7 lost, 5 gained) has an interval of -0.99 to +1.55 points: no cost is
    shown, and none ruled out (an audit: Table 8's sentences contrasted such drops)."""
    from scipy.stats import beta

    m = lost + gained
    if nodes <= 0:
        return (float("nan"), float("nan"))
    if m == 0:
        return (0.0, 0.0)
    tail = (1.0 - level) / 2
    low = 0.0 if lost == 0 else float(beta.ppf(tail, lost, gained + 1))
    high = 1.0 if gained == 0 else float(beta.ppf(1 - tail, lost + 1, gained))
    return ((2 * low - 1) * m / nodes, (2 * high - 1) * m / nodes)


def _majority(y: Tensor, mask: Tensor) -> Tensor:
    """The accuracy of predicting the most frequent class of the measured nodes everywhere; a
    negative label (an unlabelled node, which every prediction misses) is no class to predict
    but counts in the share."""
    labels = y[mask].long()
    labelled = labels[labels >= 0]
    if labelled.numel() == 0:
        return torch.tensor(float("nan"), dtype=torch.float64, device=y.device)
    return torch.bincount(labelled).max().double() / labels.numel()


@dataclass
class _Baseline:
    """The unpruned model's output, against which every pruned layer is measured."""

    logits: Tensor
    energy: Tensor
    norm: Tensor  # ||logits||, the scale of logits_change (computed once)
    y: Tensor | None
    mask: Tensor | None
    acc: Tensor | None
    majority: Tensor | None = None  # what the most frequent class alone scores
    correct: Tensor | None = None  # which measured nodes the unpruned model gets right

    @classmethod
    def of(
        cls, logits: Tensor, energy: Tensor, data: Data, mask: Tensor | None, device: Any
    ) -> _Baseline:
        norm = logits.double().norm().clamp_min(1e-300)
        if mask is None:
            return cls(logits, energy, norm, None, None, None)
        y, mask = data.y.to(device), mask.to(device)
        correct = _correct(logits, y, mask)
        acc = correct.double().mean()
        return cls(logits, energy, norm, y, mask, acc, _majority(y, mask), correct)

    def row(self, layer: int, logits: Tensor, energy: Tensor) -> dict:
        row = {
            "layer": layer,
            "logits_change": (logits - self.logits).double().norm() / self.norm,
            "final_energy": energy,
            "energy_change": (energy - self.energy) / self.energy,
        }
        if self.y is not None and self.mask is not None and self.acc is not None:
            correct = _correct(logits, self.y, self.mask)
            acc = correct.double().mean()
            row["accuracy"], row["accuracy_drop"] = acc, self.acc - acc
            # the nodes the pruning changed, for the drop's paired interval (_frame)
            assert self.correct is not None
            row["lost"] = (self.correct & ~correct).sum().double()
            row["gained"] = (~self.correct & correct).sum().double()
            # the baseline beside every row, so that prune.csv says what the drops are from
            # and whether the model is above chance at all (a model predicting one class
            # showed drops of 0 that read as "every layer removable": an audit)
            row["unpruned_accuracy"] = self.acc
            assert self.majority is not None
            row["majority_accuracy"] = self.majority
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
    stream: Sequence[nn.Module] | None = None,
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
        stream: for a model whose skips live in ``forward`` and that the probe cannot read by
            itself, the modules whose input is the stream before each layer (as
            :class:`~oversmooth.probe.Probe`'s ``stream=``).

    Returns:
        pandas DataFrame, one row per pruned layer: ``layer``, ``logits_change``
        (:math:`\\|Z_k - Z\\|_F / \\|Z\\|_F`), ``final_energy``, ``energy_change``
        (relative to the unpruned final energy) and, with a mask, ``accuracy``
        and ``accuracy_drop`` (unpruned minus pruned), with the unpruned accuracy
        (``unpruned_accuracy``) and what predicting the most frequent class of the masked nodes
        scores (``majority_accuracy``) beside them: a model within
        :data:`~oversmooth.prune_table.CHANCE_MARGIN` of it
        (:func:`~oversmooth.prune_table.at_chance`) predicts at chance, and its drops say
        nothing about its layers.  ``frame.attrs["baseline"]``
        holds the unpruned ``final_energy`` and ``accuracy``; ``frame.attrs["pruned_as"]`` and
        ``frame.attrs["identity_on_stream"]`` how each layer was taken out, and
        ``frame.attrs["energy_on"]`` where the final energy is measured: ``"stream"`` (after the
        last layer, ``X^L``) or ``"output"`` (module docstring); for a model other than the
        zoo's, ``frame.attrs["forward_noise"]``: how far two unpruned forwards lie apart
        (relative; 0 for a deterministic forward, a warning above 1e-12, refused above
        :data:`RANDOM_FORWARD`).
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model: expected a torch.nn.Module, received {type(model).__name__}")
    from oversmooth.probe import refuse_compiled

    refuse_compiled(model, "model")
    if not isinstance(model, DepthModel):
        return _prune_any(model, data, layers, mask, callback, stream)
    if stream is not None:
        raise ValueError("stream: an oversmooth model's blocks are its stream; leave it unset")
    from oversmooth.probe import edge_states

    if edge_states(model):
        raise ValueError(
            f"model: expected a node-level conv, received conv={model.config.conv!r} (its blocks "
            "run over edges; pruning is not implemented for it)"
        )
    chosen = check_layers(layers, len(model.blocks))
    mask_t = _resolve_mask(data, mask)
    with _eval_mode(model):
        frame = _prune_blocks(model, data, chosen, mask_t, reuse_prefix, callback)
    frame.attrs["pruned_as"] = dict.fromkeys(chosen, "block")
    frame.attrs["identity_on_stream"] = dict.fromkeys(chosen, True)
    frame.attrs["energy_on"] = "stream"
    return frame


@contextmanager
def _eval_mode(model: nn.Module) -> Iterator[None]:
    """``model`` in eval mode, every module put back in the mode it had afterwards (restoring the
    top-level flag alone put a frozen encoder of a training model back in train mode; an
    audit)."""
    modes = [(module, module.training) for module in model.modules()]
    model.eval()
    try:
        yield
    finally:
        for module, training in modes:
            module.training = training


def _on_device(data: Data, device: torch.device) -> tuple[Tensor, Tensor, Tensor | None]:
    """``x``, ``edge_index`` and ``edge_weight`` (None when the data has none) on ``device``."""
    edge_weight = getattr(data, "edge_weight", None)
    edge_weight = None if edge_weight is None else edge_weight.to(device)
    return data.x.to(device), data.edge_index.to(device), edge_weight


def _measure(
    chosen: list[int],
    base: _Baseline,
    pruned: Callable[[int], tuple[Tensor, Tensor]],
    callback: Callable[[int], None] | None,
) -> pd.DataFrame:
    """One row per chosen layer from ``pruned(layer)`` (the logits and the final energy with
    that layer pruned), measured against ``base``."""
    rows = []
    for layer in chosen:
        rows.append(base.row(layer, *pruned(layer)))
        if callback is not None:
            callback(layer)
    nodes = None if base.correct is None else base.correct.numel()
    return _frame(rows, chosen, base.energy, base.acc, nodes)


def _prune_blocks(
    model: DepthModel,
    data: Data,
    chosen: list[int],
    mask: Tensor | None,
    reuse_prefix: bool,
    callback: Callable[[int], None] | None,
) -> pd.DataFrame:
    """:func:`prune_sensitivity` of an oversmooth model: each pruned block is skipped, from the
    input or (``reuse_prefix``) from that block's recorded input."""
    device = next(model.parameters()).device
    x, edge_index, edge_weight = _on_device(data, device)
    batch = getattr(data, "batch", None)
    batch = None if batch is None else batch.to(device)
    # energies per graph of a batch, then their mean, as the Probe measures them
    graph = GraphOperator(edge_index, edge_weight, num_nodes=data.num_nodes, batch=batch)
    ctx = model.context(edge_index, x.size(0), batch, edge_weight)
    h = model.encode(x)  # in the model's precision, as its forward
    wanted = {k - 1 for k in chosen} if reuse_prefix else set()
    inputs: dict[int, Tensor] = {}
    for k, block in enumerate(model.blocks):
        if k in wanted:
            inputs[k] = h  # the input of block k, i.e. X^{k} in 0-based block terms
        h = block(h, ctx)
    base = _Baseline.of(model.decoder(h), laplacian_energy(h, graph), data, mask, device)

    def pruned(layer: int) -> tuple[Tensor, Tensor]:
        if reuse_prefix:
            out = model.run_blocks(inputs.pop(layer - 1), ctx, start=layer)
        else:
            out = model.run_blocks(model.encode(x), ctx, skip=[layer - 1])
        return model.decoder(out), laplacian_energy(out, graph)

    return _measure(chosen, base, pruned, callback)


def _frame(
    rows: list[dict],
    chosen: list[int],
    base_energy: Tensor,
    base_acc: Tensor | None,
    nodes: int | None = None,
) -> pd.DataFrame:
    import pandas as pd

    columns = [c for c in rows[0] if c != "layer"]
    values = torch.stack([torch.stack([r[c] for c in columns]) for r in rows]).cpu().numpy()
    frame = pd.DataFrame({"layer": chosen, **{c: values[:, j] for j, c in enumerate(columns)}})
    if "lost" in frame:
        frame["lost"], frame["gained"] = (frame[c].astype("int64") for c in ("lost", "gained"))
        assert nodes is not None
        pairs = zip(frame["lost"], frame["gained"], strict=True)
        ends = [drop_interval(int(a), int(b), nodes) for a, b in pairs]
        frame["drop_low"] = [lo for lo, _ in ends]
        frame["drop_high"] = [hi for _, hi in ends]
        frame["nodes"] = nodes
    frame.attrs["baseline"] = {
        "final_energy": float(base_energy),
        "accuracy": None if base_acc is None else float(base_acc),
    }
    if float(base_energy) == 0.0:  # the relative change divides by it: said, not a silent NaN
        import warnings

        warnings.warn(
            "prune: the unpruned model's final Laplacian energy is 0 (a graph without edges, "
            "or states collapsed to a constant), so energy_change, relative to it, is "
            "undefined (NaN, or inf where the pruned energy is not 0); final_energy holds the "
            "pruned values",
            stacklevel=3,
        )
    return frame


def _replace_hook(layer: int, mode: str) -> Callable[[nn.Module, tuple, dict, object], object]:
    """Forward hook (registered ``with_kwargs=True``) that hands on zeros (``mode="zero"``) or
    the module's input (``mode="input"``) instead of its output."""

    def hook(module: nn.Module, args: tuple, kwargs: dict, output: object) -> object:
        from oversmooth.probe import first_tensor, inputs_of

        inp, out = first_tensor(inputs_of(args, kwargs)), first_tensor(output)
        if mode == "zero":
            inp = torch.zeros_like(out)
        elif inp.shape != out.shape:
            raise ValueError(
                f"layers: layer {layer} ({type(module).__name__}) cannot be pruned: its input "
                f"{list(inp.shape)} and output {list(out.shape)} differ in shape; choose "
                "layers whose input and output have the same width"
            )
        return inp if isinstance(output, Tensor) else (inp, *output[1:])  # type: ignore[index]

    return hook


def _same(before: Tensor | None, after: Tensor | None) -> bool | None:
    """Whether the stream passed a pruned step unchanged (to 1e-6 relative); None when the
    stream after it was not seen."""
    if before is None or after is None:
        return None
    if before.shape != after.shape:
        return False
    a, b = after.double(), before.double()
    return bool((a - b).norm() <= 1e-6 * b.norm())


#: How a layer was taken out (``frame.attrs["pruned_as"]``).
PRUNED_AS = {
    # (only said of a removal that was not checked or not the identity: no claim of one here;
    # "(the identity on the stream)" stood beside "not checked": an audit)
    "block": "the block module replaced by its input",
    "zero": "the layer's output set to zero, so that the step h + f(h) hands on h",
    "input": "the layer's output replaced by its input",
}


class _Pruner:
    """Runs ``model`` with one layer taken out of its residual stream and checks, on the stream
    read as ``Probe(capture="residual")`` reads it, that the pruned step is the identity.

    Blocks (their outputs are the stream) are replaced by their input.  A plain layer whose
    skip lives in the forward (``h = h + f(norm(h))``) is removed by setting its output to zero,
    which hands ``h`` on unchanged; failing that (no skip) its output is replaced by its input.
    The first of the two that leaves the stream unchanged is used; when neither does, the
    second is, and the row says so."""

    def __init__(
        self,
        model: nn.Module,
        modules: Sequence[nn.Module],
        plan: StreamPlan | None,
        run: Callable[[], Tensor],
    ) -> None:
        self.model, self.modules, self.plan, self.run = model, list(modules), plan, run
        self._checked: dict[int, str | None] = {}  # layer -> mode that checked out

    def _run(
        self, layer: int | None, mode: str = "input"
    ) -> tuple[Tensor, bool | None, Tensor | None]:
        """The output with ``layer`` taken out by ``mode`` (nothing with ``layer=None``),
        whether the stream passed that layer unchanged (None: not seen), and the stream after
        the last layer (None: not seen; a block's output for blocks)."""
        from oversmooth.probe import _StreamTap

        last = len(self.modules)
        at = -2 if layer is None else layer - 1  # the stream before the layer is state `at`
        states: dict[int, Tensor] = {}
        before_end: list[torch.Size] = []  # the shape of the stream before the last layer

        def keep(k: int, x: Tensor) -> None:
            if k == last - 1:
                before_end.append(x.shape)
            if k in (at, at + 1, last):
                states[k] = x.detach().clone()

        def keep_block(module: nn.Module, args: tuple, output: object) -> None:
            from oversmooth.probe import first_tensor

            states[last] = first_tensor(output).detach()

        tap = None if self.plan is None else _StreamTap(self.plan, self.modules, keep, self.model)
        handles = []
        if layer is not None:
            hook = _replace_hook(layer, mode)
            handles.append(self.modules[at].register_forward_hook(hook, with_kwargs=True))
        try:
            if tap is None:  # blocks: the last one's output (after a replacement) is the stream
                handles.append(self.modules[-1].register_forward_hook(keep_block))
            else:
                handles += tap.attach()
            out = self.run()
        finally:
            for handle in handles:
                handle.remove()
        if tap is not None and tap.awaiting and before_end:
            end, _ = tap.end_state(out)  # the model's output, unless a head made it
            if end is not None and end.shape == before_end[-1]:
                states[last] = end
        return out, _same(states.get(at), states.get(at + 1)), states.get(last)

    def baseline(self) -> tuple[Tensor, Tensor | None]:
        """The unpruned output and the stream after the last layer (None: not seen)."""
        out, _, final = self._run(None)
        return out, final

    def prune(self, layer: int) -> tuple[Tensor, Tensor | None, str, bool | None]:
        """The pruned output, the stream after the last layer (None: not seen), how the layer
        was taken out, and whether the stream passed it unchanged (None: the stream after it
        is not seen, e.g. the last layer before a head; it is then removed the way the layer
        before it is, when that one checks out)."""
        if self.plan is None:
            out, _, final = self._run(layer, "input")
            return out, final, "block", True
        seen: list[bool | None] = []
        for mode in ("zero", "input"):
            out, same, final = self._run(layer, mode)
            if same:
                self._checked[layer] = mode
                return out, final, mode, True
            seen.append(same)
        unseen = all(s is None for s in seen)
        if unseen and layer > 1:
            if layer - 1 not in self._checked:
                self.prune(layer - 1)
            earlier = self._checked.get(layer - 1)
            if earlier is not None:
                out, _, final = self._run(layer, earlier)
                return out, final, earlier, None
        self._checked[layer] = None
        return out, final, "input", None if unseen else False


def _refuse_unreached(calls: LayerCalls, chosen: list[int], model: nn.Module) -> None:
    """``ValueError`` for chosen layers whose module the forward never called."""
    idle = [k for k in chosen if calls.calls[k - 1] == 0]
    if idle:
        names = ", ".join(f"layer {k} ({calls.names[k - 1]})" for k in idle)
        raise ValueError(
            f"layers: {names} cannot be pruned: {type(model).__name__}'s forward never calls "
            "it through its module (it runs parts of it, e.g. its .conv, directly, or not at "
            "all), so replacing the module changes nothing; choose other layers or prune it "
            "by hand"
        )


def _say_how(
    frame: pd.DataFrame, how: dict[int, str], same: dict[int, bool | None], unseen: str
) -> None:
    """Record how each layer was taken out; warn about the ones that were not the identity
    (``unseen``: why a layer's removal was not checked)."""
    import warnings

    frame.attrs["pruned_as"] = how
    frame.attrs["identity_on_stream"] = same
    off = [k for k, v in same.items() if v is not True]
    if off:
        ways = "; ".join(
            f"layer {k}: {PRUNED_AS[how[k]]} ("
            + (unseen if same[k] is None else "not the identity")
            + ")"
            for k in off
        )
        warnings.warn(
            f"prune_sensitivity: for {len(off)} layer(s) removing the block could not be "
            f"checked or is not possible by replacing the layer's output; measured {ways} "
            "(frame.attrs['pruned_as'], frame.attrs['identity_on_stream'])",
            stacklevel=3,
        )


def _prune_any(
    model: nn.Module,
    data: Data,
    layers: Sequence[int] | None,
    mask: str | Tensor | None,
    callback: Callable[[int], None] | None,
    stream: Sequence[nn.Module] | None = None,
) -> pd.DataFrame:
    """:func:`prune_sensitivity` of any model through hooks on its layers."""
    from oversmooth.probe import find_layers, stream_plan

    modules, are_blocks = find_layers(model, "residual")
    chosen = check_layers(layers, len(modules))
    mask_t = _resolve_mask(data, mask)
    with _eval_mode(model):
        param = next(iter(model.parameters()), None)
        device = param.device if param is not None else data.x.device
        run = _forward(model, data, device)
        unchained, first = False, None
        if are_blocks:
            chained, skipped, first = _chained(modules, run)
            unchained = not chained
        if unchained and (_bare_convs(modules) or skipped):
            # bare convs taken for blocks by their place (model.blocks), with the skip in the
            # forward (h = h + conv(norm(h)), pruned to h + norm(h) and said to be the
            # identity: an audit), or block modules that return their branch (h = h + blk(h),
            # pruned to h + h: an audit): pruned as layers, each removal checked on the stream.
            # Bare convs the forward chains stay blocks (their outputs are the stream), and so
            # do block modules with anything else between them (an activation): their removal
            # is said unchecked (_chained)
            are_blocks = unchained = False
        if stream is not None and are_blocks:
            raise ValueError(
                "stream: the layers of this model are blocks (their outputs are the stream); "
                "leave stream unset"
            )
        plan = None if are_blocks else stream_plan(model, modules, stream)
        graph = as_graph(data, device=device)
        pruner = _Pruner(model, modules, plan, run)
        logits, final = _run_counting_calls(model, modules, pruner.baseline, chosen)
        if first is None:
            first = run()
        noise = _forward_noise(model, first, logits)
        # the final energy of the stream after the last layer, as the zoo's models (X^L) and a
        # Probe(capture="residual") measure it; of the output where that stream is not seen
        on_stream = final is not None
        state = final if final is not None else logits
        base = _Baseline.of(logits, laplacian_energy(state, graph), data, mask_t, device)
        how: dict[int, str] = {}
        same: dict[int, bool | None] = {}

        def pruned(layer: int) -> tuple[Tensor, Tensor]:
            logits, final, how[layer], same[layer] = pruner.prune(layer)
            if not on_stream:
                return logits, laplacian_energy(logits, graph)
            if final is None:  # not expected: every run has the same layout
                raise RuntimeError(
                    f"prune_sensitivity: the stream after the last layer was seen unpruned but "
                    f"not with layer {layer} pruned; its energies cannot be compared"
                )
            return logits, laplacian_energy(final, graph)

        frame = _measure(chosen, base, pruned, callback)
        frame.attrs["energy_on"] = "stream" if on_stream else "output"
        frame.attrs["forward_noise"] = noise
        if noise > 1e-12:
            warnings.warn(
                f"prune_sensitivity: two unpruned forwards of {type(model).__name__} differ by "
                f"{noise:.2g} (relative; nondeterministic kernels, e.g. a GPU's scatter-adds): "
                "logits changes of that size are the forward's own noise "
                "(frame.attrs['forward_noise'])",
                stacklevel=3,
            )
        unseen = "the stream after it is not seen"
        if unchained:  # nothing of the stream is seen between blocks the forward does not chain
            same = dict.fromkeys(same, None)
            unseen = (
                "the forward changes the state between the blocks, so a block's input is not "
                "the stream before it: not checked"
            )
        _say_how(frame, how, same, unseen)
        return frame


def _forward(model: nn.Module, data: Data, device: torch.device) -> Callable[[], Tensor]:
    """The model's forward on ``data`` (moved to ``device``): ``model(x, edge_index)``, plus
    ``edge_weight=`` when the data has weights; ``TypeError`` unless it returns a tensor."""
    x, edge_index, edge_weight = _on_device(data, device)
    kwargs = {} if edge_weight is None else {"edge_weight": edge_weight}

    def run() -> Tensor:
        out = model(x, edge_index, **kwargs)
        if not isinstance(out, Tensor):
            raise TypeError(
                f"model: expected the forward to return a tensor, received {type(out).__name__}"
            )
        return out

    return run


def _bare_convs(modules: Sequence[nn.Module]) -> bool:
    """Whether every module is a PyG ``MessagePassing`` itself (a conv, not a block that holds
    one)."""
    try:
        from torch_geometric.nn import MessagePassing
    except ImportError:  # pragma: no cover - torch_geometric is a dependency
        return False
    return all(isinstance(m, MessagePassing) for m in modules)


def _chained(modules: Sequence[nn.Module], run: Callable[[], Tensor]) -> tuple[bool, bool, Tensor]:
    """In one forward (``run``): whether every block after the first is given the output of
    the block before it (the same tensor, or equal values): blocks whose outputs are the
    stream; whether, where not, every block's input is the previous block's input plus (a
    monotone function of) its output: blocks that return their branch, the skip in the
    forward (``h = h + blk(h)``); and the forward's output.

    Replacing a block by its input is the identity on the stream only in the first case; a
    list named ``blocks`` that holds the convs of ``h = h + conv(norm(h))`` was pruned to
    ``h + norm(h)`` and said to be the identity, and wrappers returning their branch to
    ``h + h`` (a block of zero weights read a logits change of 0.59: audits).  In the second
    case the blocks are pruned as layers; blocks with anything else between them (an
    activation, a norm, a readout) stay blocks, said unchecked (read as layers, their final
    energy was the logits', 5-9 times too low: a review)."""
    from oversmooth.probe import _follows, first_tensor

    outputs: dict[int, Tensor | None] = {}
    inputs: dict[int, Tensor | None] = {}
    chained = skipped = True

    def out_hook(k: int) -> Callable[[nn.Module, tuple, object], None]:
        def hook(module: nn.Module, args: tuple, output: object) -> None:
            outputs[k] = first_tensor(output)

        return hook

    def in_hook(k: int) -> Callable[[nn.Module, tuple], None]:
        def hook(module: nn.Module, args: tuple) -> None:
            nonlocal chained, skipped
            x = args[0] if args and isinstance(args[0], Tensor) else None
            before, prev = outputs.pop(k - 1, None), inputs.pop(k - 1, None)
            inputs[k] = x
            if not k:
                return
            if before is None or x is None:
                skipped = False
                return  # an input that is not a tensor: nothing to compare
            if x is not before and not (x.shape == before.shape and torch.equal(x, before)):
                chained = False
            if skipped and (prev is None or not (prev.shape == x.shape == before.shape)):
                skipped = False
            elif skipped:
                assert prev is not None
                d = (x - prev).detach()
                skipped = _follows(d, before, prev, before, zero=True)

        return hook

    handles = [m.register_forward_hook(out_hook(k)) for k, m in enumerate(modules)]
    handles += [m.register_forward_pre_hook(in_hook(k)) for k, m in enumerate(modules)]
    try:
        out = run()
    finally:
        for handle in handles:
            handle.remove()
    return chained, skipped and len(modules) > 1, out


#: Two unpruned forwards of a model in evaluation mode that differ by more than this (relative)
#: draw at random (dropout left on, noise): no pruned change can be told from that.  Below it,
#: a difference is nondeterministic kernels' rounding (scatter-adds on a GPU reorder their
#: sums), said as the changes' noise floor.
RANDOM_FORWARD = 1e-3


def _forward_noise(model: nn.Module, first: Tensor, second: Tensor) -> float:
    """The relative difference of two unpruned forwards in evaluation mode; ``ValueError``
    above :data:`RANDOM_FORWARD` (``F.dropout(h, p)`` without ``training=self.training`` gave
    a do-nothing layer a logits change of 0.78: an audit)."""
    a, b = first.detach().double(), second.detach().double()
    if a.shape != b.shape:
        return math.nan
    if torch.allclose(a, b, rtol=0.0, atol=0.0, equal_nan=True):
        return 0.0  # equal, NaN and Inf where they are (a log-softmax's -inf was refused)
    finite = torch.isfinite(a)
    gap = math.inf
    same_rest = torch.allclose(a[~finite], b[~finite], rtol=0.0, atol=0.0, equal_nan=True)
    if torch.equal(finite, torch.isfinite(b)) and same_rest:
        scale = max(float(torch.linalg.vector_norm(a[finite])), 1e-300)
        gap = float(torch.linalg.vector_norm(a[finite] - b[finite])) / scale
    if gap <= RANDOM_FORWARD:
        return gap
    raise ValueError(
        f"model: two unpruned forwards of {type(model).__name__} in evaluation mode differ by "
        f"{gap:.2g} (relative), so a pruned layer's change cannot be told from the forward's "
        "own randomness; make the forward deterministic in eval mode (e.g. "
        "F.dropout(h, p, training=self.training)) or fix the seed inside it"
    )


_T = TypeVar("_T")


def _run_counting_calls(
    model: nn.Module, modules: Sequence[nn.Module], run: Callable[[], _T], chosen: list[int]
) -> _T:
    """What ``run`` (one unpruned forward) returns, counting the calls of every layer module on
    the way; ``ValueError`` for a chosen layer whose module the forward never called."""
    from oversmooth.probe import LayerCalls, tied_module

    names = {id(m): name for name, m in model.named_modules()}
    tied = tied_module(modules)
    if tied is not None:
        module, count = tied
        raise ValueError(
            f"layers: {names.get(id(module), type(module).__name__)} stands for {count} of "
            f"the {len(modules)} layers (weight tying): taking the module out would remove all "
            f"{count} of them, not one layer; prune such a layer by hand (run the forward with "
            "that one call skipped)"
        )
    calls = LayerCalls(modules, names)
    handles = calls.attach()
    try:
        out = run()
    finally:
        for handle in handles:
            handle.remove()
    if calls.order != sorted(calls.order):
        ran = ", ".join(calls.names[k] for k in calls.order)
        raise ValueError(
            f"layers: {type(model).__name__}'s forward runs its layers in another order than "
            f"they are listed ({ran}); a Probe numbers layers in the order they run and "
            "pruning by their place in the list would name other layers: list the modules in "
            "the order the forward runs them"
        )
    _refuse_unreached(calls, chosen, model)
    _refuse_repeated(calls, model)
    return out


def _refuse_repeated(calls: LayerCalls, model: nn.Module) -> None:
    """``ValueError`` for layers whose module one forward calls several times: replacing
    the module removes every call, not one layer (a module listed once and called three times
    was pruned as one checked layer, three residual steps gone, no warning: an audit)."""
    # any module, chosen or not: the layers after it are numbered by their calls, so a layer
    # chosen after a repeated one was measured as h + h (a review)
    again = [k for k in range(1, len(calls.calls) + 1) if calls.calls[k - 1] > calls.listed[k - 1]]
    if again:
        names = ", ".join(
            f"layer {k} ({calls.names[k - 1]}, {calls.calls[k - 1]} calls)" for k in again
        )
        raise ValueError(
            f"layers: {names}: {type(model).__name__}'s forward calls the module several times "
            "in one pass, so taking it out would remove every call, not one layer, and the "
            "layers after it are numbered by their calls; prune such a model by hand (run the "
            "forward with that one call skipped)"
        )
