"""A model's initial weights for another seed without building the model again.

Building a depth-256 model is mostly Python (thousands of ``nn.Module`` objects: about 0.25 s
on one core); drawing its weights is a few milliseconds.  :class:`Draws` records, while a
model is built, every in-place call on a tensor that the built model holds as a parameter or
buffer (``kaiming_uniform_``, ``uniform_``, ``zero_``, ...: the top-level calls, seen through a
:class:`~torch.overrides.TorchFunctionMode`), with their arguments.  Replaying them in order
under another seed gives the weights that building the model with that seed gives, bit for
bit, provided that

* every recorded call changes a tensor the model keeps (not a temporary it is copied from)
  and has no tensor among its other arguments (so nothing it writes depends on data the
  recording did not see);
* nothing else draws from the generator while the model is built.

Both are checked, not assumed: :meth:`Draws.check` replays the recording under the seed it was
built with and requires the same weights and the same generator state afterwards (a draw that
was not recorded leaves the generator elsewhere).  A recording that fails either is not
replayed: the caller builds each model anew (:func:`oversmooth.nn.model.seeded_models`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode


class _Recorder(TorchFunctionMode):
    """Collects the in-place calls (a name ending in ``_``) whose first argument is a tensor."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[Callable[..., Any], Tensor, str | None, tuple, dict]] = []
        self.opaque = False  # a recorded call had a tensor beyond its first argument

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name.endswith("_") and not name.startswith("__"):
            # the tensor changed: the first argument, or the first tensor passed by keyword
            # (torch.nn.init hands its functions on as ``f(tensor=t, ...)``)
            target: Tensor | None
            if args and isinstance(args[0], Tensor):
                key: str | None = None
                target, rest = args[0], {**dict(enumerate(args[1:])), **kwargs}
            else:
                key = next((k for k, v in kwargs.items() if isinstance(v, Tensor)), None)
                target = kwargs.get(key) if key is not None else None
                rest = {**dict(enumerate(args)), **{k: v for k, v in kwargs.items() if k != key}}
            if target is not None:
                if any(isinstance(v, Tensor) for v in rest.values()):
                    self.opaque = True
                self.calls.append((func, target, key, tuple(args), dict(kwargs)))
        return func(*args, **kwargs)


class Draws:
    """The recorded initialisation of one model (see the module docstring).

    Use :meth:`record` around the model's construction (under the seeded generator), then
    :meth:`bind` with the built model; :meth:`check` once; then :meth:`redraw` per seed.
    ``weights`` maps each touched parameter or buffer name to a float32 CPU copy, which
    :meth:`redraw` re-draws and copies into a model of any precision and device.
    """

    def __init__(self) -> None:
        self._recorder = _Recorder()
        self.calls: list[tuple[Callable[..., Any], str, str | None, tuple, dict]] = []
        self.weights: dict[str, Tensor] = {}
        self.replayable = False
        self.checked = False  # check() passed
        self._state_after: Tensor | None = None

    def record(self) -> _Recorder:
        """The context manager to build the model in."""
        return self._recorder

    def bind(self, model: nn.Module) -> None:
        """Maps the recorded calls to ``model``'s parameter and buffer names (before the model
        is moved or cast) and notes the generator state that building it left."""
        self._state_after = torch.get_rng_state()
        names = {id(t): n for n, t in _tensors(model).items()}
        recorder, self._recorder = self._recorder, _Recorder()
        ok = not recorder.opaque
        for func, target, key, args, kwargs in recorder.calls:
            name = names.get(id(target))
            if name is None or target.device.type != "cpu":
                ok = False  # a temporary (its values reach the model some other way)
                break
            # the arguments without the target, which the replay puts back in its place
            args = args[1:] if key is None else args
            kwargs = kwargs if key is None else {k: v for k, v in kwargs.items() if k != key}
            self.calls.append((func, name, key, args, kwargs))
        self.replayable = ok
        if ok:
            state = _tensors(model)
            self.weights = {n: state[n].detach().clone() for _, n, _, _, _ in self.calls}

    def _replay(self, seed: int) -> None:
        torch.manual_seed(seed)
        with torch.no_grad():
            for func, name, key, args, kwargs in self.calls:
                if key is None:
                    func(self.weights[name], *args, **kwargs)
                else:
                    func(*args, **{key: self.weights[name]}, **kwargs)

    def check(self, seed: int) -> bool:
        """Replays the recording under ``seed`` (the one the model was built with): true, and
        :attr:`replayable` stays so, when that gives the built weights and generator state.
        Once passed, the check is not run again."""
        if self.checked or not self.replayable:
            return self.checked
        built = {n: w.clone() for n, w in self.weights.items()}
        with torch.random.fork_rng(devices=[]):
            self._replay(seed)
            same_state = self._state_after is not None and torch.equal(
                torch.get_rng_state(), self._state_after
            )
        same = same_state and all(
            torch.equal(w, built[n]) and w.dtype == built[n].dtype for n, w in self.weights.items()
        )
        self.replayable = self.checked = same
        return same

    def redraw(self, model: nn.Module, seed: int) -> None:
        """``model``'s recorded weights as building it with ``seed`` draws them (in the model's
        own precision and device)."""
        with torch.random.fork_rng(devices=[]):
            self._replay(seed)
        live = _tensors(model)
        with torch.no_grad():
            for name, w in self.weights.items():
                live[name].copy_(w)


def _tensors(model: nn.Module) -> dict[str, Tensor]:
    """``model``'s parameters and buffers by name (shared ones under each of their names)."""
    out: dict[str, Tensor] = dict(model.named_parameters(remove_duplicate=False))
    out.update(model.named_buffers(remove_duplicate=False))
    return out
