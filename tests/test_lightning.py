"""oversmooth.lightning: the EnergyMonitor callback, and Lightning staying an optional extra."""

from __future__ import annotations

import copy
import random
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch

from oversmooth import Probe

# -- without Lightning: these run whether it is installed or not ---------------------------------


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"},
    )


def test_import_oversmooth_does_not_import_lightning():
    done = _run(
        "import sys, oversmooth\n"
        "from oversmooth import *  # noqa: F403\n"
        "import oversmooth.tracking\n"
        "print(sorted(m for m in ('lightning', 'pytorch_lightning') if m in sys.modules))\n"
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"


def test_without_lightning_the_import_error_says_what_to_install():
    done = _run(
        "import sys\n"
        "for name in ('lightning', 'lightning.pytorch', 'pytorch_lightning'):\n"
        "    sys.modules[name] = None  # as if not installed\n"
        "try:\n"
        "    import oversmooth.lightning\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert 'pip install "oversmooth[lightning]"' in done.stdout


# -- with Lightning -----------------------------------------------------------------------------

# Lightning's own notes (no GPU, few dataloader workers, its pytree use under newer torch)
QUIET = pytest.mark.filterwarnings("ignore::UserWarning", "ignore:.*LeafSpec")


@pytest.fixture(scope="module")
def pl():
    return pytest.importorskip("lightning.pytorch")


@pytest.fixture(scope="module")
def cora():
    from oversmooth.data import load

    data = load("cora")
    data.x = data.x.double()  # float64: the logged values must equal a Probe's to 1e-12
    return data


def _net(pl, data, dropout: float = 0.0, norm: str | None = None):
    from torch_geometric.nn.models import GCN

    class Net(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.gnn = GCN(data.num_features, 8, 3, 7, dropout=dropout, norm=norm)

        def forward(self, x, edge_index):
            return self.gnn(x, edge_index)

        def training_step(self, batch, index):
            out = self(batch.x, batch.edge_index)
            mask = batch.train_mask
            return torch.nn.functional.cross_entropy(out[mask], batch.y[mask])

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=0.05)

    return Net().double()


def _fit(pl, net, data, callbacks, logger=False, epochs: int = 3) -> None:
    loader = torch.utils.data.DataLoader([data], batch_size=None, collate_fn=lambda b: b)
    trainer = pl.Trainer(
        max_epochs=epochs,
        logger=logger,
        callbacks=callbacks,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        log_every_n_steps=1,
        accelerator="cpu",
    )
    trainer.fit(net, loader)


METRICS = ["laplacian_energy", "feature_norm"]


def _probed(net, data, metrics=METRICS):
    """The independent reading: a Probe of ``net.gnn`` in eval mode, modes restored."""
    modes = [(m, m.training) for m in net.modules()]
    net.eval()
    with Probe(net.gnn, data, metrics) as probe, torch.no_grad():
        net(data.x, data.edge_index)
    for m, mode in modes:
        m.training = mode
    return probe.to_frame()


def _same_values(frame, expected, metrics=METRICS) -> None:
    for m in metrics:
        assert frame[m].tolist() == pytest.approx(expected[m].tolist(), rel=1e-12, abs=0), m


@pytest.fixture
def deterministic():
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)  # the scatter-add backward, on several threads
    yield
    torch.use_deterministic_algorithms(before)


@QUIET
def test_csv_logger_gets_the_probe_values_of_each_epoch(pl, cora, tmp_path):
    import pandas as pd
    from lightning.pytorch.loggers import CSVLogger

    from oversmooth.lightning import EnergyMonitor

    class Snapshot(pl.Callback):  # the weights each logged row was measured on
        def __init__(self) -> None:
            self.states: dict[int, dict] = {}

        def on_fit_start(self, trainer, module) -> None:
            self.states[trainer.global_step] = copy.deepcopy(module.state_dict())

        def on_train_epoch_end(self, trainer, module) -> None:
            self.states[trainer.global_step] = copy.deepcopy(module.state_dict())

    torch.manual_seed(0)
    net = _net(pl, cora)
    metrics = ("laplacian_energy", "dirichlet_energy", "feature_norm")
    monitor, snapshot = EnergyMonitor(cora, metrics=metrics), Snapshot()
    logger = CSVLogger(tmp_path, name="run")
    _fit(pl, net, cora, [monitor, snapshot], logger)

    table = pd.read_csv(tmp_path / "run" / "version_0" / "metrics.csv")
    names = [f"energy/{m}/layer_{k:02d}" for m in metrics for k in range(4)]
    names += [f"energy/{m}/final" for m in metrics]
    assert set(names + ["energy/verdict_code", "epoch", "step"]) == set(table.columns)
    rows = table.dropna(subset=["energy/laplacian_energy/final"])
    assert rows["step"].tolist() == [0, 1, 2, 3]  # initialisation, then each epoch
    assert rows["epoch"].tolist() == [0, 0, 1, 2]
    assert sorted(monitor.frames) == [0, 1, 2, 3]
    codes = table.dropna(subset=["energy/verdict_code"])
    assert codes["step"].tolist() == [0, 3]  # the verdict on the initialisation and at the end
    assert sorted(monitor.verdicts) == [0, 3]
    assert monitor.verdicts[3].label == "inconclusive"  # 3 layers: too few for a law

    fresh = _net(pl, cora)
    for step, state in snapshot.states.items():
        fresh.load_state_dict(state)
        fresh.eval()
        with Probe(fresh.gnn, cora, list(metrics)) as probe, torch.no_grad():
            fresh(cora.x, cora.edge_index)
        expected = probe.to_frame()
        row = rows[rows["step"] == step].iloc[0]
        for m in metrics:
            for k in range(4):
                got = row[f"energy/{m}/layer_{k:02d}"]
                assert got == pytest.approx(expected[m].iloc[k], rel=1e-12, abs=0), (step, m, k)
            assert row[f"energy/{m}/final"] == row[f"energy/{m}/layer_03"]


@QUIET
def test_weights_are_bit_identical_with_and_without_the_monitor(pl, cora, deterministic):
    from oversmooth.lightning import EnergyMonitor

    def noisy_forward(module, data):  # a forward that draws randomness: the RNGs are kept
        torch.rand(3)
        random.random()  # Python's and NumPy's too (only torch's was forked; an audit)
        np.random.rand(2)
        return module(data.x, data.edge_index)

    states, streams = [], []
    for callbacks in ([], [EnergyMonitor(cora, forward_fn=noisy_forward)]):
        torch.manual_seed(0)
        random.seed(0)
        np.random.seed(0)
        net = _net(pl, cora, dropout=0.5, norm="batch_norm")  # dropout draws, batch norm counts
        _fit(pl, net, cora, callbacks)
        states.append(net.state_dict())
        streams.append((random.random(), float(np.random.rand())))
    assert streams[0] == streams[1]
    with_monitor = callbacks[0]
    assert sorted(with_monitor.frames) == [0, 1, 2, 3]
    plain, monitored = states
    assert plain.keys() == monitored.keys()
    for name in plain:
        assert torch.equal(plain[name], monitored[name]), name


def test_probe_restores_every_mode_and_finds_the_gnn(pl, cora):
    from oversmooth.lightning import EnergyMonitor

    net = _net(pl, cora, norm="batch_norm").train()
    net.gnn.norms[0].eval()  # a frozen norm stays frozen
    modes = {name: m.training for name, m in net.named_modules()}
    monitor = EnergyMonitor(cora, every_n_epochs=2)
    assert monitor.target(net) is net.gnn  # the first child whose layers the probe finds
    frame = monitor.probe(net)
    assert frame["layer"].tolist() == [0, 1, 2, 3]
    assert {name: m.training for name, m in net.named_modules()} == modes
    assert torch.is_grad_enabled()
    assert not net.gnn._forward_hooks and not net.gnn.convs[0]._forward_hooks  # hooks removed
    assert EnergyMonitor(cora, model="gnn").target(net) is net.gnn
    assert EnergyMonitor(cora, model=lambda m: m.gnn).target(net) is net.gnn


def test_a_resumed_run_does_not_log_its_weights_as_the_initialisation(pl, cora):
    from types import SimpleNamespace

    from oversmooth.lightning import EnergyMonitor

    texts: list = []
    wandb_like = SimpleNamespace(  # what log_verdict reads of W&B's logger
        log_metrics=lambda metrics, step: None, log_text=lambda **kw: texts.append(kw)
    )
    net, monitor = _net(pl, cora), EnergyMonitor(cora)
    for step in (7, 0):  # restored from a checkpoint at step 7; a fresh run
        trainer = SimpleNamespace(
            global_step=step, current_epoch=0, is_global_zero=True, loggers=[wandb_like]
        )
        monitor.on_fit_start(trainer, net)
        monitor.on_train_start(trainer, net)
        monitor.on_train_batch_start(trainer, net, None, 0)  # where it is taken
    assert sorted(monitor.frames) == [0] and sorted(monitor.verdicts) == [0]
    title = f"{type(net).__name__} before training"
    assert monitor.titles == {0: title}
    # the logged line: the verdict in words, titled with what was judged
    (((label, line),),) = [t["data"] for t in texts]
    assert label == monitor.verdicts[0].label and line.startswith(f"{title}: {label}")


def test_arguments_are_checked(pl, cora):
    from oversmooth.lightning import EnergyMonitor

    with pytest.raises(TypeError, match="data: expected a torch_geometric Data"):
        EnergyMonitor(cora.x)
    with pytest.raises(ValueError, match="every_n_epochs"):
        EnergyMonitor(cora, every_n_epochs=-1)
    with pytest.raises(ValueError, match="judge"):
        EnergyMonitor(cora, metrics=("dirichlet_energy",))
    with pytest.raises(ValueError, match="pass model="):
        EnergyMonitor(cora).target(torch.nn.Sequential(torch.nn.Linear(2, 2)))
    # one value per layer and metric is logged: per-graph rows are refused up front (they
    # failed at the first probe, inside fit)
    with pytest.raises(ValueError, match="reduce='none' gives one row per graph"):
        EnergyMonitor(cora, probe_options={"reduce": "none"})


def test_a_batch_with_the_default_forward_is_warned_about(pl):
    """The default forward does not pass data.batch: a model that reads it would be probed on
    another computation than it trains on."""
    from torch_geometric.data import Batch, Data

    from oversmooth.lightning import EnergyMonitor

    graphs = [Data(x=torch.randn(n, 3), edge_index=torch.tensor([[0, 1], [1, 0]])) for n in (3, 4)]
    batch = Batch.from_data_list(graphs)
    with pytest.warns(UserWarning, match="does not pass it"):
        EnergyMonitor(batch)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        EnergyMonitor(batch, forward_fn=lambda m, d: m(d.x, d.edge_index, d.batch))
        EnergyMonitor(graphs[0])


def test_edge_weights_with_the_default_forward_are_warned_about(pl):
    """The default forward does not pass data.edge_weight while the energies are measured on
    the weighted graph: a weighted PyG GCN logged 2.156 at layer 1 against 3.144 for the
    forward it trains on, with no word (an audit)."""
    from torch_geometric.data import Data

    from oversmooth.lightning import EnergyMonitor

    ring = torch.tensor([[0, 1, 1, 2, 2, 0], [1, 0, 2, 1, 0, 2]])
    weighted = Data(x=torch.randn(3, 2), edge_index=ring, edge_weight=torch.rand(6) + 0.5)
    with pytest.warns(UserWarning, match="does not pass them"):
        EnergyMonitor(weighted)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        EnergyMonitor(weighted, forward_fn=lambda m, d: m(d.x, d.edge_index, d.edge_weight))
        EnergyMonitor(Data(x=torch.randn(3, 2), edge_index=ring))


@pytest.fixture
def ring():
    from oversmooth.data import load

    data = load("ring:n=12")  # a tiny graph: fits of a few epochs in well under a second
    data.x = torch.randn(12, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    data.y = torch.arange(12) % 2
    data.train_mask = torch.ones(12, dtype=torch.bool)
    return data


@QUIET
def test_the_train_end_probe_is_labelled_with_the_last_epoch_that_ran(pl, ring, tmp_path):
    """current_epoch is max_epochs at train end; the same final weights got the label 2 or 3
    depending on every_n_epochs."""
    import pandas as pd
    from lightning.pytorch.loggers import CSVLogger

    from oversmooth.lightning import EnergyMonitor

    for every, probed in ((1, [0, 1, 2, 3]), (2, [0, 2, 3])):
        torch.manual_seed(0)
        monitor = EnergyMonitor(ring, every_n_epochs=every)
        logger = CSVLogger(tmp_path, name=f"every{every}")
        _fit(pl, _net(pl, ring), ring, [monitor], logger, epochs=3)  # one step an epoch
        table = pd.read_csv(tmp_path / f"every{every}" / "version_0" / "metrics.csv")
        rows = table.dropna(subset=["energy/laplacian_energy/final"])
        assert rows["step"].tolist() == probed, every
        assert rows["epoch"].iloc[-1] == 2, every  # epochs 0, 1, 2 ran
        assert monitor.frames[3]["epoch"].unique().tolist() == [2], every
        assert monitor.frames[3].attrs["epoch"] == 2, every


@QUIET
def test_weights_changed_at_train_end_are_probed_again(pl, ring, tmp_path):
    """A callback before the monitor (StochasticWeightAveraging, one loading the best
    checkpoint) changes the weights in its on_train_end, without an optimiser step: the last
    epoch's probe, taken at the monitor's on_train_end, sees the weights the fit ends with,
    and the verdict judges them; one row per step."""
    import pandas as pd
    from lightning.pytorch.loggers import CSVLogger

    from oversmooth.lightning import EnergyMonitor

    class Shrink(pl.Callback):
        def on_train_end(self, trainer, module) -> None:
            with torch.no_grad():
                next(module.gnn.parameters()).mul_(0.5)

    torch.manual_seed(0)
    net, monitor = _net(pl, ring), EnergyMonitor(ring)
    logger = CSVLogger(tmp_path, name="run")
    _fit(pl, net, ring, [Shrink(), monitor], logger, epochs=2)

    expected = _probed(net, ring, METRICS)  # the final weights
    table = pd.read_csv(tmp_path / "run" / "version_0" / "metrics.csv")
    rows = table.dropna(subset=["energy/laplacian_energy/final"])
    assert rows["step"].tolist() == [0, 1, 2]
    assert sorted(monitor.verdicts) == [0, 2]
    for m in METRICS:
        got = monitor.frames[2][m].tolist()
        assert got == pytest.approx(expected[m].tolist(), rel=1e-12, abs=0), m
        assert rows[f"energy/{m}/final"].iloc[-1] == pytest.approx(got[-1], rel=1e-12, abs=0)


@QUIET
def test_tensorboard_logger_gets_the_scalars_and_the_verdict_text(pl, tmp_path):
    pytest.importorskip("tensorboard")
    from lightning.pytorch.loggers import TensorBoardLogger
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from oversmooth.data import load
    from oversmooth.lightning import EnergyMonitor

    data = load("ring:n=12")  # a tiny graph: x [12, 1]
    data.x = torch.randn(12, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    data.y = torch.arange(12) % 2
    data.train_mask = torch.ones(12, dtype=torch.bool)

    torch.manual_seed(0)
    net = _net(pl, data)
    monitor = EnergyMonitor(data, every_n_epochs=2, per_layer=False)
    logger = TensorBoardLogger(tmp_path, name="tb")
    _fit(pl, net, data, [monitor], logger, epochs=3)
    events = EventAccumulator(logger.log_dir, size_guidance={"scalars": 0, "tensors": 0})
    events.Reload()
    tags = events.Tags()
    final = "energy/laplacian_energy/final"
    assert {final, "energy/feature_norm/final", "energy/verdict_code"} <= set(tags["scalars"])
    assert not [t for t in tags["scalars"] if "/layer_" in t]  # per_layer=False
    # fit start, epoch 2 (the 2nd), and train end (epoch 3 was not probed)
    assert [e.step for e in events.Scalars(final)] == [0, 2, 3]
    assert "energy/verdict/text_summary" in tags["tensors"]
    assert sorted(monitor.verdicts) == [0, 3]


def test_falls_back_to_pytorch_lightning():
    # a stand-in package (importing the real one takes ~10 s on a loaded machine)
    done = _run(
        "import sys, types\n"
        "sys.modules['lightning'] = sys.modules['lightning.pytorch'] = None\n"
        "stand_in = types.ModuleType('pytorch_lightning')\n"
        "stand_in.Callback = type('Callback', (), {})\n"
        "sys.modules['pytorch_lightning'] = stand_in\n"
        "from oversmooth.lightning import EnergyMonitor\n"
        "print(issubclass(EnergyMonitor, stand_in.Callback))\n"
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "True"


@QUIET
def test_a_cached_convolution_trains_the_same_with_a_monitor_on_another_computation(pl, cora):
    """``GCNConv(cached=True)`` trained on weighted edges, probed by the default forward (which
    passes no weights): the probe filled the cache with the unweighted normalisation and
    training went on with it (an audit).  The pass empties the caches and puts them back."""
    from torch_geometric.data import Data
    from torch_geometric.nn import GCNConv

    from oversmooth.lightning import EnergyMonitor

    weight = torch.rand(cora.edge_index.size(1), dtype=torch.float64) + 0.5
    data = Data(x=cora.x, edge_index=cora.edge_index, edge_weight=weight, y=cora.y)
    data.train_mask = cora.train_mask

    class Cached(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.convs = torch.nn.ModuleList(
                [GCNConv(cora.num_features, 8, cached=True), GCNConv(8, 7, cached=True)]
            )

        def forward(self, x, edge_index, edge_weight=None):
            for conv in self.convs:
                x = conv(x, edge_index, edge_weight)
            return x

        def training_step(self, batch, index):
            out = self(batch.x, batch.edge_index, batch.edge_weight)
            mask = batch.train_mask
            return torch.nn.functional.cross_entropy(out[mask], batch.y[mask])

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=0.05)

    states = []
    for monitored in (False, True):
        torch.manual_seed(0)
        net = Cached().double()
        callbacks = []
        if monitored:
            with pytest.warns(UserWarning, match="does not pass"):
                callbacks = [EnergyMonitor(data)]
        _fit(pl, net, data, callbacks)
        states.append(net.state_dict())
    for name in states[0]:
        assert torch.equal(states[0][name], states[1][name]), name


@QUIET
def test_a_second_fit_starts_a_new_record_before_training(pl, cora):
    """Fit 1 kept steps 0-3; fit 2 (a fresh Trainer, global_step 0 again) judged its trained
    weights "at initialisation" and left fit 1's steps 2 and 3 beside its own (an audit)."""
    from oversmooth.lightning import EnergyMonitor

    torch.manual_seed(0)
    net = _net(pl, cora)
    monitor = EnergyMonitor(cora)
    _fit(pl, net, cora, [monitor], epochs=3)
    first = monitor.frames[3]
    _fit(pl, net, cora, [monitor], epochs=1)
    assert sorted(monitor.frames) == [0, 1]
    assert monitor.titles[0] == "Net before training"
    # fit 2 starts from fit 1's last weights
    assert monitor.frames[0]["laplacian_energy"].tolist() == first["laplacian_energy"].tolist()


@QUIET
def test_energies_are_logged_at_lightnings_own_step_with_two_optimisers(pl, cora, tmp_path):
    """Manual optimisation stepping two optimisers per batch: global_step counts both, so the
    energies landed at twice the step of the losses logged beside them (an audit)."""
    import pandas as pd
    from lightning.pytorch.loggers import CSVLogger

    from oversmooth.lightning import EnergyMonitor

    class TwoOptimisers(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.automatic_optimization = False
            self.gnn = _net(pl, cora).gnn

        def forward(self, x, edge_index):
            return self.gnn(x, edge_index)

        def training_step(self, batch, index):
            mask = batch.train_mask
            for opt in self.optimizers():
                opt.zero_grad()
                loss = torch.nn.functional.cross_entropy(
                    self(batch.x, batch.edge_index)[mask], batch.y[mask]
                )
                self.manual_backward(loss)
                opt.step()
            self.log("loss", loss)

        def configure_optimizers(self):
            half = len(self.gnn.convs) // 2
            return (
                torch.optim.SGD(self.gnn.convs[:half].parameters(), lr=0.01),
                torch.optim.SGD(self.gnn.convs[half:].parameters(), lr=0.01),
            )

    torch.manual_seed(0)
    net = TwoOptimisers().double()
    monitor = EnergyMonitor(cora, every_n_epochs=1, judge=False)
    _fit(pl, net, cora, [monitor], CSVLogger(tmp_path, name="run"), epochs=3)
    table = pd.read_csv(tmp_path / "run" / "version_0" / "metrics.csv")
    energy = table.dropna(subset=["energy/laplacian_energy/final"])
    losses = table.dropna(subset=["loss"])
    # kept and logged at Lightning's step, one per batch; global_step counts two per batch
    assert sorted(monitor.frames) == [0, 1, 2, 3]
    assert [f.attrs["global_step"] for f in monitor.frames.values()] == [0, 2, 4, 6]
    assert energy["step"].tolist() == [0, 1, 2, 3]
    assert losses["step"].tolist() == [0, 1, 2]


@QUIET
def test_epoch_end_energies_sit_one_step_after_the_epochs_own_metrics_same_epoch(
    pl, cora, tmp_path
):
    """Two batches an epoch: what the module logs at an epoch's end goes at the epoch's last
    batch (Lightning's convention), the energies of the same weights one step later, each row
    with the same ``epoch``, the verdict's rows too (their epoch was empty; an audit)."""
    import pandas as pd
    from lightning.pytorch.loggers import CSVLogger

    from oversmooth.lightning import EnergyMonitor

    net = _net(pl, cora)
    marks = []

    def on_train_epoch_end() -> None:
        marks.append(net.trainer.current_epoch)
        net.log("mark", float(net.trainer.current_epoch))

    net.on_train_epoch_end = on_train_epoch_end  # type: ignore[method-assign]
    loader = torch.utils.data.DataLoader([cora, cora], batch_size=None, collate_fn=lambda b: b)
    trainer = pl.Trainer(
        max_epochs=2,
        logger=CSVLogger(tmp_path, name="run"),
        callbacks=[EnergyMonitor(cora, every_n_epochs=1)],
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        log_every_n_steps=1,
        accelerator="cpu",
    )
    torch.manual_seed(0)
    trainer.fit(net, loader)
    assert marks == [0, 1]
    table = pd.read_csv(tmp_path / "run" / "version_0" / "metrics.csv")
    mark = table.dropna(subset=["mark"])
    energy = table.dropna(subset=["energy/laplacian_energy/final"])
    assert mark["step"].tolist() == [1, 3] and mark["epoch"].tolist() == [0, 1]
    assert energy["step"].tolist() == [0, 2, 4] and energy["epoch"].tolist() == [0, 0, 1]
    codes = table.dropna(subset=["energy/verdict_code"])
    assert codes["step"].tolist() == [0, 4] and codes["epoch"].tolist() == [0, 1]


@QUIET
def test_a_buffer_updated_in_eval_mode_is_restored_after_the_probe(pl, cora):
    """Quantisation-aware training's observers update their buffers in eval mode too: the
    probe's forward was their first observation and training changed with the callback (an
    audit).  Every buffer is put back after the pass."""
    from oversmooth.lightning import EnergyMonitor

    class Counting(torch.nn.Module):  # a buffer every forward moves, whatever the mode
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("seen", torch.zeros((), dtype=torch.float64))

        def forward(self, x):
            self.seen += x.abs().mean()
            return x

    torch.manual_seed(0)
    net = _net(pl, cora)
    net.tap = Counting()
    original = net.forward
    net.forward = lambda x, edge_index: original(net.tap(x), edge_index)
    monitor = EnergyMonitor(cora, model="gnn", at_fit_start=False, judge=False)
    before = net.tap.seen.clone()
    monitor.probe(net)
    assert torch.equal(net.tap.seen, before)


@QUIET
def test_a_second_fit_measures_the_data_as_it_is_then(pl, cora):
    """The copy of the data and the Probe built from it outlived a fit: after data.x *= 3 and
    new edges a second fit logged the first's energies (9.98 against 88.9, an audit)."""
    from oversmooth.lightning import EnergyMonitor

    data = copy.copy(cora)
    torch.manual_seed(0)
    net = _net(pl, data)
    monitor = EnergyMonitor(data, judge=False, every_n_epochs=0)
    _fit(pl, net, data, [monitor], epochs=1)
    data.x = 3 * data.x
    data.edge_index = data.edge_index[:, : data.edge_index.size(1) // 2]
    _fit(pl, net, data, [monitor], epochs=1)
    frame = monitor.frames[max(monitor.frames)]  # the weights the second fit ends with
    with Probe(net.gnn, data.edge_index) as probe, torch.no_grad():
        net.eval()
        net(data.x, data.edge_index)
    expected = probe.to_frame()
    assert frame["laplacian_energy"].iloc[0] == pytest.approx(
        expected["laplacian_energy"].iloc[0], rel=1e-12
    )


@QUIET
@pytest.mark.parametrize("where", ["callback after the monitor", "module's on_train_end"])
def test_the_verdict_judges_the_weights_the_fit_returns(pl, ring, tmp_path, where):
    """Lightning runs the callbacks' on_train_end in order, then the module's: an averaging
    callback listed after the monitor (EMAWeightAveraging from configure_callbacks is appended
    to the list) or the module's own hook restoring its best weights changed them after the
    monitor's probe, and the verdict judged the raw weights (an audit: 0.0160 logged, 0.0077
    the fit's)."""
    import pandas as pd
    from lightning.pytorch.loggers import CSVLogger

    from oversmooth.lightning import EnergyMonitor

    def shrink(module) -> None:
        with torch.no_grad():
            next(module.gnn.parameters()).mul_(0.5)

    class Shrink(pl.Callback):
        def on_train_end(self, trainer, module) -> None:
            shrink(module)

    torch.manual_seed(0)
    net, monitor, callbacks = _net(pl, ring), EnergyMonitor(ring), []
    if where == "module's on_train_end":
        net.on_train_end = lambda: shrink(net)
    else:
        callbacks = [Shrink()]
    _fit(pl, net, ring, [monitor, *callbacks], CSVLogger(tmp_path, name="run"), epochs=2)

    expected = _probed(net, ring)  # the final weights
    _same_values(monitor.frames[2], expected)
    assert sorted(monitor.verdicts) == [0, 2]
    table = pd.read_csv(tmp_path / "run" / "version_0" / "metrics.csv")
    rows = table.dropna(subset=["energy/laplacian_energy/final"])
    assert rows["step"].tolist() == [0, 1, 2]  # one row a step: the final weights at 2
    final = rows["energy/feature_norm/final"].iloc[-1]
    assert final == pytest.approx(expected["feature_norm"].iloc[-1], rel=1e-12, abs=0)
    verdicts = table.dropna(subset=["energy/verdict_code"])
    assert verdicts["step"].tolist() == [0, 2]


@QUIET
def test_weights_the_module_changes_in_its_own_hooks_are_those_probed(pl, ring):
    """Lightning runs a callback's hook before the module's: the probe before training missed
    weights the module loads in on_train_start, and an epoch's probe missed what the module
    does to them in on_train_epoch_end (an audit: 0.0062 logged, 4.50 the truth).  Each probe
    is of the weights the next batch trains from."""
    import copy

    from oversmooth.lightning import EnergyMonitor

    class Net(type(_net(pl, ring))):
        def on_train_start(self) -> None:
            with torch.no_grad():
                self.gnn.convs[0].lin.weight.mul_(3.0)

        def on_train_epoch_start(self) -> None:
            if self.current_epoch == 0:  # after the callbacks' hook: the probe waits a batch
                with torch.no_grad():
                    self.gnn.convs[1].lin.weight.mul_(3.0)

        def on_train_epoch_end(self) -> None:
            with torch.no_grad():
                self.gnn.convs[0].lin.weight.mul_(2.0)

    class Seen(pl.Callback):  # the weights each batch trains from, and those the fit ends with
        def __init__(self) -> None:
            self.states: dict[int, object] = {}

        def on_train_batch_start(self, trainer, module, batch, index) -> None:
            self.states[trainer.global_step] = copy.deepcopy(module)

        def on_fit_end(self, trainer, module) -> None:
            self.states[trainer.global_step] = copy.deepcopy(module)

    torch.manual_seed(0)
    net, monitor, seen = Net().double(), EnergyMonitor(ring), Seen()
    _fit(pl, net, ring, [monitor, seen], epochs=3)  # one batch an epoch
    assert sorted(monitor.frames) == sorted(seen.states) == [0, 1, 2, 3]
    for step, module in seen.states.items():
        _same_values(monitor.frames[step], _probed(module, ring))
    # the hooks do change what is probed: the weights as built, and without the epoch's end
    torch.manual_seed(0)
    built = Net().double()
    assert _probed(built, ring)["feature_norm"].iloc[-1] != pytest.approx(
        monitor.frames[0]["feature_norm"].iloc[-1], rel=1e-3
    )


@QUIET
def test_a_fit_that_fails_between_epochs_keeps_the_epoch_that_ended(pl, ring):
    """An epoch's probe is taken at the next epoch's start: a fit failing in between (the
    module's on_train_epoch_end raising) lost it (an audit); it is taken as the fit fails."""
    from oversmooth.lightning import EnergyMonitor

    class Net(type(_net(pl, ring))):
        def on_train_epoch_end(self) -> None:
            if self.current_epoch == 1:
                raise RuntimeError("the module's own epoch end failed")

    torch.manual_seed(0)
    net, monitor = Net().double(), EnergyMonitor(ring)
    with pytest.raises(RuntimeError, match="epoch end failed"):
        _fit(pl, net, ring, [monitor], epochs=3)
    assert sorted(monitor.frames) == [0, 1, 2]
    _same_values(monitor.frames[2], _probed(net, ring))


@QUIET
def test_a_module_whose_train_and_eval_do_more_trains_the_same(pl, ring):
    """An adapter in loralib's pattern merges its update into the frozen weight in eval() and
    takes it out in train(): the probe called eval() and restored the flags alone, so training
    went on merged (final weights 2.5e-3 apart with and without the monitor; an audit)."""
    from oversmooth.lightning import EnergyMonitor

    class Adapter(torch.nn.Module):
        def __init__(self, width: int) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(torch.eye(width), requires_grad=False)
            self.update = torch.nn.Parameter(torch.full((width, width), 0.1))
            self.merged = False

        def train(self, mode: bool = True):
            super().train(mode)
            with torch.no_grad():
                if mode == self.merged:  # merge for eval, take out for training
                    self.weight.add_(self.update if not mode else -self.update)
                    self.merged = not mode
            return self

        def forward(self, x):
            out = x @ self.weight.T
            return out if self.merged else out + x @ self.update.T

    base = type(_net(pl, ring))

    class Net(base):
        def __init__(self) -> None:
            super().__init__()
            self.adapter = Adapter(ring.num_features)

        def forward(self, x, edge_index):
            return self.gnn(self.adapter(x), edge_index)

    states = []
    for callbacks in ([], [EnergyMonitor(ring)]):
        torch.manual_seed(0)
        net = Net().double()
        _fit(pl, net, ring, callbacks, epochs=3)
        assert not net.adapter.merged  # as training left it
        states.append(net.state_dict())
    for name in states[0]:
        assert torch.equal(states[0][name], states[1][name]), name


@QUIET
def test_updates_without_an_optimiser_step_keep_every_probe(pl, ring):
    """Manual optimisation with a hand-written update leaves global_step at 0: every probe was
    kept under key 0, the one before training replaced, and the title said 'after 0 steps'
    after three updates (an audit).  Probes are kept at Lightning's logging step."""
    from oversmooth.lightning import EnergyMonitor

    class Net(type(_net(pl, ring))):
        def __init__(self) -> None:
            super().__init__()
            self.automatic_optimization = False

        def training_step(self, batch, index):
            out = self(batch.x, batch.edge_index)
            loss = torch.nn.functional.cross_entropy(out, batch.y)
            self.manual_backward(loss)
            with torch.no_grad():
                for p in self.parameters():
                    p -= 0.5 * p.grad
                    p.grad = None

    torch.manual_seed(0)
    net, monitor = Net().double(), EnergyMonitor(ring)
    _fit(pl, net, ring, [monitor], epochs=3)
    assert sorted(monitor.frames) == [0, 1, 2, 3]
    assert [f.attrs["global_step"] for f in monitor.frames.values()] == [0, 0, 0, 0]
    finals = {monitor.frames[s]["laplacian_energy"].iloc[-1] for s in monitor.frames}
    assert len(finals) == 4  # four different weights
    assert monitor.titles == {0: "Net before training", 3: "Net after 3 steps"}
    _same_values(monitor.frames[3], _probed(net, ring))
