"""The Ray backend on a multi-node cluster simulated on this machine.

Two nodes (a head and a worker, one CPU each), hosted by another process and bound to
127.0.0.1, each with a disk of its own as far as the sweep can tell: its own temporary folder
(``TMPDIR``) and its own working folder, so a relative path names a different file on each
node, as it would on separate machines.  The driver (this process) holds the sweep folder;
the nodes never see it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import pytest
import torch

from oversmooth.config import ModelConfig
from oversmooth.experiments.sweep import SweepSpec, cell_id, run_cell, run_sweep
from oversmooth.experiments.sweep_ray import node_problem, node_report
from oversmooth.outputs import json_text

TINY = dict(
    models=("preln",),
    depths=(2,),
    datasets=("karate",),
    model=ModelConfig(hidden=8, heads=2, dtype="float64"),
    epochs=2,
)


def on_its_own_disk(cell: dict, options: dict, out: str) -> dict:
    """run_cell, after checking that the folder it may write in is on this node's own disk
    (under its TMPDIR), not the driver's sweep folder."""
    node_tmp = os.environ["TMPDIR"]
    assert Path(out).resolve().is_relative_to(Path(node_tmp).resolve()), (out, node_tmp)
    record = run_cell(cell, options, out)
    record["scratch"] = out
    return record


def together_on_its_own_disk(cell: dict, options: dict, out: str) -> dict:
    """:func:`on_its_own_disk`, once both cells of the test have started: a barrier in the
    cluster's folder (``TMPDIR`` is ``FOLDER/node{i}/tmp``).  With one CPU per node, two cells
    running at once are on two nodes; without the barrier a first cell that finished before the
    second was scheduled let both run on the head (a CI run on a loaded host)."""
    barrier = Path(os.environ["TMPDIR"]).parent.parent / "barrier"
    barrier.mkdir(exist_ok=True)
    (barrier / cell["mode"]).touch()
    deadline = time.monotonic() + 60
    while len(list(barrier.iterdir())) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    return on_its_own_disk(cell, options, out)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A head and a worker node on 127.0.0.1, one CPU each, hosted by another process."""
    pytest.importorskip("ray")
    import ray._private.ray_constants as ray_constants

    from tests.experiments.ray_host import Host

    # this process connects to 127.0.0.1 as given (see ray_host)
    enabled, ray_constants.ENABLE_RAY_CLUSTER = ray_constants.ENABLE_RAY_CLUSTER, False
    host = Host(tmp_path_factory.mktemp("cluster"), cpus=(1, 1))
    try:
        yield host
    finally:
        host.stop()
        ray_constants.ENABLE_RAY_CLUSTER = enabled


def _save_graph(*folders: Path, scale: float = 1.0) -> None:
    """``graph.pt`` (karate with its labels; features times ``scale``) in every folder."""
    from oversmooth.data import karate

    k = karate()
    graph = {"x": k.x * scale, "edge_index": k.edge_index, "y": k.y}
    for folder in folders:
        torch.save(graph, folder / "graph.pt")


@pytest.fixture
def in_folder(cluster, tmp_path, monkeypatch):
    """This process (the driver) works in a folder of its own, as the nodes do; the graphs
    saved in the nodes' folders are removed after the test."""
    folder = tmp_path / "driver"
    folder.mkdir()
    monkeypatch.chdir(folder)
    yield folder
    for node in cluster.nodes:
        (node / "graph.pt").unlink(missing_ok=True)


@pytest.mark.slow  # a Ray cluster of two nodes: 21 s of the default suite's 5 minutes on 2 cores
def test_cells_on_two_nodes_come_back_to_the_driver(cluster, tmp_path, in_folder):
    nodes = cluster.nodes
    # a relative path: each node reads its own copy, in its own working folder, and the sweep
    # checks before the first cell that every copy is the graph the driver reads
    _save_graph(in_folder, *nodes)
    spec = SweepSpec(
        **{**TINY, "datasets": ("graph.pt",)},
        modes=("init", "trained"),
        backend="ray",
        ray_address=cluster.address,
    )
    out = tmp_path / "s"
    shutil.rmtree(nodes[0].parent / "barrier", ignore_errors=True)
    result = run_sweep(spec, out, cell_fn=together_on_its_own_disk)
    assert (result.total, result.ran, result.failed) == (2, 2, [])
    records = {c["cell"]["mode"]: c for c in map(_read, sorted((out / "cells").glob("*.json")))}
    # each cell ran in a scratch folder on its node's disk, one cell per node
    scratch = [Path(r["scratch"]) for r in records.values()]
    assert {next(n for n in nodes if (n / "tmp") in p.parents) for p in scratch} == set(nodes)
    assert all(not p.exists() for p in scratch)  # removed after the cell
    assert len({r["node"] for r in records.values()}) == 2
    # the trained cell's run folder came back with its record and was written here
    trained = records["trained"]
    run_dir = out / "runs" / trained["id"]
    assert {"best.pt", "last.pt", "history.csv"} <= {p.name for p in run_dir.iterdir()}
    # the same numbers as the same cells computed in this process
    for mode, record in records.items():
        here = run_cell(record["cell"], spec.options(), str(tmp_path / "here"))
        here = json.loads(json_text(here))  # as stored: NaN as null
        assert here["metrics"] == record["metrics"], mode
        assert here.get("training") == record.get("training"), mode
    here_dir = tmp_path / "here" / "runs" / trained["id"]
    best_here = torch.load(here_dir / "best.pt", weights_only=True)
    best_there = torch.load(run_dir / "best.pt", weights_only=True)
    for name, tensor in best_here["state_dict"].items():
        assert torch.equal(tensor, best_there["state_dict"][name]), name
    summary = pd.read_csv(out / "summary.csv")
    assert sorted(summary["mode"]) == ["init", "trained"]
    assert not list(out.rglob(".*tmp-*")) and not list(out.rglob("*.lock"))
    # a rerun needs no cluster: nothing is left to compute
    again = run_sweep(dataclasses.replace(spec, ray_address="127.0.0.1:1"), out)
    assert (again.ran, again.skipped) == (0, 2)


def _read(path: Path) -> dict:
    return json.loads(path.read_text())


@pytest.mark.slow  # a second Ray job on the cluster: 15-20 s under load
def test_a_dataset_missing_or_different_on_a_node_is_refused_naming_it(
    cluster, tmp_path, in_folder
):
    import ray

    nodes = cluster.nodes
    _save_graph(in_folder, nodes[0])  # the same file on the head only
    spec = SweepSpec(
        **{**TINY, "datasets": ("graph.pt",)}, backend="ray", ray_address=cluster.address
    )
    ray.init(address=cluster.address, log_to_driver=False)  # one connection for both sweeps
    try:
        with pytest.raises(ValueError, match=r"'graph.pt' cannot be loaded on node 127.0.0.1"):
            run_sweep(spec, tmp_path / "s")
        assert not (tmp_path / "s").exists()  # refused before anything was written
        _save_graph(nodes[1], scale=2.0)  # the worker now has a file of that name: another graph
        with pytest.raises(ValueError, match="is not the graph this machine reads"):
            run_sweep(spec, tmp_path / "s")
        assert not (tmp_path / "s").exists()
        assert ray.is_initialized()  # a connection the sweep found is left as it was
    finally:
        ray.shutdown()


@pytest.mark.slow  # about two minutes: the head is silent for 30 s before the sweep gives up
def test_resume_after_the_whole_cluster_restarts(tmp_path):
    """A power cut mid-sweep: every node killed at once.  The sweep says so in one line and
    exits 1 (it used to hang 60 s, until Ray ended the process, leaving its lock); started again
    on the same port, the same command finishes the rest and keeps what was done."""
    pytest.importorskip("ray")
    from tests.experiments.ray_host import Host

    host = Host(tmp_path / "cluster", cpus=(0, 1))
    out = tmp_path / "s"
    command = [
        *(os.path.join(os.path.dirname(sys.executable), "oversmooth"), "sweep"),
        *("--models", "preln,postln,nonlocal", "--depths", "16,24", "--seeds", "0,1"),
        *("--backend", "ray", "--ray-address", host.address, "--out", str(out), "-q"),
    ]
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}  # see ray_host
    try:
        sweep = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
        while len(list(out.glob("cells/*.json"))) < 3:
            assert sweep.poll() is None, sweep.stderr.read()
            time.sleep(0.05)
        host.kill()
        _, err = sweep.communicate(timeout=120)
        done = sum(_read(p)["status"] == "ok" for p in out.glob("cells/*.json"))
        ours = [line for line in err.splitlines() if line.startswith("error:")]
        assert sweep.returncode == 1 and len(ours) == 1, err
        assert "stopped answering" in ours[0] and "rerun this command" in ours[0]
        assert 3 <= done < 12 and not (out / "summary.csv").exists()
        assert not list(tmp_path.glob(".s.*")) and not list(out.rglob(".*tmp-*"))
        host.restart()
        rerun = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
        assert rerun.returncode == 0, rerun.stderr
        assert f"12 cells: {done} already done, {12 - done} run, 0 failed" in rerun.stdout
        assert len(pd.read_csv(out / "summary.csv")) == 12
    finally:
        host.stop()


def _cli(address: str, out: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """``oversmooth sweep`` of one tiny cell on the cluster at ``address``, as a process."""
    command = [
        *(os.path.join(os.path.dirname(sys.executable), "oversmooth"), "sweep"),
        *("--models", "preln", "--depths", "2", "--datasets", "karate"),
        *("--backend", "ray", "--ray-address", address, "--out", str(out), "-q"),
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")} | env
    env["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # see ray_host
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow  # a cluster of its own, and Ray retries a refused token for about 20 s
def test_a_refused_token_is_one_line_naming_the_fix(tmp_path):
    pytest.importorskip("ray")
    from tests.experiments.ray_host import Host

    token = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "0123456789abcdef" * 2}
    host = Host(tmp_path / "cluster", cpus=(1,), env=token)
    try:
        home = {"HOME": str(tmp_path)}  # no ~/.ray/auth_token here
        wrong = {**token, "RAY_AUTH_TOKEN": "f" * 32}
        for env in (home | wrong, home):
            refused = _cli(host.address, tmp_path / "s", env)
            ours = [line for line in refused.stderr.splitlines() if not line.startswith("[")]
            assert refused.returncode == 2 and len(ours) == 1, refused.stderr
            assert ours[0].startswith(f"error: ray_address: cannot join {host.address}")
            assert "RAY_AUTH_TOKEN" in ours[0] and "auth_token" in ours[0]
            assert not (tmp_path / "s").exists()
        joined = _cli(host.address, tmp_path / "s", home | token)
        assert joined.returncode == 0, joined.stderr
    finally:
        host.stop()


def test_node_problems_name_the_node_and_what_to_do():
    expected = {"version": "1.0", "datasets": {"cora": "abc"}, "device": "cpu"}
    report = {"node": "10.0.0.7 (node 1234abcd)", "version": "1.0", "cuda": 0}
    assert node_problem({**report, "datasets": {"cora": "abc"}}, expected) is None
    older = node_problem({**report, "version": "0.9", "datasets": {}}, expected)
    assert "10.0.0.7" in older and "install the same version" in older
    error = "error: x.pt: no such file; pass a dataset name"
    missing = node_problem({**report, "datasets": {"cora": error}}, expected)
    assert "cannot be loaded on node 10.0.0.7 (node 1234abcd): x.pt: no such file;" in missing
    assert "pass a dataset name" not in missing and "copy it there" in missing
    cuda = node_problem({**report, "datasets": {"cora": "abc"}}, {**expected, "device": "cuda"})
    assert "has 0 CUDA device(s)" in cuda


def test_node_report_of_this_machine():
    report = node_report(["karate", "no-such-dataset"], None, "cpu")
    assert report["node"] == "this machine"
    assert len(report["datasets"]["karate"]) == 16
    assert report["datasets"]["no-such-dataset"].startswith("error: dataset: unknown name")


@pytest.mark.parametrize(
    "address, says",
    [
        ("localhost", "expected HOST:PORT"),
        ("10.0.0.1:99999", "expected HOST:PORT"),
        ("http://10.0.0.1:6379", "expected HOST:PORT"),
        ("", "expected HOST:PORT"),
    ],
)
def test_bad_ray_addresses_are_refused_up_front(address, says):
    with pytest.raises(ValueError, match=says):
        SweepSpec(**TINY, backend="ray", ray_address=address)


def test_ray_address_with_the_local_backend_is_refused():
    with pytest.raises(ValueError, match="the backend is local, which would ignore it"):
        SweepSpec(**TINY, ray_address="127.0.0.1:6379")


def test_nothing_listening_at_the_address_is_refused_at_once(tmp_path):
    pytest.importorskip("ray")
    spec = SweepSpec(**TINY, backend="ray", ray_address="127.0.0.1:1")
    with pytest.raises(ValueError, match="nothing answers at 127.0.0.1:1"):
        run_sweep(spec, tmp_path / "s")
    assert list(tmp_path.iterdir()) == []


def test_scratch_folders_are_the_nodes_own(tmp_path, monkeypatch):
    # outside Ray the cell function sees this machine's temporary folder: a sanity check of
    # the helper the cluster test relies on
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    tempfile.tempdir = None
    try:
        with pytest.raises(AssertionError):
            on_its_own_disk({}, {}, "/elsewhere")
    finally:
        tempfile.tempdir = None
    assert cell_id(SweepSpec(**TINY).cells()[0]).startswith("preln-san-d2-karate-s0-init")
