"""Sign-in hardening: failed sign-ins are throttled per username and address (django-axes), the
lockout says when to try again, passwords go through Django's validators, and signing in, failing
to and signing out are in the site's audit log (sessions_app/signin.py)."""

from __future__ import annotations

from datetime import timedelta

import orjson
import pytest
from axes.models import AccessAttempt
from django.conf import settings
from django.contrib.auth import password_validation
from django.core.exceptions import ValidationError
from django.db.models import F
from django.test import Client

from sessions_app.models import AuditEntry
from sessions_app.models.audit import SITE_LOG

from .builders_teams import PASSWORD, member

pytestmark = pytest.mark.django_db

LOGIN = "/accounts/login/"
WRONG = "not-the-password-at-all"


@pytest.fixture(autouse=True)
def _fast_password_hashes(settings):
    # Each sign-in checks a password: at the production hasher's cost these tests take minutes.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def sign_in(client: Client, username: str, password: str):
    return client.post(LOGIN, {"username": username, "password": password})


def signed_in(client: Client) -> bool:
    return "_auth_user_id" in client.session


def fail(client: Client, username: str, times: int) -> list[int]:
    return [sign_in(client, username, WRONG).status_code for _ in range(times)]


def rewind_failures(by: timedelta) -> None:
    """As if `by` had passed since the failures were counted."""
    AccessAttempt.objects.update(attempt_time=F("attempt_time") - by)


def site_entries(action: str) -> list[AuditEntry]:
    return list(AuditEntry.objects.filter(log=SITE_LOG, action=action).order_by("seq"))


def test_the_right_password_signs_in():
    member("ana")
    client = Client()
    response = sign_in(client, "ana", PASSWORD)
    assert response.status_code == 302 and signed_in(client)


def test_the_sixth_attempt_in_a_row_is_refused_even_with_the_right_password():
    member("ana")
    client = Client()
    # Four wrong passwords are answered by the form; the fifth locks the username here.
    assert fail(client, "ana", 5) == [200, 200, 200, 200, 429]
    response = sign_in(client, "ana", PASSWORD)
    assert response.status_code == 429
    assert not signed_in(client)


def test_the_lock_holds_until_the_cool_off_ends():
    member("ana")
    client = Client()
    fail(client, "ana", 5)
    cool_off = timedelta(minutes=15)
    assert settings.AXES_COOLOFF_TIME == cool_off  # the default of REPLAY_LOGIN_COOLOFF_MINUTES

    rewind_failures(cool_off - timedelta(minutes=1))
    assert sign_in(client, "ana", PASSWORD).status_code == 429 and not signed_in(client)

    rewind_failures(timedelta(minutes=2))
    assert sign_in(client, "ana", PASSWORD).status_code == 302 and signed_in(client)


def test_a_refused_attempt_does_not_restart_the_cool_off():
    member("ana")
    client = Client()
    fail(client, "ana", 5)
    rewind_failures(timedelta(minutes=14))
    assert sign_in(client, "ana", WRONG).status_code == 429  # refused, not counted
    rewind_failures(timedelta(minutes=2))
    assert sign_in(client, "ana", PASSWORD).status_code == 302


def test_the_lock_is_per_username_and_address():
    member("ana")
    member("bo")
    attacker = Client(REMOTE_ADDR="203.0.113.9")
    fail(attacker, "ana", 5)
    assert sign_in(attacker, "ana", PASSWORD).status_code == 429
    # Ana from her own address, and another user from the attacker's, still sign in.
    assert sign_in(Client(REMOTE_ADDR="198.51.100.4"), "ana", PASSWORD).status_code == 302
    assert sign_in(Client(REMOTE_ADDR="203.0.113.9"), "bo", PASSWORD).status_code == 302


def test_a_successful_sign_in_resets_the_count_of_failures():
    member("ana")
    client = Client()
    assert fail(client, "ana", 4) == [200] * 4
    assert sign_in(client, "ana", PASSWORD).status_code == 302
    client.logout()
    # Without the reset these four would make eight failures in a row, and lock.
    assert fail(client, "ana", 4) == [200] * 4
    assert sign_in(client, "ana", PASSWORD).status_code == 302


def test_the_failure_limit_comes_from_settings(settings):
    settings.AXES_FAILURE_LIMIT = 2
    member("ana")
    assert fail(Client(), "ana", 2) == [200, 429]


def test_the_lockout_page_says_why_and_when_to_try_again():
    member("ana")
    client = Client()
    fail(client, "ana", 5)
    response = sign_in(client, "ana", PASSWORD)
    assert response.status_code == 429
    assert "registration/locked_out.html" in [t.name for t in response.templates]
    assert "base.html" in [t.name for t in response.templates]  # the site's page, not bare text
    page = response.content.decode()
    assert "Sign-in paused" in page and "5 failed sign-ins in a row" in page and "<strong>ana</strong>" in page
    last_failure = AccessAttempt.objects.get(username="ana").attempt_time
    until = last_failure + timedelta(minutes=15)
    assert response.context["try_again_at"] == until
    assert f'Try again after <time datetime="{until.isoformat()}">{until:%H:%M} UTC</time>' in page
    assert "(in about 15 minutes)" in page  # the failure was just now
    assert 'href="/accounts/login/"' in page


def test_the_audit_log_has_sign_in_failure_and_sign_out_with_address_and_username():
    member("ana")
    client = Client(REMOTE_ADDR="198.51.100.7")
    sign_in(client, "ana", WRONG)
    sign_in(client, "ana", PASSWORD)
    client.post("/accounts/logout/")

    (failed,) = site_entries("auth.login_failed")
    assert orjson.loads(failed.detail) == {"username": "ana"}
    assert (failed.ip, failed.target, failed.project_id) == ("198.51.100.7", "user:ana", None)
    (login,) = site_entries("auth.login")
    assert (login.actor, login.ip, login.target, login.project_id) == ("ana", "198.51.100.7", "user:ana", None)
    (logout,) = site_entries("auth.logout")
    assert (logout.actor, logout.ip, logout.project_id) == ("ana", "198.51.100.7", None)
    assert [e.seq for e in (failed, login, logout)] == [0, 1, 2]  # in the order they happened


def test_the_audit_log_never_holds_a_password_not_even_masked():
    member("ana")
    client = Client()
    fail(client, "ana", 6)
    sign_in(client, "ana", PASSWORD)
    stored = [
        (e.actor, e.target, e.detail) for e in AuditEntry.objects.filter(log=SITE_LOG, action__startswith="auth.")
    ]
    assert len(stored) == 7
    text = repr(stored)
    assert WRONG not in text and PASSWORD not in text and "password" not in text and "****" not in text


def test_an_attempt_refused_by_the_lock_is_logged_as_locked_out():
    member("ana")
    client = Client()
    fail(client, "ana", 5)
    sign_in(client, "ana", PASSWORD)
    details = [orjson.loads(e.detail) for e in site_entries("auth.login_failed")]
    # The fifth wrong password is a failure like the others; the sixth attempt was never checked.
    assert details == [{"username": "ana"}] * 5 + [{"username": "ana", "locked_out": True}]
    assert site_entries("auth.login") == []


def test_a_sign_in_through_the_admin_is_logged_too():
    member("root", is_staff=True, is_superuser=True)
    client = Client()
    client.post("/admin/login/?next=/admin/", {"username": "root", "password": WRONG})
    response = client.post("/admin/login/?next=/admin/", {"username": "root", "password": PASSWORD})
    assert response.status_code == 302
    assert [orjson.loads(e.detail) for e in site_entries("auth.login_failed")] == [{"username": "root"}]
    assert [e.actor for e in site_entries("auth.login")] == ["root"]


def test_signing_out_when_not_signed_in_logs_nothing():
    Client().post("/accounts/logout/")
    assert site_entries("auth.logout") == []


def test_api_keys_and_forced_logins_are_not_throttled():
    from .builders_teams import key_of

    user = member("ana")
    fail(Client(), "ana", 5)  # ana is locked out of signing in from 127.0.0.1
    api = Client(HTTP_AUTHORIZATION=f"Bearer {key_of(user)}")
    assert api.get("/api/sessions").status_code == 200
    browser = Client()
    browser.force_login(user)
    assert browser.get("/sessions/").status_code == 200


def test_all_four_of_djangos_password_validators_are_on():
    names = {type(v).__name__ for v in password_validation.get_default_password_validators()}
    assert names == {
        "UserAttributeSimilarityValidator",
        "MinimumLengthValidator",
        "CommonPasswordValidator",
        "NumericPasswordValidator",
    }


@pytest.mark.parametrize("password", ["12345678", "password", "abc123", "qwertyuiop"])
def test_weak_passwords_are_rejected(password):
    with pytest.raises(ValidationError):
        password_validation.validate_password(password)


def test_a_password_like_the_username_is_rejected_and_a_long_random_one_accepted(django_user_model):
    user = django_user_model(username="margaret.hamilton")
    with pytest.raises(ValidationError, match="too similar"):
        password_validation.validate_password("margaret.hamilton1", user=user)
    password_validation.validate_password(PASSWORD, user=user)


@pytest.mark.parametrize("page", ["/accounts/password/", "/admin/password_change/"])
def test_guessing_the_current_password_to_change_it_is_locked_out_and_recorded_as_a_sign_in_is(page):
    # A stolen session cookie must not let anyone try passwords without limit or record, on our
    # page or on the admin's (a staff member's).
    user = member("ana")
    user.is_staff = True
    user.save(update_fields=["is_staff"])
    client = Client()
    assert sign_in(client, "ana", PASSWORD).status_code == 302
    new = "a long new passphrase 42"

    def change(old: str) -> int:
        return client.post(page, {"old_password": old, "new_password1": new, "new_password2": new}).status_code

    assert [change(WRONG) for _ in range(5)] == [200, 200, 200, 200, 429]
    assert change(PASSWORD) == 429  # the right one too, until the cool-off ends
    failed = site_entries("auth.login_failed")
    assert [orjson.loads(e.detail)["username"] for e in failed] == ["ana"] * 6
    assert orjson.loads(failed[-1].detail).get("locked_out") is True
    # Said as a signed-in session's guesses, on the password change, not a sign-in's.
    assert {(e.actor, orjson.loads(e.detail)["on"]) for e in failed} == {("ana", "password change")}
    rewind_failures(settings.AXES_COOLOFF_TIME + timedelta(seconds=1))
    assert change(PASSWORD) == 302  # and the password changed
    assert sign_in(Client(), "ana", new).status_code == 302


def test_the_right_current_password_clears_the_failures_before_it():
    # As a sign-in does: four typos, then the change, then one typo signing in is no lockout.
    member("ana")
    client = Client()
    assert sign_in(client, "ana", PASSWORD).status_code == 302
    new = "a long new passphrase 42"
    for _ in range(4):
        client.post("/accounts/password/", {"old_password": WRONG, "new_password1": new, "new_password2": new})
    changed = client.post("/accounts/password/", {"old_password": PASSWORD, "new_password1": new, "new_password2": new})
    assert changed.status_code == 302
    fresh = Client()
    assert fail(fresh, "ana", 1) == [200]
    assert sign_in(fresh, "ana", new).status_code == 302
