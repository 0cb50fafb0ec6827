"""A NUL character in what the team, comment and sign-off endpoints store is a 400 naming the
field (PostgreSQL refuses NUL in text; it must never reach it as a 500)."""

from __future__ import annotations

import pytest
from django.test import Client

from sessions_app.models import Role

from .builders_teams import acme, member  # noqa: F401  (fixtures)


@pytest.fixture
def admin(acme) -> Client:
    client = Client()
    client.force_login(member("ada", acme, Role.ADMIN))
    return client


def test_nul_in_bodies_and_paths_is_refused_before_the_database(admin, make_session, acme):
    from sessions_app.models import Session

    session = make_session(events=3)
    Session.objects.filter(pk=session.pk).update(project=acme)
    sent = [
        admin.post(f"/api/sessions/{session.pk}/comments", {"seq": 1, "body": "a\x00b"}, content_type="application/json"),
        admin.post(f"/api/sessions/{session.pk}/reviews", {"verdict": "rejected", "note": "a\x00b"},
                   content_type="application/json"),
        admin.post("/api/projects", {"name": "x\x00y"}, content_type="application/json"),
        admin.post("/api/projects/acme/members", {"username": "a\x00b", "role": "viewer"},
                   content_type="application/json"),
    ]  # fmt: skip
    for response in sent:
        assert response.status_code == 400 and "NUL" in response.json()["detail"], response.content
    assert admin.delete("/api/projects/acme/members/a%00b").status_code == 400
    assert admin.get("/api/projects/a%00b/members").status_code == 404


@pytest.mark.parametrize(
    "hidden", ["\u202e", "\u200b", "\u2066", "\ufeff", "\x07", "\u061c", "\u00ad", "\u3164", "\u2028", "\U000e0041"]
)
def test_a_project_name_hiding_or_turning_what_a_reader_sees_is_refused(admin, client, hidden):
    # "Acme‮lanretni" reads as another name in every list; a zero-width space makes a twin.
    name = f"Acme{hidden}internal"
    answer = admin.post("/api/projects", {"name": name, "slug": "twin"}, content_type="application/json")
    assert answer.status_code == 400
    assert f"name: no invisible or direction-changing characters (U+{ord(hidden):04X})" in answer.json()["detail"]
    page = admin.post("/projects/", {"name": name, "slug": "twin"})
    assert "no invisible or direction-changing characters" in page.content.decode()
    from sessions_app.models import Project

    assert not Project.objects.filter(slug="twin").exists()
    # Names written with a zero-width non-joiner (Persian, Indic scripts) are names.
    fine = admin.post("/api/projects", {"name": "می\u200cخواهم", "slug": "fa"}, content_type="application/json")
    assert fine.status_code == 201, fine.content
