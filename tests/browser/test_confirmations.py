"""Destructive forms that load a page (no htmx, so no hx-confirm) ask first in real Chromium
(new-user review, 2026-11-26): deleting a whole tour and removing a project member. Dismissed,
nothing happens; accepted, the form is sent."""

from __future__ import annotations

import pytest

from sessions_app.models import Membership, Project, Role, Tour

from ..builders_teams import member
from .conftest import log_in

pytestmark = pytest.mark.browser


def test_deleting_a_tour_and_removing_a_member_ask_first(watched, analyst):
    page, _ = watched
    default = Project.get_default()
    member("analyst", default, Role.ADMIN)
    member("bob", default, Role.VIEWER)
    tour = Tour.objects.create(project=default, title="Onboarding")
    answers = ["dismiss"]
    asked: list[str] = []

    def on_dialog(dialog) -> None:
        asked.append(dialog.message)
        dialog.dismiss() if answers[-1] == "dismiss" else dialog.accept()

    page.on("dialog", on_dialog)
    log_in(page, f"/tours/{tour.pk}/")
    page.click("#tour-delete-form button[type=submit]")
    page.wait_for_timeout(500)
    assert asked == ["Delete the tour “Onboarding” and its stops?"]
    assert Tour.objects.filter(pk=tour.pk).exists() and page.url.endswith(f"/tours/{tour.pk}/")
    answers.append("accept")
    with page.expect_navigation():
        page.click("#tour-delete-form button[type=submit]")
    assert not Tour.objects.filter(pk=tour.pk).exists()

    page.goto("/projects/default/")
    answers.append("dismiss")
    remove = page.locator('tr[data-member="bob"] .member-remove-form button[type=submit]')
    remove.click()
    page.wait_for_timeout(500)
    assert asked[-1] == "Remove bob from Default?"
    assert Membership.objects.filter(user__username="bob").exists()
    answers.append("accept")
    with page.expect_navigation():
        remove.click()
    assert not Membership.objects.filter(user__username="bob").exists()
    assert page.locator('tr[data-member="bob"]').count() == 0
