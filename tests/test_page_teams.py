"""The team pages: projects, a project's members and settings, its audit log, the user's API keys."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import orjson
import pytest
from django.test import Client
from django.urls import reverse

from sessions_app import audit, teams
from sessions_app.canonical import SessionMeta
from sessions_app.ingest.writer import create_session
from sessions_app.models import ApiKey, AuditEntry, Membership, Project, Role

from .builders_teams import key_of, member

PROJECTS = reverse("sessions:projects")
KEYS = reverse("sessions:keys")


@pytest.fixture
def acme(db) -> Project:
    return Project.objects.create(name="Acme <agents>", slug="acme")


@pytest.fixture
def other(db) -> Project:
    return Project.objects.create(name="Other", slug="other")


def signed_in(client: Client, username: str, project: Project, role: str) -> Client:
    client.force_login(member(username, project, role))
    return client


@pytest.fixture
def admin(client: Client, acme: Project) -> Client:
    return signed_in(client, "ada", acme, Role.ADMIN)


def _url(name: str, project: Project) -> str:
    return reverse(f"sessions:{name}", args=[project.slug])


def _seqs(html: str) -> list[int]:
    return [int(seq) for seq in re.findall(r'<tr id="entry-\d+" data-seq="(\d+)">', html)]


# --- the projects page ------------------------------------------------------------------------


def test_projects_page_lists_only_my_projects_with_role_and_counts(client, acme, other):
    signed_in(client, "vic", acme, Role.VIEWER)
    member("ada", acme, Role.ADMIN)
    for project in (acme, acme, other):
        create_session(project=project, source_format="canonical", meta=SessionMeta())
    response = client.get(PROJECTS)
    html = response.content.decode()
    assert response.status_code == 200
    assert 'data-project="acme"' in html and 'data-project="other"' not in html
    row = html[html.index('data-project="acme"') :]
    row = row[: row.index("</tr>")]
    assert "Acme &lt;agents&gt;" in row and "<agents>" not in html
    assert ">Viewer<" in row and ">2</a>" in row and ">2</td>" in row
    assert f"{reverse('sessions:list')}?project=acme" in row


def test_creating_a_project_makes_me_its_admin(client, db):
    client.force_login(member("newbie", Project.get_default(), Role.VIEWER))
    response = client.post(PROJECTS, {"name": "Red team", "slug": "red-team"})
    project = Project.objects.get(slug="red-team")
    assert response.status_code == 302 and response["Location"] == project.get_absolute_url()
    assert Membership.objects.get(project=project).role == Role.ADMIN
    assert AuditEntry.objects.of_project(project).get().action == "project.create"


def test_a_taken_slug_is_refused_next_to_the_form(admin, acme):
    response = admin.post(PROJECTS, {"name": "Another", "slug": "acme"})
    html = response.content.decode()
    assert response.status_code == 400
    assert "exists already" in html and html.index("exists already") > html.index('id="project-form"')
    assert Project.objects.filter(name="Another").count() == 0


# --- one project ------------------------------------------------------------------------------


def test_project_page_shows_my_role_members_and_the_admin_forms(admin, acme):
    member("vic", acme, Role.VIEWER)
    response = admin.get(acme.get_absolute_url())
    html = response.content.decode()
    assert response.status_code == 200
    assert "Acme &lt;agents&gt;" in html and 'id="my-role">Admin<' in html
    assert 'data-member="ada"' in html and 'data-member="vic"' in html
    assert 'id="member-form"' in html and 'id="settings-form"' in html
    assert f'href="{_url("audit", acme)}"' in html and "/sessions/?project=acme" in html
    # Every column is named for a screen reader, the remove buttons' too (axe: empty-table-header).
    keys = admin.get("/account/keys/").content.decode()
    for page in (html, keys):
        assert "<thead>" in page and not re.search(r"<th[^>]*>\s*</th>", page)


def test_a_viewer_sees_members_but_no_admin_forms_nor_the_audit_link(client, acme):
    signed_in(client, "vic", acme, Role.VIEWER)
    html = client.get(acme.get_absolute_url()).content.decode()
    assert 'data-member="vic"' in html
    assert 'id="member-form"' not in html and 'id="settings-form"' not in html and "Remove" not in html
    assert _url("audit", acme) not in html


def test_a_non_member_gets_404_on_every_project_page(client, acme, other):
    signed_in(client, "outsider", other, Role.ADMIN)
    for name in ("project", "audit", "audit_export"):
        assert client.get(_url(name, acme)).status_code == 404, name
    for name in ("project_member", "project_member_remove", "project_settings", "audit_verify"):
        assert client.post(_url(name, acme), {"username": "outsider", "role": "admin"}).status_code == 404, name
    assert not Membership.objects.filter(project=acme).exists()


def test_below_admin_managing_members_or_settings_is_403(client, acme):
    signed_in(client, "mia", acme, Role.MAINTAINER)
    member("vic", acme, Role.VIEWER)
    assert client.post(_url("project_member", acme), {"username": "mia", "role": "admin"}).status_code == 403
    assert client.post(_url("project_member_remove", acme), {"username": "vic"}).status_code == 403
    assert client.post(_url("project_settings", acme), {"retention_days": "3"}).status_code == 403
    assert Membership.objects.get(project=acme, user__username="mia").role == Role.MAINTAINER


@pytest.mark.parametrize("role", [Role.VIEWER, Role.REVIEWER, Role.MAINTAINER])
def test_a_member_below_admin_may_leave_asked_first_naming_their_links(client, acme, role):
    # Only admins had a way out: a reviewer or viewer who should no longer see a project had to
    # ask an admin to remove them.
    from sessions_app import sharing
    from sessions_app.access import Actor

    me = member("lee", acme, role)
    member("ada", acme, Role.ADMIN)
    client.force_login(me)
    if role == Role.MAINTAINER:
        session = create_session(project=acme, source_format="canonical", meta=SessionMeta(task="t"))
        sharing.create_link(actor=Actor(user=me), session=session)
    page = client.get(acme.get_absolute_url()).content.decode()
    form = re.search(r'<form id="leave-form"[^>]*data-confirm="([^"]*)"', page)
    assert form is not None and "Leave Acme &lt;agents&gt;?" in form.group(1)
    assert ("The 1 open share link you made here will stop working" in form.group(1)) == (role == Role.MAINTAINER)
    url = _url("project_member_remove", acme)
    asked = client.post(url, {"username": "lee", "ask_first": "1"})
    assert asked.status_code == 200 and ">Leave</button>" in asked.content.decode()
    assert Membership.objects.filter(project=acme, user=me).exists()
    left = client.post(url, {"username": "lee"})
    assert left.status_code == 302 and left["Location"] == reverse("sessions:projects")
    assert not Membership.objects.filter(project=acme, user=me).exists()
    entry = AuditEntry.objects.filter(action="member.remove").get()
    assert (entry.actor, entry.target) == ("lee", "user:lee")
    assert client.get(acme.get_absolute_url()).status_code == 404


def test_leaving_is_ones_own_a_read_only_key_cannot_and_an_admin_sees_no_leave_form(client, acme):
    vic = member("vic", acme, Role.VIEWER)
    member("rita", acme, Role.REVIEWER)
    client.force_login(vic)
    assert client.post(_url("project_member_remove", acme), {"username": "rita"}).status_code == 403
    read_only = Client(HTTP_AUTHORIZATION=f"Bearer {key_of(vic, read_only=True)}")
    assert read_only.delete("/api/projects/acme/members/vic").status_code == 403
    assert read_only.delete("/api/projects/acme/members/rita").status_code == 403
    assert Membership.objects.filter(project=acme).count() == 2
    full = Client(HTTP_AUTHORIZATION=f"Bearer {key_of(vic, name='full')}")
    assert full.delete("/api/projects/acme/members/vic").json() == {"username": "vic", "linksRevoked": 0}
    ada = Client()
    ada.force_login(member("ada", acme, Role.ADMIN))
    assert 'id="leave-form"' not in ada.get(acme.get_absolute_url()).content.decode()  # their row's Remove


def test_admin_adds_changes_and_removes_a_member(admin, acme, django_user_model):
    django_user_model.objects.create_user(username="bob", password="x")
    response = admin.post(_url("project_member", acme), {"username": "bob", "role": "reviewer"})
    assert response.status_code == 302 and response["Location"] == acme.get_absolute_url()
    assert Membership.objects.get(project=acme, user__username="bob").role == Role.REVIEWER
    admin.post(_url("project_member", acme), {"username": "bob", "role": "maintainer", "change": "1"})
    assert Membership.objects.get(project=acme, user__username="bob").role == Role.MAINTAINER
    response = admin.post(_url("project_member_remove", acme), {"username": "bob"})
    assert response.status_code == 302
    assert not Membership.objects.filter(project=acme, user__username="bob").exists()
    actions = list(AuditEntry.objects.of_project(acme).order_by("seq").values_list("action", "actor", "target"))
    assert actions == [("member.add", "ada", "user:bob"), ("member.change", "ada", "user:bob"),
                       ("member.remove", "ada", "user:bob")]  # fmt: skip


def test_each_change_of_members_is_said_once_on_the_page_it_goes_back_to(admin, acme, django_user_model):
    django_user_model.objects.create_user(username="bob", password="x")

    def notices(response) -> list[str]:
        assert response.status_code == 302
        html = admin.get(response["Location"]).content.decode()
        return re.findall(r'<p class="notice" role="status" dir="auto">(.*?)</p>', html)

    added = admin.post(_url("project_member", acme), {"username": "bob", "role": "reviewer"})
    assert notices(added) == ["bob added as reviewer in Acme &lt;agents&gt;."]
    changed = admin.post(_url("project_member", acme), {"username": "bob", "role": "maintainer", "change": "1"})
    assert notices(changed) == ["bob is now maintainer in Acme &lt;agents&gt;."]
    # The role they have already: said as such, and nothing recorded.
    entries = AuditEntry.objects.count()
    same = admin.post(_url("project_member", acme), {"username": "bob", "role": "maintainer", "change": "1"})
    assert notices(same) == ["bob is already maintainer in Acme &lt;agents&gt;."]
    assert AuditEntry.objects.count() == entries
    removed = admin.post(_url("project_member_remove", acme), {"username": "bob"})
    assert notices(removed) == ["bob is no longer a member of Acme &lt;agents&gt;."]
    assert "notice" not in admin.get(acme.get_absolute_url()).content.decode()  # said once
    # An admin who leaves reads it on the projects page, where they land.
    member("second", acme, Role.ADMIN)
    left = admin.post(_url("project_member_remove", acme), {"username": "ada"})
    assert left["Location"] == PROJECTS and notices(left) == ["ada is no longer a member of Acme &lt;agents&gt;."]


def test_a_change_or_removal_that_ends_share_links_asks_first_and_says_how_many_it_revoked(admin, acme):
    # A demotion revoked the member's links without a word: an outside visitor's link was dead,
    # and no one had been told. Changing one's own role asked nothing either.
    from sessions_app import sharing
    from sessions_app.access import Actor

    mia = member("mia", acme, Role.MAINTAINER)
    session = create_session(project=acme, source_format="canonical", meta=SessionMeta(task="t"))
    for _ in range(2):
        sharing.create_link(actor=Actor(user=mia), session=session)
    page = admin.get(acme.get_absolute_url()).content.decode()
    row = re.search(r'<tr data-member="mia">.*?</tr>', page, re.S).group(0)
    assert 'data-confirm="A role below maintainer also revokes the 2 open share links mia made here, for good.' in row
    assert "Remove mia from Acme &lt;agents&gt;? The 2 open share links they made here will stop working" in row
    own = re.search(r'<tr data-member="ada">.*?</tr>', page, re.S).group(0)
    assert 'data-confirm="Change your own role in Acme &lt;agents&gt;?' in own
    # Without JavaScript the question is a page, and nothing changes until it is answered.
    asked = admin.post(_url("project_member", acme), {"username": "ada", "role": "viewer", "change": "1",
                                                      "ask_first": "1"})  # fmt: skip
    assert asked.status_code == 200 and "Change your own role in Acme &lt;agents&gt;?" in asked.content.decode()
    assert Membership.objects.get(user__username="ada").role == Role.ADMIN
    asked = admin.post(_url("project_member", acme), {"username": "mia", "role": "viewer", "change": "1",
                                                      "ask_first": "1"})  # fmt: skip
    assert (
        "A role below maintainer also revokes the 2 open share links mia made here, for good." in asked.content.decode()
    )
    assert Membership.objects.get(user__username="mia").role == Role.MAINTAINER
    # A promotion ends no link: it is not asked about them, and acts.
    promoted = admin.post(_url("project_member", acme), {"username": "mia", "role": "admin", "change": "1",
                                                         "ask_first": "1"})  # fmt: skip
    assert promoted.status_code == 302 and Membership.objects.get(user__username="mia").role == Role.ADMIN
    changed = admin.post(_url("project_member", acme), {"username": "mia", "role": "viewer", "change": "1"})
    html = admin.get(changed["Location"]).content.decode()
    assert "mia is now viewer in Acme &lt;agents&gt;. The 2 share links mia had made here were revoked." in html
    assert not sharing.open_link_counts(acme.pk)


def test_a_project_and_its_admin_are_made_with_their_audit_entry_or_not_at_all(acme, monkeypatch):
    # The atomic decorator had slipped onto the function above it: a failed log entry left the
    # project and its admin stored, unlogged.
    def broken(**kwargs):
        raise RuntimeError("the log is out of reach")

    monkeypatch.setattr(audit, "record", broken)
    from sessions_app.access import Actor

    with pytest.raises(RuntimeError):
        teams.create_project(actor=Actor(user=member("zed", acme, Role.VIEWER)), name="Orphan", slug="orphan")
    assert not Project.objects.filter(slug="orphan").exists()
    assert not Membership.objects.filter(project__slug="orphan").exists()


def test_adding_someone_who_is_a_member_already_says_so_and_changes_nothing(admin, acme, django_user_model):
    django_user_model.objects.create_user(username="rev", password="x")
    admin.post(_url("project_member", acme), {"username": "rev", "role": "reviewer"})
    response = admin.post(_url("project_member", acme), {"username": "rev", "role": "viewer"})
    html = response.content.decode()
    assert response.status_code == 400
    form = html[html.index('id="member-form"') :]
    assert "rev is a member already (reviewer); change their role in the members list" in form
    assert Membership.objects.get(project=acme, user__username="rev").role == Role.REVIEWER
    assert not AuditEntry.objects.of_project(acme).filter(action="member.change").exists()


def test_an_unknown_user_is_refused_next_to_the_add_form(admin, acme):
    response = admin.post(_url("project_member", acme), {"username": "<b>ghost</b>", "role": "viewer"})
    html = response.content.decode()
    assert response.status_code == 400
    form = html[html.index('id="member-form"') :]
    assert "no active user" in form and "&lt;b&gt;ghost&lt;/b&gt;" in form and "<b>ghost" not in html
    assert "accounts are made by the server&#x27;s operator (manage.py create_user) or a superuser" in form


def test_the_last_admin_stays(admin, acme):
    response = admin.post(_url("project_member_remove", acme), {"username": "ada"})
    assert response.status_code == 400 and "last admin" in response.content.decode()
    response = admin.post(_url("project_member", acme), {"username": "ada", "role": "viewer", "change": "1"})
    html = response.content.decode()
    assert response.status_code == 400
    row = html[html.index('data-member="ada"') :]
    assert "last admin" in row[: row.index("</tbody>")]
    assert Membership.objects.get(project=acme, user__username="ada").role == Role.ADMIN


def test_an_admin_who_removes_themselves_lands_on_the_projects_page(admin, acme):
    member("second", acme, Role.ADMIN)
    response = admin.post(_url("project_member_remove", acme), {"username": "ada"})
    assert response.status_code == 302 and response["Location"] == PROJECTS


def test_admin_sets_and_clears_the_retention(admin, acme):
    assert admin.post(_url("project_settings", acme), {"retention_days": "30"}).status_code == 302
    acme.refresh_from_db()
    assert acme.retention_days == 30
    assert 'value="30"' in admin.get(acme.get_absolute_url()).content.decode()
    response = admin.post(_url("project_settings", acme), {"retention_days": "0"})
    assert response.status_code == 400 and "greater than or equal to 1" in response.content.decode()
    admin.post(_url("project_settings", acme), {"retention_days": ""})
    acme.refresh_from_db()
    assert acme.retention_days is None


# --- the audit log ----------------------------------------------------------------------------


def _log(project: Project, count: int, **fields) -> None:
    for i in range(count):
        audit.record(
            action=fields.get("action", "session.export"), actor=fields.get("actor", "bob"), project=project,
            target=f"session:{i}", detail=fields.get("detail", {"i": i}), ip="10.0.0.1",
        )  # fmt: skip


def test_a_viewer_cannot_read_the_audit_log(client, acme):
    signed_in(client, "vic", acme, Role.VIEWER)
    assert client.get(_url("audit", acme)).status_code == 403
    assert client.get(_url("audit_export", acme)).status_code == 403
    assert client.post(_url("audit_verify", acme)).status_code == 403


def test_audit_page_full_page_newest_first_with_every_column(client, acme):
    signed_in(client, "rita", acme, Role.REVIEWER)
    _log(acme, 3)
    audit.record(action="member.add", actor="ada", project=acme, target="user:<i>x</i>",
                 detail={"role": "<script>alert(1)</script>"}, ip="::1")  # fmt: skip
    response = client.get(_url("audit", acme))
    html = response.content.decode()
    assert response.status_code == 200 and "<html" in html and 'id="audit-filters"' in html
    assert _seqs(html) == [3, 2, 1, 0]
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "<script>alert" not in html
    assert "user:&lt;i&gt;x&lt;/i&gt;" in html and ">::1<" in html and ">10.0.0.1<" in html
    assert f'href="{_url("audit_export", acme)}"' in html and 'id="audit-verify-form"' in html
    assert "HX-Request" in response["Vary"]


def test_audit_htmx_request_gets_only_the_entries_and_history_restore_the_page(client, acme):
    signed_in(client, "rita", acme, Role.REVIEWER)
    _log(acme, 2)
    html = client.get(_url("audit", acme), HTTP_HX_REQUEST="true").content.decode()
    assert html.lstrip().startswith('<section id="audit-entries"') and "<html" not in html
    assert _seqs(html) == [1, 0]
    restored = client.get(_url("audit", acme), HTTP_HX_REQUEST="true", HTTP_HX_HISTORY_RESTORE_REQUEST="true")
    assert "<html" in restored.content.decode()


def test_audit_filters_by_actor_action_and_days(client, acme):
    signed_in(client, "rita", acme, Role.REVIEWER)
    _log(acme, 2, actor="bob")
    _log(acme, 2, actor="carol", action="checkpoint.create")
    AuditEntry.objects.of_project(acme).filter(seq__in=[0, 2]).update(at=datetime(2026, 1, 5, 23, 30, tzinfo=UTC))
    AuditEntry.objects.of_project(acme).filter(seq__in=[1, 3]).update(at=datetime(2026, 1, 7, 9, 0, tzinfo=UTC))
    page = _url("audit", acme)
    assert _seqs(client.get(page, {"actor": "carol"}).content.decode()) == [3, 2]
    assert _seqs(client.get(page, {"action": "session.export"}).content.decode()) == [1, 0]
    assert _seqs(client.get(page, {"until": "2026-01-05"}).content.decode()) == [2, 0]
    assert _seqs(client.get(page, {"since": "2026-01-06", "actor": "bob"}).content.decode()) == [1]
    inverted = client.get(page, {"since": "2026-01-07", "until": "2026-01-05"}).content.decode()
    assert _seqs(inverted) == [] and "“From” is after “To”: no day is in between." in inverted
    # A value that does not parse falls back to no filter, as on every page: said, and its field
    # left empty rather than showing what was not applied.
    ignored = client.get(page, {"action": "nope", "since": "soon", "actor": "bob"}).content.decode()
    assert _seqs(ignored) == [1, 0]
    assert (
        "Ignored, not a valid value: <code><bdi>action=nope</bdi></code>, <code><bdi>since=soon</bdi></code>."
        in ignored
    )
    assert 'name="since" value=' not in ignored and 'name="actor" value="bob"' in ignored


def test_audit_pages_by_before_seq(client, acme):
    signed_in(client, "rita", acme, Role.REVIEWER)
    _log(acme, 120)
    page = _url("audit", acme)
    first = client.get(page, {"actor": "bob"}).content.decode()
    assert _seqs(first) == list(range(119, 69, -1))
    assert f'href="{page}?actor=bob&amp;before=70"' in first and "Newest" not in first
    second = client.get(page, {"actor": "bob", "before": 70}, HTTP_HX_REQUEST="true").content.decode()
    assert _seqs(second) == list(range(69, 19, -1)) and "before=20" in second and "Newest" in second
    # "Newer" undoes "Older": one page up, with the same filters; from the second page that is the first.
    assert f'rel="prev" href="{page}?actor=bob"' in second and 'rel="prev"' not in first
    last = client.get(page, {"before": 20}).content.decode()
    assert _seqs(last) == list(range(19, -1, -1)) and 'rel="next"' not in last
    assert f'rel="prev" href="{page}?before=70"' in last
    # A `before` above every entry is the newest page: nothing newer to link to.
    top = client.get(page, {"before": 500}).content.decode()
    assert _seqs(top) == list(range(119, 69, -1)) and "Newest" not in top and 'rel="prev"' not in top
    # A page below every entry leads up to the oldest full page.
    assert f'rel="prev" href="{page}?before=50"' in client.get(page, {"before": 0}).content.decode()


def test_reading_exporting_and_verifying_the_log_records_nothing(client, acme):
    signed_in(client, "rita", acme, Role.REVIEWER)
    _log(acme, 2)
    before = AuditEntry.objects.count()  # the sign-in's own entry included
    client.get(_url("audit", acme))
    b"".join(client.get(_url("audit_export", acme)).streaming_content)
    client.post(_url("audit_verify", acme))
    assert AuditEntry.objects.count() == before and AuditEntry.objects.of_project(acme).count() == 2


def test_export_streams_the_log_as_jsonl_oldest_first(client, acme):
    signed_in(client, "rita", acme, Role.REVIEWER)
    _log(acme, 3)
    response = client.get(_url("audit_export", acme))
    assert response.status_code == 200
    assert response["Content-Disposition"] == 'attachment; filename="audit-acme.jsonl"'
    lines = [orjson.loads(line) for line in b"".join(response.streaming_content).splitlines()]
    assert [line["seq"] for line in lines] == [0, 1, 2]
    assert lines[1]["actor"] == "bob" and lines[1]["detail"] == {"i": 1} and lines[1]["prev_hash"] == lines[0]["hash"]


def test_verify_reports_an_intact_log_then_a_tampered_entry(client, acme):
    signed_in(client, "rita", acme, Role.REVIEWER)
    _log(acme, 4)
    response = client.post(_url("audit_verify", acme), HTTP_HX_REQUEST="true")
    html = response.content.decode()
    assert html.lstrip().startswith('<output id="log-verification"') and "log intact: 4 entries" in html
    AuditEntry.objects.of_project(acme).filter(seq=2).update(detail='{"i":99}')
    html = client.post(_url("audit_verify", acme)).content.decode()
    assert "<html" in html and "broken at entry #3: its stored values do not hash to its link" in html
    # Its row is marked (the edited text looks like any other), and the verdict links to it.
    assert 'href="#entry-2"' in html
    assert re.findall(r'<tr id="entry-(\d+)" data-seq="\d+"( class="broken-entry")?>', html) == [
        ("3", ""), ("2", ' class="broken-entry"'), ("1", ""), ("0", "")
    ]  # fmt: skip


# --- API keys ---------------------------------------------------------------------------------


def test_keys_page_lists_only_my_keys(client, acme):
    me = member("kim", acme, Role.VIEWER)
    key_of(me, name="laptop <1>", project=acme, read_only=True)
    key_of(member("someone", acme), name="not mine")
    client.force_login(me)
    html = client.get(KEYS).content.decode()
    assert "laptop &lt;1&gt;" in html and "not mine" not in html
    row = html[html.index("laptop &lt;1&gt;") :]
    row = row[: row.index("</tr>")]
    assert "Acme &lt;agents&gt;" in row and "read-only" in row and "never" in row


def test_a_created_key_is_shown_once_and_stored_hashed(client, acme):
    me = member("kim", acme, Role.MAINTAINER)
    client.force_login(me)
    response = client.post(KEYS, {"name": "ci", "project": "acme", "read_only": "on"})
    html = response.content.decode()
    assert response.status_code == 200 and "shown only this once" in html
    key = re.search(r'<pre class="code" id="new-key-value">(rpl_[^<]+)</pre>', html).group(1)
    stored = ApiKey.objects.get(user=me)
    assert stored.key_hash == ApiKey.hash_key(key) and key not in {stored.key_hash, stored.key_prefix}
    assert stored.project == acme and stored.read_only and key.startswith(stored.key_prefix)
    assert "no-store" in response["Cache-Control"]
    assert key not in client.get(KEYS).content.decode()
    assert AuditEntry.objects.of_project(acme).get().action == "key.create"


def test_a_second_active_key_of_the_same_name_is_refused_so_a_reload_makes_none(client, acme):
    me = member("kim", acme, Role.MAINTAINER)
    client.force_login(me)
    assert client.post(KEYS, {"name": "ci-agent"}).status_code == 200
    again = client.post(KEYS, {"name": "ci-agent"})  # the browser's "resend the form?" after a reload
    first = ApiKey.objects.get(user=me)
    assert again.status_code == 400 and ApiKey.objects.filter(user=me).count() == 1
    assert f"kim has an active key named &#x27;ci-agent&#x27; already ({first.key_prefix}…)" in again.content.decode()
    # Revoking asks about that key by its prefix too; once revoked, the name is free again.
    assert f"Revoke the key “ci-agent” ({first.key_prefix}…)?" in again.content.decode()
    client.post(reverse("sessions:key_revoke", args=[first.pk]))
    assert client.post(KEYS, {"name": "ci-agent"}).status_code == 200
    assert ApiKey.objects.filter(user=me, name="ci-agent").count() == 2


def test_key_names_are_distinct_whatever_their_case_and_when_two_posts_race(client, acme, monkeypatch):
    me = member("kim", acme, Role.MAINTAINER)
    client.force_login(me)
    client.post(KEYS, {"name": "CI-Agent"})
    first = ApiKey.objects.get(user=me)
    again = client.post(KEYS, {"name": "ci-agent"})
    assert again.status_code == 400 and ApiKey.objects.filter(user=me).count() == 1
    assert f"kim has an active key named &#x27;CI-Agent&#x27; already ({first.key_prefix}…)" in again.content.decode()
    # A post that looked before the other's key was stored meets the database's constraint,
    # and is answered the same way (not a 500).
    real, looks = teams._active_key_named, []

    def looked_too_early(user, name):
        looks.append(name)
        return None if len(looks) == 1 else real(user, name)

    monkeypatch.setattr(teams, "_active_key_named", looked_too_early)
    raced = client.post(KEYS, {"name": "ci-AGENT"})
    assert raced.status_code == 400 and ApiKey.objects.filter(user=me).count() == 1
    assert f"active key named &#x27;CI-Agent&#x27; already ({first.key_prefix}…)" in raced.content.decode()


def test_a_key_name_told_apart_only_by_an_invisible_character_is_refused(client, acme):
    me = member("kim", acme, Role.MAINTAINER)
    client.force_login(me)
    client.post(KEYS, {"name": "k-maint1"})
    for name, shown in (("k-maint1\u200b", "U+200B"), ("k\u2060-maint1", "U+2060"), ("\u202ek-maint1", "U+202E"),
                        ("k-maint1\ufe0f", "U+FE0F"), ("k-maint1\u034f", "U+034F"), ("k\u00a0maint1", "U+00A0"),
                        ("k-maint1\u180b", "U+180B"), ("k-maint1\u200d", "U+200D")):  # fmt: skip
        refused = client.post(KEYS, {"name": name})
        assert refused.status_code == 400
        assert f"no invisible or direction-changing characters ({shown})" in refused.content.decode()
    assert list(ApiKey.objects.filter(user=me).values_list("name", flat=True)) == ["k-maint1"]


def test_a_key_cannot_name_a_project_i_am_not_in(client, acme, other):
    client.force_login(member("kim", acme, Role.VIEWER))
    response = client.post(KEYS, {"name": "sneaky", "project": "other"})
    assert response.status_code == 400 and "Select a valid choice" in response.content.decode()
    assert not ApiKey.objects.exists()


def test_revoking_my_key_and_not_someone_elses(client, acme):
    me, them = member("kim", acme), member("someone", acme)
    key_of(me, name="mine")
    key_of(them, name="theirs")
    mine, theirs = ApiKey.objects.get(name="mine"), ApiKey.objects.get(name="theirs")
    client.force_login(me)
    assert client.post(reverse("sessions:key_revoke", args=[theirs.pk])).status_code == 404
    response = client.post(reverse("sessions:key_revoke", args=[mine.pk]))
    assert response.status_code == 302 and response["Location"] == KEYS
    mine.refresh_from_db(), theirs.refresh_from_db()
    assert mine.revoked_at is not None and theirs.revoked_at is None
    assert "revoked" in client.get(KEYS).content.decode()


# --- every page -------------------------------------------------------------------------------


def test_anonymous_visitors_go_to_the_login_page(client, acme):
    for url in (PROJECTS, acme.get_absolute_url(), _url("audit", acme), KEYS):
        response = client.get(url)
        assert response.status_code == 302 and "/accounts/login/" in response["Location"], url


def test_the_nav_links_to_projects_and_keys(admin):
    html = admin.get(PROJECTS).content.decode()
    assert f'href="{PROJECTS}"' in html and f'href="{KEYS}"' in html


def test_each_filter_page_says_what_it_ignored(client, acme):
    signed_in(client, "rita", acme, Role.REVIEWER)
    for url, bad in (("/sessions/", "start=xx"), ("/imports/", "status=nope"), ("/search/", "project=\u202enowhere")):
        name, value = bad.split("=")
        page = client.get(url, {name: value}).content.decode()
        assert f"Ignored, not a valid value: <code><bdi>{name}={value}</bdi></code>." in page, url
        # Inside what htmx swaps when a filter changes: the next answer, without the bad value,
        # takes the notice away (it stayed, naming a value the address no longer held).
        partial = client.get(url, {name: value}, HTTP_HX_REQUEST="true").content.decode()
        assert "Ignored, not a valid value" in partial and "<html" not in partial, url
        assert "Ignored, not a valid value" not in client.get(url, HTTP_HX_REQUEST="true").content.decode(), url
    audit = client.get("/projects/acme/audit/", {"since": "2026-13-45"}, HTTP_HX_REQUEST="true").content.decode()
    assert "Ignored, not a valid value: <code><bdi>since=2026-13-45</bdi></code>" in audit and "<html" not in audit


def test_every_field_a_refusal_marks_points_at_the_words_that_say_why(admin, acme):
    # Django marks a refused field aria-describedby="id_<field>_error"; no element had that id,
    # so a screen reader on the field heard nothing of why.
    def described_and_found(html: str) -> list[tuple[str, bool]]:
        ids = set(re.findall(r'\bid="([^"]+)"', html))
        refs = [ref for refs in re.findall(r'aria-describedby="([^"]+)"', html) for ref in refs.split()]
        return [(ref, ref in ids) for ref in refs]

    pages = [
        admin.post(_url("project_member", acme), {"username": "nosuchuser", "role": "viewer"}),
        admin.post(PROJECTS, {"name": "", "slug": "Bad Slug"}),
        admin.post(KEYS, {"name": ""}),
        admin.post(_url("project_settings", acme), {"retention_days": "-4", "quota_mb": "x", "max_sessions": "1"}),
    ]
    for page in pages:
        assert page.status_code == 400
        found = described_and_found(page.content.decode())
        assert found and all(ok for _, ok in found), found
