"""The player's markup built in Python (replay_tags) is what the template loops it replaced wrote,
escaping included: kinds and counts can be a source's own hostile text."""

from __future__ import annotations

from django.template import engines

from sessions_app.templatetags.replay_tags import count_rows

# The loop count_rows replaced in includes/context_panel.html.
COUNTS_LOOP = (
    '{% load replay_tags l10n %}{% localize off %}{% for kind, n in counts.items %}<tr><td><span aria-hidden="true">'
    '{{ kind|kind_icon }}</span> <bdi>{{ kind }}</bdi></td><td class="num">{{ n }}</td></tr>{% endfor %}'
    "{% endlocalize %}"
)


def test_count_rows_match_the_template_loop_and_escape():
    counts = {"llm_call": 12, "tool_error": 1234567, '<img src=x onerror=alert(1)>"&': 3, "custom": 2.5}
    expected = engines["django"].from_string(COUNTS_LOOP).render({"counts": counts})
    assert str(count_rows(counts)) == expected
    assert "<img" not in expected and "&lt;img src=x onerror=alert(1)&gt;&quot;&amp;" in expected
    assert count_rows({}) == ""
