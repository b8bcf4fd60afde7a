"""The zoo's outputs and gradients, bit for bit, against values recorded before the message
passing was split into per-convolution scorers and one aggregation core (recorded from
``main`` at commit 5200c49, torch 2.13.0+cpu, one thread, on an AMD EPYC).  The values of
an AVX-512 Intel Xeon were added later, from the code of commit 9601f7e, which met the
first record bit for bit on the AMD machine.

Every model name with every convolution, on both back-ends (``edge`` and ``csr``), in float32
and float64, weighted and batched graphs, global (``S``) blocks, edge-set attention and the
ablation switches; each case stores the SHA-256 of its output bytes (and of its gradients),
so that any change of a number, however small, fails.

The bits depend on the CPU (MKL and the vectorised kernels round differently on AMD and on
AVX-512 Intel processors: up to 2.6e-6 of a case's largest sum in float32, 1.2e-14 in
float64), so each record names the platform it was made on (:func:`platform`).  On a
platform with a record the comparison is bit for bit; on any other the sums are compared
within :data:`TOLERANCE` of the case's largest.  Two machines of one platform can still
round differently (two AMD EPYC hosts with AVX2 differ in the last bits of the global
attention and edge-set cases, up to 1.1e-14 of a sum): a platform may hold several records,
and a case's output is bit for bit one of them.  Run this file as a script
(``python tests/nn/test_forward_reference.py``) to add this machine's record (the others
kept: only when the code's numbers are those already recorded, within :data:`TOLERANCE`;
only when this machine's bits are in no record yet), or with ``--reset`` to record a
deliberate change of the numbers (every other record dropped).
"""

from __future__ import annotations

import hashlib
import json
import platform as _platform
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
from torch import Tensor

from oversmooth import Probe, build_model
from oversmooth.nn import conv as conv_module
from oversmooth.nn import kernel as kernel_module
from oversmooth.nn import set_kernel

RECORDED = Path(__file__).with_name("forward_reference.json")
NAMES = ("preln", "postln", "nonlocal", "nonlocal-preln", "plain")
#: off a recorded platform: the largest difference of a case's sums, over its largest |sum|
TOLERANCE = {"float32": 1e-4, "float64": 1e-12}


def platform() -> dict[str, str]:
    """What the bits depend on: the CPU's vendor, the kernels torch dispatches to, torch."""
    vendor = _platform.processor() or _platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as info:
            for line in info:
                if line.startswith("vendor_id"):
                    vendor = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "vendor": vendor,
        "capability": torch.backends.cpu.get_cpu_capability(),
        "torch": torch.__version__,
    }


def applies(record: dict[str, object], here: dict[str, str]) -> bool:
    """Whether ``record`` was made on this platform (every field it names equal to ``here``'s)."""
    made_on = record["platform"]
    assert isinstance(made_on, dict)
    return all(here.get(key) == value for key, value in made_on.items())


def graph() -> tuple[Tensor, Tensor, Tensor, int]:
    """Three small graphs as one batch (12 nodes; a user self loop, a repeated edge, an
    isolated node), their edge weights and batch vector."""
    gen = torch.Generator().manual_seed(0)
    parts, batch, offset = [], [], 0
    for g, size in enumerate((5, 3, 4)):
        ei = torch.randint(0, size - (g == 2), (2, 2 * size), generator=gen)
        parts.append(ei + offset)
        batch.append(torch.full((size,), g))
        offset += size
    ei = torch.cat(parts, 1)
    ei[:, 0] = 1  # a user self loop
    ei[:, 3] = ei[:, 4]  # a repeated edge
    weight = torch.rand(ei.size(1), generator=gen, dtype=torch.float64) + 0.1
    return ei, weight, torch.cat(batch), offset


def digest(tensors: list[Tensor]) -> dict[str, object]:
    sha = hashlib.sha256()
    for t in tensors:
        sha.update(t.detach().contiguous().cpu().numpy().tobytes())
    return {
        "sha256": sha.hexdigest(),
        "sum": [float(t.detach().double().nansum()) for t in tensors],
    }


Case = Callable[[], list[Tensor]]


def stem(named: tuple[str, object]) -> str:
    """A parameter's name without the module that holds the scores' parameters (so the
    gradients are compared parameter by parameter whatever the module layout)."""
    return named[0].replace(".scorer.", ".")


def forward_case(
    name: str,
    conv: str,
    kernel: str,
    dtype: str,
    *,
    grad: bool = False,
    weighted: bool = False,
    batched: bool = False,
    **options: object,
) -> Case:
    def run() -> list[Tensor]:
        ei, weight, batch, n = graph()
        model = build_model(
            name,
            conv=conv,
            depth=3,
            in_channels=5,
            out_channels=3,
            hidden=8,
            heads=2,
            seed=4,
            dtype=dtype,
            **options,
        )
        set_kernel(model, kernel)
        x = torch.randn(n, 5, generator=torch.Generator().manual_seed(1)).to(model.decoder.weight)
        kwargs = {"edge_weight": weight if weighted else None}
        if not grad:
            with torch.no_grad():
                return [model(x, ei, batch if batched else None, **kwargs)]
        x.requires_grad_(True)
        out = model(x, ei, batch if batched else None, **kwargs)
        (out * torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)).sum().backward()
        return [out, x.grad, *(p.grad for _, p in sorted(model.named_parameters(), key=stem))]

    return run


def head_energy_case(conv: str, kernel: str) -> Case:
    def run() -> list[Tensor]:
        ei, _, _, n = graph()
        model = build_model(
            "nonlocal",
            conv=conv,
            depth=3,
            in_channels=5,
            out_channels=3,
            hidden=8,
            heads=2,
            dtype="float64",
        )
        set_kernel(model, kernel)
        x = torch.randn(n, 5, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
        with Probe(model, ei, head_energies=True) as probe, torch.no_grad():
            out = model(x, ei)
        frame = probe.to_frame()
        columns = [c for c in frame.columns if c.startswith("head_energy_")]
        return [out, torch.tensor(frame[columns].to_numpy())]

    return run


def cases() -> Iterator[tuple[str, Case]]:
    for name in (*NAMES, "diffusion"):
        for conv in ("san", "gcn", "gat") if name != "diffusion" else ("san",):
            for kernel in ("edge", "csr"):
                for dtype in ("float32", "float64"):
                    key = f"{name}-{conv}-{kernel}-{dtype}"
                    yield key, forward_case(name, conv, kernel, dtype)
                    yield f"{key}-grad", forward_case(name, conv, kernel, dtype, grad=True)
                yield (
                    f"{name}-{conv}-{kernel}-weighted",
                    forward_case(name, conv, kernel, "float64", weighted=True, grad=True),
                )
    for conv in ("san", "gcn", "gat"):
        for kernel in ("edge", "csr"):
            for name in ("postln", "nonlocal"):
                yield (
                    f"{name}-{conv}-{kernel}-MS-batch",
                    forward_case(
                        name,
                        conv,
                        kernel,
                        "float64",
                        batched=True,
                        pattern="MS",
                        norm="graph",
                        grad=True,
                    ),
                )
                yield (
                    f"{name}-{conv}-{kernel}-ablations",
                    forward_case(
                        name,
                        conv,
                        kernel,
                        "float32",
                        score_scale=False,
                        nonlocal_norm="sum",
                        self_loops=False,
                        weighted=True,
                    ),
                )
            yield f"head-energies-{conv}-{kernel}", head_energy_case(conv, kernel)
    for name in ("preln", "postln", "nonlocal"):
        for kernel in ("edge", "csr"):
            yield (
                f"esa-{name}-{kernel}",
                forward_case(name, "esa", kernel, "float64", pattern="MMS", grad=True),
            )


CASES = dict(cases())


def records() -> list[dict]:
    return json.loads(RECORDED.read_text(encoding="utf-8"))["records"]


@pytest.fixture(scope="module")
def recorded() -> tuple[list[dict[str, dict[str, object]]], bool]:
    """This platform's records and True; else the first record and False (sums compared
    within :data:`TOLERANCE`)."""
    found = records()
    mine = [r["cases"] for r in found if applies(r, platform())]
    return (mine, True) if mine else ([found[0]["cases"]], False)


def test_every_case_was_recorded():
    for record in records():
        assert sorted(record["cases"]) == sorted(CASES), record["platform"]


def test_the_platforms_records_agree_within_the_tolerance():
    """Each platform's sums within :data:`TOLERANCE` of the first record's: the records are of
    the same numbers, rounded by other CPUs."""
    first, *others = records()
    for other in others:
        for key, want in first["cases"].items():
            assert_sums_close(other["cases"][key]["sum"], want["sum"], key)


def assert_sums_close(got: list[float], want: list[float], key: str) -> None:
    dtype = "float32" if "float32" in key or key.endswith("-ablations") else "float64"
    scale = max(abs(v) for v in want)
    gap = max(abs(a - b) for a, b in zip(got, want, strict=True))
    assert gap <= TOLERANCE[dtype] * scale, f"{key}: sums differ by {gap:.3g} of {scale:.3g}"


@pytest.fixture
def one_thread() -> Iterator[None]:
    """Reductions split over threads round differently: the values are one thread's."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def subtract_maxima(monkeypatch: pytest.MonkeyPatch) -> None:
    """The csr kernel's softmax as it was recorded: each run's maximum subtracted.  Skipping
    the maxima where that is safe (:func:`oversmooth.nn.kernel.bounded_scores`) came later
    and rounds differently; it is compared with this below."""
    monkeypatch.setattr(kernel_module, "bounded_scores", lambda scores: False)


@pytest.mark.parametrize("key", list(CASES))
def test_outputs_are_bit_identical_to_the_recorded_ones(key, recorded, one_thread, monkeypatch):
    subtract_maxima(monkeypatch)
    got = digest(CASES[key]())
    mine, exact = recorded
    if not exact:  # no record of this platform: the numbers, not their bits
        assert_sums_close(got["sum"], mine[0][key]["sum"], key)
        return
    # bit for bit one of this platform's records (its machines may round differently)
    same = [cases[key] for cases in mine if cases[key]["sum"] == got["sum"]]
    assert same, f"{key}: sums differ from every record of this platform"
    assert any(want["sha256"] == got["sha256"] for want in same), (
        f"{key}: same sums, different bytes"
    )


# the csr cases with scored attention (GCN's and the diffusion model's weights are fixed)
CSR_SCORED = [
    key for key in CASES if "-csr" in key and "-gcn-" not in key and "diffusion" not in key
]


@pytest.mark.parametrize("key", CSR_SCORED)
def test_skipping_the_maxima_moves_outputs_by_rounding_only(key, one_thread, monkeypatch):
    """In float64 without autograd, where every score is bounded, the csr kernel exponentiates
    the scores as they are: the same outputs as the recorded path (maxima subtracted) but for
    rounding (within 1024 units of the last place of the case's largest value, through three
    blocks), and the shortcut is really taken.  With autograd (training) or in float32 it
    never is: bit for bit the recorded numbers, gradients included."""
    calls: list[tuple[bool, bool]] = []  # (the maxima path is required, shortcut taken)

    def counted(scores: Tensor, row: Tensor, offsets: Tensor) -> Tensor:
        keep = scores.requires_grad or scores.dtype != torch.float64
        calls.append((keep, not keep and kernel_module.bounded_scores(scores)))
        return numerators(scores, row, offsets)

    numerators = conv_module.softmax_numerators_
    monkeypatch.setattr(conv_module, "softmax_numerators_", counted)
    fast = [t.detach() for t in CASES[key]()]
    subtract_maxima(monkeypatch)
    slow = [t.detach() for t in CASES[key]()]
    first = calls[: len(calls) // 2]  # the calls of the run with the shortcut available
    assert first and all(taken == (not keep) for keep, taken in first)
    if all(keep for keep, _ in calls):
        for a, b in zip(fast, slow, strict=True):
            assert torch.equal(a.nan_to_num(), b.nan_to_num()), key
        return
    assert not any(keep for keep, _ in calls)
    scale = max(float(t.nan_to_num().abs().max()) for t in slow)
    for a, b in zip(fast, slow, strict=True):
        assert torch.equal(a.isnan(), b.isnan()), key  # the head energies' undefined rows
        gap = (a - b).nan_to_num().abs().max()
        assert float(gap) <= 1024 * torch.finfo(b.dtype).eps * scale, key


if __name__ == "__main__":  # pragma: no cover - records the reference values
    torch.set_num_threads(1)
    kernel_module.bounded_scores = lambda scores: False  # the recorded path (subtract_maxima)
    here = platform()
    values = {key: digest(case()) for key, case in CASES.items()}
    kept = [] if "--reset" in sys.argv[1:] else records()
    for other in kept:  # a record only of the numbers the others hold
        for key, want in other["cases"].items():
            assert_sums_close(values[key]["sum"], want["sum"], key)
    if any(other["cases"] == values for other in kept if applies(other, here)):
        sys.exit(f"this machine's bits are recorded already ({RECORDED})")
    RECORDED.write_text(
        json.dumps({"records": [*kept, {"platform": here, "cases": values}]}, indent=1) + "\n",
        encoding="utf-8",
    )
    print(f"{len(values)} cases on {here} -> {RECORDED} ({len(kept)} other records kept)")
