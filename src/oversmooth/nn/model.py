"""Encoder -> L blocks -> decoder, and :func:`build_model`.

Encoder: dropout, then an MLP ``in_channels -> hidden -> hidden`` (ReLU between).
Decoder: one linear map ``hidden -> out_channels`` (an MLP without activation).
Model names: ``preln``, ``postln``, ``nonlocal`` (nonlocal Post-LN),
``nonlocal-preln``, ``plain`` and ``diffusion``; convolutions ``san``, ``gcn``, ``gat``, and
``esa`` (edge-set attention: the blocks run over the edges, :mod:`oversmooth.nn.edgeset`).

``diffusion`` is the parameter-free reference: the same encoder and decoder, and between them
``depth`` :class:`Diffusion` blocks ``X' = P X`` with GCN's mean ``P = D~^{-1} A~`` (self loops
of weight 1, edge weights honoured), no LayerNorm, no residual, whatever ``conv`` says.  Its
energy falls at the rate :func:`oversmooth.spectral.spectral_gap` (``self_loops=True``)
predicts.
"""

from __future__ import annotations

import dataclasses
from contextlib import contextmanager
from typing import Any
from collections.abc import Iterable, Iterator

import torch
from torch import Tensor, nn

# ModelConfig and its choices live in oversmooth.config (torch-free), re-exported here
from oversmooth.config import (  # noqa: F401
    ENCODERS,
    INITS,
    NONLOCAL_NORMS,
    PATTERN_LETTERS,
    ModelConfig,
)
from oversmooth.graph import (
    GraphOperator,
    by_rows,
    check_edge_index,
    check_edge_weight,
    validate_features,
)
from oversmooth.nn.block import Block, hooked
from oversmooth.nn.conv import GraphContext, MultiHeadMessagePassing, aggregate
from oversmooth.nn.draws import Draws
from oversmooth.nn.hooks import AttentionWeights, HookPoint
from oversmooth.nn.kernel import records
from oversmooth.runtime import resolve_dtype
from oversmooth.registry import CONVS, MODELS  # MODELS re-exported: the one registry of model names


def resolve_model_name(name: str) -> str:
    return MODELS.resolve(name)


class MeanPropagation(nn.Module):
    """``P X`` with GCN's mean ``P = D~^{-1} A~`` over ``N(i) ∪ {i}`` (edge weights honoured,
    self loops of weight 1, as :class:`~oversmooth.nn.conv.GraphContext` builds it); no
    parameter.

    Like :class:`~oversmooth.nn.conv.MultiHeadMessagePassing` it emits its attention to
    ``hook_attention`` (``[E, heads]``: every head is the same ``P``) while a hook is there.
    """

    def __init__(self, heads: int = 1) -> None:
        super().__init__()
        self.heads = heads
        self.hook_attention = HookPoint()

    def forward(self, x: Tensor, ctx: GraphContext) -> Tensor:
        alpha = ctx.mean().to(x.dtype)  # [E] P_ij of every edge j -> i
        src, dst = ctx.edges()
        if self.hook_attention.active:
            weights = alpha.detach().unsqueeze(1).expand(-1, self.heads)
            self.hook_attention.emit(AttentionWeights(weights, src, dst))
        return aggregate(x[src] * alpha.unsqueeze(1), dst, x.size(0))

    def extra_repr(self) -> str:
        return "P = D~^-1 A~ (GCN mean with self loop), no parameter"


class Diffusion(nn.Module):
    """One step of linear diffusion ``X' = P X``: no LayerNorm, no residual, no parameter."""

    def __init__(self, heads: int = 1) -> None:
        super().__init__()
        self.mp = MeanPropagation(heads)

    def forward(self, x: Tensor, ctx: GraphContext) -> Tensor:
        return self.mp(x, ctx)


#: Without autograd and in evaluation mode, :meth:`DepthModel.encode` runs the encoder on blocks
#: of this many rows of a larger input.
ENCODER_BLOCK_ROWS = 1 << 16


def _check_precision(dtype: torch.dtype, device: torch.device) -> None:
    """One line, not the sparse kernel's error, for a precision the CPU kernels lack."""
    if device.type != "cpu":
        return
    if dtype not in (torch.float32, torch.float64):
        name = str(dtype).removeprefix("torch.")
        raise ValueError(
            f"model: its weights are {name}; the zoo's models run in float32 or float64 on the "
            "CPU (its sparse message passing has no half-precision kernel): call "
            "model.float() or model.double()"
        )
    if torch.is_autocast_enabled("cpu"):
        name = str(torch.get_autocast_dtype("cpu")).removeprefix("torch.")
        raise ValueError(
            f"model: called under torch.autocast to {name}; the zoo's models run in float32 "
            "or float64 on the CPU (its sparse message passing has no half-precision "
            "kernel): call the model outside autocast"
        )


class DepthModel(nn.Module):
    """Encoder, ``config.depth`` blocks, decoder.

    Call as ``model(x, edge_index)`` (plus ``batch=`` for graph-mode LayerNorm or
    global attention on mini-batches of graphs, ``edge_weight=`` for a weighted graph:
    see :class:`~oversmooth.nn.conv.GraphContext`); returns logits
    ``[num_nodes, out_channels]``.  ``skip`` names 0-based indices into
    :attr:`blocks` to replace by the identity in this forward (pruning, probes).
    ``x`` may be of any floating dtype: it is cast to the model's precision on the way into
    the encoder (so float32 features need no float64 copy that outlives the encoder).
    The blocks run in a loop (no recursion) and keep no activations beyond what
    autograd needs, so depth 1024 and more work.
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        entry = MODELS[config.name]
        placement, nonlocal_ = entry.placement, entry.nonlocal_
        d = config.hidden
        if config.encoder == "linear":
            self.encoder = nn.Sequential(
                nn.Dropout(config.dropout), nn.Linear(config.in_channels, d)
            )
        else:
            self.encoder = nn.Sequential(
                nn.Dropout(config.dropout),
                nn.Linear(config.in_channels, d),
                nn.ReLU(),
                nn.Linear(d, d),
            )
        blocks: list[nn.Module]
        if placement == "diffusion":  # parameter-free: nothing is drawn, the RNG is untouched
            blocks = [Diffusion(config.heads) for _ in range(config.depth)]
        else:
            blocks = [
                Block(
                    placement,
                    MultiHeadMessagePassing(
                        d,
                        config.heads,
                        config.conv,
                        nonlocal_=nonlocal_,
                        global_attention=(kind == "S"),
                        score_scale=config.score_scale,
                        nonlocal_norm=config.nonlocal_norm,
                    ),
                    config.ffn_channels,
                    config.norm,
                    config.block_dropout,
                )
                for kind in config.block_kinds()
            ]
        self.blocks = nn.ModuleList(blocks)
        self.decoder = nn.Linear(d, config.out_channels)
        _initialise(self, config.init)

    def context(
        self,
        edge_index: Tensor,
        num_nodes: int,
        batch: Tensor | None = None,
        edge_weight: Tensor | None = None,
    ) -> GraphContext:
        """The per-forward graph data; validates ``edge_index`` and ``edge_weight`` (one
        host sync per forward, none per layer)."""
        check_edge_index(edge_index, num_nodes)
        check_edge_weight(edge_weight, edge_index.size(1))
        return GraphContext.build(
            edge_index,
            num_nodes,
            batch,
            dtype=self.decoder.weight.dtype,
            edge_weight=edge_weight,
            self_loops=self.config.self_loops,
        )

    def state_graph(self, graph: GraphOperator) -> GraphOperator:
        """The operator on which the block states are measured, given the input graph's:
        ``graph`` itself (the states are node states; edge-set models override this)."""
        return graph

    def forward(
        self,
        x: Tensor,
        edge_index: Tensor,
        batch: Tensor | None = None,
        *,
        edge_weight: Tensor | None = None,
        skip: Iterable[int] | None = None,
        edge_attr: Tensor | None = None,
    ) -> Tensor:
        if edge_attr is not None:  # said in one line, not as Python's unexpected keyword
            raise ValueError(
                f"edge_attr: a {self.config.conv!r} model reads no edge attributes; only the "
                "edge-set models read them (conv='esa', built with edge_channels=); pass "
                "edge_weight= for scalar edge weights"
            )
        skipped = self.check_input(x, skip)
        ctx = self.context(edge_index, x.size(0), batch, edge_weight)
        # the encoder's output [num_nodes, hidden] is handed over, not kept in this frame:
        # the blocks let it go after the first (256 MiB of float64 at 10^6 nodes)
        return self.decoder(self.run_blocks(self.encode(x), ctx, skip=skipped))

    def encode(self, x: Tensor) -> Tensor:
        """The encoder's output ``[num_nodes, hidden]`` for the features ``x`` (any floating
        dtype, cast to the model's on the way in).

        Without autograd, in evaluation mode and with no hook on the encoder, an input of more
        than :data:`ENCODER_BLOCK_ROWS` rows is cast and encoded a block of rows at a time into
        one output: neither the cast copy of ``x`` nor the MLP's hidden array is formed whole
        (at 10^6 nodes and 32 float32 features, 0.5 GB less at the encoder's peak in float64).
        Each row's numbers are those of the whole to rounding (a product over fewer rows may
        take another BLAS kernel)."""
        dtype = self.decoder.weight.dtype
        encoder, rows = self.encoder, ENCODER_BLOCK_ROWS
        whole = (
            x.size(0) <= rows
            or encoder.training
            or hooked(*encoder.modules())
            or records(x, *encoder.parameters())
        )
        if whole:
            return encoder(x.to(dtype))
        return by_rows(lambda part: encoder(part.to(dtype)), x, rows)

    def check_input(self, x: Tensor, skip: Iterable[int] | None) -> frozenset[int]:
        """Validate the features ``x`` ``[num_nodes, in_channels]`` and ``skip``; returns the
        skipped block indices."""
        validate_features(x)
        _check_precision(self.decoder.weight.dtype, x.device)
        if x.size(1) != self.config.in_channels:
            raise ValueError(
                "x: expected shape [num_nodes, "
                f"{self.config.in_channels}], received {list(x.shape)}"
            )
        return _check_skip(skip, len(self.blocks))

    def run_blocks(
        self, h: Tensor, ctx: GraphContext, start: int = 0, skip: Iterable[int] = ()
    ) -> Tensor:
        """Blocks ``start, start + 1, ...`` on the hidden state ``h`` (those in ``skip`` are the
        identity)."""
        skipped = skip if isinstance(skip, frozenset) else _check_skip(skip, len(self.blocks))
        for k in range(start, len(self.blocks)):
            if k not in skipped:
                h = self.blocks[k](h, ctx)
        return h

    def copy_without_hooks(self) -> DepthModel:
        """A new model with this config, dtype and weights but none of the hooks attached to
        this one (a deepcopy would copy a Probe's hooks too)."""
        dtype = next(self.parameters()).dtype
        reference = model_from_config(self.config).to(dtype)  # same precision before the copy
        reference.load_state_dict(self.state_dict())
        return reference

    def extra_repr(self) -> str:
        c = self.config
        return f"name={c.name!r}, conv={c.conv!r}, depth={c.depth}, pattern={c.pattern!r}"


def _initialise(model: nn.Module, init: str) -> None:
    """Re-draw the weights for ``init`` (after construction, so the default ``"xavier"`` draws
    exactly what it always drew)."""
    if init == "xavier":
        return
    for module in model.modules():
        if not isinstance(module, nn.Linear):
            continue
        if init == "torch":
            module.reset_parameters()
        else:  # xavier_all
            nn.init.xavier_uniform_(module.weight)
            if module.bias is not None:
                nn.init.zeros_(module.bias)


#: The model class of each kind of set element (``ConvEntry.elements``):
#: :mod:`oversmooth.nn.edgeset` (imported with :mod:`oversmooth.nn`) adds ``edges``.
MODEL_CLASSES: dict[str, type[DepthModel]] = {"nodes": DepthModel}


def _check_skip(skip: Iterable[int] | None, depth: int) -> frozenset[int]:
    if skip is None:
        return frozenset()
    skipped = frozenset(int(k) for k in skip)
    bad = sorted(k for k in skipped if not 0 <= k < depth)
    if bad:
        raise ValueError(f"skip: block indices must lie in [0, {depth - 1}], received {bad}")
    return skipped


def build_model(
    name: str,
    *,
    conv: str = "san",
    depth: int,
    in_channels: int,
    out_channels: int,
    hidden: int = 32,
    heads: int = 4,
    seed: int = 0,
    device: torch.device | str | None = None,
    **options: Any,
) -> DepthModel:
    """Build one of the zoo's models with seeded parameters.

    Args:
        name: ``preln``, ``postln``, ``nonlocal``, ``nonlocal-preln``, ``plain`` or
            ``diffusion`` (see :data:`~oversmooth.registry.MODELS`).
        conv: ``san`` (default), ``gcn``, ``gat`` or ``esa`` (see
            :data:`~oversmooth.registry.CONVS`).
        depth: number of blocks.
        in_channels: feature size.
        out_channels: number of classes.
        hidden: width, see :class:`ModelConfig`.
        heads: attention heads, see :class:`ModelConfig`.
        seed: parameter initialisation seed, see :class:`ModelConfig`.
        device: where to put the parameters.
        **options: the other fields of :class:`ModelConfig` (``ffn``, ``dropout``,
            ``block_dropout``, ``norm``, ``pattern``, ``dtype``, ``edge_channels``, and the
            unstated choices ``encoder``, ``init``, ``self_loops``, ``score_scale``,
            ``nonlocal_norm``).

    The same arguments give identical parameters, whatever the global RNG state
    (initialisation draws from a forked, seeded generator).

    Example:
        >>> model = build_model("postln", depth=256, in_channels=1433, out_channels=7)
        >>> len(model.blocks)
        256
    """
    _check_options(options)
    config = ModelConfig(
        name=name,
        conv=conv,
        depth=depth,
        in_channels=in_channels,
        out_channels=out_channels,
        hidden=hidden,
        heads=heads,
        seed=seed,
        **options,
    )
    return model_from_config(config, device)


#: The :class:`ModelConfig` fields that :func:`build_model` names as its own arguments.
_BUILD_ARGUMENTS = frozenset(
    {"name", "conv", "depth", "in_channels", "out_channels", "hidden", "heads", "seed"}
)


def _check_options(options: dict[str, Any]) -> None:
    """``ValueError`` for a :func:`build_model` keyword that is no other :class:`ModelConfig`
    field."""
    import difflib

    known = {f.name for f in dataclasses.fields(ModelConfig)} - _BUILD_ARGUMENTS
    unknown = set(options) - known
    if unknown:
        # every keyword, the named arguments too, and the closest to a typo first ("hiden"
        # was answered with a list that left out hidden: an audit)
        every = sorted(known | _BUILD_ARGUMENTS | {"device"})
        close = [m for u in sorted(unknown) for m in difflib.get_close_matches(u, every, 1)]
        hint = f"did you mean {', '.join(close)}? " if close else ""
        raise ValueError(
            f"build_model: unknown keyword {', '.join(sorted(unknown))}; {hint}expected one of "
            f"{', '.join(every)}"
        )


def model_from_config(config: ModelConfig, device: torch.device | str | None = None) -> DepthModel:
    """The model of ``config``, in eval mode, with parameters in ``config.dtype`` on ``device``."""
    return _build(config, device)


def seeded_models(
    config: ModelConfig, seeds: Iterable[int], device: torch.device | str | None = None
) -> Iterator[tuple[int, DepthModel]]:
    """``(seed, model)`` for each of ``seeds``: the model :func:`model_from_config` gives for
    ``config`` with that seed, weight for weight.

    One model object serves every seed: it is built for the first, and for each further seed
    its weights are re-drawn as building it would draw them
    (:class:`~oversmooth.nn.draws.Draws`, checked once against the built weights), which at
    depth 256 takes about 40 ms where building takes about 0.25 s.  A model whose
    initialisation cannot be replayed is built anew for every seed.  So a model is valid
    until the next one is asked for: a caller that keeps one must copy it.  With one seed
    nothing is recorded (recording makes the building about 30% slower).
    """
    seeds = list(seeds)
    draws = Draws() if len(seeds) > 1 else None
    model: DepthModel | None = None
    for seed in seeds:
        seeded = dataclasses.replace(config, seed=seed)
        if model is None:
            model = _build(seeded, device, draws)
        elif draws is not None and draws.check(seeds[0]):
            draws.redraw(model, seed)
            model.config = seeded
        else:
            model = _build(seeded, device)
        yield seed, model


def _build(
    config: ModelConfig, device: torch.device | str | None, draws: Draws | None = None
) -> DepthModel:
    """:func:`model_from_config`, its initialisation recorded into ``draws`` when given."""
    from oversmooth.resources import check_allocation, model_bytes

    c = config
    # built on the CPU (parameters and Python objects), then its parameters are moved
    for where in {torch.device("cpu"), torch.device(device or "cpu")}:
        size = model_bytes(
            c.depth,
            c.hidden,
            c.in_channels,
            c.out_channels,
            c.ffn,
            python_objects=where.type == "cpu",
        )
        check_allocation(
            f"model {c.name} depth={c.depth} hidden={c.hidden}"
            + (f" ffn={c.ffn}" if c.ffn is not None else ""),
            size,
            where,
            hint="use a smaller --depth or --hidden (or --ffn)",
        )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)
        with _default_float32():  # drawn in float32 whatever the global default dtype
            if draws is None:
                model = _model_class(config)(config)
            else:
                with draws.record():
                    model = _model_class(config)(config)
                draws.bind(model)
    model.eval()
    return model.to(device=device, dtype=resolve_dtype(config.dtype))


def _model_class(config: ModelConfig) -> type[DepthModel]:
    """The class of ``config``'s conv elements (see :data:`MODEL_CLASSES`)."""
    return MODEL_CLASSES[CONVS[config.conv].elements]


@contextmanager
def _default_float32() -> Iterator[None]:
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float32)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)
