"""`manage.py mcp --key KEY` or `manage.py mcp --user USERNAME`: Replay's MCP tools over stdio,
for an assistant on the same machine that starts the server itself (docs/mcp.md).

The identity is fixed for the process: an API key acts as its user narrowed by the key's limits,
a username as that user, each checked again at every tool call (a key revoked, a user deactivated:
the next call is refused, as over HTTP). Standard output carries the protocol, so nothing else is
printed there.
"""

from __future__ import annotations

from collections.abc import Callable

import anyio
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError

from sessions_app.access import Actor
from sessions_app.mcp.server import build_server
from sessions_app.models import ApiKey


class Command(BaseCommand):
    help = "Serve Replay's MCP tools over stdio, as one API key or one user."

    def add_arguments(self, parser) -> None:
        who = parser.add_mutually_exclusive_group()
        who.add_argument("--key", help="an API key; REPLAY_MCP_KEY in the environment keeps it off the command line")
        who.add_argument("--user", help="a username: act as that user in every project they belong to")

    def handle(self, *args, key: str | None, user: str | None, **options) -> None:
        key = key or (None if user else settings.MCP_KEY or None)
        try:
            actor_for(key=key, user=user)  # refused now, with its reason, rather than at the first call
        except DatabaseError as error:  # a database never migrated, or out of reach: say so, no traceback
            raise CommandError(f"the database is not ready ({error}); run `manage.py migrate` first") from None
        anyio.run(build_server(actor=identity(key=key, user=user)).run_stdio_async)


def identity(*, key: str | None, user: str | None) -> Callable[[], Actor]:
    """Who the process acts as, read again at each tool call: a key revoked or a user
    deactivated while it runs is refused at the next call (it served on: the keys page promises
    "programs using it stop working at once")."""

    def current() -> Actor:
        try:
            return actor_for(key=key, user=user)
        except CommandError as gone:
            raise PermissionDenied(f"{gone}: this server acts for no one now") from None

    return current


def actor_for(*, key: str | None, user: str | None) -> Actor:
    if key:
        api_key = ApiKey.authenticate(key)
        if api_key is None:
            raise CommandError("the API key is invalid or revoked, or its user is inactive")
        return Actor(user=api_key.user, key=api_key)
    elif user:
        users = get_user_model()
        found = users.objects.filter(**{users.USERNAME_FIELD: user}).first()
        if found is None or not found.is_active:
            raise CommandError(f"no active user named {user!r}")
        return Actor(user=found)
    raise CommandError("say who the assistant acts as: --key KEY (or REPLAY_MCP_KEY) or --user USERNAME")
