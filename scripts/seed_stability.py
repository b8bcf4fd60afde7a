"""Stability of the verdict over seeds: zoo models at depth 256 on Cora, 10 seeds.

python scripts/seed_stability.py OUT.json [--seeds 10] [--depth 256]

For each model, runs one analysis with seeds 0..N-1 (float64, the default floor), then
decides the verdict on the 10-seed table and on every 3-seed (and 5-seed) subset, and counts
how many subsets contradict the all-seed label (a different definite label; `inconclusive`
never contradicts).  Also records each seed's late halving length (last quarter of its own
float64 curve) and whether the pooled interval covers the pooled late value.
"""

from __future__ import annotations

import itertools
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
from oversmooth.config import ModelConfig


def main() -> int:
    from oversmooth.analysis import AnalysisConfig, run_analysis
    from oversmooth.outputs import read_table
    from oversmooth.report.prose import verdict_text
    from oversmooth.verdict import verdict

    out = sys.argv[1]
    n_seeds = int(sys.argv[sys.argv.index("--seeds") + 1]) if "--seeds" in sys.argv else 10
    depth = int(sys.argv[sys.argv.index("--depth") + 1]) if "--depth" in sys.argv else 256
    record = {}
    for model in ("postln", "preln", "nonlocal"):
        started = time.perf_counter()
        cache = Path(out).with_name(f"{Path(out).stem}-{model}-{depth}-{n_seeds}.csv")
        if cache.is_file():  # the forwards are the slow part: reuse a previous run's table
            frame = read_table(cache)
        else:
            result = run_analysis(
                AnalysisConfig(
                    model=ModelConfig(model, depth=depth, dtype="float64"),
                    seeds=tuple(range(n_seeds)),
                    device="cpu",
                    similarity=False,
                )
            )
            frame = result.metrics
            frame.to_csv(cache, index=False)
        seconds = time.perf_counter() - started
        full = verdict(frame, dtype="float64")
        row = {"seconds": seconds, "label": full.label, "summary": verdict_text(full)}
        for size in (3, 5):
            labels = []
            for subset in itertools.combinations(range(n_seeds), size):
                part = frame[frame["seed"].isin(subset)]
                labels.append(verdict(part, dtype="float64").label)
            definite = [lab for lab in labels if lab != "inconclusive"]
            contradict = (
                sum(lab != full.label for lab in definite)
                if full.label != "inconclusive"
                else len({*definite}) > 1 and len(definite)
            )
            row[f"subsets_{size}"] = {
                "count": len(labels),
                "contradicting": int(contradict),
                "labels": {lab: labels.count(lab) for lab in sorted(set(labels))},
            }
        # each seed's own late halving length (last quarter, least squares on log E)
        lates = []
        for s in range(n_seeds):
            part = frame[(frame["seed"] == s) & (frame["layer"] >= depth * 3 // 4)]
            slope = np.polyfit(part["layer"], np.log(part["laplacian_energy"]), 1)[0]
            lates.append(math.log(2) / -slope if slope < 0 else None)
        row["late_halving_per_seed"] = lates
        if full.rate is not None:
            row["rate"] = {"value": full.rate.value, "interval": list(full.rate.interval)}
        record[model] = row
        print(model, json.dumps(row)[:400], flush=True)
    with open(out, "w") as fh:
        json.dump(record, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
