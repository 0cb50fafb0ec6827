"""The append-only event store: seq order, running totals, pairing, the hash chain, cascade."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import orjson
import pytest
from django.db import connection, connections

from sessions_app.ingest.rows import sqlite_timestamp
from sessions_app.ingest.writer import append_events
from sessions_app.models import Event, Session, Snapshot

from .conftest import synthetic_events


def test_seq_is_gap_free_across_appends(make_session):
    session = make_session(events=12)
    append_events(session=session, events=synthetic_events(8, start=12))
    seqs = list(Event.objects.filter(session=session).values_list("seq", flat=True))
    assert seqs == list(range(20))
    session.refresh_from_db()
    assert session.event_count == 20


def test_running_totals_equal_a_recount_from_scratch(make_session):
    session = make_session(events=50)
    # Split into two appends so totals must carry across batches.
    append_events(session=session, events=synthetic_events(37, start=50))
    rows = list(Event.objects.filter(session=session).order_by("seq"))
    cost = tokens = errors = steps = 0
    reward = 0.0
    counts: dict[str, int] = {}
    for row in rows:
        cost += row.cost_usd or 0
        tokens += row.tokens or 0
        errors += int(row.is_error)
        steps += int(row.step_pos is not None)
        reward += row.reward or 0
        counts[row.kind] = counts.get(row.kind, 0) + 1
        assert row.cost_total == pytest.approx(cost)
        assert row.tokens_total == tokens
        assert row.errors_total == errors
        assert row.steps_total == steps
        assert row.reward_total == pytest.approx(reward)
        assert orjson.loads(row.kind_counts) == counts
        assert row.elapsed_ms == pytest.approx((row.ts - rows[0].ts).total_seconds() * 1000)
    session.refresh_from_db()
    assert session.cost_usd == pytest.approx(cost)
    assert session.tokens == tokens
    assert session.error_count == errors
    assert session.step_count == steps


def test_calls_are_paired_with_their_responses_across_batches(make_session):
    session = make_session(events=5001)  # the first llm_call's answer lands in the next batch
    append_events(session=session, events=synthetic_events(4, start=5001))
    call = Event.objects.get(session=session, seq=5000)
    response = Event.objects.get(session=session, seq=5001)
    assert (call.kind, response.kind) == ("llm_call", "llm_response")
    assert call.pair_seq == 5001 and response.pair_seq == 5000
    assert call.pair_duration_ms == pytest.approx(250.0)


def test_hash_chain_links_every_event_to_the_previous(make_session):
    from sessions_app.chain import CONTENT_FIELDS, RECORDED_FIELDS, commitments, link_hash, recorded_values

    session = make_session(events=30)
    rows = list(Event.objects.filter(session=session).order_by("seq").values())
    prev = rows[0]["prev_hash"]
    for row in rows:
        assert row["prev_hash"] == prev
        recorded = recorded_values([row[name] for name in RECORDED_FIELDS])
        contents = commitments(row["salt"], [row[name] for name in CONTENT_FIELDS])
        assert row["hash"] == link_hash(prev, row["seq"], recorded, contents)
        prev = row["hash"]
    assert len({row["salt"] for row in rows}) == 30
    session.refresh_from_db()
    assert session.head_hash == prev


def test_state_keyframes_bound_the_distance_to_any_state(make_session):
    session = make_session(events=2000)
    keyframes = list(Snapshot.objects.filter(session=session).order_by("seq").values_list("seq", flat=True))
    assert keyframes, "state changed, so keyframes were written"
    gaps = [b - a for a, b in zip([-1, *keyframes], [*keyframes, 1999])]
    assert max(gaps) <= 256 + 5  # one keyframe per 256 events while state changes


def test_deleting_a_session_is_one_database_side_cascade(make_session, django_assert_max_num_queries):
    session = make_session(events=3000)
    with django_assert_max_num_queries(3):  # the DELETE itself (+ savepoint bookkeeping)
        Session.objects.filter(pk=session.pk).delete()
    assert not Event.objects.filter(session_id=session.pk).exists()
    assert not Snapshot.objects.filter(session_id=session.pk).exists()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_appends_keep_seq_unique_and_gap_free(make_session):
    if connection.vendor != "postgresql":
        pytest.skip("concurrency of writers is tested on PostgreSQL")
    session = make_session()
    errors: list[BaseException] = []

    def writer(start: int) -> None:
        try:
            for chunk in range(5):
                append_events(
                    session=Session.objects.get(pk=session.pk), events=synthetic_events(40, start=start + chunk * 40)
                )
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=writer, args=(n * 1000,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    seqs = list(Event.objects.filter(session=session).order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(4 * 5 * 40))
    rows = list(Event.objects.filter(session=session).order_by("seq").values_list("hash", "prev_hash"))
    assert all(rows[i][0] == rows[i + 1][1] for i in range(len(rows) - 1))


@pytest.mark.parametrize(
    "value",
    [
        datetime(2026, 2, 8, 10, 30, 0, 137000, tzinfo=UTC),
        datetime(2026, 2, 8, 10, 30, tzinfo=timezone(timedelta(0))),
        datetime(2026, 1, 8, 10, 30, 5, tzinfo=ZoneInfo("Europe/London")),  # winter: offset 0
        datetime(2026, 7, 8, 10, 30, 5, 1, tzinfo=ZoneInfo("Europe/London")),  # summer: +01:00
        datetime(2026, 2, 8, 10, 30, tzinfo=timezone(timedelta(hours=-3, minutes=-30))),
    ],
)
def test_stored_timestamp_text_is_the_utc_instant_whatever_the_tzinfo(value):
    # Any zero offset takes the short path (pydantic's tzinfo for "Z" is not datetime.UTC).
    assert sqlite_timestamp(value) == value.astimezone(UTC).replace(tzinfo=None).isoformat(" ")


def test_the_writers_save_of_a_locked_row_writes_the_columns_save_writes(make_session):
    # writer._save_locked stands in for Session.save() on every append: a field added to the model
    # (or one Django stops writing) must show here, not as a column an append forgets.
    import re

    from django.test.utils import CaptureQueriesContext

    from sessions_app.ingest.writer import _save_locked, _session_update_sql

    def updated_columns(sql: str) -> set[str]:
        assignments = sql.split(" SET ", 1)[1].rsplit(" WHERE ", 1)[0]
        return set(re.findall(r'"(\w+)" = ', assignments))

    session = make_session(events=3)
    with CaptureQueriesContext(connection) as queries:
        session.save()
    by_django = updated_columns(next(q["sql"] for q in queries if q["sql"].startswith("UPDATE")))
    assert by_django and updated_columns(_session_update_sql(connection.vendor)) == by_django
    session.task = "changed by the locked save"
    _save_locked(session)
    assert Session.objects.get(pk=session.pk).task == "changed by the locked save"
    session.pk = 10**12  # no such row: refused, not a silent no-op
    with pytest.raises(Session.DoesNotExist):
        _save_locked(session)
