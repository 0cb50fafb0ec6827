"""`planned_for_values()`: the statements of a block planned by PostgreSQL for their own values.

Why: a statement a connection has run five times is prepared (replay_site/settings.py,
`postgres_options`), and PostgreSQL may then use one plan, made without the values, for every
execution. For most statements that is the cheaper way, foreign-key checks included. Not for a
look-up of a long list beside another column with an index of its own: planned without its
values, `project_id = $1 AND trace_id IN ($2, ..., $2001)` read the project's every trace through
the project's index and compared each with the 2,000 ids, and a retried export of 66,000 traces
took 121 s to find them again instead of about 4 (`= ANY` of one array fared no better once the
table's statistics were stale). A session's events by a list of seqs are the same case: planned
for an average session, PostgreSQL 15 may read the session's every event on its (session, seq)
index in order and compare each seq with the list, which costs a 100,000-event session's page
most of a second. Such look-ups run inside this block: sent unprepared, each is planned for the
values it carries. Look-ups of a list of primary keys, or of a list that is an index's first
column, do not need it: their index is the one any plan takes.
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
