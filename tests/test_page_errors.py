"""Pages never answer 500 for a client's mistake: numbers past 64 bits in the query string or a
form, a malformed upload, a URL naming nothing; and reading a page writes nothing. (A busy
database: test_api_errors.py holds the lock once for the API and a page alike.)"""

from __future__ import annotations

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from sessions_app.models import Checkpoint, Comment

from .builders_teams import member

pytestmark = pytest.mark.django_db

BEYOND = "99999999999999999999999"  # past 64 bits: OverflowError in SQLite's driver


@pytest.fixture
def page(db) -> Client:
    client = Client()
    client.force_login(member("pia"))
    return client


def test_a_step_past_64_bits_is_never_a_500(page, make_session):
    session = make_session(events=10)
    for url in (
        f"/sessions/{session.pk}/?step={BEYOND}",
        f"/sessions/{session.pk}/search/?q=event&step={BEYOND}",
        f"/sessions/{session.pk}/search/?errors=1&step={BEYOND}",
        f"/sessions/?before={BEYOND}",
        f"/projects/default/audit/?before={BEYOND}",
    ):
        # The form refuses the number; the page shows its start (a clamped value), never a 500.
        assert page.get(url).status_code == 200, url
    for url in (f"/compare/?a={BEYOND}&b={session.pk}", f"/compare/?a={session.pk}&b={session.pk}&offset={BEYOND}"):
        assert page.get(url).status_code == 400, url
    assert page.get(f"/sessions/{BEYOND}/").status_code == 404


def test_forms_refuse_numbers_past_64_bits(page, make_session):
    session = make_session(events=10)
    checkpoint = page.post(f"/sessions/{session.pk}/checkpoints/", {"name": "far", "step": BEYOND})
    assert checkpoint.status_code in (302, 400) and not Checkpoint.objects.filter(name="far").exists()
    for fields in ({"seq": BEYOND, "body": "far"}, {"seq": "1", "parent": BEYOND, "body": "far"}):
        comment = page.post(f"/sessions/{session.pk}/comments/", fields)
        assert comment.status_code < 500, fields
    assert not Comment.objects.filter(body="far").exists()


def test_a_number_that_still_reaches_the_database_is_a_400_naming_it(page, make_session, monkeypatch):
    session = make_session(events=4)

    def unbounded(**kwargs):
        raise OverflowError("Python int too large to convert to SQLite INTEGER")

    monkeypatch.setattr("sessions_app.replay.search", unbounded)
    response = page.get(f"/sessions/{session.pk}/search/?q=x&junk={BEYOND}")
    assert response.status_code == 400 and response["Content-Type"].startswith("text/plain")
    assert response.content.decode().startswith("junk: out of range")


@pytest.mark.parametrize("csrf", [False, True])
def test_a_malformed_upload_is_a_plain_400_saying_why(make_session, csrf):
    # With the CSRF check on (a browser's case), the middleware reads the form first.
    client = Client(enforce_csrf_checks=csrf)
    client.force_login(member("pia"))
    client.get("/sessions/")  # sets the CSRF cookie
    token = client.cookies["csrftoken"].value if csrf else ""
    body = b'--x\r\nContent-Disposition: form-data; name="files"; filename="a.jsonl"\r\n\r\n{}\r\n--x--\r\n'
    response = client.post("/sessions/upload/", data=body, content_type="multipart/form-data; boundary=",
                           headers={"X-CSRFToken": token})  # fmt: skip
    assert response.status_code == 400
    assert response["Content-Type"].startswith("text/plain")
    assert response.content.decode().startswith("the upload cannot be read: Invalid boundary in multipart")


def test_a_page_url_naming_nothing_is_an_html_404(page):
    response = page.get("/sessions/not-a-number/")
    assert response.status_code == 404 and response["Content-Type"].startswith("text/html")


def test_pages_read_without_writing(page, make_session):
    session = make_session(events=12)
    other = make_session(events=6)
    page.get("/sessions/")  # the sign-in's own writes (its session row) come before
    for url in (
        "/sessions/",
        f"/sessions/{session.pk}/",
        f"/sessions/{session.pk}/?step=5",
        f"/sessions/{session.pk}/search/?q=event",
        f"/sessions/{session.pk}/charts/",
        f"/compare/?a={session.pk}&b={other.pk}",
        "/sessions/imports/",
        "/projects/",
        "/projects/default/",
        "/projects/default/audit/",
        "/account/keys/",
        "/about/",
    ):
        with CaptureQueriesContext(connection) as queries:
            response = page.get(url)
        assert response.status_code == 200, url
        writes = [q["sql"] for q in queries if q["sql"].lstrip().upper().startswith(("INSERT", "UPDATE", "DELETE"))]
        assert writes == [], (url, writes)


def test_a_form_sent_with_a_stale_csrf_token_is_the_sites_refusal(make_session):
    # Django's own CSRF page has no #refusal: replay.js let it replace a panel's form, and what
    # had been typed in it, whole (a sign-in again in another tab makes every open page stale).
    session = make_session(events=3)
    client = Client(enforce_csrf_checks=True)
    client.force_login(member("pia"))
    client.get(f"/sessions/{session.pk}/")  # sets the CSRF cookie
    url = f"/sessions/{session.pk}/comments/"
    stale = {"X-CSRFToken": "x" * 64}
    answer = client.post(url, {"seq": 1, "body": "kept"}, headers={**stale, "HX-Request": "true"})
    assert answer.status_code == 403
    text = answer.content.decode()
    assert text.strip().startswith('<p id="refusal"') and "this page is out of date" in text and "reload it" in text
    whole = client.post(url, {"seq": 1, "body": "kept"}, headers=stale)
    assert whole.status_code == 403 and 'id="refusal"' in whole.content.decode()
    assert "<html" in whole.content.decode() and not Comment.objects.exists()
    refused = client.delete(f"/api/sessions/{session.pk}", headers=stale)
    assert refused.status_code == 403 and refused["Content-Type"].startswith("application/json")


def test_a_csrf_refusal_says_what_would_help(make_session):
    # "Reload it" helps a stale page only: a page at an address the server does not trust (a
    # proxy without REPLAY_CSRF_TRUSTED_ORIGINS) or a browser that sends no cookies would be
    # refused again, reloaded or not.
    session = make_session(events=3)
    url = f"/sessions/{session.pk}/comments/"
    client = Client(enforce_csrf_checks=True)
    client.force_login(member("pia"))
    client.get(f"/sessions/{session.pk}/")
    token = client.cookies["csrftoken"].value
    elsewhere = client.post(
        url, {"seq": 1, "body": "x"}, headers={"X-CSRFToken": token, "Origin": "https://replay.example.com"}
    )
    text = elsewhere.content.decode()
    assert elsewhere.status_code == 403 and "REPLAY_CSRF_TRUSTED_ORIGINS" in text and "reload it" not in text
    no_cookie = Client(enforce_csrf_checks=True)
    no_cookie.force_login(member("pia"))
    refused = no_cookie.post(url, {"seq": 1, "body": "x"}, headers={"X-CSRFToken": token})
    text = refused.content.decode()
    assert refused.status_code == 403 and "allow cookies" in text, text[-600:]
    # Over https, a form from a page opened over http: no trusted origin helps, https does.
    insecure = client.post(
        url, {"seq": 1, "body": "x"}, secure=True,
        headers={"X-CSRFToken": token, "Referer": f"http://testserver/sessions/{session.pk}/"},
    )  # fmt: skip
    text = insecure.content.decode()
    assert insecure.status_code == 403 and "https address" in text and "REPLAY_CSRF_TRUSTED_ORIGINS" not in text
    assert not Comment.objects.exists()
