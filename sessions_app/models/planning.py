"""`planned_for_values()`: the statements of a block planned by PostgreSQL for their own values.

Why: a statement a connection has run five times is prepared (replay_site/settings.py,
`postgres_options`), and PostgreSQL may then use one plan, made without the values, for every
execution. For most statements that is the cheaper way, foreign-key checks included. Not for a
look-up of a long list beside another column with an index of its own: planned without its
values, `project_id = $1 AND trace_id IN ($2, ..., $2001)` read the project's every trace through
the project's index and compared each with the 2,000 ids, and a retried export of 66,000 traces
took 121 s to find them again instead of about 4 (`= ANY` of one array fared no better once the
table's statistics were stale). Such look-ups run inside this block: sent unprepared, each is
planned for the values it carries. Look-ups by primary key, or by a session's seqs (every index
of events starts with the session and the seq is its second column), do not need it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connection


@contextmanager
def planned_for_values() -> Iterator[None]:
    if connection.vendor != "postgresql":
        yield
        return
    connection.ensure_connection()
    driver = connection.connection  # psycopg's: preparing is its decision (prepare_threshold)
    before = driver.prepare_threshold
    driver.prepare_threshold = None
    try:
        yield
    finally:
        driver.prepare_threshold = before
