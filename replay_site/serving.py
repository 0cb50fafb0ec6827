"""The production server in one command (`manage.py serve`, which `make run` runs): granian
serving replay_site/asgi.py with several web processes, and django-q2's `qcluster` for the jobs.

It supervises both as a plain parent process: each child runs in its own session, so the
terminal's Ctrl-C reaches only this process, which then asks each child to stop (SIGTERM to its
main process, which stops its own workers gracefully), waits, and kills whatever is left of the
child's process group after STOP_TIMEOUT. A stop asked for by a signal exits 0; a child that
dies on its own stops the other and exits non-zero.
"""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

STOP_TIMEOUT = 8.0  # seconds each child gets to stop before its process group is killed
# Container objects allocated (net) before the collector's youngest generation runs. Python's
# default (2,000) is made for small heaps: a 1000-event replay page builds thousands of dicts and
# lists that all live until it is sent, and the collector walked them ~4 times a page (~4 ms, a
# sixth of its CPU; docs/benchmarks.md, issue 20).
GC_YOUNG_THRESHOLD = 50_000
MANAGE = Path(__file__).resolve().parent.parent / "manage.py"


def require_real_secret_key() -> None:
    """Outside demo mode, refuse to serve with the development secret key: sessions and CSRF
    tokens signed with a published key can be forged."""
    if settings.DEVELOPMENT_SECRET_KEY and not settings.DEMO:
        raise ImproperlyConfigured(
            "REPLAY_SECRET_KEY is not set: set it to a long random value (docs/deployment.md), "
            "or set REPLAY_DEMO=1 to serve the demo with the development key"
        )


def require_signing_key() -> None:
    """The bundle signing key loads (or is made) before anything is served: a file that is no
    key had let the server start, and every page that signs (the About page, bundle exports)
    answered 500 (docs/bundles.md)."""
    from sessions_app.signing import server_key

    server_key()


def tune_garbage_collector() -> None:
    """For a web process, once the application is loaded: what is alive now (modules, settings,
    templates, URL patterns: ~100,000 objects) lives as long as the process, so the collector
    stops walking it (`gc.freeze`; each full collection re-walked all of it), and it runs less
    often (GC_YOUNG_THRESHOLD). Garbage with reference cycles is still collected."""
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])


def commands(*, host: str, port: int, web_processes: int) -> list[list[str]]:
    """The web server's and the job cluster's command lines (the cluster's workers are counted in
    its environment, REPLAY_Q_WORKERS)."""
    web = [
        sys.executable, "-m", "granian", "--interface", "asgi", "--host", host, "--port", str(port),
        "--workers", str(web_processes), "--no-ws", "--log-level", "warning",
        "--workers-kill-timeout", str(int(STOP_TIMEOUT) - 2), "replay_site.asgi:application",
    ]  # fmt: skip
    return [web, [sys.executable, str(MANAGE), "qcluster"]]


def serve(*, host: str, port: int, web_processes: int, job_workers: int) -> int:
    require_real_secret_key()
    require_signing_key()  # here first: the web processes then read the one key this made
    env = os.environ | {"REPLAY_Q_WORKERS": str(job_workers)}
    stopping: list[int] = []

    def ask_to_stop(signum, frame) -> None:
        stopping.append(signum)

    previous = {sig: signal.signal(sig, ask_to_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    children = [
        subprocess.Popen(command, env=env, start_new_session=True)
        for command in commands(host=host, port=port, web_processes=web_processes)
    ]
    try:
        while not stopping and all(child.poll() is None for child in children):
            time.sleep(0.2)
    finally:
        _stop(children)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if stopping:
        return 0
    died = [child for child in children if child.returncode not in (0, None)]
    return died[0].returncode if died else 1


def _stop(children: list[subprocess.Popen]) -> None:
    for child in children:
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT
    for child in children:
        try:
            child.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
        # Whatever the child left behind (its workers) goes with its process group.
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        child.wait()
