"""seeded_models: one model re-drawn per seed gives, weight for weight, the models built anew."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from oversmooth.config import INITS, ModelConfig
from oversmooth.nn import model_from_config, seeded_models
from oversmooth.nn.draws import Draws
from oversmooth.registry import CONVS, MODELS


def _configs() -> list[ModelConfig]:
    out = []
    for name in MODELS:
        for conv in CONVS:
            if MODELS[name].placement == "diffusion" and CONVS[conv].elements == "edges":
                continue  # refused: the diffusion model's states are nodes
            for init in INITS:
                for dtype in ("float32", "float64"):
                    out.append(
                        ModelConfig(
                            name=name,
                            conv=conv,
                            depth=2,
                            in_channels=5,
                            out_channels=3,
                            init=init,
                            dtype=dtype,
                            encoder="linear" if dtype == "float32" else "mlp",
                        )
                    )
    return out


def _same(a: nn.Module, b: nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(
        sa[k].dtype == sb[k].dtype and torch.equal(sa[k], sb[k]) for k in sa
    )


def test_every_model_is_redrawn_bit_for_bit_as_it_is_built():
    seeds = [0, 11, 2**32 - 1]  # the largest seed taken
    reused = 0
    for config in _configs():
        before = torch.get_rng_state()
        objects = set()
        for seed, model in seeded_models(config, seeds):
            built = model_from_config(ModelConfig(**{**vars(config), "seed": seed}))
            assert _same(model, built), (config, seed)
            assert model.config == built.config
            assert not model.training
            objects.add(id(model))
        assert torch.equal(torch.get_rng_state(), before)  # the global generator is untouched
        reused += len(objects) == 1
    # the models of this package are all replayable: one object served every seed
    assert reused == len(_configs())


def test_a_model_used_for_one_seed_is_unchanged_by_the_next_only_in_place():
    config = ModelConfig(name="postln", depth=3, in_channels=4, out_channels=2)
    it = seeded_models(config, [1, 2])
    _, first = next(it)
    weights = {k: v.clone() for k, v in first.state_dict().items()}
    _, second = next(it)
    assert second is first and second.config.seed == 2
    assert not _same(second, model_from_config(ModelConfig(**{**vars(config), "seed": 1})))
    assert any(not torch.equal(weights[k], v) for k, v in second.state_dict().items())


class _FromTemporary(nn.Module):
    """Draws into a temporary that the parameter is computed from: not replayable."""

    def __init__(self) -> None:
        super().__init__()
        self.p = nn.Parameter(torch.empty(4).uniform_(-1, 1) * 2)


class _OutOfPlace(nn.Module):
    """Draws with an out-of-place call the recording does not see: the check refuses it."""

    def __init__(self) -> None:
        super().__init__()
        self.p = nn.Parameter(torch.empty(4))
        nn.init.uniform_(self.p)
        self.q = nn.Parameter(torch.randn(3))


class _Replayable(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.p = nn.Parameter(torch.empty(4, 3))
        nn.init.kaiming_uniform_(self.p, a=0.5)
        self.b = nn.Parameter(torch.empty(4))
        nn.init.uniform_(self.b, -0.1, 0.1)
        nn.init.zeros_(self.b)


def _recorded(cls: type[nn.Module], seed: int) -> tuple[nn.Module, Draws]:
    draws = Draws()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        with draws.record():
            module = cls()
        draws.bind(module)
    return module, draws


def _fresh(cls: type[nn.Module], seed: int) -> nn.Module:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return cls()


@pytest.mark.parametrize("cls", [_FromTemporary, _OutOfPlace])
def test_an_initialisation_that_cannot_be_replayed_is_refused(cls):
    _, draws = _recorded(cls, 0)
    assert not draws.check(0)
    assert not draws.replayable


def test_a_replayable_initialisation_is_redrawn_for_another_seed():
    module, draws = _recorded(_Replayable, 3)
    assert draws.check(3)
    draws.redraw(module, 8)
    assert _same(module, _fresh(_Replayable, 8))
    assert torch.equal(module.b, torch.zeros(4))  # the zeros_ after the draw is replayed too
