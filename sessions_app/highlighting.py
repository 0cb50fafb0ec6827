"""Code highlighting on the server, without a CDN or a JavaScript library.

Python is split with the standard library's own tokenizer; JSON with one regular expression.
Every piece of the agent's text goes through `escape` before it is wrapped in a <span>, so the
result is safe to insert: agent code holding `</pre><script>` shows as text.
"""

from __future__ import annotations

import builtins
import io
import keyword
import re
import token
import tokenize
from html import escape  # django.utils.html.escape's own, without its lazy-string wrapper

from django.utils.safestring import SafeString, mark_safe

# Longer code is shown plain: tokenizing is linear, but a 1 MB action in a page helps nobody.
MAX_CHARS = 200_000
_BUILTINS = frozenset(dir(builtins))
_KEYWORDS = frozenset(keyword.kwlist) | frozenset(keyword.softkwlist)
_STRINGS = {token.STRING}
for _name in ("FSTRING_START", "FSTRING_MIDDLE", "FSTRING_END"):
    if hasattr(token, _name):
        _STRINGS.add(getattr(token, _name))


# Tokens holding the agent's own words (strings, comments, JSON keys) are isolated in a <bdi>: a
# right-to-left text or a stray direction override inside one cannot reorder the code around it.
_ISOLATED = frozenset({"str", "com", "key"})


def _span(css: str, text: str) -> str:
    tag = "bdi" if css in _ISOLATED else "span"
    return f'<{tag} class="tok-{css}">{escape(text)}</{tag}>'


def highlight_python(code: str) -> SafeString:
    """`code` as escaped HTML with token classes (tok-kw, tok-str, tok-num, tok-com, tok-fn,
    tok-bi); code the tokenizer rejects (the agent wrote broken Python) shows plain from there."""
    if not code:
        return mark_safe("")
    if len(code) > MAX_CHARS:
        return mark_safe(escape(code))
    line_starts = [0]
    for line in code.splitlines(keepends=True):
        line_starts.append(line_starts[-1] + len(line))

    def offset(row: int, col: int) -> int:
        return line_starts[min(row - 1, len(line_starts) - 1)] + col

    out: list[str] = []
    position = 0
    previous_name = ""
    try:
        for tok in tokenize.generate_tokens(io.StringIO(code).readline):
            start, end = offset(*tok.start), offset(*tok.end)
            if start < position or end > len(code):
                continue
            out.append(escape(code[position:start]))
            text = code[start:end]
            css = _css(tok, previous_name)
            out.append(_span(css, text) if css else escape(text))
            position = end
            if tok.type not in (token.NL, token.NEWLINE, token.INDENT, token.DEDENT, tokenize.COMMENT):
                previous_name = tok.string
    except (tokenize.TokenError, SyntaxError, IndentationError):
        pass
    out.append(escape(code[position:]))
    return mark_safe("".join(out))


def _css(tok: tokenize.TokenInfo, previous: str) -> str:
    if tok.type == tokenize.COMMENT:
        return "com"
    if tok.type in _STRINGS:
        return "str"
    if tok.type == token.NUMBER:
        return "num"
    if tok.type == token.NAME:
        if tok.string in _KEYWORDS:
            return "kw"
        if previous in ("def", "class"):
            return "fn"
        if tok.string in _BUILTINS:
            return "bi"
    return ""


_JSON_TOKEN = re.compile(
    r'(?P<key>"(?:[^"\\]|\\.)*"(?=\s*:))|(?P<str>"(?:[^"\\]|\\.)*")'
    r"|(?P<num>-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)|(?P<kw>\btrue\b|\bfalse\b|\bnull\b)"
)


def highlight_json(text: str) -> SafeString:
    """Pretty-printed JSON text as escaped HTML with token classes.

    The text is escaped once, whole, before its tokens are wrapped: `&`, `<` and `>` only (quotes
    are harmless in element content and the token pattern reads them), so no escaped form can
    look like a token. Once a token was a tenth of a variable's render (the panel shows 150)."""
    if len(text) > MAX_CHARS:
        return mark_safe(escape(text))
    return mark_safe(_JSON_TOKEN.sub(_json_token, escape(text, quote=False)))


def _json_token(match: re.Match[str]) -> str:
    css = match.lastgroup or "str"
    tag = "bdi" if css in _ISOLATED else "span"
    return f'<{tag} class="tok-{css}">{match.group()}</{tag}>'
