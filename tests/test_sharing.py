"""Share links: made by maintainers with a token shown once and stored hashed, opened at /s/<token>
without an account, read-only and narrowed to the one session (or tour) they name, counted and
audited on every use, and a plain 404 the moment they are revoked or expire."""

from __future__ import annotations

import hashlib
import re
from datetime import timedelta
from pathlib import Path

import orjson
import pytest
from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from sessions_app import access, comments, reviews, sharing
from sessions_app.access import Actor
from sessions_app.canonical import SessionMeta
from sessions_app.ingest.writer import append_events, create_session, finish_session, set_checkpoint
from sessions_app.jobs import run_import
from sessions_app.models import (
    AuditEntry,
    Checkpoint,
    Comment,
    Membership,
    Project,
    Review,
    Role,
    Session,
    ShareLink,
    Tour,
    TourStop,
)

from .builders_teams import acme, key_of, member  # noqa: F401  (fixtures)
from .conftest import synthetic_events

pytestmark = pytest.mark.django_db

ROOT = Path(settings.BASE_DIR)
FIXTURES = ROOT / "tests" / "fixtures"


def _session(project, task: str, events: int = 12) -> Session:
    session = create_session(project=project, source_format="canonical", meta=SessionMeta(task=task))
    append_events(session=session, events=synthetic_events(events))
    finish_session(session=session)
    session.refresh_from_db()
    return session


@pytest.fixture
def shown(acme) -> Session:
    return _session(acme, "SHOWN-TASK")


@pytest.fixture
def hidden(acme) -> Session:
    return _session(acme, "HIDDEN-TASK")


@pytest.fixture
def mia(acme):
    return member("mia", acme, Role.MAINTAINER)


def _signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _api_create(client: Client, path: str, **body):
    return client.post(path, orjson.dumps(body), content_type="application/json")


def _link(session: Session, maintainer, **options) -> tuple[ShareLink, str]:
    return sharing.create_link(actor=Actor(user=maintainer), session=session, **options)


def _visitor(token: str) -> Client:
    visitor = Client()
    response = visitor.get(f"/s/{token}")
    assert response.status_code == 302, response.status_code
    return visitor


def _player(session: Session) -> str:
    return reverse("sessions:player", args=[session.pk])


# --- making, listing, revoking --------------------------------------------------------------


def test_the_panel_names_each_link_it_offers_to_revoke_and_lands_on_a_new_one(shown, mia):
    # Several alike "revoke" buttons, and a question that named no link; the new address came
    # with nothing said and the focus left on "Create link".
    _link(shown, mia, note="for the auditors")
    client = _signed_in(mia)
    made = client.post(f"/sessions/{shown.pk}/share-links/", {"expires_in_days": 7, "note": ""}, HTTP_HX_REQUEST="true")
    html = made.content.decode()
    assert re.search(r'id="share-created-url"[^>]* readonly autofocus>', html)
    assert 'hx-confirm="Revoke the link “for the auditors” by mia, expiring ' in html
    assert 'revoke<span class="visually-hidden"> the link “for the auditors” by mia</span>' in html
    assert 'revoke<span class="visually-hidden"> the link “(no note)” by mia</span>' in html


def test_a_links_note_cannot_turn_the_text_after_it_in_either_list(shown, acme, mia):
    # "ops team \u202e" had the row read "dewolla tropxe · sesu 0 · CTU …": expiry and export unreadable.
    _link(shown, mia, note="ops team \u202e", allow_export=True)
    client = _signed_in(member("ada", acme, Role.ADMIN))
    for page in (f"/sessions/{shown.pk}/share-links/", f"/projects/{acme.slug}/"):
        html = client.get(page).content.decode()
        assert "\u202e" not in html and "<bdi>ops team \\u202e</bdi>" in html, page


def test_the_token_is_in_the_create_answer_only_and_stored_as_its_sha256(shown, mia):
    client = _signed_in(mia)
    response = _api_create(client, f"/api/sessions/{shown.pk}/share-links", note="for the new hire")
    assert response.status_code == 201, response.content
    body = response.json()
    token = body["url"].removeprefix("/s/")
    assert body["url"] == f"/s/{token}" and len(token) >= 43
    link = ShareLink.objects.get(pk=body["id"])
    assert link.token_hash == hashlib.sha256(token.encode()).hexdigest() != token
    assert (link.session_id, link.project_id, link.note, link.created_by_name) == (shown.pk, shown.project_id,
                                                                                   "for the new hire", "mia")  # fmt: skip
    listed = client.get(f"/api/sessions/{shown.pk}/share-links")
    assert listed.status_code == 200
    assert [row["id"] for row in listed.json()] == [link.pk] and "url" not in listed.json()[0]
    assert token not in listed.content.decode() and link.token_hash not in listed.content.decode()
    created = AuditEntry.objects.get(action="share_link.create")
    assert (created.actor, created.target) == ("mia", f"session:{shown.pk}")
    assert token not in created.detail and link.token_hash not in created.detail


def test_a_link_lasts_seven_days_unless_told_and_from_one_to_ninety(shown, mia):
    client = _signed_in(mia)
    before = timezone.now()
    body = _api_create(client, f"/api/sessions/{shown.pk}/share-links").json()
    link = ShareLink.objects.get(pk=body["id"])
    assert timedelta(days=7) <= link.expires_at - before < timedelta(days=7, minutes=1)
    assert (body["allow_export"], body["state"], body["use_count"]) == (False, "active", 0)
    for days in (0, 91, -3, True, "7"):  # true and "7" are no numbers (pydantic read them as 1 and 7)
        refused = _api_create(client, f"/api/sessions/{shown.pk}/share-links", expires_in_days=days)
        assert refused.status_code == 400 and "expires_in_days" in refused.json()["detail"], days
        if isinstance(days, bool | str):
            assert refused.json()["detail"].endswith(f"expected a number, got {'true' if days is True else 'a string'}")
    assert _api_create(client, f"/api/sessions/{shown.pk}/share-links", expires_in_days=90).status_code == 201
    long_note = _api_create(client, f"/api/sessions/{shown.pk}/share-links", note="x" * 501)
    assert long_note.status_code == 400 and long_note.json()["detail"].startswith("note:")
    assert ShareLink.objects.count() == 2


def test_only_maintainers_make_list_and_revoke_links_and_outsiders_learn_nothing(shown, mia, acme):
    link, _ = _link(shown, mia)
    viewer = _signed_in(member("vic", acme, Role.VIEWER))
    assert _api_create(viewer, f"/api/sessions/{shown.pk}/share-links").status_code == 403
    assert viewer.get(f"/api/sessions/{shown.pk}/share-links").status_code == 403
    assert viewer.delete(f"/api/share-links/{link.pk}").status_code == 403
    assert viewer.post(reverse("sessions:share_links", args=[shown.pk])).status_code == 403
    outsider = _signed_in(member("otto", None, Role.ADMIN))  # admin of another project
    assert _api_create(outsider, f"/api/sessions/{shown.pk}/share-links").status_code == 404
    assert outsider.delete(f"/api/share-links/{link.pk}").status_code == 404
    assert outsider.post(reverse("sessions:share_link_revoke", args=[link.pk])).status_code == 404
    read_only = key_of(mia, read_only=True)
    refused = _api_create(Client(headers={"authorization": f"Bearer {read_only}"}),
                          f"/api/sessions/{shown.pk}/share-links")  # fmt: skip
    assert refused.status_code == 403
    assert ShareLink.objects.count() == 1 and ShareLink.objects.get().revoked_at is None


# --- a visit --------------------------------------------------------------------------------


def test_opening_a_link_counts_it_audits_it_as_the_link_and_opens_the_player(shown, mia):
    link, token = _link(shown, mia)
    visitor = Client()
    response = visitor.get(f"/s/{token}")
    assert response.status_code == 302 and response.url == _player(shown)
    visitor.get(f"/s/{token}")
    link.refresh_from_db()
    assert link.use_count == 2 and link.last_used_at is not None
    uses = AuditEntry.objects.filter(action="share_link.use").order_by("seq")
    assert [(u.actor, u.target, u.ip, u.project_id) for u in uses] == [
        (f"share:{link.pk}", f"session:{shown.pk}", "127.0.0.1", shown.project_id)
    ] * 2
    assert visitor.session[access.SHARE_LINKS_KEY] == [link.pk]
    page = visitor.get(_player(shown))
    assert page.status_code == 200 and "SHOWN-TASK" in page.content.decode()


def test_an_unknown_token_is_the_plain_404_of_any_address(shown, mia):
    _link(shown, mia)
    for token in ("nope", "x" * 43, "x" * 5000):
        response = Client().get(f"/s/{token}")
        assert response.status_code == 404
        assert b"share" not in response.content.lower()
        assert token.encode() not in response.content  # a mistyped token is not printed back
    assert not AuditEntry.objects.filter(action="share_link.use").exists()


def test_a_refused_links_token_stays_out_of_the_servers_log(shown, mia, caplog):
    # Revoked, expired or mistyped, a token is a secret: Django's request log ("Not Found:
    # /s/<token>") gets the path without it, and so does every handler (a logger filter).
    link, token = _link(shown, mia)
    sharing.revoke_link(actor=Actor(user=mia), link=link)
    with caplog.at_level("WARNING"):
        assert Client().get(f"/s/{token}").status_code == 404
        assert Client().get(f"/s/{token}/more?x=1").status_code == 404
        for shape in (f"/s//{token}", f"/s/%20{token}", f"/S/{token}", f"/s/./{token}", f"/s%5C{token}"):
            assert Client().get(shape).status_code == 404, shape
        # A POST is refused by the CSRF check first, which logs the path on its own logger.
        assert Client(enforce_csrf_checks=True).post(f"/s/{token}").status_code == 403
    logged = [record.getMessage() for record in caplog.records if record.name.startswith("django.")]
    assert logged == ["Not Found: /s/[token]"] * 7 + ["Forbidden (CSRF cookie not set.): /s/[token]"], logged
    assert token not in caplog.text


def test_the_visitor_sees_the_recording_and_not_the_teams_work(shown, mia):
    set_checkpoint(session=shown, name="the-turn", seq=3, created_by="mia")
    mia_actor = Actor(user=mia)
    comments.create_comment(actor=mia_actor, session=shown, seq=0, body="TEAM-ONLY-COMMENT")
    reviews.sign_off(session=shown, reviewer=mia_actor, verdict="approved", note="TEAM-ONLY-NOTE")
    _, token = _link(shown, mia, note="NOTE-FOR-MAINTAINERS")
    visitor = _visitor(token)
    page = visitor.get(_player(shown)).content.decode()
    assert "SHOWN-TASK" in page and "the-turn" in page and "shared with you" in page
    for absent in ("TEAM-ONLY-COMMENT", "TEAM-ONLY-NOTE", "NOTE-FOR-MAINTAINERS", 'id="checkpoint-form"',
                   'id="sign-off-form"', 'id="discussion"', 'id="comment-threads"', 'id="share-links"',
                   'class="exports"', 'href="/api/', 'href="/sessions/"', "Log out", 'href="/projects/"', "mia",
                   "needs the reviewer role"):  # fmt: skip
        assert absent not in page, absent
    frame = visitor.get(_player(shown), {"step": 0}, HTTP_HX_REQUEST="true")
    assert frame.status_code == 200 and "TEAM-ONLY-COMMENT" not in frame.content.decode()
    assert 'id="comment-threads"' not in frame.content.decode()
    assert visitor.get(reverse("sessions:search", args=[shown.pk]), {"q": "event"}).status_code == 200
    assert visitor.get(reverse("sessions:charts", args=[shown.pk])).status_code == 200
    # Last verified some minutes ago (the import's own verification): the visitor's runs.
    Session.objects.filter(pk=shown.pk).update(chain_checked_at=timezone.now() - timedelta(minutes=5))
    verified = visitor.post(reverse("sessions:verify", args=[shown.pk]), HTTP_HX_REQUEST="true")
    assert verified.status_code == 200
    entry = AuditEntry.objects.filter(action="session.verify").latest("seq")
    assert entry.actor == f"share:{ShareLink.objects.get().pk}"
    # Again at once: answered with that verification's result, not run again (nor recorded).
    again = visitor.post(reverse("sessions:verify", args=[shown.pk]), HTTP_HX_REQUEST="true")
    assert again.status_code == 200 and "verified at" in again.content.decode()
    assert AuditEntry.objects.filter(action="session.verify").count() == 1
    # A member's verify always runs.
    mia_client = Client()
    mia_client.force_login(mia)
    mia_client.post(reverse("sessions:verify", args=[shown.pk]), HTTP_HX_REQUEST="true")
    assert AuditEntry.objects.filter(action="session.verify").count() == 2


def test_the_visitor_reaches_no_other_session_no_list_and_no_api(shown, hidden, mia):
    _, token = _link(shown, mia)
    visitor = _visitor(token)
    assert visitor.get(_player(hidden)).status_code == 404
    assert visitor.get(_player(hidden), HTTP_HX_REQUEST="true").status_code == 404
    assert visitor.get(reverse("sessions:search", args=[hidden.pk])).status_code == 404
    for page in ("/sessions/", "/", "/projects/", f"/projects/{shown.project.slug}/", "/account/keys/",
                 f"/compare/?a={shown.pk}&b={hidden.pk}"):  # fmt: skip
        response = visitor.get(page)
        assert response.status_code == 302 and response.url.startswith("/accounts/login/"), page
    for path in ("/api/sessions", f"/api/sessions/{shown.pk}", f"/api/sessions/{shown.pk}/export",
                 f"/api/sessions/{shown.pk}/replay"):  # fmt: skip
        assert visitor.get(path).status_code == 401, path


def test_the_visitor_cannot_comment_save_checkpoints_or_sign_off(shown, mia):
    _, token = _link(shown, mia)
    visitor = _visitor(token)
    writes = {
        reverse("sessions:comment_create", args=[shown.pk]): {"seq": 1, "body": "drive-by"},
        reverse("sessions:checkpoint", args=[shown.pk]): {"name": "drive-by", "step": 1},
        reverse("sessions:sign_off", args=[shown.pk]): {"verdict": "approved"},
        reverse("sessions:share_links", args=[shown.pk]): {"expires_in_days": 7},
    }
    for path, data in writes.items():
        response = visitor.post(path, data)
        assert response.status_code == 302 and response.url.startswith("/accounts/login/"), path
    assert not Comment.objects.exists() and not Checkpoint.objects.exists() and not Review.objects.exists()
    assert ShareLink.objects.count() == 1


def test_a_signed_in_outsider_with_a_link_is_its_viewer_on_pages_and_nothing_more(shown, hidden, mia):
    _, token = _link(shown, mia)
    outsider = _signed_in(member("otto", None, Role.ADMIN))
    assert outsider.get(f"/s/{token}").status_code == 302
    page = outsider.get(_player(shown))
    assert page.status_code == 200 and 'id="comment-threads"' not in page.content.decode()
    assert outsider.get(_player(hidden)).status_code == 404
    assert (
        outsider.post(reverse("sessions:comment_create", args=[shown.pk]), {"seq": 1, "body": "x"}).status_code == 403
    )
    assert outsider.post(reverse("sessions:checkpoint", args=[shown.pk]), {"name": "x", "step": 1}).status_code == 403
    assert outsider.post(reverse("sessions:sign_off", args=[shown.pk]), {"verdict": "approved"}).status_code == 403
    assert outsider.post(reverse("sessions:share_links", args=[shown.pk])).status_code == 403
    # Who redacted what is the team's work too: a 404 as outside the project (security sweep).
    assert outsider.get(reverse("sessions:redactions", args=[shown.pk])).status_code == 404
    # The API reads no share grant, with the login cookie or not.
    assert outsider.get(f"/api/sessions/{shown.pk}").status_code == 404
    assert not Comment.objects.exists() and not Checkpoint.objects.exists()


def test_revoking_closes_the_link_and_its_visitors_at_once(shown, mia):
    link, token = _link(shown, mia)
    visitor = _visitor(token)
    assert visitor.get(_player(shown)).status_code == 200
    maintainer = _signed_in(mia)
    assert maintainer.delete(f"/api/share-links/{link.pk}").status_code == 204
    assert maintainer.delete(f"/api/share-links/{link.pk}").status_code == 204  # changes nothing
    page = visitor.get(_player(shown))
    # The visitor is told why a page that opened a moment ago no longer does, and is not sent
    # back to a sessions page that would only ask them to sign in.
    said = page.content.decode()
    assert (
        page.status_code == 404
        and "this page is not one of them, or the link this browser holds was revoked or has expired. Ask whoever sent it for a new one."
        in said
    )
    assert "Back to the sessions" not in said and 'href="/accounts/login/"' in said
    step = visitor.get(_player(shown), HTTP_HX_REQUEST="true")
    assert (
        step.status_code == 404
        and "this page is not one of them, or the link this browser holds was revoked or has expired. Ask whoever sent it for a new one."
        in step.content.decode()
    )
    assert visitor.get(reverse("sessions:charts", args=[shown.pk])).status_code == 404
    assert Client().get(f"/s/{token}").status_code == 404
    # A member's own 404 says nothing about links.
    member_page = maintainer.get(reverse("sessions:player", args=[shown.pk + 1000]))
    assert member_page.status_code == 404 and "share link" not in member_page.content.decode()
    link.refresh_from_db()
    assert link.state == "revoked" and link.revoked_by == "mia"
    revokes = AuditEntry.objects.filter(action="share_link.revoke")
    assert [(r.actor, r.target) for r in revokes] == [("mia", f"session:{shown.pk}")]
    listed = maintainer.get(f"/api/sessions/{shown.pk}/share-links").json()
    assert listed[0]["state"] == "revoked" and listed[0]["revoked_at"]


@pytest.mark.parametrize("change", ["removed", "viewer", "reviewer", "deactivated", "deleted"])
def test_a_link_opens_nothing_once_its_maker_may_no_longer_share(shown, mia, acme, change):
    # A leaving maintainer's 90-day exporting link kept opening the session to anyone holding it.
    link, token = _link(shown, mia, allow_export=True)
    early = _visitor(token)
    ada = member("ada", acme, Role.ADMIN)
    admin = Actor(user=ada)
    from sessions_app import teams

    if change == "removed":
        assert teams.remove_member(actor=admin, project=acme, username="mia") == 1
    elif change in ("viewer", "reviewer"):
        assert teams.set_member(actor=admin, project=acme, username="mia", role=change) == teams.MemberChange(
            "changed", 1
        )
    elif change == "deactivated":
        type(mia).objects.filter(pk=mia.pk).update(is_active=False)
    else:
        mia.delete()
    assert Client().get(f"/s/{token}").status_code == 404
    assert early.get(_player(shown)).status_code == 404
    assert early.get(reverse("sessions:export", args=[shown.pk]) + "?format=original").status_code == 404
    listed = _signed_in(ada).get(f"/api/sessions/{shown.pk}/share-links").json()
    link.refresh_from_db()
    if change in ("removed", "viewer", "reviewer"):
        # Revoked by the team change, and the audit log says why; a role given back later does
        # not reopen it.
        assert listed[0]["state"] == "revoked" and link.revoked_by == "ada"
        [entry] = AuditEntry.objects.filter(action="share_link.revoke")
        detail = orjson.loads(entry.detail)
        assert entry.actor == "ada" and detail["link"] == link.pk
        assert detail["why"] == (
            "its maker mia left the project" if change == "removed" else f"its maker mia is now {change}"
        )
        teams.set_member(actor=admin, project=acme, username="mia", role="maintainer")
        assert Client().get(f"/s/{token}").status_code == 404
    else:
        assert listed[0]["state"] == "maker left" and link.revoked_at is None
        # Its panel says it opens nothing, and still offers to revoke it for good.
        panel = _signed_in(ada).get(reverse("sessions:share_links", args=[shown.pk])).content.decode()
        item = panel[panel.index(f'id="share-link-{link.pk}"') :]
        item = item[: item.index("</li>")]
        assert "opens nothing: its maker may no longer share" in item
        assert f'action="/share-links/{link.pk}/revoke/"' in item
    # The project's list of links still names one a reopened account would reopen (it had not):
    # a deleted maker's never opens again.
    dormant = [one.pk for one in sharing.open_links_of(acme.pk)]
    assert dormant == ([link.pk] if change == "deactivated" else [])
    if change == "deactivated":
        page = _signed_in(ada).get(reverse("sessions:project", args=[acme.slug])).content.decode()
        assert "dormant: opens again if its maker's account reopens" in page


def test_a_superusers_links_go_too_when_the_team_removes_them_so_none_reopens_later(shown, acme):
    # Kept, a link reopened once its maker was no superuser and was added back (the retest).
    boss = member("boss", acme, Role.MAINTAINER)
    type(boss).objects.filter(pk=boss.pk).update(is_superuser=True)
    boss.refresh_from_db()
    _, token = _link(shown, boss)
    ada = Actor(user=member("ada", acme, Role.ADMIN))
    from sessions_app import teams

    teams.remove_member(actor=ada, project=acme, username="boss")
    assert AuditEntry.objects.filter(action="share_link.revoke").count() == 1
    type(boss).objects.filter(pk=boss.pk).update(is_superuser=False)
    teams.set_member(actor=ada, project=acme, username="boss", role="maintainer")
    assert Client().get(f"/s/{token}").status_code == 404


def test_the_api_tells_an_admin_how_many_share_links_a_role_change_or_removal_ended(shown, mia, acme):
    # The page asks first and says how many links ended; the API ended them without a word.
    _link(shown, mia)
    _link(shown, mia)
    admin = Client(HTTP_AUTHORIZATION=f"Bearer {key_of(member('ada', acme, Role.ADMIN))}")
    url = "/api/projects/acme/members"
    demoted = admin.post(url, {"username": "mia", "role": "viewer"}, content_type="application/json")
    assert demoted.status_code == 200 and demoted.json()["linksRevoked"] == 2 and demoted.json()["role"] == "viewer"
    again = admin.post(url, {"username": "mia", "role": "maintainer"}, content_type="application/json")
    assert again.status_code == 200 and again.json()["linksRevoked"] == 0  # a promotion ends none
    _link(shown, mia)
    removed = admin.delete(f"{url}/mia")
    assert removed.status_code == 200 and removed.json() == {"username": "mia", "linksRevoked": 1}


def test_a_link_made_as_its_maker_is_removed_is_refused_not_left_to_reopen(shown, mia, acme):
    # The caller's check read the team before the removal; the link, made after the removal
    # revoked the maker's links, stayed live (and reopened when they were added back).
    from sessions_app import teams

    stale = Actor(user=mia)
    assert stale.role_in(acme.pk) == Role.MAINTAINER  # the request's check, done
    ada = Actor(user=member("ada", acme, Role.ADMIN))
    teams.remove_member(actor=ada, project=acme, username="mia")
    with pytest.raises(access.NotVisible):
        sharing.create_link(actor=stale, session=shown)
    teams.set_member(actor=ada, project=acme, username="mia", role="viewer")
    with pytest.raises(PermissionDenied):  # demoted meanwhile: below sharing
        sharing.create_link(actor=stale, session=shown)
    assert not ShareLink.objects.exists() and not AuditEntry.objects.filter(action="share_link.create").exists()
    teams.set_member(actor=ada, project=acme, username="mia", role="maintainer")
    link, _ = sharing.create_link(actor=stale, session=shown)
    assert link.created_by_name == "mia"


def test_a_superusers_link_opens_though_they_are_no_member(shown, acme):
    # Superusers act as admin of every project (docs/teams.md), so a link one makes opens while
    # they stay one; a mutation dropping that from the link's check passed every test.
    root = type(member("boss", acme, Role.VIEWER)).objects.create_superuser("root", "r@example.org", "pw-root-12345")
    assert not Membership.objects.filter(user=root).exists()
    link, token = _link(shown, root)
    opened = Client().get(f"/s/{token}")
    assert opened.status_code == 302 and opened.url == _player(shown)
    type(root).objects.filter(pk=root.pk).update(is_superuser=False)  # no longer: it opens nothing
    assert Client().get(f"/s/{token}").status_code == 404


def test_a_maintainers_new_role_above_sharing_keeps_their_links_and_the_project_lists_them(shown, mia, acme):
    link, token = _link(shown, mia, note="for the auditors")
    other, _ = _link(shown, mia)
    sharing.revoke_link(actor=Actor(user=mia), link=other)
    ada = member("ada", acme, Role.ADMIN)
    from sessions_app import teams

    assert teams.set_member(actor=Actor(user=ada), project=acme, username="mia", role="admin") == teams.MemberChange(
        "changed"
    )
    assert Client().get(f"/s/{token}").status_code == 302
    revoked = [orjson.loads(entry.detail)["link"] for entry in AuditEntry.objects.filter(action="share_link.revoke")]
    assert revoked == [other.pk]
    # The project page lists the open ones to those who may revoke them, whoever made them.
    page = _signed_in(member("max", acme, Role.MAINTAINER)).get(reverse("sessions:project", args=[acme.slug]))
    html = page.content.decode()
    listing = html[html.index('id="open-links"') :]
    listing = listing[: listing.index("</ul>")]
    assert f'data-link="{link.pk}"' in listing and "for the auditors" in listing
    assert f'data-link="{other.pk}"' not in listing
    assert f'href="/sessions/{shown.pk}/share-links/"' in listing
    reviewer_page = _signed_in(member("rex", acme, Role.REVIEWER)).get(reverse("sessions:project", args=[acme.slug]))
    assert 'id="open-links"' not in reviewer_page.content.decode()


def test_an_expired_link_is_a_404_for_new_and_earlier_visitors(shown, mia):
    link, token = _link(shown, mia)
    visitor = _visitor(token)
    ShareLink.objects.filter(pk=link.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert visitor.get(_player(shown)).status_code == 404
    assert Client().get(f"/s/{token}").status_code == 404
    link.refresh_from_db()
    assert link.use_count == 1 and link.state == "expired"


def test_the_visitor_exports_only_when_the_link_allows_it(shown, mia):
    export = reverse("sessions:export", args=[shown.pk])
    _, closed = _link(shown, mia)
    visitor = _visitor(closed)
    assert visitor.get(export, {"format": "jsonl"}).status_code == 403
    _, opened = _link(shown, mia, allow_export=True)
    visitor = _visitor(opened)
    page = visitor.get(_player(shown)).content.decode()
    assert f'href="{export}?format=jsonl"' in page and 'href="/api/' not in page
    response = visitor.get(export, {"format": "jsonl"})
    assert response.status_code == 200 and response["Content-Disposition"].startswith("attachment;")
    lines = b"".join(response.streaming_content).splitlines()
    assert lines and all(orjson.loads(line) for line in lines)
    assert visitor.get(export, {"format": "evil"}).status_code == 400
    entry = AuditEntry.objects.filter(action="session.export").latest("seq")
    assert (entry.actor, entry.target) == (f"share:{ShareLink.objects.get(allow_export=True).pk}",
                                           f"session:{shown.pk}")  # fmt: skip
    # Members export through the same page (and the API) as before.
    member_export = _signed_in(mia).get(export, {"format": "snapshot"})
    assert member_export.status_code == 200 and orjson.loads(b"".join(member_export.streaming_content))


def test_a_stop_on_a_new_session_says_and_records_which_open_tour_links_now_show_it(acme, shown, hidden, mia):
    # A tour link shows the sessions of the tour's stops: a stop on another session widens it.
    tour = Tour.objects.create(project=acme, title="Onboarding")
    TourStop.objects.create(tour=tour, position=0, session=shown, seq=1, title="start")
    link, token = sharing.create_link(actor=Actor(user=mia), tour=tour)
    closed, _ = sharing.create_link(actor=Actor(user=mia), tour=tour)
    sharing.revoke_link(actor=Actor(user=mia), link=closed)
    visitor = _visitor(token)
    assert visitor.get(_player(hidden)).status_code == 404
    add = reverse("sessions:tour_stop_add", args=[hidden.pk])
    answer = _signed_in(mia).post(add, {"step": 2, "tour": tour.pk, "title": "wider"}, HTTP_HX_REQUEST="true")
    assert answer.status_code == 200
    assert "The tour's 1 open share link now shows this session to its visitors." in answer.content.decode()
    change = AuditEntry.objects.filter(action="tour.change").latest("pk")
    assert orjson.loads(change.detail)["shared_through_links"] == [link.pk]
    assert visitor.get(_player(hidden)).status_code == 200
    # Another stop on a session the tour reached already widens nothing, and says nothing.
    again = _signed_in(mia).post(add, {"step": 3, "tour": tour.pk, "title": "same"}, HTTP_HX_REQUEST="true")
    assert "open share link" not in again.content.decode()
    assert "shared_through_links" not in orjson.loads(
        AuditEntry.objects.filter(action="tour.change").latest("pk").detail
    )
    # The API's whole list records it too.
    third = _session(acme, "THIRD-TASK")
    stops = [{"session": s.pk, "seq": 1, "title": f"s{s.pk}"} for s in (shown, third)]
    assert _signed_in(mia).put(f"/api/tours/{tour.pk}/stops", orjson.dumps(stops),
                               content_type="application/json").status_code == 200  # fmt: skip
    assert orjson.loads(AuditEntry.objects.filter(action="tour.change").latest("pk").detail)[
        "shared_through_links"
    ] == [link.pk]


def test_a_browser_keeps_its_twenty_newest_links(shown, mia):
    visitor = Client()
    links = []
    for _ in range(22):
        link, token = _link(shown, mia)
        visitor.get(f"/s/{token}")
        links.append(link.pk)
    assert visitor.session[access.SHARE_LINKS_KEY] == links[-20:]
    assert visitor.get(_player(shown)).status_code == 200


def test_a_tour_link_opens_the_tour_and_the_sessions_of_its_stops_only(acme, shown, hidden, mia):
    third = _session(acme, "THIRD-TASK")
    tour = Tour.objects.create(project=acme, title="Onboarding")
    for position, session in enumerate((shown, third)):
        TourStop.objects.create(tour=tour, position=position, session=session, seq=1, title=f"stop {position}")
    other_tour = Tour.objects.create(project=acme, title="Other")
    client = _signed_in(mia)
    body = _api_create(client, f"/api/tours/{tour.pk}/share-links", expires_in_days=3).json()
    assert body["tour"] == tour.pk and body["session"] is None
    assert [row["id"] for row in client.get(f"/api/tours/{tour.pk}/share-links").json()] == [body["id"]]
    visitor = Client()
    opened = visitor.get(body["url"])
    assert opened.status_code == 302 and opened.url.startswith(f"/tours/{tour.pk}/play/")
    assert visitor.get(_player(shown)).status_code == 200
    assert visitor.get(_player(third)).status_code == 200
    assert visitor.get(_player(hidden)).status_code == 404
    actor = access.actor_of(visitor.get(_player(shown)).wsgi_request)
    assert access.tour_for(actor, tour.pk) == tour
    with pytest.raises(access.NotVisible):
        access.tour_for(actor, other_tour.pk)
    with pytest.raises(access.NotVisible):
        access.project_for(actor, acme.slug)
    assert not access.sessions_visible_to(actor).exists() and access.projects_visible_to(actor) == []
    with pytest.raises(PermissionDenied):
        access.tour_for(actor, tour.pk, need=Role.MAINTAINER)
    assert client.delete(f"/api/share-links/{body['id']}").status_code == 204
    assert visitor.get(_player(third)).status_code == 404


# --- the panel ------------------------------------------------------------------------------


def test_the_players_panel_makes_a_link_shows_it_once_and_revokes_it(shown, mia, acme):
    client = _signed_in(mia)
    player = client.get(_player(shown)).content.decode()
    panel_url = reverse("sessions:share_links", args=[shown.pk])
    assert f'hx-get="{panel_url}"' in player
    viewer_page = _signed_in(member("vic", acme, Role.VIEWER)).get(_player(shown)).content.decode()
    assert 'id="share-links"' not in viewer_page
    assert "No share links yet." in client.get(panel_url, HTTP_HX_REQUEST="true").content.decode()
    created = client.post(panel_url, {"expires_in_days": "3", "note": "for <b>Ann</b>", "allow_export": "on"},
                          HTTP_HX_REQUEST="true").content.decode()  # fmt: skip
    link = ShareLink.objects.get()
    assert link.allow_export and link.note == "for <b>Ann</b>" and "for &lt;b&gt;Ann&lt;/b&gt;" in created
    url = created.split('id="share-created-url" class="moment-url share-url" value="')[1].split('"')[0]
    token = url.rsplit("/s/", 1)[1]
    assert url.startswith("http://testserver/s/") and ShareLink.hash_token(token) == link.token_hash
    again = client.get(panel_url, HTTP_HX_REQUEST="true").content.decode()
    assert token not in again and "3 days" not in again and "0 uses" in again and "revoke" in again
    refused = client.post(panel_url, {"expires_in_days": "91"}, HTTP_HX_REQUEST="true")
    assert refused.status_code == 400 and "Expires in (days)" in refused.content.decode()
    assert ShareLink.objects.count() == 1
    revoked = client.post(reverse("sessions:share_link_revoke", args=[link.pk]), HTTP_HX_REQUEST="true")
    assert revoked.status_code == 200 and "revoked by mia" in revoked.content.decode()
    assert Client().get(f"/s/{token}").status_code == 404


def test_the_tour_pages_panel_makes_and_revokes_tour_links_for_maintainers_only(acme, shown, mia):
    tour = Tour.objects.create(project=acme, title="Onboarding")
    TourStop.objects.create(tour=tour, position=0, session=shown, seq=1, title="start")
    client = _signed_in(mia)
    panel_url = reverse("sessions:tour_share_links", args=[tour.pk])
    assert f'hx-get="{panel_url}"' in client.get(reverse("sessions:tour", args=[tour.pk])).content.decode()
    created = client.post(panel_url, {"expires_in_days": "2"}, HTTP_HX_REQUEST="true").content.decode()
    link = ShareLink.objects.get()
    assert (link.tour_id, link.session_id) == (tour.pk, None) and "share-created-url" in created
    viewer = _signed_in(member("vic", acme, Role.VIEWER))
    assert f'hx-get="{panel_url}"' not in viewer.get(reverse("sessions:tour", args=[tour.pk])).content.decode()
    assert viewer.get(panel_url).status_code == 403
    assert viewer.post(reverse("sessions:share_link_revoke", args=[link.pk])).status_code == 403
    revoked = client.post(reverse("sessions:share_link_revoke", args=[link.pk]))
    assert revoked.status_code == 302 and revoked.url == panel_url  # the links' own page, without htmx
    link.refresh_from_db()
    assert link.state == "revoked"
    assert AuditEntry.objects.get(action="share_link.revoke").target == f"tour:{tour.pk}"


def test_without_javascript_the_links_are_a_page_of_their_own_that_makes_and_revokes_them(shown, mia, acme):
    client = _signed_in(mia)
    panel_url = reverse("sessions:share_links", args=[shown.pk])
    player = client.get(_player(shown)).content.decode()
    noscript = player[player.index("<noscript><p><a") :]
    assert noscript.startswith(f'<noscript><p><a href="{panel_url}">Open the share links</a>')
    page = client.get(panel_url)
    body = page.content.decode()
    assert page.status_code == 200 and "<h1>Share links of the session" in body and "<html" in body
    assert f'href="{shown.get_absolute_url()}"' in body and f'method="post" action="{panel_url}"' in body
    created = client.post(panel_url, {"expires_in_days": "3", "note": "no script"}).content.decode()
    assert "<html" in created and 'id="share-created-url"' in created
    link = ShareLink.objects.get()
    revoked = client.post(reverse("sessions:share_link_revoke", args=[link.pk]))
    assert revoked.status_code == 302 and revoked.url == panel_url
    assert "revoked by mia" in client.get(revoked.url).content.decode()
    # Its answers to htmx stay the panel alone; a viewer gets no page either.
    assert not client.get(panel_url, HTTP_HX_REQUEST="true").content.decode().lstrip().startswith("<!")
    assert _signed_in(member("vic", acme, Role.VIEWER)).get(panel_url).status_code == 403


def test_without_javascript_verify_is_a_form_that_posts_and_comes_back(shown, mia):
    client = _signed_in(mia)
    player = client.get(_player(shown)).content.decode()
    badge = player[player.index('<div id="chain-badge"') :]
    badge = badge[: badge.index("</div>")]
    verify_url = reverse("sessions:verify", args=[shown.pk])
    assert f'<form class="inline-form" method="post" action="{verify_url}"' in badge
    assert 'name="csrfmiddlewaretoken"' in badge and '<button type="submit"' in badge
    answered = client.post(verify_url)
    assert answered.status_code == 302 and answered.url == _player(shown)
    assert "verified at" in client.get(answered.url).content.decode()


def _uploaded(acme, mia, path, django_capture_on_commit_callbacks) -> list[Session]:
    api = Client(headers={"authorization": f"Bearer {key_of(mia, project=acme)}"})
    with path.open("rb") as handle, django_capture_on_commit_callbacks(execute=False):
        response = api.post("/api/imports", {"file": handle, "project": acme.slug})
    assert response.status_code == 202, response.content
    run_import(job_id=response.json()["job"])
    return list(Session.objects.filter(import_job_id=response.json()["job"]).order_by("pk"))


def test_a_visitor_has_no_original_of_an_upload_that_held_other_sessions(acme, mia, django_capture_on_commit_callbacks):
    both = FIXTURES / "agentlens" / "two_sessions.ndjson"
    first, second = _uploaded(acme, mia, both, django_capture_on_commit_callbacks)
    _, token = _link(first, mia, allow_export=True)
    visitor = _visitor(token)
    export = reverse("sessions:export", args=[first.pk])
    assert f"{export}?format=original" not in visitor.get(_player(first)).content.decode()
    assert f"{export}?format=jsonl" in visitor.get(_player(first)).content.decode()
    refused = visitor.get(export, {"format": "original"})
    assert refused.status_code == 403 and "held other sessions too" in refused.content.decode()
    # Its own events it has; the other session's are in neither.
    own = b"".join(visitor.get(export, {"format": "jsonl"}).streaming_content)
    assert second.source_session_id.encode() not in own and first.source_session_id.encode() in own
    # A member has the whole upload, as received.
    whole = b"".join(_signed_in(mia).get(export, {"format": "original"}).streaming_content)
    assert whole == both.read_bytes()

    # An upload that gave one session alone: its visitor has it, byte for byte.
    alone_path = ROOT / "demo" / "rlm_success.jsonl"
    [alone] = _uploaded(acme, mia, alone_path, django_capture_on_commit_callbacks)
    _, token = _link(alone, mia, allow_export=True)
    visitor = _visitor(token)
    alone_export = reverse("sessions:export", args=[alone.pk])
    assert f"{alone_export}?format=original" in visitor.get(_player(alone)).content.decode()
    assert b"".join(visitor.get(alone_export, {"format": "original"}).streaming_content) == alone_path.read_bytes()


def test_a_visitor_of_a_live_session_follows_it_through_the_players_own_tail(acme, mia, settings):
    settings.TAIL_MAX_SECONDS = 0.2
    settings.TAIL_POLL_SECONDS = 0.02
    live = create_session(project=acme, source_format="canonical", meta=SessionMeta(task="LIVE"))
    append_events(session=live, events=synthetic_events(3))
    _, token = _link(live, mia)
    visitor = _visitor(token)
    tail = reverse("sessions:tail", args=[live.pk])
    assert f'data-tail-url="{tail}"' in visitor.get(_player(live)).content.decode()
    assert visitor.get(f"/api/sessions/{live.pk}/tail").status_code == 401  # the API never reads links
    response = visitor.get(tail, {"after": 0})
    assert response.status_code == 200 and response["Content-Type"].startswith("text/event-stream")
    body = b"".join(response.streaming_content).decode()
    assert "id: 1\n" in body and "id: 2\n" in body and "id: 0\n" not in body and '"reason":"max_duration"' in body
    # Nothing else: another session's tail, a bad start, and none once the link is revoked.
    other = _session(acme, "OTHER")
    assert visitor.get(reverse("sessions:tail", args=[other.pk])).status_code == 404
    assert visitor.get(tail, {"after": "x"}).status_code == 400
    sharing.revoke_link(actor=Actor(user=mia), link=ShareLink.objects.get(session=live))
    assert visitor.get(tail).status_code == 404


def test_a_visitor_has_no_original_that_a_restored_bundle_carried(
    acme, mia, django_capture_on_commit_callbacks, tmp_path
):
    from sessions_app.bundles import stream_bundle
    from sessions_app.ingest.importing import import_file

    both = FIXTURES / "agentlens" / "two_sessions.ndjson"
    first, _second = _uploaded(acme, mia, both, django_capture_on_commit_callbacks)
    elsewhere = Project.objects.create(name="Elsewhere", slug="elsewhere")
    keeper = member("kim", elsewhere, Role.MAINTAINER)
    bundle = tmp_path / "first.replay-bundle.zip"
    bundle.write_bytes(b"".join(stream_bundle(session=first, exported_by="mia")))
    (outcome,) = import_file(path=bundle, project=elsewhere)
    restored = outcome.session
    _, token = _link(restored, keeper, allow_export=True)
    visitor = _visitor(token)
    export = reverse("sessions:export", args=[restored.pk])
    assert f"{export}?format=original" not in visitor.get(_player(restored)).content.decode()
    assert visitor.get(export, {"format": "original"}).status_code == 403
    # Its members have it whole, as received where the bundle was made.
    whole = b"".join(_signed_in(keeper).get(export, {"format": "original"}).streaming_content)
    assert whole == both.read_bytes()


def test_a_link_is_made_with_its_audit_entry_or_not_at_all_and_revoked_once(shown, mia, monkeypatch):
    # A locked database at the audit write answered "try again" with a live link stored that no
    # log named and whose token no one saw (security sweep).
    from django.db import OperationalError

    from sessions_app import audit

    real = audit.record

    def locked(**kwargs):
        raise OperationalError("database is locked")

    monkeypatch.setattr(audit, "record", locked)
    with pytest.raises(OperationalError):
        _link(shown, mia)
    assert not ShareLink.objects.exists()
    monkeypatch.setattr(audit, "record", real)
    link, _ = _link(shown, mia)
    stale = ShareLink.objects.get(pk=link.pk)
    sharing.revoke_link(actor=Actor(user=mia), link=link)
    sharing.revoke_link(actor=Actor(user=mia), link=stale)  # loaded before the first revocation
    assert AuditEntry.objects.filter(action="share_link.revoke").count() == 1
    assert stale.revoked_at == ShareLink.objects.get(pk=link.pk).revoked_at


def test_the_player_and_the_panels_it_loads_give_every_id_once(shown, acme):
    """The share panel's note and the sign-off's were both `id_note`: the panel's "Note" label
    focused the sign-off's field. Every element id of the page an admin sees, and of each partial
    it loads into itself, is given once."""
    from html.parser import HTMLParser

    void = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}

    class Ids(HTMLParser):
        """Each id with the ids of the elements around it, and the partials the page loads."""

        def __init__(self):
            super().__init__()
            self.ids, self.loads, self.open = [], [], []

        def handle_starttag(self, tag, attrs):
            found = dict(attrs)
            if "id" in found:
                self.ids.append((found["id"], {i for _, i in self.open if i}))
            trigger = found.get("hx-trigger") or ""
            if found.get("hx-get") and any(word in trigger for word in ("load", "revealed", "toggle")):
                self.loads.append((found["hx-get"], found.get("id"), found.get("hx-target")))
            if tag not in void:
                self.open.append((tag, found.get("id")))

        def handle_endtag(self, tag):
            while self.open and self.open.pop()[0] != tag:
                pass

    client = _signed_in(member("ada", acme, Role.ADMIN))
    page = Ids()
    page.feed(client.get(_player(shown)).content.decode())
    page_ids = [i for i, _ in page.ids]
    assert len(page_ids) == len(set(page_ids)), sorted(i for i in page_ids if page_ids.count(i) > 1)
    assert reverse("sessions:share_links", args=[shown.pk]) in [url for url, _, _ in page.loads]
    for url, own_id, target in page.loads:
        partial = Ids()
        partial.feed(client.get(url, HTTP_HX_REQUEST="true").content.decode())
        partial_ids = [i for i, _ in partial.ids]
        # What the partial is swapped in for goes, with all it holds.
        replaced = {own_id, (target or "").removeprefix("#")} - {None, ""}
        staying = {i for i, around in page.ids if i not in replaced and not around & replaced}
        clashes = set(partial_ids) & staying
        assert not clashes and len(partial_ids) == len(set(partial_ids)), (url, clashes)
