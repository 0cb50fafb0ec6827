"""Browsers' login sessions (settings.SESSION_ENGINE): Django's database store, with the lookup
every signed-in request makes read by SQL built once.

Django's store compiled the same `Session.objects.get(session_key=..., expire_date__gt=now)`
through the ORM on every page request, ~0.5 ms of CPU, about as much as the rest of the login
check (docs/benchmarks.md, issue 20). Nothing else changes: the row is read from the database on
every request (so signing out, or an expired session, takes effect at once), its data decoded
and its signature checked by Django's own code, and writes go through Django's store.
"""

from __future__ import annotations

from django.contrib.sessions.backends import db
from django.contrib.sessions.models import Session
from django.db import connection
from django.utils import timezone

from .models.fixed_lookup import FixedLookup

_UNEXPIRED = FixedLookup(Session, where="{table}.session_key = %s AND {table}.expire_date > %s")


class SessionStore(db.SessionStore):
    def _get_session_from_db(self) -> Session | None:
        found = _UNEXPIRED.get([self.session_key, connection.ops.adapt_datetimefield_value(timezone.now())])
        if found is None:
            # As Django's store: a key naming no live session is forgotten (a new one is made
            # if the request stores anything).
            self._session_key = None
        return found
