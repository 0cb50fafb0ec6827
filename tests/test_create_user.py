"""`manage.py create_user` (a team's accounts) and /accounts/password/ (one's own password)."""

from __future__ import annotations

import re
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.test import Client

from sessions_app.models import AuditEntry, Membership, Project, Role

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fast_password_hashes(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def create_user(*args: str) -> str:
    out = StringIO()
    call_command("create_user", *args, stdout=out, stderr=StringIO())
    return out.getvalue().strip().splitlines()[-1]


def test_an_account_made_on_the_command_line_signs_in_is_a_member_and_changes_its_password():
    project = Project.objects.create(name="Team", slug="team")
    password = create_user("vera", "--project", "team", "--role", "reviewer", "--email", "vera@example.org")
    user = get_user_model().objects.get(username="vera")
    assert not user.is_superuser and not user.is_staff and user.email == "vera@example.org"
    assert Membership.objects.get(user=user, project=project).role == Role.REVIEWER
    assert AuditEntry.objects.filter(action="member.add", target="user:vera").exists()

    client = Client()
    page = client.post("/accounts/login/", {"username": "vera", "password": password})
    assert page.status_code == 302
    assert b'href="/accounts/password/"' in client.get("/sessions/").content
    wrong = client.post("/accounts/password/", {"old_password": "nope", "new_password1": "x", "new_password2": "x"})
    assert wrong.status_code == 200 and b"incorrect" in wrong.content
    new = "a long new passphrase 42"
    changed = client.post("/accounts/password/", {"old_password": password, "new_password1": new, "new_password2": new})
    assert changed.status_code == 302 and changed["Location"] == "/accounts/password/done/"
    assert client.get("/accounts/password/done/").status_code == 200
    assert client.get("/sessions/").status_code == 200  # still signed in
    again = Client().post("/accounts/login/", {"username": "vera", "password": new})
    assert again.status_code == 302


def test_create_user_refuses_a_taken_name_an_unknown_project_and_a_bad_name():
    create_user("rex")
    with pytest.raises(CommandError, match="exists already"):
        create_user("rex")
    with pytest.raises(CommandError, match="--project"):
        create_user("ned", "--project", "nowhere")
    with pytest.raises(CommandError, match="USERNAME"):
        create_user("bad name!")
    assert not get_user_model().objects.filter(username="ned").exists()
    # A role needs the project it is in: it was dropped silently, the user a member of nothing.
    with pytest.raises(CommandError, match=r"^--role: give --project too"):
        create_user("vera", "--role", "reviewer")
    assert not get_user_model().objects.filter(username="vera").exists()


def test_the_password_page_needs_a_sign_in():
    response = Client().get("/accounts/password/")
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")


def test_the_printed_password_page_is_the_one_that_exists():
    err = StringIO()
    out = StringIO()
    call_command("create_user", "wes", stdout=out, stderr=err)
    password = out.getvalue().strip().splitlines()[-1]
    match = re.search(r"they change it on (\S+) ", err.getvalue())
    assert match, err.getvalue()
    url = match.group(1)
    assert url == "/accounts/password/"
    client = Client()
    assert client.post("/accounts/login/", {"username": "wes", "password": password}).status_code == 302
    assert client.get(url).status_code == 200
