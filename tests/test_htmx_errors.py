"""How every page tells htmx to treat refusals and failures (templates/base.html): a refusal
(400, 403, 404, 409, 422) comes with a partial saying why and is swapped in; anything else
from 4xx and 5xx is not swapped over the page and shows in the alert region instead. The
browser side of it: tests/browser/test_accessibility.py."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


class Elements(HTMLParser):
    """Each start tag's attributes, by tag name."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.found.append((tag, dict(attrs)))


def _elements(html: str) -> list[tuple[str, dict[str, str | None]]]:
    parser = Elements()
    parser.feed(html)
    return parser.found


@pytest.fixture
def page(client, db) -> list[tuple[str, dict[str, str | None]]]:
    # The sign-in page: base.html as anyone gets it.
    return _elements(client.get("/accounts/login/").content.decode())


def _handling(page: list[tuple[str, dict[str, str | None]]], status: int) -> dict:
    """The rule htmx applies to `status`: the first whose `code` matches (as htmx does, with
    RegExp.test on the status as text)."""
    config = next(json.loads(a["content"]) for tag, a in page if tag == "meta" and a.get("name") == "htmx-config")
    return next(rule for rule in config["responseHandling"] if re.search(rule["code"], str(status)))


@pytest.mark.parametrize("status", [400, 403, 404, 409, 422])
def test_a_refusal_is_swapped_in_and_is_no_htmx_error(page, status):
    rule = _handling(page, status)
    assert rule["swap"] is True and not rule.get("error")


@pytest.mark.parametrize("status", [401, 405, 413, 429, 500, 502, 503])
def test_other_client_errors_and_server_errors_are_not_swapped_but_reported(page, status):
    rule = _handling(page, status)
    assert rule["swap"] is False and rule["error"] is True


def test_successes_swap_and_no_content_does_not(page):
    assert _handling(page, 200)["swap"] is True and _handling(page, 302)["swap"] is True
    assert _handling(page, 204)["swap"] is False


def test_every_page_has_the_hidden_alert_region_that_failed_requests_fill(page):
    region = [a for tag, a in page if a.get("id") == "request-error"]
    assert len(region) == 1 and region[0]["role"] == "alert" and "hidden" in region[0]


def test_axe_is_vendored_for_the_tests_and_linked_from_no_page():
    axe = ROOT / "static" / "vendor" / "axe.min.js"
    assert axe.read_text(encoding="utf-8").startswith("/*! axe v4.14.1")
    assert "| `axe.min.js` | axe-core | 4.14.1 |" in (ROOT / "static" / "vendor" / "README.md").read_text()
    linking = [p for p in (ROOT / "templates").rglob("*.html") if "axe" in p.read_text(encoding="utf-8")]
    assert linking == []
