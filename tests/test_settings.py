"""Settings come from the environment and fail loudly; production settings pass check --deploy."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PRODUCTION_ENV = {
    "REPLAY_SECRET_KEY": "k" * 20 + "Zq8-Lm3_Vx7!Rt2@Pw9#Nb4$Hy6%Jc1^Fd5&Gs0*",
    "REPLAY_ALLOWED_HOSTS": "replay.example.com",
    "REPLAY_SECURE_COOKIES": "1",
    "REPLAY_SSL_REDIRECT": "1",
    "REPLAY_HSTS_SECONDS": "31536000",
    "REPLAY_HSTS_PRELOAD": "1",
}


def manage(*args: str, **env: str) -> subprocess.CompletedProcess:
    # The child sees a deployment's environment: none of ours, and not the async-safety switch
    # the browser tests set for their own process (check --deploy rightly rejects it).
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("REPLAY_") and k != "DJANGO_ALLOW_ASYNC_UNSAFE"}
    full_env.update(env)
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=full_env, capture_output=True, text=True)


def test_production_settings_pass_check_deploy():
    result = manage("check", "--deploy", "--fail-level", "WARNING", **PRODUCTION_ENV)
    assert result.returncode == 0, result.stderr + result.stdout
    assert "no issues" in result.stdout


def test_development_defaults_are_flagged_by_check_deploy():
    result = manage("check", "--deploy", "--fail-level", "WARNING")
    assert result.returncode != 0
    assert "security.W009" in result.stderr  # the development secret key


def test_a_bad_boolean_stops_start_up_with_a_clear_message():
    result = manage("check", REPLAY_DEBUG="perhaps")
    assert result.returncode != 0
    assert "REPLAY_DEBUG must be a boolean" in result.stderr


def test_a_bad_number_stops_start_up_with_a_clear_message():
    result = manage("check", REPLAY_MAX_UPLOAD_MB="lots")
    assert result.returncode != 0
    assert "REPLAY_MAX_UPLOAD_MB must be a number" in result.stderr


def test_a_bad_log_level_stops_start_up_naming_the_variable_and_a_lower_case_one_is_taken():
    result = manage("check", REPLAY_LOG_LEVEL="bogus")
    assert result.returncode != 0
    assert "REPLAY_LOG_LEVEL must be one of DEBUG, INFO, WARNING, ERROR, CRITICAL, got 'bogus'" in result.stderr
    assert manage("check", REPLAY_LOG_LEVEL="info").returncode == 0


def test_database_url_selects_postgresql():
    from replay_site.settings import database_from_url

    db = database_from_url("postgres://u:p%40ss@db.internal:6543/replay?sslmode=require")
    assert db["ENGINE"] == "django.db.backends.postgresql"
    assert (db["USER"], db["PASSWORD"], db["HOST"], db["PORT"], db["NAME"]) == (
        "u",
        "p@ss",
        "db.internal",
        "6543",
        "replay",
    )
    assert db["OPTIONS"] == {
        "sslmode": "require",
        "server_side_binding": True,
        "prepare_threshold": 5,
    }


def test_a_sqlite_url_names_its_file_by_an_absolute_path_or_stops_start_up(tmp_path):
    from django.core.exceptions import ImproperlyConfigured

    from replay_site.settings import database_from_url

    assert str(database_from_url(f"sqlite:///{tmp_path}/x.sqlite3")["NAME"]) == str(tmp_path / "x.sqlite3")
    # A port that is none is said so, naming the variable (a bare ValueError's traceback before).
    for url, said in (
        ("postgres://u:p@h:notaport/db", "Port could not be cast"),
        ("postgres://u:p@h:99999/db", "Port out of range"),
        ("postgres://u:p@[::1/db", "Invalid IPv6"),
    ):
        with pytest.raises(ImproperlyConfigured, match=f"DATABASE_URL: {said}"):
            database_from_url(url)
    # Each was taken silently: the first two as the default file, the last relative to the cwd.
    for url in (
        "sqlite://rel.sqlite3",
        "sqlite://",
        "sqlite:///",
        "sqlite:relative.sqlite3",
        "sqlite:///relative.db",
        f"sqlite:///{tmp_path}/x.sqlite3?mode=ro",
    ):
        with pytest.raises(ImproperlyConfigured, match="a SQLite URL names its file by an absolute path"):
            database_from_url(url)


def test_database_url_can_turn_off_prepared_statements_and_server_binding_for_a_pooler():
    from django.core.exceptions import ImproperlyConfigured

    from replay_site.settings import database_from_url

    db = database_from_url(
        "postgres://u@db/replay?prepare_threshold=none&server_side_binding=false&options=-c%20work_mem%3D64MB"
    )
    assert db["OPTIONS"] == {
        "server_side_binding": False,
        "prepare_threshold": None,
        "options": "-c work_mem=64MB",
    }
    assert database_from_url("postgres://u@db/replay?prepare_threshold=0")["OPTIONS"]["prepare_threshold"] == 0
    with pytest.raises(ImproperlyConfigured, match="prepare_threshold must be a whole number or none, got 'soon'"):
        database_from_url("postgres://u@db/replay?prepare_threshold=soon")


def test_the_postgresql_connection_binds_on_the_server_and_prepares_repeated_statements(db):
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL only")
    import psycopg
    from django.contrib.auth import get_user_model

    for _ in range(6):
        get_user_model().objects.filter(username="nobody").exists()
    with connection.cursor() as cursor:
        assert not isinstance(cursor.cursor, psycopg.ClientCursor)
        cursor.execute("SELECT count(*) FROM pg_prepared_statements")
        assert cursor.fetchone()[0] >= 1
        # PostgreSQL's own choice of plan for a prepared statement (settings.postgres_options).
        cursor.execute("SHOW plan_cache_mode")
        assert cursor.fetchone()[0] == "auto"


def test_the_console_log_gives_a_refused_request_one_line_and_a_server_error_its_traceback(client, django_user_model):
    import io
    import logging

    from django.core.exceptions import PermissionDenied

    from sessions_app.models import Membership, Project, Role

    console = next(h for h in logging.getLogger().handlers if any(
        type(f).__name__ == "NoTracebackForClientErrors" for f in h.filters))  # fmt: skip
    stream = io.StringIO()
    old = console.setStream(stream)
    try:
        user = django_user_model.objects.create_user("maintainer", password="pw-123456789")
        Membership.objects.create(project=Project.get_default(), user=user, role=Role.MAINTAINER)
        client.force_login(user)
        assert client.get("/projects/default/redaction/").status_code == 403  # admins only
        refused = stream.getvalue()
        assert "Forbidden (Permission denied): /projects/default/redaction/" in refused
        assert "Traceback" not in refused

        record = logging.LogRecord("django.request", logging.ERROR, __file__, 1, "Internal Server Error: /x", (),
                                   (RuntimeError, RuntimeError("boom"), None))  # fmt: skip
        record.status_code = 500
        console.handle(record)
        assert "RuntimeError: boom" in stream.getvalue()
        record = logging.LogRecord("django.request", logging.WARNING, __file__, 1, "Forbidden: /y", (),
                                   (PermissionDenied, PermissionDenied("no"), None))  # fmt: skip
        record.status_code = 403
        console.handle(record)
        assert "PermissionDenied" not in stream.getvalue()
    finally:
        console.setStream(old)


PROXY_PROBE = r"""
import asyncio, json, sys
import replay_site.asgi as asgi

seen = []

async def pages(scope, receive, send):  # stands in for Django's pages: what address they get
    seen.append(scope["client"][0])

asgi.pages = pages

async def main():
    for peer, forwarded in (("127.0.0.1", b"198.51.100.4, 203.0.113.9"), ("192.0.2.50", b"203.0.113.9"), ("127.0.0.1", None)):
        headers = [(b"x-forwarded-for", forwarded)] if forwarded else []
        scope = {"type": "http", "path": "/", "headers": headers, "client": (peer, 5000), "scheme": "http"}
        await asgi.application(scope, None, None)

asyncio.run(main())
print(json.dumps(seen))
"""


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        # From the trusted proxy: the address it appended (the last one); from elsewhere: the peer.
        ({"REPLAY_BEHIND_PROXY": "1"}, ["203.0.113.9", "192.0.2.50", "127.0.0.1"]),
        (
            {"REPLAY_BEHIND_PROXY": "1", "REPLAY_TRUSTED_PROXIES": "192.0.2.0/24"},
            ["127.0.0.1", "203.0.113.9", "127.0.0.1"],
        ),
        # Not behind a proxy: a header the client sets is never taken.
        ({}, ["127.0.0.1", "192.0.2.50", "127.0.0.1"]),
    ],
)
def test_behind_a_proxy_the_clients_address_comes_from_x_forwarded_for_of_a_trusted_proxy_only(env, expected):
    import json

    full_env = {k: v for k, v in os.environ.items() if not k.startswith("REPLAY_") and k != "DJANGO_ALLOW_ASYNC_UNSAFE"}
    full_env.update(env, REPLAY_DEMO="1")
    result = subprocess.run([sys.executable, "-c", PROXY_PROBE], cwd=ROOT, env=full_env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == expected


@pytest.mark.parametrize(
    ("value", "said"),
    [("10.0.0/8", "'10.0.0/8' is not an IP address or network"), ("*", "'*' is not an IP address"),
     ("10.0.0.1,proxy.local", "'proxy.local' is not an IP address"), (",", "REPLAY_TRUSTED_PROXIES is empty"),
     ("10.0.0.1/8", "'10.0.0.1/8' is not an IP address or network")],
)  # fmt: skip
def test_trusted_proxies_must_be_addresses_or_networks(monkeypatch, value, said):
    # A bad entry was kept by the proxy-header wrapper as a literal that never matched: every
    # client then shared the proxy's address, in the audit log and in the sign-in lockouts.
    from django.core.exceptions import ImproperlyConfigured

    from replay_site.settings import env_networks

    monkeypatch.setenv("REPLAY_TRUSTED_PROXIES", value)
    with pytest.raises(ImproperlyConfigured, match=said.replace("*", r"\*").replace("(", r"\(")):
        env_networks("REPLAY_TRUSTED_PROXIES", ["127.0.0.1"])
    monkeypatch.setenv("REPLAY_TRUSTED_PROXIES", "10.0.0.0/8, 192.168.1.7 ,::1,fd00::/8")
    assert env_networks("REPLAY_TRUSTED_PROXIES", []) == ["10.0.0.0/8", "192.168.1.7", "::1", "fd00::/8"]


def test_a_server_refuses_to_start_with_no_allowed_host_or_a_bad_proxy():
    empty = manage("check", **(PRODUCTION_ENV | {"REPLAY_ALLOWED_HOSTS": ""}))
    assert empty.returncode != 0 and "REPLAY_ALLOWED_HOSTS is empty" in empty.stderr
    proxy = manage("check", **PRODUCTION_ENV, REPLAY_BEHIND_PROXY="1", REPLAY_TRUSTED_PROXIES="10.0.0/8")
    assert proxy.returncode != 0 and "'10.0.0/8' is not an IP address or network" in proxy.stderr


@pytest.mark.parametrize("value", ["2.9", "inf", "nan"])
def test_a_whole_number_setting_given_a_fraction_stops_start_up(value):
    # "2.9" ran with 2 web processes, and "inf" or "nan" failed with a traceback; the message
    # alone is printed, not the traceback through Django's start-up.
    result = manage("check", REPLAY_WEB_PROCESSES=value)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    said = "a whole number" if value == "2.9" else "a finite number"
    assert f"error: REPLAY_WEB_PROCESSES must be {said}, got {value!r}" in result.stderr
    assert manage("check", REPLAY_WEB_PROCESSES="3").returncode == 0


@pytest.mark.parametrize(
    ("name", "value", "said"),
    [("REPLAY_QUOTA_SESSIONS", "2.5", "a whole number"), ("REPLAY_RETENTION_DAYS", "inf", "a finite number"),
     ("REPLAY_LOGIN_COOLOFF_MINUTES", "nan", "a finite number")],
)  # fmt: skip
def test_every_number_setting_refuses_what_is_no_number_of_its_kind(name, value, said):
    result = manage("check", **{name: value})
    assert result.returncode != 0 and f"error: {name} must be {said}, got {value!r}" in result.stderr


@pytest.mark.parametrize(
    ("name", "value", "said"),
    [("REPLAY_TAIL_POLL_SECONDS", "1e300", "must be at most 3,600"),
     ("REPLAY_RETENTION_DAYS", "1e9", "must be at most 36,500"),
     ("REPLAY_LOGIN_COOLOFF_MINUTES", "1e300", "must be at most 52,560,000"),
     ("REPLAY_WEB_PROCESSES", "99999999999999999999999", "must be at most 512"),
     ("REPLAY_Q_WORKERS", "513", "must be at most 512")],
)  # fmt: skip
def test_a_time_setting_past_what_the_clock_adds_stops_start_up(name, value, said):
    # 1e300 seconds passed, and the tail stream died later of an OverflowError.
    result = manage("check", **{name: value})
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert f"error: {name} {said}, got {value!r}" in result.stderr


def test_a_data_folder_that_is_a_file_or_cannot_be_made_stops_start_up(tmp_path):
    # A file: check passed, then every upload was a 500; /proc/x: a traceback.
    (tmp_path / "a-file").write_text("")
    result = manage("check", REPLAY_DATA_DIR=str(tmp_path / "a-file"))
    assert result.returncode != 0 and f"error: REPLAY_DATA_DIR: {tmp_path / 'a-file'} is not a folder" in result.stderr
    result = manage("check", REPLAY_DATA_DIR="/proc/replay-data")
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert "error: REPLAY_DATA_DIR: cannot make the folder /proc/replay-data:" in result.stderr
