"""What users write as Markdown (comment bodies, tour descriptions and narrations), shown as
sanitised HTML, and that HTML kept beside the text it was made from.

Rendering is markdown-it-py, pure Python: about 15 µs a character for text made of `[`, `<` or
`*` (linear, but slow). Rendered on every view, the comments of 40 such 10,000-character
comments took 3.2 s to list, and a tour page of 200 such stops 21 s, for anyone holding a share
link to it (bench/markdown_bench.py). So the HTML is made once, when the text is written, and kept in the row
(`<field>_html`) with the digest of the text and renderer it was made from
(`<field>_html_of`): a page reads it; a text changed by a path that did not keep its HTML (a
bulk update, a row from before the HTML was kept) or a renderer changed since is rendered
again when read, and kept, so what is shown is never stale.
"""

from __future__ import annotations

import hashlib
import html
import re
from collections.abc import Callable
from functools import cache
from html.parser import HTMLParser
from typing import Any
from urllib.parse import unquote

import markdown_it
import nh3
from django.utils.safestring import SafeString, mark_safe
from markdown_it import MarkdownIt
from markdown_it.common.utils import escapeHtml

from .lookalikes import directions_written_out, without_hidden

# What CommonMark produces once images are off (an image's `!` stays text, its target a link):
# nothing that loads from elsewhere, so a page holding comments makes no outside request.
ALLOWED_TAGS = {
    "p", "br", "hr", "h1", "h2", "h3", "h4", "h5", "h6", "strong", "em", "code", "pre",
    "blockquote", "ul", "ol", "li", "a",
}  # fmt: skip
ALLOWED_ATTRIBUTES = {"a": {"href", "title"}, "ol": {"start"}}
URL_SCHEMES = {"http", "https", "mailto"}
# Part of every kept HTML's digest: change it with anything that changes what render_markdown
# makes (the tags allowed, a render rule), and every kept HTML is made again when next read.
# The libraries' versions are part of it: an upgrade (a sanitiser's fix) makes every kept HTML again.
RENDERER = f"markdown-it-py {markdown_it.__version__} commonmark, images as links, nh3 {nh3.__version__}: 2 (direction controls written out)"
# The HTML read for a one-line preview (the Discussion list shows 160 characters): a few
# links' worth more than that, so a list of hundreds cleans a few KB each.
PREVIEW_HTML = 2_000


@cache
def _markdown() -> MarkdownIt:
    # Raw HTML is escaped (html: False), links are never made from bare text (linkify is off in
    # the commonmark preset); markdown-it already refuses javascript:, vbscript: and data: links.
    # An image is written as a link to it: a page never loads anything from outside the server.
    md = MarkdownIt("commonmark", {"html": False})
    md.add_render_rule("image", _image_as_link)
    return md


def _image_as_link(renderer: Any, tokens: list[Any], idx: int, options: Any, env: Any) -> str:
    token = tokens[idx]
    alt = renderer.renderInlineAsText(token.children or [], options, env) or token.attrGet("src") or ""
    # Inside a link already (a badge: [![alt](image)](target)): its words, as a link may not hold one.
    depth = sum(1 if t.type == "link_open" else -1 if t.type == "link_close" else 0 for t in tokens[:idx])
    if depth > 0:
        return escapeHtml(alt)
    return f'<a href="{escapeHtml(token.attrGet("src") or "")}">{escapeHtml(alt)}</a>'


def render_markdown(text: str) -> SafeString:
    """Markdown as HTML that is safe to put in a page: sanitised after rendering, so even a
    renderer bug cannot let a script, an event handler or an outside image through. A direction
    control is shown as its code point (lookalikes.directions_written_out)."""
    rendered = _markdown().render(directions_written_out(text))
    cleaned = nh3.clean(
        rendered, tags=ALLOWED_TAGS, attributes=ALLOWED_ATTRIBUTES, url_schemes=URL_SCHEMES,
        link_rel="noopener nofollow", clean_content_tags={"script", "style"},
    )  # fmt: skip
    return mark_safe(cleaned)


def digest(text: str) -> str:
    """What kept HTML was made from: the text and the renderer."""
    return hashlib.sha256(f"{RENDERER}\n{text}".encode("utf-8", "surrogatepass")).hexdigest()[:32]


def kept_columns(field: str, text: str) -> dict[str, str]:
    """The columns that keep `text`'s HTML beside it (`field` is the text's column), for a
    create, a save or an update that writes the text."""
    return {f"{field}_html": str(render_markdown(text)) if text else "", f"{field}_html_of": digest(text)}


def keep_html(row: Any, update_fields: Any = None) -> Any:
    """Before `row` is saved (its model's `save`): its Markdown fields' HTML made again where
    the text changed since; the update_fields to save, with the HTML's columns where the text
    is among them."""
    for field in row.MARKDOWN_FIELDS:
        if update_fields is not None and field not in update_fields:
            continue
        text = getattr(row, field)
        if getattr(row, f"{field}_html_of") != digest(text):
            for name, value in kept_columns(field, text).items():
                setattr(row, name, value)
        if update_fields is not None:
            update_fields = {*update_fields, f"{field}_html", f"{field}_html_of"}
    return update_fields


def shown(row: Any, field: str) -> SafeString:
    """`row`'s Markdown `field` as HTML: as kept, or made again (and kept) when the text or the
    renderer changed since it was."""
    text = getattr(row, field)
    if getattr(row, f"{field}_html_of") == digest(text):
        return mark_safe(getattr(row, f"{field}_html"))
    columns = kept_columns(field, text)
    # Only while the row still holds that text: a write since keeps its own.
    type(row)._default_manager.filter(pk=row.pk, **{field: text}).update(**columns)
    for name, value in columns.items():
        setattr(row, name, value)
    return mark_safe(columns[f"{field}_html"])


def plain_text(kept_html: str) -> str:
    """The start of kept HTML as the plain text it shows (marks, links and code fences gone), for
    a one-line preview such as the Discussion list's; the page escapes it like any text."""
    text = nh3.clean(kept_html[:PREVIEW_HTML], tags=set(), clean_content_tags={"script", "style"})
    return " ".join(html.unescape(text).split())


# --- a redaction of what Markdown shows ------------------------------------------------------------


class _Shown(HTMLParser):
    """Rendered HTML's words (entities read), and what its links reach or say on hover."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.words: list[str] = []
        self.targets: list[str] = []

    def handle_data(self, data: str) -> None:
        self.words.append(data)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.targets.extend(unquote(value) for name, value in attrs if name in ("href", "title") and value)


# CommonMark lets a backslash escape any ASCII punctuation, and then shows it as itself.
_ASCII_PUNCTUATION = re.compile(r"([!-/:-@\[-`{-~])")


def redacted(text: str, redact: Callable[[str], str], kept_html: str | None = None) -> str:
    """Markdown `text` with a redaction's rules applied to what a reader sees, not only to how
    it is spelled: "sk-ab&#99;d", "sk-ab**c**d", "sk\\-abcd" or a link to ".../sk-ab%63d" spell
    no secret, yet show or reach one. A text that still shows a match once its spelling is
    redacted is kept as the words it showed (links gone), redacted, and escaped so that it
    shows them as written. `kept_html`: the HTML already made from `text`, to read it from."""
    new = redact(text)
    page = kept_html if new == text and kept_html is not None else str(render_markdown(new)) if new else ""
    shown = _Shown()
    shown.feed(page)
    shown.close()
    # What shows nothing is no gap to a reader: "INC-47&shy;11" reads as INC-4711.
    words = without_hidden("".join(shown.words))
    if all(redact(part) == part for part in (words, *map(without_hidden, shown.targets))):
        return new
    return _ASCII_PUNCTUATION.sub(r"\\\1", redact(words.strip("\n")))
