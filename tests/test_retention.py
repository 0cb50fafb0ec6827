"""Retention per project: a project's own retention_days wins over REPLAY_RETENTION_DAYS, each run
that deletes something is a `retention.run` entry in the affected projects' audit logs, and a
change of the project page's retention is a `project.change` entry."""

from __future__ import annotations

from datetime import timedelta

import orjson
import pytest
from django.core.management import call_command
from django.urls import reverse
from django.utils import timezone

from sessions_app import audit, jobs, retention
from sessions_app.canonical import SessionMeta
from sessions_app.ingest.writer import append_events, create_session, set_checkpoint
from sessions_app.models import AuditEntry, Event, Project, Role, Session

from .builders_teams import acme, member, other  # noqa: F401  (fixtures)
from .conftest import synthetic_events


def old_session(project: Project, *, days: float, events: int = 3, task: str = "secret task text") -> Session:
    """A finished session of `project` created (and last written) `days` days ago."""
    session = create_session(project=project, source_format="canonical", meta=SessionMeta(task=task))
    if events:
        append_events(session=session, events=synthetic_events(events))
    then = timezone.now() - timedelta(days=days)
    Session.objects.filter(pk=session.pk).update(created_at=then, updated_at=then, status="completed")
    return session


def left(*sessions: Session) -> set[int]:
    return set(Session.objects.filter(pk__in=[s.pk for s in sessions]).values_list("pk", flat=True))


def retention_entries(project: Project) -> list[AuditEntry]:
    return list(AuditEntry.objects.of_project(project).filter(action="retention.run").order_by("seq"))


# --- which sessions go ------------------------------------------------------------------------


def test_a_projects_own_retention_wins_over_the_server_default(acme, other, settings):
    settings.RETENTION_DAYS = 30
    acme.retention_days = 7
    acme.save()
    acme_10, acme_5 = old_session(acme, days=10), old_session(acme, days=5)
    other_10, other_40 = old_session(other, days=10), old_session(other, days=40)
    result = jobs.run_cleanup()
    assert left(acme_10, acme_5, other_10, other_40) == {acme_5.pk, other_10.pk}
    assert result["sessions"] == 2 and result["events"] == 6
    by_project = {p["project"]: p for p in result["projects"]}
    assert by_project["acme"]["days"] == 7 and by_project["acme"]["sessions"] == 1
    assert by_project["other"]["days"] == 30 and by_project["other"]["sessions"] == 1


def test_a_longer_project_retention_keeps_what_the_server_default_would_delete(acme, settings):
    settings.RETENTION_DAYS = 7
    acme.retention_days = 365
    acme.save()
    kept = old_session(acme, days=100)
    assert jobs.run_cleanup()["sessions"] == 0
    assert left(kept) == {kept.pk}


def test_without_a_server_default_only_projects_with_their_own_retention_are_cleaned(acme, other, settings):
    settings.RETENTION_DAYS = None
    acme.retention_days = 10
    acme.save()
    acme_old, other_ancient = old_session(acme, days=11), old_session(other, days=4000)
    result = jobs.run_cleanup()
    assert left(acme_old, other_ancient) == {other_ancient.pk}
    assert [p["project"] for p in result["projects"]] == ["acme"]


def test_project_retention_keeps_checkpointed_and_still_live_sessions(acme, settings):
    settings.RETENTION_DAYS = None
    acme.retention_days = 5
    acme.save()
    checkpointed = old_session(acme, days=9)
    set_checkpoint(session=checkpointed, name="keep", seq=1)
    live = create_session(project=acme, source_format="canonical", meta=SessionMeta())
    Session.objects.filter(pk=live.pk).update(created_at=timezone.now() - timedelta(days=9))  # still written to
    result = jobs.run_cleanup()
    assert left(checkpointed, live) == {checkpointed.pk, live.pk}
    assert result["sessions"] == 0 and result["kept_checkpointed"] == 1
    assert jobs.run_cleanup(include_checkpointed=True)["sessions"] == 1
    assert left(checkpointed, live) == {live.pk}


def test_a_live_session_no_longer_written_to_is_deleted_and_the_cutoff_is_strict(acme, settings):
    settings.RETENTION_DAYS = None
    acme.retention_days = 5
    acme.save()
    now = timezone.now()
    abandoned, written, at_cutoff = (create_session(project=acme, source_format="canonical", meta=SessionMeta())
                                     for _ in range(3))  # fmt: skip
    # Left live nine days ago, never ended: nothing is still coming, so it goes as any other.
    Session.objects.filter(pk=abandoned.pk).update(
        created_at=now - timedelta(days=9), updated_at=now - timedelta(days=6)
    )
    Session.objects.filter(pk=written.pk).update(created_at=now - timedelta(days=9), updated_at=now - timedelta(days=1))
    assert retention.expired_sessions(project=acme, cutoff=now - timedelta(days=5), include_checkpointed=False).filter(
        pk__in=[abandoned.pk, written.pk, at_cutoff.pk]
    ).count() == 1  # fmt: skip
    cutoff = now - timedelta(days=5)
    Session.objects.filter(pk=at_cutoff.pk).update(status=Session.Status.COMPLETED, created_at=cutoff)
    found = retention.expired_sessions(project=acme, cutoff=cutoff, include_checkpointed=False)
    assert set(found.values_list("pk", flat=True)) == {abandoned.pk}  # created exactly at the cutoff: kept
    Session.objects.filter(pk=at_cutoff.pk).update(created_at=now - timedelta(days=4))  # the run's cutoff is later
    assert jobs.run_cleanup()["sessions"] == 1
    assert left(abandoned, written, at_cutoff) == {written.pk, at_cutoff.pk}


def test_deletes_run_in_chunks_and_take_the_events_along(acme, settings, monkeypatch):
    monkeypatch.setattr(retention, "DELETE_CHUNK", 2)
    settings.RETENTION_DAYS = None
    acme.retention_days = 1
    acme.save()
    doomed = [old_session(acme, days=3, events=4) for _ in range(5)]
    result = retention.delete_expired_sessions(days=None)
    assert result.sessions == 5 and result.events == 20
    assert not Session.objects.filter(project=acme).exists()
    assert not Event.objects.filter(session_id__in=[s.pk for s in doomed]).exists()
    [entry] = retention_entries(acme)  # one entry per run and project, not one per chunk
    assert orjson.loads(entry.detail)["sessions"] == 5


# --- the audit entries ------------------------------------------------------------------------


def test_a_run_records_retention_run_in_each_affected_projects_log(acme, other, settings):
    settings.RETENTION_DAYS = 30
    acme.retention_days = 7
    acme.save()
    untouched = Project.objects.create(name="Untouched", slug="untouched")
    old_session(acme, days=8, events=5)
    old_session(acme, days=9, events=2)
    old_session(other, days=31, events=1)
    old_session(untouched, days=2)
    now = timezone.now()
    retention.delete_expired_sessions(days=30, now=now)
    [acme_entry] = retention_entries(acme)
    [other_entry] = retention_entries(other)
    assert retention_entries(untouched) == [] and not AuditEntry.objects.of_project(untouched).exists()
    assert (acme_entry.actor, acme_entry.target, acme_entry.ip, acme_entry.key_prefix) == (
        "retention", "project:acme", None, ""
    )  # fmt: skip
    detail = orjson.loads(acme_entry.detail)
    assert detail == {"days": 7, "cutoff": (now - timedelta(days=7)).isoformat(), "sessions": 2, "events": 7,
                      "include_checkpointed": False}  # fmt: skip
    assert orjson.loads(other_entry.detail)["days"] == 30 and orjson.loads(other_entry.detail)["sessions"] == 1
    assert "secret task text" not in acme_entry.detail
    assert audit.verify_log(project=acme).valid and audit.verify_log(project=other).valid


def test_a_run_names_the_tours_it_shortens_as_a_deletion_from_the_player_does(acme, settings):
    from sessions_app import tours
    from sessions_app.access import Actor
    from sessions_app.models import Tour

    acme.retention_days = 7
    acme.save()
    gone, kept = old_session(acme, days=8, events=5), old_session(acme, days=2, events=5)
    actor = Actor(user=member("mia", acme, Role.MAINTAINER))
    walk = tours.create_tour(actor=actor, project=acme, title="Onboarding")
    tours.set_stops(actor=actor, tour=walk, stops=[
        tours.StopSpec(session=gone.pk, seq=1, title="a"), tours.StopSpec(session=kept.pk, seq=1, title="b"),
        tours.StopSpec(session=gone.pk, seq=3, title="c"),
    ])  # fmt: skip
    before = Tour.objects.get(pk=walk.pk).updated_at
    retention.delete_expired_sessions(days=None)
    [entry] = retention_entries(acme)
    assert orjson.loads(entry.detail)["tour_stops"] == {str(walk.pk): 2}
    change = AuditEntry.objects.filter(action="tour.change", target=f"tour:{walk.pk}").latest("seq")
    assert change.actor == "retention" and orjson.loads(change.detail) == {"stops_removed": 2, "by": "retention"}
    assert Tour.objects.get(pk=walk.pk).updated_at > before and walk.stops.count() == 1
    assert audit.verify_log(project=acme).valid


def test_a_dry_run_or_a_run_that_deletes_nothing_records_nothing(acme, settings, capsys):
    settings.RETENTION_DAYS = None
    acme.retention_days = 3
    acme.save()
    doomed = old_session(acme, days=4, events=6)
    call_command("cleanup_sessions", "--dry-run")
    assert "acme: 1 session(s) (6 events)" in capsys.readouterr().out
    assert left(doomed) == {doomed.pk} and retention_entries(acme) == []
    old_session(acme, days=1)
    call_command("cleanup_sessions")
    call_command("cleanup_sessions")  # nothing left to delete
    assert left(doomed) == set()
    assert len(retention_entries(acme)) == 1


def test_the_command_without_days_or_setting_still_cleans_projects_with_their_own(acme, settings, capsys):
    settings.RETENTION_DAYS = None
    acme.retention_days = 2
    acme.save()
    doomed = old_session(acme, days=3, events=2)
    call_command("cleanup_sessions")
    out = capsys.readouterr().out
    assert "only projects with their own retention" in out
    assert "Deleted 1 session(s) (2 events) in 1 project(s)" in out
    assert left(doomed) == set()


def test_the_commands_days_stands_in_for_the_server_default_only(acme, other, settings):
    settings.RETENTION_DAYS = None
    acme.retention_days = 100
    acme.save()
    acme_50, other_50 = old_session(acme, days=50), old_session(other, days=50)
    call_command("cleanup_sessions", "--days", "10")
    assert left(acme_50, other_50) == {acme_50.pk}


# --- the project page's setting ---------------------------------------------------------------


def test_changing_the_retention_on_the_project_page_records_project_change(client, acme):
    client.force_login(member("ada", acme, Role.ADMIN))
    url = reverse("sessions:project_settings", args=[acme.slug])
    assert client.post(url, {"retention_days": "30"}, REMOTE_ADDR="10.1.2.3").status_code == 302
    client.post(url, {"retention_days": "30"})  # unchanged: nothing to record
    client.post(url, {"retention_days": ""})
    changes = list(AuditEntry.objects.of_project(acme).filter(action="project.change").order_by("seq"))
    assert [orjson.loads(e.detail) for e in changes] == [
        {"retention_days": {"from": None, "to": 30}}, {"retention_days": {"from": 30, "to": None}},
    ]  # fmt: skip
    assert (changes[0].actor, changes[0].target, changes[0].ip) == ("ada", "project:acme", "10.1.2.3")
    acme.refresh_from_db()
    assert acme.retention_days is None


def test_a_refused_retention_change_records_nothing(client, acme):
    client.force_login(member("ada", acme, Role.ADMIN))
    member("mia", acme, Role.MAINTAINER)
    url = reverse("sessions:project_settings", args=[acme.slug])
    assert client.post(url, {"retention_days": "0"}).status_code == 400
    client.force_login(member("mia", acme, Role.MAINTAINER))
    assert client.post(url, {"retention_days": "5"}).status_code == 403
    assert not AuditEntry.objects.of_project(acme).filter(action="project.change").exists()
    acme.refresh_from_db()
    assert acme.retention_days is None
