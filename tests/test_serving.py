"""The production server: `manage.py serve` (granian + the job cluster) starts, serves pages and
static files, and stops cleanly on Ctrl-C or SIGTERM; replay_site/asgi.py sends the streams to
Django's ASGI handler, where they wait without holding a thread, and everything else to the
thread pool; the development secret key is refused outside demo mode."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import CommandError

from replay_site import serving
from sessions_app.canonical import Kind
from sessions_app.replay import streaming

from .test_streaming import frames_of, timed_session

ROOT = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _descendants(pid: int) -> set[int]:
    """Every process whose ancestry leads to `pid`, from /proc."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def _alive(pids: set[int]) -> set[int]:
    alive = set()
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            alive.add(pid)
    return alive


def _get(url: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.status, response.read()


@pytest.fixture(scope="module")
def migrated(tmp_path_factory) -> Path:
    """A migrated SQLite database file, made once for the module."""
    path = tmp_path_factory.mktemp("serve") / "migrated.sqlite3"
    env = os.environ | {"DATABASE_URL": f"sqlite:///{path}"}
    subprocess.run([sys.executable, "manage.py", "migrate", "-v", "0"], cwd=ROOT, env=env, check=True)
    return path


@pytest.fixture
def served(tmp_path, migrated):
    """`manage.py serve` on a free port with its own SQLite database (demo mode)."""
    port = _free_port()
    database = tmp_path / "serve.sqlite3"
    shutil.copyfile(migrated, database)
    env = os.environ | {"DATABASE_URL": f"sqlite:///{database}", "REPLAY_DEMO": "1",
                        "REPLAY_DATA_DIR": str(tmp_path / "data")}  # fmt: skip
    env.pop("REPLAY_SECRET_KEY", None)
    log = (tmp_path / "serve.log").open("w+b")
    process = subprocess.Popen([sys.executable, "manage.py", "serve", "--port", str(port), "--web-processes", "2"],
                               cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            _get(base + "/accounts/login/")
            break
        except OSError:
            if time.monotonic() > deadline or process.poll() is not None:
                log.seek(0)
                pytest.fail(f"serve did not start: {log.read().decode(errors='replace')[-2000:]}")
            time.sleep(0.3)
    yield process, base, log, database
    if process.poll() is None:
        # Stopped as an operator stops it, so its web processes and workers go with it (a SIGKILL
        # of the supervisor alone left them running after the suite); anything left, killed.
        family = _descendants(process.pid)
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
        for pid in _alive(family):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_serve_answers_then_stops_web_and_workers_within_10s_with_status_0(served, sig):
    process, base, log, database = served
    assert _get(base + "/accounts/login/")[0] == 200
    status, css = _get(base + "/static/css/replay.css")
    assert status == 200 and b"{" in css
    # A request with a body goes through the thread pool too (the body read from the server).
    request = urllib.request.Request(base + "/api/projects", data=b'{"name": "x", "slug": "x"}', method="POST",
                                     headers={"Content-Type": "application/json"})  # fmt: skip
    try:
        urllib.request.urlopen(request, timeout=10)
        pytest.fail("an anonymous POST was accepted")
    except urllib.error.HTTPError as exc:
        assert exc.code == 401, exc.read()
    # The schedules are made on start: without them no worker ever runs the watchdog (healthz 503).
    with sqlite3.connect(database) as conn:
        names = {name for (name,) in conn.execute("SELECT name FROM django_q_schedule")}
    assert names == {"replay-import-watchdog", "replay-otlp-settle", "replay-retention-cleanup"}, names
    family = _descendants(process.pid)
    commands = {Path(f"/proc/{pid}/cmdline").read_bytes() for pid in _alive(family)}
    assert any(b"granian" in c for c in commands) and any(b"qcluster" in c for c in commands), commands
    started = time.monotonic()
    process.send_signal(sig)
    assert process.wait(timeout=10) == 0
    assert time.monotonic() - started < 10
    assert _alive(family) == set(), "processes left running after the stop"
    log.seek(0)
    output = log.read().decode(errors="replace")
    assert "Segmentation fault" not in output and "Traceback" not in output, output[-3000:]


def test_the_development_key_is_refused_outside_demo_mode(settings):
    settings.DEVELOPMENT_SECRET_KEY, settings.DEMO = True, False
    with pytest.raises(ImproperlyConfigured, match="REPLAY_SECRET_KEY is not set"):
        serving.require_real_secret_key()
    settings.DEMO = True
    serving.require_real_secret_key()
    settings.DEVELOPMENT_SECRET_KEY, settings.DEMO = False, False
    serving.require_real_secret_key()


def test_a_signing_key_file_that_is_no_key_stops_serve_by_name_before_starting_anything(
    db, settings, tmp_path, monkeypatch
):
    # It had started, and the About page and every bundle export answered 500 (docs/bundles.md
    # says such a file stops the server); a web process loading the application stops too.
    from sessions_app import signing

    junk = tmp_path / "signing-key.pem"
    junk.write_text("not a key")
    settings.SIGNING_KEY_FILE, settings.DEMO = junk, True  # the demo's key: only the signing key is wrong
    monkeypatch.setattr(signing, "_loaded", {})
    started = []
    monkeypatch.setattr(subprocess, "Popen", lambda *a, **kw: started.append(a))
    with pytest.raises(CommandError, match=f"^REPLAY_SIGNING_KEY_FILE {re.escape(str(junk))} is not a readable"):
        call_command("serve", "--port", "8999")
    assert started == []
    with pytest.raises(ImproperlyConfigured, match="REPLAY_SIGNING_KEY_FILE"):
        serving.require_signing_key()
    # A place it cannot be made: said by name too (it was a FileExistsError traceback).
    settings.SIGNING_KEY_FILE = junk / "under-a-file.pem"
    with pytest.raises(
        CommandError, match=f"^REPLAY_SIGNING_KEY_FILE {re.escape(str(junk))}/under-a-file.pem cannot be made"
    ):
        call_command("serve", "--port", "8999")
    # Where no file is, the key is made there, once, before any web process starts.
    settings.SIGNING_KEY_FILE = tmp_path / "new" / "signing-key.pem"
    serving.require_signing_key()
    assert settings.SIGNING_KEY_FILE.stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize(
    "option, value, said",
    [
        ("--port", "99999", "argument --port: 99999 is not between 1 and 65535"),
        ("--port", "0", "argument --port: 0 is not between 1 and 65535"),
        ("--web-processes", "0", "argument --web-processes: 0 is not between 1 and 512"),
        ("--job-workers", "0", "argument --job-workers: 0 is not between 1 and 512"),
        ("--job-workers", "513", "argument --job-workers: 513 is not between 1 and 512"),
        ("--port", "65536", "argument --port: 65536 is not between 1 and 65535"),
        ("--job-workers", "two", "argument --job-workers: 'two' is not a whole number"),
        ("--host", "localhost", "argument --host: 'localhost' is not an IP address (127.0.0.1, 0.0.0.0, ::1)"),
        ("--host", "999.1.1.1", "argument --host: '999.1.1.1' is not an IP address (127.0.0.1, 0.0.0.0, ::1)"),
        ("--host", "fe80::1%lo", "argument --host: 'fe80::1%lo' is not an IP address (127.0.0.1, 0.0.0.0, ::1)"),
    ],
)
def test_serve_refuses_a_bad_number_by_name_before_starting_anything(option, value, said, monkeypatch):
    # A port of 99999 reached granian, which stopped with a traceback; 0 web processes too.
    started = []
    monkeypatch.setattr("sessions_app.management.commands.serve.serve", lambda **kw: started.append(kw))
    with pytest.raises(CommandError, match=f"^Error: {re.escape(said)}$"):
        call_command("serve", option, value)
    assert started == []


def test_serve_takes_the_ends_of_each_range_and_a_host_as_written(db, monkeypatch, settings):
    settings.DEMO = True
    started = []
    monkeypatch.setattr("sessions_app.management.commands.serve.serve", lambda **kw: started.append(kw) or 0)
    call_command("serve", "--port", "65535", "--web-processes", "512", "--job-workers", "1", "--host", "::0001")
    call_command("serve", "--port", "1", "--web-processes", "1", "--job-workers", "512")
    assert [(k["port"], k["web_processes"], k["job_workers"]) for k in started] == [(65535, 512, 1), (1, 1, 512)]
    assert started[0]["host"] == "::1"  # written as the address it is


@pytest.fixture
def asgi_app(monkeypatch):
    monkeypatch.setenv("REPLAY_DEMO", "1")
    from django.conf import settings

    monkeypatch.setattr(settings, "DEMO", True)
    from replay_site import asgi

    return asgi


def test_streams_go_to_django_asgi_and_pages_to_the_thread_pool(asgi_app, monkeypatch):
    seen = []

    async def fake(name):
        async def app(scope, receive, send):
            seen.append((name, scope["path"]))

        return app

    monkeypatch.setattr(asgi_app, "streams", asyncio.run(fake("streams")))
    monkeypatch.setattr(asgi_app, "pages", asyncio.run(fake("pages")))
    for path in ("/api/sessions/4/stream", "/api/sessions/4/tail", "/sessions/4/tail/", "/sessions/4/",
                 "/api/sessions/4/replay", "/api/sessions/4/stream/x"):  # fmt: skip
        asyncio.run(asgi_app.application({"type": "http", "path": path}, None, None))
    assert seen == [("streams", "/api/sessions/4/stream"), ("streams", "/api/sessions/4/tail"),
                    ("streams", "/sessions/4/tail/"), ("pages", "/sessions/4/"),
                    ("pages", "/api/sessions/4/replay"), ("pages", "/api/sessions/4/stream/x")]  # fmt: skip


@pytest.mark.django_db(transaction=True)
def test_an_async_stream_waits_in_the_event_loop_not_in_a_thread(project):
    """The async driver sends the same frames as the thread one, and its waits are awaited:
    while one stream sleeps through a recorded gap, the loop runs other work, and no thread
    sleeps."""
    session = timed_session(project, [(Kind.USER_MESSAGE, 0), (Kind.TOOL_CALL, 400), (Kind.LLM_CALL, 800)])
    expected = [(name, data) for name, data, _ in frames_of(streaming.paced_stream(session=session, pacing=0))]
    slept: list[float] = []
    ticks: list[int] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        await asyncio.sleep(seconds)

    async def main():
        async def ticker():
            for n in range(20):
                ticks.append(n)
                await asyncio.sleep(0.02)

        async def consume():
            return [chunk async for chunk in streaming.paced_stream_async(session=session, pacing=1, sleep=sleep)]

        before = threading.active_count()
        chunks, _ = await asyncio.gather(consume(), ticker())
        return chunks, before

    chunks, _ = asyncio.run(main())
    got = [(name, data) for name, data, _ in frames_of(chunks)]
    strip = {"gap_ms", "wait_ms"}
    assert [(n, {k: v for k, v in d.items() if k not in strip}) for n, d in got] == [
        (n, {k: v for k, v in d.items() if k not in strip}) for n, d in expected
    ]
    assert len(slept) == 2 and all(0.3 < s <= 0.41 for s in slept), slept
    assert len(ticks) == 20  # the loop kept running other work through the waits
