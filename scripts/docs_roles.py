"""Griffe extension of the documentation site: the docstrings' Sphinx markup, for mkdocstrings.

The package's docstrings are Google style with Sphinx roles (``:func:`verdict```,
``:class:`~oversmooth.nn.DepthModel```) and ``.. math::`` blocks.  mkdocstrings renders
Markdown, so this extension rewrites them once the package is loaded:

- a role naming an object of the package becomes a cross-reference to its documentation
  (a link where the object is rendered, plain code where it is not, e.g. a private helper);
- a role naming an object of the package that does not exist is a warning, so
  ``mkdocs build --strict`` fails on a stale name;
- a role naming anything else (``torch.nn.Linear``) stays code;
- ``:math:`` and ``.. math::`` become MathJax (``pymdownx.arithmatex``), and RST simple tables
  (``===  ===`` borders) Markdown tables.

Names are looked up as Sphinx does for the Python domain: the full path, then relative to the
object that holds the docstring, its parents and its module, then the package root.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

PACKAGE = "oversmooth"
ROLE = re.compile(r":(?:py:)?(class|func|meth|attr|mod|data|obj|exc|math):`([^`]+)`", re.S)
MATH_BLOCK = re.compile(
    r"^([ \t]*)\.\. math::[ \t]*(\S[^\n]*)?\n((?:[ \t]*\n|\1[ \t]+\S[^\n]*\n?)*)", re.M
)
BORDER = re.compile(r"([ \t]*)=+(?:[ \t]+=+)+[ \t]*")  # a border line of an RST simple table
logger = griffe.get_logger("docs_roles")


class SphinxRoles(griffe.Extension):
    """Rewrite Sphinx roles and math in every docstring of the package, once it is loaded."""

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        if pkg.name != PACKAGE:
            return
        for obj in _objects(pkg):
            if obj.docstring is not None:
                obj.docstring.value = _rewrite(obj.docstring.value, obj, pkg)


def _objects(obj: griffe.Object) -> list[griffe.Object]:
    """``obj`` and every object defined in it (aliases are documented where they point)."""
    found = [obj]
    for member in obj.members.values():
        if not member.is_alias:
            found += _objects(member)  # type: ignore[arg-type]
    return found


def _rewrite(text: str, obj: griffe.Object, pkg: griffe.Module) -> str:
    first = (obj.docstring.lineno or 0) if obj.docstring else 0

    def role(m: re.Match[str]) -> str:
        kind, body = m.group(1), " ".join(m.group(2).split())
        if kind == "math":
            return f"\\({body}\\)"
        line = first + text.count("\n", 0, max(text.find(m.group(0)), 0))
        return _reference(body, obj, pkg, line)

    return MATH_BLOCK.sub(_math_block, ROLE.sub(role, _tables(text)))


def _tables(text: str) -> str:
    """RST simple tables (three ``===  ===`` borders: top, under the header, bottom) as
    Markdown tables; everything else unchanged."""
    lines, out, i = text.split("\n"), [], 0
    while i < len(lines):
        ends = [k for k in range(i, len(lines)) if BORDER.fullmatch(lines[k])][:3]
        if not BORDER.fullmatch(lines[i]) or len(ends) < 3:
            out.append(lines[i])
            i += 1
            continue
        out += _table(lines[i : ends[2] + 1])
        i = ends[2] + 1
    return "\n".join(out)


def _table(block: list[str]) -> list[str]:
    match = BORDER.fullmatch(block[0])
    assert match is not None
    indent = match.group(1)
    starts = [run.start() for run in re.finditer(r"=+", block[0][len(indent) :])]
    bounds = list(zip(starts, [*starts[1:], None], strict=True))
    rows: list[list[str]] = []
    for line in block[1:-1]:
        if BORDER.fullmatch(line):
            continue  # the border under the header
        cells = [line[len(indent) :][a:b].strip() for a, b in bounds]
        if cells[0] or not rows:
            rows.append(cells)
        else:  # a continuation line: its cells extend the row above
            rows[-1] = [f"{old} {new}".strip() for old, new in zip(rows[-1], cells, strict=True)]
    table = [rows[0], ["---"] * len(bounds), *rows[1:]]
    return [f"{indent}| " + " | ".join(row) + " |" for row in table] + [""]


def _math_block(m: re.Match[str]) -> str:
    indent, inline, body = m.group(1), m.group(2), m.group(3)
    lines = [inline] if inline else []
    lines += [line.strip() for line in body.splitlines() if line.strip()]
    return f"{indent}\\[\n" + "".join(f"{indent}{line}\n" for line in lines) + f"{indent}\\]\n\n"


def _reference(body: str, obj: griffe.Object, pkg: griffe.Module, line: int) -> str:
    explicit = re.fullmatch(r"(.+?)\s*<(.+)>", body)
    title, target = explicit.groups() if explicit else (body, body)
    short = target.startswith("~")
    target = target.lstrip("~").rstrip("()")
    if not explicit:
        title = target.rsplit(".", 1)[-1] if short else target
    path = _resolve(target, obj, pkg)
    if path is None:
        logger.warning(
            "%s:%s: %r names no object of the package, or several (stale or ambiguous)",
            obj.relative_filepath,
            line,
            target,
        )
        return f"`{title}`"
    if path == "":
        return f"`{title}`"  # outside the package: no page to link to
    return f'<autoref optional identifier="{path}"><code>{title}</code></autoref>'


def _resolve(target: str, obj: griffe.Object, pkg: griffe.Module) -> str | None:
    """The canonical path of ``target`` seen from ``obj``; "" outside the package, None if it
    names nothing."""
    target = target.lstrip(".")  # Sphinx's ".name": searched from here outwards, as below
    scopes: list[str] = []
    scope: griffe.Object | None = obj
    while scope is not None:
        scopes.append(scope.path + ".")
        scope = scope.parent
    candidates = [target] + [s + target for s in scopes if not target.startswith(PACKAGE + ".")]
    for candidate in candidates:
        found = _lookup(candidate, pkg)
        if found is not None:
            return found
    if target.split(".")[0] == PACKAGE:
        return None  # a full path that names nothing: stale
    if "." in target or _external_name(target, obj):
        return ""  # torch.nn.Linear, or a name the module imports from elsewhere
    return _unique(target, pkg)


def _lookup(path: str, pkg: griffe.Module) -> str | None:
    parts = path.split(".")
    if parts[0] != PACKAGE:
        return None
    node: Any = pkg
    for part in parts[1:]:
        try:
            node = node.members[part]
        except (KeyError, AttributeError):
            return None
        if node.is_alias:
            try:
                node = node.final_target
            except (griffe.AliasResolutionError, griffe.CyclicAliasError):
                return ""  # imported from outside the package
            if not node.path.startswith(PACKAGE + ".") and node.path != PACKAGE:
                return ""
    return str(node.path)


def _unique(name: str, pkg: griffe.Module) -> str | None:
    """The one object of the package called ``name``, if exactly one is."""
    paths = {o.path for o in _objects(pkg) if o.name == name}
    return paths.pop() if len(paths) == 1 else None


def _external_name(name: str, obj: griffe.Object) -> bool:
    """An unqualified name the module imports from outside the package (``Path``, ``Tensor``)."""
    module = obj if obj.is_module else obj.module
    member = module.members.get(name)
    return member is not None and member.is_alias and not member.target_path.startswith(PACKAGE)
