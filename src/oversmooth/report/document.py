"""The one report builder: content added once, written as ``report.md`` and ``report.html``.

:class:`Document` keeps an ordered list of blocks (headings, paragraphs of inline Markdown,
tables, figures, a verdict banner, code blocks) and renders each to Markdown and to HTML.
The HTML is built block by block (no patching of rendered text): self-contained (figures
inlined as PNG data), with a table of contents when the report has at least
:data:`TOC_MIN_SECTIONS` sections, and readable on any screen: a figure is shown at its natural
size (150 dpi PNG shown at 96 CSS px per inch) where the column is wide enough and scaled to the
column where it is not; a click or tap on a scaled figure shows it at full size (in a frame
that scrolls sideways), a click on a full-size one opens the PNG.  A table wider than the column
scrolls sideways inside its frame with its first column fixed, and a small script marks every
frame whose content overflows with a "scroll sideways" cue and a shadow at the edge that hides
more; code blocks wrap.  Nothing starts off-screen at a 390 px wide phone
(``tests/report/test_screens.py`` measures it in Chromium).

Inline Markdown in :meth:`Document.text` is rendered by :func:`inline_html`: code spans,
``**strong**``, ``*emphasis*`` and ``[links](url)``; everything else is HTML-escaped.
"""

from __future__ import annotations

import base64
import html
import math
import re
import struct
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any
from collections.abc import Iterable
from urllib.parse import quote

from oversmooth.outputs import atomic_file, atomic_text
from oversmooth.report.formats import DEFAULT_FIGURE_FORMATS, DPI, save_figure
from oversmooth.report.formats import figure_formats as _figure_formats

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

__all__ = [
    "Document",
    "inline_html",
    "format_cell",
    "counted",
    "verdict_kind",
    "DPI",
    "MISSING",
    "TOC_MIN_SECTIONS",
]

CSS_PX_PER_INCH = 96  # a figure is shown at its physical size: 150 px -> 96 CSS px
TOC_MIN_SECTIONS = 4  # level-2 headings from which a report gets a table of contents
MISSING = "—"

# verdict labels -> banner kind (colour)
_KINDS = {
    "exponential-smoothing": "oversmoothing",
    "algebraic-smoothing": "oversmoothing",
    "stable": "healthy",
    "power-law-growth": "healthy",
    # a geometric growth is an explosion, not a healthy curve (it was bannered green: an
    # audit), nor the curse of depth (its relative change holds)
    "exponential-growth": "energy growth",
    "inconclusive": "inconclusive",
}
_BANNER = {
    "oversmoothing": ("#fdecea", "#c62828"),
    "curse of depth": ("#fff4e0", "#e08a00"),
    "healthy": ("#e8f5e9", "#2e7d32"),
    "inconclusive": ("#eeeeee", "#616161"),
    "norm collapse": ("#e8eaf6", "#3949ab"),
    "energy decay": ("#eceff1", "#455a64"),
    "energy growth": ("#f3e5f5", "#6a1b9a"),
}


def verdict_kind(
    label: str | None, curse_of_depth: bool | None = None, collapse: str | None = None
) -> str:
    """Banner kind of a verdict label: ``oversmoothing``, ``norm collapse``, ``energy decay``,
    ``curse of depth``, ``energy growth`` (an exponential growth), ``healthy`` or
    ``inconclusive``.  A growing curve with the curse of
    depth is ``curse of depth``; a decay is ``oversmoothing`` only where the verdict found the
    nodes converging (``collapse`` ``oversmoothing`` or ``both``,
    :attr:`oversmooth.verdict.Verdict.oversmoothing`), ``norm collapse`` where the fall is the
    features shrinking, and ``energy decay`` where the verdict named no cause (the share of
    the fall is not resolved, the fall has levelled off, or the table has no
    ``feature_norm``): a law of decay alone was bannered oversmoothing.  An ``inconclusive``
    label leaves only the law undecided: a fall whose nodes converge is still
    ``oversmoothing`` (a shrinking one ``norm collapse``), a growth with the curse of depth
    still ``curse of depth``."""
    kind = _KINDS.get(label or "", "inconclusive")
    if kind == "oversmoothing" and collapse not in ("oversmoothing", "both"):
        return "norm collapse" if collapse == "norm-collapse" else "energy decay"
    if kind == "inconclusive" and collapse in ("oversmoothing", "both"):
        return "oversmoothing"
    if kind in ("healthy", "inconclusive") and curse_of_depth:
        return "curse of depth"
    if kind in ("oversmoothing", "inconclusive") and collapse == "norm-collapse":
        return "norm collapse"
    return kind


def _banner_label(label: str | None, kind: str) -> str:
    """The banner's label: ``law inconclusive`` where only the law is (the kind says what was
    decided), else the label (or the kind without one)."""
    if label == "inconclusive" and kind != "inconclusive":
        return "law inconclusive"
    return label or kind


def verdict_heading(label: str | None, kind: str) -> str:
    """The banner's words: the label, and its kind where that says more (``law inconclusive ·
    oversmoothing``)."""
    shown = _banner_label(label, kind)
    return shown if shown == kind else f"{shown} · {kind}"


# ----------------------------------------------------------------------------- inline Markdown

_CODE = re.compile(r"(`+)(.+?)\1", re.S)
_LINK = re.compile(r"\[([^\]\n]+)\]\(([^()\s]+)\)")
_STRONG = re.compile(r"\*\*(?=\S)(.+?)(?<=\S)\*\*")
_EM = re.compile(r"(?<![\w*])\*(?=[^\s*])(.+?)(?<=[^\s*])\*(?![\w*])")
_SAFE_URL = re.compile(r"^(https?://|mailto:|#|[\w./-]+$)", re.I)


def _inline_plain(text: str) -> str:
    """Escape, then links, strong and emphasis (no code spans in ``text``)."""
    out = []
    pos = 0
    for m in _LINK.finditer(text):
        out.append(_emphasis(html.escape(text[pos : m.start()], quote=False)))
        label, url = m.group(1), m.group(2)
        if _SAFE_URL.match(url):
            out.append(
                f'<a href="{html.escape(url)}">{_emphasis(html.escape(label, quote=False))}</a>'
            )
        else:
            out.append(_emphasis(html.escape(m.group(0), quote=False)))
        pos = m.end()
    out.append(_emphasis(html.escape(text[pos:], quote=False)))
    return "".join(out)


def _emphasis(escaped: str) -> str:
    escaped = _STRONG.sub(r"<strong>\1</strong>", escaped)
    return _EM.sub(r"<em>\1</em>", escaped)


def inline_html(text: str) -> str:
    """HTML for one paragraph of inline Markdown: `` `code` ``, ``**strong**``, ``*emphasis*``
    and ``[text](url)`` (http(s), mailto, ``#anchor`` or a relative path); all other text is
    escaped, so ``<`` or ``&`` in a paragraph are shown, never interpreted."""
    out = []
    pos = 0
    for m in _CODE.finditer(text):
        out.append(_inline_plain(text[pos : m.start()]))
        out.append(f"<code>{html.escape(m.group(2).strip(), quote=False)}</code>")
        pos = m.end()
    out.append(_inline_plain(text[pos:]))
    return "".join(out)


_TAG_START = re.compile(r"<(?=[A-Za-z/!?])")  # what CommonMark reads as raw HTML or autolink
_ENTITY = re.compile(r"&(?=#?\w+;)")
_MD_DEST = re.compile(r"\]\((\S*)")  # a Markdown link's destination, parentheses and all
_SCHEME = re.compile(r"[A-Za-z][\w+.-]*:")


def _markdown_plain(text: str) -> str:
    text = _TAG_START.sub("&lt;", _ENTITY.sub("&amp;", text))

    def link(m: re.Match) -> str:  # a link to another scheme (javascript:...) stays text
        dest = m.group(1)
        if _SCHEME.match(dest) and not re.match(r"(https?://|mailto:)", dest, re.I):
            return "]\\(" + dest
        return m.group(0)

    return _MD_DEST.sub(link, text)


def markdown_safe(text: str) -> str:
    """``text`` for report.md with no raw HTML: outside code spans, ``<tag``, ``</``, ``<!``,
    ``<?`` and ``&entity;`` are escaped and a link to anything but http(s), mailto, an anchor
    or a relative path is shown as text; as :func:`inline_html` does for report.html, so a
    title, dataset or file name such as ``<img src=x onerror=...>`` reads as itself in a
    Markdown viewer."""
    out = []
    pos = 0
    for m in _CODE.finditer(text):
        out.append(_markdown_plain(text[pos : m.start()]))
        out.append(m.group(0))
        pos = m.end()
    out.append(_markdown_plain(text[pos:]))
    return "".join(out)


# ----------------------------------------------------------------------------- blocks


@dataclass
class _Figure:
    name: str
    caption: str
    figure: Any = None  # a matplotlib Figure, saved at write time
    source: Path | None = None  # or an existing PNG
    width: float | None = None  # CSS px to show it at; default: its physical size


@dataclass
class _Table:
    frame: Any
    index: bool


def _write_bytes(data: bytes, path: Path) -> None:
    path.write_bytes(data)


@dataclass
class Document:
    """A report: add blocks in order, then :meth:`write` it to a folder.

    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> doc = Document("oversmooth analyze: ...")
    >>> doc.heading("Verdict"); doc.verdict("exponential smoothing ...", "exponential-smoothing")
    >>> doc.text("Measured with `--dtype float64`.")
    >>> sorted(p.name for p in doc.write(folder).iterdir())  # and the figures' PNGs
    ['report.html', 'report.md']
    >>> _ = doc.write(folder, figure_formats=("png", "svg"))  # an SVG beside each PNG
    """

    title: str
    toc_min: int = TOC_MIN_SECTIONS
    blocks: list[tuple[str, Any]] = field(default_factory=list)

    # -- building
    def heading(self, text: str, level: int = 2) -> None:
        if level not in (2, 3, 4):
            raise ValueError(f"heading level {level}: expected 2, 3 or 4 (1 is the title)")
        self.blocks.append(("heading", (level, text)))

    def text(self, markdown: str) -> None:
        """A paragraph of inline Markdown (code, emphasis, links)."""
        self.blocks.append(("text", markdown))

    def table(self, frame: pd.DataFrame, index: bool = False) -> None:
        """A table; floats shown with 4 significant digits, missing values as a dash."""
        self.blocks.append(("table", _Table(frame, index)))

    def figure(
        self,
        figure: Figure | str | Path,
        caption: str,
        name: str | None = None,
        width: float | None = None,
    ) -> None:
        """A matplotlib ``Figure`` (saved as ``name`` at :meth:`write`, then released) or an
        existing PNG file; ``width`` in CSS px overrides its natural display width."""
        if isinstance(figure, (str, Path)):
            source = Path(figure)
            self.blocks.append(
                ("figure", _Figure(name or source.name, caption, source=source, width=width))
            )
            return
        if not name or not name.endswith(".png"):
            raise ValueError(f"figure name {name!r}: expected a file name ending in .png")
        self.blocks.append(("figure", _Figure(name, caption, figure=figure, width=width)))

    def verdict(
        self,
        text: str,
        label: str | None,
        curse_of_depth: bool | None = None,
        collapse: str | None = None,
    ) -> None:
        """The verdict banner: ``text`` (inline Markdown) in a box coloured by the kind of
        ``label`` (:func:`verdict_kind`)."""
        kind = verdict_kind(label, curse_of_depth, collapse)
        self.blocks.append(("verdict", (text, label, kind)))

    def code(self, command: str) -> None:
        """A copyable code block (a command line)."""
        self.blocks.append(("code", command))

    # -- output
    def sections(self) -> list[str]:
        return [p[1] for kind, p in self.blocks if kind == "heading" and p[0] == 2]

    def _anchors(self) -> dict[int, str]:
        seen: dict[str, int] = {}
        out = {}
        for i, (kind, payload) in enumerate(self.blocks):
            if kind != "heading":
                continue
            slug = re.sub(r"[^\w]+", "-", payload[1].lower(), flags=re.UNICODE).strip("-")
            slug = slug or "section"
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            out[i] = slug if n == 0 else f"{slug}-{n}"
        return out

    def markdown(self) -> str:
        anchors = self._anchors()
        safe = markdown_safe
        out = [f"# {safe(self.title)}"]
        if len(self.sections()) >= self.toc_min:
            out.append(
                "\n".join(
                    f"- [{safe(p[1])}](#{anchors[i]})"
                    for i, (kind, p) in enumerate(self.blocks)
                    if kind == "heading" and p[0] == 2
                )
            )
        for kind, payload in self.blocks:
            if kind == "heading":
                out.append("#" * payload[0] + " " + safe(payload[1]))
            elif kind == "text":
                out.append(safe(payload))
            elif kind == "table":
                out.append(_md_table(payload.frame, payload.index))
            elif kind == "figure":
                caption = safe(payload.caption)
                alt = caption.replace("[", "\\[").replace("]", "\\]")
                out.append(f"![{alt}]({quote(payload.name)})\n\n*{caption}*")
            elif kind == "verdict":
                text, label, banner = payload
                out.append(f"> **Verdict: {safe(verdict_heading(label, banner))}.** {safe(text)}")
            else:
                fence = "```"
                while fence in payload:
                    fence += "`"
                out.append(f"{fence}console\n{payload}\n{fence}")
        return "\n\n".join(out) + "\n"

    def html(self, folder: Path) -> str:
        """The HTML page; figures are read from ``folder`` (where :meth:`write` saved them)."""
        anchors = self._anchors()
        body = [f"<h1>{html.escape(self.title)}</h1>"]
        if len(self.sections()) >= self.toc_min:
            items = "".join(
                f'<li><a href="#{anchors[i]}">{inline_html(p[1])}</a></li>'
                for i, (kind, p) in enumerate(self.blocks)
                if kind == "heading" and p[0] == 2
            )
            body.append(f'<nav class="toc"><strong>Contents</strong><ul>{items}</ul></nav>')
        for i, (kind, payload) in enumerate(self.blocks):
            if kind == "heading":
                level, text = payload
                body.append(f'<h{level} id="{anchors[i]}">{inline_html(text)}</h{level}>')
            elif kind == "text":
                body.append(f"<p>{inline_html(payload)}</p>")
            elif kind == "table":
                body.append(_html_table(payload.frame, payload.index))
            elif kind == "figure":
                body.append(_html_img(folder, payload))
            elif kind == "verdict":
                text, label, banner = payload
                cls = banner.replace(" ", "-")
                shown = _banner_label(label, banner)
                kind = (
                    f'<span class="verdict-kind">{html.escape(banner)}</span>'
                    if shown != banner
                    else ""
                )
                body.append(
                    f'<div class="verdict verdict-{cls}" role="note">'
                    f'<div class="verdict-label">{html.escape(shown)}{kind}</div>'
                    f"<p>{inline_html(text)}</p></div>"
                )
            else:
                body.append(f'<pre class="code"><code>{html.escape(payload)}</code></pre>')
        return (
            '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{html.escape(self.title)}</title><style>{_STYLE}</style></head>\n"
            "<body><main>\n"
            + "\n".join(body)
            + f"\n</main><script>{_SCRIPT}</script></body></html>\n"
        )

    def write(
        self, folder: str | Path, figure_formats: Iterable[str] = DEFAULT_FIGURE_FORMATS
    ) -> Path:
        """Save the figures (PNG at :data:`DPI`, plus each further format of
        ``figure_formats``: ``svg``, ``pdf``; :func:`oversmooth.report.formats.save_figure`),
        then ``report.md`` and ``report.html`` (which show the PNGs), each file atomically;
        matplotlib figures are released after saving.  A figure given as an existing PNG is
        copied with its siblings of the other formats where they exist."""
        folder = Path(folder)
        if not folder.is_dir():
            raise ValueError(f"{folder}: not a folder; create it before writing the report")
        formats = _figure_formats(figure_formats)
        for kind, payload in self.blocks:
            if kind != "figure":
                continue
            if payload.figure is not None:
                fig = payload.figure
                save_figure(fig, folder / payload.name, formats)
                fig.clf()
                payload.figure = None
            elif payload.source is not None:
                _copy_figure(payload.source, folder / payload.name, formats)
        atomic_text(folder / "report.md", self.markdown())
        atomic_text(folder / "report.html", self.html(folder))
        return folder


def _copy_figure(source: Path, target: Path, formats: tuple[str, ...]) -> None:
    """Copy an existing PNG (and its ``.svg``/``.pdf`` siblings among ``formats``, where they
    exist) to ``target`` unless it is that file already."""
    if source.resolve() == target.resolve():
        return
    for fmt in formats:
        src = source.with_suffix(f".{fmt}")
        if fmt == "png" or src.is_file():
            data = src.read_bytes()
            atomic_file(target.with_suffix(f".{fmt}"), partial(_write_bytes, data))


# ----------------------------------------------------------------------------- rendering


_STYLE = (
    "body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;color:#222;margin:0;"
    "line-height:1.5}"
    "main{max-width:74rem;margin:2rem auto;padding:0 1rem;overflow-wrap:anywhere}"
    "p,nav.toc,.verdict{max-width:50rem}"
    "h1{font-size:1.6rem;line-height:1.25}h2{margin-top:2.2rem;border-bottom:1px solid #ddd}"
    # a frame (.wide > .scroll) around each table, and each figure, scrolls sideways when its
    # content is wider than the column; the script marks it (.overflows) and a cue says so
    ".wide{position:relative;margin:1rem 0;max-width:100%}"
    ".scroll{overflow-x:auto;max-width:100%}"
    ".wide.overflows::before{content:'scroll sideways →';display:block;height:1.2rem;"
    "line-height:1.2rem;text-align:right;font-size:.75rem;color:#666}"
    ".wide.overflows.at-end::before{content:'← scroll sideways'}"
    ".wide.overflows:not(.at-end)::after{content:'';position:absolute;top:1.2rem;right:0;"
    "bottom:0;width:1.5rem;pointer-events:none;"
    "background:linear-gradient(to left,rgba(0,0,0,.2),rgba(0,0,0,0))}"
    # separate borders: collapsed ones are drawn by the table, and a sticky cell loses them
    "table{border-collapse:separate;border-spacing:0;font-size:.85rem;margin:0}"
    "td,th{padding:.2rem .6rem;border-bottom:1px solid #ddd;text-align:right;"
    "vertical-align:top;white-space:nowrap;overflow-wrap:normal;background:#fff}"
    "th{background:#f6f6f6}"
    "td.text,th.text{text-align:left;white-space:normal;min-width:8rem;overflow-wrap:break-word}"
    # the first column stays in place while the others scroll under it
    "td:first-child,th:first-child{position:sticky;left:0;z-index:1;max-width:45vw}"
    ".wide.scrolled td:first-child,.wide.scrolled th:first-child{"
    "box-shadow:3px 0 4px -2px rgba(0,0,0,.25)}"
    # a phone: narrower cells, so that small tables fit without scrolling
    "@media (max-width:40rem){main{padding:0 .75rem}td,th{padding:.2rem .4rem}"
    "td.text,th.text{min-width:5rem}}"
    # print (and PDF): no scrolling frame to clip the columns past it, no cue to print; wide
    # tables wrap their cells and shrink their text instead (an audit)
    "@media print{main{max-width:none;margin:0}.scroll{overflow:visible}"
    ".wide.overflows::before,.wide.overflows::after{display:none}"
    "table{font-size:.7rem;width:100%}td,th{white-space:normal;padding:.1rem .3rem}"
    "td:first-child,th:first-child{position:static}"
    ".figure img{max-width:100%!important}.figure.shrunk figcaption::after{content:''}"
    "h2,h3{break-after:avoid}tr,figure{break-inside:avoid}}"
    # figures: natural size where it fits, else the column's width; a click toggles full size
    ".figure{margin:1.2rem 0;max-width:100%}.figure .wide{margin:0}"
    ".figure img{display:block;max-width:100%;height:auto}"
    ".figure.shrunk img{cursor:zoom-in}.figure.full img{max-width:none;cursor:zoom-out}"
    ".figure.shrunk figcaption::after{content:' (tap or click to enlarge)';color:#888}"
    ".figure figcaption{font-size:.85rem;color:#555;max-width:50rem}"
    "code{background:#f2f2f2;padding:0 .2em;border-radius:3px;font-size:.9em}"
    "pre.code{background:#f6f8fa;border:1px solid #ddd;padding:.6rem .8rem;"
    "white-space:pre-wrap;font-size:.85rem}pre.code code{background:none;padding:0}"
    "nav.toc{background:#fafafa;border:1px solid #e4e4e4;padding:.5rem 1rem;margin:1rem 0}"
    "nav.toc ul{margin:.3rem 0;padding-left:1.2rem}"
    ".verdict{border-left:.45rem solid;border-radius:4px;padding:.6rem 1rem;margin:1rem 0}"
    ".verdict p{margin:.3rem 0 0}.verdict-label{font-weight:700;font-size:1.1rem}"
    ".verdict-kind{font-weight:400;font-size:.8rem;margin-left:.6rem;text-transform:uppercase;"
    "letter-spacing:.04em}"
    + "".join(
        f".verdict-{kind.replace(' ', '-')}{{background:{bg};border-color:{fg}}}"
        f".verdict-{kind.replace(' ', '-')} .verdict-kind{{color:{fg}}}"
        for kind, (bg, fg) in _BANNER.items()
    )
)

# Marks each frame whose content is wider than it (.overflows, .at-end once scrolled to the
# end, .scrolled once scrolled at all) and each figure shown smaller than its natural size
# (.shrunk); a click on a shrunk figure shows it full size (.full), and back.  Without the
# script a figure still fits the column and a click on it opens the PNG.
_SCRIPT = (
    "(function(){"
    "function cue(){"
    "document.querySelectorAll('.wide').forEach(function(w){"
    "var s=w.firstElementChild,over=s.scrollWidth>s.clientWidth+1;"
    "w.classList.toggle('overflows',over);"
    "w.classList.toggle('at-end',over&&s.scrollLeft+s.clientWidth>=s.scrollWidth-1);"
    "w.classList.toggle('scrolled',over&&s.scrollLeft>0);});"
    "document.querySelectorAll('.figure img').forEach(function(i){"
    "var f=i.closest('.figure'),want=parseFloat(i.dataset.width||i.naturalWidth);"
    "f.classList.toggle('shrunk',f.classList.contains('full')||i.clientWidth<want-1);});}"
    "document.addEventListener('click',function(e){"
    "var a=e.target.closest&&e.target.closest('a.zoom');if(!a)return;"
    "var f=a.closest('.figure');if(!f.classList.contains('shrunk'))return;"
    "e.preventDefault();f.classList.toggle('full');cue();});"
    "document.querySelectorAll('.scroll').forEach(function(s){"
    "s.addEventListener('scroll',cue,{passive:true});});"
    "addEventListener('resize',cue);addEventListener('load',cue);cue();"
    "})();"
)


def _png_size(data: bytes) -> tuple[int, int] | None:
    if data[:8] != b"\x89PNG\r\n\x1a\n" or data[12:16] != b"IHDR":
        return None
    width, height = struct.unpack(">II", data[16:24])
    return int(width), int(height)


def _html_img(folder: Path, fig: _Figure) -> str:
    data = (folder / fig.name).read_bytes()
    size = _png_size(data)
    width = fig.width
    if width is None and size is not None:
        width = size[0] * CSS_PX_PER_INCH / DPI
    style = "" if width is None else f' style="width:{width:.0f}px" data-width="{width:.0f}"'
    encoded = base64.b64encode(data).decode("ascii")
    caption = inline_html(fig.caption)
    return (
        f'<figure class="figure"><div class="wide"><div class="scroll">'
        f'<a class="zoom" href="{html.escape(quote(fig.name))}" target="_blank">'
        f'<img alt="{html.escape(fig.caption)}"{style} src="data:image/png;base64,{encoded}">'
        f"</a></div></div><figcaption>{caption}</figcaption></figure>"
    )


def format_cell(value: Any) -> str:
    """A table cell: floats with 4 significant digits, NaN/None as a dash, booleans as yes/no
    (a per-layer excerpt's ``at_floor`` read ``False``, a setting ``True``: an audit)."""
    if value is None:
        return MISSING
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return MISSING if math.isnan(value) else f"{value:.4g}"
    try:
        import numpy as np

        if isinstance(value, np.floating):
            return format_cell(float(value))
        if isinstance(value, np.bool_):
            return format_cell(bool(value))
    except ImportError:  # pragma: no cover - numpy is a dependency
        pass
    return str(value)


def counted(count: Any, noun: str) -> str:
    """``1 epoch``, ``3 layers``: ``count`` and ``noun``, in the plural unless ``count`` is 1."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def plus_minus(value: float, half: Any) -> str:
    """``value ± half`` with the half-width to 2 significant digits and the value to the same
    decimal place (``-12.88, 3.359`` -> ``-12.9 ± 3.4``): one rounding for both numbers."""
    if half is None or not math.isfinite(float(half)) or float(half) <= 0:
        return f"{value:+.3g} ± {format_cell(half)}"
    half = float(half)
    places = max(0, 1 - math.floor(math.log10(half)))
    shown = round(half, places)
    if shown >= 10 ** (2 - places):  # 9.96 rounds up to 10: one place fewer
        places = max(0, places - 1)
    return f"{value:+.{places}f} ± {half:.{places}f}"


def _rows(frame: pd.DataFrame, index: bool) -> tuple[list[str], list[list[str]], list[bool]]:
    frame = frame.reset_index() if index else frame
    cols = [str(c) for c in frame.columns]
    rows = [[format_cell(v) for v in row] for row in frame.itertuples(index=False)]
    from pandas.api.types import is_numeric_dtype

    text = [not is_numeric_dtype(frame[c]) for c in frame.columns]
    return cols, rows, text


def _md_table(frame: pd.DataFrame, index: bool = False) -> str:
    cols, rows, _ = _rows(frame, index)
    esc = lambda s: markdown_safe(s.replace("|", "\\|").replace("\n", " "))  # noqa: E731
    lines = ["| " + " | ".join(esc(c) for c in cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(esc(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def _html_table(frame: pd.DataFrame, index: bool = False) -> str:
    """The table as HTML: text columns' cells in inline Markdown (code, emphasis, links, as
    report.md shows them), numbers as they are."""
    cols, rows, text = _rows(frame, index)
    cls = [' class="text"' if t else "" for t in text]
    head = "".join(f"<th{c}>{html.escape(name)}</th>" for c, name in zip(cls, cols, strict=True))
    body = "".join(
        "<tr>"
        + "".join(
            f"<td{c}>{inline_html(v) if t else html.escape(v)}</td>"
            for c, t, v in zip(cls, text, row, strict=True)
        )
        + "</tr>"
        for row in rows
    )
    return (
        '<div class="wide"><div class="scroll" tabindex="0">'
        f'<table class="table"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'
        "</div></div>"
    )
