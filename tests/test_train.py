"""Training, checkpoints, resume, interruption, divergence and trained-model analysis."""

from __future__ import annotations

import re

import json
import os
import signal
from dataclasses import replace

import pytest
import torch
from typer.testing import CliRunner

import oversmooth.checkpoint as C
import oversmooth.train as T
from oversmooth import build_model
from oversmooth.cli.main import app
from oversmooth.data import load
from oversmooth.outputs import MARKER
from oversmooth.config import ModelConfig
from tests.conftest import held_folder


@pytest.fixture(autouse=True)
def _sigint_is_deliverable():
    """The Ctrl-C tests send SIGINT to this process: a pytest started in the background (a
    shell's ``&``) inherits SIGINT ignored, and training keeps an ignored signal ignored (as a
    sweep worker must), so restore Python's handler for the test."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        yield
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    else:
        yield


FAST = dict(model=ModelConfig("preln", depth=4, hidden=16, heads=2))
TINY = dict(model=ModelConfig("preln", depth=2, hidden=8, heads=2))


def same_weights(a, b) -> bool:
    sa = torch.load(a, weights_only=True)["state_dict"]
    sb = torch.load(b, weights_only=True)["state_dict"]
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def test_short_training_beats_chance(tmp_path):
    from oversmooth.report.writers import write_training_report

    config = T.TrainConfig(model=ModelConfig("preln", depth=4), epochs=25)
    result = T.train(config, tmp_path / "run", report=write_training_report)
    assert result.stopped == "finished" and result.epochs_run == 25
    # 7 classes: chance is 1/7 and the majority class ~30%
    assert result.best["val_acc"] > 0.6 and result.best["test_acc"] > 0.6
    for name in (
        "best.pt",
        "last.pt",
        "history.csv",
        "training.png",
        "config.json",
        "summary.json",
    ):
        assert (tmp_path / "run" / name).is_file(), name
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["best_epoch"] == result.best_epoch
    model, meta = C.load_checkpoint(tmp_path / "run" / "best.pt")
    assert meta["epoch"] == result.best_epoch and meta["dataset"] == "cora"


def test_checkpoint_reloads_to_identical_outputs(tmp_path):
    data = load("cora")
    model = build_model(
        "nonlocal", conv="gat", depth=3, in_channels=data.num_features, out_channels=7, seed=5
    )
    C.save_checkpoint(tmp_path / "m.pt", model, {"dataset": "cora"})
    loaded, meta = C.load_checkpoint(tmp_path / "m.pt")
    with torch.no_grad():
        assert torch.equal(model(data.x, data.edge_index), loaded(data.x, data.edge_index))
    assert loaded.config == model.config


def test_resume_continues_exactly(tmp_path):
    straight = T.train(T.TrainConfig(epochs=6, **FAST), tmp_path / "straight")
    T.train(T.TrainConfig(epochs=3, **FAST), tmp_path / "split")
    resumed = T.train(T.TrainConfig(epochs=6, **FAST), tmp_path / "split", resume=True)
    assert [r["epoch"] for r in resumed.history] == list(range(6))
    assert resumed.history == straight.history  # bit for bit, not approximately
    for name in ("history.csv", "dynamics.csv"):  # the probe's rows: none duplicated or missing
        assert (tmp_path / "straight" / name).read_bytes() == (
            tmp_path / "split" / name
        ).read_bytes()
    for name in ("last.pt", "best.pt"):
        assert same_weights(tmp_path / "straight" / name, tmp_path / "split" / name), name


def test_ctrl_c_stops_at_an_epoch_boundary_and_resumes_bit_for_bit(tmp_path):
    straight = T.train(T.TrainConfig(epochs=5, **TINY), tmp_path / "straight")

    def interrupt(done, total, row):
        if done == 2:  # the signal arrives during epoch 2; it still ends, then the run stops
            os.kill(os.getpid(), signal.SIGINT)

    result = T.train(
        T.TrainConfig(epochs=5, **TINY), tmp_path / "run", progress=interrupt, checkpoint_every=1e6
    )
    assert result.stopped == "interrupted" and result.epochs_run == 2
    last = torch.load(tmp_path / "run" / "last.pt", weights_only=True)
    assert last["epoch"] == 1 and len(last["history"]) == 2
    assert (tmp_path / "run" / "history.csv").read_text().count("\n") == 3  # header + 2 rows
    _, meta = C.load_checkpoint(tmp_path / "run" / "best.pt")
    assert meta["epoch"] == result.best_epoch
    resumed = T.train(T.TrainConfig(epochs=5, **TINY), tmp_path / "run", resume=True)
    assert resumed.history == straight.history
    assert (tmp_path / "straight" / "history.csv").read_bytes() == (
        tmp_path / "run" / "history.csv"
    ).read_bytes()
    assert same_weights(tmp_path / "straight" / "last.pt", tmp_path / "run" / "last.pt")
    assert same_weights(tmp_path / "straight" / "best.pt", tmp_path / "run" / "best.pt")
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # handler restored


def test_a_raw_keyboard_interrupt_keeps_the_last_save_and_leaves_no_temporary(tmp_path):
    def abort(done, total, row):
        if done == 3:
            raise KeyboardInterrupt  # like a second Ctrl-C: no graceful stop

    with pytest.raises(KeyboardInterrupt):
        T.train(
            T.TrainConfig(epochs=5, **TINY), tmp_path / "run", progress=abort, checkpoint_every=0
        )
    last = torch.load(tmp_path / "run" / "last.pt", weights_only=True)
    assert last["epoch"] == 1 and len(last["history"]) == 2  # epoch 2 was never saved
    assert not [p for p in tmp_path.rglob(".*") if ".tmp-" in p.name or p.name.endswith(".lock")]


def test_fixed_seed_is_reproducible_with_several_threads(tmp_path):
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    seen = {}

    def spy(done, total, row):
        seen["deterministic"] = torch.are_deterministic_algorithms_enabled()

    try:
        runs = [
            T.train(T.TrainConfig(epochs=4, **TINY), tmp_path / f"r{i}", progress=spy).history
            for i in range(3)
        ]
    finally:
        torch.set_num_threads(threads)
    assert seen["deterministic"] and not torch.are_deterministic_algorithms_enabled()
    assert runs[0] == runs[1] == runs[2]


def test_training_neither_uses_nor_changes_the_global_rng(tmp_path):
    torch.manual_seed(123)
    before = torch.get_rng_state()
    a = T.train(T.TrainConfig(epochs=3, **TINY), tmp_path / "a")
    assert torch.equal(torch.get_rng_state(), before)
    torch.manual_seed(456)
    b = T.train(T.TrainConfig(epochs=3, **TINY), tmp_path / "b")
    assert a.history == b.history


def test_resume_refuses_changed_options_it_would_silently_ignore(tmp_path):
    T.train(T.TrainConfig(epochs=2, **TINY), tmp_path / "run")
    with pytest.raises(
        C.CheckpointError, match=r"was trained with --lr unset \(its default\), not --lr 0.01"
    ):
        T.train(T.TrainConfig(epochs=4, lr=0.01, **TINY), tmp_path / "run", resume=True)
    # fewer epochs than already ran: refused, and config.json still says what ran
    with pytest.raises(C.CheckpointError, match="has trained 2 epochs already, more than --epo"):
        T.train(T.TrainConfig(epochs=1, **TINY), tmp_path / "run", resume=True)
    assert json.loads((tmp_path / "run" / "config.json").read_text())["epochs"] == 2
    post = dict(TINY, model=replace(TINY["model"], name="postln"))
    T.train(T.TrainConfig(epochs=20, patience=1, **post), tmp_path / "post")
    with pytest.raises(
        C.CheckpointError, match="2-epoch warm-up but --epochs 40 implies 4; pass --warmup 2"
    ):
        T.train(T.TrainConfig(epochs=40, **post), tmp_path / "post", resume=True)
    # and what it names works (it was refused as "trained with warmup=None, not 2"): the same
    # 2-epoch schedule, so the run goes on where it stopped, at the peak rate
    before = len((tmp_path / "post" / "history.csv").read_text().splitlines())
    T.train(T.TrainConfig(epochs=40, warmup=2, patience=3, **post), tmp_path / "post", resume=True)
    after = (tmp_path / "post" / "history.csv").read_text().splitlines()
    assert len(after) > before and after[-1].split(",")[3] == "0.0001"  # the peak rate
    with pytest.raises(C.CheckpointError, match="2-epoch warm-up but --warmup 3 gives 3; pass --w"):
        T.train(T.TrainConfig(epochs=40, warmup=3, **post), tmp_path / "post", resume=True)


def _nan_loss_at(monkeypatch, phase: str, epoch: int) -> None:
    """Make the ``phase`` loss (``training``: computed with gradients; ``validation``: without)
    of epoch ``epoch`` NaN.  Full-batch training computes one loss of each phase per epoch, so
    the n-th loss of a phase is epoch n - 1's, whatever order the phases run in."""
    seen = {"training": 0, "validation": 0}
    real = T.F.cross_entropy

    def flaky(*args, **kwargs):
        loss = real(*args, **kwargs)
        which = "training" if torch.is_grad_enabled() else "validation"
        seen[which] += 1
        return loss * float("nan") if (which, seen[which] - 1) == (phase, epoch) else loss

    monkeypatch.setattr(T.F, "cross_entropy", flaky)


def _assert_diverged_run(run, last_epoch: int) -> None:
    last = torch.load(run / "last.pt", weights_only=True)
    assert last["epoch"] == last_epoch
    assert all(bool(torch.isfinite(v).all()) for v in last["state_dict"].values())
    rows = (run / "history.csv").read_text().splitlines()
    # header, the good rows, the diverged row
    assert len(rows) == last_epoch + 3 and rows[-1].endswith(",diverged")
    assert all(r.endswith(",ok") for r in rows[1:-1])
    # no accuracies for the diverged epoch (NaN logits' arg-max read 12.7%, an audit)
    assert rows[-1].split(",")[4:7] == ["", "", ""], rows[-1]


@pytest.mark.parametrize("what, epoch", [("training", 2), ("validation", 1)])
def test_nan_loss_stops_and_keeps_last_good_checkpoint(tmp_path, monkeypatch, what, epoch):
    _nan_loss_at(monkeypatch, what, epoch)
    with pytest.raises(
        T.TrainingDiverged,
        match=f"the {what} loss became nan at epoch {epoch}; last.pt keeps epoch {epoch - 1}",
    ):
        T.train(T.TrainConfig(epochs=5, **TINY), tmp_path / "run", checkpoint_every=1e6)
    _, meta = C.load_checkpoint(tmp_path / "run" / "best.pt")
    assert meta["epoch"] <= epoch - 1
    _assert_diverged_run(tmp_path / "run", epoch - 1)


def test_non_finite_weights_stop_the_run(tmp_path, monkeypatch):
    real = torch.optim.Adam.step
    calls = {"n": 0}

    def overflowing(self, *args, **kwargs):
        out = real(self, *args, **kwargs)
        calls["n"] += 1
        if calls["n"] == 2:  # epoch 1: finite loss, infinite weights
            self.param_groups[0]["params"][0].data.fill_(float("inf"))
        return out

    monkeypatch.setattr(torch.optim.Adam, "step", overflowing)
    with pytest.raises(
        T.TrainingDiverged, match="the weights became non-finite \\(encoder.1.weight\\) at epoch 1"
    ):
        T.train(T.TrainConfig(epochs=4, **TINY), tmp_path / "run", checkpoint_every=1e6)
    _assert_diverged_run(tmp_path / "run", 0)


def test_checkpoint_missing_a_key_names_file_and_key(tmp_path):
    T.train(T.TrainConfig(epochs=2, **TINY), tmp_path / "run")
    best = torch.load(tmp_path / "run" / "best.pt", weights_only=True)
    del best["model_config"]
    torch.save(best, tmp_path / "nocfg.pt")
    with pytest.raises(
        C.CheckpointError,
        match="nocfg.pt: checkpoint has no 'model_config' entry "
        "\\(expected the model configuration",
    ):
        C.load_checkpoint(tmp_path / "nocfg.pt")
    result = CliRunner().invoke(app, ["analyze", "--checkpoint", str(tmp_path / "nocfg.pt")])
    assert result.exit_code == 2 and "no 'model_config' entry" in result.output, result.output
    last = torch.load(tmp_path / "run" / "last.pt", weights_only=True)
    del last["best_state_dict"]
    torch.save(last, tmp_path / "run" / "last.pt")
    with pytest.raises(
        C.CheckpointError, match="last.pt: checkpoint has no 'best_state_dict' entry"
    ):
        T.train(T.TrainConfig(epochs=3, **TINY), tmp_path / "run", resume=True)


def test_failures_leave_no_folder_and_a_busy_folder_is_refused(tmp_path, monkeypatch):
    runner = CliRunner()
    out = tmp_path / "run"
    for bad in (
        ["--dataset", "nosuch"],
        ["--lr", "0"],
        ["--weight-decay", "nan"],
        ["--split", "kfold"],
        ["--hidden", "7"],
        ["--dropout", "1.5"],
        ["--checkpoint-every", "-1"],
    ):
        args = ["train", "--depth", "2", "--epochs", "1", "--out", str(out), *bad]
        result = runner.invoke(app, args)
        assert result.exit_code == 2, (bad, result.output)
        assert len(result.output.strip().splitlines()) == 1, result.output
        assert not out.exists(), bad
    with monkeypatch.context() as m:  # a crash inside the first epoch
        m.setattr(T.F, "cross_entropy", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("boom")))
        with pytest.raises(RuntimeError, match="boom"):
            T.train(T.TrainConfig(epochs=2, **TINY), out)
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    with held_folder(out) as holder:  # another live run holds it
        result = runner.invoke(app, ["train", "--depth", "2", "--epochs", "1", "--out", str(out)])
        busy = f"{out} is being written by another oversmooth run (pid {holder.pid})"
        assert result.exit_code == 2 and busy in result.output, result.output
    assert not out.exists()


def test_resume_cleans_temporaries_of_dead_processes(tmp_path):
    T.train(T.TrainConfig(epochs=2, **TINY), tmp_path / "run")
    dead = 2**22 + 12345  # above the default pid_max: no such process
    (tmp_path / "run" / f".last.pt.tmp-{dead}").write_bytes(b"half")
    (tmp_path / f".run.tmp-{dead}").mkdir()
    (tmp_path / ".run.lock").write_text(f"{dead}\n")
    T.train(T.TrainConfig(epochs=3, **TINY), tmp_path / "run", resume=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]
    hidden = [p.name for p in (tmp_path / "run").iterdir() if p.name.startswith(".")]
    assert hidden == [MARKER]


def test_checkpoint_mismatch_and_corruption(tmp_path):
    T.train(T.TrainConfig(epochs=2, **FAST), tmp_path / "run")
    best = tmp_path / "run" / "best.pt"
    with pytest.raises(
        C.CheckpointError, match="checkpoint has model='preln' but model='postln' was asked for"
    ):
        C.load_checkpoint(best, expect={"model": "postln"})
    with pytest.raises(
        C.CheckpointError, match="checkpoint has dataset='cora' but dataset='citeseer'"
    ):
        C.load_checkpoint(best, expect={"dataset": "citeseer"})
    with pytest.raises(C.CheckpointError, match="was trained with --depth 4, not --depth 8"):
        T.train(
            T.TrainConfig(epochs=4, model=replace(FAST["model"], depth=8)),
            tmp_path / "run",
            resume=True,
        )
    # weights that do not fit name the entry (torch's first line was all it said: an audit)
    state = torch.load(best, weights_only=True)
    name = next(iter(state["state_dict"]))
    state["state_dict"][name] = torch.zeros(3, 3)
    torch.save(state, tmp_path / "reshaped.pt")
    with pytest.raises(C.CheckpointError, match=f"size mismatch for {re.escape(name)}"):
        C.load_checkpoint(tmp_path / "reshaped.pt")
    # a label changed by hand: Pre-LN and Post-LN have the same weights, and the checkpoint
    # loaded as Post-LN and was measured as it (final energy 0.42 against 25: an audit)
    state = torch.load(best, weights_only=True)
    state["model_config"]["name"] = "postln"
    torch.save(state, tmp_path / "relabelled.pt")
    with pytest.raises(
        C.CheckpointError,
        match="model config says name='postln' but its training record says name='preln'",
    ):
        C.load_checkpoint(tmp_path / "relabelled.pt")
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(best.read_bytes()[:200])
    with pytest.raises(
        C.CheckpointError, match="truncated.pt: not a readable oversmooth checkpoint"
    ):
        C.load_checkpoint(truncated)
    torch.save({"weights": torch.ones(2)}, tmp_path / "other.pt")
    with pytest.raises(C.CheckpointError, match="not an oversmooth checkpoint"):
        C.load_checkpoint(tmp_path / "other.pt")
    with pytest.raises(FileExistsError, match="already exists; pass --resume"):
        T.train(T.TrainConfig(epochs=2, **FAST), tmp_path / "run")
    with pytest.raises(FileNotFoundError, match="last.pt not found"):
        T.train(T.TrainConfig(epochs=2, **FAST), tmp_path / "fresh", resume=True)


def test_early_stopping(tmp_path):
    # a learning rate too small to change anything: validation accuracy never improves after epoch 0
    result = T.train(T.TrainConfig(epochs=50, patience=3, lr=1e-12, **FAST), tmp_path / "run")
    assert result.stopped == "early-stopped" and result.epochs_run == 4 and result.best_epoch == 0


def test_patience_counts_epochs_without_a_higher_validation_accuracy(tmp_path):
    """A tie in accuracy with a lower validation loss replaced best.pt and reset the count: at
    lr 1e-9 the float32 loss drifts in its 7th digit, and a run whose accuracy never rose ran
    13 epochs past --patience 3 (an audit).  The tie still picks the checkpoint."""
    config = T.TrainConfig(
        model=ModelConfig("preln", conv="gcn", depth=3, seed=3), epochs=15, lr=1e-9, patience=3
    )
    result = T.train(config, tmp_path / "run")
    assert result.stopped == "early-stopped" and result.epochs_run == 4


def test_bad_train_config():
    with pytest.raises(ValueError, match="epochs: expected an integer >= 1"):
        T.TrainConfig(epochs=0)
    with pytest.raises(ValueError, match="split: expected one of random, public"):
        T.TrainConfig(split="kfold")
    assert T.TrainConfig(model=ModelConfig("postln", depth=64), epochs=100).warmup_epochs == 10
    assert T.TrainConfig(model=ModelConfig("postln", depth=64)).learning_rate == 1e-4
    assert (
        T.TrainConfig(model=ModelConfig("preln", depth=64)).learning_rate == 1e-3
        and T.TrainConfig(model=ModelConfig("preln", depth=64)).warmup_epochs == 0
    )


def test_cli_train_then_analyze_checkpoint(tmp_path):
    runner = CliRunner()
    out = tmp_path / "run"
    result = runner.invoke(
        app,
        [
            "train",
            "--model",
            "preln",
            "--depth",
            "4",
            "--hidden",
            "16",
            "--heads",
            "2",
            "--epochs",
            "8",
            "--out",
            str(out),
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["epochs_run"] == 8
    result = runner.invoke(
        app,
        [
            "analyze",
            "--checkpoint",
            str(out / "best.pt"),
            "--prune-layers",
            "1,4",
            "--out",
            str(tmp_path / "a"),
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    payload = json.loads(result.output)
    assert "(trained)" in payload["verdict"]
    # the report's title says it too (only the verdict line did: an audit)
    assert (tmp_path / "a" / "report.md").read_text().startswith("# oversmooth analyze: trained ")
    assert [r["layer"] for r in payload["prune"]] == [1, 4] and "accuracy_drop" in payload["prune"][
        0
    ]
    # the terminal's table names the checkpoint's model, not a seed (a review)
    human = ["analyze", "--checkpoint", str(out / "best.pt"), "--prune-layers", "4", "--seeds"]
    result = runner.invoke(app, [*human, "0", "--out", str(tmp_path / "b"), "-q"])
    assert result.exit_code == 0 and "pruning, the checkpoint's model:" in result.output
    result = runner.invoke(app, ["analyze", "--checkpoint", str(out / "best.pt"), "--depth", "8"])
    assert result.exit_code == 2 and "checkpoint has depth=4 but --depth 8" in result.output
    (tmp_path / "bad.pt").write_text("garbage")
    result = runner.invoke(app, ["analyze", "--checkpoint", str(tmp_path / "bad.pt")])
    assert result.exit_code == 2 and "not a readable oversmooth checkpoint" in result.output
    result = runner.invoke(app, ["train", "--depth", "2", "--epochs", "1", "--out", str(out)])
    assert result.exit_code == 2 and "pass --resume" in result.output


def test_overwrite_replaces_the_old_run_only_at_the_first_save(tmp_path, monkeypatch):
    out = tmp_path / "run"
    T.train(T.TrainConfig(epochs=2, **TINY), out)
    (out / "stale.csv").write_text("from the old run")
    with monkeypatch.context() as m:
        m.setattr(T.F, "cross_entropy", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("boom")))
        with pytest.raises(RuntimeError, match="boom"):
            T.train(T.TrainConfig(epochs=1, **TINY), out, overwrite=True)
    saved = lambda: torch.load(out / "last.pt", weights_only=True)["history"]  # noqa: E731
    assert (out / "stale.csv").is_file() and len(saved()) == 2
    T.train(T.TrainConfig(epochs=1, **TINY), out, overwrite=True)
    assert not (out / "stale.csv").exists() and len(saved()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_nan_scores_are_written_as_strict_json(tmp_path, monkeypatch):
    from .test_outputs import strict_json

    monkeypatch.setattr(T, "accuracy", lambda logits, y, mask: float("nan"))
    T.train(T.TrainConfig(**TINY, epochs=2), tmp_path / "run")
    summary = strict_json((tmp_path / "run" / "summary.json").read_text())
    assert summary["test_acc"] is None and summary["val_acc"] is None
    config = strict_json((tmp_path / "run" / "config.json").read_text())
    # the sizes the model was built with (the data's features and classes)
    assert (config["model"]["in_channels"], config["model"]["out_channels"]) == (1433, 7)


def test_probe_records_dynamics_without_changing_training(tmp_path):
    import pandas as pd

    runner = CliRunner()
    common = ["train", "--model", "preln", "--depth", "4", "--hidden", "16", "--heads", "2"]
    common += ["--epochs", "20", "--quiet"]
    probed = runner.invoke(app, [*common, "--probe-every", "5", "--out", str(tmp_path / "p")])
    assert probed.exit_code == 0, probed.output
    bare = runner.invoke(app, [*common, "--probe-every", "0", "--out", str(tmp_path / "b")])
    assert bare.exit_code == 0, bare.output
    # the probe rides on the eval forward: training numbers are bit-identical
    history = (tmp_path / "p" / "history.csv").read_bytes()
    assert history == (tmp_path / "b" / "history.csv").read_bytes()
    assert same_weights(tmp_path / "p" / "last.pt", tmp_path / "b" / "last.pt")
    assert not (tmp_path / "b" / "dynamics.csv").exists()
    dyn = pd.read_csv(tmp_path / "p" / "dynamics.csv")
    assert list(dyn.columns[:3]) == ["epoch", "layer", "laplacian_energy"]
    assert sorted(dyn["epoch"].unique()) == [0, 5, 10, 15]  # 4 recorded epochs
    assert sorted(dyn["layer"].unique()) == [0, 1, 2, 3, 4]  # encoder output + 4 blocks
    assert len(dyn) == 20 and (dyn["laplacian_energy"] > 0).all()
    assert (tmp_path / "p" / "dynamics.png").is_file()
    report = (tmp_path / "p" / "report.md").read_text(encoding="utf-8")
    assert "## Energy dynamics" in report and "dynamics.png" in report
    assert "Energy dynamics" not in (tmp_path / "b" / "report.md").read_text(encoding="utf-8")


def test_probe_rows_are_the_models_eval_energies(tmp_path):
    import pandas as pd

    from oversmooth import Probe

    T.train(T.TrainConfig(epochs=3, probe_every=2, **TINY), tmp_path / "run")
    dyn = pd.read_csv(tmp_path / "run" / "dynamics.csv")
    assert sorted(dyn["epoch"].unique()) == [0, 2]
    model, _ = C.load_checkpoint(tmp_path / "run" / "last.pt")  # the weights after epoch 2
    data = load("cora")
    model.eval()
    with Probe(model, data.edge_index) as probe, torch.no_grad():
        model(data.x, data.edge_index)
    expected = probe.to_frame()["laplacian_energy"].to_numpy()
    got = dyn[dyn["epoch"] == 2]["laplacian_energy"].to_numpy()
    assert got == pytest.approx(expected, rel=1e-8)


def test_probe_every_must_be_a_count():
    with pytest.raises(ValueError, match="probe_every"):
        T.TrainConfig(probe_every=-1)
    assert T.TrainConfig(epochs=500).probe_interval == 10
    assert T.TrainConfig(epochs=20).probe_interval == 1


def test_resume_keeps_the_default_probe_interval_it_started_with(tmp_path):
    import pandas as pd

    def interrupt(done, total, row):
        if done == 3:
            os.kill(os.getpid(), signal.SIGINT)

    first = T.train(  # 100 epochs: the default interval is 2
        T.TrainConfig(epochs=100, **TINY), tmp_path / "run", progress=interrupt
    )
    assert first.stopped == "interrupted" and first.epochs_run == 3
    T.train(T.TrainConfig(epochs=6, **TINY), tmp_path / "run", resume=True)  # default now 1
    dyn = pd.read_csv(tmp_path / "run" / "dynamics.csv")
    assert sorted(dyn["epoch"].unique()) == [0, 2, 4]
    assert not dyn.duplicated(["epoch", "layer"]).any()
    # config.json says the interval the run kept (it wrote the new --epochs' default, 1), named,
    # so that the report's settings and Reproduce line give the same dynamics.csv
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["probe_interval"] == 2 and config["probe_every"] == 2


def test_a_finished_run_resumed_and_stopped_again_keeps_no_stale_report(tmp_path):
    """The first end's report.md/report.html (epoch, accuracies) stayed beside the newer
    best.pt of a resumed run that was stopped again, and the CLI linked them."""
    from oversmooth.report.writers import write_training_report

    T.train(T.TrainConfig(epochs=2, **TINY), tmp_path / "run", report=write_training_report)
    assert (tmp_path / "run" / "report.md").is_file()

    def interrupt(done, total, row):
        if done == 3:
            os.kill(os.getpid(), signal.SIGINT)

    again = T.train(
        T.TrainConfig(epochs=6, **TINY), tmp_path / "run", resume=True, progress=interrupt
    )
    assert again.stopped == "interrupted"
    for name in T.FINISHED_FILES:
        assert not (tmp_path / "run" / name).exists(), name


def test_batched_dataset_with_graph_mode_norm_is_refused(tmp_path):
    from oversmooth.train import TrainConfig, train

    config = TrainConfig(
        model=ModelConfig("postln", depth=2, norm="graph"),
        epochs=1,
        dataset="csbm-batch:graphs=2,n=30",
    )
    with pytest.raises(ValueError, match="is a batch of graphs"):
        train(config, tmp_path / "run")


def test_a_run_whose_report_fails_is_not_marked_finished(tmp_path):
    # a full disk while the report was written left summary.json saying "finished"
    import errno

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OSError, match="No space left"):
        T.train(T.TrainConfig(epochs=2, **TINY), tmp_path / "run", report=full)
    assert (tmp_path / "run" / "last.pt").is_file()  # resumable
    assert not (tmp_path / "run" / "summary.json").exists()


def test_history_lr_is_the_rate_each_epoch_trained_at(tmp_path):
    """The lr column held the next epoch's rate (written after the scheduler's step): a 3-epoch
    warm-up to 1e-4 read 6.7e-5, 1e-4, 1e-4 where Adam stepped at 3.3e-5, 6.7e-5, 1e-4."""
    config = T.TrainConfig(
        model=ModelConfig("postln", depth=1, hidden=8, heads=2), epochs=4, warmup=3
    )
    result = T.train(config, tmp_path / "run")
    peak = config.learning_rate
    want = [peak * min(1.0, (e + 1) / 3) for e in range(4)]
    assert [r["lr"] for r in result.history] == pytest.approx(want, rel=1e-12)
    import pandas as pd

    written = pd.read_csv(tmp_path / "run" / "history.csv")["lr"].tolist()
    assert written == pytest.approx(want, rel=1e-5)


def test_a_one_epoch_runs_report_says_one_epoch(tmp_path):
    """The report said "finished after 1 epochs" and "1 recorded epochs x 3 layers" (an audit)."""
    from oversmooth.report.writers import write_training_report

    T.train(T.TrainConfig(epochs=1, **TINY), tmp_path / "run", report=write_training_report)
    text = (tmp_path / "run" / "report.md").read_text(encoding="utf-8")
    assert "finished after 1 epoch;" in text and "1 recorded epoch x 3 layers;" in text


def test_oversmooth_report_refuses_a_training_run_changed_since_it_finished(tmp_path):
    """config.json records the SHA-256 of history.csv, dynamics.csv and summary.json once the
    run has finished: a test accuracy edited into summary.json and history.csv was shown as the
    run's (exit 0; an audit)."""
    from oversmooth.report.writers import write_training_report

    out = tmp_path / "run"
    T.train(T.TrainConfig(epochs=2, **TINY), out, report=write_training_report)
    digests = json.loads((out / "config.json").read_text())["digests"]
    assert sorted(digests) == ["dynamics.csv", "history.csv", "summary.json"]
    result = CliRunner().invoke(app, ["report", str(out)])
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    summary["test_acc"] = 0.99
    (out / "summary.json").write_text(json.dumps(summary))
    result = CliRunner().invoke(app, ["report", str(out)])
    assert result.exit_code == 2, result.output
    assert "summary.json: not the file the run wrote" in " ".join(result.output.split())


def test_a_resumed_runs_report_says_its_time_is_since_the_resume(tmp_path):
    """A resumed run's report gave "time: training" for the resumed part only (5.56 s against
    16.37 s uninterrupted, an audit): it says what it timed."""
    from oversmooth.report.writers import write_training_report

    T.train(T.TrainConfig(epochs=2, **TINY), tmp_path / "run", report=write_training_report)
    text = (tmp_path / "run" / "report.md").read_text(encoding="utf-8")
    assert "| time: training |" in text and "since resumed" not in text
    T.train(
        T.TrainConfig(epochs=3, **TINY),
        tmp_path / "run",
        resume=True,
        report=write_training_report,
    )
    text = (tmp_path / "run" / "report.md").read_text(encoding="utf-8")
    assert "| time: training since resumed |" in text and "| time: training |" not in text


def test_a_checkpoint_missing_weights_is_counted(tmp_path):
    """torch's list of every key, cut at 200 characters, ended in '", )' (an audit): the
    weights missing and unexpected are counted, with the first of each."""
    T.train(T.TrainConfig(epochs=1, **TINY), tmp_path / "run")
    best = tmp_path / "run" / "best.pt"
    obj = torch.load(best, weights_only=True)
    dropped = [k for k in obj["state_dict"] if k.startswith("blocks.1.")]
    for k in dropped:
        del obj["state_dict"][k]
    obj["state_dict"]["extra.weight"] = torch.zeros(1)
    torch.save(obj, best)
    with pytest.raises(
        C.CheckpointError,
        match=rf"\({len(dropped)} missing weights, the first blocks\.1\.[a-z0-9_.]+; "
        r"1 unexpected weight, the first extra\.weight\)",
    ):
        C.load_checkpoint(best)
