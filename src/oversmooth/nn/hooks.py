"""Hook points: named places inside a forward where a value can be observed.

A :class:`HookPoint` is an identity module.  An operator hands it a value (attention weights,
nonlocal factors) only while a hook is registered on it, so observing costs nothing otherwise;
a :class:`~oversmooth.probe.Probe` registers its hooks inside its ``with`` block and removes
them on exit, and the model keeps no record of what was observed.

Example:
    >>> import torch
    >>> from oversmooth import build_model
    >>> from oversmooth.data import karate
    >>> data = karate()
    >>> model = build_model("postln", depth=2, in_channels=data.num_features, out_channels=2)
    >>> seen = []
    >>> mp = model.blocks[0].mp
    >>> handle = mp.hook_attention.register_forward_hook(lambda m, a, out: seen.append(out))
    >>> with torch.no_grad():
    ...     _ = model(data.x, data.edge_index)
    >>> handle.remove()
    >>> seen[0].weights.shape  # [num_edges + num_nodes, heads]: 156 edges, 34 self loops
    torch.Size([190, 4])
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

from torch import Tensor, nn

__all__ = ["AttentionWeights", "HookPoint"]

T = TypeVar("T")


@dataclass(frozen=True)
class AttentionWeights:
    """The attention matrices :math:`P_h` of one forward, over the edges ``src -> dst`` of
    the operator's graph (every node's self loop included).

    ``weights`` is ``[E, h]`` (detached): row ``i`` of head ``h`` is the weights of the edges
    with ``dst == i``, which sum to 1.  Repeated edges appear as often as they are listed.
    """

    weights: Tensor  # [E, h]
    src: Tensor  # [E] int64 (GraphContext.edges)
    dst: Tensor  # [E] int64


class HookPoint(nn.Module):
    """An identity module marking where a value can be observed (TransformerLens's hook
    points, for observing only).

    Register forward hooks on it; they receive the value as the module's output.  A hook
    observes: one that returns a different value (or a pre-hook that changes the input) makes
    :meth:`emit` raise, since the operator would not use it.
    """

    def forward(self, value: T) -> T:
        return value

    @property
    def active(self) -> bool:
        """Whether a hook is registered here: operators only build the value then."""
        return bool(self._forward_hooks or self._forward_pre_hooks)

    def emit(self, value: T) -> None:
        """Run the hooks on ``value`` (call only when :attr:`active`)."""
        if self(value) is not value:
            raise RuntimeError(
                "HookPoint: a hook returned a new value; hooks here only observe (the "
                "operator would not use it): return None from the hook"
            )
