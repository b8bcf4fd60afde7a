"""Benchmarks: probe overhead, metric kernels against the usual alternatives,
scaling in depth and graph size, and the README's main command end to end.

Timing: medians over repeats after one warm-up run; on CUDA with CUDA events
(``torch.cuda.Event``) around the timed region, so no host synchronisation
distorts the numbers.  Peak memory: on CUDA ``torch.cuda.max_memory_allocated``;
on the CPU each measurement runs in a fresh process, resets the kernel's
peak-RSS counter (``/proc/self/clear_refs``) after setup and reads ``VmHWM``,
so the number is the extra resident memory of the measured work.

Run ``oversmooth bench`` (full, about 5 minutes on 2 cores) or
``oversmooth bench --quick`` (under a minute); results go to
``reports/benchmarks/`` as ``report.md``, CSV files and plots.
"""

from __future__ import annotations

import math
import multiprocessing as mp
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING
from collections.abc import Callable

import numpy as np
import torch
from numpy.typing import ArrayLike

if TYPE_CHECKING:
    from multiprocessing.queues import Queue

    from torch_geometric.data import Data

    from oversmooth.nn.model import DepthModel

__all__ = [
    "run_bench",
    "Timer",
    "probe_overhead",
    "metric_kernels",
    "scaling_depth",
    "scaling_size",
    "end_to_end",
]


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
    bare_t, probed_t = [], []
    for _ in range(repeats):  # interleaved, so drifts in machine load hit both
        bare_t.append(timer.once(bare))
        probed_t.append(timer.once(probed))
    b, p = statistics.median(bare_t), statistics.median(probed_t)
    return {
        "depth": depth,
        "bare_s": b,
        "probed_s": p,
        "ratio": p / b,
        "target": 1.3,
        "met": p / b <= 1.3,
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
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeats):  # interleaved, so drifts in machine load hit all of them
        for name, fn in runs.items():
            times[name].append(timer.once(fn))
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
        src, dst = data.edge_index.numpy()
        order = np.argsort(dst, kind="stable")
        splits = np.cumsum(np.bincount(dst, minlength=n))[:-1]
        neighbours = np.split(src[order], splits)
        xn = x.numpy()
        for metric, ours, loop, dense in (
            (
                "dirichlet_energy",
                partial(dirichlet_energy, xd, g),
                partial(_loop_dirichlet, xn, neighbours),
                _dense_dirichlet,
            ),
            (
                "mad",
                partial(mean_average_distance, xd, g),
                partial(_loop_mad, xn, neighbours),
                _dense_mad,
            ),
        ):
            t_ours = timer.median(ours, repeats)
            value = float(ours())
            t0 = time.perf_counter()
            loop_value = loop()
            t_loop = time.perf_counter() - t0  # one run: it is the slow one
            row = {
                "graph": name,
                "nodes": n,
                "edges": int(data.edge_index.size(1)),
                "metric": metric,
                "oversmooth_s": t_ours,
                "loop_s": t_loop,
                "loop_speedup": t_loop / t_ours,
                "loop_rel_diff": abs(loop_value - value) / max(abs(value), 1e-300),
            }
            if n <= dense_limit:
                adj = torch.zeros(n, n, dtype=torch.float64, device=device)
                adj[data.edge_index[1].to(device), data.edge_index[0].to(device)] = 1.0
                t_dense = timer.median(partial(dense, xd, adj), repeats)
                dense_value = float(dense(xd, adj))
                row.update(
                    {
                        "dense_s": t_dense,
                        "dense_speedup": t_dense / t_ours,
                        "dense_rel_diff": abs(dense_value - value) / max(abs(value), 1e-300),
                        "dense_note": "",
                    }
                )
                del adj
            else:
                gib = n * n * 8 / 2**30
                row.update(
                    {
                        "dense_s": math.nan,
                        "dense_speedup": math.nan,
                        "dense_rel_diff": math.nan,
                        "dense_note": f"skipped: the n x n float64 matrix needs {gib:,.0f} GiB",
                    }
                )
            rows.append(row)
    return rows


# ----------------------------------------------------------------------------- 3. scaling


def _rss_kib(field: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def _measure_child(
    kind: str, value: int, depth: int, similarity: bool, device: str, queue: Queue
) -> None:
    """Runs in a fresh process: build, reset the peak counter, time one probed forward."""
    try:
        torch.set_num_threads(
            int(os.environ.get("OVERSMOOTH_BENCH_THREADS", torch.get_num_threads()))
        )
        from oversmooth import GraphOperator, build_model
        from oversmooth.analysis import probe_run
        from oversmooth.data import csbm, load

        dev = torch.device(device)
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
            device=dev,
        )
        data = data.to(dev)
        graph = GraphOperator(data.edge_index, num_nodes=data.num_nodes)

        def run() -> None:
            probe_run(model, data, graph=graph, similarity=similarity, floor="bound")

        if dev.type == "cpu":
            # first run: extra peak memory, with glibc returning every block above 64 KiB to the
            # OS on free so that RSS follows live memory; then the default allocator policy back,
            # a warm-up run and the timed run
            _mmap_threshold(64 * 1024)
            try:
                with open("/proc/self/clear_refs", "w") as fh:
                    fh.write("5")  # reset VmHWM to the current RSS
                reset = True
            except OSError:
                reset = False
            before = _rss_kib("VmRSS") if reset else _rss_kib("VmHWM")
            run()
            peak = (_rss_kib("VmHWM") - before) / 1024.0
            _mmap_threshold(32 * 1024 * 1024)
            run()
            t0 = time.perf_counter()
            run()
            seconds = time.perf_counter() - t0
            queue.put({"seconds": seconds, "peak_mib": peak, "peak_reset": reset})
        else:
            run()
            torch.cuda.reset_peak_memory_stats(dev)
            base = torch.cuda.memory_allocated(dev)
            seconds = Timer(dev).once(run)
            queue.put(
                {
                    "seconds": seconds,
                    "peak_mib": (torch.cuda.max_memory_allocated(dev) - base) / 2**20,
                    "peak_reset": True,
                }
            )
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        queue.put({"error": f"{type(exc).__name__}: {exc}"})


def _mmap_threshold(size: int) -> bool:
    """glibc's M_MMAP_THRESHOLD through mallopt (False where unavailable)."""
    try:
        import ctypes

        return bool(ctypes.CDLL("libc.so.6").mallopt(-3, size))  # M_MMAP_THRESHOLD = -3
    except (OSError, AttributeError):
        return False


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
    return [
        {"nodes": n, "depth": depth, **_isolated("size", n, depth, False, device)} for n in sizes
    ]


# ----------------------------------------------------------------------------- 4. end to end


def end_to_end(repeats: int = 1) -> dict:
    """Wall time of ``oversmooth analyze --model postln --depth 256`` in a fresh process."""
    times = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(repeats):
            cmd = [
                sys.executable,
                "-m",
                "oversmooth.cli.main",
                "analyze",
                "--model",
                "postln",
                "--depth",
                "256",
                "--out",
                str(Path(tmp) / f"r{i}"),
                "--quiet",
                "--device",
                "cpu",
            ]
            t0 = time.perf_counter()
            proc = subprocess.run(cmd, capture_output=True, text=True)
            times.append(time.perf_counter() - t0)
            if proc.returncode != 0:
                return {
                    "command": "oversmooth analyze --model postln --depth 256",
                    "error": proc.stderr.strip()[-300:],
                }
            verdict = proc.stdout.splitlines()[0] if proc.stdout else ""
    return {
        "command": "oversmooth analyze --model postln --depth 256",
        "seconds": statistics.median(times),
        "repeats": repeats,
        "verdict": verdict,
        "target_s": 60.0,
    }


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


def run_bench(
    out: str | os.PathLike = "reports/benchmarks",
    *,
    quick: bool = False,
    device: str = "auto",
    progress: Callable[[str], None] | None = None,
    overwrite: bool = False,
) -> dict:
    """Run every benchmark, write ``out`` (report.md, CSVs, plots) and return the results.

    ``out`` must not exist unless ``overwrite``; that is checked before the benchmarks run."""
    import pandas as pd

    from oversmooth.runtime import resolve_device
    from oversmooth.data import csbm, load
    from oversmooth.outputs import atomic_folder, check_out, write_json
    from oversmooth.report.writers import write_bench_report

    check_out(out, overwrite)
    dev = resolve_device(device)
    say = progress or (lambda msg: None)
    started = time.perf_counter()
    results: dict = {"quick": quick, "machine": machine(dev)}
    say("probe overhead (depth-256 Post-LN SAN on Cora)")
    results["probe_overhead"] = probe_overhead(dev, 256, repeats=3 if quick else 7)
    say("float64 against float32 (Post-LN SAN on Cora)")
    results["precision"] = precision_cost(dev, 64 if quick else 256, repeats=2 if quick else 5)
    say("metric kernels")
    graphs = [
        ("cora", load("cora")),
        (
            "csbm-20k" if quick else "csbm-100k",
            csbm(n=20_000 if quick else 100_000, degree=10, classes=5, seed=0),
        ),
    ]
    results["kernels"] = metric_kernels(dev, graphs, repeats=3)
    depths = [8, 32, 64, 128] if quick else [2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
    say("scaling in depth")
    results["depth"] = scaling_depth(dev, depths, similarity_too=not quick)
    sizes = [1_000, 10_000, 50_000] if quick else [1_000, 10_000, 100_000, 1_000_000]
    say("scaling in graph size")
    results["size"] = scaling_size(dev, sizes, depth=4)
    if not quick:
        say("end to end (the README's main command)")
        results["end_to_end"] = end_to_end()
    depth_rows = [r for r in results["depth"] if not r["similarity"] and "error" not in r]
    results["depth_exponent"] = _exponent(
        [r["depth"] for r in depth_rows if r["depth"] >= 32],
        [r["seconds"] for r in depth_rows if r["depth"] >= 32],
    )
    size_rows = [r for r in results["size"] if "error" not in r]
    results["size_exponent"] = _exponent(
        [r["nodes"] for r in size_rows if r["nodes"] >= 10_000],
        [r["seconds"] for r in size_rows if r["nodes"] >= 10_000],
    )
    mems = [r["peak_mib"] for r in depth_rows if r["depth"] >= 32]
    results["depth_memory_ratio"] = (max(mems) / max(min(mems), 1e-9)) if mems else math.nan
    results["seconds"] = time.perf_counter() - started
    with atomic_folder(Path(out), overwrite=overwrite) as tmp:
        po = results["probe_overhead"]
        pd.DataFrame(
            {
                "repeat": range(len(po["bare_all"])),
                "bare_s": po["bare_all"],
                "probed_s": po["probed_all"],
            }
        ).to_csv(tmp / "probe_overhead.csv", index=False)
        pd.DataFrame(results["kernels"]).to_csv(
            tmp / "kernels.csv", index=False, float_format="%.6g"
        )
        pd.DataFrame(results["depth"]).to_csv(
            tmp / "scaling_depth.csv", index=False, float_format="%.6g"
        )
        pd.DataFrame(results["size"]).to_csv(
            tmp / "scaling_size.csv", index=False, float_format="%.6g"
        )
        write_json(tmp / "results.json", results)
        write_bench_report(tmp, results)
    return results
