"""Creates the demo login (printing its credentials) and loads the sessions shipped under demo/.

Idempotent: a second run keeps the same password and does not duplicate sessions.
"""

from __future__ import annotations

import secrets
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from sessions_app.ingest.importing import import_local_file
from sessions_app.jobs import enqueue_verify_after_commit, new_sessions
from sessions_app.models import Project

DEMO_USER = "demo"


class Command(BaseCommand):
    help = "Create the demo login and import the demo sessions under demo/."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--url", default="http://127.0.0.1:8000/", help="where the dashboard will be")

    def handle(self, *args, **options) -> None:
        password = self._demo_password()
        user_model = get_user_model()
        user, created = user_model.objects.get_or_create(username=DEMO_USER)
        if created or not user.check_password(password):
            user.set_password(password)
            user.is_staff = True
            user.is_superuser = True
            user.save()
        project = Project.get_default()
        demo_dir = settings.BASE_DIR / "demo"
        loaded = 0
        paths = sorted(demo_dir.iterdir()) if demo_dir.is_dir() else []
        for path in paths:
            if path.name.startswith((".", "README")) or path.suffix == ".py":
                continue
            outcomes = import_local_file(path=path, project=project, created_by="setup_demo")
            enqueue_verify_after_commit(session_ids=new_sessions(outcomes))
            for outcome in outcomes:
                if outcome.error:
                    self.stderr.write(f"demo: {path.name}: {outcome.error}")
                else:
                    loaded += 1
        self.stdout.write(f"Demo sessions available: {loaded}")
        self.stdout.write(f"Log in at {options['url']} with  username: {DEMO_USER}  password: {password}")

    def _demo_password(self) -> str:
        # Kept under var/ so a second `make run` prints the same, still valid, password.
        path = Path(settings.VAR_DIR) / "demo-password.txt"
        if path.exists():
            return path.read_text().strip()
        path.parent.mkdir(parents=True, exist_ok=True)
        password = secrets.token_urlsafe(12)
        path.write_text(password + "\n")
        path.chmod(0o600)
        return password
