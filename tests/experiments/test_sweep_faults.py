"""Fault injection for sweeps: SIGINT or SIGKILL of the main process or of a worker at a
seeded random point, then a rerun.

Each scenario checks that no finished cell is lost or recomputed, no cell is duplicated,
the merged ``metrics.csv`` and ``summary.csv`` equal an uninterrupted run's, no process
the killed sweep started survives it, and no temporary file or lock is left once the
runs are over.  One scenario (SIGKILL of the main process after some cells) runs in the
default suite, since each costs two sweeps of process start-ups; a worker's death is
covered there by tests/test_sweep.py; ``pytest -m slow
tests/test_sweep_faults.py`` runs a seeded series and, with ``OVERSMOOTH_FAULTS_SUMMARY=PATH``,
writes its tally as JSON (the figures in reports/reliability.md).
"""

from __future__ import annotations

import itertools
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from oversmooth.experiments.sweep import load_spec, run_sweep

SPEC = """\
[grid]
models = ["preln", "postln", "nonlocal"]
depths = [2, 3]
datasets = ["karate"]
seeds = [0, 1]

[options]
hidden = 16
heads = 2
workers = 2
"""
CELLS = 12
KEYS = ["mode", "dataset", "conv", "model", "depth", "seed"]
TALLY: list[dict] = []


def _ppids() -> dict[int, int]:
    """pid -> parent pid for every live (non-zombie) process, from /proc."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z":
            table[int(entry)] = int(fields[1])
    return table


def _descendants(root: int) -> set[int]:
    table, found, frontier = _ppids(), set(), {root}
    while frontier:
        frontier = {pid for pid, parent in table.items() if parent in frontier} - found
        found |= frontier
    return found


def _alive(pids: set[int]) -> set[int]:
    return set(pids) & set(_ppids())


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read()
    except OSError:
        return b""


def _workers(root: int) -> list[int]:
    """The sweep's workers: spawned processes, or the fork server's children (a worker
    forked from it has the server's command line)."""
    table = _ppids()
    found = []
    for pid in sorted(_descendants(root)):
        line = _cmdline(pid)
        forked = b"forkserver" in line and b"forkserver" in _cmdline(table.get(pid, 0))
        if b"spawn_main" in line or forked:
            found.append(pid)
    return found


def _count_cells(out: Path) -> int:
    return len(list((out / "cells").glob("*.json"))) if (out / "cells").is_dir() else 0


def _tables(out: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    metrics = pd.read_csv(out / "metrics.csv")
    summary = pd.read_csv(out / "summary.csv").drop(columns=["seconds"])
    metrics = metrics.sort_values(KEYS + ["layer"]).reset_index(drop=True)
    return metrics, summary.sort_values(KEYS).reset_index(drop=True)


def _litter(root: Path) -> list[str]:
    found = [p for p in root.rglob("*") if ".tmp-" in p.name or p.name.endswith(".lock")]
    return sorted(str(p.relative_to(root)) for p in found)


@pytest.fixture(scope="module")
def baseline(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("baseline")
    (root / "spec.toml").write_text(SPEC)
    started = time.perf_counter()
    result = run_sweep(load_spec(root / "spec.toml"), root / "out")
    assert result.ran == CELLS and not result.failed
    return {"tables": _tables(root / "out"), "seconds": time.perf_counter() - started}


def scenario(root: Path, baseline: dict, sig: signal.Signals, target: str, seed: int) -> dict:
    """Run the sweep as a CLI process, hit ``target`` (main or worker) with ``sig`` at a
    seeded random moment, rerun it to completion and check every guarantee."""
    rng = random.Random(seed)
    (root / "spec.toml").write_text(SPEC)
    out = root / "out"
    cmd = [
        sys.executable,
        "-m",
        "oversmooth.cli.main",
        "sweep",
        str(root / "spec.toml"),
        "--out",
        str(out),
        "--quiet",
        "--json",
    ]
    proc = subprocess.Popen(
        cmd, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    seen: set[int] = set()
    hit = None
    deadline = time.time() + 120
    # The moment: during start-up in a quarter of the runs, else just after the k-th cell, with
    # at least half the cells still to run: a cell here takes about 0.1 s on 2 workers, and a hit
    # drawn after the 11th cell plus up to 0.2 s once landed after the sweep had ended (CI)
    if rng.random() < 0.25:
        moment, after = time.time() + rng.uniform(0.2, 4.0), 0
    else:
        moment, after = None, rng.randint(1, CELLS // 2)
    for tick in itertools.count():
        if proc.poll() is not None or time.time() > deadline:
            break
        if tick % 5 == 0:  # reading /proc costs; cells are counted more often
            seen |= _descendants(proc.pid)
        if moment is None and _count_cells(out) >= after:
            moment = time.time() + rng.uniform(0.0, 0.1)
        if moment is not None and time.time() >= moment:
            if target == "main" or _workers(proc.pid):
                seen |= _descendants(proc.pid)
                break
        time.sleep(0.02)
    finished_at_hit = _count_cells(out)
    victims = [proc.pid] if target == "main" else _workers(proc.pid)
    if proc.poll() is None and victims:
        hit = rng.choice(victims)
        # Ctrl-C reaches the main's whole process group; SIGKILL hits one process alone
        send = os.killpg if sig == signal.SIGINT and target == "main" else os.kill
        try:
            send(hit, sig)
        except ProcessLookupError:  # it had just finished
            hit = None
    while proc.poll() is None and time.time() < deadline:
        seen |= _descendants(proc.pid)
        time.sleep(0.05)
    stdout, stderr = proc.communicate(timeout=60)
    grace = time.time() + 5
    while _alive(seen) and time.time() < grace:
        time.sleep(0.1)
    orphans = _alive(seen)
    for pid in orphans:  # do not leave them running whatever the verdict
        os.kill(pid, signal.SIGKILL)

    def ok_cells() -> dict[str, str]:
        cells = {}
        for path in (out / "cells").glob("*.json") if (out / "cells").is_dir() else []:
            if json.loads(path.read_text()).get("status") == "ok":
                cells[path.name] = path.read_text()
        return cells

    before = ok_cells()
    if target == "worker" or hit is None:
        assert proc.returncode == 0, stderr.decode()[-2000:]
        assert json.loads(stdout)["failed"] == []
    rerun = run_sweep(load_spec(root / "spec.toml"), out)
    after = ok_cells()
    lost = sum(1 for name, text in before.items() if after.get(name) != text)
    metrics, summary = _tables(out)
    duplicates = int(summary.duplicated(KEYS).sum())
    litter = _litter(root)
    record = {
        "signal": sig.name,
        "target": target,
        "seed": seed,
        "hit": hit is not None,
        "cells_done_when_hit": finished_at_hit,
        "finished_before_rerun": len(before),
        "rerun_ran": rerun.ran,
        "lost": lost,
        "duplicates": duplicates,
        "orphans": len(orphans),
        "litter": len(litter),
    }
    TALLY.append(record)
    assert not orphans, f"processes outlived the sweep: {sorted(orphans)}"
    assert lost == 0 and rerun.skipped == len(before) and rerun.ran == CELLS - len(before)
    assert not rerun.failed and len(after) == CELLS and duplicates == 0
    pd.testing.assert_frame_equal(metrics, baseline["tables"][0])
    pd.testing.assert_frame_equal(summary, baseline["tables"][1])
    assert not litter, litter
    return record


def test_sigkill_main_mid_sweep_then_rerun(tmp_path, baseline):
    record = scenario(tmp_path, baseline, signal.SIGKILL, "main", 0)
    assert 0 < record["finished_before_rerun"] < CELLS  # seed 0 hits after some cells


SERIES = [
    (sig, target, seed)
    for seed in range(4)
    for sig in (signal.SIGINT, signal.SIGKILL)
    for target in ("main", "worker")
]


@pytest.mark.slow
@pytest.mark.parametrize("sig, target, seed", SERIES)
def test_fault_series(tmp_path, baseline, sig, target, seed):
    scenario(tmp_path, baseline, sig, target, 100 + seed)


@pytest.fixture(scope="module", autouse=True)
def _write_tally():
    yield
    path = os.environ.get("OVERSMOOTH_FAULTS_SUMMARY")
    if path and TALLY:
        totals = {k: sum(r[k] for r in TALLY) for k in ("lost", "duplicates", "orphans", "litter")}
        hit = sum(r["hit"] for r in TALLY)
        summary = {"scenarios": len(TALLY), "hit": hit, **totals, "runs": TALLY}
        Path(path).write_text(json.dumps(summary, indent=2) + "\n")


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads Linux's /proc")
def test_a_killed_main_process_not_yet_reaped_counts_as_dead_to_its_workers():
    """A SIGKILLed main process whose own parent has not reaped it answers kill(pid, 0), and
    its workers (children of the fork server) computed their whole cell before noticing: the
    watchdog reads its state from /proc (an audit)."""
    import subprocess
    import time

    from oversmooth.experiments.sweep import _zombie

    assert not _zombie(os.getpid())
    child = subprocess.Popen(["sleep", "30"])
    try:
        assert not _zombie(child.pid)
        child.kill()
        for _ in range(100):  # dead, not reaped: Popen waits only when asked
            if _zombie(child.pid):
                break
            time.sleep(0.02)
        assert _zombie(child.pid)
    finally:
        child.wait()
    assert not _zombie(child.pid)  # reaped: no such process
