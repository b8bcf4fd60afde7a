"""One-command GPU check: run by scripts/gpu_check.sh (see its header and docs/gpu.md).

python scripts/gpu_check.py [--device cuda|cpu] [--out DIR] [--tiny]

On a CUDA machine (``--device cuda``, the default) it

1. runs the main command, ``oversmooth analyze --model postln --depth 256 --device cuda``,
   in a fresh process;
2. checks the metrics against CPU float64 on the same states: a float64 Post-LN SAN runs on
   the device under a Probe, every layer state is copied to the host, and oversmooth's
   metric functions recompute each column there (``<= 1e-10`` relative);
3. checks that a probed forward makes no host synchronisation per layer: CUDA's sync debug
   mode and the profiler's record of the runtime's synchronising calls count those of a
   probed forward at two depths, for each float-floor method, which must be equal (a
   per-layer sync would add one a layer);
4. times probed forwards at depth 256 and 1024 on Cora and at depth 4 on a 10^6-node CSBM
   (CUDA events, peak device memory);

and writes ``report.md`` and ``results.json`` into ``--out`` (default
``reports/benchmarks/gpu``; a temporary folder with ``--tiny``).  It exits 1 when a check
fails.  ``--device cpu`` is the dry run CI executes (``--tiny``: small sizes, seconds):
every step runs on the CPU, step 3 as a simulation (:func:`simulated_host_reads`: the GPU's
code paths forced, every host read and synchronising aten call counted), and the report goes
to a temporary folder unless ``--out`` is given.
Sized for under 5 minutes on one GPU.
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import torch

#: Largest relative difference allowed between the device's metrics and CPU float64.
TOLERANCE = 1e-10

#: The main command's limit: a hung child must not take a short GPU lease with it.
MAIN_TIMEOUT_S = 240

#: The profiler range around the counted forward: only the runtime calls inside it are counted
#: (the profiler synchronises the device itself when it stops, which a count of every event
#: would take for the positive control).
COUNTED = "gpu_check.counted_forward"


def _sizes(tiny: bool) -> dict:
    if tiny:
        return {
            "main_depth": 4,
            "agree_depth": 6,
            "sync_depths": (2, 4),
            "depths": (8, 16),
            "nodes": 2_000,
            "sync_graph": "karate",  # Cora's counts, in a third to a quarter of the time
        }
    return {
        "main_depth": 256,
        "agree_depth": 64,
        "sync_depths": (8, 32),
        "depths": (256, 1024),
        "nodes": 1_000_000,
        "sync_graph": "cora",
    }


def main_command(device: str, depth: int) -> dict:
    """``oversmooth analyze`` in a fresh process on ``device``: exit code, wall seconds, the
    verdict line."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "oversmooth.cli.main", "analyze", "--model", "postln"]
        cmd += ["--depth", str(depth), "--device", device, "--out", str(Path(tmp) / "run")]
        cmd += ["--quiet", "--json"]
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=MAIN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            seconds = time.perf_counter() - t0
            return {"ok": False, "seconds": seconds, "depth": depth, "verdict": "timed out"}
        seconds = time.perf_counter() - t0
    ok = proc.returncode == 0
    verdict = json.loads(proc.stdout)["verdict"] if ok else proc.stderr.strip()[-500:]
    return {"ok": ok, "seconds": seconds, "depth": depth, "verdict": verdict}


def _states(model: torch.nn.Module) -> tuple[list[torch.Tensor], list]:
    """Hooks that copy every layer state the Probe measures (the first block's input, then
    each block's output) to the host."""
    states: list[torch.Tensor] = []
    blocks = model.blocks  # type: ignore[attr-defined]
    handles = [blocks[0].register_forward_pre_hook(lambda m, a: states.append(a[0].cpu()))]
    for block in blocks:
        handles.append(block.register_forward_hook(lambda m, a, o: states.append(o.cpu())))
    return states, handles


def agreement(device: torch.device, depth: int) -> dict:
    """The Probe's metrics of a float64 model on ``device`` against oversmooth's metric
    functions on CPU float64, on the same layer states: largest relative difference per
    column."""
    from oversmooth import GraphOperator, build_model
    from oversmooth import metrics as M
    from oversmooth.data import load
    from oversmooth.probe import Probe

    data = load("cora")
    model = build_model(
        "postln",
        depth=depth,
        in_channels=data.num_features,
        out_channels=7,
        dtype="float64",
        device=device,
    )
    x, ei = data.x.to(device, torch.float64), data.edge_index.to(device)
    graph = GraphOperator(ei, num_nodes=data.num_nodes)
    states, handles = _states(model)
    try:
        with torch.no_grad(), Probe(model, graph) as probe:
            model(x, ei)
    finally:
        for handle in handles:
            handle.remove()
    frame = probe.to_frame()
    cpu = GraphOperator(data.edge_index, num_nodes=data.num_nodes)
    energies = torch.stack([M.laplacian_energy(s, cpu) for s in states])
    expected = {
        "laplacian_energy": energies,
        "dirichlet_energy": torch.stack([M.dirichlet_energy(s, cpu) for s in states]),
        "feature_norm": torch.stack([M.feature_norm(s) for s in states]),
        "relative_energy": M.relative_energy(energies),
    }
    cosine = [math.nan] + [
        float(M.mean_cosine_similarity(a, b)) for a, b in zip(states[:-1], states[1:], strict=True)
    ]
    for name in ("cosine_prev", "mean_cosine_similarity"):  # the column's name, either
        if name in frame:
            expected[name] = torch.tensor(cosine, dtype=torch.float64)
    worst = {}
    for name, values in expected.items():
        got = torch.tensor(frame[name].to_numpy(), dtype=torch.float64)
        keep = torch.isfinite(values)
        scale = values[keep].abs().clamp_min(1e-300)
        worst[name] = float(((got[keep] - values[keep]).abs() / scale).max())
    return {
        "depth": depth,
        "layers": len(states),
        "max_rel_diff": worst,
        "ok": len(states) == len(frame) and all(v <= TOLERANCE for v in worst.values()),
    }


#: The cases of the CUDA count, (dtype, floor method): the main command's float64 path with
#: each of its float-floor methods (``auto`` resolves to the lazy bound, which keeps no
#: tracker, so the twin's per-layer code was never counted; an audit) and float32's shadow.
SYNC_CASES = (("float64", "bound"), ("float64", "twin"), ("float32", "shadow"))

#: CUDA runtime calls that make the host wait for the device, as the profiler names them: the
#: second count, which also sees what the sync debug mode does not (its torch.sparse calls,
#: which every layer makes; anything under a warnings filter).
RUNTIME_SYNCS = frozenset(
    {"cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy"}
)


def runtime_syncs(names: list[str]) -> int:
    """How many of the profiler's event ``names`` are :data:`RUNTIME_SYNCS`."""
    return sum(name in RUNTIME_SYNCS for name in names)


def counted_names(events: list) -> tuple[list[str], int]:
    """The names of the profiler ``events`` that lie inside a :data:`COUNTED` range (on the
    host's clock; none without such a range), and how many events are CUDA runtime calls at
    all (``cuda`` in their name; 0 says the profiler recorded none, not that none were made)."""
    # the range's host event, not its copy on the GPU's timeline (which can outlast it)
    cpu = torch.autograd.DeviceType.CPU
    spans = [
        (e.time_range.start, e.time_range.end)
        for e in events
        if e.name == COUNTED and e.device_type == cpu
    ]
    inside = [
        e.name
        for e in events
        if e.name != COUNTED
        and any(a <= e.time_range.start and e.time_range.end <= b for a, b in spans)
    ]
    return inside, sum(e.name.startswith("cuda") for e in events)


def _count_syncs(
    device: torch.device,
    depth: int,
    dtype: str = "float64",
    floor: str = "bound",
    control: bool = True,
) -> tuple[int, int, int]:
    """Synchronising calls during one probed forward as the main command runs it (Post-LN,
    the similarity matrix, the float-floor method ``floor``), with ``control`` one ``.item()``
    more, made inside the forward by a hook on the first block, which both counts must see
    (:func:`sync_check` compares the counts with and without it): CUDA's sync debug
    mode's warnings, and the runtime's synchronising calls the profiler records
    (:data:`RUNTIME_SYNCS`) inside the :data:`COUNTED` range; third, how many CUDA runtime
    events the profiler recorded in all (0: it saw none, so the second count means nothing)."""
    from oversmooth import build_model
    from oversmooth.analysis import input_graph, probe_run
    from oversmooth.data import load

    data = load("cora")
    model = build_model(
        "postln",
        depth=depth,
        in_channels=data.num_features,
        out_channels=7,
        device=device,
        dtype=dtype,
    )
    graph = input_graph(data, device)

    def run() -> None:
        probe_run(model, data, graph=graph, similarity=True, floor=floor, seed=0)

    run()  # warm-up: lazily built structures
    torch.cuda.synchronize(device)

    def read_once(module: object, args: object, out: object) -> None:
        torch.ones(1, device=device).item()  # the positive control: one sync, in the forward

    hook = model.blocks[0].register_forward_hook(read_once) if control else None
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    try:
        with (
            warnings.catch_warnings(record=True) as caught,
            torch.profiler.profile(activities=activities) as profiled,
        ):
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                with torch.profiler.record_function(COUNTED):
                    run()
            finally:
                torch.cuda.set_sync_debug_mode("default")
    finally:
        if hook is not None:
            hook.remove()
    warned = sum("synchroniz" in str(w.message) for w in caught)
    inside, cuda_events = counted_names(list(profiled.events()))
    return warned, runtime_syncs(inside), cuda_events


def sync_check(device: torch.device, depths: tuple[int, int], graph: str = "cora") -> dict:
    """CUDA: both counts of :func:`_count_syncs` at two depths, for each of
    :data:`SYNC_CASES` (equal: none per layer), and their rise with the positive control (at
    least one each: a read inside the forward reaches the counts).  Elsewhere: the CPU
    simulation of the GPU's code paths (:func:`simulated_host_reads`) on ``graph``."""
    if device.type != "cuda":
        return simulated_host_reads(depths, graph)
    # each forward counted without, then with the control: the forward makes host reads of its
    # own at its end (the similarity matrix's copy to the host), so only a rise of both counts
    # with the control shows that the counts see a read made inside the forward
    bare, with_control = (
        {
            f"{dtype} {floor}": {
                depth: _count_syncs(device, depth, dtype, floor, control) for depth in depths
            }
            for dtype, floor in SYNC_CASES
        }
        for control in (False, True)
    )
    counts = {
        case: {depth: (warned, runtime) for depth, (warned, runtime, _) in by_depth.items()}
        for case, by_depth in bare.items()
    }
    rises = {
        case: {
            depth: (with_control[case][depth][0] - w, with_control[case][depth][1] - r)
            for depth, (w, r) in by_depth.items()
        }
        for case, by_depth in counts.items()
    }

    def holds(i: int) -> bool:
        """Count ``i`` (0: the sync debug mode's, 1: the profiler's) equal at both depths in
        every case, and raised by the control."""
        return all(
            by_depth[depths[0]][i] == by_depth[depths[1]][i]
            and all(rises[case][depth][i] >= 1 for depth in depths)
            for case, by_depth in counts.items()
        )

    seen = all(min(rise) >= 1 for by_depth in rises.values() for rise in by_depth.values())
    # the profiler recorded no CUDA runtime call at all (a runtime where it cannot)
    runs = (*bare.values(), *with_control.values())
    blind = any(events == 0 for by_depth in runs for *_, events in by_depth.values())
    return {
        "counts": counts,
        "control_rise": rises,
        "control_seen": seen,
        "profiler_blind": blind,
        "warned_ok": holds(0),  # the sync debug mode's count passed on its own
        "ok": holds(0) and holds(1),
    }


# -- the CPU simulation of step 3 ----------------------------------------------------------------

#: aten operators that make a CUDA stream wait for the host: a value read to the host, or an
#: output whose size depends on the values (nonzero, masked selection and boolean indexing,
#: unique, bincount without a size, repeat_interleave without ``output_size``).
SYNC_OPS = frozenset(
    {
        "_local_scalar_dense",  # .item(), float(t), int(t)
        "is_nonzero",  # bool(t)
        "equal",
        "nonzero",
        "masked_select",
        "masked_scatter",
        "_unique",
        "_unique2",
        "unique_dim",
        "unique_consecutive",
        "bincount",
        "histc",
    }
)

#: Tensor methods that hand values to the host whatever the device.
HOST_METHODS = ("cpu", "numpy", "tolist")

#: The simulated cases: (model, conv, dtype, floor method); together they run the three
#: scorers' kernels, the Pre-LN, Post-LN and nonlocal blocks, both float-floor trackers and
#: the similarity matrix.
SIMULATED = (
    ("postln", "san", "float32", "shadow"),
    ("postln", "san", "float64", "twin"),
    ("nonlocal", "gat", "float64", "bound"),
    ("preln", "gcn", "float32", "shadow"),
)


def _sync_op(func: object, args: tuple, kwargs: dict) -> bool:
    """Whether this aten call would synchronise a CUDA stream with the host."""
    name = func._schema.name.split("::")[-1]  # type: ignore[attr-defined]
    if name in SYNC_OPS:
        return True
    if name == "repeat_interleave":  # the tensor-repeats overload, without its output size
        return isinstance(args[0], torch.Tensor) and kwargs.get("output_size") is None
    if name in ("index", "index_put", "index_put_"):  # a boolean mask: a nonzero inside
        return any(getattr(i, "dtype", None) == torch.bool for i in args[1] if i is not None)
    if name == "_to_copy":  # a copy to the host
        device = kwargs.get("device")
        return device is not None and torch.device(device).type == "cpu"
    return False


def _caller() -> str:
    """``path:line`` of the innermost oversmooth frame on the stack."""
    import traceback

    for frame in reversed(traceback.extract_stack()):
        if "oversmooth" in frame.filename and "gpu_check" not in frame.filename:
            return f"{frame.filename.rsplit('src/', 1)[-1]}:{frame.lineno}"
    return "?"


class _HostReads:
    """Counts, by operator and oversmooth source line, every host read and every call a CUDA
    stream would wait on (:data:`SYNC_OPS`, :data:`HOST_METHODS`) while it is entered, with
    the GPU's code paths forced: every ``host_reads_free`` the package imported answers
    False, as for a CUDA tensor."""

    def __enter__(self) -> collections.Counter:
        from torch.utils._python_dispatch import TorchDispatchMode

        from oversmooth import graph

        self.counts: collections.Counter = collections.Counter()
        counts, original = self.counts, graph.host_reads_free
        self._undo: list[tuple[object, str, object]] = []

        def patch(owner: object, name: str, value: object) -> None:
            # a method torch.Tensor inherits is deleted again on exit, not set to its own value
            own = not isinstance(owner, type) or name in vars(owner)
            self._undo.append((owner, name, getattr(owner, name) if own else None))
            setattr(owner, name, value)

        for module in list(sys.modules.values()):
            if module.__name__.startswith("oversmooth") and (
                getattr(module, "host_reads_free", None) is original
            ):
                patch(module, "host_reads_free", lambda x: False)
        for method in HOST_METHODS:

            def counted(self_: torch.Tensor, *a: object, _m: str = method, **k: object) -> object:
                counts[(f"Tensor.{_m}", _caller())] += 1
                return getattr(torch._C.TensorBase, _m)(self_, *a, **k)

            patch(torch.Tensor, method, counted)

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
                kwargs = kwargs or {}
                if _sync_op(func, args, kwargs):
                    counts[(func._schema.name, _caller())] += 1
                return func(*args, **kwargs)

        self._mode = Mode()
        self._mode.__enter__()
        return counts

    def __exit__(self, *exc: object) -> None:
        self._mode.__exit__(*exc)
        for owner, name, value in reversed(self._undo):
            if value is None:
                delattr(owner, name)
            else:
                setattr(owner, name, value)


def _simulated_run(
    case: tuple[str, str, str, str], depth: int, data: object
) -> collections.Counter:
    """The host reads of one probed analysis forward (``probe_run``: Probe, float-floor
    tracker, progress hooks, similarity matrix) of ``case`` at ``depth``, after a warm-up."""
    from oversmooth import build_model
    from oversmooth.analysis import probe_run

    name, conv, dtype, floor = case
    model = build_model(
        name, conv=conv, depth=depth, in_channels=data.num_features, out_channels=7, dtype=dtype
    )
    run = partial(probe_run, model, data, floor=floor, similarity=True)
    run()  # lazily built structures
    with _HostReads() as counts:
        run(progress=lambda *_: None)
    return counts


def simulated_host_reads(depths: tuple[int, int], graph: str = "cora") -> dict:
    """Step 3 without CUDA: each of :data:`SIMULATED` runs a probed analysis forward at the two
    ``depths`` on the CPU on ``graph`` (a dataset name) with the GPU's code paths forced
    (:class:`_HostReads`); the counts of host reads and synchronising calls must be equal (a
    read per layer would add one a layer).  It sees what oversmooth asks of torch, not what a
    CUDA kernel's host code does."""
    from oversmooth.data import load

    data = load(graph)
    counts, growing = {}, []
    for case in SIMULATED:
        runs = {depth: _simulated_run(case, depth, data) for depth in depths}
        label = " ".join(case)
        counts[label] = {depth: sum(c.values()) for depth, c in runs.items()}
        low, high = (runs[d] for d in depths)
        growing += [
            f"{label}: {op} at {where}"
            for op, where in sorted(set(high))
            if high[op, where] > low[op, where]
        ]
    return {"simulated": True, "counts": counts, "per_layer": growing, "ok": not growing}


def timings(device: torch.device, depths: tuple[int, ...], nodes: int) -> list[dict]:
    """Probed forwards (default metrics, float32 model, no float-floor pass), after a
    warm-up: seconds (CUDA events on a GPU) and peak device memory.  The forwards are the
    bench's (:func:`oversmooth.experiments.bench.probed_forward`): Post-LN SAN on Cora at each
    depth, and at depth 4 on a CSBM graph of ``nodes`` nodes."""
    from oversmooth.data import load
    from oversmooth.experiments.bench import Timer, probed_forward

    cases = [("cora", "depth", depth, load("cora").num_nodes, depth) for depth in depths]
    # the graph probed_forward builds, named so that `oversmooth analyze -d` loads the same one
    cases.append((f"csbm:n={nodes},degree=10,classes=5,features=32", "size", nodes, nodes, 4))
    rows = []
    for name, kind, value, num_nodes, depth in cases:
        forward = probed_forward(kind, value, depth, False, device)
        forward()  # warm-up
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        seconds = Timer(device).once(forward)
        peak = torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else None
        rows.append(
            {
                "graph": name,
                "nodes": num_nodes,
                "depth": depth,
                "seconds": seconds,
                "peak_mib": peak,
            }
        )
        del forward
    return rows


def _error(step: dict) -> str:
    """The rest of a report row for a step that raised (empty for one that ran)."""
    return f"error: {step['error']} | failed |" if "error" in step else ""


def _sync_row(s: dict) -> str:
    """The report's row of step 3: CUDA's count, or the CPU simulation's."""
    if "error" in s:
        return "| no host synchronisation per layer in a probed forward | " + _error(s)
    status = "ok" if s["ok"] else "failed"
    if not s.get("simulated"):
        rises = s.get("control_rise", {})
        counts = "; ".join(
            f"{case}: "
            + ", ".join(
                f"depth {d}: {w} warned, {r} runtime"
                + (" (control +{}/+{})".format(*rises[case][d]) if case in rises else "")
                for d, (w, r) in by_depth.items()
            )
            for case, by_depth in s["counts"].items()
        )
        blind = ""
        if s.get("profiler_blind"):
            blind = " The profiler recorded no CUDA runtime call at all here: its count (the second"
            blind += (
                " number) saw nothing, and the sync debug mode's count alone passed (its control"
                " seen, equal at both depths)."
                if s.get("warned_ok")
                else " number) saw nothing, and the sync debug mode's count failed too."
            )
        return (
            "| no host synchronisation per layer in a probed forward (sync debug mode's "
            "warnings; the runtime's synchronising calls, torch.sparse's included) | "
            f"{counts}.{blind} | {status} |"
        )
    cases = "; ".join(
        f"{case}: " + ", ".join(f"depth {d}: {c}" for d, c in by_depth.items())
        for case, by_depth in s["counts"].items()
    )
    growing = f" Per layer: {'; '.join(s['per_layer'])}." if s["per_layer"] else ""
    return (
        "| no host read per layer in a probed analysis forward, simulated on the CPU with the "
        f"GPU's code paths (host reads and synchronising calls) | {cases}.{growing} | {status} |"
    )


def write_report(out: Path, results: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    m, a, s = results["main"], results["agreement"], results["sync"]
    tiny = " --tiny" if results["tiny"] else ""
    same = (
        " (a dry run: the same CPU kernels on both sides, so only the layer count can fail)"
        if results["device"] == "cpu"
        else ""
    )
    sizes = _sizes(results["tiny"])
    main_row = (
        f"| `oversmooth analyze --model postln --depth {sizes['main_depth']} --device "
        f"{results['device']}` | "
    )
    agree_row = (
        f"| metrics on the device against CPU float64, same states (depth "
        f"{sizes['agree_depth']}, <= {TOLERANCE:g} relative){same} | "
    )
    lines = [
        "# oversmooth GPU check",
        "",
        f"`scripts/gpu_check.sh --device {results['device']}{tiny}` in "
        f"{results['seconds']:.0f} s on {results['machine']}; torch {torch.__version__}, "
        f"oversmooth {results.get('oversmooth')} (commit `{results.get('commit') or 'n/a'}`)."
        f" Overall: **{'passed' if results['ok'] else 'FAILED'}**.",
        "",
        "| check | result | status |",
        "|---|---|---|",
        main_row + (_error(m) or f"{m['seconds']:.1f} s | {'ok' if m['ok'] else 'failed'} |"),
        agree_row
        + (
            _error(a)
            or f"largest {max(a['max_rel_diff'].values()):.1e} | {'ok' if a['ok'] else 'failed'} |"
        ),
        _sync_row(s),
        "",
        "Probed forwards (default metrics, float32 model, after a warm-up; one timed run each):",
        "",
    ]
    timed = results["timings"]
    if isinstance(timed, dict):  # the step failed
        lines.append(f"The timings failed: {timed['error']}")
    else:
        lines += ["| graph | nodes | depth | seconds | peak device MiB |", "|---|---|---|---|---|"]
        for t in timed:
            peak = "—" if t["peak_mib"] is None else f"{t['peak_mib']:.0f}"
            lines.append(
                f"| {t['graph']} | {t['nodes']:,} | {t['depth']} | {t['seconds']:.3f} | {peak} |"
            )
    lines += ["", f"Verdict of the main command: {m.get('verdict', m.get('error'))}", ""]
    (out / "report.md").write_text("\n".join(lines))


def run(device_name: str, out: Path, tiny: bool) -> dict:
    started = time.perf_counter()
    device = torch.device(device_name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("error: --device cuda: no CUDA device here; try --device cpu")
    from oversmooth.version import __version__, commit

    sizes = _sizes(tiny)
    results: dict = {
        "device": device_name,
        "tiny": tiny,
        "oversmooth": __version__,
        "commit": commit(),
        "machine": torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU",
    }
    steps: dict[str, Callable[[], Any]] = {
        "main": partial(main_command, device_name, sizes["main_depth"]),
        "agreement": partial(agreement, device, sizes["agree_depth"]),
        "sync": partial(sync_check, device, sizes["sync_depths"], sizes["sync_graph"]),
        "timings": partial(timings, device, sizes["depths"], sizes["nodes"]),
    }
    for name, step in steps.items():
        # a step that fails is recorded and the others still run: one short lease of a GPU
        # machine gives every result it can, and the report is always written
        try:
            results[name] = step()
        except Exception as exc:  # noqa: BLE001 (reported, never hidden)
            results[name] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
            print(f"gpu check: step {name} failed: {results[name]['error']}", file=sys.stderr)
    results["ok"] = all(results[k]["ok"] for k in ("main", "agreement", "sync")) and isinstance(
        results["timings"], list
    )
    results["seconds"] = time.perf_counter() - started
    write_report(out, results)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="oversmooth's GPU check (see docs/gpu.md)")
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu (dry run)")
    parser.add_argument("--out", default=None, help="report folder")
    parser.add_argument("--tiny", action="store_true", help="small sizes (the CI dry run)")
    args = parser.parse_args(argv)
    if args.out is None and torch.device(args.device).type == "cuda" and not args.tiny:
        # a --tiny run's report is no evidence of the full sizes: never the committed folder
        args.out = "reports/benchmarks/gpu"
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="oversmooth-gpu-check-"))
    results = run(args.device, out, args.tiny)
    print(f"gpu check {'passed' if results['ok'] else 'FAILED'}: {out / 'report.md'}")
    return 0 if results["ok"] else 1


if __name__ == "__main__":
    os.environ.setdefault("MPLBACKEND", "Agg")
    sys.exit(main())
