"""Destructive forms without JavaScript: hx-confirm and data-confirm cannot ask, so the form's
<noscript> field makes the server ask first (views/pages.py asked_first); the question's own
form acts, and htmx (which asked already) acts at once."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.urls import reverse

from sessions_app import comments, sharing, tours
from sessions_app.access import Actor
from sessions_app.models import ApiKey, Comment, Membership, Role, ShareLink, Tour, TourStop

from .builders_teams import acme, key_of, member  # noqa: F401  (fixtures)
from .test_audit import ours  # noqa: F401  (fixture)

NOSCRIPT = '<noscript><input type="hidden" name="ask_first" value="1"></noscript>'


@pytest.fixture
def world(acme, ours):  # noqa: F811
    ada = member("ada", acme, Role.ADMIN)
    member("bob", acme, Role.VIEWER)
    actor = Actor(user=ada)
    comment = comments.create_comment(actor=actor, session=ours, body="look here", seq=2)
    tour = tours.create_tour(actor=actor, project=acme, title="Walk")
    tours.add_stop(actor=actor, tour=tour, session=ours, seq=1, title="one")
    tours.add_stop(actor=actor, tour=tour, session=ours, seq=2, title="two")
    link, _ = sharing.create_link(actor=actor, session=ours)
    key_of(ada, name="ci")
    client = Client()
    client.force_login(ada)
    return client, ada, comment, tour, link


def _cases(world, acme, ours):  # noqa: F811
    client, ada, comment, tour, link = world
    key = ApiKey.objects.get(user=ada)
    stop = TourStop.objects.filter(tour=tour).order_by("position").first()
    return [
        # (page holding the form, action, fields, question, done?)
        (f"/sessions/{ours.pk}/?step=2", reverse("sessions:comment_delete", args=[ours.pk, comment.pk]), {},
         "Delete this comment?", lambda: Comment.objects.get(pk=comment.pk).deleted_at is not None),
        (reverse("sessions:tour", args=[tour.pk]), reverse("sessions:tour_stop_delete", args=[tour.pk, stop.pk]), {},
         "Delete this stop of the tour “Walk”?", lambda: not TourStop.objects.filter(pk=stop.pk).exists()),
        (reverse("sessions:share_links", args=[ours.pk]), reverse("sessions:share_link_revoke", args=[link.pk]), {},
         "Revoke the link “(no note)” by ada, expiring", lambda: ShareLink.objects.get(pk=link.pk).revoked_at is not None),
        (reverse("sessions:keys"), reverse("sessions:key_revoke", args=[key.pk]), {},
         "Revoke the key “ci”", lambda: ApiKey.objects.get(pk=key.pk).revoked_at is not None),
        (acme.get_absolute_url(), reverse("sessions:project_member_remove", args=[acme.slug]), {"username": "bob"},
         "Remove bob from Acme?", lambda: not Membership.objects.filter(user__username="bob").exists()),
        (reverse("sessions:tour", args=[tour.pk]), reverse("sessions:tour_delete", args=[tour.pk]), {},
         "Delete the tour “Walk” and its stops?", lambda: not Tour.objects.filter(pk=tour.pk).exists()),
    ]  # fmt: skip


def test_without_javascript_each_destructive_form_asks_first_then_acts(world, acme, ours):  # noqa: F811
    client = world[0]
    for page, action, fields, question, done in _cases(world, acme, ours):
        html = client.get(page).content.decode()
        form = html[html.index(f'action="{action}"') :]
        assert NOSCRIPT in form[: form.index("</form>")], action
        asked = client.post(action, {**fields, "ask_first": "1"})
        said = asked.content.decode()
        assert asked.status_code == 200 and question in said and not done(), action
        # The question's form posts the same fields again, without ask_first: that post acts.
        again = dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', said))
        assert f'<form class="confirm" method="post" action="{action}">' in said and "ask_first" not in again
        again.pop("csrfmiddlewaretoken", None)
        assert client.post(action, again).status_code in (200, 302) and done(), action


def test_htmx_asked_already_so_its_post_acts_at_once(world, acme, ours):  # noqa: F811
    client = world[0]
    page, action, fields, question, done = _cases(world, acme, ours)[0]
    response = client.post(action, {**fields, "ask_first": "1"}, HTTP_HX_REQUEST="true")
    assert response.status_code == 200 and question not in response.content.decode() and done()


def test_removing_oneself_is_asked_as_leaving_the_project(world, acme):  # noqa: F811
    client, ada, *_ = world
    action = reverse("sessions:project_member_remove", args=[acme.slug])
    page = client.get(acme.get_absolute_url()).content.decode()
    assert (
        f'data-confirm="Leave {acme.name}? You lose access to its sessions until an admin adds you again. '
        'The 1 open share link you made here will stop working, for good."'
    ) in page
    asked = client.post(action, {"username": ada.get_username(), "ask_first": "1"}).content.decode()
    assert f"Leave {acme.name}? You lose access to its sessions" in asked and "1 open share link you made" in asked
    assert Membership.objects.filter(user=ada, project=acme).exists()
