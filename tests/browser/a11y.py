"""axe-core in the browser tests: the vendored static/vendor/axe.min.js run on a page, failing
with every serious or critical violation listed.

The pages never load axe: a test evaluates its source through the DevTools protocol, which our
CSP (script-src 'self', no inline scripts) does not govern, so the page is checked under the
same policy it is served with."""

from __future__ import annotations

from pathlib import Path

from playwright.sync_api import Page

AXE = Path(__file__).resolve().parents[2] / "static" / "vendor" / "axe.min.js"
FAILING_IMPACTS = ("serious", "critical")
# WCAG 2.1 A and AA, and axe's best practices (landmarks, one main, headings, region).
TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22aa", "best-practice"]


def axe_violations(page: Page) -> list[dict]:
    """axe's violations on the page as it is now (the whole document)."""
    if not page.evaluate("typeof window.axe === 'object'"):
        page.evaluate(AXE.read_text(encoding="utf-8") + "\n;void 0")
    return page.evaluate(
        "tags => axe.run(document, {runOnly: {type: 'tag', values: tags}, resultTypes: ['violations']})"
        ".then(r => r.violations.map(v => ({id: v.id, impact: v.impact, help: v.help,"
        " nodes: v.nodes.map(n => ({target: n.target.join(' '), impact: n.impact, summary: n.failureSummary}))})))",
        TAGS,
    )


def describe(violations: list[dict]) -> str:
    lines = []
    for v in violations:
        lines.append(f"{v['id']} ({v['impact']}): {v['help']}")
        for node in v["nodes"][:15]:
            summary = " ".join((node["summary"] or "").split())[:300]
            lines.append(f"    {node['target']}  -- {summary}")
        if len(v["nodes"]) > 15:
            lines.append(f"    ... and {len(v['nodes']) - 15} more")
    return "\n".join(lines)


def accessibility_problems(page: Page, name: str) -> str:
    """The page's serious or critical axe violations as a report ("" when there are none)."""
    failing = [v for v in axe_violations(page) if v["impact"] in FAILING_IMPACTS]
    if not failing:
        return ""
    return f"axe on the {name}: {len(failing)} serious or critical violation(s)\n{describe(failing)}"


def assert_accessible(page: Page, name: str) -> None:
    """Fail listing each serious or critical axe violation on the page (rule, impact, targets, help)."""
    problems = accessibility_problems(page, name)
    assert not problems, problems
