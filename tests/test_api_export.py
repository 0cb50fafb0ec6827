"""GET .../export?format=jsonl|snapshot|original (streamed) and GET .../verify."""

from __future__ import annotations

import orjson
import pytest
from rlm_code.rlm.session_replay import load_session

from sessions_app import replay
from sessions_app.models import Event, Session

from .builders_replay import api, get_json, recorded_session  # noqa: F401  (fixture)

pytestmark = pytest.mark.django_db


def download(client, url: str) -> tuple[bytes, dict]:
    response = client.get(url)
    assert response.status_code == 200, response.content[:300]
    assert response.streaming
    return b"".join(response.streaming_content), response.headers


@pytest.mark.parametrize("fmt,suffix", [("jsonl", ".jsonl"), ("snapshot", ".json")])
def test_exports_download_and_load_in_rlm_code(api, tmp_path, fmt, suffix):
    session, _, _ = recorded_session(tmp_path, steps=3)
    content, headers = download(api, f"/api/sessions/{session.pk}/export?format={fmt}")
    assert headers["Content-Disposition"] == f'attachment; filename="run_full{suffix}"'
    path = tmp_path / f"download{suffix}"
    path.write_bytes(content)
    summary = replay.get_summary(session=session)
    assert load_session(path).get_summary() == {k: summary[k] for k in load_session(path).get_summary()}


def test_original_export_is_the_uploaded_file(api, tmp_path):
    session, _, original = recorded_session(tmp_path, steps=3)
    content, _ = download(api, f"/api/sessions/{session.pk}/export?format=original")
    assert content == original.read_bytes()


def test_a_download_keeps_a_name_outside_latin_1(api, make_session, client, django_user_model):
    session = make_session(events=3)
    Session.objects.filter(pk=session.pk).update(source_session_id="日本語 run")
    _, headers = download(api, f"/api/sessions/{session.pk}/export?format=jsonl")
    # RFC 6266's filename* (what Django's content_disposition_header writes), not a MIME word
    # that browsers save as "download".
    assert headers["Content-Disposition"] == "attachment; filename*=utf-8''%E6%97%A5%E6%9C%AC%E8%AA%9E_run.jsonl"
    admin = django_user_model.objects.create_superuser("boss", password="x")
    client.force_login(admin)
    page = client.get(f"/sessions/{session.pk}/export/", {"format": "snapshot"})
    assert page["Content-Disposition"] == "attachment; filename*=utf-8''%E6%97%A5%E6%9C%AC%E8%AA%9E_run.json"


@pytest.mark.parametrize("fmt", ["jsonl", "snapshot", "original"])
def test_a_live_session_stamped_up_to_year_9999_exports(api, fmt):
    from datetime import UTC, datetime

    from sessions_app.canonical import CanonicalEvent, Kind, SessionMeta
    from sessions_app.ingest.writer import append_events, create_session
    from sessions_app.models import Project

    session = create_session(project=Project.get_default(), source_format="canonical", meta=SessionMeta(task="t"))
    stamps = (datetime(2026, 2, 9, tzinfo=UTC), datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC))
    append_events(session=session, events=[
        CanonicalEvent(kind=Kind.NOTE, source_type="note", raw=f'{{"n": {n}}}', payload={"n": n}, timestamp=at)
        for n, at in enumerate(stamps)
    ])  # fmt: skip
    content, _ = download(api, f"/api/sessions/{session.pk}/export?format={fmt}")
    assert content


def test_export_format_must_be_known(api, make_session):
    session = make_session(events=3)
    body = get_json(api, f"/api/sessions/{session.pk}/export?format=csv", 400)
    assert body["detail"].startswith("format: Input should be 'jsonl', 'snapshot' or 'original'")
    assert get_json(api, "/api/sessions/5555/export", 404)["detail"] == "session 5555 not found"


def test_verify_finds_a_tampered_event_at_its_seq(api, make_session):
    session = make_session(events=200)
    assert get_json(api, f"/api/sessions/{session.pk}/verify")["chainValid"] is True
    Event.objects.filter(session=session, seq=123).update(raw=orjson.dumps({"i": 123, "kind": "edited"}).decode())
    body = get_json(api, f"/api/sessions/{session.pk}/verify")
    assert (body["chainValid"], body["firstBrokenSeq"], body["events"]) == (False, 123, 200)
    # GET is a read: the session's stored state is untouched until a POST records the result.
    assert get_json(api, f"/api/sessions/{session.pk}/summary")["chainValid"] is not False
    recorded = api.post(f"/api/sessions/{session.pk}/verify")
    assert recorded.status_code == 200 and recorded.json()["firstBrokenSeq"] == 123
    # The stored result now marks every replay page of the session.
    page = get_json(api, f"/api/sessions/{session.pk}/replay?limit=5")
    assert page["chainValid"] is False
    assert get_json(api, f"/api/sessions/{session.pk}/summary")["chainValid"] is False
