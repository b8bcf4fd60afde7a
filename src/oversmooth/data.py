"""Datasets: embedded Cora/CiteSeer, PyG benchmarks, synthetic graphs, user files.

One entry point, :func:`load`, returns a graph with ``x``, ``edge_index`` (both
directions of every undirected edge, PyG style), ``y`` where labels exist, and
``name``: a :class:`GraphData` (the PyG ``Data`` attributes and ``num_nodes`` /
``num_edges`` / ``num_features`` / ``to`` / ``clone``, built without importing
torch_geometric, whose import costs seconds; :meth:`GraphData.to_pyg` gives the
``torch_geometric.data.Data``) for the shipped, synthetic and CSV graphs, and
the ``torch_geometric.data.Data`` itself for PyG benchmarks and ``.pt`` files.

- ``cora``, ``citeseer``: shipped inside the package (converted from the
  public Planetoid raw files by ``scripts/embed_planetoid.py``), so the default
  data needs no network.  They carry the public Planetoid split as masks.
- ``pubmed``, ``cs``, ``physics``, ``computers``, ``photo``: the paper's other
  benchmarks through torch_geometric's loaders (Planetoid, Coauthor, Amazon),
  downloaded into ``data_root`` on first use.  Offline, put the raw files where
  the error message says.
- ``csbm``, ``ring``, ``grid``, ``complete``, ``karate``: synthetic graphs;
  parameters go after a colon, e.g. ``csbm:n=100000,degree=10,homophily=0.8``.
- a path: a saved PyG ``Data`` (``.pt``, loaded with ``weights_only=True`` so no
  arbitrary pickle runs) or an edge-list ``.csv`` (``source,target[,weight]``)
  with optional features/labels CSVs.
"""

from __future__ import annotations

import csv
import io
import math
import os
import re
import warnings
from contextlib import contextmanager, nullcontext, redirect_stderr
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING
from collections.abc import Callable, Iterable, Iterator, Sequence

import numpy as np
import torch
from torch import Tensor

from oversmooth.config import check_seed, drawn_seed
from oversmooth.errors import DatasetUnavailableError
from oversmooth.outputs import check_path_text

if TYPE_CHECKING:
    from torch_geometric.data import Data

__all__ = [
    "DATASETS",
    "GraphData",
    "DatasetUnavailableError",
    "load",
    "pyg_messages",
    "csbm",
    "csbm_batch",
    "ring",
    "grid",
    "complete",
    "karate",
    "random_split",
    "split_masks",
    "graph_stats",
    "default_data_root",
    "on_disk",
]


@dataclass(frozen=True)
class DatasetInfo:
    name: str
    kind: str  # embedded | pyg | synthetic
    description: str


DATASETS: dict[str, DatasetInfo] = {
    info.name: info
    for info in [
        DatasetInfo(
            "cora", "embedded", "Cora citation graph, 2708 nodes, 7 classes (shipped, offline)"
        ),
        DatasetInfo(
            "citeseer",
            "embedded",
            "CiteSeer citation graph, 3327 nodes, 6 classes (shipped, offline)",
        ),
        DatasetInfo(
            "pubmed", "pyg", "PubMed citation graph, 19717 nodes, 3 classes (Planetoid download)"
        ),
        DatasetInfo("cs", "pyg", "Coauthor CS, 18333 nodes, 15 classes (download)"),
        DatasetInfo("physics", "pyg", "Coauthor Physics, 34493 nodes, 5 classes (download)"),
        DatasetInfo(
            "computers", "pyg", "Amazon Computers co-purchase graph, 13752 nodes (download)"
        ),
        DatasetInfo("photo", "pyg", "Amazon Photo co-purchase graph, 7650 nodes (download)"),
        DatasetInfo(
            "csbm",
            "synthetic",
            "contextual SBM: n, classes, degree, homophily, signal, features, seed",
        ),
        DatasetInfo(
            "csbm-batch",
            "synthetic",
            "a batch of contextual SBM graphs (metrics per graph, averaged): graphs, n, classes, "
            "degree, homophily, signal, features, seed",
        ),
        DatasetInfo("ring", "synthetic", "cycle graph: n, features, seed"),
        DatasetInfo("grid", "synthetic", "2-D lattice: rows, cols, features, seed"),
        DatasetInfo("complete", "synthetic", "complete graph: n, features, seed"),
        DatasetInfo(
            "karate", "synthetic", "Zachary's karate club, 34 nodes, 2 classes, one-hot features"
        ),
    ]
}


def _planetoid_files(name: str) -> list[str]:
    return [
        f"ind.{name}.{s}" for s in ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index")
    ]


# name -> (PyG loader class name, its `name` argument, raw files PyG expects)
_PYG = {
    "pubmed": ("Planetoid", "PubMed", _planetoid_files("pubmed")),
    "cs": ("Coauthor", "CS", ["ms_academic_cs.npz"]),
    "physics": ("Coauthor", "Physics", ["ms_academic_phy.npz"]),
    "computers": ("Amazon", "Computers", ["amazon_electronics_computers.npz"]),
    "photo": ("Amazon", "Photo", ["amazon_electronics_photo.npz"]),
}
# Planetoid names that can also be read from user-supplied raw files
_PLANETOID_RAW = {"cora": "Cora", "citeseer": "CiteSeer", "pubmed": "PubMed"}


def on_disk(name: str, data_root: str | os.PathLike) -> bool:
    """Whether the files of benchmark ``name`` (a PyG one, or ``cora``/``citeseer`` as
    Planetoid raw files) are under ``data_root`` already, raw or processed: nothing is
    downloaded to tell."""
    if name in _PLANETOID_RAW:
        folder, files = Path(data_root) / _PLANETOID_RAW[name], _planetoid_files(name)
    else:
        _, pyg_name, files = _PYG[name]
        folder = Path(data_root) / pyg_name
    processed = folder / "processed"
    # an empty processed/ (PyG makes it before a download that failed) holds nothing
    return (processed.is_dir() and any(processed.iterdir())) or all(
        (folder / "raw" / f).is_file() for f in files
    )


def default_data_root() -> Path:
    """``$OVERSMOOTH_DATA`` or ``~/.cache/oversmooth/data``."""
    env = os.environ.get("OVERSMOOTH_DATA")
    return Path(env) if env else Path.home() / ".cache" / "oversmooth" / "data"


# ----------------------------------------------------------------------------- helpers


class GraphData:
    """One homogeneous graph as attributes, shaped like a PyG ``Data`` but needing no
    torch_geometric import (which takes seconds): ``x``, ``edge_index``, ``y`` and the split
    masks where they exist, ``edge_weight`` for a weighted CSV, and ``name``.

    An attribute that is absent raises ``AttributeError`` (``getattr(data, "y", None)`` is
    ``None``), as on a ``Data``; every oversmooth function and a PyG model's
    ``model(data.x, data.edge_index)`` take it as is.  :meth:`to_pyg` gives the
    ``torch_geometric.data.Data`` with the same attributes, for PyG transforms, loaders or
    ``torch.save``.

    >>> data = load("cora")
    >>> data.x.shape, data.num_edges, data.name
    (torch.Size([2708, 1433]), 10556, 'cora')
    >>> data.to_pyg().num_edges
    10556
    """

    num_nodes: int
    name: str
    x: Tensor
    edge_index: Tensor
    # present only where the graph has them (annotated for the type checker, not defaulted)
    y: Tensor
    edge_weight: Tensor
    train_mask: Tensor
    val_mask: Tensor
    test_mask: Tensor

    def __init__(self, num_nodes: int, **attrs: object) -> None:
        self.num_nodes = int(num_nodes)
        for key, value in attrs.items():
            setattr(self, key, value)

    @property
    def num_edges(self) -> int:
        """Directed edges: columns of ``edge_index``."""
        return int(self.edge_index.size(1))

    @property
    def num_features(self) -> int:
        """Feature columns (0 without features)."""
        x = getattr(self, "x", None)
        return 0 if x is None else (1 if x.dim() == 1 else int(x.size(-1)))

    num_node_features = num_features

    def keys(self) -> list[str]:
        """The attribute names, in the order they were set (``num_nodes`` left out)."""
        return [k for k in vars(self) if k != "num_nodes"]

    def __contains__(self, key: str) -> bool:
        return key in self.keys() and getattr(self, key) is not None

    def _apply(self, fn: Callable[[Tensor], Tensor]) -> GraphData:
        attrs = {k: fn(v) if isinstance(v, Tensor) else v for k, v in vars(self).items()}
        del attrs["num_nodes"]
        return GraphData(self.num_nodes, **attrs)

    def to(self, device: torch.device | str, non_blocking: bool = False) -> GraphData:
        """A copy with every tensor on ``device`` (tensors already there are shared)."""
        return self._apply(lambda t: t.to(device, non_blocking=non_blocking))

    def cpu(self) -> GraphData:
        return self.to("cpu")

    def clone(self) -> GraphData:
        """A deep copy of the tensors."""
        return self._apply(lambda t: t.clone())

    def to_pyg(self) -> Data:
        """The ``torch_geometric.data.Data`` with the same attributes (tensors shared)."""
        from torch_geometric.data import Data

        attrs = vars(self)
        data = Data(**{k: v for k, v in attrs.items() if k != "name" and v is not None})
        if "name" in attrs:
            data.name = attrs["name"]
        return data

    def __repr__(self) -> str:
        def shape(value: object) -> str:
            return str(list(value.shape)) if isinstance(value, Tensor) else repr(value)

        parts = [f"{k}={shape(v)}" for k, v in vars(self).items() if k != "num_nodes"]
        return f"GraphData({', '.join(parts)}, num_nodes={self.num_nodes})"


def _data(x: Tensor, edge_index: Tensor, y: Tensor | None, name: str, **extra: Tensor) -> GraphData:
    attrs: dict[str, object] = {"x": x, "edge_index": edge_index, **extra}
    if y is not None:
        attrs["y"] = y
    return GraphData(num_nodes=x.size(0), **attrs, name=name)


def _symmetric(pairs: Tensor, num_nodes: int) -> Tensor:
    """Both directions of each pair, no self loops, no duplicates, sorted by target
    then source (the order torch_geometric's loaders produce).

    Memory (10^7 directed edges at 10^6 nodes): the int64 keys ``target * n + source`` of
    both directions are written into one buffer, sorted in place and compacted in place, and
    the result is written into its ``[2, E]`` tensor: at most the keys, one boolean mask and
    the result are alive at once (a ``torch.unique`` over a concatenation held 4-5 copies)."""
    src, dst = pairs
    keep = src != dst
    src, dst = src[keep], dst[keep]
    half = src.numel()
    key = torch.empty(2 * half, dtype=torch.int64)
    torch.mul(dst, num_nodes, out=key[:half]).add_(src)
    torch.mul(src, num_nodes, out=key[half:]).add_(dst)
    del src, dst, keep
    keys = key.numpy()
    keys.sort()  # in place
    count = _unique_sorted_(keys)
    key = key[:count]
    out = torch.empty(2, count, dtype=torch.int64)
    torch.remainder(key, num_nodes, out=out[0])
    torch.div(key, num_nodes, rounding_mode="floor", out=out[1])
    return out


def _unique_sorted_(keys: np.ndarray) -> int:
    """Compact a sorted array in place to its distinct values (at its front, in order);
    returns how many there are."""
    if keys.size == 0:
        return 0
    fresh = np.empty(keys.size, dtype=bool)
    fresh[0] = True
    np.not_equal(keys[1:], keys[:-1], out=fresh[1:])
    count = int(fresh.sum())
    if count < keys.size:
        keys[:count] = keys[fresh]
    return count


def _undirected_max(pairs: Tensor, weight: Tensor, num_nodes: int) -> tuple[Tensor, Tensor, int]:
    """Both directions of each weighted pair, a pair given twice (either way) once with the
    larger weight, no self loops (as :func:`_symmetric`), sorted by source then target (what
    ``torch_geometric.utils.to_undirected(..., reduce="max")`` returns for the pairs without
    loops); and how many pairs were listed with different weights."""
    off = pairs[0] != pairs[1]
    src, dst, weight = pairs[0][off], pairs[1][off], weight[off]
    key = torch.cat([src * num_nodes + dst, dst * num_nodes + src])
    unique, inverse = torch.unique(key, return_inverse=True)  # sorted
    both = torch.cat([weight, weight])
    out = torch.full((unique.numel(),), -math.inf, dtype=both.dtype)
    out = out.scatter_reduce(0, inverse, both, reduce="amax", include_self=True)
    low = torch.full((unique.numel(),), math.inf, dtype=both.dtype)
    low = low.scatter_reduce(0, inverse, both, reduce="amin", include_self=True)
    uneven = int((low != out).sum()) // 2  # each pair is two edges
    return torch.stack([unique // num_nodes, unique % num_nodes]), out, uneven


def _features(n: int, num_features: int, generator: torch.Generator) -> Tensor:
    return torch.randn(n, num_features, generator=generator)


#: The largest CSBM ``signal``: its float32 features stay finite.
SIGNAL_MAX = 1e30


def _check_seed(seed: object) -> int:
    """A graph's seed (a NumPy integer too), in the models' range
    (:func:`~oversmooth.config.check_seed`: a torch generator on the CPU keeps 32 bits of a
    seed, so seeds 0 and 2**32 drew the same graph)."""
    return check_seed("seed", int(seed) if isinstance(seed, np.integer) else seed)


def _check_int(name: str, value: object, low: int, high: int | None = None) -> int:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, np.integer))
        or value < low
        or (high is not None and value > high)
    ):
        bound = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise ValueError(f"{name}: expected an integer {bound}, received {value!r}")
    return int(value)


def _check_size(what: str, num_nodes: int, num_edges: int, num_features: int) -> None:
    """Refuse (before allocating) a graph that cannot fit in memory (see oversmooth.resources)."""
    from oversmooth.resources import check_allocation, graph_bytes

    need = graph_bytes(num_nodes, num_edges, num_features)
    check_allocation(what, need, hint="ask for a smaller graph")


def _check_float(name: str, value: object, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (low <= value <= high):
        raise ValueError(f"{name}: expected a number in [{low}, {high}], received {value!r}")
    return float(value)


# ----------------------------------------------------------------------------- embedded


def _load_embedded(name: str) -> GraphData:
    with resources.files("oversmooth._data").joinpath(f"{name}.npz").open("rb") as fh:
        arrays = dict(np.load(fh, allow_pickle=False))
    n = int(arrays["num_nodes"])
    x = torch.zeros(n, int(arrays["num_features"]))
    x[torch.from_numpy(arrays["x_row"]).long(), torch.from_numpy(arrays["x_col"]).long()] = 1.0
    edge_index = _symmetric(torch.from_numpy(arrays["edges"]).long(), n)
    masks = {}
    for split in ("train", "val", "test"):
        mask = torch.zeros(n, dtype=torch.bool)
        mask[torch.from_numpy(arrays[f"{split}_index"]).long()] = True
        masks[f"{split}_mask"] = mask
    return _data(x, edge_index, torch.from_numpy(arrays["y"]).long(), name, **masks)


# ----------------------------------------------------------------------------- PyG benchmarks


def _missing_files_message(name: str, root: Path) -> str:
    if name in _PLANETOID_RAW:
        folder, files = root / _PLANETOID_RAW[name] / "raw", _planetoid_files(name)
    else:
        _, pyg_name, files = _PYG[name]
        folder = root / pyg_name / "raw"
    return (
        f"dataset {name!r}: its files are not in {folder} and the download failed (offline?); put "
        f"{', '.join(files)} into {folder}, or pass --data-root "
        f"to the folder that holds {folder.parent.name}/raw"
    )


#: Whether torch_geometric's dataset classes may print their "Downloading ...", "Processing..."
#: lines to stderr (:func:`pyg_messages`).
_PYG_MESSAGES = [True]


@contextmanager
def pyg_messages(enabled: bool) -> Iterator[None]:
    """Within it, with ``enabled`` False, the lines torch_geometric's dataset classes print to
    stderr while they download and process a dataset are dropped (their classes take no
    ``log`` argument): what the command line's ``--quiet`` asks.  Errors are not affected:
    they are raised."""
    previous = _PYG_MESSAGES[0]
    _PYG_MESSAGES[0] = enabled
    try:
        yield
    finally:
        _PYG_MESSAGES[0] = previous


def _check_processed(name: str, processed: Path) -> None:
    """Refuse PyG's cache of a dataset made with a ``pre_transform`` or ``pre_filter``: PyG
    reuses it, with a warning only (which ``-q`` silenced), so Cora's features came back
    normalised to rows summing to 1 and its input energy 184 times lower (an audit)."""
    for part in ("pre_transform", "pre_filter"):
        path = processed / f"{part}.pt"
        if not path.is_file():
            continue
        try:
            made_with = torch.load(path, weights_only=True)
        except Exception:  # noqa: BLE001 - unreadable: PyG reads it again and says so
            continue
        if made_with != "None":
            raise DatasetUnavailableError(
                f"dataset {name}: {processed} holds PyG's cache of it made with "
                f"{part}={made_with}, which PyG would reuse; oversmooth measures the dataset's "
                f"own features and edges: delete that folder (PyG rebuilds it from raw/), or "
                "choose another --data-root"
            )


def _load_pyg(name: str, data_root: Path | None) -> Data:
    import torch_geometric.datasets as pyg_datasets

    root = Path(data_root) if data_root is not None else default_data_root()
    if name in _PLANETOID_RAW:
        cls, pyg_name = pyg_datasets.Planetoid, _PLANETOID_RAW[name]
    else:
        cls_name, pyg_name, _ = _PYG[name]
        cls = getattr(pyg_datasets, cls_name)
    # folders PyG may create before a failed download (root's missing parents too: it makes
    # them all); removed again if left empty
    missing_parents = [p for p in reversed(Path(os.path.abspath(root)).parents) if not p.exists()]
    created = missing_parents + [
        p
        for p in (root, root / pyg_name, root / pyg_name / "raw", root / pyg_name / "processed")
        if not p.exists()
    ]
    present = on_disk(name, root)  # then a failure is in reading them, not a download
    _check_processed(name, root / pyg_name / "processed")
    try:
        with nullcontext() if _PYG_MESSAGES[0] else redirect_stderr(io.StringIO()):
            dataset = cls(root=str(root), name=pyg_name)
    except Exception as exc:  # noqa: BLE001 - URLError is an OSError; a damaged file anything
        for folder in reversed(created):
            if folder.is_dir() and not any(folder.iterdir()):
                folder.rmdir()
        if present:
            # the files are there: "not in .../raw and the download failed" was false (an
            # audit: a truncated raw file gave "EOFError: Ran out of input", exit 1)
            shipped = DATASETS[name].kind == "embedded"
            remedy = (
                "replace the files, or leave out --data-root to use the shipped copy"
                if shipped
                else "remove the folder to download it again"
            )
            raise DatasetUnavailableError(
                f"dataset {name}: reading its files under {root / pyg_name} failed "
                f"({type(exc).__name__}: {exc}); a {'raw ' if shipped else ''}file may be "
                f"damaged or truncated, or {root / pyg_name / 'processed'} not writable: {remedy}"
            ) from exc
        if not isinstance(exc, (OSError, ValueError, RuntimeError)):
            raise
        raise DatasetUnavailableError(_missing_files_message(name, root)) from exc
    data = dataset[0]
    data.name = name
    return data


# ----------------------------------------------------------------------------- synthetic


# rows of the feature matrix :func:`csbm` forms at once (a few MiB at 32 features)
_ROW_BLOCK = 1 << 16


#: :func:`csbm` draws each edge's target within its class from a float32 uniform up to classes
#: of this many nodes, from a float64 one beyond (:func:`_uniform_below`).
PICK_FLOAT32 = 1 << 16


def _uniform_below(high: Tensor, gen: torch.Generator) -> Tensor:
    """One integer in ``[0, high_i)`` per entry of ``high``: a uniform scaled by ``high_i``.

    Float32 while every ``high_i`` is at most :data:`PICK_FLOAT32`: its 2^24 values spread
    over the range at most 1 part in 256 off uniform, and the committed graphs were drawn so.
    Float64 beyond: above 2^24 a float32 draw never reached odd numbers, and even ones twice as
    often (mean degrees 0.50 and 1.50 for 1.00 in a class of 2 x 10^7 nodes: an audit)."""
    if not high.numel() or int(high.max()) <= PICK_FLOAT32:
        return (torch.rand(high.shape, generator=gen) * high).long()
    out = torch.empty_like(high, dtype=torch.long)
    for start in range(0, high.numel(), _ROW_BLOCK):  # no [m] float64 temporaries
        part = high[start : start + _ROW_BLOCK]
        draw = torch.rand(part.shape, generator=gen, dtype=torch.float64)
        out[start : start + _ROW_BLOCK] = draw.mul_(part).long()
    return out


def csbm(
    n: int = 1000,
    classes: int = 2,
    degree: float = 10.0,
    homophily: float = 0.8,
    signal: float = 1.0,
    features: int = 32,
    seed: int = 0,
) -> GraphData:
    """Contextual stochastic block model, generated without any Python loop over nodes or edges.

    ``n`` nodes are split into ``classes`` balanced classes.  ``round(n * degree / 2)``
    undirected edges are drawn: each picks a uniform source and, with probability
    ``homophily``, a uniform target of the same class, otherwise one of another class.  Self
    loops and repeated pairs are then dropped, so the realised graph has fewer edges, and a
    lower homophily (same-class pairs, fewer, repeat more often), than asked.  On a sparse
    graph the gap is small (``n=20000, degree=8, homophily=0.7``: mean degree 8.0,
    homophily 0.70); when ``degree`` is a sizeable fraction of ``n`` it is not (means over
    20 seeds: ``n=20, degree=19`` gives mean degree about 10 and homophily 0.70 for 0.8;
    ``n=100, degree=50`` about 36 and 0.75; ``n=200, degree=20, homophily=0.5, classes=5``
    18.3 and 0.47).  ``oversmooth datasets --stats csbm:...`` prints the realised numbers
    (:func:`graph_stats`).  The draw is kept as it is (no redraw of the dropped pairs):
    committed results depend on these exact graphs (targets within a class uniform to 1 part
    in 256 up to classes of :data:`PICK_FLOAT32` nodes, float64-exact beyond).  Features are
    ``signal * mu_y + N(0, I)`` with class means ``mu_c ~ N(0, I / features)``
    scaled to unit norm.  1M nodes and 10M directed edges take a few seconds.
    """
    n = _check_int("n", n, 2)
    classes = _check_int("classes", classes, 1, n)
    degree = _check_float("degree", degree, 0.0, float(n - 1))
    homophily = _check_float("homophily", homophily, 0.0, 1.0)
    # the features are float32, signal times unit-norm means plus noise: beyond 1e30 they
    # could overflow to inf (signal=inf gave NaN features and a report of NaN rows, exit 0)
    signal = _check_float("signal", signal, 0.0, SIGNAL_MAX)
    features = _check_int("features", features, 1)
    gen = torch.Generator().manual_seed(_check_seed(seed))
    m = int(round(n * degree / 2))
    _check_size(f"csbm:n={n},degree={degree:g},features={features}", n, 2 * m, features)
    y = torch.arange(n) % classes
    y = y[torch.randperm(n, generator=gen)]
    order = torch.argsort(y, stable=True)  # nodes grouped by class
    counts = torch.bincount(y, minlength=classes)
    offsets = torch.cumsum(counts, 0) - counts
    src = torch.randint(0, n, (m,), generator=gen)
    same = torch.rand(m, generator=gen) < homophily
    shift = (
        torch.randint(1, max(classes, 2), (m,), generator=gen)
        if classes > 1
        else torch.zeros(m, dtype=torch.long)
    )
    target_class = torch.where(same | (classes == 1), y[src], (y[src] + shift) % classes)
    pick = _uniform_below(counts[target_class], gen)
    dst = order[offsets[target_class] + pick]
    del same, shift, pick, order, offsets, target_class
    pairs = torch.stack([src, dst])
    del src, dst
    edge_index = _symmetric(pairs, n)
    del pairs
    means = torch.randn(classes, features, generator=gen)
    means = means / means.norm(dim=1, keepdim=True).clamp_min(1e-12)
    # x = signal * means[y] + noise, formed in the noise's own buffer a block of rows at a
    # time (the sum is the same either way round): no second n x features matrix
    x = torch.randn(n, features, generator=gen)
    for start in range(0, n, _ROW_BLOCK):
        rows = slice(start, start + _ROW_BLOCK)
        x[rows].add_(signal * means[y[rows]])
    return _data(x, edge_index, y, "csbm")


def csbm_batch(
    graphs: int = 16,
    n: int = 200,
    classes: int = 2,
    degree: float = 10.0,
    homophily: float = 0.8,
    signal: float = 1.0,
    features: int = 32,
    seed: int = 0,
) -> GraphData:
    """A batch of ``graphs`` independent :func:`csbm` graphs of ``n`` nodes each (graph ``g``
    drawn with seed ``(seed * 100_003 + g) mod 2**32``), stacked as one disconnected graph with
    a ``batch`` vector, as PyG's ``Batch`` stores a mini-batch: every metric is then computed
    per graph and averaged, and graph-mode LayerNorm and global attention stay within each
    graph."""
    graphs = _check_int("graphs", graphs, 1)
    n = _check_int("n", n, 2)
    degree = _check_float("degree", degree, 0.0, float(n - 1))
    features = _check_int("features", features, 1)
    # the whole batch, before the first graph is drawn (each csbm() checks only its own size);
    # the parts and their concatenation are alive together: twice the batch
    edges = 2 * int(round(n * degree / 2))
    _check_size(
        f"csbm-batch:graphs={graphs},n={n},degree={degree:g},features={features}",
        2 * graphs * n,
        2 * graphs * edges,
        features,
    )
    seed = _check_seed(seed)
    # graph g's seed kept to 32 bits, as torch keeps it: the same graphs as before for every
    # seed (seed=50000 was refused for a derived seed of 5000150000, never passed: a review)
    parts = [
        csbm(n, classes, degree, homophily, signal, features, drawn_seed(seed * 100_003 + g))
        for g in range(graphs)
    ]
    sizes = torch.tensor([p.num_nodes for p in parts])
    offsets = torch.cumsum(sizes, 0) - sizes
    x = torch.cat([p.x for p in parts])
    edge_index = torch.cat([p.edge_index + int(o) for p, o in zip(parts, offsets, strict=True)], 1)
    y = torch.cat([p.y for p in parts])
    batch = torch.repeat_interleave(torch.arange(graphs), sizes)
    return _data(x, edge_index, y, "csbm-batch", batch=batch)


def ring(n: int = 100, features: int = 16, seed: int = 0) -> GraphData:
    """Cycle graph ``0 - 1 - ... - (n-1) - 0`` with Gaussian features."""
    n = _check_int("n", n, 3)
    gen = torch.Generator().manual_seed(_check_seed(seed))
    _check_size(f"ring:n={n},features={features}", n, 2 * n, _check_int("features", features, 1))
    i = torch.arange(n)
    edge_index = _symmetric(torch.stack([i, (i + 1) % n]), n)
    return _data(_features(n, _check_int("features", features, 1), gen), edge_index, None, "ring")


def grid(rows: int = 10, cols: int = 10, features: int = 16, seed: int = 0) -> GraphData:
    """``rows x cols`` 4-neighbour lattice, node ``r * cols + c``."""
    rows, cols = _check_int("rows", rows, 1), _check_int("cols", cols, 1)
    gen = torch.Generator().manual_seed(_check_seed(seed))
    features = _check_int("features", features, 1)
    n = rows * cols
    _check_size(f"grid:rows={rows},cols={cols},features={features}", n, 4 * n, features)
    idx = torch.arange(rows * cols).view(rows, cols)
    pairs = torch.cat(
        [
            torch.stack([idx[:, :-1].flatten(), idx[:, 1:].flatten()], 0),
            torch.stack([idx[:-1].flatten(), idx[1:].flatten()], 0),
        ],
        dim=1,
    )
    n = rows * cols
    return _data(
        _features(n, _check_int("features", features, 1), gen), _symmetric(pairs, n), None, "grid"
    )


def complete(n: int = 10, features: int = 16, seed: int = 0) -> GraphData:
    """Complete graph on ``n`` nodes (every ordered pair ``i != j``)."""
    n = _check_int("n", n, 2, 20000)
    gen = torch.Generator().manual_seed(_check_seed(seed))
    features = _check_int("features", features, 1)
    _check_size(f"complete:n={n},features={features}", n, n * (n - 1), features)
    i, j = torch.triu_indices(n, n, offset=1)
    return _data(
        _features(n, _check_int("features", features, 1), gen),
        _symmetric(torch.stack([i, j]), n),
        None,
        "complete",
    )


def karate() -> GraphData:
    """Zachary's karate club (networkx): 34 nodes, 78 edges, label = club, one-hot features."""
    import networkx as nx

    g = nx.karate_club_graph()
    pairs = torch.tensor(list(g.edges()), dtype=torch.long).t()
    y = torch.tensor(
        [0 if g.nodes[v]["club"] == "Mr. Hi" else 1 for v in range(g.number_of_nodes())]
    )
    n = g.number_of_nodes()
    return _data(torch.eye(n), _symmetric(pairs, n), y, "karate")


_SYNTHETIC: dict[str, Callable] = {
    "csbm": csbm,
    "csbm-batch": csbm_batch,
    "ring": ring,
    "grid": grid,
    "complete": complete,
    "karate": karate,
}


def _parse_params(name: str, text: str) -> dict:
    """``"n=100,degree=5"`` -> keyword arguments typed like the generator's defaults."""
    import inspect

    signature = inspect.signature(_SYNTHETIC[name]).parameters
    params: dict = {}
    for item in filter(None, (t.strip() for t in text.split(","))):
        key, sep, value = item.partition("=")
        key = key.strip()
        if key in params:
            raise ValueError(f"dataset {name}: parameter {key} given twice; give each once")
        if not signature:
            raise ValueError(f"dataset {name}: takes no parameters, received {item!r}; pass {name}")
        if not sep or key not in signature:
            raise ValueError(
                f"dataset {name}: expected key=value parameters with key in "
                f"{', '.join(signature) or '(none)'}, received {item!r}"
            )
        try:
            number = float(value)
        except ValueError:
            raise ValueError(
                f"dataset {name}: parameter {key} must be a number, received {value!r}"
            ) from None
        if isinstance(signature[key].default, int) and number.is_integer():
            try:  # exactly as written where it is a whole number (a seed of 2^64 - 1)
                params[key] = int(value.strip())
            except ValueError:  # 1e3, 5.0
                params[key] = int(number)
        else:
            params[key] = number
    return params


# ----------------------------------------------------------------------------- user files


def _load_pt(path: Path) -> Data:
    """The PyG ``Data`` saved at ``path`` (or built from a saved dict of tensors), validated,
    with float features (``ones`` when it has none) and named after the file."""
    obj = _read_pt(path)
    n = obj.num_nodes
    if not isinstance(n, int) or n < 0:
        raise ValueError(f"{path}: num_nodes must be a non-negative integer, received {n!r}")
    _check_size(f"{path} ({n} nodes)", n, obj.edge_index.size(1), 1 if obj.x is None else 0)
    obj.x = torch.ones(n, 1) if obj.x is None else _pt_features(path, obj.x)
    _validate_user_graph(
        path, obj.edge_index, n, obj.x, getattr(obj, "y", None), getattr(obj, "edge_weight", None)
    )
    for name in SPLIT_MASKS:  # read as bool where they are 0/1 vectors; checked where used
        mask = getattr(obj, name, None)
        if isinstance(mask, Tensor) and mask.dim() == 1 and mask.numel() == n:
            if mask.dtype != torch.bool and _zeros_and_ones(mask):
                setattr(obj, name, bool_mask(mask, n, f"{path}: {name}"))
    said = _stored_as_is(obj, n)
    if said:
        warnings.warn(f"{path}: {'; '.join(said)}", stacklevel=2)
    obj.name = path.stem
    return obj


def _mix(keys: np.ndarray) -> np.ndarray:
    """A 64-bit mixing of each key (SplitMix64's finaliser, wrapping uint64 arithmetic)."""
    z = keys.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def _symmetric_multiset(src: np.ndarray, dst: np.ndarray, n: int) -> bool:
    """Whether the edges, as a multiset, equal their reverses: the sums (mod 2^64) of a
    64-bit mixing of every key ``src * n + dst`` and of every reversed key agree.  Equal
    multisets always agree; unequal ones agree with probability about 2^-64.  One pass, a
    block at a time, with no sort: a sample of 65,536 edges, looked up before, missed a few
    one-way edges among 200,000 (no note: an audit)."""
    block = _ROW_BLOCK * 16
    total = 0  # a Python integer: numpy's scalar arithmetic warns where it wraps
    for i in range(0, src.size, block):
        s, d = src[i : i + block], dst[i : i + block]
        total += int(_mix(s * n + d).sum(dtype=np.uint64))
        total -= int(_mix(d * n + s).sum(dtype=np.uint64))
    return total % 2**64 == 0


def _stored_as_is(obj: Data, n: int) -> list[str]:
    """What of a saved graph is measured as stored though a user may not mean it: edges
    without their reverse, repeated edges, self loops (a CSV is made undirected, merged and
    loop-free; ``datasets --stats`` counts each pair once; a ``.pt`` is taken as it is, and a
    one-way edge list gave the energies of another graph without a word), and a per-edge
    ``edge_attr`` that is not read as the weights."""
    said = []
    src, dst = obj.edge_index[0].long(), obj.edge_index[1].long()
    if src.numel():
        # one sort of the edge keys; the reverses looked up (a block at a time) only where
        # the edges are not their reverses as a multiset: unique + isin took 6.1 s and 1.7 GB
        # for 10^7 edges where the load took 1.2 s and 0.6 GB (an audit)
        keys = (src * n + dst).numpy()
        keys.sort()  # in place: no second array of E keys, nor E sort indices
        repeated = int((keys[1:] == keys[:-1]).sum())
        loops = int((src == dst).sum())
        s64, d64 = src.numpy(), dst.numpy()

        def without_reverse(reverse: np.ndarray) -> int:
            found = np.searchsorted(keys, reverse).clip(max=keys.size - 1)
            return int((keys[found] != reverse).sum())

        one_way = 0
        if not _symmetric_multiset(s64, d64, n):
            # every reverse, sorted too: looked up in order, a block at a time (4x faster
            # than in the edges' order at 10^7 edges)
            reverse = d64 * n + s64
            reverse.sort()
            block = _ROW_BLOCK * 16
            one_way = sum(
                without_reverse(reverse[i : i + block]) for i in range(0, reverse.size, block)
            )
            del reverse
        del keys
        if one_way:
            said.append(
                f"{one_way} of its {src.numel()} edges have no reverse edge (a directed graph): "
                "messages and energies follow the edges as stored "
                "(torch_geometric.utils.to_undirected makes it undirected)"
            )
        if repeated:
            said.append(f"{repeated} edges repeat an earlier one: each copy counts, as a weight")
        if loops:
            said.append(
                f"{loops} self loops: the metrics count them in the degrees; the models replace "
                "them by their own weight-1 loops"
            )
    weight = getattr(obj, "edge_weight", None)
    if isinstance(weight, Tensor) and weight.numel():
        zero = int((weight == 0).sum())
        if zero:
            said.append(
                f"{zero} of its {weight.numel()} edges have weight 0: no edge to the metrics "
                "and the models (datasets --stats counts them)"
            )
    attr = getattr(obj, "edge_attr", None)
    if weight is None and isinstance(attr, Tensor):
        if attr.numel() == src.numel() and attr.is_floating_point():
            said.append(
                "edge_attr (one value per edge) is not read as weights: the graph is measured "
                "unweighted; save data.edge_weight = data.edge_attr.flatten() to weigh it"
            )
    return said


#: The masks of a public split, in a dataset's ``Data``.
SPLIT_MASKS = ("train_mask", "val_mask", "test_mask")


def _zeros_and_ones(mask: Tensor) -> bool:
    """Whether every entry of a real ``mask`` is 0 or 1."""
    return not mask.dtype.is_complex and bool(((mask == 0) | (mask == 1)).all())


def bool_mask(mask: object, n: int, what: str) -> Tensor:
    """``mask`` as a ``[n]`` bool tensor: a bool one as it is, one of 0/1 integers or floats
    converted (with a warning), anything else refused in one line.  Indexing with an int64
    0/1 "mask" picks rows 0 and 1 over and over: a model trained and scored that way reported
    75% accuracy where its bool mask gives 40% (an audit)."""
    if not isinstance(mask, Tensor):
        raise ValueError(f"{what}: expected a [{n}] bool tensor, received {type(mask).__name__}")
    if mask.dim() == 2 and mask.size(0) == n:
        # PyG saves WebKB, Chameleon/Squirrel, Actor and roman-empire so: a split per column
        raise ValueError(
            f"{what}: shape {list(mask.shape)}, {mask.size(1)} splits (one per column); pick "
            "one: data.train_mask, data.val_mask, data.test_mask = (m[:, 0] for m in "
            "(data.train_mask, data.val_mask, data.test_mask)), or use --split random"
        )
    if mask.dim() != 1 or mask.numel() != n:
        raise ValueError(
            f"{what}: shape {list(mask.shape)}; expected a [{n}] bool mask, one entry per node"
        )
    if mask.dtype == torch.bool:
        return mask
    if not _zeros_and_ones(mask):
        raise ValueError(
            f"{what}: dtype {mask.dtype} with values other than 0 and 1; expected a bool mask "
            "(for node indices idx: mask = torch.zeros(n, dtype=torch.bool); mask[idx] = True)"
        )
    warnings.warn(f"{what}: dtype {mask.dtype} of 0s and 1s, read as a bool mask", stacklevel=3)
    return mask != 0


def _read_pt(path: Path) -> Data:
    """The ``Data`` in a ``.pt`` file, loaded with ``weights_only=True`` (no arbitrary pickle
    runs); its ``x``, ``edge_index`` and ``y`` are tensors and ``edge_index`` is ``[2, E]``."""
    from torch_geometric.data import Data
    from torch_geometric.data.data import DataEdgeAttr, DataTensorAttr
    from torch_geometric.data.storage import BaseStorage, EdgeStorage, GlobalStorage, NodeStorage

    safe = [
        Data,
        DataEdgeAttr,
        DataTensorAttr,
        GlobalStorage,
        NodeStorage,
        EdgeStorage,
        BaseStorage,
    ]
    try:
        with torch.serialization.safe_globals(safe), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch's notes on pickle protocols: not the user's
            obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any failure here is a bad file
        found = re.search(r"Unsupported global: GLOBAL (\S+)", str(exc))
        if found and ".batch." in found.group(1):
            raise ValueError(
                f"{path}: holds a PyG Batch of several graphs; a dataset file holds one graph: "
                "save one (torch.save(batch.get_example(i), path)), or probe the batch from "
                "Python (oversmooth.Probe with the batch's edge_index and batch vector)"
            ) from None
        if found:
            why = f"it holds a {found.group(1)}, which a safe load refuses"
        else:
            why = f"{type(exc).__name__}: damaged, not a torch file, or objects beyond tensors"
        raise ValueError(
            f"{path}: not a loadable PyG Data file ({why}); expected one saved with "
            "torch.save(data, path), or a dict of tensors with keys x, edge_index[, y]"
        ) from None
    if isinstance(obj, dict):
        if "edge_index" not in obj:
            raise ValueError(
                f"{path}: expected a dict with keys x, edge_index[, y], received keys {sorted(obj)}"
            )
        obj = Data(**obj)
    if isinstance(obj, Data) and obj.edge_index is None and "adj_t" in obj:
        raise ValueError(
            f"{path}: the Data has adj_t and no edge_index; save it with an edge_index "
            "(row, col, _ = data.adj_t.t().coo(); data.edge_index = torch.stack([row, col]))"
        )
    if not isinstance(obj, Data) or obj.edge_index is None:
        raise ValueError(
            f"{path}: expected a torch_geometric Data with edge_index, "
            f"received {type(obj).__name__}"
        )
    _check_pt_tensors(path, obj)
    return obj


def _check_pt_tensors(path: Path, obj: Data) -> None:
    """``ValueError`` unless ``x``, ``edge_index`` and ``y`` (where present) are tensors and
    ``edge_index`` is an integer ``[2, num_edges]``."""
    for key in ("x", "edge_index", "y"):
        value = getattr(obj, key, None)
        if value is not None and not isinstance(value, Tensor):
            raise ValueError(f"{path}: {key} must be a tensor, received {type(value).__name__}")
    ei = obj.edge_index
    if ei.dim() != 2 or ei.size(0) != 2 or ei.dtype.is_floating_point or ei.dtype == torch.bool:
        raise ValueError(
            f"{path}: edge_index must be an integer tensor of shape [2, num_edges], "
            f"received {obj.edge_index.dtype} {list(obj.edge_index.shape)}"
        )


def _pt_features(path: Path, x: Tensor) -> Tensor:
    """A saved file's features ``[num_nodes, num_features]`` as float32 or float64 (other real
    dtypes converted, with a warning)."""
    if x.layout != torch.strided:
        raise ValueError(
            f"{path}: x is a sparse tensor ({x.layout}); expected dense features: save "
            "data.x = data.x.to_dense()"
        )
    if x.dim() != 2:
        raise ValueError(
            f"{path}: x must be a [num_nodes, num_features] tensor, received shape {list(x.shape)}"
        )
    if x.dtype.is_complex:
        raise ValueError(f"{path}: x has complex dtype {x.dtype}; save real features")
    if x.dtype in (torch.float32, torch.float64):
        return x
    # integer/bool (bag-of-words counts, one-hot) and half-precision features are common in
    # saved PyG datasets; the models and metrics need float, so convert (exactly, for counts)
    warnings.warn(f"{path}: features have dtype {x.dtype}; converted to float32", stacklevel=3)
    return x.to(torch.float32)


def _read_numeric_csv(
    path: Path,
    min_cols: int,
    what: str,
    max_cols: int | None = None,
    hint: str = "",
    index_header: int | None = None,
) -> np.ndarray:
    """Rows of numbers; a header line is allowed; errors name the file and line.

    ``max_cols`` refuses wider rows (``hint`` says what to keep): an extra column would
    otherwise be read as the weight or the label.  With ``index_header``, a line 1 that reads
    ``0,1,...,d-1``, the header pandas writes for unnamed columns, is refused from that many
    columns on and warned of below (:func:`_index_header`).  The rows themselves come from
    :func:`_numeric_rows`."""
    rows: list[list[float]] = []
    width = None
    for lineno, cells, values in _numeric_rows(path, what):
        if width is None:
            width = len(values)
            if lineno == 1 and index_header is not None:
                _index_header(path, cells, what, index_header)
            if width < min_cols:
                raise ValueError(
                    f"{path}:{lineno}: expected at least {min_cols} columns for {what}, "
                    f"received {width}"
                )
            if max_cols is not None and width > max_cols:
                raise ValueError(
                    f"{path}:{lineno}: {width} columns, expected at most {max_cols} for {what}"
                    + (f"; {hint}" if hint else "")
                )
        elif len(values) != width:
            raise ValueError(
                f"{path}:{lineno}: expected {width} columns like the first row, "
                f"received {len(values)}"
            )
        rows.append(values)
    if not rows:
        raise ValueError(f"{path}: no data rows ({what})")
    return np.asarray(rows, dtype=np.float64)


def _index_header(path: Path, cells: list[str], what: str, refuse_from: int) -> None:
    """Refuse (from ``refuse_from`` columns on) or warn of a line 1 that reads ``0,1,...,d-1``:
    the header ``pandas.DataFrame(array).to_csv(path, index=False)`` writes, all numbers, so
    read as a data row.  In a features file it became node 0's features and moved every node's
    features to the next node, with one isolated node more, silently.  A row of 3 or more
    features equal to their column numbers is no node's in practice; 1 or 2 (``0``, ``0,1``:
    a count, a one-hot class) can be, so there it is read as data with a warning.  Edge lists
    are not checked: ``0,1`` is the first edge of many sorted edge lists, and a warning on
    every such file would say nothing; ``0`` is the first label of many files, so a labels
    file is questioned only when it has one row too many (:func:`_label_header`)."""
    if [c.strip() for c in cells] != [str(i) for i in range(len(cells))]:
        return
    text = ",".join(c.strip() for c in cells)
    shown = text if len(text) <= 24 else f"{text[:20]}...,{len(cells) - 1}"
    said = f"{path}:1: line 1 reads {shown!r}, the header pandas writes for unnamed columns"
    if len(cells) >= refuse_from:
        raise ValueError(
            f"{said}; as data it would be node 0's {what} and move every node's to the next "
            "node; remove the line (or write the file with header=False); if it is node 0's, "
            "write its values as 0.0,1.0,..."
        )
    warnings.warn(
        f"{said}; it is read as data ({what}); if it is a header, remove the line (or write "
        "the file with header=False)",
        stacklevel=5,
    )


def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def _numeric_rows(path: Path, what: str) -> Iterator[tuple[int, list[str], list[float]]]:
    """``(line number, cells as written, numbers)`` for each data row of a CSV, blank lines
    skipped.

    A leading UTF-8 byte order mark (Excel's "CSV UTF-8" writes one) is dropped: left in, it
    made the first cell unreadable, so a first data row was taken for a header and lost.  Line 1
    is a header only when none of its cells is a number: ``0.5,NA`` or ``0,1,`` there is a data
    row with a bad cell, refused as it would be on any later line, not dropped."""
    if path.is_dir():
        raise ValueError(f"{path}: is a folder, expected a CSV file ({what})")
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file ({what})")
    try:
        fh = path.open(newline="", encoding="utf-8-sig")
    except OSError as exc:
        raise PermissionError(f"{path}: cannot read ({exc.strerror or exc}) ({what})") from None
    with fh:
        for lineno, row in _csv_rows(path, fh):
            if not row or all(not c.strip() for c in row):
                continue
            try:
                values = [float(c) for c in row]
            except ValueError:
                _check_separator(path, lineno, row, what)
                if lineno == 1 and not any(_is_number(c) for c in row):
                    continue  # header
                raise ValueError(
                    f"{path}:{lineno}: expected numbers for {what}, received "
                    f"{','.join(row)[:80]!r}; fill in or remove the cells that are not numbers"
                ) from None
            yield lineno, row, values


def _check_separator(path: Path, lineno: int, row: list[str], what: str) -> None:
    """Refuse a row that is one cell of numbers joined by another separator (a tab-, space-
    or semicolon-separated file): said so, where its first line was taken for a header and
    the second refused with "fill in the cells that are not numbers" (an audit)."""
    if len(row) != 1:
        return
    for sep, name in (("\t", "tabs"), (";", "semicolons"), (" ", "spaces")):
        cells = [c for c in row[0].split(sep) if c.strip()]
        if len(cells) > 1 and all(_is_number(c) for c in cells):
            raise ValueError(
                f"{path}:{lineno}: {row[0][:40]!r} is one cell: the file is separated by {name}, "
                f"where a CSV for {what} is comma-separated; convert it (e.g. tr '\\t ;' ',,,' "
                "< in > out.csv)"
            )


def _csv_rows(path: Path, fh: Iterable[str]) -> Iterator[tuple[int, list[str]]]:
    """``(line number, row)`` pairs; a file that is not UTF-8 text is named in the error."""
    reader = enumerate(csv.reader(fh), start=1)
    while True:
        try:
            yield next(reader)
        except StopIteration:
            return
        except UnicodeDecodeError as exc:
            raise ValueError(
                f"{path}: not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset "
                f"{exc.start}); "
                "save it as UTF-8 CSV"
            ) from None
        except csv.Error as exc:
            raise ValueError(f"{path}: not a readable CSV ({exc})") from None


#: Class ids up to this are taken as they are; beyond it, only up to 10 times the number of
#: distinct ids.
LABEL_IDS_MAX = 1000


def _validate_user_graph(
    path: Path,
    edge_index: Tensor,
    n: int,
    x: Tensor | None,
    y: Tensor | None,
    edge_weight: Tensor | None = None,
    counted_by: str | None = None,
    labels_from: str | None = None,
) -> None:
    """Refuse a graph whose parts disagree, in one line; ``counted_by`` names the file whose
    rows set the number of nodes (a features or labels CSV), the file to fix when the edge
    list names more nodes than it has rows (with features, their CSV: the file a non-finite
    feature is named in)."""
    from oversmooth.graph import check_edge_weight

    try:  # weights are used by every command: refuse negative, NaN and Inf ones here
        check_edge_weight(edge_weight, edge_index.size(1))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{path}: {exc}; fix or drop the weight column/attribute") from None
    if edge_index.numel() and (int(edge_index.min()) < 0 or int(edge_index.max()) >= n):
        lo, hi = int(edge_index.min()), int(edge_index.max())
        if counted_by is not None and lo >= 0:
            raise ValueError(
                f"{counted_by}: {n} rows, one per node, but {path} names node {hi}; expected "
                f"one row per node id 0..{hi} (or number the edge list's nodes from 0)"
            )
        raise ValueError(
            f"{path}: edge index out of range: node ids must lie in [0, {n - 1}] for {n} nodes, "
            f"received [{lo}, {hi}]"
        )
    if n == 0:
        raise ValueError(f"{path}: the graph has 0 nodes; expected at least one node")
    if x is not None and x.size(0) != n:
        raise ValueError(f"{path}: features have {x.size(0)} rows, expected one per node ({n})")
    if x is not None and x.is_floating_point() and not bool(torch.isfinite(x).all()):
        # a NaN feature makes every energy of its neighbourhood NaN from layer 0 on
        node, col = (int(i) for i in (~torch.isfinite(x)).nonzero()[0])
        value, kind = float(x[node, col]), str(x.dtype).removeprefix("torch.")
        raise ValueError(
            f"{counted_by or path}: features hold {value} (node {node}, feature {col}); "
            + (
                "expected finite numbers: fill or drop the missing values"
                if math.isnan(value)
                else f"expected finite numbers within the {kind} range: rescale the features"
            )
        )
    if y is not None and y.size(0) != n:
        raise ValueError(
            f"{labels_from or path}: labels have {y.size(0)} rows, expected one per node ({n})"
        )
    if y is not None and (y.dtype.is_floating_point or y.dtype.is_complex or y.dim() != 1):
        raise ValueError(
            f"{path}: labels y have dtype {y.dtype} and shape {list(y.shape)}; expected one "
            "integer class id per node (0, 1, ...): save y.long()"
        )
    if y is not None and y.numel() and int(y.min()) < 0:
        raise ValueError(
            f"{path}: labels y hold {int(y.min())}; expected class ids >= 0 (0, 1, ...)"
        )
    if y is not None and y.numel():
        # a classifier gets one output per class id 0..max(y): a label of 1e9 asked for a
        # 10^9-way decoder, refused as "use a smaller --depth or --hidden" (an audit)
        top, distinct = int(y.max()), int(torch.unique(y).numel())
        if top > max(LABEL_IDS_MAX, 10 * distinct):
            raise ValueError(
                f"{labels_from or path}: labels y run to {top} over {distinct} distinct values; "
                "a classifier "
                f"gets one output per class id 0..{top}: renumber the classes 0..{distinct - 1} "
                "(y = torch.unique(y, return_inverse=True)[1])"
            )


def _read_labels(path: Path) -> Tensor:
    """A labels CSV, one class id per row in node order, as int64.

    Every value must be a whole number in [0, 2^53): ``1.7`` was truncated to 1 and NaN or
    1e300 became -2^63 (with numpy's cast warning, and an error naming the edge list), so
    they are refused here, naming the labels file, the line and the value as written (a
    ``.pt`` file's float ``y`` is refused likewise)."""
    what = "labels (one class id per row)"
    lab = _read_numeric_csv(
        path, 1, what, max_cols=1, hint="keep only the label column, one row per node in order"
    )[:, 0]
    ok = np.isfinite(lab) & (lab == np.floor(lab)) & (lab >= 0) & (lab < 2**53)
    if not np.all(ok):
        bad = int(np.argmin(ok))
        why = "is too large for a class id" if lab[bad] >= 2**53 else "is not a class id"
        for index, (lineno, row, _) in enumerate(_numeric_rows(path, what)):
            if index == bad:  # its line and text, read again: only a failed load pays for it
                raise ValueError(
                    f"{path}:{lineno}: label {row[0].strip()!r} {why}; expected a whole "
                    "number >= 0 on every row (0, 1, ...): number the classes from 0"
                )
    return torch.from_numpy(lab.astype(np.int64))


def _load_csv(path: Path, features: Path | None, labels: Path | None, directed: bool) -> GraphData:
    table = _read_numeric_csv(
        path,
        2,
        "edges (source,target[,weight])",
        max_cols=3,
        hint="keep the source, target and (optional) weight columns only",
    )
    ids = table[:, :2]
    # inf == floor(inf), so finiteness is checked too (inf would become -2^63 as int64)
    integral = np.isfinite(ids) & (ids == np.floor(ids)) & (ids >= 0)
    if not np.all(integral):
        bad = int(np.argmax(~np.all(integral, axis=1)))
        raise ValueError(
            f"{path}: edge row {bad + 1}: node ids must be non-negative integers, "
            f"received {ids[bad].tolist()}"
        )
    if ids.size and ids.max() >= 2**53:  # float64 no longer holds every integer exactly
        raise ValueError(f"{path}: node id {ids.max():.0f} is too large; number the nodes from 0")
    pairs = torch.from_numpy(ids.astype(np.int64)).t()
    weight = torch.from_numpy(table[:, 2]) if table.shape[1] > 2 else None  # float64, as read
    x = (
        torch.from_numpy(_read_numeric_csv(Path(features), 1, "features", index_header=3)).float()
        if features
        else None
    )
    y = None
    if labels:
        y = _read_labels(Path(labels))
        _label_header(Path(labels), y, x, pairs)
    n = (
        x.size(0)
        if x is not None
        else (y.size(0) if y is not None else int(pairs.max()) + 1 if pairs.numel() else 0)
    )
    counted_by = features if x is not None else labels if y is not None else None
    _validate_user_graph(
        path,
        pairs,
        n,
        x,
        y,
        weight,
        str(counted_by) if counted_by else None,
        str(labels) if labels else None,
    )
    _check_size(f"{path} ({n} nodes)", n, 2 * pairs.size(1), 1 if x is None else x.size(1))
    if counted_by is None and pairs.numel():
        _note_unused_ids(path, pairs, n)
    if x is None:
        x = torch.ones(n, 1)
    if directed:
        edge_index, extra = pairs, ({"edge_weight": weight} if weight is not None else {})
    else:
        uneven = 0
        if weight is not None:
            edge_index, weight, uneven = _undirected_max(pairs, weight, n)
            extra = {"edge_weight": weight}
        else:
            edge_index, extra = _symmetric(pairs, n), {}
        said = _made_undirected(pairs, n, edge_index.size(1), uneven)
        if said:
            warnings.warn(
                f"{path}: made undirected (in Python, load(..., directed=True) keeps it as "
                "written): " + "; ".join(said),
                stacklevel=3,
            )
    return _data(x, edge_index, y, path.stem, **extra)


def _made_undirected(pairs: Tensor, n: int, edges: int, uneven: int) -> list[str]:
    """What making an edge list undirected changed, in words, from the ``edges`` (directed)
    it became and the ``uneven`` pairs listed with different weights: pairs given one way
    where others are given both ways (each gets its reverse; a file of one row per pair, the
    usual undirected edge list, is not a change), self loops (dropped), and the uneven pairs
    (the larger weight kept).  A directed, looped or unevenly weighted CSV was measured as
    another graph with no word, where a ``.pt`` gets the same notes (:func:`_stored_as_is`;
    an audit).  One sort of the rows' keys (10^7 rows: 0.3 s)."""
    if not pairs.numel():
        return []
    src, dst = pairs[0].numpy(), pairs[1].numpy()
    loop = src == dst
    said = []
    # a pair given both ways is 2 distinct rows and 2 edges, one way 1 row and 2 edges
    keys = src[~loop] * n + dst[~loop]
    keys.sort()  # in place: np.unique took 11 s at 10^7 rows, a sort and a count 0.3 s
    rows = int(keys.size and 1 + np.count_nonzero(keys[1:] != keys[:-1]))
    one_way, total = edges - rows, edges // 2
    if 0 < one_way < total:
        said.append(
            f"{one_way} of its {total} pairs are given one way only where the others are given "
            "both ways (a directed graph?): each gets its reverse"
        )
    if loop.any():
        said.append(f"{int(loop.sum())} self loops dropped")
    if uneven:
        said.append(f"{uneven} pairs are listed with different weights: the larger is kept")
    return said


def _label_header(path: Path, y: Tensor, x: Tensor | None, pairs: Tensor) -> None:
    """A labels CSV whose line 1 reads ``0`` and that has one row more than the graph's nodes:
    the header ``pandas.Series(y).to_csv(path, index=False)`` writes, read as node 0's label.
    Beside a features file the counts disagree, refused here with what to do (it said only
    "5 rows, expected 4"); alone, the labels set the node count, so every label moved to the
    next node and one isolated node was added, silently: warned of, as a question (the same
    file is also one whose last node is in no edge, which it then reads right).  A file that
    starts with the label 0 and has one row per node of the edge list is read without a word:
    that is most files."""
    nodes = x.size(0) if x is not None else int(pairs.max()) + 1 if pairs.numel() else None
    if nodes is None or y.size(0) != nodes + 1:
        return
    first = next(_numeric_rows(path, "labels"), None)
    if first is None or first[0] != 1 or [c.strip() for c in first[1]] != ["0"]:
        return
    said = (
        f"{path}:1: line 1 reads '0', the header pandas writes for an unnamed column, and the "
        f"file has {y.size(0)} rows for {nodes} nodes"
    )
    if x is not None:
        raise ValueError(f"{said}; remove the line (or write the file with header=False)")
    warnings.warn(
        f"{said} in the edge list: if line 1 is that header, every label is read one node late "
        f"and node {nodes} is an isolated node your graph lacks: remove the line (or write the "
        f"file with header=False); if node {nodes} is an isolated node of your graph, the file "
        "is read right",
        stacklevel=4,
    )


def _note_unused_ids(path: Path, pairs: Tensor, n: int) -> None:
    """Warn when the ids of an edge list without a features or labels file leave numbers
    unused: those nodes are isolated, and they count in the ``1/n`` of every energy (ids
    5, 7, 9 made 10 nodes and a tenth of the energy of the 3 real ones, silently; an audit)."""
    used = int(torch.unique(pairs).numel())
    if used < n:
        warnings.warn(
            f"{path}: node ids run from 0 to {n - 1} but {n - used} of them appear in no edge: "
            f"they are isolated nodes, counted in the 1/n of every energy ({n} nodes, {used} "
            f"in edges); number the nodes 0..{used - 1} to leave them out, or pass a features "
            "file that lists every node",
            stacklevel=4,
        )


# ----------------------------------------------------------------------------- entry point


def load(
    name_or_path: str | os.PathLike,
    *,
    data_root: str | os.PathLike | None = None,
    features: str | os.PathLike | None = None,
    labels: str | os.PathLike | None = None,
    directed: bool = False,
) -> GraphData | Data:
    """Load a dataset by name or path: a :class:`GraphData` for the shipped, synthetic and CSV
    graphs (no torch_geometric import; ``.to_pyg()`` converts), the ``torch_geometric.data.Data``
    for PyG benchmarks and ``.pt`` files.

    Args:
        name_or_path: a name from :data:`DATASETS` (synthetic ones take
            ``name:key=value,...``), or a ``.pt`` / ``.csv`` file.
        data_root: where PyG benchmarks live (default :func:`default_data_root`).
            For ``cora``/``citeseer``, given explicitly, Planetoid raw (or processed) files
            there are read instead of the shipped copies when they are there; otherwise (and
            always without it: the default root is not searched) the shipped copies are used
            (nothing is downloaded for them).
        features: node features CSV for an edge-list CSV (one row per node, in node order).
        labels: node labels CSV for an edge-list CSV (one row per node, in node order).
        directed: keep a CSV edge list as given instead of adding reverse edges.

    Raises:
        ValueError: unknown name, bad parameters, malformed or inconsistent files.
        FileNotFoundError: a path that does not exist.
        DatasetUnavailableError: a benchmark's files are absent and the download failed.

    Example:
        >>> data = load("cora")
        >>> data.num_nodes, data.num_edges // 2
        (2708, 5278)
    """
    if data_root is not None:
        _check_data_root(data_root)
    found = _resolve(name_or_path)
    if isinstance(found, Path):
        if found.suffix.lower() in (".txt", ".tsv", ".edges", ".edgelist"):
            raise ValueError(
                f"{found}: an edge list is read from a comma-separated file named .csv "
                "(source,target[,weight] per row); rename or convert it, or save a PyG Data "
                "as .pt"
            )
        if found.suffix.lower() == ".csv":
            return _load_csv(
                found,
                Path(features) if features else None,
                Path(labels) if labels else None,
                directed,
            )
        if features or labels:
            raise ValueError(
                "features/labels: only an edge-list .csv takes separate feature and label files"
            )
        return _load_pt(found)
    key, kwargs = found
    if features or labels:  # never silently ignored
        raise ValueError(f"features/labels: only an edge-list .csv takes them, not dataset {key!r}")
    kind = DATASETS[key].kind
    if kind == "synthetic":
        try:
            return _SYNTHETIC[key](**kwargs)
        except ValueError as exc:
            # a generator's own check names its parameter alone ("n: expected ..."): say
            # which dataset's, as the parser's checks do
            import inspect

            named = re.match(r"^([a-z_]+): ", str(exc))
            if named is None:
                raise
            param = named.group(1)
            if param in kwargs:
                raise ValueError(f"dataset {key}: parameter {exc}") from None
            if param not in inspect.signature(_SYNTHETIC[key]).parameters:
                raise
            # a default the user never typed, out of range for what they gave (csbm:n=2 and
            # its default degree 10): "degree: expected ..." alone named neither
            raise ValueError(
                f"dataset {key}: parameter {exc} (its default, out of range with the "
                f"parameters given); pass {param}=... to fit them"
            ) from None
    if kind == "embedded" and (data_root is None or not on_disk(key, data_root)):
        return _load_embedded(key)  # the shipped copy, unless the user's raw files are there
    return _load_pyg(key, Path(data_root) if data_root is not None else None)


def _check_data_root(data_root: str | os.PathLike) -> None:
    """Refuse a ``data_root`` that cannot be the folder of the benchmarks: an unusable path or
    an existing file (a missing folder is fine: downloads create it)."""
    text = check_path_text(data_root, "data_root")
    if not text.strip():
        raise ValueError(
            f"data_root: empty ({text!r}); expected the folder of the downloaded benchmarks"
        )
    if Path(text).exists() and not Path(text).is_dir():
        raise ValueError(
            f"data_root: {text} is a file; expected the folder that holds the benchmarks' "
            "folders (Cora/raw, PubMed/raw, ...)"
        )


def _names_a_file(text: str) -> bool:
    """Whether a dataset argument is a file path rather than a name: a ``.pt``/``.csv`` ending,
    a folder separator, or an existing file (a name no file system can look up is not)."""
    if text.endswith((".pt", ".pth", ".csv")) or os.sep in text:
        return True
    try:
        return Path(text).exists()
    except (OSError, ValueError):  # too long, a NUL
        return False


def _resolve(name_or_path: str | os.PathLike) -> Path | tuple[str, dict]:
    """An existing ``.pt``/``.csv`` path, or a known dataset key with its parsed parameters;
    every name, parameter and path error of :func:`load` is raised here."""
    text = os.fspath(name_or_path)
    if not str(text).strip():  # Path("") is ".", the current folder
        raise ValueError(
            f"dataset: empty name {text!r}; expected a dataset name "
            f"({', '.join(DATASETS)}) or a .pt/.csv path"
        )
    check_path_text(text, "dataset")  # a name no file system can look up is refused here
    if _names_a_file(text):
        path = Path(text)
        if path.is_dir():
            raise ValueError(f"{path}: is a folder; pass a .pt or .csv file or a dataset name")
        if not path.is_file():
            raise FileNotFoundError(
                f"{path}: no such file; pass a dataset name ({', '.join(DATASETS)}) "
                "or an existing .pt/.csv file"
            )
        return path
    name, _, params = text.partition(":")
    key = name.strip().lower()
    if key not in DATASETS:
        raise ValueError(
            f"dataset: unknown name {name!r}; expected one of {', '.join(DATASETS)} "
            "or a .pt/.csv path"
        )
    if DATASETS[key].kind != "synthetic":
        if params:
            raise ValueError(f"dataset {key}: takes no parameters, received {params!r}; pass {key}")
        return key, {}
    return key, _parse_params(key, params)


def dataset_identity(name_or_path: str | os.PathLike) -> str:
    """What ``name_or_path`` loads, as one string: two spellings of the same dataset (``karate``
    and ``KARATE``, ``csbm:n=200,degree=5`` and ``csbm:degree=5,n=200``, ``g.pt`` and
    ``./g.pt``) give the same.  Reads no file; a name :func:`load` would refuse is its own
    identity (the refusal comes from the check of the name)."""
    text = os.fspath(name_or_path)
    if _names_a_file(text):
        return "path:" + os.path.normpath(os.path.abspath(text))
    name, _, params = text.partition(":")
    key = name.strip().lower()
    if key not in DATASETS:
        return "name:" + text
    if DATASETS[key].kind != "synthetic":
        return "name:" + (key if not params else text)
    try:
        parsed = _parse_params(key, params)
    except ValueError:
        return "name:" + text
    import inspect

    signature = inspect.signature(_SYNTHETIC[key]).parameters
    full = {k: p.default for k, p in signature.items() if p.default is not p.empty}
    full.update(parsed)  # csbm and csbm:n=<its default> load the same graph
    return "name:" + key + ":" + ",".join(f"{k}={float(v)!r}" for k, v in sorted(full.items()))


def check_distinct(names: Sequence[str], option: str = "datasets") -> None:
    """Refuse a list that names one dataset twice in two spellings (``karate,KARATE``): it
    would run twice, and its per-dataset files (``energy_karate.png``, ``energy_KARATE.png``)
    collide on a case-insensitive file system.  The same spelling twice is refused where the
    list is parsed or given (:func:`oversmooth.config.check_repeats`)."""
    seen: dict[str, str] = {}
    for name in names:
        identity = dataset_identity(name)
        if identity in seen and seen[identity] != name:
            raise ValueError(
                f"{option}: {seen[identity]!r} and {name!r} are the same dataset; give it once"
            )
        seen.setdefault(identity, name)


def check_spec(name_or_path: str | os.PathLike) -> None:
    """Validate a dataset name, ``name:params`` or path without loading it (``ValueError`` /
    ``FileNotFoundError`` like :func:`load`), so a run over several datasets fails before its
    first cell rather than after the first dataset's work."""
    _resolve(name_or_path)


# ----------------------------------------------------------------------------- splits and stats


def random_split(
    num_nodes: int, train: float = 0.6, val: float = 0.2, seed: int = 0
) -> dict[str, Tensor]:
    """Random train/val/test node masks (the paper's 60/20/20 protocol by default)."""
    num_nodes = _check_int("num_nodes", num_nodes, 1)
    train = _check_float("train", train, 0.0, 1.0)
    val = _check_float("val", val, 0.0, 1.0 - train)
    perm = torch.randperm(num_nodes, generator=torch.Generator().manual_seed(_check_seed(seed)))
    n_train, n_val = int(round(train * num_nodes)), int(round(val * num_nodes))
    masks = {}
    for split, idx in (
        ("train", perm[:n_train]),
        ("val", perm[n_train : n_train + n_val]),
        ("test", perm[n_train + n_val :]),
    ):
        mask = torch.zeros(num_nodes, dtype=torch.bool)
        mask[idx] = True
        masks[f"{split}_mask"] = mask
    return masks


def split_masks(data: GraphData | Data, split: str = "random", seed: int = 0) -> dict[str, Tensor]:
    """``{"train_mask", "val_mask", "test_mask"}`` for ``split="random"`` (60/20/20, seeded)
    or ``"public"``."""
    if split == "random":
        return random_split(data.num_nodes, seed=seed)
    if split == "public":
        name = getattr(data, "name", "?")
        have = [k for k in SPLIT_MASKS if getattr(data, k, None) is not None]
        if not have:
            raise ValueError(
                f"split: dataset {name!r} has no public split; use the random split "
                "(--split random)"
            )
        if len(have) < len(SPLIT_MASKS):
            missing = [k for k in SPLIT_MASKS if k not in have]
            raise ValueError(
                f"split: dataset {name!r} has {', '.join(have)} but no {', '.join(missing)}; "
                "expected all three masks of a public split: save them, or use the random "
                "split (--split random)"
            )
        n = int(data.num_nodes)
        masks = {k: bool_mask(getattr(data, k), n, f"dataset {name!r}: {k}") for k in have}
        for a, b in (("train_mask", "val_mask"), ("train_mask", "test_mask")):
            both = int((masks[a] & masks[b]).sum())
            if both:
                warnings.warn(
                    f"split: dataset {name!r}: {both} nodes are in both {a} and {b}, so the "
                    f"{b.removesuffix('_mask')} accuracy counts nodes the model trained on",
                    stacklevel=2,
                )
        return masks
    raise ValueError(f"split: expected one of 'random', 'public', received {split!r}")


def graph_stats(data: GraphData | Data) -> dict[str, float | int]:
    """Nodes, undirected edges (unordered pairs, self loops excluded), features,
    classes (the largest label + 1: a classifier's output width, as PyG counts them), edge
    homophily (fraction of those same edges joining equal labels) and
    isolated nodes (no edge to another node, in either direction: a self loop alone leaves a
    node isolated, as :func:`oversmooth.spectral.spectral_gap` counts it).

    Homophily counts each unordered pair once, as the edge count does: over the columns of
    ``edge_index`` a pair stored in both directions, in one, or repeated (a ``.pt`` file may
    hold any of these) would weigh 2, 1 or more, and a self loop joins a label to itself."""
    n = int(data.num_nodes)
    src, dst = data.edge_index
    off = src != dst
    a, b = torch.minimum(src[off], dst[off]), torch.maximum(src[off], dst[off])
    keys = torch.unique(a * n + b) if a.numel() else a
    touched = torch.zeros(n, dtype=torch.bool)
    touched[src[off]] = True
    touched[dst[off]] = True
    y = getattr(data, "y", None)
    stats: dict[str, float | int] = {
        "nodes": n,
        "edges": int(keys.numel()),
        "directed_edges": int(data.edge_index.size(1)),
        "self_loops": int((~off).sum()),
        "features": int(data.x.size(1)) if data.x is not None else 0,
        "classes": int(y.max()) + 1 if y is not None and y.numel() else 0,
        # over the unordered pairs of two distinct nodes, in float64
        "homophily": float((y[keys // n] == y[keys % n]).double().mean())
        if y is not None and keys.numel()
        else float("nan"),
        "isolated_nodes": int((~touched).sum()),
    }
    return stats
