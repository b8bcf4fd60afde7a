"""The documentation site (mkdocs.yml, docs/): every page is in the navigation, the API
reference covers every public name and module, the names the registries hold are documented,
the Python guide's examples run, and, where MkDocs is installed, the site builds strictly."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import oversmooth

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PACKAGE = Path(oversmooth.__file__).resolve().parent


def page(name: str) -> str:
    return (DOCS / name).read_text(encoding="utf-8")


def directives() -> list[str]:
    """Every ``::: identifier`` of the API reference."""
    found = []
    for path in sorted((DOCS / "api").glob("*.md")):
        found += re.findall(r"^::: ([\w.]+)$", path.read_text(encoding="utf-8"), re.M)
    return found


def test_every_page_is_in_the_navigation():
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    pages = [p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")]
    missing = [p for p in pages if not re.search(rf":\s+{re.escape(p)}\s*$", config, re.M)]
    assert not missing, f"docs pages missing from mkdocs.yml's nav: {missing}"


def test_api_reference_documents_every_public_name():
    public = [name for name in oversmooth.__all__ if name != "__version__"]
    documented = {
        d.rsplit(".", 1)[-1]
        for d in re.findall(r"^::: (oversmooth\.[\w.]+)$", page("api/index.md"), re.M)
    }
    missing = [name for name in public if name not in documented]
    assert not missing, f"docs/api/index.md lacks ::: entries for {missing}"


def test_api_reference_documents_every_module():
    modules = set()
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        parts = parts[:-1] if parts[-1] == "__init__" else parts
        if len(parts) > 1 and parts[1] != "cli" and not any(p.startswith("_") for p in parts):
            modules.add(".".join(parts))
    missing = sorted(modules - set(directives()))
    assert not missing, f"modules without a ::: entry in docs/api/: {missing}"


def test_registry_names_are_documented():
    from oversmooth.data import DATASETS
    from oversmooth.registry import CONVS, MODELS, NORMS

    def undocumented(names, text):
        return [n for n in names if f"`{n}`" not in text]

    assert not undocumented([*MODELS, *CONVS, *NORMS], page("models.md"))
    assert not undocumented(DATASETS, page("datasets.md"))
    metrics = [m.replace("<m>", "") for m in oversmooth.available_metrics()]
    assert not [m for m in metrics if m not in page("metrics.md")]


def python_blocks(name: str, title: str) -> list[str]:
    text = page(name)
    start = text.index(f"## {title}\n")
    end = re.compile(r"^## ", re.M).search(text, start + 3)
    return re.findall(r"```python\n(.*?)```", text[start : end.start() if end else len(text)], re.S)


def test_the_own_model_section_has_code():
    assert len(python_blocks("python.md", "Your own model")) >= 2


@pytest.mark.parametrize("index", range(len(python_blocks("python.md", "Your own model"))))
def test_own_model_block_runs(index, tmp_path):
    # a fresh interpreter in a tmp dir, as a user pastes it (pyplot stays out of this process)
    code = python_blocks("python.md", "Your own model")[index]
    (tmp_path / "block.py").write_text(code, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "block.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "MPLBACKEND": "Agg"},
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    if "write_report" in code:
        assert (tmp_path / "gcn-report" / "report.html").is_file()
        assert (tmp_path / "energy.png").is_file()


# 17 s wall on 2 loaded cores (5 s of CPU); skipped without the docs extra, as in CI's test run,
# which builds the site with the same command after the tests
def test_site_builds_strictly(tmp_path):
    for module in ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python"):
        pytest.importorskip(module, reason='the docs extra is not installed: pip install ".[docs]"')
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert (tmp_path / "site" / "api" / "index.html").is_file()
    assert "oversmooth.Probe" in (tmp_path / "site" / "api" / "index.html").read_text("utf-8")
