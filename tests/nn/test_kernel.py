"""The "csr" message-passing kernel against the "edge" reference (issue 16): same outputs and
gradients for every convolution, plain and nonlocal, weighted or not, one graph or a batch;
a backward pass that creates nothing n x n; the pure-torch replacements of PyG helpers."""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode

from oversmooth.nn import kernel as kernel_module
from oversmooth.nn.conv import (
    GraphContext,
    MultiHeadMessagePassing,
    edge_softmax,
    set_kernel,
    to_dense_batch,
)
from oversmooth.nn.kernel import CsrPlan, SparseLayout
from oversmooth.nn.model import build_model

TOLERANCE = {torch.float32: 1e-5, torch.float64: 1e-12}


def random_graph(n: int, m: int, gen: torch.Generator) -> tuple[Tensor, Tensor]:
    """Random directed edges among the first 4/5 of ``n`` nodes (the rest isolated), with a
    user self loop, a repeated edge and an edge of weight 0."""
    active = n - n // 5
    ei = torch.randint(0, active, (2, m), generator=gen)
    ei[:, 0] = 1  # a user self loop, replaced by ours
    ei[:, 2] = ei[:, 3]  # a repeated edge
    weight = torch.rand(m, generator=gen, dtype=torch.float64) * 3 + 0.05
    weight[4] = 0.0
    return ei, weight


def graph_case(batched: bool, seed: int = 0) -> tuple[Tensor, Tensor, int, Tensor | None]:
    """One graph on 30 nodes, or a batch of three graphs of 12, 7 and 15 nodes."""
    gen = torch.Generator().manual_seed(seed)
    if not batched:
        ei, w = random_graph(30, 120, gen)
        return ei, w, 30, None
    parts, weights, batch, offset = [], [], [], 0
    for g, size in enumerate((12, 7, 15)):
        ei, w = random_graph(size, 4 * size, gen)
        parts.append(ei + offset)
        weights.append(w)
        batch.append(torch.full((size,), g))
        offset += size
    return torch.cat(parts, 1), torch.cat(weights), offset, torch.cat(batch)


def relative(a: Tensor, b: Tensor) -> float:
    a, b = a.detach(), b.detach()
    return float((a - b).norm() / b.norm().clamp_min(1e-300))


def run(mp: MultiHeadMessagePassing, kernel: str, x: Tensor, ctx: GraphContext) -> list[Tensor]:
    """Output, then the gradients w.r.t. ``x`` and every parameter of a fixed loss."""
    mp.kernel = kernel
    mp.zero_grad(set_to_none=True)
    x = x.detach().requires_grad_(True)
    out = mp(x, ctx)
    weight = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)
    (out * weight).sum().backward()
    grads = [x.grad] + [p.grad for p in mp.parameters()]
    assert all(g is not None for g in grads)
    return [out.detach()] + [g for g in grads if g is not None]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("batched", [False, True], ids=["graph", "batch"])
@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
@pytest.mark.parametrize("nonlocal_", [False, True], ids=["plain", "nonlocal"])
@pytest.mark.parametrize("conv", ["san", "gat", "gcn"])
def test_csr_equals_the_edge_kernel(conv, nonlocal_, weighted, batched, dtype):
    ei, w, n, batch = graph_case(batched)
    ctx = GraphContext.build(ei, n, batch, dtype=dtype, edge_weight=w if weighted else None)
    torch.manual_seed(1)
    mp = MultiHeadMessagePassing(16, 4, conv, nonlocal_=nonlocal_).to(dtype)
    x = torch.randn(n, 16, dtype=dtype)
    reference = run(mp, "edge", x, ctx)
    fast = run(mp, "csr", x, ctx)
    for name, a, b in zip(["out", "x", *dict(mp.named_parameters())], fast, reference, strict=True):
        assert relative(a, b) <= TOLERANCE[dtype], name


@pytest.mark.parametrize("nonlocal_", [False, True], ids=["plain", "nonlocal"])
@pytest.mark.parametrize("conv", ["san", "gat", "gcn"])
def test_csr_without_autograd_gives_the_recorded_outputs_bit_for_bit(conv, nonlocal_):
    """Without autograd the sparse products skip their autograd.Function: same numbers."""
    ei, w, n, _ = graph_case(False, seed=7)
    ctx = GraphContext.build(ei, n, edge_weight=w)
    mp = MultiHeadMessagePassing(16, 4, conv, nonlocal_=nonlocal_)
    x = torch.randn(n, 16)
    recorded = mp(x, ctx)
    assert recorded.requires_grad
    with torch.no_grad():
        assert torch.equal(mp(x, ctx), recorded)


@pytest.mark.parametrize("conv", ["san", "gat", "gcn"])
def test_csr_does_not_skip_what_is_put_on_a_projection(conv):
    """The csr kernel folds projection weights; a hook (or wrapper) on a projection makes the
    operator run the edge kernel, which calls it: the hook acts in both kernels."""
    ei, w, n, _ = graph_case(False, seed=8)
    ctx = GraphContext.build(ei, n, edge_weight=w)
    mp = MultiHeadMessagePassing(16, 4, conv)
    x = torch.randn(n, 16)
    with torch.no_grad():
        mp.kernel = "edge"
        plain = mp(x, ctx)
        handle = mp.value.register_forward_hook(lambda module, args, out: 2.0 * out)
        hooked = mp(x, ctx)
        mp.kernel = "csr"
        assert torch.equal(mp(x, ctx), hooked)
        handle.remove()
        assert relative(mp(x, ctx), plain) <= TOLERANCE[torch.float32]
        assert mp.backend == "csr"
        mp.out = torch.nn.Sequential(mp.out)  # a wrapper in place of W
        assert mp.backend == "edge"
        assert relative(mp(x, ctx), plain) <= TOLERANCE[torch.float32]
    assert relative(hooked, plain) > 0.1  # the hook does change the output
    for projection in mp.scorer.projections():  # the scores' projections count too
        handle = projection.register_forward_pre_hook(lambda module, args: None)
        assert mp.backend == "edge"
        handle.remove()


@pytest.mark.parametrize("nonlocal_", [False, True], ids=["plain", "nonlocal"])
@pytest.mark.parametrize("conv", ["san", "gat", "gcn"])
def test_csr_gradcheck(conv, nonlocal_):
    """The hand-written backward against finite differences (float64, a tiny weighted graph)."""
    gen = torch.Generator().manual_seed(3)
    ei, w = random_graph(8, 20, gen)
    ctx = GraphContext.build(ei, 8, dtype=torch.float64, edge_weight=w)
    torch.manual_seed(4)
    mp = MultiHeadMessagePassing(4, 2, conv, nonlocal_=nonlocal_).to(torch.float64)
    mp.kernel = "csr"
    names = [name for name, _ in mp.named_parameters()]

    def f(x: Tensor, *params: Tensor) -> Tensor:
        return torch.func.functional_call(mp, dict(zip(names, params, strict=True)), (x, ctx))

    x = torch.randn(8, 4, dtype=torch.float64, requires_grad=True)
    params = [p.detach().clone().requires_grad_(True) for p in mp.parameters()]
    assert torch.autograd.gradcheck(f, (x, *params))


@pytest.mark.parametrize("nonlocal_", [False, True], ids=["plain", "nonlocal"])
@pytest.mark.parametrize("conv", ["san", "gat", "gcn"])
def test_csr_with_int64_indices_equals_the_edge_kernel(monkeypatch, conv, nonlocal_):
    """Plans too large for int32 indices fall back to int64 (forced here on a small graph)."""
    monkeypatch.setattr(kernel_module, "INT32_LIMIT", 64)
    ei, w, n, _ = graph_case(False, seed=9)
    ctx = GraphContext.build(ei, n, dtype=torch.float64, edge_weight=w)
    torch.manual_seed(10)
    mp = MultiHeadMessagePassing(16, 4, conv, nonlocal_=nonlocal_).double()
    x = torch.randn(n, 16, dtype=torch.float64)
    reference = run(mp, "edge", x, ctx)
    fast = run(mp, "csr", x, ctx)
    assert ctx.plan(4).row.dtype == ctx.plan(4).blocks.col.dtype == torch.int64
    for a, b in zip(fast, reference, strict=True):
        assert relative(a, b) <= TOLERANCE[torch.float64]


def held_bytes(plan: CsrPlan) -> int:
    """Bytes of every tensor the plan (and its layouts) holds, each storage counted once, the
    caller's ``src``/``dst`` (referenced, not copied) left out."""
    seen = {plan.src.untyped_storage().data_ptr(), plan.dst.untyped_storage().data_ptr()}
    total = 0

    def visit(value: object) -> None:
        nonlocal total
        if isinstance(value, Tensor):
            storage = value.untyped_storage()
            if storage.data_ptr() not in seen:
                seen.add(storage.data_ptr())
                total += storage.nbytes()
        elif isinstance(value, (tuple, list)):
            for item in value:
                visit(item)
        elif isinstance(value, SparseLayout):
            visit(list(vars(value).values()))

    visit(list(vars(plan).values()))
    return total


def test_a_plan_holds_two_int32_indices_per_value_after_a_forward():
    """Issue 16 (10^6 nodes): after a forward, a plan holds the row and the column of every
    one of its ``h E`` values as int32 and its row pointer (``n h + 1``); the lazily built
    parts (value placement, transposes, the nonlocal rectangle) are not there.  The previous
    plan held five int64 ``[h E]`` tensors (40 bytes per value) and fails the bound."""
    n, h = 400, 4
    gen = torch.Generator().manual_seed(11)
    ei, _ = random_graph(n, 8 * n, gen)
    ctx = GraphContext.build(ei, n)
    mp = MultiHeadMessagePassing(16, h, "san")
    mp.kernel = "csr"
    with torch.no_grad():
        mp(torch.randn(n, 16), ctx)
    plan = ctx.plan(h)
    values = h * plan.num_edges
    assert values == h * ctx.src.numel() and plan.row.numel() == plan.blocks.col.numel() == values
    assert plan.row.dtype == plan.blocks.col.dtype == torch.int32
    bound = 4 * (2 * values + n * h + 1)  # row and column of every value, the row pointer
    assert held_bytes(plan) <= bound
    assert 5 * 8 * values > bound  # the previous plan's five int64 [h E] tensors fail it


class LargestTensor(TorchDispatchMode):
    """Records the largest dense tensor any aten op returns, and the ops."""

    def __init__(self) -> None:
        super().__init__()
        self.largest = 0
        self.ops: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        self.ops.add(str(func))
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, Tensor) and t.layout == torch.strided:
                self.largest = max(self.largest, t.numel())
        return out


@pytest.mark.parametrize("nonlocal_", [False, True], ids=["plain", "nonlocal"])
def test_csr_backward_creates_nothing_n_by_n(nonlocal_):
    n = 3000
    gen = torch.Generator().manual_seed(5)
    ei, w = random_graph(n, 4 * n, gen)
    ctx = GraphContext.build(ei, n, edge_weight=w.float())
    torch.manual_seed(6)
    mp = MultiHeadMessagePassing(16, 4, "san", nonlocal_=nonlocal_)
    mp.kernel = "csr"
    x = torch.randn(n, 16, requires_grad=True)
    with LargestTensor() as forward:
        loss = mp(x, ctx).square().sum()
    with LargestTensor() as backward:
        loss.backward()
    assert x.grad is not None and mp.scorer.query.weight.grad is not None
    assert forward.largest < n * n and backward.largest < n * n
    # the mode saw the backward (the sampled product writes through ``out``)
    assert "aten.sparse_sampled_addmm.out" in backward.ops
    with LargestTensor() as dense:  # the check itself sees an n x n tensor
        torch.ones(n, n).sum()
    assert dense.largest >= n * n


def observed(mp: MultiHeadMessagePassing, x: Tensor, ctx: GraphContext) -> tuple[list, list]:
    """What ``mp``'s hook points emit in one forward: attention weights, nonlocal factors."""
    attention: list = []
    factors: list = []
    handles = [
        mp.hook_attention.register_forward_hook(lambda m, a, out: attention.append(out)),
        mp.hook_factor.register_forward_hook(lambda m, a, out: factors.append(out)),
    ]
    try:
        mp(x, ctx)
    finally:
        for handle in handles:
            handle.remove()
    return attention, factors


@pytest.mark.parametrize("nonlocal_", [False, True], ids=["plain", "nonlocal"])
@pytest.mark.parametrize("conv", ["san", "gat", "gcn"])
def test_hook_points_emit_the_same_attention_over_their_edges(conv, nonlocal_):
    """The attention a hook sees is over its own edge list in both kernels (the csr kernel's
    edges are sorted by target): the same attention matrices, repeated edges summed; the same
    nonlocal factors, one per head."""
    ei, w, n, _ = graph_case(False, seed=2)
    ctx = GraphContext.build(ei, n, edge_weight=w.float())
    mp = MultiHeadMessagePassing(16, 4, conv, nonlocal_=nonlocal_)
    x = torch.randn(n, 16)
    matrices, energies = [], []
    for kernel in ("edge", "csr"):
        mp.kernel = kernel
        (attention,), factors = observed(mp, x, ctx)
        energies.append(factors)
        dense = torch.zeros(4, n, n).index_put_(
            (torch.arange(4)[:, None], attention.dst[None], attention.src[None]),
            attention.weights.t(),
            accumulate=True,
        )
        matrices.append(dense)
    torch.testing.assert_close(matrices[1], matrices[0])
    torch.testing.assert_close(matrices[1].sum(-1), torch.ones(4, n))  # rows are softmaxes
    if nonlocal_:
        assert energies[1][0].shape == (4,)
        torch.testing.assert_close(energies[1][0], energies[0][0])
    else:
        assert energies == [[], []]


def test_a_hook_point_refuses_a_hook_that_returns_a_value():
    ei, w, n, _ = graph_case(False, seed=2)
    mp = MultiHeadMessagePassing(16, 4, "san")
    handle = mp.hook_attention.register_forward_hook(lambda m, a, out: out.weights * 2)
    with pytest.raises(RuntimeError, match="hooks here only observe"):
        mp(torch.randn(n, 16), GraphContext.build(ei, n))
    handle.remove()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("nonlocal_", [False, True], ids=["plain", "nonlocal"])
@pytest.mark.parametrize("conv", ["san", "gat"])
def test_csr_softmax_survives_scores_far_beyond_exp_range(conv, nonlocal_, dtype):
    """Scores of order 1e4 (exp overflows float64 beyond 710): the csr kernel's numerators are
    max-subtracted, so its output is finite and equals the edge kernel's."""
    ei, w, n, _ = graph_case(False, seed=5)
    ctx = GraphContext.build(ei, n, dtype=dtype, edge_weight=w)
    torch.manual_seed(6)
    mp = MultiHeadMessagePassing(16, 4, conv, nonlocal_=nonlocal_).to(dtype)
    with torch.no_grad():
        for projection in mp.scorer.projections():  # san: query and key
            projection.weight.mul_(60.0)
        if conv == "gat":
            mp.scorer.att_dst.mul_(3000.0)
            mp.scorer.att_src.mul_(3000.0)
    x = torch.randn(n, 16, dtype=dtype)
    outs = []
    for kernel in ("edge", "csr"):
        mp.kernel = kernel
        with torch.no_grad():
            (attention,), _ = observed(mp, x, ctx)
            outs.append(mp(x, ctx))
        spread = float(attention.weights.max() - attention.weights.min())
    assert spread > 0.99  # the scores are that far apart: some attention weights are 1
    assert torch.isfinite(outs[1]).all()
    assert relative(outs[1], outs[0]) <= TOLERANCE[dtype]


def test_model_outputs_agree_across_kernels_with_global_blocks_on_a_batch():
    ei, w, n, batch = graph_case(True, seed=7)
    model = build_model(
        "nonlocal", conv="san", depth=4, in_channels=5, out_channels=3, pattern="MMMS"
    ).double()
    x = torch.randn(n, 5, dtype=torch.float64)
    out = {k: set_kernel(model, k)(x, ei, batch, edge_weight=w) for k in ("edge", "csr")}
    assert relative(out["csr"], out["edge"]) <= 1e-12


def test_set_kernel_refuses_an_unknown_name():
    model = build_model("postln", depth=1, in_channels=3, out_channels=2)
    with pytest.raises(ValueError, match="kernel: expected one of edge, csr"):
        set_kernel(model, "dense")


def test_edge_softmax_matches_pyg_bit_for_bit():
    from torch_geometric.utils import softmax

    gen = torch.Generator().manual_seed(8)
    index = torch.randint(0, 20, (300,), generator=gen)
    scores = torch.randn(300, 4, generator=gen) * 30
    assert torch.equal(edge_softmax(scores, index, 25), softmax(scores, index, num_nodes=25))


def test_to_dense_batch_matches_pyg():
    from torch_geometric.utils import to_dense_batch as pyg_to_dense_batch

    ei, _, n, batch = graph_case(True)
    assert batch is not None
    ctx = GraphContext.build(ei, n, batch)
    values = torch.randn(n, 6)
    dense, mask = to_dense_batch(values, ctx)
    expected, expected_mask = pyg_to_dense_batch(values, batch, batch_size=3)
    assert torch.equal(dense, expected) and torch.equal(mask, expected_mask)


class LargestGather(TorchDispatchMode):
    """Records the largest output of ``index_select``."""

    def __init__(self) -> None:
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        out = func(*args, **(kwargs or {}))
        if "index_select" in str(func):
            self.largest = max(self.largest, out.numel())
        return out


def test_softmax_numerators_in_slices_equal_the_whole_pass():
    """Over SUBTRACT_VALUES values without autograd the maxima are subtracted slice by slice
    (no [h E] gather of them): the same values, bit for bit, as in one pass (autograd's)."""
    from oversmooth.nn.kernel import SUBTRACT_VALUES, bounded_scores, softmax_numerators_

    gen = torch.Generator().manual_seed(3)
    runs = 2 * SUBTRACT_VALUES // 37 + 11
    counts = torch.randint(1, 75, (runs,), generator=gen)
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), counts.cumsum(0)])
    row = torch.repeat_interleave(torch.arange(runs), counts)
    scores = torch.randn(int(offsets[-1]), dtype=torch.float64, generator=gen) * 60
    assert scores.numel() > 2 * SUBTRACT_VALUES
    assert not bounded_scores(scores)  # the maxima are subtracted
    leaf = scores.clone().requires_grad_()
    whole = softmax_numerators_(leaf * 1.0, row, offsets).detach()
    given = scores.clone()
    with LargestGather() as seen:
        sliced = softmax_numerators_(given, row, offsets)
    assert 0 < seen.largest <= SUBTRACT_VALUES  # no gather of every value's maximum
    assert torch.equal(sliced, whole)
    top = torch.segment_reduce(scores, "max", offsets=offsets)
    assert torch.equal(sliced, (scores - top[row]).exp())


def test_softmax_numerators_skip_the_maxima_only_for_bounded_scores():
    """Float64 scores whose moduli are all at most log(largest float) / 4 are exponentiated
    as they are: the same softmax as with each run's maximum subtracted (to rounding), no term
    subnormal.  One score past the bound, or a NaN, takes the maxima again, and so do float32
    scores, however small."""
    dtype = torch.float64
    from oversmooth.nn.kernel import bounded_scores, softmax_numerators_

    gen = torch.Generator().manual_seed(5)
    counts = torch.randint(1, 40, (300,), generator=gen)
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), counts.cumsum(0)])
    row = torch.repeat_interleave(torch.arange(counts.numel()), counts)
    limit = math.log(torch.finfo(dtype).max) / 4
    scores = (torch.rand(int(offsets[-1]), generator=gen, dtype=torch.float64) * 2 - 1) * limit
    scores = scores.to(dtype)
    scores[7] = limit * (1 - 1e-6)  # at the bound (inside it once rounded)
    scores[8] = -limit * (1 - 1e-6)
    assert bounded_scores(scores)

    def softmax(numerators: torch.Tensor) -> torch.Tensor:
        sums = torch.segment_reduce(numerators.double(), "sum", offsets=offsets)
        return numerators.double() / sums[row]

    fast = softmax_numerators_(scores.clone(), row, offsets)
    assert torch.equal(fast, scores.exp())
    assert fast.min() >= torch.finfo(dtype).tiny  # nothing subnormal
    top = torch.segment_reduce(scores, "max", offsets=offsets)
    slow = (scores - top[row]).exp()
    tol = 8 * torch.finfo(dtype).eps * limit  # exp's relative error grows with |s|
    torch.testing.assert_close(softmax(fast), softmax(slow), rtol=tol, atol=0)

    past = scores.clone()
    past[3] = limit * 1.01
    assert not bounded_scores(past)
    top = torch.segment_reduce(past, "max", offsets=offsets)
    assert torch.equal(softmax_numerators_(past.clone(), row, offsets), (past - top[row]).exp())
    poisoned = scores.clone()
    poisoned[0] = float("nan")
    assert not bounded_scores(poisoned)
    assert not bounded_scores(scores[:0])
    assert not bounded_scores(scores.float() / 100)
    assert not bounded_scores(scores.half() / 100)


@pytest.mark.parametrize("rows", [None, 7])
def test_float64_sampled_products_by_gathering_equal_sampled_addmm(monkeypatch, rows):
    """Float64 on the CPU gathers the operands' rows (a few values at a time here), for the
    whole structure and for a block of its rows: torch.sparse.sampled_addmm's numbers bit
    for bit, and float32 still goes through sampled_addmm."""
    gen = torch.Generator().manual_seed(8)
    ei, _ = random_graph(60, 400, gen)
    plan = CsrPlan(ei[0], ei[1], 60, 3)
    layout = plan.blocks
    if rows is not None:
        first, stop, start, end = plan.row_blocks(rows)[2]
        layout = layout.rows(first, stop, start, end)
        assert layout.row_shift == first > 0
    left = torch.randn(layout.shape[0], 5, dtype=torch.float64, generator=gen)
    right = torch.randn(layout.shape[1], 5, dtype=torch.float64, generator=gen)

    def addmm(a: Tensor, b: Tensor, scale: float) -> Tensor:
        mask = layout.matrix(torch.zeros(layout.nnz, dtype=a.dtype))
        return torch.sparse.sampled_addmm(mask, a, b.t(), beta=0.0, alpha=scale).values()

    monkeypatch.setattr(kernel_module, "SAMPLED_VALUES", 13)
    gathered = []
    monkeypatch.setattr(
        kernel_module.SparseLayout,
        "_gathered",
        lambda self, *a, _f=kernel_module.SparseLayout._gathered: (
            gathered.append(1) or _f(self, *a)
        ),
    )
    for scale in (1.0, 0.35):
        assert torch.equal(layout.sampled(left, right, scale), addmm(left, right, scale))
    assert len(gathered) == 2
    # the rows are gathered into buffers kept per thread: a result is the caller's own,
    # untouched by the next call, and threads do not share the buffers
    kept = layout.sampled(left, right)
    layout.sampled(left * 3, right)
    assert torch.equal(kept, addmm(left, right, 1.0))
    with ThreadPoolExecutor(2) as pool:
        scaled = [left * (k + 1) for k in range(8)]
        results = list(pool.map(lambda a: layout.sampled(a, right), scaled))
    for a, result in zip(scaled, results, strict=True):
        assert torch.equal(result, addmm(a, right, 1.0))
    gathered.clear()
    narrow = layout.sampled(left.float(), right.float(), 0.35)
    assert not gathered and torch.equal(narrow, addmm(left.float(), right.float(), 0.35))
