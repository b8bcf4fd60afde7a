"""Benchmarks: probe overhead, metric kernels against the usual alternatives,
scaling in depth and graph size, and the README's main command end to end.

Timing: medians over repeats after one warm-up run; on CUDA with CUDA events
(``torch.cuda.Event``) around the timed region, so no host synchronisation
distorts the numbers.  Peak memory: on CUDA ``torch.cuda.max_memory_allocated``;
on the CPU each measurement runs in a fresh process, resets the kernel's
peak-RSS counter (``/proc/self/clear_refs``) after setup and reads ``VmHWM``,
so the number is the extra resident memory of the measured work.

Every speed and memory target is one :class:`Target` in :data:`TARGETS`;
:func:`targets` turns the measurements into one row per target (measured value,
bound, met or missed, and for a missed one a reason built from the same run's
numbers).  ``results.json`` records :data:`SCHEMA_VERSION`, the package version and
the git commit, so a test can tell when the committed report is stale.

Run ``oversmooth bench`` (full; sized for under 8 minutes on 2 quiet cores, and the
report records the seconds of each section) or
``oversmooth bench --quick`` (tiny sizes: a smoke test of every measurement, whose
numbers say nothing about speed); results go to ``reports/benchmarks/`` as
``report.md``, ``report.html``, ``results.json``, CSV files and plots.
"""

from __future__ import annotations

import json
import math
import multiprocessing as mp
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import torch
from numpy.typing import ArrayLike

if TYPE_CHECKING:
    from multiprocessing.queues import Queue

    from torch_geometric.data import Data

    from oversmooth.analysis import Progress
    from oversmooth.experiments.sweep import SweepSpec
    from oversmooth.graph import GraphOperator
    from oversmooth.nn.model import DepthModel

__all__ = [
    "SCHEMA_VERSION",
    "SECTIONS",
    "TARGETS",
    "Target",
    "targets",
    "run_bench",
    "Timer",
    "probe_overhead",
    "metric_kernels",
    "scaling_depth",
    "scaling_size",
    "end_to_end",
    "kernel_ratios",
    "max_rel_diff",
    "pyg_ratios",
    "pyg_postln",
    "metric_baselines",
    "sweep_scaling",
    "median_index",
    "startup_times",
    "measured",
    "command_analyze",
    "command_peak",
    "probed_forward",
]

#: Version of the layout of ``results.json``; raise it whenever a key is added, renamed or
#: changes meaning, so that ``tests/test_reports_fresh.py`` flags the committed report.
SCHEMA_VERSION = 4

#: Depth-256 backbones whose default message-passing kernel is timed against ``"edge"``.
BACKBONES: tuple[tuple[str, str], ...] = (
    ("postln", "san"),
    ("postln", "gat"),
    ("postln", "gcn"),
    ("nonlocal", "san"),
)

#: Default metrics timed against the one-line tensor expression a user would write.
ONE_LINERS: dict[str, str] = {
    "laplacian_energy": "((x.new_zeros(x.shape).index_add_(0, d, x[s]) * inv - x)[has] ** 2)"
    ".sum() / n",
    "dirichlet_energy": "0.5 * ((x[s] - x[d]) ** 2).sum() / n",
    "relative_energy": "(e[1:] - e[:-1]) / e[:-1]",
    "mean_cosine_similarity": "torch.nn.functional.cosine_similarity(y, x, dim=1).mean()",
    "feature_norm": "(x * x).sum().div(n).sqrt()",
}


class Timer:
    """Times a callable: medians over ``repeats`` after ``warmup`` runs (CUDA events on GPU)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device

    def once(self, fn: Callable[[], object]) -> float:
        if self.device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize(self.device)
            return start.elapsed_time(end) / 1000.0
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0

    def median(self, fn: Callable[[], object], repeats: int = 5, warmup: int = 1) -> float:
        for _ in range(warmup):
            self.once(fn)
        return statistics.median(self.once(fn) for _ in range(repeats))

    def interleaved(
        self, runs: Mapping[str, Callable[[], object]], repeats: int
    ) -> dict[str, list[float]]:
        """Every run of ``runs`` once per repeat, in turn, so that drifts in machine load hit
        them all alike: ``name -> its times``.  No warm-up (the caller's)."""
        times: dict[str, list[float]] = {name: [] for name in runs}
        for _ in range(repeats):
            for name, fn in runs.items():
                times[name].append(self.once(fn))
        return times


# ----------------------------------------------------------------------------- 1. probe overhead


def probe_overhead(device: torch.device, depth: int = 256, repeats: int = 5) -> dict:
    """Bare forward vs forward with the default probe, interleaved in one process."""
    from oversmooth import GraphOperator, build_model
    from oversmooth.analysis import probe_run
    from oversmooth.data import load

    data = load("cora").to(device)
    x, ei = data.x, data.edge_index
    model = build_model(
        "postln", depth=depth, in_channels=data.num_features, out_channels=7, device=device
    )
    graph = GraphOperator(ei, num_nodes=data.num_nodes)
    timer = Timer(device)

    def bare() -> None:
        with torch.no_grad():
            model(x, ei)

    def probed() -> None:
        probe_run(model, data, graph=graph, floor="bound")  # the default probe alone

    bare()  # warm-up
    probed()
    times = timer.interleaved({"bare": bare, "probed": probed}, repeats)
    bare_t, probed_t = times["bare"], times["probed"]
    b, p = statistics.median(bare_t), statistics.median(probed_t)
    return {
        "depth": depth,
        "bare_s": b,
        "probed_s": p,
        "ratio": p / b,
        "repeats": repeats,
        "bare_all": bare_t,
        "probed_all": probed_t,
    }


def precision_cost(device: torch.device, depth: int = 256, repeats: int = 5) -> dict:
    """float64 against float32: bare forwards, and probed forwards with the default floor estimate
    (float32 + float64 shadow, float64 + float64 twin), interleaved in one process."""
    from oversmooth import GraphOperator, build_model
    from oversmooth.analysis import probe_run
    from oversmooth.data import load

    data = load("cora").to(device)
    graph = GraphOperator(data.edge_index.to(device), num_nodes=data.num_nodes)
    ei = data.edge_index.to(device)
    timer = Timer(device)
    runs: dict[str, Callable[[], None]] = {}
    for dtype, method in (("float32", "shadow"), ("float64", "twin")):
        model = build_model(
            "postln",
            depth=depth,
            in_channels=data.num_features,
            out_channels=7,
            device=device,
            dtype=dtype,
        )
        x = data.x.to(device, model.decoder.weight.dtype)

        def bare(model: DepthModel = model, x: torch.Tensor = x) -> None:
            with torch.no_grad():
                model(x, ei)

        cast = data.clone()
        cast.x = x  # in the model's dtype already, as `bare` gets it

        def analysed(model: DepthModel = model, cast: Data = cast, method: str = method) -> None:
            probe_run(model, cast, graph=graph, floor=method)

        runs[f"{dtype}_bare"], runs[f"{dtype}_{method}"] = bare, analysed
    for fn in runs.values():  # warm-up
        fn()
    times = timer.interleaved(runs, repeats)
    med = {name: statistics.median(t) for name, t in times.items()}
    return {
        "depth": depth,
        "repeats": repeats,
        **{f"{k}_s": v for k, v in med.items()},
        "forward_ratio": med["float64_bare"] / med["float32_bare"],
        "analysis_ratio": med["float64_twin"] / med["float32_shadow"],
        "all": times,
    }


# ----------------------------------------------------------------------------- 2. metric kernels


def _loop_dirichlet(x: np.ndarray, neighbours: list[np.ndarray]) -> float:
    """Per-node Python loop over adjacency lists, as public oversmoothing code does it."""
    total = 0.0
    for i, nbrs in enumerate(neighbours):
        if len(nbrs):
            total += float(((x[nbrs] - x[i]) ** 2).sum())
    return 0.5 * total / len(neighbours)


def _loop_mad(x: np.ndarray, neighbours: list[np.ndarray]) -> float:
    norms = np.linalg.norm(x, axis=1)
    vals = []
    for i, nbrs in enumerate(neighbours):
        if len(nbrs):
            cos = (x[nbrs] @ x[i]) / np.maximum(norms[nbrs] * norms[i], 1e-300)
            vals.append(float((1 - cos).mean()))
    return float(np.mean(vals))


def _dense_dirichlet(x: torch.Tensor, adj: torch.Tensor) -> torch.Tensor:
    sq = (x * x).sum(1)
    dist = sq[:, None] + sq[None, :] - 2 * x @ x.T
    return 0.5 * (adj * dist).sum() / x.size(0)


def _dense_mad(x: torch.Tensor, adj: torch.Tensor) -> torch.Tensor:
    u = x / x.norm(dim=1, keepdim=True).clamp_min(1e-300)
    dist = 1 - u @ u.T
    deg = adj.sum(1)
    per = (adj * dist).sum(1) / deg.clamp_min(1)
    return per[deg > 0].mean()


def _neighbour_lists(edge_index: torch.Tensor, num_nodes: int) -> list[np.ndarray]:
    """Each node's in-neighbours (sources of the edges into it), as the loops read them."""
    src, dst = edge_index.numpy()
    order = np.argsort(dst, kind="stable")
    splits = np.cumsum(np.bincount(dst, minlength=num_nodes))[:-1]
    return np.split(src[order], splits)


def _rel_diff(value: float, reference: float) -> float:
    """``|value - reference| / |reference|`` (a zero reference divides by 1e-300)."""
    return abs(value - reference) / max(abs(reference), 1e-300)


def _against_loop(loop: Callable[[], float], ours_s: float, value: float) -> dict:
    """The loop's columns of a :func:`metric_kernels` row: one run (it is the slow one)."""
    t0 = time.perf_counter()
    loop_value = loop()
    loop_s = time.perf_counter() - t0
    return {
        "loop_s": loop_s,
        "loop_speedup": loop_s / ours_s,
        "loop_rel_diff": _rel_diff(loop_value, value),
    }


def _against_dense(
    dense: Callable[[], torch.Tensor], ours_s: float, value: float, timer: Timer, repeats: int
) -> dict:
    """The dense implementation's columns of a :func:`metric_kernels` row."""
    dense_s = timer.median(dense, repeats)
    return {
        "dense_s": dense_s,
        "dense_speedup": dense_s / ours_s,
        "dense_rel_diff": _rel_diff(float(dense()), value),
        "dense_note": "",
    }


def _dense_skipped(num_nodes: int) -> dict:
    """The dense columns of a graph too large for an ``n x n`` matrix."""
    gib = num_nodes * num_nodes * 8 / 2**30
    return {
        "dense_s": math.nan,
        "dense_speedup": math.nan,
        "dense_rel_diff": math.nan,
        "dense_note": f"skipped: the n x n float64 matrix needs {gib:,.0f} GiB",
    }


def metric_kernels(
    device: torch.device, graphs: list[tuple[str, Data]], repeats: int = 3, dense_limit: int = 10000
) -> list[dict]:
    """oversmooth's Dirichlet energy and MAD against a Python loop and a dense n x n
    implementation."""
    from oversmooth import GraphOperator, dirichlet_energy, mean_average_distance

    rows = []
    timer = Timer(device)
    for name, data in graphs:
        n = data.num_nodes
        gen = torch.Generator().manual_seed(0)
        x = torch.randn(n, 32, generator=gen, dtype=torch.float64)
        xd = x.to(device)
        g = GraphOperator(data.edge_index.to(device), num_nodes=n)
        neighbours = _neighbour_lists(data.edge_index, n)
        xn = x.numpy()
        for metric, ours, loop, dense in (
            ("dirichlet_energy", dirichlet_energy, _loop_dirichlet, _dense_dirichlet),
            ("mean_average_distance", mean_average_distance, _loop_mad, _dense_mad),
        ):
            ours_s = timer.median(partial(ours, xd, g), repeats)
            value = float(ours(xd, g))
            row = {
                "graph": name,
                "nodes": n,
                "edges": int(data.edge_index.size(1)),
                "metric": metric,
                "oversmooth_s": ours_s,
                **_against_loop(partial(loop, xn, neighbours), ours_s, value),
            }
            if n <= dense_limit:
                adj = torch.zeros(n, n, dtype=torch.float64, device=device)
                adj[data.edge_index[1].to(device), data.edge_index[0].to(device)] = 1.0
                row.update(_against_dense(partial(dense, xd, adj), ours_s, value, timer, repeats))
                del adj
            else:
                row.update(_dense_skipped(n))
            rows.append(row)
    return rows


# ----------------------------------------------------------------------------- 3. scaling


def _rss_kib(field: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def probed_forward(
    kind: str, value: int, depth: int, similarity: bool, device: torch.device
) -> Callable[[], None]:
    """One probed forward of a Post-LN model, built and ready: on Cora at depth ``value``
    (``kind="depth"``), or at ``depth`` on a CSBM graph of ``value`` nodes (``"size"``)."""
    from oversmooth import GraphOperator, build_model
    from oversmooth.analysis import probe_run
    from oversmooth.data import csbm, load

    data = (
        load("cora")
        if kind == "depth"
        else csbm(n=value, degree=10, classes=5, features=32, seed=0)
    )
    layers = value if kind == "depth" else depth
    model = build_model(
        "postln",
        depth=layers,
        in_channels=data.num_features,
        out_channels=int(data.y.max()) + 1,
        device=device,
    )
    data = data.to(device)
    graph = GraphOperator(data.edge_index, num_nodes=data.num_nodes)

    def run() -> None:
        probe_run(model, data, graph=graph, similarity=similarity, floor="bound")

    return run


def _measure_cpu(run: Callable[[], None]) -> dict:
    """``run``'s extra peak resident memory and the time of a warm run, on the CPU.

    First run: the extra peak, with glibc returning every block above 64 KiB to the OS on
    free so that RSS follows live memory; then the command's allocator policy
    (:func:`~oversmooth.allocator.keep_freed_memory`), a warm-up run and the timed run."""
    from oversmooth.allocator import MMAP_THRESHOLD, TRIM_THRESHOLD, mallopt

    mallopt(64 * 1024)
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")  # reset VmHWM to the current RSS
        reset = True
    except OSError:
        reset = False
    before = _rss_kib("VmRSS") if reset else _rss_kib("VmHWM")
    run()
    peak = (_rss_kib("VmHWM") - before) / 1024.0
    mallopt(MMAP_THRESHOLD, TRIM_THRESHOLD)
    run()
    t0 = time.perf_counter()
    run()
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "peak_mib": peak, "peak_reset": reset}


def _measure_cuda(run: Callable[[], None], device: torch.device) -> dict:
    """``run``'s extra peak of allocated CUDA memory and its time, after a warm-up run."""
    run()
    torch.cuda.reset_peak_memory_stats(device)
    base = torch.cuda.memory_allocated(device)
    seconds = Timer(device).once(run)
    return {
        "seconds": seconds,
        "peak_mib": (torch.cuda.max_memory_allocated(device) - base) / 2**20,
        "peak_reset": True,
    }


def _measure_child(
    kind: str, value: int, depth: int, similarity: bool, device: str, queue: Queue
) -> None:
    """Runs in a fresh process: build, reset the peak counter, time one probed forward."""
    try:
        torch.set_num_threads(
            int(os.environ.get("OVERSMOOTH_BENCH_THREADS", torch.get_num_threads()))
        )
        dev = torch.device(device)
        run = probed_forward(kind, value, depth, similarity, dev)
        queue.put(_measure_cpu(run) if dev.type == "cpu" else _measure_cuda(run, dev))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        queue.put({"error": f"{type(exc).__name__}: {exc}"})


def _isolated(
    kind: str,
    value: int,
    depth: int,
    similarity: bool,
    device: torch.device,
    timeout: float = 600.0,
) -> dict:
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(
        target=_measure_child, args=(kind, value, depth, similarity, str(device), queue)
    )
    proc.start()
    try:
        result = queue.get(timeout=timeout)
    except Exception:  # noqa: BLE001 - a child that died or hung
        result = {"error": "the measuring process did not answer"}
    proc.join(10)
    if proc.is_alive():
        proc.kill()
    return result


def _exponent(xs: ArrayLike, ys: ArrayLike) -> float:
    from oversmooth.fit import fit_power_law

    xs, ys = np.asarray(xs, float), np.asarray(ys, float)
    keep = np.isfinite(ys) & (ys > 0)
    return fit_power_law(xs[keep], ys[keep]).exponent if keep.sum() >= 2 else math.nan


def scaling_depth(
    device: torch.device, depths: list[int], similarity_too: bool = True
) -> list[dict]:
    rows = []
    for depth in depths:
        for sim in [False, True] if similarity_too else [False]:
            r = _isolated("depth", depth, depth, sim, device)
            rows.append({"depth": depth, "similarity": sim, **r})
    return rows


def scaling_size(device: torch.device, sizes: list[int], depth: int = 4) -> list[dict]:
    """Per size: the probed forward's time and extra peak (:func:`_isolated`), and the whole
    command's peak (:func:`command_peak`)."""
    rows = []
    for n in sizes:
        row = {"nodes": n, "depth": depth, **_isolated("size", n, depth, False, device)}
        whole = command_peak(n, depth, device)
        row["process_peak_mib"] = whole.get("peak_mib", math.nan)
        if "error" in whole:
            row["process_error"] = whole["error"]
        rows.append(row)
    return rows


def command_analyze(n: int, depth: int, device: torch.device, out: Path) -> list[str]:
    """The command whose whole-process peak the bench reports: ``oversmooth analyze`` on a
    ``csbm:n=N,degree=10`` graph, with every other option at its default."""
    spec = f"csbm:n={n},degree=10"
    return [sys.executable, "-m", "oversmooth.cli.main", "analyze", "--dataset", spec] + [
        "--depth",
        str(depth),
        "--device",
        device.type,
        "--out",
        str(out),
        "--quiet",
    ]


def command_peak(n: int, depth: int, device: torch.device) -> dict:
    """Whole-process peak memory (maximum resident set, host) of :func:`command_analyze` in
    a fresh process: graph generation, operator, every seed's probed forward, fits and
    report; ``peak_mib``, ``cpu_s``, ``wall_s`` (or ``error``)."""
    with tempfile.TemporaryDirectory() as tmp:
        run = measured(command_analyze(n, depth, device, Path(tmp) / "run"))
    if run["returncode"] != 0:
        return {"error": (run["stderr"].strip().splitlines() or ["failed"])[-1][:300]}
    return {"peak_mib": run["peak_bytes"] / 2**20, "cpu_s": run["cpu_s"], "wall_s": run["wall_s"]}


# ----------------------------------------------------------------------------- 4. kernels


def max_rel_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """``max |a - b| / max |b|`` in float64 (0 when both are zero)."""
    a64, b64 = a.detach().to(torch.float64), b.detach().to(torch.float64)
    scale = float(b64.abs().max()) if b64.numel() else 0.0
    diff = float((a64 - b64).abs().max()) if a64.numel() else 0.0
    return diff / scale if scale > 0 else diff


def _projections_only(model: DepthModel, x: torch.Tensor, edge_index: torch.Tensor) -> None:
    """``model``'s forward with every message-passing operator reduced to its projections
    (``W V X``: no scores, no attention, no aggregation): what no kernel can make faster
    (GCN's kernel runs ``W V`` as one ``d x d`` projection, so its floor does too)."""
    from oversmooth.nn.conv import MultiHeadMessagePassing

    def projections(self: MultiHeadMessagePassing, x: torch.Tensor, ctx: object) -> torch.Tensor:
        if self.conv == "gcn":
            return torch.nn.functional.linear(x, self.out.weight @ self.value.weight)
        return self.out(self.value(x))

    saved = MultiHeadMessagePassing.forward
    MultiHeadMessagePassing.forward = projections  # type: ignore[method-assign]
    try:
        with torch.no_grad():
            model(x, edge_index)
    finally:
        MultiHeadMessagePassing.forward = saved  # type: ignore[method-assign]


def _kernel_timings(
    model: DepthModel, x: torch.Tensor, edge_index: torch.Tensor, timer: Timer, repeats: int
) -> dict:
    """``model``'s bare forward with the default kernel, with the ``"edge"`` kernel and with
    projections only, interleaved after a warm-up; the columns of a :func:`kernel_ratios` row
    after ``model``, ``conv`` and ``depth``.  Leaves ``model`` on the default kernel."""
    from oversmooth.nn import set_kernel
    from oversmooth.nn.conv import DEFAULT_KERNEL

    def forward(kernel: str) -> torch.Tensor:
        set_kernel(model, kernel)
        with torch.no_grad():
            return model(x, edge_index)

    floor = partial(_projections_only, model, x, edge_index)
    reference, fast = forward("edge"), forward(DEFAULT_KERNEL)  # also the warm-up
    floor()
    times = timer.interleaved(
        {
            "default": partial(forward, DEFAULT_KERNEL),
            "edge": partial(forward, "edge"),
            "none": floor,
        },
        repeats,
    )
    set_kernel(model, DEFAULT_KERNEL)
    d, e = statistics.median(times["default"]), statistics.median(times["edge"])
    return {
        "dtype": str(x.dtype).removeprefix("torch."),
        "default_kernel": DEFAULT_KERNEL,
        "default_s": d,
        "edge_s": e,
        "ratio": d / e,
        "projections_s": statistics.median(times["none"]),
        "max_rel_diff": max_rel_diff(fast, reference),
        "tolerance": math.sqrt(torch.finfo(x.dtype).eps),
        "repeats": repeats,
    }


def kernel_ratios(
    device: torch.device,
    depth: int = 256,
    repeats: int = 5,
    backbones: tuple[tuple[str, str], ...] = BACKBONES,
) -> list[dict]:
    """Bare forward on Cora with the default message-passing kernel against the reference
    ``"edge"`` kernel (the implementation of commit 340f7a9), interleaved in one process,
    one model per backbone; also the largest relative difference of their outputs."""
    from oversmooth import build_model
    from oversmooth.data import load

    data = load("cora").to(device)
    timer = Timer(device)
    rows = []
    for name, conv in backbones:
        model = build_model(
            name,
            conv=conv,
            depth=depth,
            in_channels=data.num_features,
            out_channels=7,
            device=device,
        )
        x = data.x.to(model.decoder.weight.dtype)
        timings = _kernel_timings(model, x, data.edge_index, timer, repeats)
        rows.append({"model": name, "conv": conv, "depth": depth, **timings})
        del model
    return rows


# ----------------------------------------------------------------------------- 4b. PyG layers

#: Convolutions whose zoo forward is timed against a stack of the PyG layer doing its job.
PYG_CONVS: tuple[str, ...] = ("san", "gat", "gcn")


def pyg_postln(
    conv: str, depth: int, in_channels: int, out_channels: int, hidden: int = 32, heads: int = 4
) -> torch.nn.Module:
    """The zoo's Post-LN model built from PyTorch Geometric layers: per block
    ``Y = LN(X + MP(X))``, ``X' = LN(Y + FFN(Y))`` (FFN ``d -> 2d -> d`` with ReLU), with MP
    ``TransformerConv`` (SAN: scaled dot-product attention, no root weight) or ``GATConv``
    followed by the output projection ``W``, or ``GCNConv(cached=True)`` (its normalisation
    cached after the first forward); linear encoder and decoder.  The same sizes and the same
    work per layer as the zoo's model, not its numbers (PyG's GCN normalises symmetrically)."""
    from torch import nn
    from torch_geometric.nn import GATConv, GCNConv, TransformerConv

    def mp() -> nn.Module:
        if conv == "gcn":
            return GCNConv(hidden, hidden, cached=True)
        layer = (
            TransformerConv(hidden, hidden // heads, heads=heads, root_weight=False)
            if conv == "san"
            else GATConv(hidden, hidden // heads, heads=heads)
        )
        return _ProjectedConv(layer, nn.Linear(hidden, hidden))

    class Stack(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = nn.Linear(in_channels, hidden)
            self.mps = nn.ModuleList(mp() for _ in range(depth))
            self.ffns = nn.ModuleList(
                nn.Sequential(
                    nn.Linear(hidden, 2 * hidden), nn.ReLU(), nn.Linear(2 * hidden, hidden)
                )
                for _ in range(depth)
            )
            self.norm1 = nn.ModuleList(nn.LayerNorm(hidden) for _ in range(depth))
            self.norm2 = nn.ModuleList(nn.LayerNorm(hidden) for _ in range(depth))
            self.decoder = nn.Linear(hidden, out_channels)

        def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
            h = self.encoder(x)
            for mp_, ffn, n1, n2 in zip(self.mps, self.ffns, self.norm1, self.norm2, strict=True):
                y = n1(h + mp_(h, edge_index))
                h = n2(y + ffn(y))
            return self.decoder(h)

    return Stack()


class _ProjectedConv(torch.nn.Module):
    """A PyG convolution followed by a linear map (the output projection ``W``)."""

    def __init__(self, conv: torch.nn.Module, out: torch.nn.Module) -> None:
        super().__init__()
        self.conv, self.out = conv, out

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        return self.out(self.conv(x, edge_index))


#: The ``pyg_layer`` column of :func:`pyg_ratios`: the PyG layer of each of :data:`PYG_CONVS`.
_PYG_LAYER_COLUMN: dict[str, str] = {
    "san": "TransformerConv",
    "gat": "GATConv",
    "gcn": "GCNConv(cached=True)",
}


def _no_grad_forward(model: torch.nn.Module, x: torch.Tensor, edge_index: torch.Tensor) -> None:
    """``model(x, edge_index)`` without gradients, its output dropped."""
    with torch.no_grad():
        model(x, edge_index)


def pyg_ratios(
    device: torch.device, depth: int = 256, repeats: int = 5, convs: tuple[str, ...] = PYG_CONVS
) -> list[dict]:
    """Bare forward on Cora, no gradients: the zoo's Post-LN model (default kernel) against
    :func:`pyg_postln` of the same conv, depth and sizes, interleaved in one process, float32.
    SAN and GAT attend over the neighbourhood with self loops in both (added to the PyG edge
    list once, outside the timing); GCNConv adds its own and caches its normalisation."""
    from oversmooth import build_model
    from oversmooth.data import load

    data = load("cora").to(device)
    x, ei = data.x, data.edge_index
    loops = torch.arange(data.num_nodes, device=device)
    ei_loops = torch.cat([ei, torch.stack([loops, loops])], 1)
    timer = Timer(device)
    rows = []
    for conv in convs:
        zoo = build_model(
            "postln",
            conv=conv,
            depth=depth,
            in_channels=data.num_features,
            out_channels=7,
            device=device,
        ).eval()
        pyg = pyg_postln(conv, depth, data.num_features, 7).to(device).eval()
        runs = {
            "zoo": partial(_no_grad_forward, zoo, x, ei),
            "pyg": partial(_no_grad_forward, pyg, x, ei if conv == "gcn" else ei_loops),
        }
        for fn in runs.values():  # warm-up (and GCNConv's cache)
            fn()
        times = timer.interleaved(runs, repeats)
        z, g = statistics.median(times["zoo"]), statistics.median(times["pyg"])
        rows.append(
            {
                "model": "postln",
                "conv": conv,
                "depth": depth,
                "zoo_s": z,
                "pyg_s": g,
                "ratio": z / g,
                "pyg_layer": _PYG_LAYER_COLUMN[conv],
                "repeats": repeats,
            }
        )
        del zoo, pyg, runs
    return rows


# ----------------------------------------------------------------------------- 5. one-liners


def _calibrated(fn: Callable[[], object], floor: float = 2e-3) -> Callable[[], None]:
    """``fn`` called ``k`` times in a row, ``k`` chosen so one call of the result takes at
    least ``floor`` seconds (tiny kernels are timed above the clock's resolution)."""
    fn()
    t0 = time.perf_counter()
    fn()
    once = max(time.perf_counter() - t0, 1e-7)
    k = max(1, math.ceil(floor / once))

    def batch() -> None:
        for _ in range(k):
            fn()

    batch.calls = k  # type: ignore[attr-defined]
    return batch


def _one_liner_cases(
    x: torch.Tensor, y: torch.Tensor, e: torch.Tensor, ei: torch.Tensor, g: GraphOperator
) -> dict[str, tuple[Callable[[], torch.Tensor], Callable[[], torch.Tensor]]]:
    """``metric -> (oversmooth's function, the one-liner)`` on these inputs."""
    import torch.nn.functional as F

    from oversmooth.metrics import (
        dirichlet_energy,
        feature_norm,
        laplacian_energy,
        mean_cosine_similarity,
        relative_energy,
    )

    n = x.size(0)
    s, d = ei[0], ei[1]
    deg = torch.bincount(d, minlength=n)
    has = deg > 0  # isolated nodes contribute 0 to the Laplacian energy
    inv = (1.0 / deg.clamp_min(1).to(torch.float64)).unsqueeze(1)
    return {
        "laplacian_energy": (
            partial(laplacian_energy, x, g),
            lambda: ((x.new_zeros(x.shape).index_add_(0, d, x[s]) * inv - x)[has] ** 2).sum() / n,
        ),
        "dirichlet_energy": (
            partial(dirichlet_energy, x, g),
            lambda: 0.5 * ((x[s] - x[d]) ** 2).sum() / n,
        ),
        "relative_energy": (partial(relative_energy, e), lambda: (e[1:] - e[:-1]) / e[:-1]),
        "mean_cosine_similarity": (
            partial(mean_cosine_similarity, y, x),
            lambda: F.cosine_similarity(y, x, dim=1).mean(),
        ),
        "feature_norm": (partial(feature_norm, x), lambda: (x * x).sum().div(n).sqrt()),
    }


def metric_baselines(
    device: torch.device,
    graphs: list[tuple[str, Data]],
    repeats: int = 7,
    channels: int = 32,
    layers: int = 256,
) -> list[dict]:
    """Every default metric of the probe against the one-line float64 tensor expression a
    user would write (:data:`ONE_LINERS`), interleaved in one process; the graph's own
    precomputations (``s``, ``d``, in-degree masks; oversmooth's GraphOperator) are built
    before timing for both."""
    from oversmooth import GraphOperator

    timer = Timer(device)
    rows = []
    for name, data in graphs:
        n = data.num_nodes
        gen = torch.Generator().manual_seed(0)
        x = torch.randn(n, channels, generator=gen, dtype=torch.float64).to(device)
        y = (x.cpu() + 0.3 * torch.randn(n, channels, generator=gen, dtype=torch.float64)).to(
            device
        )
        e = (torch.rand(layers, generator=gen, dtype=torch.float64) + 0.5).to(device)
        ei = data.edge_index.to(device)
        cases = _one_liner_cases(x, y, e, ei, GraphOperator(ei, num_nodes=n))
        for metric, (ours, line) in cases.items():
            value, expected = ours(), line()
            if metric == "relative_energy":
                value = value[1:]  # entry 0 is NaN by definition
            timed = [_calibrated(ours), _calibrated(line)]
            samples: list[list[float]] = [[], []]
            for _ in range(repeats):  # interleaved
                for i, fn in enumerate(timed):
                    samples[i].append(timer.once(fn) / fn.calls)  # type: ignore[attr-defined]
            t_ours, t_line = statistics.median(samples[0]), statistics.median(samples[1])
            rows.append(
                {
                    "graph": name,
                    "nodes": n,
                    "edges": int(ei.size(1)),
                    "metric": metric,
                    "one_liner": ONE_LINERS[metric],
                    "oversmooth_s": t_ours,
                    "one_liner_s": t_line,
                    "ratio": t_ours / t_line,
                    "rel_diff": max_rel_diff(value, expected),
                    "repeats": repeats,
                }
            )
    return rows


# ----------------------------------------------------------------------------- 6. sweep workers


def _mark(marks: list[float], done: int, total: int, message: str) -> None:
    marks.append(time.perf_counter())


def _sweep_run(spec: SweepSpec, folder: Path) -> dict[str, object]:
    """One sweep into ``folder``, timed from its first progress call to its last cell: cells,
    failures, cells per second, the final merge's seconds and the cells' own times."""
    from oversmooth.experiments.sweep import _records, run_sweep

    marks: list[float] = []
    t0 = time.perf_counter()
    result = run_sweep(spec, folder, progress=partial(_mark, marks))
    wall = time.perf_counter() - t0
    cells_s = marks[-1] - marks[0] if len(marks) >= 2 else math.nan
    each = [float(r["seconds"]) for r in _records(folder / "cells") if r.get("seconds") is not None]
    run: dict[str, object] = {
        "workers": spec.workers,
        "cells": result.ran,
        "failed": len(result.failed),
        "cells_s": cells_s,
        "merge_s": wall - (marks[-1] - t0) if marks else math.nan,
        "cells_per_s": result.ran / cells_s if cells_s > 0 else math.nan,
        # the cells' own times (in their workers): a worker's first cell includes its lazy
        # imports, so the median is the steady-state cost of a cell
        "cell_median_s": statistics.median(each) if each else math.nan,
        "cell_sum_s": sum(each),
    }
    if result.failed:
        run["error"] = str(result.failed[0].get("error", "a cell failed"))[:300]
    return run


def _sweep_ratios(runs: dict[int, dict], server_start: float) -> dict[str, float]:
    """What :func:`sweep_scaling` derives from its runs (by worker count): ``ratio`` and,
    with both a 1- and a 2-worker run, ``steady_ratio``, ``fixed_s``, ``warmup_s`` and
    ``cold_ratio``."""
    if not (1 in runs and 2 in runs):
        return {"ratio": math.nan}
    one, two = runs[1], runs[2]
    return {
        "ratio": two["cells_per_s"] / one["cells_per_s"],
        # cells per second once started: 2 side by side against 1 alone
        "steady_ratio": 2 * one["cell_median_s"] / two["cell_median_s"],
        # what both runs pay whatever the worker count: the wall time not spent in cells
        "fixed_s": one["cells_s"] - one["cell_sum_s"],  # the worker's start
        # and a first cell's extra time (what a worker still loads then), once per worker
        "warmup_s": one["cell_sum_s"] - one["cells"] * one["cell_median_s"],
        "cold_ratio": (server_start + one["cells_s"]) / (server_start + two["cells_s"]),
    }


def sweep_scaling(
    device: torch.device,
    *,
    models: tuple[str, ...] = ("postln", "preln"),
    depths: tuple[int, ...] = (32,),
    seeds: tuple[int, ...] = (0, 1, 2, 3),
    workers: tuple[int, ...] = (1, 2),
    pairs: int = 5,
) -> dict:
    """Cells per second of one small ``oversmooth sweep`` (Cora, init mode) with 1, then 2
    workers, each into a fresh folder, ``pairs`` times (interleaved: 1, 2, 1, 2, ...).  The
    clock runs from the sweep's first progress call (before any worker starts, so starting
    the workers counts) to its last cell; the final merge (tables and comparison reports) is
    timed apart.  ``ratio`` is the median of the pairs' ratios (``ratios``), and the other
    derived numbers are those of that median pair (``pair``): one run of 8 cells on 2 busy
    cores moved the ratio by 0.1 from one bench to the next, and the median of 3 pairs by
    0.04 (1.78x against 1.84x on the same code), so 5 pairs are run.

    Local workers are forked from a fork server that has the heavy imports done, started
    once per process: it is started (and timed, ``server_start_s``) before both runs, so
    neither pays it and the ratio compares the cells themselves.  ``cold_ratio`` is the
    ratio had each run paid that start (a sweep's first in a fresh process)."""
    from oversmooth.experiments.sweep import SweepSpec, start_worker_server

    t0 = time.perf_counter()
    start_worker_server(wait=True)
    server_start = time.perf_counter() - t0
    out: dict = {
        "models": list(models),
        "depths": list(depths),
        "seeds": list(seeds),
        "dataset": "cora",
        "server_start_s": server_start,
        "runs": [],
    }
    with tempfile.TemporaryDirectory() as tmp:
        for pair in range(pairs):
            for w in workers:
                spec = SweepSpec(
                    models=models, depths=depths, seeds=seeds, workers=w, device=device.type
                )
                run = _sweep_run(spec, Path(tmp) / f"pair-{pair}-workers-{w}")
                out["runs"].append({**run, "pair": pair})
    derived = [
        _sweep_ratios({r["workers"]: r for r in out["runs"] if r["pair"] == p}, server_start)
        for p in range(pairs)
    ]
    ratios = [d["ratio"] for d in derived]
    median = median_index(ratios)
    out.update(derived[median], pair=median, ratios=ratios)
    return out


def median_index(values: Sequence[float]) -> int:
    """The index of the median of ``values`` (the lower middle one of an even count; a NaN
    ranks lowest)."""
    ranked = sorted(
        range(len(values)), key=lambda i: values[i] if values[i] == values[i] else -math.inf
    )
    return ranked[(len(values) - 1) // 2]


# ----------------------------------------------------------------------------- 7. end to end

# Runs the command as `python -m oversmooth.cli.main` would, with its two phases timed by
# wrapping oversmooth.analysis.run_analysis and oversmooth.report.render.write_analysis (both
# are imported lazily by the command, so the wrappers are the ones it calls).  The phases are
# written as soon as the report is: whatever the process does after that (printing the
# verdict, exiting) is measured by the parent, from the wall clock and the child's CPU time.
_DRIVER = """
import json, os, sys, time
t0, c0 = time.perf_counter(), time.process_time()
target = sys.argv[1]
# named as the command is before the package loads: it then makes the command's own start-up
# settings (its Ctrl-C handling, one OpenBLAS thread), which a process named -c does not get
sys.argv = ["oversmooth"] + sys.argv[2:]
from oversmooth.cli.main import main, set_openmp_defaults
set_openmp_defaults()  # as the command does, before torch loads
import oversmooth.analysis as A
import oversmooth.report.render as R
phases = {"import_s": time.perf_counter() - t0, "import_cpu_s": time.process_time() - c0}
phases["openblas_threads"] = os.environ.get("OPENBLAS_NUM_THREADS")  # the command's: "1"
def save():
    with open(target, "w") as fh:
        json.dump(phases, fh)
def timed(fn, key):
    def wrapper(*args, **kwargs):
        t, c = time.perf_counter(), time.process_time()
        try:
            result = fn(*args, **kwargs)
        finally:
            phases[key] = phases.get(key, 0.0) + time.perf_counter() - t
            phases[key[:-2] + "_cpu_s"] = time.process_time() - c
        if key == "analysis_s":
            phases["forward_s"] = result.timings.get("forward_s", float("nan"))
        else:  # the report is written: the rest is the command's own ending
            phases["report_end_epoch"] = time.time()
            phases["report_end_cpu_s"] = time.process_time()
            save()
        return result
    return wrapper
A.run_analysis = timed(A.run_analysis, "analysis_s")
R.write_analysis = timed(R.write_analysis, "report_s")
try:
    main()
finally:
    save()
"""


# Starts the measured command and reads its resource usage with os.wait4.  A child's
# maximum resident set counts the image it was started from (fork or vfork, until exec): a
# command started by the bench itself, which holds models and graphs, would report the
# bench's size.  This launcher (an interpreter without site packages, a few MiB) starts it
# instead and writes the usage as JSON to the file named first.
_LAUNCHER = """
import json, os, sys, time
t0 = time.perf_counter()
pid = os.posix_spawnp(sys.argv[2], sys.argv[2:], os.environ)
_, status, usage = os.wait4(pid, 0)
wall = time.perf_counter() - t0
with open(sys.argv[1], "w") as fh:
    json.dump({"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime,
               "peak_bytes": usage.ru_maxrss * 1024, "end_epoch": time.time(),
               "returncode": os.waitstatus_to_exitcode(status)}, fh)
"""


def measured(cmd: list[str], timeout: float = 1800.0) -> dict:
    """Run ``cmd`` to its end: ``wall_s``, ``cpu_s`` (its user + system time), ``peak_bytes``
    (its maximum resident set: the whole process's peak memory), ``end_epoch`` (when it
    ended), ``returncode``, ``stdout`` and ``stderr``.  The usage is the command's own
    (``os.wait4`` in a small launcher, see ``_LAUNCHER``); a command still running after
    ``timeout`` seconds is killed (``returncode`` -9)."""
    with tempfile.TemporaryDirectory() as tmp:
        usage_file = Path(tmp) / "usage.json"
        launcher = [sys.executable, "-I", "-S", "-c", _LAUNCHER, str(usage_file), *cmd]
        proc = subprocess.Popen(
            launcher,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # the command with it: one process group to kill
        )
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            stdout, stderr = proc.communicate()
        if not usage_file.is_file():  # killed, or the command could not start
            return {
                "wall_s": math.nan,
                "cpu_s": math.nan,
                "peak_bytes": 0,
                "end_epoch": time.time(),
                "returncode": proc.returncode or -9,
                "stdout": stdout,
                "stderr": stderr,
            }
        return {**json.loads(usage_file.read_text()), "stdout": stdout, "stderr": stderr}


def end_to_end(depth: int = 256, pairs: int = 3) -> dict:
    """``oversmooth analyze --model postln --depth DEPTH`` in a fresh process against
    ``python -c "import torch"``, in ``pairs`` interleaved pairs (one of each, alternately):
    CPU time (the target's measure: it moves less than wall time when other work shares the
    cores) and wall time, medians over the pairs and the median of the pairs' ratios.  The
    command's time is split (CPU seconds, of the median pair) into the interpreter's start,
    imports, the analysis (forward + probe, which the command reports in wall seconds, and
    the rest), figures and report, and what follows the report (printing, exit).  Also the
    command's peak memory."""
    command = f"oversmooth analyze --model postln --depth {depth}"
    runs: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(pairs):
            torch_run = measured([sys.executable, "-c", "import torch"])
            phases_file = Path(tmp) / f"phases-{i}.json"
            args = ["analyze", "--model", "postln", "--depth", str(depth)]
            args += ["--out", str(Path(tmp) / f"run-{i}"), "--quiet", "--device", "cpu"]
            run = measured([sys.executable, "-c", _DRIVER, str(phases_file), *args])
            if run["returncode"] != 0 or not phases_file.is_file():
                return {"command": command, "error": run["stderr"].strip()[-300:]}
            run["phases"] = json.loads(phases_file.read_text())
            runs.append({"torch": torch_run, "command": run})
    ratios = [r["command"]["cpu_s"] / r["torch"]["cpu_s"] for r in runs]
    middle = median_index(ratios)
    run, ph = runs[middle]["command"], runs[middle]["command"]["phases"]
    # process_time() at the report's end counts everything since the process began
    measured_parts = ph["import_cpu_s"] + ph["analysis_cpu_s"] + ph["report_cpu_s"]
    split = {
        "interpreter start, options": ph["report_end_cpu_s"] - measured_parts,
        "imports": ph["import_cpu_s"],
        "analysis": ph["analysis_cpu_s"],
        "figures and report": ph["report_cpu_s"],
        "after the report": run["cpu_s"] - ph["report_end_cpu_s"],
    }
    med = statistics.median
    return {
        "command": command,
        "depth": depth,
        "pairs": pairs,
        "cpu_s": med(r["command"]["cpu_s"] for r in runs),
        "import_torch_cpu_s": med(r["torch"]["cpu_s"] for r in runs),
        "ratio": med(ratios),
        "ratios": ratios,
        "seconds": med(r["command"]["wall_s"] for r in runs),
        "import_torch_s": med(r["torch"]["wall_s"] for r in runs),
        "wall_ratio": med(r["command"]["wall_s"] / r["torch"]["wall_s"] for r in runs),
        "import_torch_all": [r["torch"]["wall_s"] for r in runs],
        "forward_s": ph["forward_s"],
        "after_report_s": run["end_epoch"] - ph["report_end_epoch"],
        "split_cpu_s": split,
        "peak_bytes": run["peak_bytes"],
        "verdict": run["stdout"].splitlines()[0] if run["stdout"] else "",
    }


# ----------------------------------------------------------------------------- 8. start-up

#: How :func:`startup_times` starts the command: as the ``oversmooth`` script does.
_CLI = "from oversmooth.cli.main import main; main()"


def startup_times(repeats: int = 5) -> dict:
    """Wall seconds of ``oversmooth --version``, ``oversmooth --help`` and ``oversmooth
    <command> --help`` for every command, each in a fresh process, all the cases in turn
    ``repeats`` times: the median of each case (``seconds``) and the slowest median."""
    from oversmooth.cli.commands import COMMANDS

    cases = [("--version",), ("--help",), *((name, "--help") for name in COMMANDS)]
    samples: dict[str, list[float]] = {" ".join(case): [] for case in cases}
    for _ in range(repeats):
        for case in cases:
            run = measured([sys.executable, "-c", _CLI, *case], timeout=120.0)
            if run["returncode"] != 0:
                err = run["stderr"].strip()[-300:]
                return {"error": f"oversmooth {' '.join(case)} exited {run['returncode']}: {err}"}
            samples[" ".join(case)].append(run["wall_s"])
    seconds = {case: statistics.median(values) for case, values in samples.items()}
    slowest = max(seconds, key=lambda case: seconds[case])
    return {"repeats": repeats, "seconds": seconds, "slowest": slowest}


# ----------------------------------------------------------------------------- targets


@dataclass(frozen=True)
class Target:
    """One speed or memory target: ``measure`` must be ``<= bound`` (``>=`` with
    ``at_least``).  ``key`` names its row in ``results.json``."""

    key: str
    measure: str
    bound: float
    at_least: bool = False
    unit: str = "x"

    def passes(self, value: float) -> bool:
        if not math.isfinite(value):
            return False
        return value >= self.bound if self.at_least else value <= self.bound

    @property
    def text(self) -> str:
        return f"{'>=' if self.at_least else '<='} {self.bound:g}{self.unit}"


_BACKBONE_NAMES = {
    ("postln", "san"): "Post-LN SAN",
    ("postln", "gat"): "Post-LN GAT",
    ("postln", "gcn"): "Post-LN GCN",
    ("nonlocal", "san"): "nonlocal SAN",
}
_GRAPHS = {"cora": "Cora", "csbm": "a 10^5-node CSBM"}
_PYG_LAYERS = {"san": "TransformerConv", "gat": "GATConv", "gcn": "GCNConv with cached=True"}

#: Every speed and memory target, in the order of the report's table.
TARGETS: tuple[Target, ...] = (
    Target(
        "end_to_end",
        '`oversmooth analyze --model postln --depth 256` / `python -c "import torch"`, CPU time '
        "(fresh processes, interleaved pairs, median ratio; wall time beside it)",
        2.0,
    ),
    *(
        Target(
            f"kernel_{model}_{conv}",
            f"bare forward, depth-256 {_BACKBONE_NAMES[model, conv]} on Cora: default kernel / "
            "the edge kernel of 340f7a9 (outputs equal to float tolerance)",
            0.33 if (model, conv) == ("postln", "san") else 0.5,
        )
        for model, conv in BACKBONES
    ),
    *(
        Target(
            f"pyg_postln_{conv}",
            f"bare forward, depth-256 Post-LN {conv.upper()} on Cora: the zoo's model / the same "
            f"stack of PyG layers ({_PYG_LAYERS[conv]})",
            1.0,
        )
        for conv in PYG_CONVS
    ),
    Target(
        "probe_overhead",
        "probed / bare forward (default metrics), depth-256 Post-LN SAN on Cora",
        1.1,
    ),
    Target("precision", "float64 / float32 bare forward, depth-256 Post-LN SAN on Cora", 2.5),
    Target(
        "size_exponent",
        "time exponent in graph size (probed forward, CSBM 10^3 ... 10^6 nodes, depth 4)",
        1.1,
        unit="",
    ),
    Target(
        "command_memory",
        "whole-process peak memory of `oversmooth analyze --dataset csbm:n=1000000,degree=10 "
        "--depth 4` (max RSS; the probed forward's extra peak beside it)",
        2.0,
        unit=" GB",
    ),
    *(
        Target(
            f"metric_{metric}_{graph}",
            f"`{metric}` / the float64 one-liner `{ONE_LINERS[metric]}` on {_GRAPHS[graph]}",
            1.0,
        )
        for graph in _GRAPHS
        for metric in ONE_LINERS
    ),
    Target(
        "startup",
        "`oversmooth --version`, `oversmooth --help` and `oversmooth <command> --help` for every "
        "command: the slowest, wall seconds (each in a fresh process, median of 5)",
        0.5,
        unit=" s",
    ),
    Target(
        "sweep_workers",
        "`oversmooth sweep` cells per second with 2 workers / with 1 worker (8 cells; workers "
        "forked from the warm fork server, whose one start per process is timed apart; median "
        "of 5 interleaved pairs)",
        1.8,
        at_least=True,
    ),
)


def _split_text(split: dict[str, float], total: float) -> str:
    parts = sorted(split.items(), key=lambda kv: -kv[1])
    return ", ".join(f"{name} {sec:.2f} s ({100 * sec / total:.0f}%)" for name, sec in parts)


def _end_to_end_value(key: str, r: dict) -> tuple[float, str, str, bool]:
    """The main command against ``import torch`` (CPU time, wall beside it), and where its
    CPU time goes."""
    e = r["end_to_end"]
    if "error" in e:
        return math.nan, MISSING_TEXT, f"the command failed: {e['error']}", False
    measured = (
        f"{e['ratio']:.2f}x CPU ({e['cpu_s']:.2f} s / {e['import_torch_cpu_s']:.2f} s); "
        f"wall {e['wall_ratio']:.2f}x ({e['seconds']:.2f} s / {e['import_torch_s']:.2f} s)"
    )
    reason = f"CPU seconds: {_split_text(e['split_cpu_s'], e['cpu_s'])}; forward + probe "
    reason += f"{e['forward_s']:.2f} s wall of the analysis"
    p = r.get("precision")
    if p and "float64_bare_s" in p:  # the default analysis is float64
        reason += (
            f"; a bare float64 forward of the 256-layer model takes {p['float64_bare_s']:.2f} "
            "s, and the analysis runs one per seed"
        )
    return e["ratio"], measured, reason, False


def _kernel_value(key: str, r: dict) -> tuple[float, str, str, bool]:
    """A default message-passing kernel against the ``edge`` reference."""
    row = next(k for k in r["kernel_ratios"] if key == f"kernel_{k['model']}_{k['conv']}")
    measured = (
        f"{row['ratio']:.2f}x ({row['default_s']:.3f} s / {row['edge_s']:.3f} s; default "
        f"`{row['default_kernel']}`, max rel. diff {row['max_rel_diff']:.1e})"
    )
    if row["default_kernel"] == "edge":
        return row["ratio"], measured, "no faster kernel is the default", True
    if not row["max_rel_diff"] <= row["tolerance"]:
        reason = f"outputs differ: max rel. diff {row['max_rel_diff']:.1e} > "
        return row["ratio"], measured, reason + f"{row['tolerance']:.1e}", True
    reason = (
        f"`{row['default_kernel']}` {row['default_s']:.3f} s against `edge` "
        f"{row['edge_s']:.3f} s per forward"
    )
    if "projections_s" in row:  # what stays whatever the kernel
        reason += (
            f"; without message passing (projections, LayerNorm, FFN only) the forward "
            f"takes {row['projections_s']:.3f} s, so a kernel that cost nothing would give "
            f"{row['projections_s'] / row['edge_s']:.2f}x"
        )
    return row["ratio"], measured, reason, False


def _pyg_value(key: str, r: dict) -> tuple[float, str, str, bool]:
    """The zoo's forward against the same stack of PyG layers."""
    row = next(k for k in r["pyg_ratios"] if key == f"pyg_{k['model']}_{k['conv']}")
    measured = f"{row['ratio']:.2f}x ({row['zoo_s']:.3f} s / {row['pyg_s']:.3f} s)"
    reason = (
        f"the zoo's forward takes {row['zoo_s']:.3f} s, the {row['pyg_layer']} stack "
        f"{row['pyg_s']:.3f} s"
    )
    return row["ratio"], measured, reason, False


def _probe_value(key: str, r: dict) -> tuple[float, str, str, bool]:
    """The default probe's forward against the bare one."""
    po = r["probe_overhead"]
    extra = po["probed_s"] - po["bare_s"]
    measured = f"{po['ratio']:.2f}x ({po['probed_s']:.3f} s / {po['bare_s']:.3f} s)"
    reason = (
        f"the probe adds {extra:.3f} s to a {po['bare_s']:.3f} s forward "
        f"({1e3 * extra / po['depth']:.2f} ms per layer)"
    )
    lines = [m for m in r.get("metric_baselines", []) if m["graph"] == "cora"]
    if lines:  # what the default metrics cost at the speed of the one-liners
        floor = sum(m["one_liner_s"] for m in lines)
        reason += (
            f"; the float64 one-liners of the {len(lines)} default metrics alone take "
            f"{1e3 * floor:.2f} ms per layer on Cora, a ratio of "
            f"{1 + floor * po['depth'] / po['bare_s']:.2f}x at their speed"
        )
    return po["ratio"], measured, reason, False


def _precision_value(key: str, r: dict) -> tuple[float, str, str, bool]:
    """A float64 forward against a float32 one."""
    p = r["precision"]
    measured = f"{p['forward_ratio']:.2f}x"
    reason = f"float64 {p['float64_bare_s']:.3f} s against float32 {p['float32_bare_s']:.3f} s"
    return p["forward_ratio"], measured, reason, False


def _size_value(key: str, r: dict) -> tuple[float, str, str, bool]:
    """The size exponent (``size_exponent``) or the whole command's peak memory at the
    largest size (``command_memory``)."""
    size_rows = [s for s in r["size"] if "error" not in s]
    failed = [s for s in r["size"] if "error" in s]
    if failed:  # a fit or a peak without its sizes would mislead
        return math.nan, MISSING_TEXT, f"{failed[0]['nodes']:,} nodes: {failed[0]['error']}", False
    if key == "size_exponent":
        first, last = size_rows[0], size_rows[-1]
        reason = (
            f"time per node {1e6 * first['seconds'] / first['nodes']:.2f} us at "
            f"{first['nodes']:,} nodes, {1e6 * last['seconds'] / last['nodes']:.2f} us at "
            f"{last['nodes']:,}"
        )
        return r["size_exponent"], f"{r['size_exponent']:.2f}", reason, False
    if key != "command_memory":
        raise KeyError(key)
    last = max(size_rows, key=lambda s: s["nodes"])
    if "process_error" in last:
        return math.nan, MISSING_TEXT, f"the command failed: {last['process_error']}", False
    gb = last["process_peak_mib"] * 2**20 / 1e9
    extra = last["peak_mib"] * 2**20 / 1e9
    measured = f"{gb:.2f} GB at {last['nodes']:,} nodes (probed forward alone: +{extra:.2f} GB)"
    from oversmooth.config import ModelConfig

    state = last["nodes"] * ModelConfig().hidden * 8 / 1e9  # one float64 state of the model
    reason = (
        f"{last['process_peak_mib'] * 2**20 / last['nodes']:.0f} bytes per node for the "
        f"whole command; the probed forward's extra peak alone (float32 model, one seed, "
        f"no similarity matrix) is {extra:.2f} GB; the first seed's float64 twin, which "
        f"measures the float floor, holds one more state of the model ({state:.2f} GB)"
    )
    return gb, measured, reason, False


def _metric_value(key: str, r: dict) -> tuple[float, str, str, bool]:
    """A metric function against its float64 one-liner."""
    graph = key.rsplit("_", 1)[1]
    rows = [m for m in r["metric_baselines"] if m["graph"].startswith(graph)]
    row = next(m for m in rows if key == f"metric_{m['metric']}_{graph}")
    measured = (
        f"{row['ratio']:.2f}x ({1e3 * row['oversmooth_s']:.3f} ms / "
        f"{1e3 * row['one_liner_s']:.3f} ms, {row['nodes']:,} nodes)"
    )
    if not row["rel_diff"] <= 1e-9:
        return row["ratio"], measured, f"values differ: rel. diff {row['rel_diff']:.1e}", True
    gap = 1e6 * (row["oversmooth_s"] - row["one_liner_s"])
    reason = (
        f"oversmooth {1e3 * row['oversmooth_s']:.3f} ms against the one-liner "
        f"{1e3 * row['one_liner_s']:.3f} ms"
    )
    if gap > 0 and row["metric"] in ONE_LINER_GAPS:
        reason += f", {gap:.0f} µs a call more: {ONE_LINER_GAPS[row['metric']]}"
    return row["ratio"], measured, reason, False


#: What a metric function does that its one-liner does not, for a row it misses: the cost
#: at small sizes, where a call is a few tensor operations.
ONE_LINER_GAPS = {
    "mean_cosine_similarity": (
        "it reads each state's row norms to check that their products neither overflow nor "
        "underflow (else it divides unit rows); in the one-liner a row of norm 1e-9 has "
        "cosine 0.01 with itself (each norm is clamped at 1e-8) and a row of norm 1e160 "
        "cosine 0"
    ),
    "feature_norm": (
        "it validates the state and reads the sum of squares to check that no square "
        "overflowed or underflowed (else it rescales); the one-liner gives inf for entries of "
        "1e200 and 0 for entries of 1e-170"
    ),
}


def _startup_value(key: str, r: dict) -> tuple[float, str, str, bool]:
    """The slowest of ``--version``, ``--help`` and every command's ``--help``."""
    st = r["startup"]
    if "error" in st:
        return math.nan, MISSING_TEXT, st["error"], False
    seconds, slowest = st["seconds"], st["slowest"]
    measured = (
        f"{seconds[slowest]:.2f} s (`oversmooth {slowest}`); `--version` "
        f"{seconds['--version']:.2f} s, `--help` {seconds['--help']:.2f} s"
    )
    ranked = sorted(seconds, key=lambda case: -seconds[case])[:3]
    reason = "slowest: " + ", ".join(f"`oversmooth {c}` {seconds[c]:.2f} s" for c in ranked)
    return seconds[slowest], measured, reason, False


def _sweep_value(key: str, r: dict) -> tuple[float, str, str, bool]:
    """Two sweep workers against one."""
    sw = r["sweep"]
    pair = sw.get("pair", 0)  # the median pair (results before pairs: the one run of each)
    runs = {run["workers"]: run for run in sw["runs"] if run.get("pair", 0) == pair}
    errors = [run["error"] for run in sw["runs"] if "error" in run]
    if errors:
        return math.nan, MISSING_TEXT, f"a cell failed: {errors[0]}", False
    measured = (
        f"{sw['ratio']:.2f}x ({runs[2]['cells_per_s']:.2f} / {runs[1]['cells_per_s']:.2f} cells/s)"
    )
    if len(sw.get("ratios", ())) > 1:
        measured += ", median of " + ", ".join(f"{x:.2f}x" for x in sw["ratios"])
    reason = (
        f"{runs[1]['cells']} cells: {runs[1]['cells_s']:.1f} s with 1 worker, "
        f"{runs[2]['cells_s']:.1f} s with 2, on {r['machine'].get('cpu_count')} cores"
    )
    if "steady_ratio" in sw:
        reason += (
            f"; a cell takes {runs[1]['cell_median_s']:.2f} s alone and "
            f"{runs[2]['cell_median_s']:.2f} s beside another ({sw['steady_ratio']:.2f}x "
            f"once started); each run spends {sw['fixed_s']:.2f} s outside its cells "
            f"(starting workers) and {sw.get('warmup_s', math.nan):.2f} s more on a "
            "worker's first cell"
        )
    if "server_start_s" in sw:
        reason += (
            f"; the fork server's start ({sw['server_start_s']:.1f} s, once per process) "
            f"paid by both runs would give {sw.get('cold_ratio', math.nan):.2f}x"
        )
    return sw["ratio"], measured, reason, False


#: target key (or key prefix, ending in ``_``) -> how its value is read from the results
_TARGET_VALUES: tuple[tuple[str, Callable[[str, dict], tuple[float, str, str, bool]]], ...] = (
    ("end_to_end", _end_to_end_value),
    ("kernel_", _kernel_value),
    ("pyg_", _pyg_value),
    ("probe_overhead", _probe_value),
    ("precision", _precision_value),
    ("size_", _size_value),
    ("command_memory", _size_value),
    ("metric_", _metric_value),
    ("startup", _startup_value),
    ("sweep_workers", _sweep_value),
)


def _target_value(key: str, r: dict) -> tuple[float, str, str, bool]:
    """``(value, measured text, reason it is missed, vetoed)`` of one target in ``r`` (the
    results of :func:`run_bench`); ``vetoed``: missed whatever the value (a kernel row whose
    default is the reference itself, or whose outputs differ).  Raises KeyError (or
    StopIteration) when the measurement is absent."""
    for prefix, value in _TARGET_VALUES:
        if key == prefix or (prefix.endswith("_") and key.startswith(prefix)):
            return value(key, r)
    raise KeyError(key)


MISSING_TEXT = "not measured"


def targets(results: dict) -> list[dict]:
    """One row per :data:`TARGETS` entry: ``key``, ``measure``, ``value``, ``measured``
    (text), ``target`` (text), ``bound``, ``status`` (``met``, ``missed`` or ``not
    measured``) and ``reason`` (empty when met)."""
    rows = []
    for t in TARGETS:
        try:
            value, measured, reason, vetoed = _target_value(t.key, results)
        except (KeyError, IndexError, StopIteration):
            value, measured, reason, vetoed = (
                math.nan,
                MISSING_TEXT,
                "not measured in this run",
                True,
            )
        if measured == MISSING_TEXT:
            status = MISSING_TEXT
        else:
            status = "met" if t.passes(value) and not vetoed else "missed"
        rows.append(
            {
                "key": t.key,
                "measure": t.measure,
                "value": value,
                "measured": measured,
                "target": t.text,
                "bound": t.bound,
                "status": status,
                "reason": "" if status == "met" else reason,
            }
        )
    return rows


# ----------------------------------------------------------------------------- driver


def machine(device: torch.device) -> dict:
    from oversmooth.runtime import environment

    env = environment(device)
    env["cpu_count"] = os.cpu_count()
    try:
        with open("/proc/cpuinfo") as fh:
            env["cpu_model"] = next(
                (line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")), ""
            )
    except OSError:
        env["cpu_model"] = platform.processor()
    return env


#: Sections of a bench run, each announced to ``progress`` (its total).
SECTIONS = 10


def _lap(results: dict, progress: Progress | None, message: str | None) -> None:
    """Close the section in progress (its seconds go to ``results["section_s"]``) and, with
    a ``message``, announce it as ``progress(sections done, SECTIONS, message)`` and open
    the next."""
    now = time.perf_counter()
    sections = results.setdefault("section_s", {})
    if "_open" in results:
        name, since = results.pop("_open")
        sections[name] = now - since
    if message is not None:
        if progress is not None:
            progress(len(sections), SECTIONS, message)
        results["_open"] = (message, now)


def run_bench(
    out: str | os.PathLike = "reports/benchmarks",
    *,
    quick: bool = False,
    device: str = "auto",
    progress: Progress | None = None,
    overwrite: bool = False,
    figure_formats: Sequence[str] = ("png",),
    table_formats: Sequence[str] = ("csv",),
) -> dict:
    """Run every benchmark, write ``out`` (report.md, report.html, results.json, CSVs,
    plots) and return the results, whose ``targets`` holds one row per :data:`TARGETS`
    entry.  ``quick``: tiny sizes, a smoke test of every measurement (its statuses say
    nothing about speed).  ``progress(done, total, message)`` is called as each of the
    :data:`SECTIONS` sections starts.  ``figure_formats`` / ``table_formats``: the plots also
    as SVG/PDF, the CSVs also as Parquet (:mod:`oversmooth.report.formats`).

    ``out`` must not exist unless ``overwrite``; that is checked before the benchmarks run."""
    from oversmooth.runtime import resolve_device
    from oversmooth.outputs import check_out
    from oversmooth.report.formats import figure_formats as check_figures
    from oversmooth.report.formats import table_formats as check_tables

    check_out(out, overwrite)
    figures, tables = check_figures(figure_formats), check_tables(table_formats)
    dev = resolve_device(device)
    started = time.perf_counter()
    results: dict = {
        "schema_version": SCHEMA_VERSION,
        "quick": quick,
        "machine": machine(dev),
    }
    _measure_sections(results, dev, quick, progress)
    _scaling_summary(results)
    results["gpu"] = torch.cuda.is_available()
    results["targets"] = targets(results)
    results["seconds"] = time.perf_counter() - started
    _write_bench(Path(out), overwrite, results, figures, tables)
    return results


def _measure_sections(results: dict, dev: torch.device, quick: bool, say: Progress | None) -> None:
    """Every measurement of :func:`run_bench` into ``results``, one section after another,
    each announced to ``say`` and timed (``results["section_s"]``)."""
    from oversmooth.data import csbm, load

    depth = 16 if quick else 256  # the depth-256 models; tiny ones in the smoke test
    _lap(results, say, f"probe overhead (depth-{depth} Post-LN SAN on Cora)")
    results["probe_overhead"] = probe_overhead(dev, depth, repeats=2 if quick else 7)
    _lap(results, say, f"float64 against float32 (depth-{depth} Post-LN SAN on Cora)")
    results["precision"] = precision_cost(dev, depth, repeats=1 if quick else 4)
    mp_depth = 8 if quick else 256  # of the message-passing comparisons
    _lap(results, say, f"default kernel against the edge kernel (depth {mp_depth}, 4 backbones)")
    results["kernel_ratios"] = kernel_ratios(dev, mp_depth, repeats=2 if quick else 5)
    _lap(results, say, f"the zoo against PyG layers (depth {mp_depth}, SAN, GAT, GCN)")
    results["pyg_ratios"] = pyg_ratios(dev, mp_depth, repeats=2 if quick else 5)
    _lap(results, say, "metric kernels against loops, dense matrices and one-liners")
    graphs = [
        ("cora", load("cora")),
        (
            "csbm-5k" if quick else "csbm-100k",
            csbm(n=5_000 if quick else 100_000, degree=10, classes=5, seed=0),
        ),
    ]
    results["kernels"] = metric_kernels(dev, graphs, repeats=1 if quick else 3)
    results["metric_baselines"] = metric_baselines(dev, graphs, repeats=3 if quick else 9)
    _lap(results, say, "scaling in depth")
    depths = [4] if quick else [2, 8, 32, 128, 512]
    results["depth"] = scaling_depth(dev, depths, similarity_too=not quick)
    _lap(results, say, "scaling in graph size")
    sizes = [1_000, 4_000] if quick else [1_000, 10_000, 100_000, 1_000_000]
    results["size"] = scaling_size(dev, sizes, depth=4)
    _lap(results, say, "sweep cells per second with 1 and 2 workers")
    results["sweep"] = (
        sweep_scaling(dev, models=("postln",), depths=(2,), seeds=(0, 1), pairs=1)
        if quick
        else sweep_scaling(dev)
    )
    _lap(results, say, "end to end (the README's main command, and `import torch`)")
    results["end_to_end"] = end_to_end(8 if quick else 256, pairs=1 if quick else 5)
    _lap(results, say, "start-up: --version, --help and every command's --help")
    results["startup"] = startup_times(repeats=1 if quick else 5)
    _lap(results, None, None)


def _scaling_summary(results: dict) -> None:
    """The time exponents in depth (from depth 32 on) and in graph size (every size), and
    the largest peak memory over the smallest across those depths, from the scaling rows."""
    depth_rows = [r for r in results["depth"] if not r["similarity"] and "error" not in r]
    deep = [r for r in depth_rows if r["depth"] >= 32]
    results["depth_exponent"] = _exponent([r["depth"] for r in deep], [r["seconds"] for r in deep])
    size_rows = [r for r in results["size"] if "error" not in r]
    results["size_exponent"] = _exponent(  # the range: every size, 10^3 ... 10^6
        [r["nodes"] for r in size_rows], [r["seconds"] for r in size_rows]
    )
    mems = [r["peak_mib"] for r in deep]
    results["depth_memory_ratio"] = (max(mems) / max(min(mems), 1e-9)) if mems else math.nan


def _write_bench(
    out: Path,
    overwrite: bool,
    results: dict,
    figure_formats: tuple[str, ...],
    table_formats: tuple[str, ...],
) -> None:
    """The folder of :func:`run_bench`: its CSVs, results.json and the report."""
    import pandas as pd

    from oversmooth.outputs import atomic_folder, write_json
    from oversmooth.report.formats import write_table
    from oversmooth.report.writers import write_bench_report

    with atomic_folder(out, overwrite=overwrite, kind="bench") as tmp:
        po = results["probe_overhead"]
        overhead = pd.DataFrame(
            {
                "repeat": range(len(po["bare_all"])),
                "bare_s": po["bare_all"],
                "probed_s": po["probed_all"],
            }
        )
        write_table(overhead, tmp / "probe_overhead.csv", table_formats)
        tables = {
            "kernels": "kernels.csv",
            "depth": "scaling_depth.csv",
            "size": "scaling_size.csv",
            "kernel_ratios": "kernel_ratios.csv",
            "pyg_ratios": "pyg_ratios.csv",
            "metric_baselines": "metric_baselines.csv",
            "targets": "targets.csv",
        }
        for key, name in tables.items():
            frame = pd.DataFrame(results[key])
            write_table(frame, tmp / name, table_formats, float_format="%.6g")
        write_json(tmp / "results.json", results)
        write_bench_report(tmp, results, figure_formats)
