"""`manage.py create_user USERNAME [--project SLUG --role ROLE] [--email ADDRESS]`: an account for
a team member, with a new password printed alone on the last line (they change it on
/accounts/password/ or `manage.py changepassword`); with --project, a member of that project.

Without it a team had no documented way to make accounts but Django's admin site: the
dashboard's "Add member" takes only users that exist, and `createsuperuser` makes admins of
every project.
"""

from __future__ import annotations

import secrets

from django.contrib.auth import get_user_model
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction
from django.urls import reverse

from sessions_app import audit, teams
from sessions_app.models import Project, Role


class Command(BaseCommand):
    help = "Create a user account (not a superuser); prints its new password alone on the last line."

    def add_arguments(self, parser) -> None:
        parser.add_argument("username")
        parser.add_argument("--email", default="")
        parser.add_argument("--project", default="", help="slug of a project to add the user to")
        parser.add_argument("--role", default=None, choices=Role.values, help="their role there (viewer)")

    def handle(self, *args, username: str, email: str, project: str, role: str | None, **options) -> None:
        if role is not None and not project:
            # A role is a role in a project: without one it was dropped without a word, and the
            # user made was a member of nothing.
            raise CommandError("--role: give --project too (the project the role is in)")
        role = role or Role.VIEWER
        users = get_user_model()
        username = username.strip()
        field = users._meta.get_field(users.USERNAME_FIELD)
        try:
            field.clean(username, None)
        except ValidationError as error:
            raise CommandError(f"USERNAME: {' '.join(error.messages)}")
        if users.objects.filter(**{users.USERNAME_FIELD: username}).exists():
            raise CommandError(f"USERNAME: a user {username!r} exists already")
        target = None
        if project:
            target = Project.objects.filter(slug=project).first()
            if target is None:
                raise CommandError(f"--project: no project with the slug {project!r}")
        password = secrets.token_urlsafe(12)
        with transaction.atomic():
            user = users.objects.create_user(username=username, email=email.strip(), password=password)
            try:
                validate_password(password, user)
            except ValidationError as error:  # a site's stricter validators: say so, make nothing
                raise CommandError(f"password: {' '.join(error.messages)}")
            if target is not None:
                teams.set_member(actor=audit.OPERATOR, project=target, username=username, role=role)
        where = f" and {role} of project {target.slug}" if target else ""
        self.stderr.write(
            f"Created user {username!r}{where}. Their password is shown only now; they change it on "
            # reverse(), not a literal: a literal once named /account/password/, a 404
            f"{reverse('password_change')} (or `manage.py changepassword`).",
            # On stderr so that stdout holds the password alone; in the success colour, not the
            # error colour Django gives stderr on a terminal.
            style_func=self.style.SUCCESS,
        )
        self.stdout.write(password)
