"""Benchmark building blocks on tiny inputs (the benchmarks themselves run with `oversmooth bench`)."""

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
    big = bench.metric_kernels(torch.device("cpu"), [("karate", karate())], repeats=1, dense_limit=10)
    assert all("skipped" in r["dense_note"] and math.isnan(r["dense_s"]) for r in big)


def test_probe_overhead_and_isolated_measurement():
    po = bench.probe_overhead(torch.device("cpu"), depth=4, repeats=2)
    assert po["bare_s"] > 0 and po["ratio"] > 0 and len(po["probed_all"]) == 2
    (row,) = bench.scaling_depth(torch.device("cpu"), [2], similarity_too=False)
    assert "error" not in row, row
    assert row["seconds"] > 0 and row["peak_mib"] >= 0
