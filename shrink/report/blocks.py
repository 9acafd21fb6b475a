"""A report as a list of blocks, rendered to Markdown and to standalone HTML.

Keeping one structure for both formats means the two never disagree.

The blocks' text carries names from the trace and the machine spec (a recorded log's
author writes them), so both renderers show it and obey none of it: a line break is
a space and other control characters are escaped (:func:`shrink.errors.printable`);
HTML is escaped; in Markdown a backslash, a ``<`` that would open a tag, a ``]`` that
would close a link, a ``$`` that would open a formula (GitHub renders ``$...$`` as
math) and a ``|`` in a table cell are escaped with a backslash. ``**bold**`` and
```code``` stay the report's only marks.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field
from pathlib import Path

from shrink.errors import printable

__all__ = ["Doc", "render_html", "render_markdown"]


@dataclass
class Doc:
    title: str
    blocks: list[tuple] = field(default_factory=list)

    def h(self, level: int, text: str) -> None:
        self.blocks.append(("h", level, text))

    def p(self, text: str) -> None:
        self.blocks.append(("p", text))

    def ul(self, items: list[str]) -> None:
        self.blocks.append(("ul", items))

    def table(self, headers: list[str], rows: list[list[str]]) -> None:
        self.blocks.append(("table", headers, rows))

    def img(self, path: str, caption: str, alt: str = "") -> None:
        """A figure: ``alt`` names it (the image's text), ``caption`` says what it shows,
        once, under it."""
        self.blocks.append(("img", path, caption, alt or Path(path).stem))

    def note(self, text: str) -> None:
        self.blocks.append(("note", text))


def _one_line(text: object) -> str:
    """``text`` on one line, its control characters escaped (see the module)."""
    return printable(re.sub(r"\r\n|[\r\n]", " ", str(text)))


def _md(text: object, *, cell: bool = False) -> str:
    """``text`` as Markdown shows it and does not obey: no raw HTML, no autolink, no
    link or image of its own, no formula, and in a table cell no column of its own."""
    # A backslash of the text's own first, or "\\<" would escape the escape.
    t = re.sub(r"<(?=[A-Za-z/!?])", r"\\<", _one_line(text).replace("\\", "\\\\"))
    t = re.sub(r"\](?=[(\[:])", r"\\]", t)
    t = t.replace("$", r"\$")
    return t.replace("|", r"\|") if cell else t


def render_markdown(doc: Doc) -> str:
    out = [f"# {_md(doc.title)}", ""]
    for b in doc.blocks:
        kind = b[0]
        if kind == "h":
            out += ["#" * (b[1] + 1) + " " + _md(b[2]), ""]
        elif kind == "p":
            out += [_md(b[1]), ""]
        elif kind == "note":
            out += ["> " + _md(b[1]), ""]
        elif kind == "ul":
            out += [f"- {_md(item)}" for item in b[1]] + [""]
        elif kind == "table":
            headers, rows = b[1], b[2]
            out.append("| " + " | ".join(_md(h, cell=True) for h in headers) + " |")
            out.append("|" + "|".join("---" for _ in headers) + "|")
            out += ["| " + " | ".join(_md(c, cell=True) for c in row) + " |" for row in rows]
            out.append("")
        elif kind == "img":
            out += [f"![{_md(b[3])}]({b[1]})", "", f"*{_md(b[2])}*", ""]
    return "\n".join(out).rstrip() + "\n"


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;max-width:1000px;
margin:2em auto;padding:0 1em;color:#1d2330;line-height:1.5}
h1{border-bottom:2px solid #2b6cb0;padding-bottom:.2em}h2{margin-top:1.8em;color:#2b4c7e}
table{border-collapse:collapse;margin:1em 0;font-size:.92em}
th,td{border:1px solid #cbd5e0;padding:.35em .7em;text-align:right}
th{background:#edf2f7}td:first-child,th:first-child{text-align:left}
figure{margin:1.5em 0}figure img{max-width:100%;border:1px solid #e2e8f0}
figcaption{font-size:.9em;color:#4a5568}
blockquote{background:#f0f5ff;border-left:4px solid #2b6cb0;margin:1em 0;padding:.6em 1em}
code{background:#edf2f7;padding:0 .2em}
"""


def _inline(text: str) -> str:
    """Escape, then render **bold** and `code` (the only inline marks the report uses)."""
    t = html.escape(_one_line(text))
    t = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", t)
    return re.sub(r"`(.+?)`", r"<code>\1</code>", t)


def render_html(doc: Doc) -> str:
    out = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(doc.title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{_inline(doc.title)}</h1>",
    ]
    for b in doc.blocks:
        kind = b[0]
        if kind == "h":
            n = min(6, b[1] + 1)
            out.append(f"<h{n}>{_inline(b[2])}</h{n}>")
        elif kind == "p":
            out.append(f"<p>{_inline(b[1])}</p>")
        elif kind == "note":
            out.append(f"<blockquote>{_inline(b[1])}</blockquote>")
        elif kind == "ul":
            out.append("<ul>" + "".join(f"<li>{_inline(i)}</li>" for i in b[1]) + "</ul>")
        elif kind == "table":
            head = "".join(f"<th>{_inline(h)}</th>" for h in b[1])
            body = "".join(
                "<tr>" + "".join(f"<td>{_inline(str(c))}</td>" for c in row) + "</tr>"
                for row in b[2]
            )
            out.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
        elif kind == "img":
            out.append(
                f'<figure><img src="{html.escape(b[1])}" alt="{html.escape(b[3])}">'
                f"<figcaption>{_inline(b[2])}</figcaption></figure>"
            )
    out.append("</body></html>")
    return "\n".join(out) + "\n"
