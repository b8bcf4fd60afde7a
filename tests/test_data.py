"""Loaders: embedded, PyG benchmarks (offline and local raw), synthetic, user files, splits,
stats."""

from __future__ import annotations

import math
import pickle
import sys
import urllib.error
import warnings

import pytest
import torch

from oversmooth import data as D


def _same_graph(a, b):
    assert torch.equal(a.x, b.x)
    assert torch.equal(a.edge_index, b.edge_index)
    assert torch.equal(a.y, b.y)


@pytest.mark.parametrize("name,pyg", [("cora", "Cora"), ("citeseer", "CiteSeer")])
def test_embedded_copy_equals_planetoid_from_raw(planetoid_root, name, pyg):
    from torch_geometric.datasets import Planetoid

    reference = Planetoid(root=str(planetoid_root), name=pyg)[0]
    embedded = D.load(name)
    _same_graph(embedded, reference)
    for mask in ("train_mask", "val_mask", "test_mask"):
        assert torch.equal(getattr(embedded, mask), getattr(reference, mask))
    # and the PyG path on local raw files gives the same graph
    _same_graph(D.load(name, data_root=planetoid_root), embedded)


def test_a_data_root_without_coras_files_keeps_the_shipped_copy(tmp_path, monkeypatch):
    """``--data-root`` given for PubMed alone: Cora and CiteSeer come from the package, with
    nothing downloaded (before, the load tried to download them there and failed offline,
    which stopped ``oversmooth reproduce --data-root``)."""
    from torch_geometric.datasets import Planetoid

    def offline(self):
        raise urllib.error.URLError("network unreachable")

    monkeypatch.setattr(Planetoid, "download", offline)
    (tmp_path / "PubMed" / "raw").mkdir(parents=True)
    assert not D.on_disk("cora", tmp_path)
    _same_graph(D.load("cora", data_root=tmp_path), D.load("cora"))
    assert not (tmp_path / "Cora").exists()


def test_embedded_files_are_small():
    from importlib import resources

    total = sum(
        f.stat().st_size
        for f in resources.files("oversmooth._data").iterdir()
        if f.name.endswith(".npz")
    )
    assert total <= 3 * 1024 * 1024


def test_cora_stats_match_table_9_of_the_paper():
    stats = D.graph_stats(D.load("cora"))
    assert (stats["nodes"], stats["edges"], stats["features"], stats["classes"]) == (
        2708,
        5278,
        1433,
        7,
    )
    assert stats["isolated_nodes"] == 0 and stats["self_loops"] == 0
    assert 0.80 < stats["homophily"] < 0.82


def test_citeseer_stats():
    stats = D.graph_stats(D.load("citeseer"))
    # PyG's CiteSeer: 4552 undirected edges (the paper's Table 9 prints 4522), 48 isolated nodes
    assert (stats["nodes"], stats["edges"], stats["features"], stats["classes"]) == (
        3327,
        4552,
        3703,
        6,
    )
    assert stats["isolated_nodes"] == 48


def test_offline_download_failure_names_files_and_leaves_nothing(tmp_path, monkeypatch):
    from torch_geometric.datasets import Coauthor, Planetoid

    def refuse(self):
        raise urllib.error.URLError("network unreachable")

    # the download step itself fails, as it does offline
    monkeypatch.setattr(Planetoid, "download", refuse)
    monkeypatch.setattr(Coauthor, "download", refuse)
    root = tmp_path / "root"
    with pytest.raises(D.DatasetUnavailableError) as err:
        D.load("pubmed", data_root=root)
    message = str(err.value)
    assert str(root / "PubMed" / "raw") in message and "ind.pubmed.graph" in message
    assert not root.exists()
    with pytest.raises(D.DatasetUnavailableError, match="ms_academic_cs.npz"):
        D.load("cs", data_root=root)


def test_quiet_drops_the_lines_pyg_prints_while_it_downloads(tmp_path, monkeypatch, capsys):
    from torch_geometric.datasets import Amazon

    def offline(self):
        print("Downloading https://example.org/photo.npz", file=sys.stderr)  # as PyG does
        raise urllib.error.URLError("network unreachable")

    monkeypatch.setattr(Amazon, "download", offline)
    with pytest.raises(D.DatasetUnavailableError):
        D.load("photo", data_root=tmp_path)
    assert "Downloading" in capsys.readouterr().err
    with D.pyg_messages(False), pytest.raises(D.DatasetUnavailableError, match="offline"):
        D.load("photo", data_root=tmp_path)
    assert capsys.readouterr().err == ""
    assert D._PYG_MESSAGES == [True]  # restored on the way out, also after an error


def test_synthetic_generators():
    assert D.graph_stats(D.ring(12))["edges"] == 12
    assert D.graph_stats(D.grid(3, 5))["edges"] == 3 * 4 + 2 * 5
    assert D.graph_stats(D.complete(6))["edges"] == 15
    karate = D.graph_stats(D.karate())
    assert (karate["nodes"], karate["edges"], karate["classes"]) == (34, 78, 2)
    g = D.load("grid:rows=4,cols=2,features=3")
    assert g.x.shape == (8, 3)
    with pytest.raises(
        ValueError, match="expected key=value parameters with key in rows, cols, features, seed"
    ):
        D.load("grid:depth=3")
    with pytest.raises(ValueError, match="parameter n must be a number"):
        D.load("ring:n=abc")
    with pytest.raises(ValueError, match="n: expected an integer >= 3"):
        D.load("ring:n=2")


def test_csbm_is_seeded_symmetric_and_homophilous():
    a = D.csbm(n=20000, classes=4, degree=8, homophily=0.7, seed=3)
    b = D.csbm(n=20000, classes=4, degree=8, homophily=0.7, seed=3)
    assert torch.equal(a.edge_index, b.edge_index) and torch.equal(a.x, b.x)
    from torch_geometric.utils import is_undirected

    assert is_undirected(a.edge_index)
    stats = D.graph_stats(a)
    assert stats["self_loops"] == 0
    assert abs(stats["homophily"] - 0.7) < 0.02
    assert abs(2 * stats["edges"] / stats["nodes"] - 8) < 0.2
    assert torch.bincount(a.y).tolist() == [5000] * 4
    # the class signal is in the features: class means differ along mu
    assert not torch.equal(D.csbm(n=100, seed=1).x, D.csbm(n=100, seed=2).x)


# sha256 prefixes of (edge_index, x, y) that the generator gave before its memory was cut
# (commit 9e220d2): the same graphs, bit for bit, whatever the implementation
CSBM_DIGESTS = [
    (
        dict(n=1000, classes=3, degree=7.5, seed=3),
        ("47ba77d354716424", "954e369675277089", "d14feb2c0b5482ea"),
    ),
    (
        dict(n=5000, classes=1, degree=4, signal=2.5, features=5, seed=1),
        ("9c72c6aed2cfd08b", "1915722d5131e656", "e7e2dcff542de953"),
    ),
    (
        dict(n=300, classes=2, degree=20, homophily=0.3, seed=0),
        ("1a6e9eb3137b39f5", "ea936b9a77877dde", "1e93e52d2e288f8b"),
    ),
]


def _digest(t: torch.Tensor) -> str:
    import hashlib

    return hashlib.sha256(t.contiguous().numpy().tobytes()).hexdigest()[:16]


@pytest.mark.parametrize("params, digests", CSBM_DIGESTS)
def test_csbm_draws_the_same_graphs_as_before(params, digests):
    g = D.csbm(**params)
    assert (_digest(g.edge_index), _digest(g.x), _digest(g.y)) == digests
    assert g.edge_index.dtype == torch.int64 and g.x.dtype == torch.float32
    cora = D.load("cora")
    assert _digest(cora.edge_index) == "299cb541efef8bc7"  # symmetrised the same way


def test_symmetrised_edges_are_sorted_by_target_then_source_without_repeats(tmp_path):
    path = tmp_path / "edges.csv"
    path.write_text("source,target\n0,1\n1,0\n2,2\n2,0\n3,1\n1,3\n0,1\n")  # repeats, a loop
    g = D.load(path)
    assert g.edge_index.tolist() == [[1, 2, 0, 3, 0, 1], [0, 0, 1, 1, 2, 3]]
    assert D.load("ring:n=4").edge_index.tolist() == [
        [1, 3, 0, 2, 1, 3, 0, 2],
        [0, 0, 1, 1, 2, 2, 3, 3],
    ]


def test_csbm_large_graph_is_well_formed():
    # speed is measured by `oversmooth bench` (scaling_size builds 10^6-node CSBMs), not
    # asserted here
    big = D.csbm(n=200_000, degree=10, classes=5, seed=0)
    assert big.edge_index.size(1) > 1_900_000
    assert int(big.edge_index.max()) < 200_000 and big.x.shape == (200_000, 32)


def test_pt_roundtrip_and_dict(tmp_path):
    from torch_geometric.data import Data

    data = Data(
        x=torch.randn(4, 3),
        edge_index=torch.tensor([[0, 1, 2], [1, 2, 3]]),
        y=torch.tensor([0, 1, 0, 1]),
    )
    torch.save(data, tmp_path / "g.pt")
    loaded = D.load(tmp_path / "g.pt")
    _same_graph(loaded, data)
    torch.save({"x": data.x, "edge_index": data.edge_index}, tmp_path / "d.pt")
    assert torch.equal(D.load(str(tmp_path / "d.pt")).edge_index, data.edge_index)


class _Evil:
    def __reduce__(self):
        return (open, ("/tmp/oversmooth-pwned", "w"))


def test_pt_never_runs_arbitrary_pickles(tmp_path):
    import os

    path = tmp_path / "evil.pt"
    with path.open("wb") as fh:
        pickle.dump(_Evil(), fh)
    if os.path.exists("/tmp/oversmooth-pwned"):
        os.remove("/tmp/oversmooth-pwned")
    with pytest.raises(ValueError, match="not a loadable PyG Data file") as info:
        D.load(path)
    assert not os.path.exists("/tmp/oversmooth-pwned")
    # what the safe load refused, in a few words, not torch's paragraph about weights_only
    assert "damaged, not a torch file, or objects beyond tensors" in str(info.value)
    assert "In PyTorch 2.6" not in str(info.value)
    (tmp_path / "garbage.pt").write_bytes(b"not a torch file")
    with pytest.raises(ValueError, match="garbage.pt: not a loadable") as info:
        D.load(tmp_path / "garbage.pt")
    assert "damaged, not a torch file" in str(info.value)


def test_csv_edge_list_with_features_and_labels(tmp_path):
    (tmp_path / "e.csv").write_text("source,target\n0,1\n1,2\n2,3\n")
    (tmp_path / "x.csv").write_text("a,b\n1,0\n0,1\n1,1\n0,0\n")
    (tmp_path / "y.csv").write_text("label\n0\n1\n1\n0\n")
    g = D.load(tmp_path / "e.csv", features=tmp_path / "x.csv", labels=tmp_path / "y.csv")
    assert g.edge_index.tolist() == [[1, 0, 2, 1, 3, 2], [0, 1, 1, 2, 2, 3]]
    assert g.x.shape == (4, 2) and g.y.tolist() == [0, 1, 1, 0]
    directed = D.load(tmp_path / "e.csv", directed=True)
    assert directed.edge_index.tolist() == [[0, 1, 2], [1, 2, 3]]
    (tmp_path / "w.csv").write_text("0,1,2.5\n1,2,0.5\n")
    weighted = D.load(tmp_path / "w.csv")
    assert sorted(weighted.edge_weight.tolist()) == [0.5, 0.5, 2.5, 2.5]


def _refused(tmp_path, files: dict[str, str], match: str, edges: str, **parts: str):
    """Write ``files`` (name -> text) into ``tmp_path``; loading the edge list ``edges`` with
    ``parts`` (``features=`` / ``labels=``: file names) must raise ValueError matching
    ``match``; returns pytest's record of it."""
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    with pytest.raises(ValueError, match=match) as err:
        D.load(tmp_path / edges, **{part: tmp_path / name for part, name in parts.items()})
    return err


def test_csv_errors_name_file_and_line(tmp_path):
    _refused(
        tmp_path,
        {"bad.csv": "source,target\n0,1\n1,x\n"},
        r"bad.csv:3: expected numbers",
        "bad.csv",
    )
    _refused(
        tmp_path, {"ragged.csv": "0,1\n1,2,3\n"}, r"ragged.csv:2: expected 2 columns", "ragged.csv"
    )
    # the file whose rows count the nodes is the one named (it may be the one to fix)
    _refused(
        tmp_path,
        {"e.csv": "0,1\n1,5\n", "x.csv": "1\n2\n3\n"},
        r"x.csv: 3 rows, one per node, but .*e.csv names node 5",
        "e.csv",
        features="x.csv",
    )
    _refused(
        tmp_path,
        {"y3.csv": "0\n1\n1\n"},
        r"y3.csv: 3 rows, one per node, but .*e.csv names node",
        "e.csv",
        labels="y3.csv",
    )
    (tmp_path / "e2.csv").write_text("0,1\n1,2\n")
    (tmp_path / "y.csv").write_text("0\n1\n")
    with pytest.raises(ValueError, match="labels have 2 rows, expected one per node \\(3\\)"):
        D.load(tmp_path / "e2.csv", features=tmp_path / "x.csv", labels=tmp_path / "y.csv")
    with pytest.raises(FileNotFoundError, match="missing.csv: no such file"):
        D.load(tmp_path / "missing.csv")
    with pytest.raises(FileNotFoundError, match="nofeat.csv: no such file"):
        D.load(tmp_path / "e2.csv", features=tmp_path / "nofeat.csv")


def test_unknown_name_lists_names():
    with pytest.raises(
        ValueError, match="unknown name 'corra'; expected one of cora, citeseer, pubmed"
    ):
        D.load("corra")
    with pytest.raises(ValueError, match="takes no parameters"):
        D.load("cora:n=3")
    # a graph without parameters said "expected key=value parameters with key in (none)"
    with pytest.raises(
        ValueError, match="karate: takes no parameters, received 'n=5'; pass karate"
    ):
        D.load("karate:n=5")


def test_splits():
    masks = D.random_split(100, seed=1)
    total = masks["train_mask"].int() + masks["val_mask"].int() + masks["test_mask"].int()
    assert torch.equal(total, torch.ones(100, dtype=torch.int32))
    assert [int(m.sum()) for m in masks.values()] == [60, 20, 20]
    assert torch.equal(D.random_split(100, seed=1)["train_mask"], masks["train_mask"])
    assert not torch.equal(D.random_split(100, seed=2)["train_mask"], masks["train_mask"])
    cora = D.load("cora")
    public = D.split_masks(cora, "public")
    assert [int(m.sum()) for m in public.values()] == [140, 500, 1000]
    with pytest.raises(ValueError, match="has no public split"):
        D.split_masks(D.ring(5), "public")
    with pytest.raises(ValueError, match="split: expected one of"):
        D.split_masks(cora, "stratified")


def test_synthetic_parameters_given_twice_are_refused():
    with pytest.raises(ValueError, match="parameter n given twice"):
        D.load("csbm:n=10,n=20")


def test_csv_node_ids_must_be_finite_and_sane(tmp_path):
    for text, message in (
        ("0,1\n1,inf\n", "non-negative integers, received \\[1.0, inf\\]"),
        ("0,1\n-1,2\n", "non-negative integers"),
        ("0,1\n1,1e17\n", "node id 100000000000000000 is too large"),
    ):
        path = tmp_path / "e.csv"
        path.write_text(text)
        with pytest.raises(ValueError, match=message):
            D.load(path)


def test_csv_not_utf8_and_folders_are_named(tmp_path):
    path = tmp_path / "latin.csv"
    path.write_bytes("0,1\n# \xe9t\xe9\n".encode("latin-1"))
    with pytest.raises(ValueError, match=f"{path}: not UTF-8 text"):
        D.load(path)
    (tmp_path / "dir.csv").mkdir()
    with pytest.raises(ValueError, match="dir.csv: is a folder"):
        D.load(tmp_path / "dir.csv")
    with pytest.raises(ValueError, match="only an edge-list .csv takes them"):
        D.load("karate", features=path)


@pytest.mark.parametrize(
    "dtype", [torch.int64, torch.int32, torch.uint8, torch.bool, torch.float16, torch.bfloat16]
)
def test_pt_features_of_other_dtypes_become_float32_with_a_warning(tmp_path, dtype):
    path = tmp_path / "g.pt"
    x = torch.tensor([[1, 0], [0, 1], [1, 1]]).to(dtype)
    torch.save({"x": x, "edge_index": torch.tensor([[0, 1], [1, 2]])}, path)
    with pytest.warns(UserWarning, match=f"features have dtype {dtype}; converted to float32"):
        data = D.load(path)
    assert data.x.dtype == torch.float32 and torch.equal(data.x, x.float())


def test_pt_bad_tensors_are_value_errors(tmp_path):
    path = tmp_path / "g.pt"
    edge = torch.tensor([[0], [1]])
    torch.save({"x": torch.ones(2, 2, dtype=torch.complex64), "edge_index": edge}, path)
    with pytest.raises(ValueError, match="complex"):
        D.load(path)
    torch.save({"x": torch.ones(2, 2), "edge_index": torch.tensor([[0.0], [1.0]])}, path)
    with pytest.raises(ValueError, match="edge_index must be an integer tensor"):
        D.load(path)
    torch.save({"x": torch.ones(2), "edge_index": torch.tensor([[0], [1]])}, path)
    with pytest.raises(ValueError, match="x must be a \\[num_nodes, num_features\\] tensor"):
        D.load(path)


def test_check_spec_validates_without_loading(tmp_path):
    D.check_spec("cora")
    D.check_spec("csbm:n=10")
    with pytest.raises(ValueError, match="unknown name 'bogus'"):
        D.check_spec("bogus")
    with pytest.raises(ValueError, match="given twice"):
        D.check_spec("csbm:n=10,n=3")
    with pytest.raises(FileNotFoundError):
        D.check_spec(tmp_path / "none.csv")


def test_graph_data_behaves_like_pyg_data_and_converts_to_it():
    from torch_geometric.data import Data

    g = D.load("cora")
    assert isinstance(g, D.GraphData)
    assert (g.num_nodes, g.num_edges, g.num_features) == (2708, 10556, 1433)
    assert getattr(g, "edge_weight", None) is None and "y" in g and "edge_weight" not in g
    with pytest.raises(AttributeError):
        g.edge_weight  # noqa: B018 - absent, as on a Data
    pyg = g.to_pyg()
    assert isinstance(pyg, Data) and pyg.name == "cora"
    assert (pyg.num_nodes, pyg.num_edges, pyg.num_features) == (2708, 10556, 1433)
    for key in ("x", "edge_index", "y", "train_mask", "val_mask", "test_mask"):
        assert torch.equal(getattr(pyg, key), getattr(g, key)), key
    assert set(pyg.keys()) - {"num_nodes"} == set(g.keys())
    moved, copy = g.to("cpu"), g.clone()
    assert moved.x is g.x  # already there: shared, like Tensor.to
    assert torch.equal(copy.x, g.x) and copy.x.data_ptr() != g.x.data_ptr()
    assert copy.name == "cora" and copy.num_nodes == 2708
    assert "GraphData(x=[2708, 1433], edge_index=[2, 10556]" in repr(g)
    ring = D.load("ring:n=4,features=2")
    assert getattr(ring, "y", None) is None and ring.to_pyg().num_nodes == 4


def test_weighted_csv_is_symmetrised_like_pyg_to_undirected(tmp_path):
    from torch_geometric.utils import to_undirected

    gen = torch.Generator().manual_seed(0)
    pairs = torch.randint(0, 6, (2, 30), generator=gen)  # duplicates, both directions, loops
    weight = torch.rand(30, generator=gen, dtype=torch.float64)
    rows = [f"{s},{t},{w!r}" for (s, t), w in zip(pairs.t().tolist(), weight.tolist(), strict=True)]
    (tmp_path / "w.csv").write_text("\n".join(rows) + "\n")
    g = D.load(tmp_path / "w.csv")
    n = int(pairs.max()) + 1
    off = pairs[0] != pairs[1]  # self loops dropped, as an unweighted CSV's
    edge_index, edge_weight = to_undirected(pairs[:, off], weight[off], num_nodes=n, reduce="max")
    assert torch.equal(g.edge_index, edge_index)
    assert torch.equal(g.edge_weight, edge_weight) and g.edge_weight.dtype == torch.float64


def test_a_csv_made_undirected_drops_self_loops_with_or_without_weights(tmp_path):
    """The same rows with and without a weight column of ones give the same graph (the
    weighted path kept a self loop the unweighted one dropped), and homophily counts the
    edges between two nodes only (a self loop joined a label to itself)."""
    rows = ["0,1", "1,2", "2,0", "2,3", "1,1", "0,1"]
    (tmp_path / "u.csv").write_text("\n".join(rows) + "\n")
    (tmp_path / "w.csv").write_text("\n".join(r + ",1" for r in rows) + "\n")
    (tmp_path / "y.csv").write_text("0\n1\n1\n0\n")
    u = D.load(tmp_path / "u.csv", labels=tmp_path / "y.csv")
    w = D.load(tmp_path / "w.csv", labels=tmp_path / "y.csv")
    assert set(map(tuple, u.edge_index.t().tolist())) == set(map(tuple, w.edge_index.t().tolist()))
    assert bool((w.edge_index[0] != w.edge_index[1]).all())
    for graph in (u, w):
        stats = D.graph_stats(graph)
        assert stats["self_loops"] == 0 and stats["homophily"] == 0.25  # 2 of 8, exactly
    # a graph that keeps its self loop (a .pt): the loop is not an edge between two labels
    from torch_geometric.data import Data

    looped = Data(x=u.x, edge_index=torch.cat([u.edge_index, torch.tensor([[1], [1]])], 1), y=u.y)
    stats = D.graph_stats(looped)
    assert stats["self_loops"] == 1 and stats["homophily"] == 0.25


@pytest.mark.parametrize(
    "name, text, first",
    [
        ("bom.csv", "\ufeff0,1\n1,2\n2,3\n", [0, 1]),  # Excel's "CSV UTF-8"
        ("bom_header.csv", "\ufeffsource,target\n0,1\n1,2\n2,3\n", [0, 1]),
    ],
)
def test_csv_first_row_is_kept_after_a_byte_order_mark(tmp_path, name, text, first):
    """A BOM made the first cell unreadable, so the first data row was taken for a header and
    dropped (3 edges read as 2)."""
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    g = D.load(path, directed=True)
    assert g.edge_index.t().tolist() == [first, [1, 2], [2, 3]]
    (tmp_path / "x.csv").write_text("\ufeff0.5,1.5\n2.5,3.5\n4.5,5.5\n6.5,7.5\n", encoding="utf-8")
    assert D.load(path, features=tmp_path / "x.csv").x[0].tolist() == [0.5, 1.5]


@pytest.mark.parametrize(
    "edges, features, line1",
    [
        ("0,1\n1,2\n", "0.5,NA\n1,2\n3,4\n", "'0.5,NA'"),  # the first feature row, one cell NA
        ("0,1,\n1,2,1\n2,3,1\n", None, "'0,1,'"),  # the first edge row, its weight missing
    ],
)
def test_a_partly_numeric_line_1_is_a_bad_row_not_a_header(tmp_path, edges, features, line1):
    """Line 1 is a header only when none of its cells is a number; otherwise it was dropped
    silently (the graph lost its first node's features or its first edge)."""
    (tmp_path / "e.csv").write_text(edges)
    bad = tmp_path / "e.csv"
    if features is not None:
        (tmp_path / "x.csv").write_text(features)
        bad = tmp_path / "x.csv"
    with pytest.raises(ValueError, match=rf"{bad}:1: expected numbers for .*received {line1}"):
        D.load(tmp_path / "e.csv", features=tmp_path / "x.csv" if features else None)
    # a header, all words, is still skipped; a comment line too
    (tmp_path / "h.csv").write_text("# my graph\n0,1\n1,2\n")
    assert D.load(tmp_path / "h.csv", directed=True).edge_index.tolist() == [[0, 1], [1, 2]]


def test_pandas_unnamed_column_header_of_a_features_csv_is_refused_not_read_as_node_0(tmp_path):
    """``pandas.DataFrame(x).to_csv(path, index=False)`` writes the header ``0,1,2``: all
    numbers, so it was read as node 0's features, every node's features moved to the next
    node and one isolated node was added, silently (an audit)."""
    import numpy as np
    import pandas as pd

    (tmp_path / "e.csv").write_text("0,1\n1,2\n2,3\n")
    x = np.arange(12, dtype=float).reshape(4, 3) / 7 + 0.25
    pd.DataFrame(x).to_csv(tmp_path / "x.csv", index=False)
    assert (tmp_path / "x.csv").read_text().splitlines()[0] == "0,1,2"
    with pytest.raises(ValueError, match=r"x.csv:1: line 1 reads '0,1,2', the header pandas"):
        D.load(tmp_path / "e.csv", features=tmp_path / "x.csv")
    pd.DataFrame(x).to_csv(tmp_path / "x.csv", index=False, header=False)  # as the error says
    assert torch.allclose(
        D.load(tmp_path / "e.csv", features=tmp_path / "x.csv").x,
        torch.tensor(x, dtype=torch.float32),
    )
    # node 0's features written as values, not column numbers, are data
    (tmp_path / "x.csv").write_text("0.0,1.0,2.0\n1,1,1\n2,2,2\n3,3,3\n")
    assert D.load(tmp_path / "e.csv", features=tmp_path / "x.csv").x[0].tolist() == [0, 1, 2]
    # a wide header is said short
    pd.DataFrame(np.ones((4, 40))).to_csv(tmp_path / "x.csv", index=False)
    with pytest.raises(ValueError, match=r"line 1 reads '0,1,2,3,4,5,6,7,8,9,\.\.\.,39'"):
        D.load(tmp_path / "e.csv", features=tmp_path / "x.csv")


def test_a_narrow_index_header_is_read_as_data_with_a_warning_and_edges_are_not_checked(
    tmp_path,
):
    """``0`` or ``0,1`` can be node 0's features (a count, a one-hot class): read as data, with
    a warning naming the file; an edge list starting with the edge 0 -> 1 (many do) and a
    labels file starting with class 0 are read without one."""
    (tmp_path / "e.csv").write_text("0,1\n1,2\n2,3\n")
    (tmp_path / "y.csv").write_text("0\n1\n0\n1\n")
    (tmp_path / "x.csv").write_text("0,1\n1,0\n0,1\n1,0\n")
    with pytest.warns(UserWarning, match=r"x.csv:1: line 1 reads '0,1', .*read as data"):
        g = D.load(tmp_path / "e.csv", features=tmp_path / "x.csv", labels=tmp_path / "y.csv")
    assert g.x[0].tolist() == [0, 1] and g.num_nodes == 4
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        D.load(tmp_path / "e.csv", labels=tmp_path / "y.csv")


def test_pandas_header_of_a_labels_csv_with_one_row_too_many_is_said(tmp_path):
    """``pandas.Series(y).to_csv(path, index=False)`` writes the header ``0``: read as node 0's
    label, every label moved to the next node and (without features, where the labels count
    the nodes) one isolated node was added, silently; beside features the error said only "5
    rows, expected 4".  A file starting with the label 0 and one row per node is data."""
    import pandas as pd

    (tmp_path / "e.csv").write_text("0,1\n1,2\n2,3\n3,0\n")
    pd.Series([2, 0, 1, 1]).to_csv(tmp_path / "y.csv", index=False)
    assert (tmp_path / "y.csv").read_text().splitlines()[0] == "0"
    with pytest.warns(UserWarning, match=r"y.csv:1: line 1 reads '0', the header pandas .*node 4"):
        g = D.load(tmp_path / "e.csv", labels=tmp_path / "y.csv")
    assert g.num_nodes == 5  # read as the file says, with the warning
    (tmp_path / "x.csv").write_text("1,0\n0,1\n1,1\n0,0\n")
    with pytest.raises(
        ValueError, match=r"y.csv:1: line 1 reads '0', .* 5 rows for 4 nodes; remove"
    ):
        D.load(tmp_path / "e.csv", features=tmp_path / "x.csv", labels=tmp_path / "y.csv")
    pd.Series([2, 0, 1, 1]).to_csv(tmp_path / "y.csv", index=False, header=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert D.load(tmp_path / "e.csv", labels=tmp_path / "y.csv").y.tolist() == [2, 0, 1, 1]


@pytest.mark.parametrize(
    "text, line, shown, why",
    [
        ("0\n1.7\n1\n", 2, "'1.7'", "is not a class id"),
        ("0\nnan\n1\n", 2, "'nan'", "is not a class id"),
        ("0\n1\n 1e300 \n", 3, "'1e300'", "is too large for a class id"),
        ("label\n0\n-1\n1\n", 3, "'-1'", "is not a class id"),
    ],
)
def test_csv_labels_must_be_class_ids_named_in_the_labels_file(tmp_path, text, line, shown, why):
    """1.7 was truncated to 1 silently; NaN and 1e300 became -2^63 with numpy's cast warning
    and an error naming the edge list."""
    import warnings

    (tmp_path / "e.csv").write_text("0,1\n1,2\n")
    (tmp_path / "y.csv").write_text(text)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no numpy cast warning on the way
        with pytest.raises(ValueError, match=rf"y.csv:{line}: label {shown} {why}") as err:
            D.load(tmp_path / "e.csv", labels=tmp_path / "y.csv")
    assert "e.csv" not in str(err.value)


def test_extra_columns_are_refused_not_taken_for_weights_or_labels(tmp_path):
    """A 4th column made the 3rd (a time) the weight; a node,label file gave the labels in
    row order, whatever the node column said."""
    _refused(
        tmp_path,
        {"e4.csv": "source,target,time,weight\n0,1,100,1\n1,2,200,1\n"},
        r"e4.csv:2: 4 columns, expected at most 3 for edges",
        "e4.csv",
    )
    _refused(
        tmp_path,
        {"e.csv": "0,1\n1,2\n", "y.csv": "node,label\n2,1\n0,0\n1,0\n"},
        r"y.csv:2: 2 columns, expected at most 1 for labels",
        "e.csv",
        labels="y.csv",
    )
    # the documented shapes still load
    (tmp_path / "w.csv").write_text("0,1,2.5\n")
    assert D.load(tmp_path / "w.csv").edge_weight.tolist() == [2.5, 2.5]


@pytest.mark.parametrize(
    "features, message",
    [
        ("1,2\n3,nan\n4,5\n", r"x.csv: features hold nan \(node 1, feature 1\); .*fill"),
        ("1,2\n3,4\n1e300,5\n", r"x.csv: features hold inf \(node 2, feature 0\); .*float32"),
    ],
)
def test_nonfinite_features_are_refused_naming_the_file_node_and_feature(
    tmp_path, features, message
):
    """A NaN feature loaded and made every energy of its neighbourhood NaN; 1e300 in a CSV
    became inf in float32 silently."""
    import torch
    from torch_geometric.data import Data

    files = {"e.csv": "0,1\n1,2\n2,0\n", "x.csv": features}
    _refused(tmp_path, files, message, "e.csv", features="x.csv")
    x = torch.tensor([[1.0, 0.0], [0.0, float("-inf")]])
    torch.save(Data(x=x, edge_index=torch.tensor([[0, 1], [1, 0]])), tmp_path / "g.pt")
    with pytest.raises(ValueError, match=r"g.pt: features hold -inf \(node 1, feature 1\)"):
        D.load(tmp_path / "g.pt")


def test_homophily_counts_each_unordered_pair_once_like_the_edge_count():
    """Over edge_index columns, a pair stored twice or in both directions weighed more than
    one stored once (the audit's p17_mixed_dir.pt gave 1/3, p2_dup_loops.pt 7/9)."""
    from torch_geometric.data import Data

    # 0-1 one way, 1-2 both ways: pairs {0,1} (equal labels) and {1,2} (not)
    mixed = Data(x=torch.ones(3, 1), edge_index=torch.tensor([[0, 1, 2], [1, 2, 1]]))
    mixed.y = torch.tensor([0, 0, 1])
    stats = D.graph_stats(mixed)
    assert (stats["edges"], stats["homophily"]) == (2, 0.5)
    # {0,1} four times and a loop, {2,3} three times, {3,4} twice: 2 of 3 pairs equal
    dup = Data(
        x=torch.ones(6, 1),
        edge_index=torch.tensor([[0, 1, 0, 1, 0, 2, 2, 3, 3, 4], [1, 0, 1, 0, 0, 3, 3, 2, 4, 3]]),
        y=torch.tensor([0, 0, 1, 1, 0, 1]),
    )
    stats = D.graph_stats(dup)
    assert (stats["edges"], stats["self_loops"], stats["homophily"]) == (3, 1, 2 / 3)
    # a graph with self loops only has no edge between two nodes
    loops = Data(x=torch.ones(2, 1), edge_index=torch.tensor([[0], [0]]), y=torch.tensor([0, 1]))
    assert math.isnan(D.graph_stats(loops)["homophily"])


def test_csbm_docstring_states_the_realised_degree_of_dense_settings():
    """The docstring promised about n*degree/2 edges and homophily ``homophily`` "up to the few
    self loops and duplicates"; on dense settings far fewer survive.  It now gives measured
    numbers (checked here) and points at ``datasets --stats``."""
    doc = " ".join((D.csbm.__doc__ or "").split())
    assert "up to the few self loops" not in doc and "datasets --stats" in doc
    degrees, homophilies = [], []
    for seed in range(20):
        stats = D.graph_stats(D.csbm(n=200, degree=20, homophily=0.5, classes=5, seed=seed))
        degrees.append(2 * stats["edges"] / stats["nodes"])
        homophilies.append(stats["homophily"])
    assert "18.3 and 0.47" in doc
    assert round(sum(degrees) / 20, 1) == 18.3 and round(sum(homophilies) / 20, 2) == 0.47
    stats = D.graph_stats(D.csbm(n=100, degree=50))
    assert "about 36" in doc and 35 < 2 * stats["edges"] / stats["nodes"] < 37


@pytest.mark.parametrize(
    ("text", "name"), [("0\t1\n1\t2\n", "tabs"), ("0;1\n", "semicolons"), ("0 1\n1 2\n", "spaces")]
)
def test_a_csv_separated_otherwise_is_named_as_such(tmp_path, text, name):
    """A tab-separated edge list lost its first line as a header and was refused on the second
    with "fill in the cells that are not numbers" (an audit); a one-line one read as empty."""
    _refused(
        tmp_path,
        {"e.csv": text},
        rf"e.csv:1: .* is one cell: the file is separated by {name}",
        "e.csv",
    )
    (tmp_path / "h.csv").write_text("source\ttarget\n0\t1\n")  # a header, then the rows
    with pytest.raises(ValueError, match=r"h.csv:2: .* separated by tabs"):
        D.load(tmp_path / "h.csv")


def test_csv_ids_that_leave_numbers_unused_are_said_to_add_isolated_nodes(tmp_path):
    """Ids 5, 7, 9 make 10 nodes, 7 isolated, in the 1/n of every energy: a warning says so
    (an audit found the energy a tenth of the 3 real nodes', silently); none with a features
    file listing every node, or with ids 0..n-1."""
    (tmp_path / "gap.csv").write_text("5,7\n7,9\n")
    with pytest.warns(UserWarning, match=r"ids run from 0 to 9 but 7 of them appear in no edge"):
        g = D.load(tmp_path / "gap.csv")
    assert g.num_nodes == 10
    (tmp_path / "x.csv").write_text("\n".join(["1"] * 10) + "\n")
    (tmp_path / "ok.csv").write_text("0,1\n1,2\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        D.load(tmp_path / "gap.csv", features=tmp_path / "x.csv")
        D.load(tmp_path / "ok.csv")


def test_a_saved_batch_or_adj_t_is_refused_saying_what_to_save(tmp_path):
    from torch_geometric.data import Batch, Data

    ei = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])
    one = Data(x=torch.randn(3, 2), edge_index=ei)
    torch.save(Batch.from_data_list([one, one]), tmp_path / "batch.pt")
    with pytest.raises(ValueError, match=r"a PyG Batch of several graphs; .*get_example"):
        D.load(tmp_path / "batch.pt")
    adj_t = torch.sparse_coo_tensor(ei.flip(0), torch.ones(4), (3, 3)).coalesce()
    torch.save(Data(x=torch.randn(3, 2), adj_t=adj_t), tmp_path / "adj.pt")
    with pytest.raises(ValueError, match=r"has adj_t and no edge_index; save it with an"):
        D.load(tmp_path / "adj.pt")


# -- an audit of users' graph files (the numbers each case gave before its fix in the comments)


def _saved(tmp_path, name="g.pt", **given):
    """A small undirected ring (12 nodes, 24 edges) with features and labels, saved; ``given``
    attributes added or put in their place (the file is never read back to be edited)."""
    from torch_geometric.data import Data
    from torch_geometric.utils import to_undirected

    n = 12
    ring = torch.stack([torch.arange(n), (torch.arange(n) + 1) % n])
    attributes = {
        "x": torch.randn(n, 3, generator=torch.Generator().manual_seed(0)),
        "edge_index": to_undirected(ring),
        "y": torch.arange(n) % 2,
    }
    data = Data(**{**attributes, **given})
    path = tmp_path / name
    torch.save(data, path)
    return path


def test_integer_split_masks_are_read_as_bool_and_others_refused(tmp_path):
    """An int64 0/1 mask indexed rows 0 and 1 over and over: 75% accuracy where the bool
    mask gives 40%, exit 0."""
    n = 12
    masks = {k: (torch.arange(n) % 3 == i).long() for i, k in enumerate(D.SPLIT_MASKS)}
    with pytest.warns(UserWarning, match="train_mask: dtype torch.int64 of 0s and 1s"):
        data = D.load(str(_saved(tmp_path, **masks)))
    split = D.split_masks(data, "public")
    for i, key in enumerate(D.SPLIT_MASKS):
        assert split[key].dtype == torch.bool
        assert torch.equal(split[key], torch.arange(n) % 3 == i)
    good = {k: torch.ones(n, dtype=torch.bool) for k in ("val_mask", "test_mask")}
    for bad, match in [
        (torch.tensor([0, 5, 7]), r"shape \[3\]; expected a \[12\] bool mask"),
        (torch.arange(n) % 3, "values other than 0 and 1"),
        (torch.ones(n, 2, dtype=torch.bool), r"shape \[12, 2\], 2 splits \(one per column\)"),
    ]:
        # loaded as they are (PyG saves WebKB, Chameleon, Actor with [n, 10] masks, and a
        # command that reads no split must take them); refused where the split is read
        data = D.load(str(_saved(tmp_path, "bad.pt", train_mask=bad, **good)))
        with pytest.raises(ValueError, match=match), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            D.split_masks(data, "public")


def test_a_public_split_needs_all_three_masks_and_says_when_they_overlap(tmp_path):
    n = 12
    data = D.load(str(_saved(tmp_path, train_mask=torch.ones(n, dtype=torch.bool))))
    with pytest.raises(ValueError, match="has train_mask but no val_mask, test_mask"):
        D.split_masks(data, "public")
    every = torch.ones(n, dtype=torch.bool)
    data = D.load(str(_saved(tmp_path, train_mask=every, val_mask=every, test_mask=every)))
    with pytest.warns(UserWarning, match="12 nodes are in both train_mask and test_mask"):
        D.split_masks(data, "public")


def test_a_saved_graph_says_what_it_holds_that_is_measured_as_stored(tmp_path):
    """One-way edges, repeats, self loops and an unread edge_attr were measured without a
    word (a one-way ring gave half the Dirichlet energy of the ring)."""
    from torch_geometric.data import Data

    ring = torch.stack([torch.arange(6), (torch.arange(6) + 1) % 6])
    odd = torch.cat([ring, ring[:, :2], torch.tensor([[3], [3]])], dim=1)
    path = tmp_path / "odd.pt"
    torch.save(Data(x=torch.randn(6, 2), edge_index=odd, edge_attr=torch.rand(9)), path)
    with pytest.warns(UserWarning) as said:
        D.load(str(path))
    (text,) = [str(w.message) for w in said]
    assert "8 of its 9 edges have no reverse edge" in text  # the loop is its own reverse
    assert "2 edges repeat an earlier one" in text and "1 self loops" in text
    assert "edge_attr (one value per edge) is not read as weights" in text
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        D.load(str(_saved(tmp_path)))  # an undirected graph without loops: nothing to say


def test_saved_files_refused_in_one_line(tmp_path):
    n = 12
    sparse = _saved(tmp_path, "sparse.pt", x=torch.ones(n, 3).to_sparse())
    with pytest.raises(ValueError, match=r"x is a sparse tensor .*to_dense\(\)"):
        D.load(str(sparse))
    # one label of 1e9 asked for a 1e9-way decoder
    huge = _saved(tmp_path, "huge.pt", y=torch.arange(n) % 2 * 10**9)
    with pytest.raises(ValueError, match=r"labels y run to 1000000000 over 2 distinct values"):
        D.load(str(huge))
    # ids up to 550: a subsample of a 1000-class dataset, kept
    many = _saved(tmp_path, "many.pt", y=torch.arange(n) * 50)
    assert int(D.load(str(many)).y.max()) == 550
    text = tmp_path / "edges.txt"
    text.write_text("0,1\n1,2\n")
    with pytest.raises(ValueError, match=r"edges.txt: an edge list is read from .* named .csv"):
        D.load(str(text))
    upper = tmp_path / "edges.CSV"
    upper.write_text("0,1\n1,2\n")
    assert D.load(str(upper)).num_nodes == 3


def test_generator_parameters_refused_by_name():
    with pytest.raises(ValueError, match="dataset csbm: parameter signal: .*1e\\+30"):
        D.load("csbm:n=50,degree=4,signal=inf")  # NaN features, exit 0
    with pytest.raises(ValueError, match="dataset csbm: parameter seed: expected an integer in"):
        D.load("csbm:n=50,degree=4,seed=1e20")  # "Overflow when unpacking long long"
    with pytest.raises(ValueError, match=r"parameter degree: .* \(its default, .*pass degree="):
        D.load("csbm:n=2")  # "degree: expected ..." named neither the dataset nor a default


def test_a_labels_file_with_too_few_rows_is_the_one_named(tmp_path):
    edges, x, y = tmp_path / "e.csv", tmp_path / "x.csv", tmp_path / "y.csv"
    edges.write_text("0,1\n1,2\n2,3\n")
    x.write_text("1\n2\n3\n4\n")
    y.write_text("0\n1\n0\n")
    with pytest.raises(ValueError, match=r"y.csv: labels have 3 rows, expected one per node"):
        D.load(str(edges), features=str(x), labels=str(y))


def test_damaged_raw_files_under_a_data_root_are_said_to_be_damaged(tmp_path, planetoid_root):
    import shutil

    root = tmp_path / "root"
    shutil.copytree(planetoid_root / "Cora" / "raw", root / "Cora" / "raw")
    graph = root / "Cora" / "raw" / "ind.cora.graph"
    graph.write_bytes(graph.read_bytes()[:100])
    with pytest.raises(D.DatasetUnavailableError, match=r"reading its files under .* failed"):
        D.load("cora", data_root=root)  # was "EOFError: Ran out of input", exit 1


def test_features_with_no_columns_are_said_to_have_none(tmp_path):
    """x of shape [n, 0] was refused as "every node has the same features"."""
    from oversmooth.analysis import _load_data

    path = _saved(tmp_path, "nox.pt", x=torch.zeros(12, 0))
    with pytest.raises(ValueError, match=r"x has 0 columns \(no node features\)"):
        _load_data(str(path), None)


def test_a_random_split_too_small_to_train_on_says_why(tmp_path):
    """The hint was "use --split random" to a run that used it."""
    from torch_geometric.data import Data

    from oversmooth.config import ModelConfig
    from oversmooth.train import TrainConfig, train

    path = tmp_path / "one.pt"
    torch.save(
        Data(
            x=torch.ones(1, 2),
            edge_index=torch.zeros(2, 0, dtype=torch.long),
            y=torch.zeros(1, dtype=torch.long),
        ),
        path,
    )
    config = TrainConfig(model=ModelConfig(name="postln", depth=2), dataset=str(path), epochs=1)
    with pytest.raises(ValueError, match="the random 60/20/20 split needs at least 3 nodes"):
        train(config, out=tmp_path / "run")


def test_a_saved_graph_says_when_edges_weigh_nothing(tmp_path):
    path = _saved(tmp_path, "zero.pt", edge_weight=torch.zeros(24))
    with pytest.warns(UserWarning, match="24 of its 24 edges have weight 0: no edge to the"):
        D.load(str(path))


def test_an_empty_processed_folder_is_not_a_dataset_on_disk(tmp_path):
    """PyG makes processed/ before a download that fails; an empty one counted as the files
    being there, and the error then blamed damaged files (a regression audit)."""
    (tmp_path / "PubMed" / "processed").mkdir(parents=True)
    assert not D.on_disk("pubmed", tmp_path)
    (tmp_path / "PubMed" / "processed" / "data.pt").write_bytes(b"x")
    assert D.on_disk("pubmed", tmp_path)


def test_label_ids_up_to_the_limit_are_taken(tmp_path):
    path = _saved(tmp_path, "ids.pt", y=torch.tensor([0] * 11 + [D.LABEL_IDS_MAX]))
    assert int(D.load(str(path)).y.max()) == D.LABEL_IDS_MAX


def test_a_csv_made_undirected_says_what_changed(tmp_path):
    """A directed, looped, unevenly weighted CSV was measured as the undirected graph with no
    word, where a .pt gets a note for each (an audit); a CSV that already is undirected gets
    none, and directed=True keeps the rows as written, silently."""
    import warnings

    from oversmooth.data import load

    edges = tmp_path / "e.csv"
    edges.write_text("0,1,1\n1,0,5\n1,2,1\n3,3,4\n2,3,1\n")
    with pytest.warns(UserWarning) as caught:
        data = load(str(edges))
    (said,) = [str(w.message) for w in caught]
    assert "made undirected" in said and "2 of its 3 pairs are given one way only where" in said
    assert "1 self loops dropped" in said and "1 pairs are listed with different weights" in said
    assert data.edge_weight.tolist() == [5.0, 5.0, 1.0, 1.0, 1.0, 1.0]
    clean = tmp_path / "u.csv"
    clean.write_text("0,1\n1,0\n1,2\n2,1\n")
    once = tmp_path / "once.csv"  # one row per pair: the usual undirected edge list
    once.write_text("0,1\n1,2\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load(str(clean))
        load(str(once))
        load(str(edges), directed=True)


def test_a_pyg_cache_made_with_a_pre_transform_is_refused(tmp_path, planetoid_root):
    """PyG reuses a processed/ cache made with a pre_transform, with a warning only (silenced
    by -q): Cora's features came back normalised, its input energy 184 times lower (an
    audit)."""
    import shutil

    from torch_geometric.datasets import Planetoid
    from torch_geometric.transforms import NormalizeFeatures

    root = tmp_path / "root"
    shutil.copytree(planetoid_root / "Cora" / "raw", root / "Cora" / "raw")
    Planetoid(str(root), "Cora", pre_transform=NormalizeFeatures())  # the user's earlier run
    with pytest.raises(D.DatasetUnavailableError, match=r"pre_transform=NormalizeFeatures\(\)"):
        D.load("cora", data_root=root)
    shutil.rmtree(root / "Cora" / "processed")  # the remedy the message gives
    _same_graph(D.load("cora", data_root=root), D.load("cora"))


def test_a_few_one_way_edges_among_many_are_said():
    """A sample of 65,536 edges' reverses missed 3 one-way edges among 199,953 (an audit);
    the edges are now compared with their reverses as a whole (a hashed multiset)."""
    from torch_geometric.data import Data

    n = 20_000
    gen = torch.Generator().manual_seed(0)
    src = torch.randint(0, n, (100_000,), generator=gen)
    dst = (src + 1 + torch.randint(0, n - 1, (100_000,), generator=gen)) % n
    both = torch.unique(torch.stack([torch.cat([src, dst]), torch.cat([dst, src])]), dim=1)
    present = set((both[0] * n + both[1]).tolist())
    lonely = [(a, b) for a, b in ((0, n - 1), (1, n - 2), (2, n - 3)) if a * n + b not in present]
    lonely = [(a, b) for a, b in lonely if b * n + a not in present]
    columns = list(both.t())
    for place, (a, b) in zip((1, 31, 61), lonely, strict=False):  # off any sample's grid
        columns.insert(place, torch.tensor([a, b]))
    data = Data(x=torch.randn(n, 2), edge_index=torch.stack(columns, dim=1))
    said = D._stored_as_is(data, n)
    assert any(f"{len(lonely)} of its {len(columns)} edges have no reverse" in s for s in said)
    assert not any("no reverse" in s for s in D._stored_as_is(Data(edge_index=both), n))


def test_targets_within_a_large_class_are_uniform():
    """csbm scaled a float32 uniform by the class size: above 2^24 nodes it never reached odd
    ranks (mean degrees 0.50 and 1.50 for 1.00 in a class of 2 x 10^7 nodes: an audit)."""
    gen = torch.Generator().manual_seed(0)
    high = torch.full((400_000,), 2**25 + 1)
    odd = (D._uniform_below(high, gen) % 2).double().mean().item()
    assert abs(odd - 0.5) < 0.005  # float32: about 0.25 (no odd number above 2^24)
    upper = (D._uniform_below(high, gen) >= 2**24).double().mean().item()
    assert abs(upper - 0.5) < 0.005
    small = D._uniform_below(torch.full((1000,), 7), gen)
    assert small.min() >= 0 and small.max() <= 6


def test_a_pyg_cache_made_with_a_pre_filter_is_refused_too(tmp_path):
    processed = tmp_path / "Cora" / "processed"
    processed.mkdir(parents=True)
    torch.save("None", processed / "pre_transform.pt")
    D._check_processed("cora", processed)  # PyG's own record of no transform: taken
    torch.save("<function keep>", processed / "pre_filter.pt")
    with pytest.raises(D.DatasetUnavailableError, match=r"pre_filter=<function keep>"):
        D._check_processed("cora", processed)
