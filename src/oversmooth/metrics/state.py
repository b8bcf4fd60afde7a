"""One layer state and what its metrics share: one pass over the nodes, one over the edges.

A :class:`LayerState` holds a float64 state and its measuring operator, and computes each shared
intermediate at most once, when a metric first asks for it:

* the node pass: the sum of squares of ``x`` (from which the feature norm and the NaN poison
  follow) and the row norms ``||x_i||`` (``[n]``, for the cosine with the previous layer),
  without another pass over ``x`` wherever the fast paths of :mod:`~oversmooth.metrics.kernels`
  apply;
* the edge pass: ``Delta x`` and ``sum_e w_e ||x_src - x_dst||^2`` from one set of edge
  differences (:func:`~oversmooth.metrics.kernels.edge_pass`);
* the unit rows (only where a fast path does not apply, or for the similarity matrix).

Every public metric function measures through a LayerState too, so a column of the
:class:`~oversmooth.probe.Probe` and the function of the same name are one computation.
"""

from __future__ import annotations

import torch
from torch import Tensor

from oversmooth.graph import GraphOperator, squared_sum
from oversmooth.metrics import kernels as K

__all__ = ["LayerState", "Workspace"]

#: The largest state (values) whose float64 buffers a :class:`Workspace` keeps between layers
#: (64 MiB).
KEEP_VALUES = 1 << 23


class Workspace:
    """Float64 buffers reused from layer to layer: two for the states (the previous layer's
    stays readable while the next is measured) and one for ``Delta x``, so that measuring a
    layer allocates nothing of size ``n x d`` (fresh allocations of that size cost page faults
    on every layer).  States above :data:`KEEP_VALUES` values get fresh buffers instead, freed
    after their layer: on a large graph they would sit beside the model's own peak (at 10^6
    nodes and 32 channels each is 256 MiB), while a page fault costs little next to that
    layer's work."""

    def __init__(self) -> None:
        self._key: tuple | None = None
        self._states: list[Tensor] = []
        self._lap: Tensor | None = None
        self._turn = 0

    def _fresh(self, x: Tensor) -> Tensor:
        return torch.empty(x.shape, dtype=torch.float64, device=x.device)

    def state(self, x: Tensor) -> Tensor:
        """A float64 buffer of ``x``'s shape for the next state (not the one handed out last)."""
        if x.numel() > KEEP_VALUES:
            return self._fresh(x)
        key = (tuple(x.shape), x.device)
        if key != self._key:
            self._key = key
            self._states = [self._fresh(x), self._fresh(x)]
            self._lap = self._fresh(x)
        self._turn ^= 1
        return self._states[self._turn]

    def laplacian(self, x: Tensor) -> Tensor | None:
        """The ``Delta x`` buffer for a state of ``x``'s shape (None for a large state)."""
        if x.numel() > KEEP_VALUES or self._key != (tuple(x.shape), x.device):
            return None
        return self._lap


class LayerState:
    """A float64 state ``x`` ``[n, d]`` on ``op``'s graph (``op`` None for the graph-free
    metrics), with its shared intermediates computed once each (see the module docstring).

    ``narrow``: the values came from a :data:`~oversmooth.metrics.kernels.NARROW` dtype (their
    squares cannot overflow: no scaling pass).  ``workspace``: buffers reused across states
    (a :class:`~oversmooth.probe.Probe`'s); the arithmetic is the same without.
    """

    def __init__(
        self,
        x: Tensor,
        op: GraphOperator | None,
        narrow: bool = False,
        workspace: Workspace | None = None,
    ) -> None:
        self.x, self.op, self.narrow = x, op, narrow
        self._workspace = workspace
        self._poison: Tensor | None = None
        self._total: Tensor | None = None
        self._fast: bool | None = None
        self._rows_safe: bool | None = None
        self._norms: Tensor | None = None
        self._lap: Tensor | None = None
        self._lap_squares: Tensor | None = None
        self._edge_sum: Tensor | None = None
        self._unit: Tensor | None = None

    @classmethod
    def measure(
        cls,
        x: Tensor,
        graph: object,
        edge_weight: Tensor | None = None,
        batch: Tensor | None = None,
    ) -> LayerState:
        """The state of a user's ``x`` on ``graph`` (validated, as float64 rows)."""
        x64, op = K.prepare(x, graph, edge_weight, batch)  # validates x
        return cls(x64, op, x.dtype in K.NARROW)

    @property
    def batched(self) -> bool:
        return self.op is not None and self.op.batch is not None

    @property
    def nodes(self) -> Tensor | float:
        """Node count per graph (at least 1): the ``1/n`` of every per-node mean."""
        return K.node_counts(self.op, self.x.size(0))

    @property
    def graph(self) -> GraphOperator:
        """The measuring operator (for the metrics that need a graph)."""
        assert self.op is not None
        return self.op

    # -- the pass over the nodes ---------------------------------------------------------------
    @property
    def fast(self) -> bool:
        """Whether no square of ``x`` overflows or underflows and ``x`` is finite or narrow (so
        that ``sum ||x_i||^2`` needs no scaling): narrow values, or a CPU sum read to lie in
        :data:`~oversmooth.metrics.kernels.SQUARES_SAFE`.  Never on a batch or a float64 GPU
        state (no host read)."""
        if self._fast is None:
            self._fast = False
            if not self.batched and self.x.numel() and (self.narrow or K.host_reads_free(self.x)):
                # K.rms_norm's sum (not from the cosine's row norms, which may be formed
                # already): a column's numbers do not depend on the others asked for
                self._total = K.squared_total(self.x)
                self._fast = self.narrow or K.within(self._total, K.SQUARES_SAFE)
        return self._fast

    @property
    def poison(self) -> Tensor:
        """0 where every entry is finite, NaN otherwise (per graph on a batch)."""
        if self._poison is None:
            if self.fast:  # narrow: a finite sum of squares means every entry is finite
                assert self._total is not None
                self._poison = self._total * 0.0
            else:
                self._poison = K.poison(self.x, self.op)
        return self._poison

    @property
    def clean(self) -> bool:
        """Whether every entry is known to be finite already: the fast path's sum of squares of
        a wide state was read on the CPU (:attr:`fast`) and lies in the safe range.  Then
        :attr:`poison` is 0 and :meth:`poisoned` adds nothing.  Narrow states are not read
        (their fast path needs no host read), so they are never known clean."""
        return not self.narrow and self.fast

    def poisoned(self, value: Tensor) -> Tensor:
        """``value + poison``: NaN where ``x`` holds a NaN or an Inf (per graph), else ``value``
        itself (adding the poison's 0 changes no bit of a value other than -0)."""
        return value if self.clean else value + self.poison

    @property
    def feature_norm(self) -> Tensor:
        """``sqrt((1/n) ||x||_F^2)`` per graph (Inf with an infinite entry, NaN with a NaN)."""
        if self.fast:
            assert self._total is not None
            return self._total.div(self.nodes).sqrt()  # K.rms_norm's fast path
        return K.rms_norm(self.x, self.op, self.narrow)

    @property
    def rows_safe(self) -> bool:
        """Whether every row norm lies in :data:`~oversmooth.metrics.kernels.NORMS_SAFE` (no
        zero row; products of two norms neither overflow nor underflow), read on the CPU
        from :attr:`norms`; False on a GPU (no host read)."""
        if self._rows_safe is None:
            self._rows_safe = (
                K.host_reads_free(self.x)
                and self.x.size(0) > 0
                and K.norms_safe(self.norms, K.NORMS_SAFE)
            )
        return self._rows_safe

    @property
    def norms(self) -> Tensor:
        """``[n]`` the row norms ``||x_i||`` (unscaled: use where :attr:`rows_safe` holds or the
        values are narrow), in one pass over ``x`` (``torch.linalg.vector_norm``: 13 us against
        23 us for the rows' sums of squares and their roots on a 2,708 x 32 float64 state, on 2
        cores).  Unscaled, so a norm outside :data:`~oversmooth.metrics.kernels.NORMS_SAFE` is
        no norm to use (an overflowed square gives Inf, underflowed ones 0)."""
        if self._norms is None:
            if torch.is_grad_enabled() and self.x.requires_grad:
                # the square root of the sums of squares: its gradient at a zero row is NaN
                # (the cosine has no derivative there), where vector_norm's 0 gave narrow
                # inputs a gradient of y_i / n, growing with ||y_i|| (an audit)
                self._norms = K.row_dots(self.x, self.x).sqrt()
            else:
                self._norms = torch.linalg.vector_norm(self.x, dim=1)
        return self._norms

    @property
    def unit(self) -> Tensor:
        """``[n, d]`` the unit rows (zero rows stay zero)."""
        if self._unit is None:
            self._unit = K.unit_rows(self.x, self.narrow)
        return self._unit

    # -- the pass over the edges ---------------------------------------------------------------
    @property
    def streams(self) -> bool:
        """Whether the edge pass keeps only ``||Delta x||^2`` (:attr:`laplacian_squares`), not
        ``Delta x``: a state of one graph above :data:`KEEP_VALUES` values, not recorded by
        autograd (``Delta x`` would be 256 MiB at 10^6 nodes and 32 channels)."""
        differentiable = self.x.requires_grad and torch.is_grad_enabled()
        return not self.batched and self.x.numel() > KEEP_VALUES and not differentiable

    def _edge_pass(self) -> None:
        if self.streams:
            squares, total = K.edge_pass(self.x, self.graph, True, True, squares=True)
            assert squares is not None and total is not None
            self._lap_squares, self._edge_sum = squares, self.poisoned(total)
            return
        out = None if self._workspace is None else self._workspace.laplacian(self.x)
        lap, total = K.edge_pass(self.x, self.graph, True, True, out)
        assert lap is not None and total is not None
        self._lap, self._edge_sum = lap, self.poisoned(total)

    @property
    def laplacian(self) -> Tensor:
        """``[n, d]`` ``Delta x`` from the edge differences (0 on isolated nodes); on a
        :attr:`streams` state a pass of its own, only where ``Delta x`` itself is asked for."""
        if self._lap is None:
            if self.streams:
                self._lap = K.laplacian(self.x, self.graph)
            else:
                self._edge_pass()
        assert self._lap is not None
        return self._lap

    @property
    def laplacian_squares(self) -> Tensor:
        """``||Delta x||_F^2`` (0-d, one graph; not poisoned): from the edge pass, which on a
        :attr:`streams` state sums each row's square as its edges are done."""
        if self._lap is None and self._lap_squares is None:
            self._edge_pass()
        if self._lap_squares is not None:
            return self._lap_squares
        assert self._lap is not None
        return squared_sum(self._lap)

    @property
    def edge_sum(self) -> Tensor:
        """``sum_e w_e ||x_src - x_dst||^2`` (poisoned), from the same pass as :attr:`laplacian`."""
        if self._edge_sum is None:
            self._edge_pass()
        assert self._edge_sum is not None
        return self._edge_sum

    def drop_laplacian(self) -> None:
        """Let ``Delta x`` go (a fresh tensor on a large graph) once no column needs it."""
        self._lap = None
