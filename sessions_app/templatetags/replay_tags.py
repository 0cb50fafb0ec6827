"""Display filters of the dashboard: formatting only, no queries and no decisions."""

from __future__ import annotations

from html import escape
from typing import Any

from django import template
from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe

from .. import highlighting, signing
from ..lookalikes import directions_written_out, shown_plainly
from ..replay.display import UNPRICED, duration, duration_ms, kind_icon, offset, one_based, usd
from ..replay.frames import ClippedValue, clip_block, display_text, json_display_text

register = template.Library()
for _display in (kind_icon, duration, duration_ms, usd, offset, one_based):
    register.filter(_display)


@register.filter
def plain(text: Any) -> str:
    """A name that came from a recording (a session's source id), with each character that hides
    or turns what a reader sees written as its code point: `<bdi>` isolates a name, but an
    override inside it still reverses it ("ses_approved\u202edesiler_" read "ses_approved_relised").
    Names people pick are refused such characters instead (lookalikes.py)."""
    return shown_plainly(str(text or ""))


@register.filter
def prose(text: Any) -> str:
    """Plain text people wrote (a sign-off's note) with its direction controls written out
    (lookalikes.directions_written_out); its line breaks stay for `linebreaksbr`."""
    return directions_written_out(str(text or ""))


@register.filter
def fingerprint(text: Any) -> str:
    """A key's fingerprint grouped as the about page and `verify_bundle` write it (`3f9a 01bc …`),
    so the two can be compared by eye."""
    return signing.grouped(str(text or ""))


@register.filter
def session_cost(session: Any) -> str:
    """A session's total cost: *unpriced* when none of its events had a price (its stored total
    of 0 is then a sum of nothing), and marked when some events used tokens without one (the
    total covers only the priced events)."""
    if not session.cost_known:
        return UNPRICED
    if session.unpriced_events:
        return format_html(
            '{} <em class="unpriced" title="{} used tokens with no known price: not in this total">+ unpriced</em>',
            usd(session.cost_usd),
            f"{session.unpriced_events} event{'s' if session.unpriced_events != 1 else ''}",
        )
    return usd(session.cost_usd)


@register.filter
def python(code: Any) -> SafeString:
    """Code highlighted; a source that recorded something else than text there shows as JSON."""
    if code is None or isinstance(code, str):
        return highlighting.highlight_python(code or "")
    return pretty_json(code)


@register.filter
def pretty_json(value: Any) -> SafeString:
    """A decoded JSON value, indented and highlighted (escaped inside)."""
    return highlighting.highlight_json(json_display_text(value))


@register.filter
def json_block(value: Any, css: str = "value") -> SafeString:
    """A value (a variable's: its type shows, "2" is not 2) as a <pre> of indented, highlighted
    JSON, never a Python repr; past SHOWN_VALUE_CHARS it is cut and says so (the snapshot export
    has it all). JSON reads left to right; its strings are isolated by the highlighter. `css` is
    a class the template names (never data); up to 150 of these render a step: no format_html."""
    if isinstance(value, ClippedValue):  # the frame's: made JSON and cut already
        return mark_safe(f'<pre class="{css} json" dir="ltr">{highlighting.highlight_json(value.text)}</pre>')
    return mark_safe(
        f'<pre class="{css} json" dir="ltr">{highlighting.highlight_json(clip_block(json_display_text(value)))}</pre>'
    )


@register.filter
def value_block(value: Any, css: str = "value") -> SafeString:
    """A value as a <pre>: text as it is (escaped, its direction its own), anything else as
    json_block."""
    if isinstance(value, ClippedValue):
        if value.is_json:
            return json_block(value, css)
        return mark_safe(f'<pre class="{css}" dir="auto">{escape(value.text)}</pre>')
    if isinstance(value, str):
        return mark_safe(f'<pre class="{css}" dir="auto">{escape(clip_block(value))}</pre>')
    return json_block(value, css)


@register.filter
def to_text(value: Any) -> str:
    return display_text(value)


@register.filter
def is_long(value: Any, lines: int = 12) -> bool:
    """Whether a text is long enough to be folded."""
    text = to_text(value)
    return len(text) > 800 or text.count("\n") >= lines


@register.filter
def get(mapping: Any, key: Any) -> Any:
    if isinstance(mapping, dict):
        return mapping.get(key)
    return None


@register.filter
def percent(value: Any) -> str:
    try:
        return f"{float(value) * 100:.2f}%"
    except (TypeError, ValueError):
        return ""


# One event of the player's step list, and the group of streamed chunks it opens or closes.
# Built here, not in player.html: the step list is in every frame, and its 25 rows through the
# template engine (~25 nodes each, each value through Django's lazy-aware escape) were ~1 ms of
# a step's CPU (docs/benchmarks.md, issue 20). Every value is escaped as autoescape would (text
# through html.escape, marked-up labels kept); whitespace stands where the template had its line
# breaks.


def _html(value: Any) -> str:
    return value.__html__() if hasattr(value, "__html__") else escape(str(value))


@register.filter
def step_row(e: Any, keep: str) -> SafeString:
    """A StepRow (replay/frames.py) as its <li>; `keep`: the query string its link carries."""
    parts = []
    if e.opens:
        g = e.opens
        parts.append(
            f'<li class="group kind-{_html(g.kind)}"><details{" open" if g.open else ""}><summary>'
            f'<span aria-hidden="true">{_html(kind_icon(g.kind))}</span> {g.count} × {_html(g.kind)} '
            f'<span class="muted">#{one_based(g.first)}–#{one_based(g.last)}</span></summary><ol>'
        )
    kind = _html(e.kind)
    error_class = " is-error" if e.is_error else ""
    current = ' aria-current="step"' if e.current else ""
    parts += [
        f'<li class="event kind-{kind} depth-{e.depth_class}{error_class}"{current}>',
        f'<a href="?step={e.seq}{_html(keep)}" data-seq="{e.seq}">',
        f'<span class="seq">#{e.number}</span>',
        f'<time datetime="{_html(e.timestamp)}" title="{_html(e.timestamp)}">{_html(e.when)}</time>'
        if e.timestamp
        else "<time></time>",
        f'<span class="icon" aria-hidden="true">{_html(e.icon)}</span>',
        f'<span class="kind">{kind}</span>',
        f'<bdi class="tool">{_html(e.tool)}</bdi>' if e.tool else "",
        f'<span class="step-no">step {e.step_number}</span>' if e.step_number else "",
        f'<bdi class="preview">{_html(e.preview)}</bdi>',
        f'<span class="pair">{_html(e.pair_label)}</span>' if e.pair_label else "",
        f'<span class="cost">{_html(e.cost_label)}</span>' if e.cost_label else "",
        '<span class="err-mark">error</span>' if e.is_error else "",
        "</a>",
        "</li>",
    ]
    if e.closes:
        parts.append("</ol></details></li>")
    return mark_safe("\n".join(parts))


# The context panel's histories (up to SHOWN_HISTORY entries each, in every frame), built here for
# the same reason as step_row; each entry's markup is what the template's loop wrote.


def _entry_link(h: Any, keep: str, label: str) -> str:
    return f'<a href="?step={h.seq}{_html(keep)}" data-seq="{h.seq}">#{one_based(h.seq)}{label}</a>'


@register.filter
def llm_history(entries: list[Any], keep: str) -> SafeString:
    return mark_safe(
        "".join(
            f"<li>{_entry_link(h, keep, f' {_html(h.kind)}')}"
            f"{f' <bdi class="muted">{_html(h.tool)}</bdi>' if h.tool else ''} <bdi>{_html(h.preview)}</bdi></li>"
            for h in entries
        )
    )


@register.filter
def tool_history(entries: list[Any], keep: str) -> SafeString:
    return mark_safe(
        "".join(
            f"<li{' class="is-error"' if h.is_error else ''}>"
            f"{_entry_link(h, keep, f' <bdi>{_html(h.tool or h.kind)}</bdi>')} <bdi>{_html(h.preview)}</bdi></li>"
            for h in entries
        )
    )


@register.filter
def approval_history(entries: list[Any], keep: str) -> SafeString:
    return mark_safe("".join(f"<li>{_entry_link(h, keep, '')} <bdi>{_html(h.preview)}</bdi></li>" for h in entries))


@register.filter
def count_rows(counts: dict[str, Any]) -> SafeString:
    """The context panel's counts by kind, a table row each (built here for the same reason as
    step_row: a dozen rows through the template engine were ~0.3 ms of every frame). A kind is
    the source's own name for an AgentLens session: escaped like any recorded text."""
    return mark_safe(
        "".join(
            f'<tr><td><span aria-hidden="true">{_html(kind_icon(kind))}</span> <bdi>{_html(kind)}</bdi></td>'
            f'<td class="num">{_html(n)}</td></tr>'
            for kind, n in counts.items()
        )
    )
