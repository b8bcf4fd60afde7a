"""Time the bare forward of depth-256 models on Cora: the CSR kernel (oversmooth/nn/conv.py)
against the edge-list kernel it replaced (tests/reference_conv.py), interleaved.

    python scripts/bench_kernel.py [--repeats 5] [--depth 256]

Old and new alternate inside every repeat, so background load hits both alike; each row
reports the median time of each and new / old.  Peak RSS is the process's, after all runs.
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import resource
import statistics
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from oversmooth.data import load
from oversmooth.nn.model import DepthModel, build_model

BACKBONES = (("postln", "san"), ("postln", "gat"), ("postln", "gcn"), ("nonlocal", "san"))
REFERENCE = Path(__file__).resolve().parent.parent / "tests" / "reference_conv.py"


def _reference_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_reference_conv", REFERENCE)
    if spec is None or spec.loader is None:
        raise ValueError(f"reference kernel: expected {REFERENCE}; run from a source checkout")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _old_forward(ref: ModuleType, model: DepthModel) -> Any:
    """``(x, edge_index) -> logits`` of ``model`` with every block on the reference kernel."""
    old = copy.deepcopy(model)
    for block in old.blocks:
        mp = block.mp
        twin = ref.MultiHeadMessagePassing(
            mp.channels, mp.heads, mp.conv, nonlocal_=mp.nonlocal_
        ).to(model.decoder.weight.dtype)
        twin.load_state_dict(mp.state_dict())
        block.mp = twin

    def forward(x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        ctx = ref.GraphContext.build(edge_index, x.size(0), dtype=x.dtype)
        return old.decoder(old.run_blocks(old.encoder(x), ctx))

    return forward


def _time(fn: Any, *args: Any) -> tuple[float, torch.Tensor]:
    start = time.perf_counter()
    with torch.no_grad():
        out = fn(*args)
    return time.perf_counter() - start, out


def measure(repeats: int = 5, depth: int = 256, threads: int = 2) -> list[dict]:
    """One row per backbone and dtype: median old/new forward seconds, new / old, and the
    largest relative difference of the logits."""
    torch.set_num_threads(threads)
    ref = _reference_module()
    data = load("cora")
    rows = []
    for dtype in (torch.float32, torch.float64):
        x = data.x.to(dtype)
        for name, conv in BACKBONES:
            model = build_model(
                name,
                conv=conv,
                depth=depth,
                in_channels=data.num_features,
                out_channels=int(data.y.max()) + 1,
            ).to(dtype)
            old = _old_forward(ref, model)
            _time(model, x, data.edge_index), _time(old, x, data.edge_index)  # warm-up
            times: dict[str, list[float]] = {"old": [], "new": []}
            for _ in range(repeats):
                t_old, out_old = _time(old, x, data.edge_index)
                t_new, out_new = _time(model, x, data.edge_index)
                times["old"].append(t_old)
                times["new"].append(t_new)
            diff = (out_new - out_old).abs().max() / out_old.abs().max()
            old_s, new_s = statistics.median(times["old"]), statistics.median(times["new"])
            rows.append(
                {
                    "model": name,
                    "conv": conv,
                    "dtype": str(dtype).removeprefix("torch."),
                    "depth": depth,
                    "old_s": old_s,
                    "new_s": new_s,
                    "new_over_old": new_s / old_s,
                    "max_rel_diff": float(diff),
                }
            )
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--depth", type=int, default=256)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    rows = measure(args.repeats, args.depth, args.threads)
    print(f"{'backbone':<14} {'dtype':<8} {'old s':>8} {'new s':>8} {'new/old':>8} {'rel diff':>9}")
    for r in rows:
        print(
            f"{r['model'] + '-' + r['conv']:<14} {r['dtype']:<8} {r['old_s']:8.3f} "
            f"{r['new_s']:8.3f} {r['new_over_old']:8.3f} {r['max_rel_diff']:9.1e}"
        )
    new = {(r["model"], r["conv"], r["dtype"]): r["new_s"] for r in rows}
    for name, conv in BACKBONES:
        ratio = new[(name, conv, "float64")] / new[(name, conv, "float32")]
        print(f"float64 / float32 (new) {name}-{conv}: {ratio:.2f}")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    print(f"peak RSS: {peak:.0f} MiB")


if __name__ == "__main__":
    sys.exit(main())
