"""Row locks that make writers take turns, one way for every writer (docs/teams.md gives the
order the callers take them in)."""

from __future__ import annotations

from django.db.models import QuerySet


def lock_rows(rows: QuerySet, *, no_key: bool = True) -> set[int]:
    """Lock `rows` to the end of the caller's transaction, in id order (two writers locking
    overlapping rows then never wait on each other in a circle); the ids found. FOR NO KEY
    UPDATE unless `no_key` is False: a row inserted meanwhile that references one (an audit
    entry, a comment) checks its key with FOR KEY SHARE, which FOR UPDATE blocks (Project.lock).
    FOR UPDATE where the rows are about to be deleted, as the delete itself takes them."""
    return set(rows.select_for_update(no_key=no_key).order_by("pk").values_list("pk", flat=True))
