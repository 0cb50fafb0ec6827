"""Hash-chain verification: re-hash every stored record in seq order."""

from __future__ import annotations

import hashlib

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from sessions_app.chain import verify_chain
from sessions_app.models import GENESIS_HASH, Event, Session

from .builders_replay import recorded_session

pytestmark = pytest.mark.django_db


def test_an_untouched_session_verifies_and_the_result_is_stored(make_session):
    session = make_session(events=300)
    result = verify_chain(session=session)
    assert result["chainValid"] is True and result["firstBrokenSeq"] is None
    assert result["events"] == 300 and result["brokenEvents"] == 0
    stored = Session.objects.get(pk=session.pk)
    assert stored.chain_valid is True and stored.chain_broken_seq is None
    assert stored.chain_checked_at is not None


def test_tampered_event_breaks_the_chain_at_its_seq(make_session):
    session = make_session(events=300)
    Event.objects.filter(session=session, seq=137).update(raw='{"i": 137, "kind": "forged"}')
    result = verify_chain(session=session)
    assert result == {**result, "chainValid": False, "firstBrokenSeq": 137, "brokenEvents": 1}
    stored = Session.objects.get(pk=session.pk)
    assert stored.chain_valid is False and stored.chain_broken_seq == 137


def test_a_rehashed_forgery_breaks_the_next_link(make_session):
    session = make_session(events=50)
    row = Event.objects.get(session=session, seq=20)
    forged = '{"forged": true}'
    Event.objects.filter(pk=row.pk).update(raw=forged, hash=Event.chain_hash(row.prev_hash, forged))
    assert verify_chain(session=session)["firstBrokenSeq"] == 21


def test_a_deleted_event_is_found_where_it_was(make_session):
    session = make_session(events=80)
    Event.objects.filter(session=session, seq=50).delete()
    assert verify_chain(session=session)["firstBrokenSeq"] == 50
    Event.objects.filter(session=session, seq=79).delete()
    assert verify_chain(session=session)["firstBrokenSeq"] == 50


def test_events_missing_at_the_end_break_the_chain(make_session):
    session = make_session(events=40)
    Event.objects.filter(session=session, seq__gte=38).delete()
    result = verify_chain(session=session)
    assert result["chainValid"] is False and result["firstBrokenSeq"] == 38


def test_the_chain_covers_the_original_bytes_of_the_file(tmp_path):
    session, _, path = recorded_session(tmp_path, steps=4)
    head = GENESIS_HASH
    for line in path.read_bytes().splitlines():
        head = hashlib.sha256(head.encode() + line).hexdigest()
    assert session.head_hash == head
    assert verify_chain(session=session)["chainValid"] is True


def test_verification_reads_the_session_a_chunk_at_a_time(make_session):
    session = make_session(events=1000)
    with CaptureQueriesContext(connection) as queries:
        verify_chain(session=session, chunk=100)
    reads = [q["sql"] for q in queries.captured_queries if "raw, hash, prev_hash" in q["sql"]]
    assert len(reads) == 10
    assert all("LIMIT 100" in sql and "OFFSET" not in sql.upper() for sql in reads)
