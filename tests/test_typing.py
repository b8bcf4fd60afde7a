"""Every public function and method of every ``oversmooth`` module is annotated (issue 17)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from pathlib import Path

import oversmooth

PKG_DIR = Path(oversmooth.__file__).resolve().parent
OPTIONAL = {"oversmooth.lightning"}  # modules of an optional extra (pip install "oversmooth[x]")


def _modules():
    names = ["oversmooth"]
    for info in pkgutil.walk_packages([str(PKG_DIR)], prefix="oversmooth."):
        names.append(info.name)
    mods = []
    for name in sorted(set(names)):
        try:
            mod = importlib.import_module(name)
        except ImportError:
            if name in OPTIONAL:  # its extra is not installed here
                continue
            raise
        # only modules whose source lives under oversmooth/
        src = getattr(mod, "__file__", None)
        if src and PKG_DIR in Path(src).resolve().parents:
            mods.append(mod)
    return mods


def _public_names(mod):
    if hasattr(mod, "__all__"):
        return list(mod.__all__)
    return [
        n
        for n, obj in vars(mod).items()
        if not n.startswith("_") and getattr(obj, "__module__", None) == mod.__name__
    ]


def _check_function(qualname, fn, missing, *, method=False):
    fn = inspect.unwrap(fn)
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return
    params = list(sig.parameters.values())
    if method and params and params[0].name in ("self", "cls"):
        params = params[1:]
    for p in params:
        if p.annotation is inspect.Parameter.empty:
            missing.append(f"{qualname}: parameter {p.name!r}")
    if sig.return_annotation is inspect.Signature.empty:
        missing.append(f"{qualname}: return")


def _check_class(qualname, cls, missing):
    for name, raw in vars(cls).items():
        if name.startswith("_") and name != "__init__":
            continue
        if isinstance(raw, (staticmethod, classmethod)):
            _check_function(
                f"{qualname}.{name}", raw.__func__, missing, method=isinstance(raw, classmethod)
            )
        elif isinstance(raw, property):
            if raw.fget is not None:
                _check_function(f"{qualname}.{name}", raw.fget, missing, method=True)
        elif inspect.isfunction(raw):
            if getattr(raw, "__module__", None) != cls.__module__:
                continue  # generated (dataclass __init__ etc. are annotated anyway)
            _check_function(f"{qualname}.{name}", raw, missing, method=True)


def _missing():
    missing: list[str] = []
    seen: set[int] = set()
    for mod in _modules():
        for name in _public_names(mod):
            obj = getattr(mod, name, None)
            if obj is None or id(obj) in seen:
                continue
            where = getattr(obj, "__module__", None)
            if where is None or not where.startswith("oversmooth"):
                continue  # re-exported third-party names
            seen.add(id(obj))
            qualname = f"{where}.{getattr(obj, '__qualname__', name)}"
            if inspect.isclass(obj):
                _check_class(qualname, obj, missing)
            elif inspect.isfunction(obj):
                _check_function(qualname, obj, missing)
    return missing


def test_modules_found():
    names = {m.__name__ for m in _modules()}
    assert "oversmooth.metrics" in names and "oversmooth.nn.model" in names


def test_public_callables_are_annotated():
    missing = _missing()
    assert not missing, "unannotated public callables:\n" + "\n".join(missing)
