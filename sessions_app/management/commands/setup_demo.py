"""Creates the demo login (printing its credentials) and loads the sessions shipped under demo/.

The demo user is an ordinary maintainer of the demo project, never staff or superuser (the first
admin is made with `createsuperuser`, docs/deployment.md). Its password is new at every run and
printed, so no password outlives the server it was printed for. A second run does not duplicate
sessions.
"""

from __future__ import annotations

import secrets
from pathlib import Path

from axes.utils import reset as reset_sign_in_failures
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.urls import reverse

from sessions_app import audit, teams, tours
from sessions_app.access import Actor
from sessions_app.ingest.importing import import_local_file
from sessions_app.jobs import enqueue_verify_after_commit, new_sessions
from sessions_app.models import Event, Project, Role, Session, Tour

DEMO_USER = "demo"
# A newcomer's first walk (the Learn page): where the failing demo run went wrong.
DEMO_TOUR = "Where the invoice run went wrong"
DEMO_TOUR_RUN = "demo_invoices_failed"


class Command(BaseCommand):
    help = "Create the demo login and import the demo sessions under demo/."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--url", default="http://127.0.0.1:8000/", help="where the dashboard will be")

    def handle(self, *args, **options) -> None:
        password = secrets.token_urlsafe(12)
        user, _ = get_user_model().objects.get_or_create(username=DEMO_USER)
        user.set_password(password)
        # A demo user made superuser by an earlier version becomes an ordinary one.
        user.is_active, user.is_staff, user.is_superuser = True, False, False
        user.save()
        project = Project.get_default()
        # Through the workflow, so the project's log says who made the demo user a member. A demo
        # user made the project's last admin since keeps that role (the workflow refuses to
        # demote the last admin): said, not a traceback.
        try:
            teams.set_member(actor=audit.OPERATOR, project=project, username=DEMO_USER, role=Role.MAINTAINER)
        except teams.TeamError as error:
            self.stderr.write(f"demo: kept {DEMO_USER}'s role: {error}")
        # A new password is a fresh start: failed sign-ins with the old one no longer lock it.
        reset_sign_in_failures(username=DEMO_USER)
        # Earlier versions kept the password here; it no longer signs in.
        (Path(settings.VAR_DIR) / "demo-password.txt").unlink(missing_ok=True)
        demo_dir = settings.BASE_DIR / "demo"
        loaded = 0
        paths = sorted(demo_dir.iterdir()) if demo_dir.is_dir() else []
        for path in paths:
            if path.name.startswith((".", "README")) or path.suffix == ".py":
                continue
            outcomes = import_local_file(path=path, project=project, created_by=audit.OPERATOR)
            enqueue_verify_after_commit(session_ids=new_sessions(outcomes))
            audit.record_file_import(actor=audit.OPERATOR, project=project, outcomes=outcomes)
            for outcome in outcomes:
                if outcome.error:
                    self.stderr.write(f"demo: {path.name}: {outcome.error}")
                else:
                    loaded += 1
        tour = _demo_tour(project, user)
        self.stdout.write(
            f"Demo sessions available: {loaded} (project {project.name}, where {DEMO_USER} is a maintainer)"
        )
        if tour is not None:
            self.stdout.write(
                f"A guided tour to start with: {options['url'].rstrip('/')}{reverse('sessions:tour', args=[tour.pk])}"
            )
        self.stdout.write(f"Sign in at {options['url']}")
        self.stdout.write(f"Demo sign-in: user {DEMO_USER}, password {password}")


def _demo_tour(project: Project, user) -> Tour | None:
    """The demo's tour through its failing run (its start, its first error, its end), made by the
    demo user once: a later run keeps it as it is (and its edits), unless it lost every stop (its
    run deleted, or imported again with --replace): then its stops are made again, through the
    run stored now. None without that run."""
    existing = Tour.objects.filter(project=project, title=DEMO_TOUR).first()
    if existing is not None and existing.stops.exists():
        return existing
    session = Session.objects.filter(project=project, run_id=DEMO_TOUR_RUN).order_by("-pk").first()
    if session is None or not session.event_count:
        return None
    error = Event.objects.filter(session=session, is_error=True).order_by("seq").values_list("seq", flat=True).first()
    stops = [tours.StopSpec(session=session.pk, seq=0, title="The task",
                            narration="The agent is asked to reconcile the March invoices. Press **→** to step, "
                                      "**Space** to play at the recorded pace.")]  # fmt: skip
    if error is not None:
        stops.append(tours.StopSpec(session=session.pk, seq=error, title="The first error",
                                    narration="Here it went wrong. The **Context** panel shows what the agent "
                                              "saw at this step: its code, the error and its variables."))  # fmt: skip
    stops.append(tours.StopSpec(session=session.pk, seq=session.event_count - 1, title="How it ended",
                                narration="The run's end: compare it with a good run from the sessions list "
                                          "(pick A and B, then **Compare**)."))  # fmt: skip
    actor = Actor(user=user)
    tour = existing or tours.create_tour(actor=actor, project=project, title=DEMO_TOUR,
                                         description="Three stops through a failed run: what it was asked, where it broke, how it ended.")  # fmt: skip
    tours.set_stops(actor=actor, tour=tour, stops=stops)
    return tour
