"""Data migrations: what they do to rows stored before them."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, connection, transaction
from django.db.migrations.executor import MigrationExecutor

from sessions_app.models import ApiKey as Current

BEFORE = [("sessions_app", "0003_event_session_index_covered_by_seq")]
AFTER = [("sessions_app", "0004_session_status_interrupted")]


def migrate(targets):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


def stored_before(migration: str):
    """The database migrated back to just before `migration`: its Session and Event models as
    they were then, and the default project."""
    apps = migrate([("sessions_app", migration)])
    Project = apps.get_model("sessions_app", "Project")
    project = Project.objects.get_or_create(slug="default", defaults={"name": "Default"})[0]
    return apps.get_model("sessions_app", "Session"), apps.get_model("sessions_app", "Event"), project


@pytest.mark.django_db(transaction=True)
def test_0004_moves_stored_daycare_histories_that_stopped_mid_block_to_interrupted():
    apps = migrate(BEFORE)
    Project = apps.get_model("sessions_app", "Project")
    Session = apps.get_model("sessions_app", "Session")
    project = Project.objects.get_or_create(slug="default", defaults={"name": "Default"})[0]

    def stored(fmt: str, completed: bool, metadata: dict):
        return Session.objects.create(
            project=project, source_format=fmt, status="completed", completed=completed, metadata=metadata
        ).pk

    pending = stored("daycare", False, {"pending_phase": "tool_call"})
    finished = stored("daycare", True, {"pending_phase": None})
    other_format = stored("rlm_native", False, {"pending_phase": "tool_call"})
    try:
        apps = migrate(AFTER)
        status = dict(apps.get_model("sessions_app", "Session").objects.values_list("pk", "status"))
        assert status[pending] == "interrupted"
        assert status[finished] == "completed"
        assert status[other_format] == "completed"

        apps = migrate(BEFORE)  # and back: nothing is left with a status the old code lacks
        status = dict(apps.get_model("sessions_app", "Session").objects.values_list("pk", "status"))
        assert status[pending] == "completed"
    finally:
        migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())


@pytest.mark.django_db(transaction=True)
def test_0006_keeps_every_stored_event_and_drops_autoincrement_on_sqlite():
    before = [("sessions_app", "0005_event_numbers_64_bit")]
    after = [("sessions_app", "0006_event_id_without_autoincrement")]
    apps = migrate(before)
    Project = apps.get_model("sessions_app", "Project")
    Session = apps.get_model("sessions_app", "Session")
    Event = apps.get_model("sessions_app", "Event")
    project = Project.objects.get_or_create(slug="default", defaults={"name": "Default"})[0]
    session = Session.objects.create(project=project, source_format="rlm_native")
    stored = [
        Event.objects.create(
            session=session, seq=seq, kind="note", source_type="x", raw=f'{{"n": {seq}}}', hash="h", prev_hash="p"
        )
        for seq in range(3)
    ]
    try:
        apps = migrate(after)
        Event = apps.get_model("sessions_app", "Event")
        kept = list(Event.objects.filter(session_id=session.pk).order_by("seq").values_list("pk", "seq", "raw"))
        assert kept == [(event.pk, event.seq, event.raw) for event in stored]
        added = Event.objects.create(
            session_id=session.pk, seq=3, kind="note", source_type="x", raw="{}", hash="h", prev_hash="p"
        )
        assert added.pk > max(event.pk for event in stored)
        if connection.vendor == "sqlite":
            with connection.cursor() as cursor:
                cursor.execute("SELECT sql FROM sqlite_master WHERE name = 'sessions_app_event'")
                ddl = cursor.fetchone()[0]
            assert '"id" integer NOT NULL PRIMARY KEY' in ddl
            assert "AUTOINCREMENT" not in ddl
    finally:
        migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())


@pytest.mark.django_db
def test_events_carry_only_the_indexes_their_reads_use():
    # event_session_pair (dropped by 0007) served no query: pairing happens at ingest.
    with connection.cursor() as cursor:
        names = set(connection.introspection.get_constraints(cursor, "sessions_app_event"))
    assert "event_session_pair" not in names
    assert {
        "event_session_seq_uniq",
        "event_session_kind_seq",
        "event_session_step_pos",
        "event_session_error_seq",
    } <= names


@pytest.mark.django_db(transaction=True)
def test_0014_counts_the_priced_and_unpriced_events_of_stored_sessions():
    # Before 0014 a session's cost_usd of 0 could not tell "free" from "no price known".
    Session, Event, project = stored_before("0013_tours_share_links")

    def stored(*costs: tuple[float | None, bool]) -> int:
        session = Session.objects.create(project=project, source_format="canonical")
        for seq, (cost, unpriced) in enumerate(costs):
            Event.objects.create(session=session, seq=seq, kind="llm_response", source_type="x", raw="{}",
                                 hash="h", prev_hash="p", cost_usd=cost, cost_unpriced=unpriced)  # fmt: skip
        return session.pk

    unpriced = stored((None, True), (None, False))
    mixed = stored((0.01, False), (None, True), (0.0, False))
    empty = stored()
    try:
        apps = migrate([("sessions_app", "0014_session_priced_events")])
        counts = dict(
            (pk, (priced, unpriced_count))
            for pk, priced, unpriced_count in apps.get_model("sessions_app", "Session").objects.values_list(
                "pk", "priced_events", "unpriced_events"
            )
        )
        assert counts[unpriced] == (0, 1)
        assert counts[mixed] == (2, 1)  # a cost of 0.0 is a price
        assert counts[empty] == (0, 0)
    finally:
        migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())


@pytest.mark.django_db(transaction=True)
def test_0022_finds_the_session_of_each_stored_otlp_conversation_again():
    from sessions_app.ingest.traces import conversation_digest

    apps = migrate([("sessions_app", "0021_quotas_and_originals")])
    Project = apps.get_model("sessions_app", "Project")
    Session = apps.get_model("sessions_app", "Session")
    project = Project.objects.get_or_create(slug="default", defaults={"name": "Default"})[0]

    def stored(key: str, fmt: str = "otlp", parent=None) -> int:
        return Session.objects.create(project=project, source_format=fmt, source_session_id=key, parent=parent).pk

    first = stored("conv-1")
    stored("conv-1")  # a conversation split over two sessions: its oldest goes on
    other = stored("conv-2")
    child = stored("conv-1/abc", parent=Session.objects.get(pk=first))
    not_otlp = stored("conv-3", fmt="canonical")
    try:
        apps = migrate([("sessions_app", "0022_otlp_conversations")])
        rows = set(apps.get_model("sessions_app", "OtlpConversation").objects.values_list("digest", "session_id"))
        assert rows == {(conversation_digest("conv-1"), first), (conversation_digest("conv-2"), other)}
        assert child and not_otlp
    finally:
        migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())


@pytest.mark.django_db(transaction=True)
def test_0024_counts_the_records_of_sessions_stored_before_0021_toward_the_quota():
    Session, Event, project = stored_before("0023_receivedevent_content_digest")

    def stored(records: list[tuple[str | None, str]], record_bytes: int = 0) -> int:
        session = Session.objects.create(project=project, source_format="canonical", event_count=len(records),
                                         record_bytes=record_bytes)  # fmt: skip
        for seq, (raw, payload) in enumerate(records):
            Event.objects.create(session=session, seq=seq, kind="custom", source_type="x", raw=raw, payload=payload,
                                 hash="h", prev_hash="p")  # fmt: skip
        return session.pk

    # Kept records count as received (characters, as the writer counts); an import's events,
    # whose file was kept instead, by their stored payload.
    live = stored([('{"a": "é"}', "{}"), ("[1, 2]", "{}")])
    imported = stored([(None, '{"x": 1}'), (None, "{}")])
    counted = stored([("abc", "{}")], record_bytes=777)  # stored after 0021: left as counted
    empty = stored([])
    try:
        apps = migrate([("sessions_app", "0024_backfill_record_bytes")])
        counts = dict(apps.get_model("sessions_app", "Session").objects.values_list("pk", "record_bytes"))
        assert counts[live] == len('{"a": "é"}') + len("[1, 2]")
        assert counts[imported] == len('{"x": 1}') + len("{}")
        assert counts[counted] == 777 and counts[empty] == 0
    finally:
        migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())


@pytest.mark.django_db(transaction=True)
def test_0026_tells_apart_the_active_keys_of_one_name_then_holds_names_distinct():
    apps = migrate([("sessions_app", "0025_review_restored_from")])
    ApiKey = apps.get_model("sessions_app", "ApiKey")
    User = apps.get_model("auth", "User")
    kim, lee = User.objects.create(username="kim"), User.objects.create(username="lee")

    def key(user, name: str, prefix: str, revoked: bool = False) -> int:
        return ApiKey.objects.create(name=name, user=user, key_prefix=prefix, key_hash=prefix * 4,
                                     revoked_at="2026-01-01T00:00Z" if revoked else None).pk  # fmt: skip

    first, second, third = key(kim, "ci", "rpl_aaaa"), key(kim, "CI", "rpl_bbbb"), key(kim, "ci", "rpl_cccc")
    revoked, others = key(kim, "ci", "rpl_dddd", revoked=True), key(lee, "ci", "rpl_eeee")
    try:
        apps = migrate([("sessions_app", "0026_one_active_key_name_per_user")])
        names = dict(apps.get_model("sessions_app", "ApiKey").objects.values_list("pk", "name"))
        assert names == {first: "ci", second: "CI (rpl_bbbb)", third: "ci (rpl_cccc)", revoked: "ci", others: "ci"}
    finally:
        migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())
    with pytest.raises(IntegrityError), transaction.atomic():
        Current.objects.create(name="Ci", user_id=kim.pk, key_prefix="rpl_ffff", key_hash="f" * 64)


@pytest.mark.django_db(transaction=True)
def test_0027_marks_the_comments_restored_before_it_and_only_those():
    Session, Event, project = stored_before("0026_one_active_key_name_per_user")
    apps = migrate([("sessions_app", "0026_one_active_key_name_per_user")])
    Comment = apps.get_model("sessions_app", "Comment")
    User = apps.get_model("auth", "User")
    ada = User.objects.create(username="ada")
    restored = Session.objects.create(
        project=project, source_format="replay_bundle", bundle_origin={"fingerprint": "ab" * 32}
    )
    local = Session.objects.create(project=project, source_format="canonical")
    from_bundle = Comment.objects.create(session_id=restored.pk, seq=0, author_name="rita", body="x").pk
    written_here = Comment.objects.create(session_id=restored.pk, seq=0, author=ada, author_name="ada", body="y").pk
    elsewhere = Comment.objects.create(session_id=local.pk, seq=0, author_name="gone", body="z").pk
    try:
        apps = migrate([("sessions_app", "0027_comment_restored_from")])
        marks = dict(apps.get_model("sessions_app", "Comment").objects.values_list("pk", "restored_from"))
        assert marks == {from_bundle: "ab" * 32, written_here: "", elsewhere: ""}
    finally:
        migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())


@pytest.mark.django_db(transaction=True)
def test_0031_seals_the_sessions_stored_before_it_as_they_are():
    from sessions_app.models import Session as CurrentSession
    from sessions_app.verification import verify_session

    Session, _Event, project = stored_before("0030_otlp_trace_staged_chars")
    stored = Session.objects.create(
        project=project, source_format="canonical", task="stored before", status="completed", completed=True,
        final_answer="42", metadata={"big": 1e20, "team": "red"}, reward=1,
    ).pk  # fmt: skip
    try:
        migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())
        session = CurrentSession.objects.get(pk=stored)
        assert session.header_seal and verify_session(session=session).valid
        CurrentSession.objects.filter(pk=stored).update(final_answer="43")  # from here on, an edit is found
        assert [f["field"] for f in verify_session(session=session).findings] == ["session.final_answer"]
    finally:
        migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())


def test_every_sealed_session_field_has_a_migration_that_sealed_the_sessions_stored_before_it():
    """A field added to chain.HEADER_FIELDS reads as edited in every session stored before, unless a
    migration added its digest to their seals: the fields those migrations seal are the fields."""
    import importlib

    from sessions_app.chain import HEADER_FIELDS

    sealed = importlib.import_module("sessions_app.migrations.0031_session_header_seal").SEALED
    assert tuple(HEADER_FIELDS) == sealed
