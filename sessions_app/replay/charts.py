"""Plotly figures as plain dicts (data + layout), handed to plotly.js through json_script.

Reads are bounded whatever the session's length: the curves sample at most MAX_POINTS rows by
an indexed `IN (...)` lookup (running totals make the samples exact for cumulative values and
per-bucket averages), and call latencies are reduced to per-bucket maxima by the database.
Every point carries the seq it stands for in `customdata`, so clicking it jumps the player.

plotly.js reads hover text (`text`, `hovertemplate`, names) as its own small HTML: tags it knows
are drawn (links, styles) and entities are decoded into plain text nodes. So every string the
agent wrote goes in escaped (`hover_text`): a tool named `<img src=x onerror=...>` shows as
those characters, never as markup.
"""

from __future__ import annotations

from html import escape
from typing import Any

from django.db.models import Count, F, Max, Min
from django.db.models.expressions import CombinedExpression

from ..canonical import Kind
from ..models import Event, Session
from ..models.planning import planned_for_values
from .timeline import boundaries

MAX_POINTS = 400
_LAYOUT: dict[str, Any] = {
    "height": 220,
    "margin": {"l": 52, "r": 12, "t": 48, "b": 40},
    "hovermode": "closest",
    "showlegend": True,
    "legend": {"orientation": "h", "x": 1, "xanchor": "right", "y": 1.02, "yanchor": "bottom"},
    "font": {"size": 11},
    "paper_bgcolor": "rgba(0,0,0,0)",
}
_CONFIG: dict[str, Any] = {"displaylogo": False, "responsive": True, "modeBarButtonsToRemove": ["sendDataToCloud"]}


def player_figures(*, session: Session) -> dict[str, Any]:
    """All charts of the player's summary area: {"config": ..., "figures": {name: figure}}."""
    steps = _step_samples(session)
    figures = {
        "reward": reward_figure(steps=steps),
        "cost": cost_figure(session=session),
        "tokens": tokens_figure(steps=steps),
        "latency": latency_figure(session=session),
    }
    for name, note in _EMPTY.items():
        if not any(trace["x"] for trace in figures[name]["data"]):
            _note(figures[name]["layout"], note)
    return {"config": _CONFIG, "figures": figures}


# What an empty chart says instead of bare axes (the cost chart says itself that nothing had a
# price, the only way it can be empty).
_EMPTY = {
    "reward": "no steps: rewards are recorded per step",
    "tokens": "no steps: tokens are counted per step",
    "latency": "no call with its response: latency runs from a call to its answer",
}


def _note(layout: dict[str, Any], text: str) -> None:
    """A line of text in the middle of a chart, unless it already has one."""
    layout.setdefault("annotations", [{"text": text, "showarrow": False, "xref": "paper", "yref": "paper",
                                       "x": 0.5, "y": 0.5}])  # fmt: skip


def hover_text(text: str) -> str:
    """An agent-written string as plotly hover text: escaped, shown as written. Quotes stay:
    plotly decodes only a few entities (&lt; &gt; &amp;, not &quot;), and with `<` escaped no
    quote can open anything."""
    return escape(text, quote=False)


def _layout(title: str, x: str, y: str) -> dict[str, Any]:
    return {**_LAYOUT, "title": {"text": title, "x": 0, "font": {"size": 13}},
            "xaxis": {"title": {"text": x}}, "yaxis": {"title": {"text": y}}}  # fmt: skip


def _step_samples(session: Session) -> list[tuple[int, int, float | None, float, int]]:
    """(step position, seq, reward, cumulative reward, tokens so far) at up to MAX_POINTS steps."""
    positions = boundaries(session.step_count, MAX_POINTS)
    with planned_for_values():  # the steps' own index, not the session's every event (planning.py)
        return list(
            Event.objects.filter(session=session, step_pos__in=positions)
            .order_by("step_pos")
            .values_list("step_pos", "seq", "reward", "reward_total", "tokens_total")
        )


# The axes count as the player's pages do, from 1 (step position + 1, seq + 1); `customdata` is
# the seq a click jumps to.


def reward_figure(*, steps: list[tuple[int, int, float | None, float, int]]) -> dict[str, Any]:
    x = [pos + 1 for pos, *_ in steps]
    seqs = [seq for _, seq, *_ in steps]
    return {
        "data": [
            {"type": "scatter", "mode": "markers", "name": "reward", "x": x,
             "y": [reward for _, _, reward, _, _ in steps], "customdata": seqs,
             "hovertemplate": "step %{x}: reward %{y}<extra>seq %{customdata}</extra>"},
            {"type": "scatter", "mode": "lines", "name": "cumulative", "x": x,
             "y": [total for *_, total, _ in steps], "customdata": seqs,
             "hovertemplate": "step %{x}: cumulative %{y}<extra>seq %{customdata}</extra>"},
        ],
        "layout": _layout("Reward", "step", "reward"),
    }  # fmt: skip


def tokens_figure(*, steps: list[tuple[int, int, float | None, float, int]]) -> dict[str, Any]:
    """Tokens per step; when steps are sampled, the average over the steps each point stands for."""
    x, y, seqs = [], [], []
    previous_pos, previous_tokens = -1, 0
    for pos, seq, _, _, tokens in steps:
        x.append(pos + 1)
        y.append(round((tokens - previous_tokens) / (pos - previous_pos), 2))
        seqs.append(seq)
        previous_pos, previous_tokens = pos, tokens
    return {
        "data": [{"type": "bar", "name": "tokens per step", "x": x, "y": y, "customdata": seqs,
                  "hovertemplate": "step %{x}: %{y} tokens<extra>seq %{customdata}</extra>"}],
        "layout": _layout("Tokens per step", "step", "tokens"),
    }  # fmt: skip


def cost_figure(*, session: Session) -> dict[str, Any]:
    if not session.cost_known:
        # No event had a price: a flat line at $0 would say it was free.
        layout = _layout("Cumulative cost", "event", "USD")
        _note(layout, "unpriced: no event of this session has a known price")
        return {"data": [], "layout": layout}
    ends = boundaries(session.event_count, MAX_POINTS)
    with planned_for_values():  # a list of seqs: planning.py says why
        rows = list(
            Event.objects.filter(session=session, seq__in=ends)
            .order_by("seq")
            .values_list("seq", "cost_total", "elapsed_ms")
        )
    return {
        "data": [{"type": "scatter", "mode": "lines", "name": "cumulative cost (USD)",
                  "x": [seq + 1 for seq, _, _ in rows], "y": [round(cost, 6) for _, cost, _ in rows],
                  "customdata": [seq for seq, _, _ in rows],
                  "text": [f"{(ms or 0) / 1000:.1f} s" for *_, ms in rows],
                  "hovertemplate": "event %{x} at %{text}: $%{y}<extra></extra>"}],
        "layout": _layout("Cumulative cost", "event", "USD"),
    }  # fmt: skip


def latency_figure(*, session: Session) -> dict[str, Any]:
    """Latency of each LLM and tool call (call -> response); past MAX_POINTS calls, the slowest
    call of each seq bucket (the database groups them; Python never sees every call)."""
    calls = Event.objects.filter(
        session=session, kind__in=[Kind.LLM_CALL, Kind.TOOL_CALL], pair_duration_ms__isnull=False
    )
    traces = []
    for kind, name in ((Kind.LLM_CALL, "LLM calls"), (Kind.TOOL_CALL, "tool calls")):
        expected = session.llm_calls if kind == Kind.LLM_CALL else session.tool_calls
        of_kind = calls.filter(kind=kind)
        if expected <= MAX_POINTS:
            rows = list(of_kind.order_by("seq").values_list("seq", "pair_duration_ms", "tool")[:MAX_POINTS])
            label = [hover_text(tool or kind) for *_, tool in rows]
        else:
            width = max(1, -(-session.event_count // MAX_POINTS))  # ceil: at most MAX_POINTS buckets
            grouped = (
                of_kind.annotate(bucket=_bucket(width))
                .values("bucket")
                .annotate(first=Min("seq"), slowest=Max("pair_duration_ms"), n=Count("id"))
                .order_by("bucket")
            )
            rows = [(g["first"], g["slowest"], g["n"]) for g in grouped]
            label = [f"slowest of {n}" for *_, n in rows]
        traces.append(
            {"type": "scatter", "mode": "markers", "name": name,
             "x": [seq + 1 for seq, _, _ in rows], "y": [round(ms, 1) for _, ms, _ in rows],
             "customdata": [seq for seq, _, _ in rows], "text": label,
             "hovertemplate": "event %{x}: %{y} ms (%{text})<extra></extra>"}
        )  # fmt: skip
    return {"data": traces, "layout": _layout("Call latency", "event", "ms")}


def _bucket(width: int) -> CombinedExpression:
    # Integer division on both backends (bigint / int).
    return F("seq") / width
