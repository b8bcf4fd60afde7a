"""What each stage of a command imports (fresh interpreters), and where moved names live.

The layering and the absence of import cycles are checked in ``tests/test_layers.py``.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import oversmooth

PACKAGE = Path(oversmooth.__file__).resolve().parent


def test_moved_names_have_one_home():
    """Names that moved to the base layer are not re-exported from their old modules."""
    from oversmooth import analysis, train

    assert not {"resolve_device", "environment"} & set(analysis.__all__)
    assert not {"save_checkpoint", "load_checkpoint", "CheckpointError"} & set(train.__all__)
    moved = {"resolve_device", "environment", "load_checkpoint", "save_checkpoint"}
    old_homes = {"oversmooth.analysis", "oversmooth.train"}
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module in old_homes:
                assert not moved & {alias.name for alias in node.names}, path


# -- what a command imports ---------------------------------------------------------------------
# Each probe runs in a fresh interpreter (this one has imported everything already) and prints
# which of the heavy libraries are in sys.modules at each stage.

HEAVY = ("torch_geometric", "matplotlib", "matplotlib.pyplot", "pandas", "scipy", "scipy.stats")

_STAGES = r"""
import json, sys
HEAVY = %r
stages = {}
def mark(stage):
    stages[stage] = sorted(m for m in HEAVY if m in sys.modules)
"""


def _probe(body: str, tmp_path: Path) -> dict[str, list[str]]:
    code = _STAGES % (HEAVY,) + body + "\nprint(json.dumps(stages))\n"
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def stages(tmp_path_factory) -> dict[str, list[str]]:
    """``oversmooth --help``, then a tiny ``oversmooth analyze`` (load, forward passes, fits,
    report with figures) in the same interpreter (one torch import for both)."""
    tmp = tmp_path_factory.mktemp("analyze")
    (tmp / "w.csv").write_text("0,1,2.5\n1,2,0.5\n2,0,1.0\n")
    return _probe(
        """
import contextlib, io
sys.argv = ["oversmooth", "--help"]
from oversmooth.cli.main import main
with contextlib.redirect_stdout(io.StringIO()) as text:
    try:
        main()
    except SystemExit as exc:
        assert exc.code in (0, None), exc.code
assert "analyze" in text.getvalue()
mark("help")
from pathlib import Path
from oversmooth.data import load
for spec in ("cora", "ring:n=5", "w.csv"):
    load(spec)
mark("load")
from oversmooth.analysis import AnalysisConfig, run_analysis
from oversmooth.config import ModelConfig
model = ModelConfig("postln", depth=2, hidden=8, heads=1, dtype="float64")
result = run_analysis(AnalysisConfig(model=model, seeds=(0,)))
mark("analysis")
from oversmooth.report.render import write_analysis
write_analysis(result, Path("out"))
assert Path("out/energy.png").stat().st_size > 0
mark("report")
""",
        tmp,
    )


def test_help_imports_no_heavy_library(stages):
    assert stages["help"] == []


def test_loading_shipped_synthetic_and_csv_graphs_needs_no_pyg(stages):
    assert "torch_geometric" not in stages["load"]


def test_analysis_never_imports_pyplot_or_scipy_stats(stages):
    for stage in ("load", "analysis", "report"):
        assert "matplotlib.pyplot" not in stages[stage], stage
        assert "scipy.stats" not in stages[stage], stage
    assert "matplotlib" not in stages["analysis"]  # only once a figure is drawn
    assert "matplotlib" in stages["report"]  # (the probe did draw them)


def test_analysis_forward_path_needs_no_pyg(stages):
    assert "torch_geometric" not in stages["analysis"]
    assert "torch_geometric" not in stages["report"]


def test_the_package_loads_its_public_names_on_first_use():
    """`import oversmooth` imports no torch; every name of __all__ then resolves (to the object
    of its own module, so `from oversmooth import X` is what it always was)."""
    code = (
        "import sys, oversmooth\n"
        "light = 'torch' not in sys.modules\n"
        "import oversmooth.verdict\n"
        "from oversmooth import *  # noqa: F403\n"
        "import oversmooth.metrics as M\n"
        "ok = all(getattr(oversmooth, n) is not None for n in oversmooth.__all__)\n"
        "same = oversmooth.dirichlet_energy is M.dirichlet_energy\n"
        "same = same and callable(oversmooth.verdict)\n"
        "print(light, ok, same)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout.split() == ["True", "True", "True"], done.stdout + done.stderr


def test_run_configs_and_the_report_of_an_analysis_import_no_torch(tmp_path):
    """Validating a run's options (metric names, layers to prune) and rebuilding the report of
    an analysis folder need no torch: `oversmooth report` imported it (1.2 s) only to check
    the metric names of the folder's config."""
    from oversmooth.analysis import AnalysisConfig, run_analysis
    from oversmooth.config import ModelConfig
    from oversmooth.report.render import write_analysis

    model = ModelConfig("postln", depth=3, hidden=8, heads=1, dtype="float64")
    config = AnalysisConfig(model=model, seeds=(0,), metrics=("energy_3",), prune=(2,))
    write_analysis(run_analysis(config), tmp_path / "run")
    code = (
        "import sys\n"
        "from oversmooth.run_configs import AnalysisConfig, ComparisonConfig, TrainConfig\n"
        "AnalysisConfig(metrics=('energy_3', 'rayleigh_energy'), prune=(1, 2))\n"
        "ComparisonConfig(), TrainConfig()\n"
        "configs = 'torch' in sys.modules\n"
        "import oversmooth.cli.main as cli\n"
        "def leave(code=0):\n"
        "    raise SystemExit(code)\n"
        "cli._exit_now = leave\n"
        "sys.argv = ['oversmooth', 'report', 'run']\n"
        "try:\n"
        "    cli.main()\n"
        "except SystemExit as exc:\n"
        "    assert exc.code in (0, None), exc.code\n"
        "print(configs, 'torch' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-2:] == ["False", "False"], out.stdout


def test_metric_names_checked_without_torch_agree_with_the_probe():
    """The torch-free check accepts exactly what the probe's own check accepts."""
    from oversmooth.metrics import check_metrics
    from oversmooth.registry import METRIC_ENTRIES, known_metric

    names = [*METRIC_ENTRIES, "energy_1", "energy_1000", "energy_1001", "energy_0", "energy_"]
    names += ["energy_01", "LAPLACIAN_ENERGY", "cosine_prev", "", "nope", 3, None]
    for name in names:
        try:
            check_metrics([name])  # type: ignore[list-item]
            accepted = True
        except ValueError:  # ResourceError is one
            accepted = False
        assert known_metric(name) == accepted, name
