"""Host a Ray cluster of a head and worker nodes on 127.0.0.1, for the cluster tests.

``python -m tests.experiments.ray_host FOLDER PORT CPUS...`` starts a head (GCS on ``PORT``)
and one node per ``CPUS`` value (the head is the first, so ``0`` keeps cells off it).  Node
``i`` starts in ``FOLDER/node{i}`` with ``TMPDIR=FOLDER/node{i}/tmp``: its own working folder
and temporary folder, as on a machine of its own.  The process then obeys files that appear
in ``FOLDER/ctl``: ``kill`` (every node killed at once, as a power cut would), ``restart``
(the same nodes started again, on the same port) and ``stop``; it writes ``up`` (the address)
each time the cluster is up and ``down`` when it is killed.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

# Ray rewrites a loopback address to this machine's network address unless it believes
# clusters span one machine only; this keeps every connection on 127.0.0.1
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"


class Host:
    """This module run in a process of its own (its own session, so that stopping it takes
    every Ray process with it): ``address``, ``nodes`` (their folders), ``kill()``,
    ``restart()``, ``stop()``."""

    def __init__(
        self, folder: Path, cpus: tuple[int, ...], env: dict[str, str] | None = None
    ) -> None:
        import socket
        import subprocess

        with socket.socket() as s:  # a free port for the head (the restart reuses it)
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        folder.mkdir(parents=True, exist_ok=True)
        self.folder, self.ctl = folder, folder / "ctl"
        self.nodes = [folder / f"node{i}" for i in range(len(cpus))]
        repo = Path(__file__).resolve().parents[2]
        path = os.pathsep.join(filter(None, [str(repo), os.environ.get("PYTHONPATH")]))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.experiments.ray_host", str(folder), str(port)]
            + [str(c) for c in cpus],
            cwd=repo,
            # the nodes import the tests' cell functions
            env={**os.environ, **(env or {}), "PYTHONPATH": path},
            stdout=subprocess.DEVNULL,
            stderr=open(folder / "host.log", "w"),  # noqa: SIM115 - the child owns it
            start_new_session=True,
        )
        self.address = self._wait("up").read_text()

    def _wait(self, name: str, timeout: float = 300) -> Path:
        start = time.monotonic()
        while not (self.ctl / name).exists():
            if self.proc.poll() is not None:
                log = (self.folder / "host.log").read_text()[-2000:]
                raise RuntimeError(f"the cluster host exited ({self.proc.returncode}): {log}")
            if time.monotonic() - start > timeout:
                raise TimeoutError(f"the cluster host did not write {name} in {timeout} s")
            time.sleep(0.05)
        return self.ctl / name

    def kill(self) -> None:
        (self.ctl / "kill").write_text("")
        self._wait("down")

    def restart(self) -> None:
        (self.ctl / "restart").write_text("")
        self._wait("up")

    def stop(self) -> None:
        import signal

        (self.ctl / "stop").write_text("")
        try:
            self.proc.wait(60)
        finally:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)  # whatever Ray left in the session
            except ProcessLookupError:
                pass
            self.proc.wait()


def start(folder: Path, port: int, cpus: list[int]) -> object:
    from ray.cluster_utils import Cluster

    cluster = Cluster(shutdown_at_exit=True)
    here = os.getcwd()
    for i, n in enumerate(cpus):
        node = folder / f"node{i}"
        (node / "tmp").mkdir(parents=True, exist_ok=True)
        os.chdir(node)  # the node's processes start (and stay) in its own folder
        try:
            args = dict(
                num_cpus=n,
                node_ip_address="127.0.0.1",
                env_vars={"TMPDIR": str(node / "tmp")},
            )
            if i == 0:
                args.update(include_dashboard=False, gcs_server_port=port)
            cluster.add_node(**args)
        finally:
            os.chdir(here)
    return cluster


def kill(cluster: object) -> None:
    nodes = [cluster.head_node, *cluster.worker_nodes]  # type: ignore[attr-defined]
    for node in nodes:
        node.kill_all_processes(check_alive=False, allow_graceful=False, wait=True)


def next_command(ctl: Path, parent: int) -> str:
    """The next command file to appear (removed once read); ``stop`` if the parent died."""
    while os.getppid() == parent:
        for name in ("stop", "kill", "restart"):
            if (ctl / name).exists():
                (ctl / name).unlink()
                return name
        time.sleep(0.05)
    return "stop"


def main(argv: list[str]) -> None:
    folder, port, cpus = Path(argv[0]), int(argv[1]), [int(c) for c in argv[2:]]
    ctl, parent = folder / "ctl", os.getppid()
    ctl.mkdir(parents=True, exist_ok=True)
    cluster = start(folder, port, cpus)
    (ctl / "up").write_text(f"127.0.0.1:{port}")
    while True:
        command = next_command(ctl, parent)
        if command == "stop":
            cluster.shutdown()  # type: ignore[attr-defined]
            return
        if command == "kill":
            (ctl / "up").unlink(missing_ok=True)
            kill(cluster)
            (ctl / "down").write_text("")
        else:
            (ctl / "down").unlink(missing_ok=True)
            cluster = start(folder, port, cpus)
            (ctl / "up").write_text(f"127.0.0.1:{port}")


if __name__ == "__main__":
    main(sys.argv[1:])
