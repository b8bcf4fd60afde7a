#!/usr/bin/env bash
# oversmooth's GPU check in one command (docs/gpu.md).
#
#   scripts/gpu_check.sh                    # on a CUDA machine: report in reports/benchmarks/gpu
#   scripts/gpu_check.sh --device cpu --tiny   # the dry run CI executes (seconds, CPU only)
#
# Runs the main command with --device cuda, checks the metrics against CPU float64 on the
# same states (<= 1e-10 relative), checks that a probed forward makes no host
# synchronisation per layer, times depth 256 and 1024 and a 10^6-node graph, and writes
# report.md and results.json (--out DIR to put them elsewhere).  Exit code 1 when a check
# fails.  Sized for under 5 minutes on one GPU.  PYTHON selects the interpreter (default
# python3).  On a machine whose results come back only from a folder ($OUT on a lent one):
#   scripts/gpu_check.sh --out "$OUT/gpu"
set -euo pipefail
cd "$(dirname "$0")/.."
export MPLBACKEND="${MPLBACKEND:-Agg}"
# this checkout's package, installed or not (a lent GPU machine has torch and PyG but no
# oversmooth); the main command's child process inherits it
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
exec "${PYTHON:-$(command -v python3 || command -v python)}" scripts/gpu_check.py "$@"
