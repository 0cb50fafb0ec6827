"""`manage.py revoke_api_key PREFIX`: revoke the one active key whose prefix (as lists show it,
e.g. `rpl_Ab3dE6`) starts with PREFIX."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from sessions_app import audit, teams
from sessions_app.models import ApiKey


class Command(BaseCommand):
    help = "Revoke an API key by its prefix (the first characters lists show, e.g. rpl_Ab3dE6)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("prefix", help="the key's prefix, or its first characters")

    def handle(self, *args, prefix: str, **options) -> None:
        prefix = prefix.strip()
        if len(prefix) < len(ApiKey.PREFIX) + 1:
            raise CommandError(f"PREFIX must be more than {ApiKey.PREFIX!r}")
        found = list(ApiKey.objects.active().select_related("user").filter(key_prefix__startswith=prefix)[:11])
        if not found:
            raise CommandError(f"no active API key with the prefix {prefix!r}")
        if len(found) > 1:
            names = ", ".join(f"{k.key_prefix} ({k.name})" for k in found[:10])
            raise CommandError(f"{prefix!r} is the prefix of more than one active key: {names}; give more of it")
        api_key = found[0]
        teams.revoke_key(actor=audit.OPERATOR, api_key=api_key)
        owner = api_key.user.get_username() if api_key.user else "no user"
        self.stdout.write(f"Revoked API key {api_key.name!r} ({api_key.key_prefix}…) of {owner}.")
