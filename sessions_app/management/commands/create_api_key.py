"""`manage.py create_api_key NAME --user USERNAME [--project SLUG] [--read-only]`: the key is
printed alone on the last line.

Only its SHA-256 is stored (models.ApiKey), so this is the one time the key can be read.
"""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from sessions_app import audit, teams
from sessions_app.models import Project


class Command(BaseCommand):
    help = "Create a user's API key for `Authorization: Bearer <key>`; prints the key alone on its last line."

    def add_arguments(self, parser) -> None:
        parser.add_argument("name", help="what the key is for, e.g. 'ci-uploader'")
        parser.add_argument("--user", required=True, help="username the key acts as (never with more rights)")
        parser.add_argument("--project", default="", help="slug of the one project the key may reach")
        parser.add_argument("--read-only", action="store_true", help="the key may only read")
        parser.add_argument("--writes-to", default="", metavar="SLUG",
                            help="a key of all projects: where writes that name no project go")  # fmt: skip

    def handle(self, *args, name: str, user: str, project: str, read_only: bool, writes_to: str, **options) -> None:
        name = name.strip()
        if not name or len(name) > 200:
            raise CommandError("NAME must be 1 to 200 characters")
        users = get_user_model()
        owner = users.objects.filter(**{users.USERNAME_FIELD: user}).first()
        if owner is None:
            raise CommandError(f"no user named {user!r}")
        if not owner.is_active:
            raise CommandError(f"user {user!r} is not active: a key of theirs would be refused")
        limit = None
        if project:
            limit = Project.objects.filter(slug=project).first()
            if limit is None:
                raise CommandError(f"no project with the slug {project!r}")
        default = None
        if writes_to:
            default = Project.objects.filter(slug=writes_to).first()
            if default is None:
                raise CommandError(f"no project with the slug {writes_to!r}")
        try:
            api_key, key = teams.create_key(
                actor=audit.OPERATOR, user=owner, name=name, project=limit, read_only=read_only, default_project=default
            )
        except teams.TeamError as error:
            raise CommandError(str(error))
        limits = [f"project {limit.slug}"] if limit else []
        limits += ["read-only"] if read_only else []
        self.stderr.write(
            f"Created API key {api_key.name!r} ({api_key.key_prefix}…) of {owner.get_username()}"
            f"{' (' + ', '.join(limits) + ')' if limits else ''}. It is stored hashed and shown only now; "
            "send it as 'Authorization: Bearer <key>'. Revoke it with `manage.py revoke_api_key "
            f"{api_key.key_prefix}`.",
            style_func=self.style.SUCCESS,  # on stderr (stdout holds the key alone), not in red
        )
        self.stdout.write(key)
