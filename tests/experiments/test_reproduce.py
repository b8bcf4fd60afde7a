"""Reproduction report pieces (the whole report runs with `oversmooth reproduce`, minutes long)."""

from __future__ import annotations

import math
import re

import pandas as pd
from typer.testing import CliRunner

from oversmooth.cli.main import app
from oversmooth.experiments.reproduce import (
    DEPTHS,
    _table8_sentences,
    dataset_available,
    energy_table,
    paper_tables,
)
from oversmooth.config import ModelConfig


def test_paper_tables_are_complete_and_cited():
    tables = paper_tables()
    assert "arXiv:2512.08475" in tables["source"]
    for model in ("preln", "postln", "nonlocal"):
        for dataset in ("cora", "citeseer", "pubmed", "physics", "cs"):
            assert len(tables["final_energy_at_init"][model][dataset]) == 5
    assert tables["final_energy_at_init"]["postln"]["cora"][-1] == 1.32e-12
    assert tables["pruning_cora"]["layers"] == [2, 32, 64, 96, 128, 160, 192, 224]


def test_energy_table_ratios():
    rows = [
        {"model": m, "dataset": "cora", "depth": d, "seed": s, "final_energy": 2.0 * (s + 1)}
        for m in ("preln", "postln", "nonlocal")
        for d in DEPTHS
        for s in (0, 1)
    ]
    table = energy_table(pd.DataFrame(rows), paper_tables(), ["cora"])
    row = table[(table["model"] == "postln") & (table["depth"] == 2)].iloc[0]
    assert row["ours_mean"] == 3.0 and math.isclose(row["ours_std"], math.sqrt(2.0))
    assert math.isclose(row["ratio"], 3.0 / 0.558)


def test_optional_datasets_need_local_files(tmp_path, monkeypatch):
    monkeypatch.setenv("OVERSMOOTH_DATA", str(tmp_path / "default"))
    assert dataset_available("cora", None) and not dataset_available("pubmed", None)
    assert not dataset_available("pubmed", str(tmp_path))
    for root in (tmp_path, tmp_path / "default"):
        raw = root / "PubMed" / "raw"
        raw.mkdir(parents=True)
        for suffix in ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index"):
            (raw / f"ind.pubmed.{suffix}").write_bytes(b"")
    assert dataset_available("pubmed", str(tmp_path))
    # without --data-root, the default folder (as --help says; its files were skipped)
    assert dataset_available("pubmed", None)


def test_cli_refuses_to_overwrite_before_any_work(tmp_path):
    out = tmp_path / "existing"
    out.mkdir()
    result = CliRunner().invoke(app, ["reproduce", "--out", str(out)])
    assert result.exit_code == 2 and "already exists; pass --overwrite" in result.output


def test_whole_pipeline_on_a_tiny_grid(tmp_path, monkeypatch):
    """The full command takes minutes; the same code on depths (2, 4), one seed and two epochs."""
    import oversmooth.experiments.reproduce as R

    from oversmooth.train import TrainConfig, train

    import oversmooth.experiments.ablation as A

    monkeypatch.setattr(R, "DEPTHS", (2, 4))
    monkeypatch.setattr(A, "DEPTHS", (2, 32))
    monkeypatch.setattr(
        A,
        "ABLATIONS",
        (A.BASELINE, *(a for a in A.ABLATIONS if a.name in ("no-ffn", "energy-degree"))),
    )
    run = tmp_path / "run8"
    train(TrainConfig(model=ModelConfig("preln", depth=8), epochs=2, device="cpu"), run)
    config = R.ReproduceConfig(
        quick=True,
        seeds=(0,),
        datasets=("cora",),
        train_depth=2,
        train_epochs=2,
        trained=(str(run),),
    )
    calls = []
    out = R.run_reproduction(config, tmp_path / "repro", progress=lambda *call: calls.append(call))
    total = R.stage_count(config)  # every stage announced once, counted from 0
    assert [(done, t) for done, t, _ in calls] == [(k, total) for k in range(total)]
    assert calls[-1][2] == "writing the report"
    text = (out / "report.md").read_text()
    for piece in ("Tables 2, 4, 6", "Figure 1", "Table 8", "Discussion", "arXiv:2512.08475"):
        assert piece in text
    assert "3b. Table 8 from longer training runs" in text and "preln SAN, depth 8" in text
    assert "4. Ablations" in text and "5. Discussion" in text and "the paper's Table 4:" in text
    summary = pd.read_csv(out / "ablation_summary.csv")
    assert set(summary["ablation"]) == {"baseline", "no-ffn", "energy-degree"}
    table8 = pd.read_csv(out / "table8_preln-8.csv")
    assert table8["layer"].tolist() == R.table8_layers(8) == [1, 2, 3, 4, 5, 6, 7]
    table = pd.read_csv(out / "energy_vs_paper.csv")
    row = table[(table["model"] == "postln") & (table["depth"] == 2)].iloc[0]
    assert (
        row["paper"] == 0.558 and table[table["depth"] == 4]["paper"].isna().all()
    )  # the paper has no depth 4
    for name in (
        "figure1_san.png",
        "figure2_similarity.png",
        "table8_pruning.png",
        "report.html",
        "pruning_preln.csv",
        "table8_trained.png",
    ):
        assert (out / name).is_file(), name
    assert not list((out / "training").rglob("*.pt"))  # checkpoints are not kept
    for arch in ("preln", "nonlocal"):  # history, curve, summary and report stay
        for name in ("history.csv", "training.png", "summary.json", "report.md"):
            assert (out / "training" / arch / name).is_file(), (arch, name)


def test_plain_sentence_states_only_what_the_verdicts_give():
    from oversmooth.experiments.reproduce import plain_halving_sentence

    rows = [
        {"conv": "san", "model": "plain", "halving": 0.87},
        {"conv": "san", "model": "postln", "halving": 13.5},
        {"conv": "gcn", "model": "plain", "halving": None},
    ]
    assert plain_halving_sentence(rows) == (
        " Its energy halves every 0.87 (SAN) layers: faster than any "
        "other model with an exponential verdict."
    )
    rows[0]["halving"] = 20.0  # slower than Post-LN: no claim that it is the fastest
    assert plain_halving_sentence(rows) == " Its energy halves every 20 (SAN) layers."
    assert (
        plain_halving_sentence(rows[1:]) == ""
    )  # no exponential verdict for plain: nothing claimed


def test_reproduce_section_command_parses_back_to_the_same_config(tmp_path, monkeypatch):
    """The report's Reproduce command, given to the CLI, builds the configuration it records."""
    import shlex

    import oversmooth.experiments.reproduce as R

    seen = {}

    def capture(config, out, **kwargs):
        seen["config"] = config
        raise KeyboardInterrupt  # stop before any work

    monkeypatch.setattr(R, "run_reproduction", capture)
    for config in (
        R.ReproduceConfig.preset(True),
        R.ReproduceConfig.preset(False, device="cpu", dtype="float32"),
        R.ReproduceConfig.preset(True, trained=("runs/a b", "runs/c"), ablations=False),
    ):
        args = shlex.split(R.command_line(config))
        assert args[:2] == ["oversmooth", "reproduce"]
        CliRunner().invoke(app, [*args[1:], "--quiet", "--out", str(tmp_path / "r")])
        assert seen.pop("config") == config


def test_table8_positions_and_bad_trained_runs(tmp_path):
    import pytest

    from oversmooth.experiments.reproduce import ReproduceConfig, run_reproduction, table8_layers

    assert table8_layers(256) == [2, 32, 64, 96, 128, 160, 192, 224]  # the paper's
    assert table8_layers(64) == [2, 8, 16, 24, 32, 40, 48, 56]
    with pytest.raises(ValueError, match="run: no such folder; pass an `oversmooth train` run"):
        run_reproduction(ReproduceConfig(trained=(str(tmp_path / "run"),)), tmp_path / "out")
    (tmp_path / "run").mkdir()
    with pytest.raises(ValueError, match="it lacks best.pt, config.json, summary.json"):
        run_reproduction(ReproduceConfig(trained=(str(tmp_path / "run"),)), tmp_path / "out")
    assert not (tmp_path / "out").exists()  # refused before any work
    result = CliRunner().invoke(
        app, ["reproduce", "--trained", str(tmp_path / "run"), "--out", str(tmp_path / "o2")]
    )
    assert result.exit_code != 0 and "expected an `oversmooth train` run folder" in result.output


def test_a_damaged_trained_run_is_refused_before_any_work(tmp_path):
    """Each file of a --trained run is read before the reproduction starts, and a fault is one
    line naming the file: not a TypeError, not a bare JSON message, not a damaged best.pt found
    after minutes of work."""
    import shutil

    import pytest

    from oversmooth import train as T
    from oversmooth.config import ModelConfig
    from oversmooth.experiments.reproduce import ReproduceConfig, run_reproduction

    good = tmp_path / "run"
    T.train(T.TrainConfig(model=ModelConfig("preln", depth=8, hidden=8, heads=2), epochs=1), good)
    damages = [
        ("config.json", b"[1]", "config.json holds a JSON list"),
        ("config.json", b"{bad", "config.json is not valid JSON (line 1, column 2"),
        ("summary.json", b"\xff", "summary.json is not UTF-8 text"),
        ("best.pt", b"not a checkpoint", "best.pt"),
    ]
    for i, (name, data, said) in enumerate(damages):
        run = tmp_path / f"damaged{i}"
        shutil.copytree(good, run)
        (run / name).write_bytes(data)
        with pytest.raises(ValueError, match=re.escape(said)):
            run_reproduction(ReproduceConfig(trained=(str(run),)), tmp_path / "out")
        assert not (tmp_path / "out").exists()  # refused before any work
    with pytest.raises(ValueError, match="a file; pass the `oversmooth train` run folder"):
        run_reproduction(ReproduceConfig(trained=(str(good / "best.pt"),)), tmp_path / "out")


def test_table8_contrast_is_read_per_position_from_paired_intervals():
    """The report said Pre-LN blocks "can be removed at no cost" from a mean near 0 that a
    loss and a gain at two positions cancelled (an audit: drops 4.0 and -4.0 read "no cost"),
    and "every nonlocal block costs at least 0.7" of drops whose paired intervals spanned -1
    to +2 points (another): a cost is one whose 95% paired interval lies above 0."""
    import numpy as np

    def said(pre, nl, pre_low, nl_low):
        runs = _table8_runs("preln", "nonlocal", depth=256, lows=[pre_low, nl_low])
        drops = {"Pre-LN": np.array([22.7, *pre]), "nonlocal": np.array([44.0, *nl])}
        return _table8_sentences(runs, drops)[2]

    none, all_ = [-0.01] * 7, [0.005] * 7
    cancelled = said([4.0, -4.0, 0, 0, 0, 0, 0], [7.0] * 7, [0.01, -0.07, *[-0.01] * 5], all_)
    assert cancelled.startswith("In part the contrast") and "1 of 7 Pre-LN" in cancelled
    clean = said([0.2, 0.0, -0.1, 0, 0, 0, 0], [3.0, 2.0, 5.0, 2.5, 4.0, 1.0, 6.0], none, all_)
    assert clean.startswith("So, as in the paper, no Pre-LN block") and "at least 1.0" in clean
    noisy = said([0.0] * 7, [0.7, 0.9, 0.2, 0.5, 0.7, 0.9, 0.7], none, none)
    assert "does not appear" in noisy and "0 of 7 nonlocal" in noisy
    assert "does not appear" in said([3.0] * 7, [3.0] * 7, all_, all_)
    runs = _table8_runs("preln", "nonlocal", depth=256)  # tables without the node counts
    drops = {"Pre-LN": np.array([22.7, *[0.0] * 7]), "nonlocal": np.array([44.0, *[3.0] * 7])}
    assert "is not judged" in _table8_sentences(runs, drops)[2]


def _table8_runs(*names, depth, accuracy=0.85, majority=0.3, summary=None, lows=None):
    """``--trained`` items as _table8_sentences reads them: a pruning frame at the Table 8
    positions of ``depth`` with its baseline, per architecture name; with ``lows`` (per name,
    the late positions' lower interval ends) the paired intervals' columns too."""
    import pandas as pd

    from oversmooth.experiments.reproduce import table8_layers

    items = []
    for i, name in enumerate(names):
        layers = table8_layers(depth)
        prune = pd.DataFrame(
            {
                "layer": layers,
                "accuracy": accuracy,
                "unpruned_accuracy": accuracy,
                "majority_accuracy": majority,
            }
        )
        if lows is not None:
            prune["drop_low"] = [0.2, *lows[i]]
            prune["nodes"] = 541
        prune.attrs["baseline"] = {"accuracy": accuracy}
        items.append(
            {"config": {"model": {"name": name}}, "summary": summary or {}, "prune": prune}
        )
    return items


def test_table8_sentences_name_the_positions_pruned_and_leave_out_a_model_at_chance():
    """A depth-8 run's early position is layer 1, beside six others (the sentence said "layer
    2" and "the other seven"); a run at chance (one class predicted: drops of 0 everywhere)
    is said to be at chance and left out of the contrast, which it read as "does not appear";
    a run whose best epoch was the last of 3 is under-trained (best_epoch counts from 0: the
    check 2 >= 0.9 x 3 missed it).  All from an audit."""
    import numpy as np

    drops = {"Pre-LN": np.array([46.2, 4.6, 2.0, 3.1, 1.5, 0.2, -0.2])}
    (sentence,) = _table8_sentences(_table8_runs("preln", depth=8), drops)
    assert sentence.startswith("Pre-LN: pruning layer 1 costs 46.2 points; the other 6 positions")
    assert "(layers 2-7)" in sentence
    runs = _table8_runs("preln", depth=16) + _table8_runs(
        "nonlocal",
        depth=16,
        accuracy=0.2884,
        majority=0.302,
        summary={"best_epoch": 2, "epochs_run": 3},
    )
    drops = {"Pre-LN": np.array([20.0, *[12.0] * 6]), "nonlocal": np.zeros(7)}
    text = " ".join(_table8_sentences(runs, drops))
    assert "nonlocal: its unpruned test accuracy 28.8% is 1.4 points below predicting" in text
    assert "predicts at chance" in text and "Table 8" not in text  # no contrast drawn
    assert "still improving when it stopped (best validation epoch 2 of 0-2)" in text


def test_a_pruning_table_says_its_baseline_and_when_the_model_is_at_chance():
    """prune.csv carries the unpruned accuracy and the most frequent class's share beside
    every drop, and the report and terminal say whether the model is above chance."""
    import torch

    from oversmooth import build_model, prune_sensitivity
    from oversmooth.data import load
    from oversmooth.report.prose import pruning_baseline

    data = load("cora")
    model = build_model("preln", depth=4, in_channels=data.num_features, out_channels=7)
    with torch.no_grad():  # a model that predicts class 3 everywhere
        model.decoder.weight.zero_()
        model.decoder.bias.copy_(torch.arange(7.0) == 3)
    frame = prune_sensitivity(model, data, layers=[1, 2], mask="test_mask")
    test_y = data.y[data.test_mask]
    majority = float(torch.bincount(test_y).max()) / len(test_y)
    assert frame["majority_accuracy"].tolist() == [majority] * 2
    assert frame["unpruned_accuracy"].tolist() == [float((test_y == 3).double().mean())] * 2
    assert frame["accuracy_drop"].tolist() == [0.0, 0.0]
    text = pruning_baseline(frame)
    assert text is not None and "within 5 points of that, the model does no better than" in text
    # far below the majority's share: not "within 5 points" of it (an audit: 28.57% vs 71.43%)
    frame["unpruned_accuracy"] = majority - 0.2
    text = pruning_baseline(frame)
    assert text is not None and "20.00 points below that, the model does no better" in text
    frame["unpruned_accuracy"] = majority + 0.2
    text = pruning_baseline(frame)
    assert text is not None and "chance" not in text and f"{100 * majority:.2f}%" in text
    assert pruning_baseline(frame.drop(columns=["majority_accuracy"])) is None


def test_the_majority_share_skips_unlabelled_nodes_and_a_chance_model_is_said_in_section_3():
    """A label of -1 (an unlabelled node) crashed the pruning table (bincount); and the trained
    paragraph of section 3 read a model at chance as 'the deep layers ... can be dropped almost
    for free' (a review)."""
    import torch

    from oversmooth.experiments.reproduce import _at_chance_text
    from oversmooth.prune import _majority

    y = torch.tensor([-1, -1, 0, 1, 1, 2])
    mask = torch.ones(6, dtype=torch.bool)
    assert float(_majority(y, mask)) == 2 / 6  # class 1, out of every measured node
    assert torch.isnan(_majority(y, torch.zeros(6, dtype=torch.bool)))

    class Run:
        def __init__(self, base):
            self.prune = pd.DataFrame(
                {"layer": [9], "unpruned_accuracy": [base], "majority_accuracy": [0.302]}
            )

    text = _at_chance_text({"preln": {"analysis": Run(0.85)}, "nonlocal": {"analysis": Run(0.30)}})
    assert text.startswith("The nonlocal Post-LN model predicts at chance (test accuracy 30.0%")
    assert "Pre-LN" not in text
    assert _at_chance_text({"preln": {"analysis": Run(0.85)}}) == ""


def test_the_verdict_rows_say_what_each_verdict_decided():
    """Every backbone row read 'inconclusive' (the law's label) where the verdicts named
    oversmoothing, a norm collapse or the curse of depth, and the discussion said 'classified
    inconclusive with all 3 backbones' of a stack its verdicts called a norm collapse; Pre-LN's
    growth pointed at verdicts that did not say what grew, and nothing said that no law of
    Figure 1 was named (an audit)."""
    import oversmooth.experiments.reproduce as R

    def record(label, collapse=None, curse=None, norm=None, free=None):
        ev = {"norm_decades": norm, "scale_free_decades": free, "window": [3, 256]}
        found = {"label": label, "collapse": collapse, "curse_of_depth": curse, "evidence": ev}
        return {"classification": label, "evidence": found}

    assert R.decided(record("inconclusive", "oversmoothing")) == (
        "law inconclusive · oversmoothing"
    )
    assert R.decided(record("inconclusive", curse=True)) == "law inconclusive · curse of depth"
    assert R.decided(record("inconclusive")) == "inconclusive"
    rows = []
    for conv in ("san", "gcn", "gat"):
        for model, fit in (
            ("preln", record("inconclusive", norm=2.43, free=-1.67)),
            ("postln", record("inconclusive", "oversmoothing")),
            ("nonlocal", record("inconclusive")),
            ("plain", record("inconclusive", "norm-collapse")),
        ):
            rows.append(
                {
                    "conv": conv,
                    "model": model,
                    "classification": fit["classification"],
                    "verdict (what was decided)": R.decided(fit),
                    "halving": None,
                    **R._decades_split(fit),
                }
            )
    beyond = R._beyond_paragraph(rows)
    assert "Post-LN law inconclusive · oversmoothing with both" in beyond
    assert "reads law inconclusive · norm collapse with all 3 backbones: its energy falls" in beyond
    config = R.ReproduceConfig.preset(True)
    assert "neither confirmed nor contradicted" in R._laws_sentence(rows, config)
    stable = [{**rows[0], "classification": "stable"}, *rows[1:]]  # a verdict, no law
    assert "neither confirmed nor contradicted" in R._laws_sentence(stable, config)
    split = R._growth_split(rows)
    assert "+2.4 decades over layers 3-256" in split and "-1.7" in split
    assert "node directions converge" in split


def test_section_3_shows_accuracies_and_drops_with_two_decimals():
    """4 significant digits gave '86.9' beside '94.83' and drops of '-0.5545' (an audit)."""
    import oversmooth.experiments.reproduce as R

    frame = pd.DataFrame({"model": ["preln"], "val %": [86.9], "drop (points)": [-0.55452]})
    shown = R._points(frame)
    assert shown.iloc[0].tolist() == ["preln", "86.90", "-0.55"]
    assert frame["val %"][0] == 86.9  # the numbers themselves are left alone
