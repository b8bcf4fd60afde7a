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
    check_out,
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
    from oversmooth.outputs import write_marker

    out = tmp_path / "r"
    out.mkdir()
    write_marker(out, "analyze")
    (out / "old.csv").write_text("keep")
    with pytest.raises(RuntimeError):
        with atomic_folder(out, overwrite=True) as tmp:
            (tmp / "new").write_text("x")
            raise RuntimeError("boom")
    assert (out / "old.csv").read_text() == "keep"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r"]


def _holding(folder, claim: bool = False, in_place: bool = False) -> subprocess.Popen:
    """A process holding ``folder`` until killed (it has printed 'held'): its claim as a run
    takes it (``claim``), else its lock alone (``in_place``: as a run that writes the folder in
    place, train or a sweep)."""
    take = (
        f"claim_folder({str(folder)!r}, False)"
        if claim
        else f"folder_lock({str(folder)!r}, in_place={in_place})"
    )
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\nfrom oversmooth.outputs import claim_folder, folder_lock\n"
            f"with {take}:\n"
            "    print('held', flush=True)\n    time.sleep(30)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline().strip() == "held"
    return holder


def _claims_refused(held, paths, *, claim: bool = False, overwrite: bool = False) -> None:
    """While another process holds ``held`` (:func:`_holding`), a claim on each of ``paths``
    is refused, naming that process."""
    holder = _holding(held, claim)
    try:
        for path in paths:
            with pytest.raises(FolderBusyError, match=f"pid {holder.pid}"):
                with claim_folder(path, overwrite=overwrite):
                    pass
    finally:
        holder.kill()
        holder.wait()


def test_second_live_claim_is_refused(tmp_path):
    out = tmp_path / "r"
    _claims_refused(out, [out], claim=True)
    with claim_folder(out, overwrite=False):  # the dead holder's lock is taken over
        pass


def test_one_folder_has_one_claim_whatever_link_names_it(tmp_path):
    """The lock was named after the last part of --out: two sweeps (or two resumed trainings)
    wrote one folder through a link and its target, leaving spec.json of one beside tables of
    the other; replacing a folder through its link replaced the link."""
    real = tmp_path / "real"
    with atomic_folder(real, overwrite=False) as tmp:
        (tmp / "a.csv").write_text("1")
    (tmp_path / "link").symlink_to(real)
    (tmp_path / "via").symlink_to(tmp_path)
    _claims_refused(real, [tmp_path / "link", tmp_path / "via" / "real"], overwrite=True)
    with atomic_folder(tmp_path / "link", overwrite=True) as tmp:
        (tmp / "b.csv").write_text("2")
    assert (tmp_path / "link").is_symlink() and (real / "b.csv").read_text() == "2"


def test_report_rebuild_waits_for_no_run_it_would_mix_with(tmp_path):
    """`oversmooth report` took no claim: beside `analyze --overwrite` it read the old run's
    tables and wrote their report into the new run's folder."""
    from typer.testing import CliRunner

    from oversmooth.cli.main import app

    folder = tmp_path / "run"
    with atomic_folder(folder, overwrite=False, kind="analyze") as tmp:
        (tmp / "config.json").write_text('{"command": "analyze"}')
    holder = _holding(folder)
    try:
        result = CliRunner().invoke(app, ["report", str(folder)])
    finally:
        holder.kill()
        holder.wait()
    assert result.exit_code != 0
    assert f"report: {folder} is being written by another oversmooth run (pid {holder.pid})" in (
        result.output
    )
    assert "Traceback" not in result.output


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


# ----------------------------------------------------------------------------- ours or refused


def test_every_folder_carries_the_marker(tmp_path):
    from oversmooth import __version__
    from oversmooth.outputs import MARKER, folder_kind

    out = tmp_path / "r"
    with atomic_folder(out, overwrite=False, kind="analyze") as tmp:
        (tmp / "metrics.csv").write_text("x")
    marker = json.loads((out / MARKER).read_text())
    assert marker["written_by"] == "oversmooth" and marker["kind"] == "analyze"
    assert marker["version"] == __version__ and marker["command"]
    assert folder_kind(out) == "analyze"


@pytest.mark.parametrize(
    "entries, named",
    [
        ({"notes.txt": "mine"}, "notes.txt"),
        ({"thesis/": None, "a.txt": "1", "b.txt": "2", "c.txt": "3"}, "and 1 more"),
        # an earlier version's report, with a file of the user's put into it
        ({"config.json": '{"command": "analyze"}', "report.html": "", "draft.docx": ""}, "draft"),
        # an output name, but nothing saying oversmooth wrote it
        ({"report.html": "<p>mine</p>"}, "report.html"),
    ],
)
def test_overwrite_refuses_what_is_not_ours(tmp_path, entries, named):
    out = tmp_path / "r"
    out.mkdir()
    for name, text in entries.items():
        if text is None:
            (out / name).mkdir()
        else:
            (out / name).write_text(text)
    before = sorted(p.name for p in out.iterdir())
    with pytest.raises(FileExistsError, match="not written by oversmooth") as info:
        with atomic_folder(out, overwrite=True):
            raise AssertionError("no work may start")
    assert named in str(info.value) and "choose another --out" in str(info.value)
    assert sorted(p.name for p in out.iterdir()) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r"]


def test_overwrite_replaces_an_empty_a_marked_or_an_earlier_versions_folder(tmp_path):
    from oversmooth.outputs import MARKER, folder_kind

    out = tmp_path / "r"
    out.mkdir()  # empty
    with atomic_folder(out, overwrite=True) as tmp:
        (tmp / "a.csv").write_text("1")
    with atomic_folder(out, overwrite=True) as tmp:  # marked by the run above
        (tmp / "b.csv").write_text("2")
    assert sorted(p.name for p in out.iterdir()) == [MARKER, "b.csv"]
    legacy = tmp_path / "old"  # written by a version before the marker
    legacy.mkdir()
    (legacy / "config.json").write_text('{"command": "compare"}')
    for name in ("report.html", "report.md", "metrics.csv", "energy.png"):
        (legacy / name).write_text("")
    assert folder_kind(legacy) == "compare"
    with atomic_folder(legacy, overwrite=True) as tmp:
        (tmp / "c.csv").write_text("3")
    assert sorted(p.name for p in legacy.iterdir()) == [MARKER, "c.csv"]


def test_overwrite_keeps_what_the_user_put_into_an_oversmooth_folder(tmp_path):
    """A marked folder is ours, but a file or folder the user added to it since is not:
    replacing the folder would delete it, so --overwrite refuses, naming it, and changes
    nothing; a resumed run (which writes into the folder) keeps it and goes on."""
    out = tmp_path / "r"
    with atomic_folder(out, overwrite=False, kind="analyze") as tmp:
        (tmp / "metrics.csv").write_text("1")
        (tmp / "energy.svg").write_text("<svg/>")  # every figure and table format is ours
        (tmp / "metrics.parquet").write_bytes(b"PAR1")
    (out / "notes.txt").write_text("mine")
    (out / "mydata").mkdir()
    before = sorted(p.name for p in out.iterdir())
    with pytest.raises(FileExistsError, match="did not write") as info:
        with atomic_folder(out, overwrite=True):
            raise AssertionError("no work may start")
    assert "mydata/, notes.txt" in str(info.value) and "move it out" in str(info.value)
    assert sorted(p.name for p in out.iterdir()) == before
    (out / "notes.txt").unlink()
    (out / "mydata").rmdir()
    with atomic_folder(out, overwrite=True) as tmp:
        (tmp / "metrics.csv").write_text("2")
    assert (out / "metrics.csv").read_text() == "2"


def test_a_folder_that_becomes_foreign_during_the_run_is_not_replaced(tmp_path):
    out = tmp_path / "r"
    out.mkdir()
    with pytest.raises(FileExistsError, match="not written by oversmooth"):
        with atomic_folder(out, overwrite=True) as tmp:
            (tmp / "a.csv").write_text("1")
            (out / "mine.txt").write_text("put there while the run worked")
    assert sorted(p.name for p in out.iterdir()) == ["mine.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r"]


@pytest.mark.parametrize(
    "name, says",
    [
        ("", "empty"),
        ("   ", "empty"),
        (".", "the current folder"),
        ("..", "a parent of the current folder"),
        ("sub/..", "the current folder"),
        ("{cwd}", "the current folder"),
        ("{cwd}/..", "a parent of the current folder"),
        ("/", "a parent of the current folder"),
        ("x" * 300, "300 bytes long"),
        ("a/" * 2100, "PATH_MAX"),
        ("bad\udcffname", "not UTF-8"),
        (b"bad\xffname", "not UTF-8"),
        ("two\nlines", "control character"),
        ("{dangling}", "does not exist"),
    ],
)
def test_unusable_out_names_are_refused_up_front(tmp_path, monkeypatch, name, says):
    from oversmooth.outputs import check_out_name

    (tmp_path / "sub").mkdir()
    os.symlink(tmp_path / "gone", tmp_path / "link")
    monkeypatch.chdir(tmp_path / "sub")
    if isinstance(name, str):
        name = name.replace("{cwd}", str(tmp_path / "sub"))
        name = name.replace("{dangling}", str(tmp_path / "link"))
    with pytest.raises(ValueError, match="--out: ") as info:
        check_out(name, overwrite=True)
    assert says in str(info.value) and len(str(info.value).splitlines()) == 1
    assert "choose" in str(info.value)
    with pytest.raises(ValueError):
        check_out_name(name)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link", "sub"]
    assert list((tmp_path / "sub").iterdir()) == []


# ----------------------------------------------------------------------------- the lock


def _contender(barrier, guard, holding, most, trials, root):
    """One process of the race: at each trial, wait for the others, then try to claim."""
    import random
    import time as clock

    for trial in range(trials):
        barrier.wait()
        try:
            with claim_folder(os.path.join(root, f"t{trial}"), overwrite=False):
                with guard:
                    holding.value += 1
                    most[trial] = max(most[trial], holding.value)
                clock.sleep(random.random() * 2e-4)
                with guard:
                    holding.value -= 1
        except FolderBusyError:
            pass
        barrier.wait()


def race(tmp_path, processes: int, trials: int) -> list[int]:
    """The most holders at once of each trial's folder, ``processes`` released together."""
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    barrier, guard = ctx.Barrier(processes), ctx.Lock()
    holding, most = ctx.Value("i", 0, lock=False), ctx.Array("i", trials, lock=False)
    args = (barrier, guard, holding, most, trials, str(tmp_path))
    procs = [ctx.Process(target=_contender, args=args) for _ in range(processes)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0] * processes
    assert not list(tmp_path.glob(".*.lock"))  # every holder removed its lock
    return list(most)


def test_at_most_one_process_holds_a_folder(tmp_path):
    most = race(tmp_path, processes=4, trials=60)
    assert max(most) == 1 and min(most) == 1


@pytest.mark.slow  # about 10 s: the 1,000 trials
def test_at_most_one_process_holds_a_folder_over_a_thousand_trials(tmp_path):
    most = race(tmp_path, processes=3, trials=1000)
    print(f"double holders: {sum(m > 1 for m in most)} of {len(most)} trials")
    assert sum(m > 1 for m in most) == 0 and min(most) == 1


def test_a_lock_file_nobody_holds_is_taken_and_a_held_one_is_not(tmp_path):
    from oversmooth.outputs import remove_unheld_lock

    out = tmp_path / "r"
    (tmp_path / ".r.lock").write_text("")  # half-written by a process that died
    with claim_folder(out, overwrite=False):
        assert not remove_unheld_lock(tmp_path / ".r.lock")  # held: left alone
        assert (tmp_path / ".r.lock").read_text().split()[0] == str(os.getpid())
    assert not (tmp_path / ".r.lock").exists()
    (tmp_path / ".r.lock").write_text("999999999\n")
    assert remove_unheld_lock(tmp_path / ".r.lock")
    assert list(tmp_path.iterdir()) == []


def test_a_claim_that_cannot_write_its_pid_leaves_no_lock_file(tmp_path, monkeypatch):
    """A full disk: the claim fails with the error, and its lock file (created empty, the PID
    not written) was left behind (an audit)."""
    import errno

    from oversmooth import outputs

    def full(fd, in_place=False):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(outputs, "_write_pid", full)
    with pytest.raises(OSError, match="No space left"):
        with claim_folder(tmp_path / "r", overwrite=False):
            pass
    assert list(tmp_path.iterdir()) == []


def test_read_table_reads_an_older_folders_column_names(tmp_path):
    from oversmooth.outputs import read_table

    path = tmp_path / "metrics.csv"
    path.write_text(
        "seed,layer,laplacian_energy,cosine_prev,rusch_dirichlet,mad_global\n0,0,1.5,,2,0.25\n"
    )
    frame = read_table(path)
    assert list(frame.columns) == [
        "seed",
        "layer",
        "laplacian_energy",
        "mean_cosine_similarity",
        "rusch_dirichlet_energy",
        "mean_average_distance_global",
    ]
    assert frame["mean_average_distance_global"].iloc[0] == 0.25


def test_the_replaced_folder_goes_even_when_read_only(tmp_path, monkeypatch):
    """--overwrite of a read-only folder (mode 555): the old copy renamed aside is removed, its
    folders made writable first; what still cannot go is a warning, never a silent hidden
    .NAME.old-PID left beside the output."""
    import os

    from oversmooth.outputs import _remove_tree

    real_unlink = os.unlink
    refused = set()

    def unlink_once(path, *args, **kwargs):  # as a non-root user in a 555 folder, once
        if str(path).endswith("a.csv") and not refused:
            refused.add(path)
            raise PermissionError(13, "Permission denied", str(path))
        return real_unlink(path, *args, **kwargs)

    old = tmp_path / ".r.old-1"
    old.mkdir()
    (old / "a.csv").write_text("1")
    monkeypatch.setattr(os, "unlink", unlink_once)
    _remove_tree(old)
    assert refused and not old.exists()

    def never(path, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(path))

    old.mkdir()
    (old / "a.csv").write_text("1")
    monkeypatch.setattr(os, "unlink", never)
    with pytest.warns(UserWarning, match=r"could not be removed \(Permission denied\); delete it"):
        _remove_tree(old)


def test_a_failed_swap_puts_the_old_output_back(tmp_path, monkeypatch):
    """--overwrite renames the old folder aside, then the new one into place: when the second
    rename fails, the old folder goes back to its name (left aside, the next run would sweep
    it away as a dead process's litter)."""
    from pathlib import Path

    out = tmp_path / "r"
    with atomic_folder(out, overwrite=False) as tmp:
        (tmp / "a.csv").write_text("old")
    real = Path.rename

    def refuse_the_new(self, target):
        if self.name.startswith(".r.tmp-"):
            raise OSError(5, "Input/output error")
        return real(self, target)

    monkeypatch.setattr(Path, "rename", refuse_the_new)
    with pytest.raises(OSError, match="Input/output error"):
        with atomic_folder(out, overwrite=True) as tmp:
            (tmp / "a.csv").write_text("new")
    assert (out / "a.csv").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r"]


def _finished(folder, kind="analyze", command="oversmooth analyze"):
    """``folder`` as a finished oversmooth output of ``kind`` written by ``command``."""
    folder.mkdir(parents=True)
    (folder / "metrics.csv").write_text("layer\n0\n")
    write_json(
        folder / ".oversmooth.json", {"written_by": "oversmooth", "kind": kind, "command": command}
    )


def test_overwrite_refuses_a_folder_another_run_writes_or_wrote_inside(tmp_path):
    """``analyze --out X --overwrite`` deleted X/inner that another run was writing (its lock
    and temporary folder with it: that run then failed with a raw errno and a third run could
    claim its folder), and a finished X/report-mine, silently (an audit)."""
    out = tmp_path / "X"
    _finished(out)
    _claims_refused(out / "inner", [out], overwrite=True)  # held inside: refused, naming it
    with claim_folder(out, overwrite=True):  # let go: replaceable again
        pass
    _finished(out / "report-mine")
    with pytest.raises(FileExistsError, match=r"holds report-mine/, the output of another"):
        check_out(out, overwrite=True)
    sweep = tmp_path / "S"  # a sweep's own report-* folders are its own
    _finished(sweep, kind="sweep")
    _finished(sweep / "report-gcn-init", kind="compare")
    check_out(sweep, overwrite=True, writer="sweep")
    with pytest.raises(FileExistsError, match=r"holds an oversmooth sweep run \(its computed"):
        check_out(sweep, overwrite=True)  # another kind of run: its cells are kept


def test_an_out_inside_a_folder_another_run_writes_is_refused(tmp_path):
    """``analyze --out Y/inner`` beside a running ``analyze --out Y --overwrite`` wrote inside
    the folder the first run replaces when it ends (which then failed at its last step because
    of it; an audit).  A sweep's worker writes inside the sweep's folder on its behalf."""
    from oversmooth.outputs import working_inside

    out = tmp_path / "Y"
    _finished(out)
    holder = _holding(out)
    try:
        for inner in (out / "inner", out / "a" / "b"):
            with pytest.raises(FolderBusyError, match=rf"lies inside .*pid {holder.pid}"):
                check_out(inner, overwrite=False)
        assert not (out / "inner").exists() and not (out / "a").exists()
        with working_inside(out):  # a sweep's worker
            with claim_folder(out / "runs" / "cell", overwrite=False):
                pass
        with pytest.raises(FolderBusyError, match="lies inside"):  # only inside the block
            check_out(out / "inner", overwrite=False)
        check_out(tmp_path / "beside", overwrite=False)  # a sibling is not inside
    finally:
        holder.kill()
        holder.wait()
    check_out(out / "inner", overwrite=False)  # let go: a folder like any other
    # a run that writes its folder in place (train: analysing its checkpoint into the training
    # folder while it trains; the first version refused that, an audit) leaves inner alone
    holder = _holding(out, in_place=True)
    try:
        check_out(out / "inner", overwrite=False)
    finally:
        holder.kill()
        holder.wait()
    for writer, reuse, said in (
        ("train", None, True),
        (None, "sweep", True),
        ("analyze", None, False),
    ):
        target = tmp_path / f"claimed-{writer}-{reuse}"
        with claim_folder(target, False, writer=writer, reuse=reuse):
            text = (tmp_path / f".{target.name}.lock").read_text()
            assert ("in-place" in text) is said, (writer, reuse, text)


SWAP = """
import os, signal, sys
from pathlib import Path
import oversmooth.outputs as O

signal.signal(signal.SIGINT, lambda *a: O.stop_signal(KeyboardInterrupt))
root = Path(sys.argv[1])
remove = O._remove_tree
def interrupted(folder):  # Ctrl-C while the replaced copy is being removed
    os.kill(os.getpid(), signal.SIGINT)
    remove(folder)
O._remove_tree = interrupted
try:
    O.move_into_place(root / "new", root / "out")
except KeyboardInterrupt as stop:
    print("written", getattr(stop, "written", None))
print(sorted(p.name for p in root.iterdir()), (root / "out" / "a.csv").read_text())
"""


def test_a_stop_during_the_swap_waits_for_it_and_says_the_output_is_in_place(tmp_path):
    """Signals were held across the two renames only: a Ctrl-C while the replaced copy was
    removed left .out.old-PID beside out and said only "interrupted", with out already the
    new folder (an audit).  Held through the removal, the stop carries the folder written."""
    _finished(tmp_path / "out")
    (tmp_path / "out" / "a.csv").write_text("old")
    _finished(tmp_path / "new")
    (tmp_path / "new" / "a.csv").write_text("new")
    done = subprocess.run(
        [sys.executable, "-c", SWAP, str(tmp_path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == [f"written {tmp_path / 'out'}", "['out'] new"]


def test_the_write_tests_file_of_a_dead_process_is_removed(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (tmp_path / f".oversmooth-write-test-{dead.pid}").write_text("")
    assert clean_stale_siblings(tmp_path / "r") == [tmp_path / f".oversmooth-write-test-{dead.pid}"]


def test_a_trained_sweeps_runs_are_not_deleted_by_another_kinds_overwrite(tmp_path):
    """``analyze --out SWEEP --overwrite`` deleted a trained sweep's runs/<id> training runs,
    checkpoints included (the nested-output check looks one level down; an audit)."""
    sweep = tmp_path / "S"
    _finished(sweep, kind="sweep")
    _finished(sweep / "runs" / "a", kind="train")
    with pytest.raises(FileExistsError, match=r"holds an oversmooth sweep run \(its computed"):
        check_out(sweep, overwrite=True, writer="analyze")
    # an initialisation sweep (no training run) is kept too: its cells went silently (an audit)
    plain = tmp_path / "P"
    _finished(plain, kind="sweep")
    (plain / "runs").mkdir()
    with pytest.raises(FileExistsError, match=r"holds an oversmooth sweep run \(its computed"):
        check_out(plain, overwrite=True, writer="analyze")


def test_a_folder_set_aside_by_a_run_killed_between_its_renames_is_put_back(tmp_path):
    """SIGKILL between move_into_place's two renames left the previous results in
    .NAME.old-PID and the new ones in .NAME.tmp-PID, no NAME; the next run into NAME removed
    both, and the previous results were lost without a word (an audit)."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    out = tmp_path / "r"
    with atomic_folder(out, overwrite=False) as tmp:
        (tmp / "x").write_text("previous")
    out.rename(tmp_path / f".r.old-{dead.pid}")  # the kill: set aside, the new one not in
    (tmp_path / f".r.tmp-{dead.pid}").mkdir()
    with pytest.warns(UserWarning, match=r"put back from \.r\.old-\d+, where a run killed"):
        with pytest.raises(FileExistsError):  # restored, so a run without --overwrite stops
            with claim_folder(out, overwrite=False):
                pass
    assert (out / "x").read_text() == "previous"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r"]


@pytest.mark.parametrize(
    "command",
    [
        ["analyze", "--dataset", "karate", "--depth", "3", "--seeds", "0", "-q"],
        # the command was read before the folder was back: "unknown command 'train'" the
        # first time, a success the second (a regression audit)
        ["train", "--dataset", "karate", "--depth", "2", "--epochs", "2", "-q"],
    ],
)
def test_report_puts_back_a_folder_set_aside_by_a_killed_run(tmp_path, command):
    from typer.testing import CliRunner

    from oversmooth.cli.main import app

    out = tmp_path / "an"
    assert CliRunner().invoke(app, [*command, "--out", str(out)]).exit_code == 0
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    out.rename(tmp_path / f".an.old-{dead.pid}")
    result = CliRunner().invoke(app, ["report", str(out)])
    assert result.exit_code == 0, result.output
    (tmp_path / f".an.tmp-{dead.pid}").mkdir()  # a killed rebuild's copy: no later one removed it
    assert CliRunner().invoke(app, ["report", str(out)]).exit_code == 0
    assert (out / "report.html").is_file() and (out / "config.json").is_file()
    assert not list(tmp_path.glob(".an.*"))


def test_a_set_aside_folder_is_put_back_whatever_its_pid_and_kept_beside_a_file(tmp_path):
    """PIDs are reused after a restart: a live PID in the name left the previous results hidden
    (and removed once that PID exited); with NAME a file, the set-aside folder was removed
    (a regression audit)."""
    out = tmp_path / "r"
    aside = tmp_path / f".r.old-{os.getpid()}"  # a live PID: this process's
    aside.mkdir()
    (aside / "x").write_text("previous")
    with pytest.warns(UserWarning, match="put back from"):
        clean_stale_siblings(out)
    assert (out / "x").read_text() == "previous"
    out.rename(aside)
    out.write_text("a file")
    with pytest.warns(UserWarning, match=r"is not a folder; left \.r\.old-"):
        clean_stale_siblings(out)
    assert (aside / "x").read_text() == "previous"
