"""`manage.py setup_demo` (make run): an ordinary maintainer of the demo project, with a new
password printed at every start, and the demo sessions loaded once."""

from __future__ import annotations

import re
from io import StringIO

import orjson
import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client

from sessions_app.models import AuditEntry, Membership, Project, Role, Session

pytestmark = pytest.mark.django_db

PRINTED = re.compile(r"^Demo sign-in: user demo, password (\S+)$", re.MULTILINE)


@pytest.fixture(autouse=True)
def _fast_password_hashes(settings):
    # Each sign-in checks a password: at the production hasher's cost these tests take minutes.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def _var_in_tmp(settings, tmp_path):
    settings.VAR_DIR = tmp_path / "var"


@pytest.fixture
def no_demo_files(settings, tmp_path):
    # The demo files take seconds to import; most tests here are about the user only.
    settings.BASE_DIR = tmp_path


def setup_demo() -> str:
    """The password the command printed."""
    out = StringIO()
    call_command("setup_demo", stdout=out, stderr=StringIO())
    (password,) = PRINTED.findall(out.getvalue())
    return password


def demo_user():
    return get_user_model().objects.get(username="demo")


def test_the_demo_user_is_an_ordinary_maintainer_of_the_demo_project():
    setup_demo()
    user = demo_user()
    assert not user.is_superuser and not user.is_staff and user.is_active
    (membership,) = Membership.objects.filter(user=user)
    assert (membership.project, membership.role) == (Project.get_default(), Role.MAINTAINER)
    assert Session.objects.filter(project=Project.get_default()).exists()
    # The project's log says where its members and sessions came from (the walkthrough found none).
    log = AuditEntry.objects.of_project(Project.get_default())
    assert list(log.filter(action="member.add").values_list("actor", "target")) == [("manage.py", "user:demo")]
    imports = list(log.filter(action="session.import"))
    stored = set(Session.objects.filter(project=Project.get_default()).values_list("pk", flat=True))
    assert {pk for entry in imports for pk in orjson.loads(entry.detail)["sessions"]} == stored
    assert all(entry.actor == "manage.py" and entry.target.startswith("import:") for entry in imports)
    setup_demo()  # a second run stores nothing new and says nothing more
    assert log.filter(action__in=["member.add", "session.import"]).count() == 1 + len(imports)


def test_the_demo_agentlens_session_carries_a_valid_source_chain():
    # Its events were hashed the way AgentLens hashed before version 2: the first row a new
    # user saw read "verified" beside "source chain broken at event 0".
    setup_demo()
    session = Session.objects.get(source_format="agentlens")
    assert session.metadata["source_chain"] == {"valid": True, "chained": True}


def test_the_printed_password_signs_in_on_the_login_page(no_demo_files):
    password = setup_demo()
    client = Client()
    response = client.post("/accounts/login/", {"username": "demo", "password": password})
    assert response.status_code == 302 and "_auth_user_id" in client.session


def test_every_start_prints_a_new_password_and_the_old_one_stops_working(no_demo_files):
    first = setup_demo()
    second = setup_demo()
    assert first != second and len(second) >= 16
    assert demo_user().check_password(second) and not demo_user().check_password(first)
    assert Membership.objects.filter(user=demo_user()).count() == 1


def test_a_demo_superuser_of_an_earlier_version_becomes_an_ordinary_user(no_demo_files):
    get_user_model().objects.create_superuser("demo", password="old-demo-password")
    setup_demo()
    user = demo_user()
    assert not user.is_superuser and not user.is_staff
    assert Membership.objects.get(user=user).role == Role.MAINTAINER


def test_a_new_password_lifts_a_lock_on_the_demo_user(no_demo_files):
    setup_demo()
    client = Client()
    for _ in range(5):
        client.post("/accounts/login/", {"username": "demo", "password": "wrong"})
    password = setup_demo()
    response = client.post("/accounts/login/", {"username": "demo", "password": password})
    assert response.status_code == 302


def test_the_password_file_of_earlier_versions_is_removed(no_demo_files, settings):
    stale = settings.VAR_DIR / "demo-password.txt"
    stale.parent.mkdir()
    stale.write_text("old-demo-password\n")
    setup_demo()
    assert not stale.exists()


def test_a_demo_user_made_the_projects_last_admin_keeps_that_role_and_the_run_goes_on(no_demo_files):
    """The workflow refuses to demote a project's last admin: said on stderr, not a traceback."""
    setup_demo()
    Membership.objects.filter(user=demo_user()).update(role=Role.ADMIN)
    err = StringIO()
    call_command("setup_demo", stdout=StringIO(), stderr=err)
    assert "demo: kept demo's role: role: demo is the project's last admin" in err.getvalue()
    assert Membership.objects.get(user=demo_user()).role == Role.ADMIN


def test_the_demo_has_a_tour_through_its_failing_run_made_once():
    # The walkthrough's newcomer found "No tours yet" on the Learn page.
    from sessions_app.models import Event, Tour

    out = StringIO()
    call_command("setup_demo", stdout=out, stderr=StringIO())
    (tour,) = Tour.objects.filter(project=Project.get_default())
    assert f"A guided tour to start with: http://127.0.0.1:8000/tours/{tour.pk}/" in out.getvalue()
    stops = list(tour.stops.order_by("position"))
    (session,) = {stop.session for stop in stops}
    assert session.run_id == "demo_invoices_failed" and tour.created_by == demo_user()
    first_error = Event.objects.filter(session=session, is_error=True).order_by("seq").first()
    assert [(s.seq, s.title) for s in stops] == [
        (0, "The task"), (first_error.seq, "The first error"), (session.event_count - 1, "How it ended"),
    ]  # fmt: skip
    tour.stops.filter(title="How it ended").delete()  # edited since: a later run leaves it so
    setup_demo()
    assert Tour.objects.get().stops.count() == 2
    # Imported again with --replace, its run is kept, with the tour's stops on it.
    out = StringIO()
    call_command("import_sessions", str(session.import_job.stored_path), "--replace", stdout=out, stderr=out)
    assert f"not replaced: session(s) {session.pk} of the same source hold" in out.getvalue()
    assert Tour.objects.get().stops.count() == 2
    # Its run deleted took every stop with it: the next run makes them again, through the run
    # stored now (it printed a link to an empty tour).
    from sessions_app.access import Actor
    from sessions_app.deletion import delete_session

    for run in Session.objects.filter(run_id="demo_invoices_failed"):
        delete_session(actor=Actor(user=demo_user()), session=run)
    assert not Session.objects.filter(pk=session.pk).exists() and Tour.objects.get().stops.count() == 0
    out = StringIO()
    call_command("setup_demo", stdout=out, stderr=StringIO())
    again = Tour.objects.get()
    assert again.pk == tour.pk and again.stops.count() == 3 and f"/tours/{tour.pk}/" in out.getvalue()
    assert {stop.session.run_id for stop in again.stops.all()} == {"demo_invoices_failed"}
