"""A team in real headless Chromium: a project admin creates a project, adds a member with a
role; the member sees only that project's sessions; the admin finds the addition in the
project's audit log. Every page stays on our own server with no console error (conftest.Watch)."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import Page

from sessions_app.canonical import SessionMeta
from sessions_app.ingest.writer import create_session
from sessions_app.models import Project, Role, Session

from ..builders_teams import member
from .conftest import PASSWORD

pytestmark = pytest.mark.browser


def sign_in(page: Page, username: str, next_path: str) -> None:
    page.context.clear_cookies()
    page.goto(next_path)
    assert "/accounts/login/" in page.url
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("form button[type=submit]")
    page.wait_for_url(f"**{next_path}")


@pytest.fixture
def two_projects(transactional_db) -> tuple[Project, Project]:
    red, blue = Project.objects.create(name="Red team", slug="red"), Project.objects.create(name="Blue", slug="blue")
    member("ada", red, Role.ADMIN)
    member("ada", blue, Role.ADMIN)
    get_user_model().objects.create_user(username="bob", password=PASSWORD)  # in no project yet
    for project in (red, blue):
        create_session(project=project, source_format="canonical", status=Session.Status.COMPLETED,
                       meta=SessionMeta(source_session_id=f"{project.slug}-run"))  # fmt: skip
    return red, blue


def test_admin_adds_a_member_who_sees_only_that_project_and_the_audit_log_shows_it(watched, two_projects):
    page, _ = watched
    # The admin creates a project from the projects page and lands on it as its admin.
    sign_in(page, "ada", "/projects/")
    assert page.locator('tr[data-project="red"]').is_visible() and page.locator('tr[data-project="blue"]').is_visible()
    page.fill("#project-form [name=name]", "Green <team>")
    page.fill("#project-form [name=slug]", "green")
    page.click("#project-form button[type=submit]")
    page.wait_for_url("**/projects/green/")
    assert page.locator("#project-title").text_content() == "Green <team>"
    assert page.locator("#my-role").text_content() == "Admin"

    # On the red project's page, the admin adds bob as a viewer.
    page.goto("/projects/red/")
    page.fill("#member-form [name=username]", "bob")
    page.select_option("#member-form [name=role]", "viewer")
    page.click("#member-form button[type=submit]")
    page.wait_for_url("**/projects/red/")
    assert page.locator('tr[data-member="bob"] .badge').text_content() == "Viewer"

    # bob sees the red project's session and not the blue one's, and no audit link (a viewer).
    sign_in(page, "bob", "/sessions/")
    table = page.locator("#session-table")
    assert "red-run" in table.text_content() and "blue-run" not in table.text_content()
    page.click("header nav >> text=Projects")
    page.wait_for_url("**/projects/")
    assert page.locator("#project-table tbody tr").count() == 1
    page.click('tr[data-project="red"] a >> nth=0')
    page.wait_for_url("**/projects/red/")
    assert page.locator("#my-role").text_content() == "Viewer" and page.locator("text=Audit log").count() == 0

    # The admin opens the audit log, filters it to member additions (htmx, the URL follows).
    sign_in(page, "ada", "/projects/red/")
    page.click("text=Audit log")
    page.wait_for_url("**/projects/red/audit/")
    page.select_option("#audit-filters [name=action]", "member.add")
    page.wait_for_url("**/projects/red/audit/?*action=member.add*")
    rows = page.locator("#audit-entries tbody tr")
    assert rows.count() == 1
    assert [rows.first.locator("td").nth(i).text_content() for i in (2, 3, 4)] == ["ada", "member.add", "user:bob"]
    page.click("#audit-verify-form button")
    page.locator("#log-verification .badge.ok").wait_for()
    assert "log intact" in page.locator("#log-verification").text_content()
    # Someone edits that entry in the database: the verification (htmx) names it and its row is marked.
    from sessions_app.models import AuditEntry

    edited = AuditEntry.objects.of_project(Project.objects.get(slug="red")).get(action="member.add")
    AuditEntry.objects.filter(pk=edited.pk).update(detail='{"role": "admin"}')
    page.click("#audit-verify-form button")
    page.locator("#log-verification .badge.fail").wait_for()
    assert page.locator("tr.broken-entry").get_attribute("id") == f"entry-{edited.seq}"
    page.click("#log-verification a.badge.fail")
    page.wait_for_url(f"**#entry-{edited.seq}")
