"""The Ray backend of :func:`oversmooth.experiments.sweep.run_sweep`: cells on a Ray cluster.

What runs where:

- **The driver** (the machine that runs ``oversmooth sweep``) validates the spec, loads every
  dataset once, holds the sweep folder and writes every file in it: the cell records, the
  trained cells' run folders, the tables and the reports.  Nodes never read or write it.
- **Before the first cell**, one check task runs on every node that can run cells: the same
  oversmooth version as the driver, every dataset loads there into the same graph (a hash of
  its tensors), CUDA present when the cells run on CUDA.  A node that fails is named in one
  ``ValueError`` and nothing is computed or written.  A node that joins later is checked by
  each cell it runs (the cell is recorded as failed, with the reason, if it does not pass).
- **Each cell** runs in a scratch folder in its node's temporary folder.  A trained cell's run
  folder (checkpoints, history, summary) comes back with its record, as bytes, and the driver
  writes it under ``OUT/runs/``; the scratch folder is removed.  So the nodes need no storage
  in common with the driver, and a shared folder is not needed either.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import socket
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from oversmooth import __version__

__all__ = [
    "check_address",
    "graph_fingerprint",
    "node_report",
    "node_problem",
    "ray_session",
]

CellFn = Callable[[dict, dict, str], dict]
Runner = Callable[[list[dict], Path, Callable[[dict], None], CellFn], None]

_HOST_PORT = re.compile(r"^(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):(?P<port>[0-9]{1,5})$")
#: seconds a node may take to answer the check (it imports torch and loads every dataset)
CHECK_TIMEOUT_S = 600.0
#: while cells run, the head is asked every HEAD_POLL_S whether it still answers; after
#: HEAD_LOST_S without an answer the sweep stops (Ray itself ends the process at 60 s)
HEAD_POLL_S = 5.0
HEAD_LOST_S = 30.0


class ClusterLostError(RuntimeError):
    """The Ray head stopped answering while cells ran (the finished ones are kept)."""

    clean_message = True  # the CLI prints the message alone, without a type name


def check_address(address: str) -> None:
    """Refuse a Ray address that cannot name a cluster: ``auto``, ``HOST:PORT`` or
    ``ray://HOST:PORT`` (Ray Client) are accepted; nothing is contacted here."""
    text = address[len("ray://") :] if address.startswith("ray://") else address
    match = _HOST_PORT.match(text)
    if address == "auto" or (match and 0 < int(match.group("port")) < 65536):
        return
    raise ValueError(
        f"ray_address: expected HOST:PORT (the address `ray start --head` prints, e.g. "
        f"10.0.0.1:6379), ray://HOST:PORT or auto, received {address!r}"
    )


def graph_fingerprint(data: Any) -> str:
    """A hash of a loaded graph: every tensor's name, dtype, shape and bytes, and the other
    attributes' text.  Two nodes that read the same file (or build the same synthetic graph)
    give the same fingerprint; a file that differs by one byte of a tensor does not."""
    import torch

    digest = hashlib.sha256(f"num_nodes={int(data.num_nodes)}".encode())
    for key in sorted(data.keys()):
        value = getattr(data, key)
        digest.update(f"|{key}=".encode())
        if isinstance(value, torch.Tensor):
            tensor = value.detach().cpu().contiguous()
            digest.update(f"{tensor.dtype}{tuple(tensor.shape)}".encode())
            digest.update(tensor.view(torch.uint8).numpy().tobytes() if tensor.numel() else b"")
        else:
            digest.update(repr(value).encode())
    return digest.hexdigest()[:16]


def _node_name() -> str:
    """``IP (node id)`` of the node this runs on, or ``this machine`` outside Ray."""
    try:
        import ray

        if ray.is_initialized():
            context = ray.get_runtime_context()
            return f"{ray.util.get_node_ip_address()} (node {context.get_node_id()[:8]})"
    except Exception:  # noqa: BLE001 - only a name for messages
        pass
    return "this machine"


def node_report(datasets: list[str], data_root: str | None, device: str) -> dict:
    """What a node would compute with: the oversmooth version, each dataset's fingerprint (or
    why it cannot be loaded there) and whether ``device`` exists there."""
    import torch

    from oversmooth.data import load

    found: dict[str, str] = {}
    for name in datasets:
        try:
            found[name] = graph_fingerprint(load(name, data_root=data_root))
        except Exception as exc:  # noqa: BLE001 - reported to the driver, which refuses
            text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            found[name] = f"error: {text}"
    cuda = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return {"node": _node_name(), "version": __version__, "datasets": found, "cuda": cuda}


def node_problem(report: dict, expected: dict) -> str | None:
    """Why a node's :func:`node_report` differs from the driver's ``expected``, or None."""
    node = report["node"]
    if report["version"] != expected["version"]:
        return (
            f"node {node} runs oversmooth {report['version']}, this machine "
            f"{expected['version']}; install the same version on every node"
        )
    for name, want in expected["datasets"].items():
        got = report["datasets"].get(name)
        if got is None:
            continue
        if got.startswith("error: "):
            why = got[len("error: ") :].split(";")[0]  # the loader's advice is for the driver
            return (
                f"datasets: {name!r} cannot be loaded on node {node}: {why}; copy it there "
                "at the same absolute path, or keep it on storage every node mounts"
            )
        if got != want:
            return (
                f"datasets: {name!r} on node {node} is not the graph this machine reads "
                f"(fingerprint {got}, here {want}); make the file the same on every node"
            )
    device = expected["device"]
    if device.startswith("cuda"):
        index = int(device.partition(":")[2] or 0)
        if report["cuda"] <= index:
            return (
                f"device: cells run on {device}, but node {node} has {report['cuda']} CUDA "
                "device(s); start it with --num-cpus 0 so that it runs no cell, or use "
                "--device cpu"
            )
    return None


# ----------------------------------------------------------------------------- on a node


def run_cell_on_node(
    cell_fn: CellFn, cell: dict, options: dict, expected: dict, checked: frozenset[str]
) -> tuple[dict, dict[str, bytes]]:
    """A Ray task: one cell in a scratch folder of this node; returns its record and, for a
    trained cell, its run folder's files (relative path -> bytes) for the driver to write."""
    import ray

    from oversmooth.allocator import keep_freed_memory
    from oversmooth.experiments.cells import cell_id, failed_record

    keep_freed_memory()  # as the command does (idempotent: a Ray worker runs many tasks)
    node_id = ray.get_runtime_context().get_node_id()
    if node_id not in checked:  # joined after the start: check it for this cell's dataset
        wanted = {**expected, "datasets": {cell["dataset"]: expected["datasets"][cell["dataset"]]}}
        report = node_report([cell["dataset"]], options.get("data_root"), options["device"])
        problem = node_problem(report, wanted)
        if problem:
            return failed_record(cell, options, problem), {}
    with tempfile.TemporaryDirectory(prefix="oversmooth-cell-") as scratch:
        record = cell_fn(cell, options, scratch)
        run_dir = Path(scratch) / "runs" / cell_id(cell)
        files = {
            str(path.relative_to(run_dir)): path.read_bytes()
            for path in sorted(run_dir.rglob("*"))
            if path.is_file()
        }
    record["node"] = _node_name()
    return record, files


def store_run(out: Path, record_id: str, files: dict[str, bytes]) -> None:
    """Write a trained cell's shipped run folder to ``out/runs/record_id``, whole or not at
    all (built beside it, then renamed over any earlier one)."""
    from oversmooth.outputs import move_into_place

    runs = out / "runs"
    runs.mkdir(exist_ok=True)
    tmp = runs / f".{record_id}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        for relative, data in files.items():
            path = (tmp / relative).resolve()
            if tmp.resolve() not in path.parents:  # never outside the run folder
                raise ValueError(f"run folder of {record_id}: unexpected path {relative!r}")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        move_into_place(tmp, runs / record_id)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ----------------------------------------------------------------------------- on the driver


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ValueError(
            "backend: ray is not installed; pip install 'oversmooth[ray]' or use --backend local"
        ) from None
    return ray


def _answers(host_port: str, timeout: float = 5.0) -> bool:
    """Whether something accepts a TCP connection at ``HOST:PORT``."""
    host, _, port = host_port.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            return True
    except (OSError, ValueError):
        return False


def _check_reachable(address: str) -> None:
    """Refuse at once an address where nothing listens (``ray.init`` would retry for minutes).
    ``HOST:PORT`` is tried as given and as Ray rewrites a loopback host (to this machine's
    address); ``auto`` and ``ray://`` addresses are left to Ray."""
    if address == "auto" or address.startswith("ray://"):
        return
    match = _HOST_PORT.match(address)
    assert match is not None  # check_address ran when the spec was built
    host, port = match.group("host").strip("[]"), int(match.group("port"))
    hosts = [host]
    try:
        from ray._private.services import resolve_ip_for_localhost

        hosts.append(resolve_ip_for_localhost(host))
    except Exception:  # noqa: BLE001 - an older or newer Ray: try the host as given
        pass
    reasons = []
    for candidate in dict.fromkeys(hosts):
        try:
            with socket.create_connection((candidate, port), timeout=5):
                return
        except OSError as exc:
            reasons.append(exc.strerror or type(exc).__name__)
    raise ValueError(
        f"ray_address: nothing answers at {address} ({reasons[-1].lower()}); start the head "
        f"with `ray start --head --port {port}` or pass the address it printed"
    )


def _connect(ray: Any, address: str | None, workers: int | None) -> None:
    """``ray.init`` for this sweep: the cluster at ``address``, or a new one-machine cluster
    (bound to the loopback address, so nothing outside this machine can reach it)."""
    if address:
        _check_reachable(address)
        kwargs: dict[str, Any] = {"address": address}
    else:
        kwargs = {"num_cpus": workers or os.cpu_count(), "_node_ip_address": "127.0.0.1"}
    token_hint = (
        "if the cluster uses token authentication (the default of `ray start` when a token "
        "exists, and of Ray's own local clusters), this machine needs the same token: copy the "
        "head's ~/.ray/auth_token here or set RAY_AUTH_TOKEN, with RAY_AUTH_MODE=token"
    )
    try:
        ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False, **kwargs)
    except ray.exceptions.AuthenticationError:
        raise ValueError(
            f"ray_address: the cluster at {address} refused this machine's token; {token_hint}"
        ) from None
    except ConnectionError as exc:
        text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ValueError(f"ray_address: cannot join {address} ({text}); {token_hint}") from None


def _cell_nodes(ray: Any) -> list[str]:
    """The ids of the live nodes that can run a cell (at least one CPU)."""
    return [
        n["NodeID"]
        for n in ray.nodes()
        if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) >= 1
    ]


def check_nodes(ray: Any, expected: dict, datasets: list[str], data_root: str | None) -> set[str]:
    """Run :func:`node_report` on every node that can run a cell; refuse (``ValueError``) at
    the first node that differs from ``expected``.  Returns the checked node ids."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    nodes = _cell_nodes(ray)
    if not nodes:
        raise ValueError(
            "ray_address: the cluster has no node with a CPU to run cells; start workers with "
            "`ray start --address HEAD:PORT --num-cpus N`"
        )
    remote = ray.remote(num_cpus=0, max_retries=0)(node_report)
    refs = {
        node: remote.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)
        ).remote(datasets, data_root, expected["device"])
        for node in nodes
    }
    ready, late = ray.wait(list(refs.values()), num_returns=len(refs), timeout=CHECK_TIMEOUT_S)
    if late:
        names = [node[:8] for node, ref in refs.items() if ref in late]
        raise RuntimeError(
            f"node(s) {', '.join(names)} did not answer the start-up check within "
            f"{CHECK_TIMEOUT_S:.0f} s; check them with `ray status`"
        )
    for report in ray.get(ready):
        problem = node_problem(report, expected)
        if problem:
            raise ValueError(problem)
    return set(refs)


@contextmanager
def ray_session(
    address: str | None,
    workers: int | None,
    options: dict,
    fingerprints: dict[str, str],
) -> Iterator[Runner]:
    """Join (or start) the cluster, check its nodes, and yield the function that runs cells
    there; leaves the cluster (and stops one started here) at the end."""
    ray = _ray()
    joined = not ray.is_initialized()
    if joined:
        _connect(ray, address, workers)
    try:
        expected = {"version": __version__, "datasets": fingerprints, "device": options["device"]}
        checked = frozenset(
            check_nodes(ray, expected, list(fingerprints), options.get("data_root"))
        )

        def run(todo: list[dict], out: Path, on_done: Callable[[dict], None], fn: CellFn) -> None:
            _run_cells(ray, todo, options, out, on_done, fn, expected, checked)

        yield run
    finally:
        if joined:
            ray.shutdown()


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _task_error(exc: Exception) -> str:
    """One line for a task that did not return: the exception it raised (a task error's own
    first line only names the task), or what Ray says of a worker or node that died."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, BaseException):
        text = f"task raised {type(cause).__name__}: {cause}"
    else:
        lines = [line.strip() for line in _ANSI.sub("", str(exc)).splitlines() if line.strip()]
        text = f"worker died: {type(exc).__name__}: {lines[-1] if lines else ''}"
    return text.splitlines()[0]


def _run_cells(
    ray: Any,
    todo: list[dict],
    options: dict,
    out: Path,
    on_done: Callable[[dict], None],
    cell_fn: CellFn,
    expected: dict,
    checked: frozenset[str],
) -> None:
    """Every cell of ``todo`` as a task spread over the nodes; each record is handed to
    ``on_done`` as it arrives, after its run folder is written.  A worker or node that dies is
    retried once by Ray, then its cell is recorded as failed; a head that stops answering for
    ``HEAD_LOST_S`` stops the sweep with :class:`ClusterLostError`."""
    from oversmooth.experiments.cells import failed_record

    remote = ray.remote(num_cpus=1, max_retries=1, scheduling_strategy="SPREAD")(run_cell_on_node)
    refs = {remote.remote(cell_fn, c, options, expected, checked): c for c in todo}
    head = ray.get_runtime_context().gcs_address
    silent_since: float | None = None
    try:
        while refs:
            ready, _ = ray.wait(list(refs), num_returns=1, timeout=HEAD_POLL_S)
            if not ready:
                silent_since = None if _answers(head) else silent_since or time.monotonic()
                if silent_since is not None and time.monotonic() - silent_since > HEAD_LOST_S:
                    raise ClusterLostError(
                        f"the Ray head at {head} stopped answering ({len(todo) - len(refs)} of "
                        f"{len(todo)} cells finished, kept in {out}); start the head and the "
                        "workers again, then rerun this command to compute the rest"
                    )
                continue
            for ref in ready:
                cell = refs.pop(ref)
                try:
                    record, files = ray.get(ref)
                except Exception as exc:  # noqa: BLE001 - a worker or node that died
                    record, files = failed_record(cell, options, _task_error(exc)), {}
                if files and record.get("status") == "ok":
                    store_run(out, record["id"], files)
                on_done(record)
    finally:
        if refs and silent_since is None:  # an error or Ctrl-C: stop the cells still running
            for ref in refs:
                ray.cancel(ref, force=True)
