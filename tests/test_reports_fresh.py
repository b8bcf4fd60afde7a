"""The committed reports match the code that claims them: regenerate them (`oversmooth bench`,
`oversmooth reproduce`) when one of these fails."""

from __future__ import annotations

import json
from pathlib import Path

import oversmooth
from oversmooth.experiments import bench

REPORTS = Path(__file__).resolve().parent.parent / "reports"


def _load(path: Path) -> dict:
    assert path.is_file(), f"{path} is missing; regenerate the report"
    return json.loads(path.read_text(encoding="utf-8"))


def test_benchmark_report_has_the_current_schema_version_and_targets():
    results = _load(REPORTS / "benchmarks" / "results.json")
    assert results.get("schema_version") == bench.SCHEMA_VERSION, (
        f"reports/benchmarks/results.json has schema {results.get('schema_version')}, the code "
        f"{bench.SCHEMA_VERSION}: rerun `oversmooth bench --overwrite`"
    )
    assert results["machine"]["oversmooth"] == oversmooth.__version__, (
        f"reports/benchmarks was measured with oversmooth {results['machine']['oversmooth']}, "
        f"the package is {oversmooth.__version__}: rerun `oversmooth bench --overwrite`"
    )
    recorded = {row["key"] for row in results.get("targets", [])}
    absent = [t.key for t in bench.TARGETS if t.key not in recorded]
    assert not absent, f"reports/benchmarks/results.json lacks targets {absent}"
    assert not results["quick"], "the committed benchmark report must come from a full run"


def test_paper_reproduction_records_the_current_package_version():
    config = _load(REPORTS / "paper-reproduction" / "config.json")  # it records no schema
    assert config["environment"]["oversmooth"] == oversmooth.__version__, (
        f"reports/paper-reproduction was made with oversmooth "
        f"{config['environment']['oversmooth']}, the package is {oversmooth.__version__}"
    )
