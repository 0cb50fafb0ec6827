"""Every reference a page makes to one of its own elements (a label's `for`, `aria-describedby`,
`aria-labelledby`, `aria-controls`) names an element that is there: Django's forms describe a
field by `<id>_helptext`, which a template writing its own help text did not give (the walkthrough
found the retention field described by nothing)."""

from __future__ import annotations

from html.parser import HTMLParser

import pytest
from django.test import Client

from sessions_app import tours
from sessions_app.access import Actor
from sessions_app.models import Project, Role

from .builders_dashboard import build_session, conversation_events
from .builders_teams import member

REFERENCES = ("for", "aria-describedby", "aria-labelledby", "aria-controls")


class References(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.refs: list[tuple[str, str, str]] = []  # (tag, attribute, id)

    def handle_starttag(self, tag, attrs):
        found = dict(attrs)
        if found.get("id"):
            self.ids.add(found["id"])
        for name in REFERENCES:
            for ref in (found.get(name) or "").split():
                self.refs.append((tag, name, ref))


@pytest.fixture
def admin_client(db) -> tuple[Client, dict]:
    project = Project.get_default()
    admin = member("adm", project, Role.ADMIN)
    session = build_session(conversation_events(turns=2), source_session_id="talk")
    tour = tours.create_tour(actor=Actor(user=admin), project=project, title="A walk")
    client = Client()
    client.force_login(admin)
    return client, {"slug": project.slug, "session": session.pk, "tour": tour.pk}


def test_every_element_a_page_refers_to_is_on_it(admin_client):
    client, made = admin_client
    slug = made["slug"]
    pages = [
        "/sessions/", f"/sessions/{made['session']}/", f"/sessions/{made['session']}/share-links/", "/projects/",
        f"/projects/{slug}/", f"/projects/{slug}/redaction/", f"/projects/{slug}/audit/", "/account/keys/",
        f"/projects/{slug}/learn/", f"/tours/{made['tour']}/", "/imports/", "/search/?q=x",
    ]  # fmt: skip
    missing = []
    for path in pages:
        response = client.get(path)
        assert response.status_code == 200, path
        page = References()
        page.feed(response.content.decode())
        missing += [f"{path}: <{tag} {name}={ref!r}>" for tag, name, ref in page.refs if ref not in page.ids]
    assert not missing, "\n".join(missing)
