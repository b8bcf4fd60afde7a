"""MkDocs hooks of the documentation site (mkdocs.yml, ``hooks:``): the committed evidence.

The pages in ``docs/`` link to the reports the repository keeps as evidence
(``../reports/benchmarks/report.md``), so that the links work on the forge as well as in the
site.  MkDocs only serves files inside ``docs/``; these hooks add every repository file that a
page links to (and, for a linked Markdown file, what it links to in turn, such as its figures)
as a page or file of the site, at its path in the repository, and rewrite the links to match.
A link to a file that does not exist is an error, so ``mkdocs build --strict`` fails on it.
"""

from __future__ import annotations

import logging
import posixpath
import re
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

REPO = Path(__file__).resolve().parents[1]
LINK = re.compile(r"(\]\()([^)\s#]+)((?:#[^)\s]*)?\))")  # ](target#anchor) of links and images
log = logging.getLogger("mkdocs.plugins.docs_site")


def _is_relative(target: str) -> bool:
    return not re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:|^/", target)


def _linked(path: Path) -> list[Path]:
    """The files a Markdown file links to by relative path (fenced code excluded)."""
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
    return [
        (path.parent / m.group(2)).resolve()
        for m in LINK.finditer(text)
        if _is_relative(m.group(2))
    ]


def _nav_paths(nav: Any) -> list[str]:
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, dict):
        return [p for value in nav.values() for p in _nav_paths(value)]
    if isinstance(nav, list):
        return [p for item in nav for p in _nav_paths(item)]
    return []


def _site_uri(path: Path, docs: Path) -> str:
    """Where a repository file lives in the site: docs/ at the root, the rest at its path."""
    base = docs if path.is_relative_to(docs) else REPO
    return path.relative_to(base).as_posix()


def on_files(files: Files, config: MkDocsConfig) -> Files:
    docs = Path(config.docs_dir).resolve()
    queue = [REPO / p for p in _nav_paths(config.nav) if not (docs / p).exists()]
    queue += [t for f in files.documentation_pages() for t in _linked(Path(f.abs_src_path))]
    seen: set[Path] = set()
    while queue:
        target = queue.pop()
        if target in seen or target.is_relative_to(docs):
            continue
        seen.add(target)
        if not target.is_relative_to(REPO) or not target.is_file():
            shown = target.relative_to(REPO) if target.is_relative_to(REPO) else target
            log.error("a page links to %s, which is not a file of the repository", shown)
            continue
        files.append(
            File(
                _site_uri(target, docs),
                src_dir=str(REPO),
                dest_dir=config.site_dir,
                use_directory_urls=config.use_directory_urls,
            )
        )
        if target.suffix == ".md":
            queue += _linked(target)
    return files


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    """Links written for the repository layout (``../reports/x.md``) -> the site's layout."""
    docs = Path(config.docs_dir).resolve()
    source = Path(page.file.abs_src_path or "").resolve()
    if not source.is_relative_to(docs):
        return markdown  # an evidence page: its links are relative to the same layout already
    here = posixpath.dirname(page.file.src_uri)

    def rewrite(m: re.Match[str]) -> str:
        target = m.group(2)
        if not _is_relative(target):
            return m.group(0)
        path = (source.parent / target).resolve()
        if path.is_relative_to(docs) or not path.is_relative_to(REPO):
            return m.group(0)
        return m.group(1) + posixpath.relpath(_site_uri(path, docs), here or ".") + m.group(3)

    return LINK.sub(rewrite, markdown)
