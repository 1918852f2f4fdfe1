"""A tiny document model rendered twice, to HTML and to Markdown, so the two twins cannot drift.

    doc = Document("Audit of reference")
    doc.add(Heading(2, "Verdicts"), Para("All `58` checks pass."),
            Table(["check", "verdict"], [["chain.marginal[...]", "pass"]], row_class=["pass"]),
            Image("img/qq.png", png_bytes, "QQ plot of p-values"),
            Formula("E = (1 - a^(k+1)) / (1 - a)"))
    html = render_html(doc)            # one page, inline CSS, no network assets
    md = render_markdown(doc)          # GitHub-flavoured Markdown, images by relative path

Images are PNG bytes kept in the document under a relative path ("img/name.png"): `write_document`
writes them beside the page (shared by both twins); `render_html(doc, embed=True)` also inlines them
as data URIs (then the HTML file alone is the whole report). Inline markup in text: `code` only; everything else is
escaped. The HTML carries one small inline script that counts images that failed to load and
shows a banner (and sets `data-images-ok` / `data-images-broken` on <body>, which the headless
browser test reads).
"""

from __future__ import annotations

import base64
import html
import os
import re
from dataclasses import dataclass, field


@dataclass
class Heading:
    level: int
    text: str
    anchor: str | None = None


@dataclass
class Para:
    text: str
    cls: str | None = None          # "note", "verdict-pass", "verdict-fail", ...


@dataclass
class Table:
    header: list
    rows: list                      # list of lists of str
    row_class: list | None = None   # per row: a verdict ("pass", "fail", ...) or None
    align: str | None = None        # per column "l"/"r", e.g. "llrrr"
    cls: str | None = None


@dataclass
class Image:
    path: str                       # relative, e.g. "img/qq.png"
    png: bytes
    alt: str
    caption: str | None = None
    width: int | None = None        # CSS pixels (HTML only)


@dataclass
class Formula:
    text: str


@dataclass
class BulletList:
    items: list


@dataclass
class Details:
    """A collapsible group (HTML <details>); in Markdown its summary is a bold line."""
    summary: str
    blocks: list = field(default_factory=list)
    open: bool = False
    cls: str | None = None


@dataclass
class Document:
    title: str
    blocks: list = field(default_factory=list)

    def add(self, *blocks) -> "Document":
        self.blocks.extend(blocks)
        return self

    def images(self) -> list:
        out = []

        def walk(blocks):
            for b in blocks:
                if isinstance(b, Image):
                    out.append(b)
                elif isinstance(b, Details):
                    walk(b.blocks)
        walk(self.blocks)
        return out


def slug(text: str) -> str:
    s = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return s or "section"


# ================================================================================= HTML

CSS = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 2em auto;
       max-width: 1100px; padding: 0 1em; color: #1b1f23; line-height: 1.45; }
h1 { border-bottom: 2px solid #d0d7de; padding-bottom: .2em; }
h2 { border-bottom: 1px solid #d0d7de; padding-bottom: .15em; margin-top: 1.6em; }
code, pre { font-family: SFMono-Regular, Consolas, "Liberation Mono", monospace; font-size: 90%; }
code { background: #f3f4f6; padding: 0 .25em; border-radius: 3px; }
pre.formula { background: #f6f8fa; border-left: 4px solid #8b949e; padding: .5em 1em; overflow-x: auto; }
table { border-collapse: collapse; margin: .6em 0; font-size: 88%; }
th, td { border: 1px solid #d0d7de; padding: .2em .5em; vertical-align: top; }
th { background: #f6f8fa; text-align: left; }
td.r { text-align: right; font-variant-numeric: tabular-nums; }
tr.fail td, td.fail { background: #ffebe9; }
tr.error td, td.error { background: #fff1e5; }
tr.warn td, td.warn { background: #fff8c5; }
tr.skip td, td.skip { color: #6e7781; }
td.pass { background: #dafbe1; }
p.verdict-pass { font-size: 120%; color: #116329; font-weight: 600; }
p.verdict-fail { font-size: 120%; color: #a40e26; font-weight: 600; }
p.note { color: #57606a; font-size: 92%; }
figure { margin: .8em 0; }
figure img { max-width: 100%; border: 1px solid #eaeef2; }
figcaption { color: #57606a; font-size: 90%; }
details { margin: .3em 0; }
details > summary { cursor: pointer; }
details.fail > summary { color: #a40e26; font-weight: 600; }
#broken-images { display: none; background: #ffebe9; border: 1px solid #a40e26; padding: .5em 1em; }
"""

# counts images that did not load (e.g. the page was copied without its img/ folder) and says so
SCRIPT = """
window.addEventListener("load", function () {
  var imgs = document.images, broken = 0;
  for (var i = 0; i < imgs.length; i++) {
    if (!imgs[i].complete || imgs[i].naturalWidth === 0) { broken++; }
  }
  document.body.setAttribute("data-images-ok", String(imgs.length - broken));
  document.body.setAttribute("data-images-broken", String(broken));
  if (broken) {
    var b = document.getElementById("broken-images");
    b.textContent = broken + " of " + imgs.length + " images did not load: keep the img/ folder beside this page.";
    b.style.display = "block";
  }
});
"""


def _inline_html(text: str) -> str:
    parts = re.split(r"(`[^`]+`)", str(text))
    out = []
    for p in parts:
        if len(p) > 1 and p.startswith("`") and p.endswith("`"):
            out.append(f"<code>{html.escape(p[1:-1])}</code>")
        else:
            out.append(html.escape(p))
    return "".join(out)


def _img_src(img: Image, embed: bool) -> str:
    if embed:
        return "data:image/png;base64," + base64.b64encode(img.png).decode("ascii")
    return html.escape(img.path)


def _block_html(b, embed: bool, out: list) -> None:
    if isinstance(b, Heading):
        anchor = b.anchor or slug(b.text)
        out.append(f'<h{b.level} id="{html.escape(anchor)}">{_inline_html(b.text)}</h{b.level}>')
    elif isinstance(b, Para):
        cls = f' class="{b.cls}"' if b.cls else ""
        out.append(f"<p{cls}>{_inline_html(b.text)}</p>")
    elif isinstance(b, Formula):
        out.append(f'<pre class="formula">{html.escape(b.text)}</pre>')
    elif isinstance(b, BulletList):
        out.append("<ul>" + "".join(f"<li>{_inline_html(i)}</li>" for i in b.items) + "</ul>")
    elif isinstance(b, Table):
        cls = f' class="{b.cls}"' if b.cls else ""
        out.append(f"<table{cls}><thead><tr>" + "".join(f"<th>{_inline_html(h)}</th>" for h in b.header)
                   + "</tr></thead><tbody>")
        for i, row in enumerate(b.rows):
            rc = b.row_class[i] if b.row_class and b.row_class[i] else None
            tr = f'<tr class="{html.escape(rc)}">' if rc else "<tr>"
            cells = []
            for j, v in enumerate(row):
                right = b.align is not None and j < len(b.align) and b.align[j] == "r"
                cells.append(f'<td class="r">{_inline_html(v)}</td>' if right else f"<td>{_inline_html(v)}</td>")
            out.append(tr + "".join(cells) + "</tr>")
        out.append("</tbody></table>")
    elif isinstance(b, Image):
        width = f' width="{b.width}"' if b.width else ""
        cap = f"<figcaption>{_inline_html(b.caption)}</figcaption>" if b.caption else ""
        out.append(f'<figure><img src="{_img_src(b, embed)}" alt="{html.escape(b.alt)}"{width}>{cap}</figure>')
    elif isinstance(b, Details):
        cls = f' class="{b.cls}"' if b.cls else ""
        out.append(f"<details{cls}{' open' if b.open else ''}><summary>{_inline_html(b.summary)}</summary>")
        for c in b.blocks:
            _block_html(c, embed, out)
        out.append("</details>")
    else:
        raise TypeError(f"unknown block {type(b).__name__}")


def render_html(doc: Document, embed: bool = False) -> str:
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           '<meta name="viewport" content="width=device-width, initial-scale=1">',
           f"<title>{html.escape(doc.title)}</title>", f"<style>{CSS}</style>",
           f"<script>{SCRIPT}</script>", "</head><body>",
           '<div id="broken-images"></div>', f"<h1>{_inline_html(doc.title)}</h1>"]
    for b in doc.blocks:
        _block_html(b, embed, out)
    out.append("</body></html>")
    return "\n".join(out) + "\n"


# ============================================================================= Markdown

MD_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}  # raw HTML would be rendered: written as entities


def _md_text(text) -> str:
    """Plain text for Markdown: HTML characters as entities (no tag, comment or autolink), a link's
    `](` broken (no link or image), on one line: an engine name or a detail injects nothing, and
    names such as `chain.marginal[dirichlet,pos=0]` read as they are."""
    text = "".join(MD_ENTITIES.get(ch, ch) for ch in str(text))
    return text.replace("](", "]\\(").replace("]:", "]\\:").replace("\r", " ").replace("\n", " ")


def _md_inline(text) -> str:
    """`code` spans kept (their content is literal in Markdown), the rest escaped (`_md_text`): the
    Markdown twin of `_inline_html`."""
    parts = re.split(r"(`[^`\n]+`)", str(text))
    return "".join(p if len(p) > 1 and p.startswith("`") and p.endswith("`") else _md_text(p) for p in parts)


def _md_escape_cell(v) -> str:
    return _md_inline(v).replace("|", "\\|")


def _block_md(b, out: list) -> None:
    if isinstance(b, Heading):
        out.append("#" * b.level + " " + _md_inline(b.text))
    elif isinstance(b, Para):
        text = _md_inline(b.text)
        out.append(("**" + text + "**") if b.cls and b.cls.startswith("verdict") else text)
    elif isinstance(b, Formula):
        out.append("```text\n" + str(b.text).replace("```", "` ` `") + "\n```")
    elif isinstance(b, BulletList):
        out.append("\n".join(f"- {_md_inline(i)}" for i in b.items))
    elif isinstance(b, Table):
        header = "| " + " | ".join(_md_escape_cell(h) for h in b.header) + " |"
        aligns = [("---:" if b.align and j < len(b.align) and b.align[j] == "r" else "---")
                  for j in range(len(b.header))]
        lines = [header, "| " + " | ".join(aligns) + " |"]
        for row in b.rows:
            lines.append("| " + " | ".join(_md_escape_cell(v) for v in row) + " |")
        out.append("\n".join(lines))
    elif isinstance(b, Image):
        out.append(f"![{_md_text(b.alt)}]({b.path})" + (f"\n\n*{_md_inline(b.caption)}*" if b.caption else ""))
    elif isinstance(b, Details):
        out.append(f"**{_md_inline(b.summary)}**")
        for c in b.blocks:
            _block_md(c, out)
    else:
        raise TypeError(f"unknown block {type(b).__name__}")


def render_markdown(doc: Document) -> str:
    out = [f"# {_md_inline(doc.title)}"]
    for b in doc.blocks:
        _block_md(b, out)
    return "\n\n".join(out) + "\n"


# ================================================================================ files

HTML_NAME = "index.html"
MD_NAME = "README.md"          # GitHub shows it when browsing the report's folder


def write_document(doc: Document, folder: str, embed: bool = False) -> list:
    """Write index.html, README.md and the images into `folder` (which exists); return the relative
    paths written. The images are written even when the HTML embeds them: the Markdown twin needs them."""
    written = []
    for img in doc.images():
        path = os.path.join(folder, img.path)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(img.png)
        written.append(img.path)
    with open(os.path.join(folder, HTML_NAME), "w", encoding="utf-8") as f:
        f.write(render_html(doc, embed=embed))
    written.append(HTML_NAME)
    with open(os.path.join(folder, MD_NAME), "w", encoding="utf-8") as f:
        f.write(render_markdown(doc))
    written.append(MD_NAME)
    return written
