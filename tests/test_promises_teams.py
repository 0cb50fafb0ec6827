"""Promises of docs/teams.md (its share links and tours) no other test held the code to: a share
link's export right is its own session's only, a signed-in visitor is audited by name, a
sign-off is flagged by a break at its very last event, and tour mode after a session is deleted
shows the next stop whole, and a stop's edit is audited without its words."""

from __future__ import annotations

import orjson
import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse

from sessions_app import reviews, tours
from sessions_app.access import Actor
from sessions_app.models import AuditEntry, Event, Role, ShareLink
from sessions_app.replay import sign_offs
from sessions_app.verification import verify_session

from .builders_teams import acme, member, mia, vic  # noqa: F401  (fixtures)
from .test_page_tours import first, player, second, section, tour  # noqa: F401  (fixtures)
from .test_reviews import _session
from .test_sharing import _link, _player, _signed_in, _visitor, hidden, shown  # noqa: F401  (fixtures)

pytestmark = pytest.mark.django_db


# --- share links ------------------------------------------------------------------------------


def test_a_browser_holding_two_links_exports_only_the_session_whose_link_allows_it(acme, shown, hidden):
    # Each grant covers its own session: the export right of one link must not leak to the other
    # session the same browser opened through a link that does not allow exports.
    maintainer = member("mia", acme, Role.MAINTAINER)
    _, allowing = _link(shown, maintainer, allow_export=True)
    _, plain = _link(hidden, maintainer)
    visitor = _visitor(allowing)
    assert visitor.get(f"/s/{plain}").status_code == 302  # both opened, in the same browser
    assert visitor.get(_player(hidden)).status_code == 200
    exported = visitor.get(reverse("sessions:export", args=[shown.pk]), {"format": "jsonl"})
    assert exported.status_code == 200
    refused = visitor.get(reverse("sessions:export", args=[hidden.pk]), {"format": "jsonl"})
    assert refused.status_code == 403
    assert "does not allow exports" in refused.content.decode()


def test_a_signed_in_outsider_on_a_link_is_audited_by_their_own_name(acme, shown):
    # docs/teams.md, share links: a visitor without an account is named by the link (share:<id>); one who is
    # signed in (no member of the project) acts as themself, and the audit log says who.
    _, token = _link(shown, member("mia", acme, Role.MAINTAINER), allow_export=True)
    outsider = get_user_model().objects.create_user(username="otto", password="x")  # no membership at all
    browser = _signed_in(outsider)
    assert browser.get(f"/s/{token}").status_code == 302
    verified = browser.post(reverse("sessions:verify", args=[shown.pk]))
    assert verified.status_code == 302
    exported = browser.get(reverse("sessions:export", args=[shown.pk]), {"format": "jsonl"})
    assert exported.status_code == 200
    b"".join(exported.streaming_content)
    for action in ("session.verify", "session.export"):
        entry = AuditEntry.objects.filter(action=action, target=f"session:{shown.pk}").latest("seq")
        assert entry.actor == "otto", (action, entry.actor)
    link_id = ShareLink.objects.get().pk
    assert not AuditEntry.objects.filter(action__in=("session.verify", "session.export"),
                                         actor=f"share:{link_id}").exists()  # fmt: skip


# --- sign-offs --------------------------------------------------------------------------------


def test_a_break_at_the_sign_offs_last_covered_event_flags_it(acme):
    # The last covered event is inside the range: "events 1-10 of 10" covers seq 9.
    session = _session(acme, 10)
    rita = member("rita", acme, Role.REVIEWER)
    review = reviews.sign_off(session=session, reviewer=Actor(user=rita), verdict="approved")
    assert review.last_seq == 9
    recorded = Event.objects.get(session=session, seq=9).tokens
    Event.objects.filter(session=session, seq=9).update(tokens=(recorded or 0) + 1000)  # hashes left as they were
    assert verify_session(session=session).first_broken_seq == 9
    [found] = sign_offs.sign_offs_of(session=session)
    assert found.coverage.broken_seq == 9
    assert found.coverage.unchanged is False
    [row] = _signed_in(member("vic", acme, Role.VIEWER)).get(f"/api/sessions/{session.pk}/reviews").json()
    assert (row["broken_seq"], row["unchanged"]) == (9, False)


# --- tours ------------------------------------------------------------------------------------


def test_after_stop_twos_session_is_deleted_stop_two_is_what_was_stop_three_with_its_narration(
    vic, tour, first, second
):
    # The fixture's stops: first-run #2, second-run #5 (deleted here), first-run #9 "The fix",
    # narrated "Here it *works*.". Deleting a session leaves a gap in the positions (0 and 2).
    second.delete()
    mode = tours.tour_mode(tour=tour, session=first, number=2)
    assert (mode.number, mode.count, mode.stop.title, mode.stop.seq) == (2, 2, "The fix", 9)
    assert str(mode.narration_html) == "<p>Here it <em>works</em>.</p>\n"
    panel = section(player(vic, first, step=9, tour=tour.pk, stop=2), "tour-narration")
    assert "Stop 2 of 2" in panel and "The fix" in panel
    assert "<p>Here it <em>works</em>.</p>" in panel


def test_changing_a_stop_records_tour_change_naming_its_number_and_no_narration(acme, tour):
    actor = Actor(user=member("mia", acme, Role.MAINTAINER))
    stop_two = tours.stops_of(tour=tour)[1]
    before = AuditEntry.objects.filter(action="tour.change").count()
    tours.change_stop(actor=actor, tour=tour, stop_id=stop_two.pk, title="Renamed stop",
                      narration="SECRET-NARRATION of the stop")  # fmt: skip
    entries = list(AuditEntry.objects.filter(action="tour.change").order_by("seq"))
    assert len(entries) == before + 1
    changed = entries[-1]
    assert (changed.actor, changed.target) == ("mia", f"tour:{tour.pk}")
    assert orjson.loads(changed.detail) == {"stop_changed": 2}
    assert "SECRET" not in changed.detail and "Renamed" not in changed.detail
