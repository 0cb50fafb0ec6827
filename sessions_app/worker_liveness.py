"""Whether the worker running an import is still alive, so a job whose worker died (killed,
out of memory, machine rebooted) is queued again within two minutes instead of waiting for the
broker's hour-long redelivery.

A job records its worker as "host:pid:start" (the process's start time from /proc, so a reused
pid is not mistaken for the worker). The watchdog (jobs.requeue_stalled_imports, every minute)
judges a running job:

- worker on this host: stalled as soon as that process is gone. This is the only test on SQLite,
  where every worker shares the machine (and a heartbeat could not be written anyway while an
  import holds the database's one write lock);
- worker on another host (PostgreSQL): stalled when its heartbeat, written every
  HEARTBEAT_EVERY seconds by a thread of the worker on its own autocommit connection, is older
  than STALLED_AFTER.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path

from django.db import connections
from django.utils import timezone

from .models import ImportJob

logger = logging.getLogger(__name__)

HEARTBEAT_EVERY = 10.0  # seconds
STALLED_AFTER = timedelta(seconds=45)


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/<pid>/stat)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return None if fields[0] == "Z" else fields[19]


def this_worker() -> str:
    pid = os.getpid()
    return f"{socket.gethostname()}:{pid}:{_start_time(pid) or ''}"


def _alive_here(worker: str) -> bool | None:
    """Whether the worker, if it ran on this host, is still running (None: another host)."""
    host, _, rest = worker.partition(":")
    if host != socket.gethostname():
        return None
    pid, _, started = rest.partition(":")
    if not pid.isdigit():
        return False
    return _start_time(int(pid)) == started and started != ""


def is_stalled(job: ImportJob, *, now: datetime | None = None) -> bool:
    """Whether a RUNNING job's worker is gone."""
    if job.status != ImportJob.Status.RUNNING:
        return False
    if not job.worker:
        return True  # taken before workers were recorded: nobody vouches for it
    alive = _alive_here(job.worker)
    if alive is not None:
        return not alive
    beat = job.heartbeat_at or job.started_at
    return beat is None or beat < (now or timezone.now()) - STALLED_AFTER


@contextmanager
def heartbeat(*, job_id: int, attempt: int) -> Iterator[None]:
    """While the block runs, a thread writes the job's heartbeat on its own connection. On
    SQLite it writes nothing (the watchdog checks the process instead, see above)."""
    if connections["default"].vendor == "sqlite":
        yield
        return
    stop = threading.Event()

    def beat() -> None:
        try:
            while not stop.wait(HEARTBEAT_EVERY):
                try:
                    ImportJob.objects.filter(pk=job_id, attempts=attempt).update(heartbeat_at=timezone.now())
                except Exception:  # a missed beat is not fatal; many missed ones requeue the job
                    logger.warning("import job %s: heartbeat not written", job_id, exc_info=True)
        finally:
            connections.close_all()  # this thread's own connection

    thread = threading.Thread(target=beat, name=f"heartbeat-{job_id}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
