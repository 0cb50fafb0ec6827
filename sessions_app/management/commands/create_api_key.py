"""`manage.py create_api_key NAME [--user U]`: the key is printed alone on the last line.

Only its SHA-256 is stored (models.ApiKey), so this is the one time the key can be read.
"""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from sessions_app.models import ApiKey


class Command(BaseCommand):
    help = "Create an API key for `Authorization: Bearer <key>`; prints the key alone on its last line."

    def add_arguments(self, parser) -> None:
        parser.add_argument("name", help="what the key is for, e.g. 'ci-uploader'")
        parser.add_argument("--user", help="username the key acts for (optional)")

    def handle(self, *args, name: str, user: str | None = None, **options) -> None:
        name = name.strip()
        if not name or len(name) > 200:
            raise CommandError("NAME must be 1 to 200 characters")
        owner = None
        if user:
            User = get_user_model()
            owner = User.objects.filter(**{User.USERNAME_FIELD: user}).first()
            if owner is None:
                raise CommandError(f"no user named {user!r}")
        api_key, key = ApiKey.create_key(name=name, user=owner)
        self.stderr.write(
            f"Created API key {api_key.name!r} ({api_key.key_prefix}…). It is stored hashed and "
            "shown only now; send it as 'Authorization: Bearer <key>'."
        )
        self.stdout.write(key)
