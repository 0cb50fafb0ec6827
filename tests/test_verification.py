"""Verification: the chain covers every recorded field and content, and everything derived is
derived again, so an edit of any stored field of any event is found at its seq."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import orjson
import pytest
from django.conf import settings
from django.db import connection, models
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from sessions_app.chain import CONTENT_FIELDS, HEADER_FIELDS, commit, salt_of
from sessions_app.ingest.rows import SESSION_STATE
from sessions_app.models import Event, ImportJob, Project, Session, Snapshot
from sessions_app.verification import verify_session

pytestmark = pytest.mark.django_db

EDITED = 137
# The one column whose edit changes nothing anyone sees: the row's storage address.
NOT_SHOWN = {"id"}
EVENT_FIELDS = [f.name for f in Event._meta.concrete_fields if f.name not in NOT_SHOWN]


def _changed(field: models.Field, value, session: Session, other: Session):
    """A different value of the same type for one stored column."""
    if field.name == "session":
        return other
    if field.name == "salt":
        return ("f" if value[0] != "f" else "e") + value[1:]
    if field.name in ("payload", "step_state", "state_change", "kind_counts"):
        loaded = orjson.loads(value) if value else {}
        if isinstance(loaded, dict):
            loaded = {**loaded, "edited": True}
        return orjson.dumps(loaded).decode()
    if isinstance(field, models.BooleanField):
        return not value
    if isinstance(field, models.DateTimeField):
        return (value + timedelta(seconds=1)) if value is not None else session.created_at
    if isinstance(field, models.FloatField):
        return (value or 0.0) + 0.5
    if isinstance(field, (models.IntegerField, models.BigIntegerField)):
        if field.name == "seq":
            return value + 10_000
        return (value or 0) + 1
    if isinstance(field, (models.CharField, models.TextField)):
        value = value or ""
        if field.max_length and len(value) >= field.max_length:  # PostgreSQL keeps the length
            return value[:-1] + ("0" if value[-1] != "0" else "1")
        return value + "x"
    raise AssertionError(f"no edit defined for {field.name} ({type(field).__name__}): add one")


@pytest.fixture
def two_sessions(make_session):
    return make_session(events=300), make_session(events=3)


def test_an_untouched_session_verifies_and_the_result_is_stored(two_sessions):
    session, _ = two_sessions
    result = verify_session(session=session)
    assert (result.valid, result.first_broken_seq, result.events, result.broken_events) == (True, None, 300, 0)
    stored = Session.objects.get(pk=session.pk)
    assert stored.chain_state == "verified" and stored.chain_checked_count == 300


def test_a_session_is_not_verified_until_a_verification_ran(two_sessions):
    session, _ = two_sessions
    assert session.chain_state == "unverified"
    assert Session.objects.get(pk=session.pk).chain_valid is None


@pytest.mark.parametrize("name", EVENT_FIELDS)
def test_editing_any_stored_field_of_an_event_is_found_at_its_seq(two_sessions, name):
    session, other = two_sessions
    field = Event._meta.get_field(name)
    row = Event.objects.get(session=session, seq=EDITED)
    edited = _changed(field, getattr(row, field.name), session, other)
    Event.objects.filter(pk=row.pk).update(**{field.name: edited})

    result = verify_session(session=session)

    assert result.valid is False
    assert result.first_broken_seq == EDITED, result.findings
    assert Session.objects.get(pk=session.pk).chain_state == "broken"


def test_every_event_field_is_either_hashed_derived_or_declared_not_shown():
    from sessions_app.chain import RECORDED_FIELDS
    from sessions_app.ingest.rows import DERIVED_COLUMNS

    # `redacted` holds the commitments of removed values, checked with the link (chain.py).
    covered = set(RECORDED_FIELDS) | set(CONTENT_FIELDS) | set(DERIVED_COLUMNS) | {"seq", "salt", "redacted", "session"}
    assert set(EVENT_FIELDS) <= covered, set(EVENT_FIELDS) - covered


def test_one_edited_event_is_reported_once_not_with_every_event_after_it(two_sessions):
    session, _ = two_sessions
    Event.objects.filter(session=session, seq=EDITED).update(payload='{"forged": true}')
    result = verify_session(session=session)
    assert result.broken_events == 1 and result.findings[0]["field"] == "hash"


def test_a_rehashed_forgery_breaks_the_next_link(two_sessions):
    from sessions_app.chain import RECORDED_FIELDS, commitments, link_hash, recorded_values

    session, _ = two_sessions
    row = Event.objects.filter(session=session, seq=20).values().get()
    row["payload"] = '{"forged": true}'
    forged = link_hash(
        row["prev_hash"],
        20,
        recorded_values([row[n] for n in RECORDED_FIELDS]),
        commitments(row["salt"], [row[n] for n in CONTENT_FIELDS]),
    )
    Event.objects.filter(pk=row["id"]).update(payload=row["payload"], hash=forged)
    assert verify_session(session=session).first_broken_seq == 21


def test_a_deleted_event_is_found_where_it_was(two_sessions):
    session, _ = two_sessions
    Event.objects.filter(session=session, seq=50).delete()
    assert verify_session(session=session).first_broken_seq == 50


def test_events_missing_at_the_end_break_the_chain(two_sessions):
    session, _ = two_sessions
    # An earlier call whose answer went is broken at itself: its pair names an event gone.
    orphaned = Event.objects.filter(session=session, seq__lt=298, pair_seq__gte=298).values_list("seq", flat=True)
    Event.objects.filter(session=session, seq__gte=298).delete()
    result = verify_session(session=session)
    assert result.valid is False and result.first_broken_seq == min([298, *orphaned])


def test_an_edited_keyframe_is_found_at_its_seq(two_sessions):
    session, _ = two_sessions
    keyframe = Snapshot.objects.filter(session=session, kind=Snapshot.Kind.KEYFRAME).first()
    assert keyframe is not None
    Snapshot.objects.filter(pk=keyframe.pk).update(variables={"forged": 1})
    assert verify_session(session=session).first_broken_seq == keyframe.seq


# Every total the writer stores on the session, from its own list (a new one cannot be left out),
# but the head (checked link by link) and the reward (a source's stated total overrides the sum).
EDITABLE_TOTALS = sorted(set(SESSION_STATE) - {"head_hash", "reward"})


def _edited(column: str, value: object) -> object:
    field = Session._meta.get_field(column)
    if isinstance(field, models.JSONField):
        return {"forged": 1} if isinstance(value, dict) else ["forged"]
    return value + (7.5 if isinstance(field, models.FloatField) else 7)


@pytest.mark.parametrize("column", EDITABLE_TOTALS)
def test_each_edited_session_total_is_reported(two_sessions, column):
    session, _ = two_sessions
    stored = Session.objects.filter(pk=session.pk).values_list(column, flat=True).get()
    Session.objects.filter(pk=session.pk).update(**{column: _edited(column, stored)})
    result = verify_session(session=session)
    assert result.valid is False and Session.objects.get(pk=session.pk).chain_state == "broken"
    if column == "event_count":  # read first: the events it says the session has are missing
        assert (
            result.first_broken_seq == stored
            and result.findings[0]["why"] == f"events {stored}..{stored + 6} are missing"
        )
    else:
        assert result.first_broken_seq is None and [f["field"] for f in result.findings] == [f"session.{column}"]


def _header_edit(name: str, value: object, other: Project) -> object:
    """A different value, of the column's own type, for one of the session's sealed fields."""
    if name == "project_id":
        return other.pk
    if name == "import_job_id":  # pointed at another upload: its file would be served as the original
        return ImportJob.objects.create(project=other, original_name="someone-else.jsonl").pk
    if name == "parent_id":
        return Session.objects.create(project=other, source_format="canonical").pk
    field = Session._meta.get_field(name)
    if isinstance(field, models.JSONField):
        return {**(value or {}), "forged": 1}
    if isinstance(field, models.BooleanField):
        return not value
    if isinstance(field, models.DateTimeField):
        return value + timedelta(seconds=1) if value is not None else timezone.now()
    if isinstance(field, models.FloatField):
        return value + 0.5
    if name == "status":
        return "failed" if value != "failed" else "completed"
    return (value + "x")[-(field.max_length or 10_000) :]


@pytest.mark.parametrize("name", HEADER_FIELDS)
def test_editing_any_sealed_field_of_the_session_is_reported_by_its_name(make_session, name):
    from sessions_app.ingest.writer import finish_session

    session = make_session(events=12, task="find the bug", model="m-1", metadata={"team": "red", "n": 1e20})
    finish_session(session=session, final_answer="it was the cache")
    assert verify_session(session=session).valid  # as the writer left it
    other = Project.objects.create(name="Elsewhere", slug="elsewhere")
    stored = Session.objects.filter(pk=session.pk).values_list(name, flat=True).get()
    Session.objects.filter(pk=session.pk).update(**{name: _header_edit(name, stored, other)})

    result = verify_session(session=session)

    assert result.valid is False and result.first_broken_seq is None
    links = {"project_id": "project", "import_job_id": "import_job", "parent_id": "parent"}
    assert [f["field"] for f in result.findings] == [f"session.{links.get(name, name)}"], result.findings
    assert Session.objects.get(pk=session.pk).chain_state == "broken"


def test_a_link_the_database_empties_is_no_edit_and_an_earlier_edit_survives_a_later_write(make_session):
    """Deleting a session's upload job or parent session empties the link (the database's own
    SET NULL): that is no edit. A writer seals only what it sets: an edit made in the database
    before an append, a finish or a redaction is still found after it (a review found the next
    write sealing the forged value)."""
    from sessions_app.ingest.writer import append_events, finish_session, merge_session_metadata

    from .conftest import synthetic_events

    session = make_session(events=4, task="the real task")
    job = ImportJob.objects.create(project=session.project, original_name="run.jsonl")
    parent = make_session(events=1)
    Session.objects.filter(pk=session.pk).update(import_job=job, parent=parent)
    Session.objects.filter(pk=session.pk).reseal(["import_job_id", "parent_id"])
    assert verify_session(session=session).valid
    job.delete()
    parent.delete()
    assert Session.objects.filter(pk=session.pk, import_job=None, parent=None).exists()
    assert verify_session(session=session).valid

    Session.objects.filter(pk=session.pk).update(task="a forged task")
    append_events(session=session, events=synthetic_events(3, start=4))
    merge_session_metadata(session=Session.objects.get(pk=session.pk), metadata={"later": True})
    finish_session(session=session, final_answer="done")
    found = verify_session(session=session)
    assert [f["field"] for f in found.findings] == ["session.task"], found.findings


def test_a_session_stored_without_a_seal_is_not_verified(make_session):
    session = make_session(events=3)
    Session.objects.filter(pk=session.pk).update(header_seal="")
    result = verify_session(session=session)
    assert result.valid is False and [f["field"] for f in result.findings] == ["session.header_seal"]


# The session's columns that no seal or derivation covers, and why nothing a page shows is lost.
NOT_SEALED = {
    "id": "its storage address",
    "chain_valid": "verification's own result", "chain_broken_seq": "verification's own result",
    "chain_checked_at": "verification's own result", "chain_checked_count": "verification's own result",
    "chain_redaction_count": "verification's own result",
    "header_seal": "the seal itself",
    "source_digest": "the import's de-duplication key, never shown",
    "ingest_state": "the writer's saved state; what it gives is derived again from the events",
    "record_bytes": "what the quota counts, never shown as the session's",
    "idempotency_digest": "a retry's key, never shown",
    "updated_at": "bookkeeping of the last write",
}  # fmt: skip


def test_every_session_field_is_sealed_derived_or_declared_not_shown():
    columns = {f.attname for f in Session._meta.concrete_fields}
    assert columns - set(HEADER_FIELDS) - set(SESSION_STATE) - set(NOT_SEALED) == set()
    assert set(HEADER_FIELDS).isdisjoint(NOT_SEALED) and set(SESSION_STATE).isdisjoint(NOT_SEALED)


def test_numbers_a_database_keeps_otherwise_in_metadata_still_verify(make_session):
    """jsonb gives 1e+20 back as an integer and -0.0 as 0.0; the seal is of what either gives."""
    metadata = {"big": 1e20, "neg": -0.0, "tiny": 1.5e-7, "huge": 10**30, "pi": 3.141592653589793,
                "odd": 1.2345678901234568e25, "nested": {"b": 1, "a": [1.0, "1", None, True]}}  # fmt: skip
    # Sealed as created, from the values written (an append would seal them as read back).
    session = make_session(events=0, metadata=metadata)
    assert verify_session(session=session).valid, verify_session(session=session).findings
    Session.objects.filter(pk=session.pk).update(
        metadata={**metadata, "nested": {"b": "1", "a": [1.0, "1", None, True]}}
    )
    assert [f["field"] for f in verify_session(session=session).findings] == ["session.metadata"]


def test_a_content_value_replaced_by_its_commitment_still_verifies_the_link(two_sessions):
    """The chain's design for redaction: a field's commitment can stand in for its value."""
    from sessions_app.chain import RECORDED_FIELDS, link_hash, recorded_values

    session, _ = two_sessions
    row = Event.objects.filter(session=session, seq=7).values().get()
    kept = [commit(salt_of(row["salt"], name), row[name]) for name in CONTENT_FIELDS]
    assert link_hash(row["prev_hash"], 7, recorded_values([row[n] for n in RECORDED_FIELDS]), kept) == row["hash"]


DEMO = sorted(p for p in (Path(settings.BASE_DIR) / "demo").iterdir() if p.suffix in (".json", ".jsonl"))
FIXTURES = [
    Path(settings.BASE_DIR) / "tests" / "fixtures" / name
    for name in ("agentlens/two_sessions.ndjson", "daycare/complete_new.jsonl", "daycare/pending_tool_call.jsonl",
                 "flux0/support_chat.jsonl")
]  # fmt: skip


@pytest.mark.parametrize("path", DEMO + FIXTURES, ids=lambda p: p.name)
def test_every_format_verifies_after_import(path, project):
    from sessions_app.ingest.importing import import_file

    sessions = [o.session for o in import_file(path=path, project=project) if o.session is not None]
    assert sessions
    for session in sessions:
        result = verify_session(session=session)
        assert result.valid, result.findings


def test_verification_reads_the_session_a_chunk_at_a_time(make_session):
    session = make_session(events=1000)
    with CaptureQueriesContext(connection) as queries:
        verify_session(session=session, chunk=100)
    reads = [q["sql"] for q in queries.captured_queries if "salt, redacted, hash, prev_hash" in q["sql"]]
    assert len(reads) == 10
    assert all("LIMIT 100" in sql and "OFFSET" not in sql.upper() for sql in reads)


@pytest.mark.parametrize(
    "contents",
    [
        ("{}", None, None, None),
        ('{"a": 1}', "raw line", '{"step": 1}', '{"memory": []}'),
        ('"\ud800"', None, "\udfff", None),
    ],
)
def test_commitments_are_each_fields_commit_with_its_own_salt(contents):
    # The spelled-out fast form in chain.commitments must equal the definition, a lone surrogate
    # (kept as received from a "\\ud800" escape) included.
    from sessions_app.chain import commitments, new_salts

    salt = new_salts(1)[0]
    expected = [
        None if text is None else commit(salt_of(salt, name), text) for name, text in zip(CONTENT_FIELDS, contents)
    ]
    assert commitments(salt, contents) == expected


def test_an_edited_token_count_is_found_at_its_event_and_counted_at_each_total_it_no_longer_adds_up_to(make_session):
    # docs/api.md: the edited event's own link is one finding; each later event whose stored
    # running total the edited value no longer adds up to is counted too, naming the total.
    session = make_session(events=30)
    edited = Event.objects.filter(session=session, tokens__gt=0).order_by("seq").first()
    Event.objects.filter(pk=edited.pk).update(tokens=edited.tokens + 1000)
    result = verify_session(session=session)
    assert result.first_broken_seq == edited.seq
    at_edit = {f["field"] for f in result.findings if f["seq"] == edited.seq}
    assert "hash" in at_edit and "tokens_total" in at_edit
    after = [f for f in result.findings if f["seq"] is not None and f["seq"] > edited.seq]
    assert {f["seq"] for f in after} == set(range(edited.seq + 1, session.event_count))
    assert {f["field"] for f in after} == {"tokens_total"}
    assert result.broken_events == session.event_count - edited.seq


def test_one_verification_at_a_time_for_what_someone_asks_and_a_stale_run_is_taken_over(make_session, client):
    """A verify reads every event again: a second one asked for while the first runs (a member's
    button, the API, a sign-off) is told so rather than started (a member could otherwise start
    any number). A run left by a process that died is taken over after RUN_GIVEN_UP_AFTER."""
    from sessions_app import reviews
    from sessions_app.access import Actor
    from sessions_app.models import AuditEntry, Role, VerificationRun
    from sessions_app.verification import RUN_GIVEN_UP_AFTER, VerificationRunning, one_at_a_time, verify_once

    from .builders_teams import key_of, member

    session = make_session(events=20)
    rita = member("rita", Project.get_default(), Role.REVIEWER)
    api = Client(headers={"authorization": f"Bearer {key_of(rita)}"})
    client.force_login(rita)
    with one_at_a_time(session):
        for method in ("get", "post"):
            busy = getattr(api, method)(f"/api/sessions/{session.pk}/verify")
            assert busy.status_code == 409 and "already running" in busy.json()["detail"], method
        page = client.post(f"/sessions/{session.pk}/verify/", headers={"HX-Request": "true"})
        assert page.status_code == 200 and "a verification of this session is already running" in page.content.decode()
        with pytest.raises(reviews.SignOffRefused, match="already running .*; sign off once it has ended"):
            reviews.sign_off(session=session, reviewer=Actor(user=rita), verdict="approved")
        assert not AuditEntry.objects.filter(action="session.verify").exists()
    assert not VerificationRun.objects.exists()  # released when the block ends
    assert api.post(f"/api/sessions/{session.pk}/verify").json()["chainValid"] is True

    # Released when the verification fails too.
    with pytest.raises(RuntimeError), one_at_a_time(session):
        raise RuntimeError("a bug")
    assert not VerificationRun.objects.exists()

    # A read (the API's GET) writes nothing: its place is held in this process only.
    from sessions_app.verification import _reading_here

    with _reading_here(session.pk):
        assert api.get(f"/api/sessions/{session.pk}/verify").status_code == 409
    assert api.get(f"/api/sessions/{session.pk}/verify").status_code == 200 and not VerificationRun.objects.exists()

    VerificationRun.objects.create(
        session=session, started_at=timezone.now() - RUN_GIVEN_UP_AFTER - timedelta(seconds=1)
    )
    assert verify_once(session=session).valid and not VerificationRun.objects.exists()
    VerificationRun.objects.create(
        session=session, started_at=timezone.now() - RUN_GIVEN_UP_AFTER + timedelta(seconds=30)
    )
    with pytest.raises(VerificationRunning):
        verify_once(session=session)


def test_the_admin_shows_replays_records_but_adds_changes_and_deletes_none(make_session, client, rf):
    """Every change goes through the product, which checks and audits it: an admin edit or
    deletion did neither (a session deleted there left no session.delete, its tours shortened
    unsaid). Driven by the admin's own registry, so a model registered later is held too."""
    from django.contrib import admin
    from django.contrib.auth import get_user_model

    session = make_session(events=3, task="the real task")
    event = Event.objects.filter(session=session).first()
    root = get_user_model().objects.create_superuser("root", "root@example.org", "pw-root-12345")
    request = rf.get("/admin/")
    request.user = root
    from django_q.models import Schedule

    # Replay's own records and the job queue's (a schedule names a function the worker calls).
    registered = {model: model_admin for model, model_admin in admin.site._registry.items()
                  if model._meta.app_label in ("sessions_app", "django_q")}  # fmt: skip
    assert {Session, Event, Project, Schedule} <= set(registered)
    for model, model_admin in registered.items():
        allowed = (model_admin.has_add_permission(request), model_admin.has_change_permission(request),
                   model_admin.has_delete_permission(request))  # fmt: skip
        assert allowed == (False, False, False), model.__name__
        assert model_admin.has_view_permission(request), model.__name__
        assert not model_admin.get_actions(request), model.__name__

    client.force_login(root)
    shown = client.get(f"/admin/sessions_app/session/{session.pk}/change/")
    assert shown.status_code == 200 and 'name="_save"' not in shown.content.decode()
    changed = client.post(f"/admin/sessions_app/session/{session.pk}/change/", {"task": "another task"})
    assert changed.status_code == 403
    for path in (f"session/{session.pk}", f"event/{event.pk}", f"project/{session.project_id}"):
        assert client.post(f"/admin/sessions_app/{path}/delete/", {"post": "yes"}).status_code == 403, path
    assert client.get("/admin/sessions_app/project/add/").status_code == 403
    assert Session.objects.get(pk=session.pk).task == "the real task" and verify_session(session=session).valid
    assert Event.objects.filter(pk=event.pk).exists() and Project.objects.filter(pk=session.project_id).exists()
    assert client.get("/admin/auth/user/add/").status_code == 200  # the site's accounts stay Django's
    added = client.post("/admin/django_q/schedule/add/", {"func": "os.system", "args": "'true'", "schedule_type": "O"})
    assert added.status_code == 403 and not Schedule.objects.filter(func="os.system").exists()
    assert client.get("/admin/django_q/schedule/").status_code == 200
