"""Refuse work that cannot fit, before allocating it.

One mechanism for every place that allocates in proportion to user input
(synthetic generators, user CSV/.pt files, the graph operator, the model,
higher-order energies): estimate the bytes first, compare them with what the
machine has, and raise :class:`ResourceError` (a ``ValueError``, so the CLI
exits 2) with one line saying how much the work would need and how much is
available.  Work that fits is never refused.

Available memory is ``MemAvailable`` from ``/proc/meminfo`` (psutil where that
file does not exist); on a CUDA device it is the free memory that
``torch.cuda.mem_get_info`` reports.  ``OVERSMOOTH_MEMORY_LIMIT`` (bytes, or
with a K/M/G/T suffix) lowers the limit, e.g. on a shared machine.

The estimates are peak sizes, rounded up: an estimate that is a few times too
high only refuses work within a few times the machine's memory, which would
have failed or thrashed anyway.
"""

from __future__ import annotations

import ctypes
import os
import re
from typing import Any

import torch

from oversmooth.registry import MAX_ENERGY_ORDER

__all__ = [
    "ResourceError",
    "similarity_bytes",
    "MAX_ENERGY_ORDER",
    "available_memory",
    "host_available",
    "format_bytes",
    "check_allocation",
    "graph_bytes",
    "operator_bytes",
    "model_bytes",
    "analysis_bytes",
    "BY_HEAD_VALUES",
    "release_heap",
    "check_energy_order",
]


# Python objects of one block (modules, parameters, hooks' bookkeeping): measured about
# 8-75 KB at hidden=32 on CPython 3.12 / torch 2.13, on top of the parameter storage.
_BLOCK_OVERHEAD = 80 * 1024


class ResourceError(ValueError):
    """The requested work needs more memory (or time) than the machine has."""


def release_heap() -> None:
    """Hand the heap memory already freed back to the system: glibc's ``malloc_trim(0)``,
    which also returns the free pages between live blocks (a no-op where the C library has
    none).  Arrays below glibc's mmap threshold (up to 32 MiB) come from the heap, and the
    holes the temporaries of one block of a large forward leave there stay resident until
    trimmed (about 0.15 GB at 10^6 nodes)."""
    global _TRIM
    if _TRIM is None:
        try:
            _TRIM = ctypes.CDLL(None).malloc_trim
        except (AttributeError, OSError, TypeError):  # no glibc; Windows takes no None
            _TRIM = False
    if _TRIM:
        _TRIM(0)


_TRIM: Any = None  # libc's malloc_trim once looked up (False: none)


def format_bytes(n: float) -> str:
    """``8.0 TB``, ``36.0 GB``, ``512.0 MB`` (decimal units, as memory is advertised); past a
    million TB, ``6.4e+49 TB`` (a 50-digit number read as nothing at all)."""
    if abs(n) >= 1e18:
        return f"{n / 1e12:.1e} TB"
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} bytes"


def _limit_from_env() -> int | None:
    text = os.environ.get("OVERSMOOTH_MEMORY_LIMIT", "").strip()
    if not text:
        return None
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([KMGT]?)B?", text, flags=re.IGNORECASE)
    if not match:
        raise ValueError(
            f"OVERSMOOTH_MEMORY_LIMIT: expected bytes like 8000000000 or 8G, received {text!r}"
        )
    scale = {"": 1, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}[match.group(2).upper()]
    return int(float(match.group(1)) * scale)


def host_available() -> int | None:
    """Bytes of host memory available for new allocations (``MemAvailable`` of
    ``/proc/meminfo``, else psutil's), or ``None`` when the machine does not say; the
    memory limit of ``OVERSMOOTH_MEMORY_LIMIT`` is not applied here (see
    :func:`available_memory`)."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except Exception:  # noqa: BLE001 - no way to know; do not refuse
        return None


def available_memory(device: torch.device | str | None = None) -> int | None:
    """Bytes available for new allocations on ``device`` (host RAM unless CUDA),
    or ``None`` when the machine does not say."""
    device = torch.device(device) if device is not None else torch.device("cpu")
    found: int | None
    if device.type == "cuda" and torch.cuda.is_available():
        free, _total = torch.cuda.mem_get_info(device)
        found = int(free)
    else:
        found = host_available()
    limit = _limit_from_env()
    if limit is not None:
        found = limit if found is None else min(found, limit)
    return found


def check_allocation(
    what: str, nbytes: float, device: torch.device | str | None = None, hint: str = ""
) -> None:
    """Raise :class:`ResourceError` when ``nbytes`` exceed the memory available on ``device``.

    Args:
        what: the thing being built, as the user named it (``"csbm:n=1000000000000"``).
        nbytes: its estimated peak size in bytes.
        device: where it will live (host RAM unless a CUDA device).
        hint: what to try instead, appended to the message.
    """
    have = available_memory(device)
    if have is None or nbytes <= have:
        return
    where = "GPU memory" if torch.device(device or "cpu").type == "cuda" else "memory"
    raise ResourceError(
        f"{what}: would need about {format_bytes(nbytes)} of {where}, but this machine has "
        f"{format_bytes(have)} available; {hint or 'ask for less'}"
    )


def graph_bytes(num_nodes: int, num_edges: int, num_features: int, element_size: int = 4) -> int:
    """Peak bytes to build a graph: ``num_edges`` directed int64 edges (with the sort and
    de-duplication workspace of :func:`oversmooth.data._symmetric` and the generators'
    temporaries, about 4 copies) and a
    ``num_nodes x num_features`` feature matrix (2 copies while it is formed), plus a few
    int64 vectors per node (labels, permutations)."""
    return int(4 * 2 * 8 * num_edges + 2 * element_size * num_nodes * num_features + 48 * num_nodes)


def operator_bytes(num_nodes: int, num_edges: int) -> int:
    """Peak bytes of :class:`oversmooth.graph.GraphOperator`: float64 degrees and weights,
    int64 indices, and the COO then CSR copies of ``P`` (about 80 bytes an edge, 40 a node)."""
    return int(80 * num_edges + 40 * num_nodes)


def model_bytes(
    depth: int,
    hidden: int,
    in_channels: int,
    out_channels: int,
    ffn: int | None = None,
    element_size: int = 4,
    python_objects: bool = True,
) -> int:
    """Bytes of a zoo model: per block ``4 d^2`` attention and ``2 d f`` FFN parameters,
    plus (host memory only, ``python_objects``) the Python objects of the block; encoder
    and decoder."""
    ffn = 2 * hidden if ffn is None else ffn
    per_block = element_size * (4 * hidden * hidden + 2 * hidden * ffn + 16 * hidden)
    per_block += _BLOCK_OVERHEAD if python_objects else 0
    ends = element_size * (in_channels * hidden + hidden * out_channels + 2 * hidden)
    return int(depth * per_block + ends)


# Whole-process peak of `oversmooth analyze` (maximum resident set), measured on
# csbm:n=N,degree=10 (E = 10 N directed edges, 32 float32 features), depth 4, hidden 32,
# heads 4, float64, five seeds with the similarity matrix, CPU, torch 2.13: N = 1e4: 435 MiB,
# 1e5: 710 MiB, 1e6: 1.68 GiB (tests/test_resources.py; 3.18 GiB at 10^6 before attention ran
# head by head, the FFN, LayerNorm and row dot products in blocks of rows, and the features
# stayed float32; 4.52 GiB before the forward freed its attention temporaries early and the
# similarity's rows went to files past 64 MiB).  At 10^6 nodes the peak is inside a block's
# attention or the probe's edge pass: the process (~0.3 GiB), the graph (edge list, features:
# 0.3 GiB), the operator (0.1 GiB), the model's per-forward structures (the edge list with
# self loops, the one-head plan: 0.3 GiB), the block's input and the heads' outputs, one
# head's keys, scores and values (queries and products a block of rows at a time).
# Attention runs head by head above BY_HEAD_VALUES values (heads times edges), so the edge
# term is per edge there and per head and edge below.
_PROCESS_BASE = 560 * 2**20  # the interpreter with torch, numpy, pandas, scipy, matplotlib
_EDGE_VALUES_AT_PEAK = 7  # values per head and edge (self loops included) alive at the peak
_EDGE_VALUES_BY_HEAD = 4  # values per edge alive at the peak when attention runs head by head
_NODE_STATES_AT_PEAK = 5  # [num_nodes, hidden] states alive at the peak
#: Above this many attention values (heads times edges) the zoo's attention runs head by head
#: without autograd (oversmooth.nn.conv reads it from here): the estimate splits there too.
BY_HEAD_VALUES = 1 << 22


def analysis_bytes(
    num_nodes: int,
    num_edges: int,
    num_features: int,
    heads: int,
    element_size: int = 8,
    hidden: int = 32,
    feature_size: int = 4,
) -> int:
    """Estimated whole-process peak (bytes) of one analysis of a graph with ``num_nodes``
    nodes and ``num_edges`` directed edges: the process, the graph (features of
    ``feature_size`` bytes), its operator, and the forward pass's working set (per head and
    edge, or per edge where attention runs head by head, and per node and hidden channel, in
    ``element_size`` bytes).  Calibrated against the measured peaks (reports/reliability.md,
    from reports/benchmarks: estimate / measured 1.29, 0.94, 1.31 at 10^4, 10^5, 10^6 nodes
    with the first seed's float64 twin, which it does not count, 1.29, 0.99, 1.50 before;
    settings other than the measured ones are not calibrated)."""
    graph = 16 * num_edges + feature_size * num_nodes * num_features + 8 * num_nodes
    operator = 8 * num_edges + 24 * num_nodes  # an edge list sorted as oversmooth loads it
    slots = max(heads, 1) * (num_edges + num_nodes)
    edge_values = _EDGE_VALUES_BY_HEAD * (num_edges + num_nodes)
    if heads <= 1 or slots <= BY_HEAD_VALUES:
        edge_values = _EDGE_VALUES_AT_PEAK * slots
    forward = element_size * (edge_values + _NODE_STATES_AT_PEAK * num_nodes * hidden)
    return int(_PROCESS_BASE + graph + operator + forward)


#: bytes per entry of the similarity matrix at its peak: two float64 matrices on the probe, a
#: float64 NumPy copy and about 16 characters of CSV text
SIMILARITY_BYTES_PER_ENTRY = 40


def similarity_bytes(depth: int) -> int:
    """Peak bytes of the ``(depth + 1) x (depth + 1)`` inter-layer similarity matrix."""
    return SIMILARITY_BYTES_PER_ENTRY * (depth + 1) ** 2


def check_energy_order(order: int) -> None:
    """Refuse an energy order ``m`` beyond :data:`MAX_ENERGY_ORDER` (a ``ResourceError``)."""
    if order > MAX_ENERGY_ORDER:
        raise ResourceError(
            f"energy_{order}: orders above {MAX_ENERGY_ORDER} are refused (each order costs a "
            f"sparse product per layer, and E_m overflows float64 near m = 1000); "
            f"use an order <= {MAX_ENERGY_ORDER}"
        )
