"""Benchmark building blocks on tiny inputs (the benchmarks themselves run with
`oversmooth bench`)."""

from __future__ import annotations

import math

import torch

from oversmooth import bench
from oversmooth.data import karate


def test_timer_measures_positive_medians():
    timer = bench.Timer(torch.device("cpu"))
    assert timer.median(lambda: sum(range(1000)), repeats=3) > 0


def test_kernel_alternatives_agree_with_oversmooth():
    rows = bench.metric_kernels(torch.device("cpu"), [("karate", karate())], repeats=1)
    assert {r["metric"] for r in rows} == {"dirichlet_energy", "mad"}
    for r in rows:
        assert r["loop_rel_diff"] < 1e-12 and r["dense_rel_diff"] < 1e-12
        assert r["oversmooth_s"] > 0 and r["loop_s"] > 0
    big = bench.metric_kernels(
        torch.device("cpu"), [("karate", karate())], repeats=1, dense_limit=10
    )
    assert all("skipped" in r["dense_note"] and math.isnan(r["dense_s"]) for r in big)


def test_probe_overhead_and_isolated_measurement():
    po = bench.probe_overhead(torch.device("cpu"), depth=4, repeats=2)
    assert po["bare_s"] > 0 and po["ratio"] > 0 and len(po["probed_all"]) == 2
    (row,) = bench.scaling_depth(torch.device("cpu"), [2], similarity_too=False)
    assert "error" not in row, row
    assert row["seconds"] > 0 and row["peak_mib"] >= 0


def test_precision_cost_times_both_precisions_side_by_side(tmp_path):
    p = bench.precision_cost(torch.device("cpu"), depth=2, repeats=1)
    for key in ("float32_bare_s", "float64_bare_s", "float32_shadow_s", "float64_twin_s"):
        assert p[key] > 0
    assert p["forward_ratio"] == p["float64_bare_s"] / p["float32_bare_s"]
    from oversmooth.report.writers import write_bench_report

    write_bench_report(tmp_path, {**_minimal_results(), "precision": p})
    text = (tmp_path / "report.md").read_text()
    assert "Precision: float64 against float32" in text


def _minimal_results() -> dict:
    machine = {
        "cpu_model": "cpu",
        "cpu_count": 1,
        "torch_threads": 1,
        "device": "cpu",
        "torch": "t",
        "torch_geometric": "g",
        "oversmooth": "o",
    }
    po = {"depth": 2, "repeats": 1, "bare_s": 1.0, "probed_s": 1.0, "ratio": 1.0, "met": True}
    return {
        "quick": True,
        "seconds": 1.0,
        "machine": machine,
        "probe_overhead": po,
        "kernels": [],
        "depth": [],
        "size": [],
        "depth_exponent": 1.0,
        "depth_memory_ratio": 1.0,
        "size_exponent": 1.0,
    }
