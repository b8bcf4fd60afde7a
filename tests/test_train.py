"""Training, checkpoints, resume, interruption, divergence and trained-model analysis."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

import oversmooth.train as T
from oversmooth import build_model
from oversmooth.cli.main import app
from oversmooth.data import load

FAST = dict(model="preln", depth=4, hidden=16, heads=2)


def test_short_training_beats_chance(tmp_path):
    result = T.train(T.TrainConfig(model="preln", depth=4, epochs=25), tmp_path / "run")
    assert result.stopped == "finished" and result.epochs_run == 25
    # 7 classes: chance is 1/7 and the majority class ~30%
    assert result.best["val_acc"] > 0.6 and result.best["test_acc"] > 0.6
    for name in ("best.pt", "last.pt", "history.csv", "training.png", "config.json", "summary.json"):
        assert (tmp_path / "run" / name).is_file(), name
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["best_epoch"] == result.best_epoch
    model, meta = T.load_checkpoint(tmp_path / "run" / "best.pt")
    assert meta["epoch"] == result.best_epoch and meta["dataset"] == "cora"


def test_checkpoint_reloads_to_identical_outputs(tmp_path):
    data = load("cora")
    model = build_model("nonlocal", conv="gat", depth=3, in_channels=data.num_features, out_channels=7, seed=5)
    T.save_checkpoint(tmp_path / "m.pt", model, {"dataset": "cora"})
    loaded, meta = T.load_checkpoint(tmp_path / "m.pt")
    with torch.no_grad():
        assert torch.equal(model(data.x, data.edge_index), loaded(data.x, data.edge_index))
    assert loaded.config == model.config


def test_resume_continues_exactly(tmp_path):
    straight = T.train(T.TrainConfig(epochs=6, **FAST), tmp_path / "straight")
    T.train(T.TrainConfig(epochs=3, **FAST), tmp_path / "split")
    resumed = T.train(T.TrainConfig(epochs=6, **FAST), tmp_path / "split", resume=True)
    assert [r["epoch"] for r in resumed.history] == list(range(6))
    for a, b in zip(straight.history, resumed.history):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5)
        assert a["val_acc"] == b["val_acc"]


def test_ctrl_c_saves_and_resume_picks_up(tmp_path):
    def interrupt(done, total, row):
        if done == 2:
            raise KeyboardInterrupt

    result = T.train(T.TrainConfig(epochs=5, **FAST), tmp_path / "run", progress=interrupt)
    assert result.stopped == "interrupted" and result.epochs_run == 2
    assert (tmp_path / "run" / "best.pt").is_file() and (tmp_path / "run" / "last.pt").is_file()
    resumed = T.train(T.TrainConfig(epochs=5, **FAST), tmp_path / "run", resume=True)
    assert [r["epoch"] for r in resumed.history] == [0, 1, 2, 3, 4]


def test_nan_loss_stops_and_keeps_last_good_checkpoint(tmp_path, monkeypatch):
    calls = {"n": 0}
    real = T.F.cross_entropy

    def flaky(*args, **kwargs):
        calls["n"] += 1
        loss = real(*args, **kwargs)
        return loss * float("nan") if calls["n"] == 5 else loss  # the training loss of epoch 2

    monkeypatch.setattr(T.F, "cross_entropy", flaky)
    with pytest.raises(T.TrainingDiverged, match="the loss became nan at epoch 2; best checkpoint \\(epoch 1\\)"):
        T.train(T.TrainConfig(epochs=5, **FAST), tmp_path / "run")
    _, meta = T.load_checkpoint(tmp_path / "run" / "best.pt")
    assert meta["epoch"] <= 1


def test_checkpoint_mismatch_and_corruption(tmp_path):
    T.train(T.TrainConfig(epochs=2, **FAST), tmp_path / "run")
    best = tmp_path / "run" / "best.pt"
    with pytest.raises(T.CheckpointError, match="checkpoint has model='preln' but model='postln' was asked for"):
        T.load_checkpoint(best, expect={"model": "postln"})
    with pytest.raises(T.CheckpointError, match="checkpoint has dataset='cora' but dataset='citeseer'"):
        T.load_checkpoint(best, expect={"dataset": "citeseer"})
    with pytest.raises(T.CheckpointError, match="was trained with depth=4, not 8"):
        T.train(T.TrainConfig(epochs=4, **{**FAST, "depth": 8}), tmp_path / "run", resume=True)
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(best.read_bytes()[:200])
    with pytest.raises(T.CheckpointError, match="truncated.pt: not a readable oversmooth checkpoint"):
        T.load_checkpoint(truncated)
    torch.save({"weights": torch.ones(2)}, tmp_path / "other.pt")
    with pytest.raises(T.CheckpointError, match="not an oversmooth checkpoint"):
        T.load_checkpoint(tmp_path / "other.pt")
    with pytest.raises(FileExistsError, match="already exists; pass --resume"):
        T.train(T.TrainConfig(epochs=2, **FAST), tmp_path / "run")
    with pytest.raises(FileNotFoundError, match="last.pt not found"):
        T.train(T.TrainConfig(epochs=2, **FAST), tmp_path / "fresh", resume=True)


def test_early_stopping(tmp_path):
    # a learning rate too small to change anything: validation accuracy never improves after epoch 0
    result = T.train(T.TrainConfig(epochs=50, patience=3, lr=1e-12, **FAST), tmp_path / "run")
    assert result.stopped == "early-stopped" and result.epochs_run == 4 and result.best_epoch == 0


def test_bad_train_config():
    with pytest.raises(ValueError, match="epochs: expected an integer >= 1"):
        T.TrainConfig(epochs=0)
    with pytest.raises(ValueError, match="split: expected one of random, public"):
        T.TrainConfig(split="kfold")
    assert T.TrainConfig(model="postln", epochs=100).warmup_epochs == 10
    assert T.TrainConfig(model="postln").learning_rate == 1e-4
    assert T.TrainConfig(model="preln").learning_rate == 1e-3 and T.TrainConfig(model="preln").warmup_epochs == 0


def test_cli_train_then_analyze_checkpoint(tmp_path):
    runner = CliRunner()
    out = tmp_path / "run"
    result = runner.invoke(app, ["train", "--model", "preln", "--depth", "4", "--hidden", "16", "--heads", "2",
                                 "--epochs", "8", "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["epochs_run"] == 8
    result = runner.invoke(app, ["analyze", "--checkpoint", str(out / "best.pt"), "--prune", "1,4", "--out", str(tmp_path / "a"), "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.output)
    assert "(trained)" in payload["verdict"]
    assert [r["layer"] for r in payload["prune"]] == [1, 4] and "accuracy_drop" in payload["prune"][0]
    result = runner.invoke(app, ["analyze", "--checkpoint", str(out / "best.pt"), "--depth", "8"])
    assert result.exit_code == 2 and "checkpoint has depth=4 but --depth 8" in result.output
    (tmp_path / "bad.pt").write_text("garbage")
    result = runner.invoke(app, ["analyze", "--checkpoint", str(tmp_path / "bad.pt")])
    assert result.exit_code == 2 and "not a readable oversmooth checkpoint" in result.output
    result = runner.invoke(app, ["train", "--depth", "2", "--epochs", "1", "--out", str(out)])
    assert result.exit_code == 2 and "pass --resume" in result.output
