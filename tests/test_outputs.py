"""Exclusive, atomic output folders (oversmooth.outputs)."""

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from oversmooth.outputs import (
    FolderBusyError,
    atomic_folder,
    claim_folder,
    clean_stale_siblings,
    json_text,
    write_json,
)


def strict_json(text: str):
    """``json.loads`` that refuses the non-JSON constants NaN, Infinity and -Infinity."""

    def refuse(name):
        raise ValueError(f"not JSON: {name}")

    return json.loads(text, parse_constant=refuse)


def test_atomic_folder_writes_and_releases(tmp_path):
    out = tmp_path / "r"
    with atomic_folder(out, overwrite=False) as tmp:
        (tmp / "a.txt").write_text("x")
        assert not out.exists()
    assert (out / "a.txt").read_text() == "x"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r"]  # no lock, no temp left


def test_existing_folder_needs_overwrite(tmp_path):
    out = tmp_path / "r"
    out.mkdir()
    with pytest.raises(FileExistsError, match="--overwrite"):
        with atomic_folder(out, overwrite=False):
            pass
    with atomic_folder(out, overwrite=True) as tmp:
        (tmp / "b").write_text("y")
    assert (out / "b").exists()


def test_failure_keeps_old_folder_and_leaves_no_litter(tmp_path):
    out = tmp_path / "r"
    out.mkdir()
    (out / "old").write_text("keep")
    with pytest.raises(RuntimeError):
        with atomic_folder(out, overwrite=True) as tmp:
            (tmp / "new").write_text("x")
            raise RuntimeError("boom")
    assert (out / "old").read_text() == "keep"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r"]


def test_second_live_claim_is_refused(tmp_path):
    out = tmp_path / "r"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\nfrom oversmooth.outputs import claim_folder\n"
            f"with claim_folder({str(out)!r}, False):\n"
            "    print('held', flush=True)\n    time.sleep(30)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(FolderBusyError, match=f"pid {holder.pid}"):
            with claim_folder(out, overwrite=False):
                pass
    finally:
        holder.kill()
        holder.wait()
    with claim_folder(out, overwrite=False):  # the dead holder's lock is taken over
        pass


def test_claim_is_reentrant_in_one_process(tmp_path):
    out = tmp_path / "r"
    with claim_folder(out, overwrite=False):
        with atomic_folder(out, overwrite=False) as tmp:
            (tmp / "x").write_text("1")
    assert (out / "x").exists()
    assert not (tmp_path / ".r.lock").exists()


def test_stale_temp_siblings_of_dead_processes_are_removed(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f".r.tmp-{dead.pid}"
    stale.mkdir()
    live = tmp_path / f".r.tmp-{os.getpid()}"
    live.mkdir()
    removed = clean_stale_siblings(tmp_path / "r")
    assert removed == [stale] and live.exists()


def test_check_out_creates_nothing_and_claim_removes_empty_parents(tmp_path):
    from oversmooth.outputs import check_out

    out = tmp_path / "a" / "b" / "r"
    check_out(out, overwrite=False)
    assert list(tmp_path.iterdir()) == []  # checked, not created
    with pytest.raises(RuntimeError):
        with claim_folder(out, overwrite=False):
            assert (tmp_path / "a" / "b").is_dir()  # made for the lock
            raise RuntimeError("the run failed")
    assert list(tmp_path.iterdir()) == []
    with atomic_folder(out, overwrite=False) as tmp:
        (tmp / "f").write_text("x")
    assert (out / "f").read_text() == "x"


def test_check_out_refuses_a_file_in_the_way(tmp_path):
    from oversmooth.outputs import check_out

    (tmp_path / "file").write_text("x")
    with pytest.raises(FileExistsError, match="is a file"):
        check_out(tmp_path / "file" / "sub" / "r", overwrite=False)


def test_write_json_is_strict_and_maps_non_finite_to_null(tmp_path):
    obj = {
        "a": math.nan,
        "b": [1.5, math.inf, -math.inf],
        "c": np.float64("nan"),
        "d": np.array([0.5, np.nan]),
        "e": (np.int64(3), np.float32(2.0)),
        "f": tmp_path,
    }
    write_json(tmp_path / "x.json", obj)
    text = (tmp_path / "x.json").read_text()
    assert strict_json(text) == {
        "a": None,
        "b": [1.5, None, None],
        "c": None,
        "d": [0.5, None],
        "e": [3, 2.0],
        "f": str(tmp_path),
    }
    assert text.endswith("\n") and sorted(p.name for p in tmp_path.iterdir()) == ["x.json"]
    assert strict_json(json_text([math.nan], indent=None)) == [None]
    with pytest.raises(ValueError, match="not JSON: NaN"):
        strict_json(json.dumps(math.nan))  # the checker itself works
