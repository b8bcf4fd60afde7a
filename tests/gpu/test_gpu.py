"""The GPU set (``pytest -m gpu``, skipped without CUDA) and the CPU dry run of
scripts/gpu_check.sh that CI runs."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _gpu_check():
    """scripts/gpu_check.py as a module (scripts are not part of the package)."""
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "scripts" / "gpu_check.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_gpu_check_dry_run_passes_on_the_cpu(tmp_path):
    """What CI runs: every step of the check at tiny sizes on the CPU."""
    out = tmp_path / "gpu"
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu_check.sh"), "--device", "cpu", "--tiny"]
        + ["--out", str(out)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHON": sys.executable},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads((out / "results.json").read_text())
    assert results["ok"] and results["main"]["ok"] and results["agreement"]["ok"]
    assert max(results["agreement"]["max_rel_diff"].values()) <= 1e-10
    assert len(results["timings"]) == 3
    assert results["sync"]["simulated"] and results["sync"]["ok"]
    assert "Overall: **passed**" in (out / "report.md").read_text()


def test_a_disagreeing_metric_fails_the_check(monkeypatch):
    check = _gpu_check()
    from oversmooth import metrics as M

    real = M.feature_norm
    monkeypatch.setattr(M, "feature_norm", lambda x, **k: real(x, **k) * (1 + 1e-8))
    result = check.agreement(torch.device("cpu"), depth=3)
    assert not result["ok"] and result["max_rel_diff"]["feature_norm"] > 1e-9


def test_the_simulated_gpu_paths_read_nothing_per_layer():
    """Step 3 without CUDA: the GPU's code paths, forced on the CPU, at two depths."""
    from oversmooth import graph

    result = _gpu_check().simulated_host_reads((2, 5), "karate")
    assert result["ok"] and not result["per_layer"], result
    assert len(result["counts"]) == 4
    for by_depth in result["counts"].values():
        assert by_depth[2] == by_depth[5] > 0  # the runs' own reads, once per run
    # the patches are gone: CPU shortcuts and torch's own methods are back
    assert graph.host_reads_free(torch.zeros(1))
    assert all(m not in vars(torch.Tensor) for m in ("cpu", "numpy", "tolist"))


@pytest.mark.parametrize(
    "planted",
    [
        lambda x: x.sum().item(),
        lambda x: float(x[0, 0]),
        lambda x: x.cpu(),
        lambda x: x[x > 0],
        lambda x: bool((x > 0).any()),
    ],
    ids=["item", "float", "cpu", "boolean-mask", "bool"],
)
def test_the_simulation_catches_a_host_read_per_layer(monkeypatch, planted):
    """A read planted in the Probe's per-layer record fails the simulated check, and the
    report names the line."""
    from oversmooth.probe import Probe

    real = Probe.record

    def record(self, *args, **kwargs):
        planted(torch.ones(3, 2))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Probe, "record", record)
    check = _gpu_check()
    monkeypatch.setattr(check, "SIMULATED", check.SIMULATED[:1])
    result = check.simulated_host_reads((2, 4), "karate")
    assert not result["ok"]
    assert any("test_gpu.py" in line or "probe.py" in line for line in result["per_layer"])


@pytest.mark.gpu
@CUDA
def test_metrics_on_cuda_match_cpu_float64_on_the_same_states():
    result = _gpu_check().agreement(torch.device("cuda"), depth=16)
    assert result["ok"], result


@pytest.mark.gpu
@CUDA
def test_a_probed_forward_makes_no_host_synchronisation_per_layer():
    result = _gpu_check().sync_check(torch.device("cuda"), (4, 16))
    assert result["ok"], result


@pytest.mark.gpu
@CUDA
def test_analysis_on_cuda_agrees_with_the_cpu(tmp_path):
    from oversmooth.analysis import AnalysisConfig, run_analysis
    from oversmooth.config import ModelConfig

    # float64 on both (float32 would differ by more than the tolerance); AnalysisConfig takes
    # its model as a ModelConfig (it was given depth=, a TypeError on every CUDA machine)
    # depth 16: at 8 too few layers are usable for a law, so both labels were always
    # "inconclusive" and the comparison could not fail (an audit)
    model = ModelConfig("postln", depth=16, dtype="float64")
    runs = {
        device: run_analysis(AnalysisConfig(model=model, seeds=(0, 1), device=device))
        for device in ("cpu", "cuda")
    }
    cpu, gpu = (runs[d].metrics for d in ("cpu", "cuda"))
    assert list(cpu.columns) == list(gpu.columns) and len(cpu) == len(gpu)
    assert runs["cpu"].label == runs["cuda"].label
    # different kernels add in different orders: the states agree to float64 rounding
    energy = torch.tensor(cpu["laplacian_energy"].to_numpy())
    other = torch.tensor(gpu["laplacian_energy"].to_numpy())
    assert torch.allclose(energy, other, rtol=1e-9, atol=0)


def test_the_cuda_sync_count_runs_the_main_commands_path(monkeypatch):
    """The CUDA count's code, run on the CPU with CUDA's calls made no-ops (a typo in it would
    otherwise surface only on a lent GPU): the main command's float64 path (floor check,
    similarity matrix) runs, and with no warning recorded the count is 0, which sync_check
    reads as the control not seen: a failure, not a pass."""
    check = _gpu_check()
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", lambda mode: None)
    for dtype, floor in check.SYNC_CASES:  # each float-floor method's path runs
        for control in (False, True):
            assert check._count_syncs(torch.device("cpu"), 3, dtype, floor, control) == (0, 0, 0)
    monkeypatch.setattr(check, "_count_syncs", lambda device, depth, dtype, floor, c: (0, 0, 9))
    result = check.sync_check(torch.device("cuda"), (3, 6))
    assert result["control_seen"] is False and result["ok"] is False
    # the forward's own reads at its end (the similarity matrix to the host) are in both runs:
    # counts of 1 that the control does not raise are no control seen (an audit)
    monkeypatch.setattr(check, "_count_syncs", lambda device, depth, dtype, floor, c: (1, 1, 9))
    assert check.sync_check(torch.device("cuda"), (3, 6))["control_seen"] is False
    # the runtime count sees only the calls that make the host wait (an async copy does not)
    names = ["cudaStreamSynchronize", "cudaMemcpyAsync", "aten::add", "cudaMemcpy"]
    assert check.runtime_syncs(names) == 2
    # both counts at least the control's, equal at both depths: ok; one more at depth 6: not
    monkeypatch.setattr(
        check, "_count_syncs", lambda device, depth, dtype, floor, c: (1 + c, 2 + c, 9)
    )
    result = check.sync_check(torch.device("cuda"), (3, 6))
    assert result["ok"] is True
    assert "depth 3: 1 warned, 2 runtime (control +1/+1)" in check._sync_row(result)
    monkeypatch.setattr(
        check,
        "_count_syncs",
        lambda device, depth, dtype, floor, c: (1 + c, 2 + c + (depth == 6), 9),
    )
    assert check.sync_check(torch.device("cuda"), (3, 6))["ok"] is False


@pytest.mark.gpu
@CUDA
def test_a_planted_per_layer_sync_fails_the_cuda_check(monkeypatch):
    """The positive test of the CUDA count: a host read in every recorded layer."""
    from oversmooth.probe import Probe

    record = Probe.record

    def reading(self, k, x, *args, **kwargs):
        float(x.double().sum())  # a host read per layer
        return record(self, k, x, *args, **kwargs)

    monkeypatch.setattr(Probe, "record", reading)
    assert not _gpu_check().sync_check(torch.device("cuda"), (4, 16))["ok"]


def test_full_and_tiny_sizes_name_the_same_steps():
    """The full sizes lacked a key the tiny ones had: the first full run on a GPU would have
    crashed after its main command (an audit)."""
    check = _gpu_check()
    assert check._sizes(False).keys() == check._sizes(True).keys()


class _Event:
    def __init__(self, name, start, end, device_type=torch.autograd.DeviceType.CPU):
        self.name, self.device_type = name, device_type
        self.time_range = type("Interval", (), {"start": start, "end": end})()


def test_the_runtime_count_reads_only_the_counted_forward():
    """The profiler synchronises the device itself as it stops (cudaDeviceSynchronize after
    the block): counted, it passed the positive control whatever the forward's calls were."""
    check = _gpu_check()
    events = [
        _Event("cudaStreamSynchronize", 5, 6),  # before the range
        _Event(check.COUNTED, 10, 100),
        _Event("cudaStreamSynchronize", 20, 21),  # the control's, inside
        _Event("cudaLaunchKernel", 30, 31),
        _Event("cudaDeviceSynchronize", 120, 121),  # the profiler's own, after
        # the range's copy on the GPU's timeline, which can outlast the host's range
        _Event(check.COUNTED, 10, 200, torch.autograd.DeviceType.CUDA),
    ]
    inside, cuda = check.counted_names(events)
    assert check.runtime_syncs(inside) == 1 and cuda == 4
    assert check.counted_names([_Event("aten::add", 0, 1)]) == ([], 0)  # no range: nothing


def test_a_blind_profiler_is_named_in_the_report(monkeypatch):
    check = _gpu_check()
    monkeypatch.setattr(check, "_count_syncs", lambda device, depth, dtype, floor, c: (1 + c, 0, 0))
    result = check.sync_check(torch.device("cuda"), (3, 6))
    assert not result["ok"] and result["profiler_blind"] and result["warned_ok"]
    assert "recorded no CUDA runtime call" in check._sync_row(result)
    assert "sync debug mode's count alone passed" in check._sync_row(result)
    # a sync per layer that the debug mode saw is not put on the profiler (an audit)
    monkeypatch.setattr(
        check, "_count_syncs", lambda device, depth, dtype, floor, c: (depth + c, 0, 0)
    )
    result = check.sync_check(torch.device("cuda"), (3, 6))
    assert result["profiler_blind"] and not result["warned_ok"]
    assert "the sync debug mode's count failed too" in check._sync_row(result)


def test_a_failing_step_leaves_the_others_and_the_report(tmp_path, monkeypatch):
    """One exception lost every result and the report of a whole GPU lease (an audit)."""
    check = _gpu_check()
    monkeypatch.setattr(
        check,
        "main_command",
        lambda device, depth: {"ok": True, "seconds": 1.0, "depth": depth, "verdict": "v"},
    )

    def broken(*args):
        raise RuntimeError("planted")

    monkeypatch.setattr(check, "agreement", broken)
    monkeypatch.setattr(
        check,
        "sync_check",
        lambda *a: {"ok": True, "simulated": True, "counts": {}, "per_layer": []},
    )
    monkeypatch.setattr(check, "timings", broken)
    results = check.run("cpu", tmp_path, tiny=True)
    assert not results["ok"] and results["main"]["ok"] and results["sync"]["ok"]
    assert results["agreement"] == {"ok": False, "error": "RuntimeError: planted"}
    report = (tmp_path / "report.md").read_text()
    assert "error: RuntimeError: planted | failed |" in report
    assert "The timings failed: RuntimeError: planted" in report
    assert json.loads((tmp_path / "results.json").read_text())["ok"] is False
