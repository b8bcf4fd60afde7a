"""Fault injection for ``oversmooth train``: SIGINT, SIGTERM, SIGKILL at random points, then resume.

Each scenario runs ``oversmooth train`` as a subprocess (one thread, a tiny model on
Cora), sends it one or more signals at seeded random times, checks what each kill left
behind (no half-written checkpoint, no litter once the run is continued), continues it
with ``--resume`` (or starts it again when nothing was saved) and compares the result
with an uninterrupted run: history.csv, last.pt (weights, optimiser) and best.pt
(weights, epoch) must be identical bit for bit.

Regenerate ``reports/reliability-train.md`` with::

    python -m tests.test_train_faults --scenarios 12 --report reports/reliability-train.md
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from oversmooth.outputs import MARKER

EPOCHS = 12
TRAIN = [
    "train",
    "--model",
    "preln",
    "--depth",
    "2",
    "--hidden",
    "8",
    "--heads",
    "2",
    "--epochs",
    str(EPOCHS),
    "--checkpoint-every",
    "0",
    "--quiet",
    "--json",
]
# one thread: the same kernels (and so the same bits) in every process
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
SIGNALS = {"SIGINT": signal.SIGINT, "SIGTERM": signal.SIGTERM, "SIGKILL": signal.SIGKILL}
LIMIT_S = 300  # one subprocess, at most


def _command(out: Path, resume: bool) -> list[str]:
    return [
        sys.executable,
        "-m",
        "oversmooth.cli.main",
        *TRAIN,
        "--out",
        str(out),
        *(["--resume"] if resume else []),
    ]


def _run(out: Path) -> tuple[int, float]:
    started = time.perf_counter()
    proc = subprocess.run(
        _command(out, resume=(out / "last.pt").is_file()),
        env=ENV,
        capture_output=True,
        text=True,
        timeout=LIMIT_S,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.returncode, time.perf_counter() - started


def _load(path: Path) -> dict:
    return torch.load(path, weights_only=True)


def _check_after_kill(out: Path) -> int:
    """What a killed run leaves: nothing, or a folder whose checkpoints all load and agree.
    Returns the last saved epoch (-1 when nothing was saved)."""
    if not out.exists():
        return -1
    last = _load(out / "last.pt")  # a half-written file would fail here
    assert len(last["history"]) == last["epoch"] + 1
    assert last["best_state_dict"] is not None and 0 <= last["best_epoch"] <= last["epoch"]
    best = _load(out / "best.pt")
    assert best["meta"]["epoch"] >= last["best_epoch"]  # best.pt may be ahead, never behind
    assert (out / "config.json").is_file() and (out / "history.csv").is_file()
    return int(last["epoch"])


def _check_same(reference: Path, out: Path) -> None:
    assert (reference / "history.csv").read_bytes() == (out / "history.csv").read_bytes()
    for name in ("last.pt", "best.pt"):
        a, b = _load(reference / name), _load(out / name)
        assert a["state_dict"].keys() == b["state_dict"].keys()
        assert all(torch.equal(a["state_dict"][k], b["state_dict"][k]) for k in a["state_dict"]), (
            name
        )
    a, b = _load(reference / "last.pt"), _load(out / "last.pt")
    assert a["history"] == b["history"] and a["epoch"] == b["epoch"] == EPOCHS - 1
    for k, state in a["optimizer"]["state"].items():
        assert all(torch.equal(v, b["optimizer"]["state"][k][n]) for n, v in state.items())
    assert _load(reference / "best.pt")["meta"]["epoch"] == _load(out / "best.pt")["meta"]["epoch"]
    ref = json.loads((reference / "summary.json").read_text())
    got = json.loads((out / "summary.json").read_text())
    timing = ("seconds_this_run", "resumed")  # what this process timed, and whether it resumed
    assert {k: v for k, v in ref.items() if k not in timing} == {
        k: v for k, v in got.items() if k not in timing
    }
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in reference.iterdir())


def _saved_rows(out: Path) -> int:
    try:
        return len((out / "history.csv").read_text().splitlines()) - 1
    except OSError:
        return 0


def scenario(
    folder: Path, reference: Path, kills: list[tuple[str, float]], after_epoch: int | None = None
) -> list[dict]:
    """Run into ``folder / "run"``, sending each ``(signal name, seconds after launch)``
    in turn to a fresh (or resumed) process (with ``after_epoch``: as soon as that epoch
    is saved instead of after a delay); then finish the run and compare."""
    out = folder / "run"
    steps = []
    for name, delay in kills:
        resume = (out / "last.pt").is_file()
        proc = subprocess.Popen(
            _command(out, resume),
            env=ENV,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        if after_epoch is None:
            time.sleep(delay)
        else:
            deadline = time.monotonic() + LIMIT_S
            while (
                proc.poll() is None
                and _saved_rows(out) <= after_epoch
                and time.monotonic() < deadline
            ):
                time.sleep(0.01)
        sent = proc.poll() is None
        if sent:
            proc.send_signal(SIGNALS[name])
        _, err = proc.communicate(timeout=LIMIT_S)
        saved = _check_after_kill(out)
        if sent and name != "SIGKILL" and proc.returncode in (130, 143):
            lines = (out / "history.csv").read_text().splitlines() if out.exists() else ["header"]
            assert len(lines) == saved + 2, err  # a graceful stop writes the history it saved
        steps.append(
            {
                "signal": name,
                "delay_s": round(delay, 2),
                "sent": sent,
                "exit": proc.returncode,
                "saved_epoch": saved,
            }
        )
    _run(out)
    _check_same(reference, out)
    assert sorted(p.name for p in folder.iterdir()) == ["run"]  # no lock, no temporary sibling
    assert [p.name for p in out.iterdir() if p.name.startswith(".")] == [MARKER]
    return steps


def random_kills(rng: random.Random, span_s: float, count: int) -> list[tuple[str, float]]:
    return [(rng.choice(sorted(SIGNALS)), rng.uniform(0.0, span_s)) for _ in range(count)]


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> tuple[Path, float]:
    """The uninterrupted run, as a subprocess: its wall time spans the random kills."""
    out = tmp_path_factory.mktemp("reference") / "run"
    _, seconds = _run(out)
    return out, seconds


@pytest.fixture(scope="module")
def reference_here(tmp_path_factory) -> Path:
    """The uninterrupted run, computed in this process on one thread as the subprocesses run
    (the same kernels, so the same bits; a process fewer, with its imports and its report)."""
    from typer.testing import CliRunner

    from oversmooth.cli.main import app

    out = tmp_path_factory.mktemp("reference") / "run"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        result = CliRunner().invoke(app, [*TRAIN, "--out", str(out)])
    finally:
        torch.set_num_threads(threads)
    assert result.exit_code == 0, result.output
    return out


def test_sigkill_mid_run_then_resume_is_bit_identical(tmp_path, reference_here):
    ref = reference_here
    # a seeded epoch, killed as soon as it is saved (robust to the machine's speed)
    epoch = random.Random(0).randint(2, EPOCHS - 3)
    steps = scenario(tmp_path, ref, [("SIGKILL", 0.0)], after_epoch=epoch)
    assert steps[0]["sent"] and epoch <= steps[0]["saved_epoch"] < EPOCHS - 1


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(6))
def test_random_signals_then_resume_are_bit_identical(tmp_path, reference, seed):
    ref, seconds = reference
    rng = random.Random(seed)
    scenario(tmp_path, ref, random_kills(rng, 1.1 * seconds, rng.randint(1, 3)))


def main() -> None:
    import tempfile

    parser = argparse.ArgumentParser(description="Kill-and-resume scenarios for oversmooth train.")
    parser.add_argument("--scenarios", type=int, default=12)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--report", type=Path, default=Path("reports/reliability-train.md"))
    args = parser.parse_args()
    rng = random.Random(args.seed)
    rows, identical = [], 0
    with tempfile.TemporaryDirectory() as tmp:
        ref = Path(tmp) / "reference" / "run"
        _, seconds = _run(ref)
        for i in range(args.scenarios):
            kills = random_kills(rng, 1.1 * seconds, rng.randint(1, 3))
            folder = Path(tmp) / f"s{i}"
            folder.mkdir()
            try:
                steps, ok = scenario(folder, ref, kills), True
            except AssertionError as exc:
                steps, ok = [{"signal": n, "delay_s": round(d, 2)} for n, d in kills], False
                print(f"scenario {i}: FAILED {exc}", file=sys.stderr)
            identical += ok
            rows.append((i, steps, ok))
            print(f"scenario {i}: {'identical' if ok else 'DIFFERENT'}", file=sys.stderr)
    lines = [
        "# Reliability: `oversmooth train` killed and resumed "
        "(per scenario; summary in reliability.md)",
        "",
        f"{args.scenarios} scenarios (seed {args.seed}); each runs `oversmooth {' '.join(TRAIN)}` "
        "(one thread) as a subprocess, sends 1-3 signals at uniform random times in "
        f"[0, 1.1 x {seconds:.1f} s] after a launch (the uninterrupted run's wall time), resumes "
        "after each, and compares the finished run with an uninterrupted one.",
        "",
        f"**Resumed bit-identical: {identical} of {args.scenarios}** (history.csv bytes, last.pt "
        "weights and Adam state, best.pt weights and epoch, summary.json; no lock, temporary or "
        "half-written file left).",
        "",
        "Exit 130/143: a graceful stop (SIGINT/SIGTERM handled at an epoch boundary, or SIGINT "
        "before training began); exit -N: killed by signal N (SIGKILL, or SIGTERM outside the "
        "training loop, before it starts or after it has saved); saved -1: no checkpoint yet, "
        "and no folder either.",
        "",
        "| scenario | signals (s after launch; exit code; last saved epoch) | identical |",
        "|---|---|---|",
    ]
    for i, steps, ok in rows:
        text = "; ".join(
            f"{s['signal']} at {s['delay_s']} s"
            + (
                f" (exit {s['exit']}, saved {s['saved_epoch']})"
                if s.get("sent")
                else " (already finished)"
                if "sent" in s
                else ""
            )
            for s in steps
        )
        lines.append(f"| {i} | {text} | {'yes' if ok else 'NO'} |")
    lines += [
        "",
        "Regenerate with:",
        "",
        f"    python -m tests.test_train_faults --scenarios {args.scenarios} "
        f"--seed {args.seed} --report {args.report}",
        "",
    ]
    args.report.parent.mkdir(parents=True, exist_ok=True)
    args.report.write_text("\n".join(lines))


if __name__ == "__main__":
    main()


def test_a_checkpoint_that_cannot_be_written_says_why_in_one_line(tmp_path, monkeypatch):
    """A full disk during train printed torch's 'RuntimeError: [enforce fail at
    inline_container.cc:672] . unexpected pos 357504 vs 357396'."""
    import shutil
    from collections import namedtuple

    import torch

    from oversmooth import checkpoint as C

    def broken(obj, path):
        Path(path).write_bytes(b"partial")
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 1 vs 2")

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(torch, "save", broken)
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage(10, 10, 0))
    target = tmp_path / "last.pt"
    target.write_bytes(b"the previous checkpoint")
    with pytest.raises(C.CheckpointWriteError) as err:
        C._atomic_save({"a": 1}, target)
    assert str(err.value) == (
        f"{target}: could not be written, no space left on the device; the previous "
        "checkpoint is kept: free some space and rerun with --resume"
    )
    assert target.read_bytes() == b"the previous checkpoint"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.pt"]  # no temporary left
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage(10**12, 0, 10**12))
    with pytest.raises(C.CheckpointWriteError, match=r"could not be written \(\[enforce fail"):
        C._atomic_save({"a": 1}, target)
