"""Row locks that only make writers take turns (FOR NO KEY UPDATE) never block another's key
check, on PostgreSQL, for real: two connections, each stopped where the other's lock is taken,
must both commit (neither is made a deadlock's victim).

An audit entry's insert checks its project foreign key with FOR KEY SHARE on the project's row,
which a plain FOR UPDATE blocks: a writer holding the project's lock (a live create's quota, a
team change) and then asking for the head met an audit write holding the head and checking its
key (fresh-clone CI, tests/test_scale_out.py)."""

from __future__ import annotations

import threading
import time

import pytest
from django.contrib.auth import get_user_model
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection, transaction
from django.test import Client

from sessions_app import access, audit, checkpoints, comments, deletion, sharing, teams, tours
from sessions_app.canonical import SessionMeta
from sessions_app.ingest import live
from sessions_app.ingest.uploads import accept_upload
from sessions_app.models import AuditEntry, Checkpoint, Membership, Project, Role, Session, Tour

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

WAIT = 3  # seconds: past PostgreSQL's deadlock_timeout (1 s), so a cycle is found meanwhile


@pytest.fixture(autouse=True)
def _postgres_only() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("row locks are PostgreSQL's: SQLite's IMMEDIATE transactions take the database")


def _run(*targets) -> list[str]:
    failures: list[str] = []

    def run(name: str, target) -> None:
        try:
            target()
        except Exception as exc:  # noqa: BLE001 - the failure is the finding
            context = [line for line in str(exc).splitlines() if "while" in line]
            failures.append(f"{name}: {type(exc).__name__}: {str(exc).splitlines()[0]} {context}")
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(f"t{n}", t), name=f"t{n}") for n, t in enumerate(targets)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    return failures


def _create(project: Project) -> None:
    # POST /api/sessions: the session and its entry in one transaction (api/live.py).
    with transaction.atomic():
        session, _ = live.create_live_session(project=project, meta=SessionMeta(task="t"))
        audit.record(action="session.create_live", actor="a", project=project, target=f"session:{session.pk}")


def _add_member(project: Project) -> None:
    get_user_model().objects.create_user("newcomer")
    teams.set_member(actor="admin", project=project, username="newcomer", role="viewer")


def _crossing(monkeypatch) -> tuple[threading.Event, threading.Event]:
    """Thread t0 stopped where it asks for the log's head (`audit.log_name`), holding its first
    lock, until thread t1 holds the head (t1 reached `audit.entry_hash`; its entry's insert comes
    next): the events (t0 holds its lock, t1 holds the head)."""
    holds_lock, holds_head = threading.Event(), threading.Event()
    log_name, entry_hash = audit.log_name, audit.entry_hash

    def pausing_log_name(project_id):
        if threading.current_thread().name == "t0":
            holds_lock.set()
            holds_head.wait(WAIT)
        return log_name(project_id)

    def signalling_entry_hash(**values):
        if threading.current_thread().name == "t1":
            holds_head.set()
        return entry_hash(**values)

    monkeypatch.setattr(audit, "log_name", pausing_log_name)
    monkeypatch.setattr(audit, "entry_hash", signalling_entry_hash)
    return holds_lock, holds_head


@pytest.mark.parametrize("head", ["made", "not made yet"])
@pytest.mark.parametrize("holder", [_create, _add_member], ids=["live create", "member add"])
def test_a_writer_holding_the_projects_lock_and_an_entry_holding_the_head_both_commit(monkeypatch, head, holder):
    project = Project.get_default()
    if head == "made":
        audit.record(action="project.change", actor="setup", project=project)
    # The holder reaches its entry with the project's row locked: the other takes the head.
    holds_project, _ = _crossing(monkeypatch)

    def entry() -> None:  # a session ended, a comment: any entry in the project's log
        holds_project.wait(WAIT)
        audit.record(action="session.end", actor="b", project=project, target="session:0")

    assert _run(lambda: holder(project), entry) == []
    assert audit.verify_log(project=project).valid
    assert AuditEntry.objects.filter(action="session.end").count() == 1


def test_two_uploads_each_referencing_the_project_both_commit(settings, tmp_path):
    # Each upload's job references the project (FOR KEY SHARE) before its entry locks the
    # project's row: a FOR UPDATE there waits on the other's key share, both ways round.
    project = Project.get_default()
    both_made = threading.Barrier(2, timeout=WAIT)

    def upload(n: int) -> None:
        file = SimpleUploadedFile(f"{n}.jsonl", b'{"kind": "message", "payload": {"text": "hi"}}\n')
        with accept_upload(uploaded_file=file, project=project, format="", created_by="u") as job:
            both_made.wait()
            audit.record(action="session.import", actor="u", project=project, target=f"import:{job.pk}")

    assert _run(lambda: upload(0), lambda: upload(1)) == []
    assert AuditEntry.objects.filter(action="session.import").count() == 2


def test_a_session_deleted_while_its_projects_otlp_spans_settle_both_commit(monkeypatch, make_session):
    # The deletion holds the session's row and then writes its entry; the settling takes the
    # project's row and then its sessions' (ingest/traces.py). An entry that took the project's
    # row before its head would close that circle.
    from sessions_app.deletion import delete_session
    from sessions_app.models import Session

    session = make_session(events=3)
    pk = session.pk  # the deletion clears the instance's
    project = Project.get_default()
    holds_session, holds_project = threading.Event(), threading.Event()
    log_name = audit.log_name

    def pausing_log_name(project_id):
        if threading.current_thread().name == "t0":
            holds_session.set()
            holds_project.wait(WAIT)
        return log_name(project_id)

    monkeypatch.setattr(audit, "log_name", pausing_log_name)

    def settle() -> None:  # the locks of traces._settle_chunk, in its order
        holds_session.wait(WAIT)
        with transaction.atomic():
            Project.lock(project.pk)
            holds_project.set()
            Session.objects.select_for_update().in_bulk([pk])

    assert _run(lambda: delete_session(actor="a", session=session), settle) == []
    assert not Session.objects.filter(pk=pk).exists()


def test_a_session_ended_while_a_comment_on_it_is_logged_both_commit(monkeypatch, make_session):
    # The end holds the session's row (FOR UPDATE) and then asks for the head; the comment holds
    # the head and, committing, checks its session key (FOR KEY SHARE: Django's foreign keys are
    # checked at commit on PostgreSQL, DEFERRABLE INITIALLY DEFERRED).
    from sessions_app.access import Actor
    from sessions_app.comments import create_comment
    from sessions_app.models import Comment, Session

    session = make_session(events=3)
    Session.objects.filter(pk=session.pk).update(status=Session.Status.LIVE)
    mia = Actor(user=get_user_model().objects.create_user("mia"))
    holds_session, _ = _crossing(monkeypatch)

    def end() -> None:  # POST /api/sessions/{id}/end (api/live.py)
        with transaction.atomic():
            ended, _ = live.end_live_session(session_id=session.pk, status="completed")
            audit.record(action="session.end", actor="a", project=ended.project_id, target=f"session:{ended.pk}")

    def comment() -> None:
        holds_session.wait(WAIT)
        create_comment(actor=mia, session=session, body="hi", seq=0)

    assert _run(end, comment) == []
    assert Comment.objects.count() == 1
    assert Session.objects.get(pk=session.pk).status == "completed"


def test_a_session_deleted_while_a_comment_on_it_is_logged_never_deadlocks(monkeypatch, make_session):
    from sessions_app.access import Actor
    from sessions_app.comments import create_comment
    from sessions_app.deletion import delete_session
    from sessions_app.models import Comment, Session

    session = make_session(events=3)
    pk = session.pk  # the deletion clears the instance's
    mia = Actor(user=get_user_model().objects.create_user("mia"))
    holds_session, _ = _crossing(monkeypatch)

    def comment() -> None:
        holds_session.wait(WAIT)
        create_comment(actor=mia, session=Session.objects.get(pk=pk), body="hi", seq=0)

    failures = _run(lambda: delete_session(actor="a", session=session), comment)
    assert not [f for f in failures if "deadlock" in f], failures
    assert not Session.objects.filter(pk=pk).exists() and not Comment.objects.exists()


# Writers racing a delete of what they hang on (a review's finds): each takes its locks in the
# delete's order (the session, its tours and links, then the log's head), so one waits for the
# other and both end cleanly: the writer's 404 is no failure here, a deadlock is.


def _pausing_at_the_head(monkeypatch, seconds: float = 1.0) -> threading.Event:
    """Thread t0 stopped for `seconds` the first time it asks for the log's head, holding what
    it locked before; the event says it got there."""
    there, log_name = threading.Event(), audit.log_name

    def pausing(project_id):
        if threading.current_thread().name == "t0" and not there.is_set():
            there.set()
            time.sleep(seconds)
        return log_name(project_id)

    monkeypatch.setattr(audit, "log_name", pausing)
    return there


def _gone_is_fine(write):
    def run() -> None:
        try:
            write()
        except access.NotVisible:
            pass  # the session went first: a 404, as it should

    return run


@pytest.mark.parametrize("writer", ["rename a checkpoint", "delete a checkpoint", "open a link", "revoke a link"])
def test_a_writer_and_the_delete_of_its_session_both_end(monkeypatch, make_session, writer):
    session = make_session(events=3)
    ada = access.Actor(user=get_user_model().objects.create_superuser("ada"))
    checkpoint = checkpoints.save_checkpoint(actor=ada, session=session, name="cp", seq=0)
    link, token = sharing.create_link(actor=ada, session=session)
    there = _pausing_at_the_head(monkeypatch)
    stored = Checkpoint.objects.select_related("session")
    writes = {
        "rename a checkpoint": lambda: checkpoints.rename_checkpoint(
            actor=ada, checkpoint=stored.get(pk=checkpoint.pk), name="renamed"
        ),
        "delete a checkpoint": lambda: checkpoints.delete_checkpoint(
            actor=ada, checkpoint=stored.get(pk=checkpoint.pk)
        ),
        "open a link": lambda: sharing.open_link(token=token),
        "revoke a link": lambda: sharing.revoke_link(actor=ada, link=link),
    }

    def delete() -> None:
        there.wait(WAIT)
        deletion.delete_session(actor=ada, session=Session.objects.get(pk=session.pk))

    assert _run(_gone_is_fine(writes[writer]), delete) == []
    assert not Session.objects.filter(pk=session.pk).exists()


def test_a_tours_link_opened_as_the_tour_is_deleted_both_end(monkeypatch, make_session, project):
    ada = access.Actor(user=get_user_model().objects.create_superuser("ada"))
    tour = tours.create_tour(actor=ada, project=project, title="T")
    _, token = sharing.create_link(actor=ada, tour=tour)
    there = _pausing_at_the_head(monkeypatch)

    def delete() -> None:
        there.wait(WAIT)
        tours.delete_tour(actor=ada, tour=Tour.objects.get(pk=tour.pk))

    assert _run(lambda: sharing.open_link(token=token), delete) == []
    assert not Tour.objects.exists()


def test_a_stop_on_a_new_tour_from_the_player_and_the_sessions_delete_both_end(monkeypatch, make_session, project):
    # The player's "add to a new tour": the tour (and its entry, the log's head) and its first
    # stop in one transaction. It held the head, then asked for the session the delete held.
    session = make_session(events=3)
    ada = get_user_model().objects.create_superuser("ada")
    client = Client(raise_request_exception=False)
    client.force_login(ada)
    audit.record(action="project.change", actor="setup", project=project)  # the head is made
    at_the_stop, add_stop = threading.Event(), tours.add_stop

    def pausing_add_stop(**kwargs):
        at_the_stop.set()
        time.sleep(1.0)  # the delete takes the session meanwhile, or waits for it
        return add_stop(**kwargs)

    monkeypatch.setattr(tours, "add_stop", pausing_add_stop)
    answers = []

    def add() -> None:
        form = {"step": 0, "new_tour": "New", "title": "x"}
        answers.append(client.post(f"/sessions/{session.pk}/tour-stops/", form).status_code)

    def delete() -> None:
        at_the_stop.wait(WAIT)
        deletion.delete_session(actor="b", session=Session.objects.get(pk=session.pk))

    assert _run(add, delete) == []
    assert answers[0] in (200, 302, 404) and not Session.objects.filter(pk=session.pk).exists()


@pytest.mark.parametrize("member", [True, False], ids=["role change", "member add"])
def test_a_members_role_set_as_their_account_is_deleted_both_end(member):
    # Django deletes the account's memberships first, then its row; the role change held the
    # row, then asked for the membership's (a deadlock); an add committed a membership whose
    # account was gone (the delete failed its key).
    project = Project.get_default()
    user = get_user_model().objects.create_user("x")
    if member:
        Membership.objects.create(project=project, user=user, role=Role.VIEWER)
    at_the_membership = threading.Event()

    def pause(execute, sql, params, many, context):
        if "sessions_app_membership" in sql and "FOR UPDATE" in sql and not at_the_membership.is_set():
            at_the_membership.set()
            time.sleep(0.5)  # the delete takes the membership meanwhile
        return execute(sql, params, many, context)

    def change() -> None:
        with connection.execute_wrapper(pause):
            try:
                teams.set_member(actor="admin", project=project, username="x", role=Role.REVIEWER)
            except teams.TeamError:
                pass  # the account went first: a 400 naming it

    def delete() -> None:
        at_the_membership.wait(WAIT)
        with transaction.atomic():
            get_user_model().objects.get(username="x").delete()

    assert _run(change, delete) == []
    assert not get_user_model().objects.filter(username="x").exists() and not Membership.objects.exists()


def test_a_delete_that_waited_for_a_tours_rewrite_says_no_stop_it_did_not_remove(monkeypatch, make_session, project):
    first, second = make_session(events=3), make_session(events=3)
    ada = access.Actor(user=get_user_model().objects.create_superuser("ada"))
    tour = tours.create_tour(actor=ada, project=project, title="T")
    tours.set_stops(actor=ada, tour=tour, stops=[tours.StopSpec(session=second.pk, seq=0, title="s")])
    there = _pausing_at_the_head(monkeypatch)  # the rewrite holds the tour, the delete waits for it

    def delete() -> None:
        there.wait(WAIT)
        deletion.delete_session(actor=ada, session=Session.objects.get(pk=second.pk))

    rewrite = [tours.StopSpec(session=first.pk, seq=0, title="s")]
    assert _run(lambda: tours.set_stops(actor=ada, tour=tour, stops=rewrite), delete) == []
    logged = AuditEntry.objects.filter(target=f"tour:{tour.pk}", action="tour.change").values_list("detail", flat=True)
    assert not any("stops_removed" in detail for detail in logged), list(logged)


def _two_admins_and_mia(project: Project, mia_role: str = Role.ADMIN) -> tuple[access.Actor, object]:
    users = get_user_model().objects
    ada, mia = users.create_superuser("ada"), users.create_user("mia")
    Membership.objects.create(project=project, user=ada, role=Role.ADMIN)
    Membership.objects.create(project=project, user=mia, role=mia_role)
    return access.Actor(user=ada), mia


@pytest.mark.parametrize("change", ["remove", "demote"])
def test_a_member_removed_as_a_session_with_their_link_is_deleted_both_end(monkeypatch, make_session, project, change):
    # The delete held the link (it goes with the session) and asked for the head; the team
    # change held the head (its entry) and asked for the link, to revoke it (REVIEW3).
    session = make_session(events=3)
    ada, mia = _two_admins_and_mia(project)
    sharing.create_link(actor=access.Actor(user=mia), session=session)
    there = _pausing_at_the_head(monkeypatch, seconds=1.5)

    def team() -> None:
        there.wait(WAIT)
        if change == "remove":
            teams.remove_member(actor=ada, project=project, username="mia")
        else:
            teams.set_member(actor=ada, project=project, username="mia", role=Role.VIEWER)

    delete = lambda: deletion.delete_session(actor=ada, session=Session.objects.get(pk=session.pk))  # noqa: E731
    assert _run(delete, team) == []


def test_a_member_removed_as_a_tour_with_their_link_is_deleted_both_end(monkeypatch, project):
    ada, mia = _two_admins_and_mia(project)
    tour = tours.create_tour(actor=ada, project=project, title="T")
    sharing.create_link(actor=access.Actor(user=mia), tour=tour)
    there = _pausing_at_the_head(monkeypatch, seconds=1.5)

    def team() -> None:
        there.wait(WAIT)
        teams.remove_member(actor=ada, project=project, username="mia")

    assert _run(lambda: tours.delete_tour(actor=ada, tour=Tour.objects.get(pk=tour.pk)), team) == []


def test_a_member_removed_as_their_comment_commits_both_end(monkeypatch, make_session, project):
    # The comment held the head; its author's key check at commit waited for the removal's lock
    # on the account, taken with the membership's (no `of`), while the removal waited for the head.
    session = make_session(events=3)
    ada, mia = _two_admins_and_mia(project, Role.REVIEWER)
    audit.record(action="project.change", actor="setup", project=project)
    holds_head, entry_hash = threading.Event(), audit.entry_hash

    def pausing(**values):
        if threading.current_thread().name == "t0" and not holds_head.is_set():
            holds_head.set()
            time.sleep(1.5)
        return entry_hash(**values)

    monkeypatch.setattr(audit, "entry_hash", pausing)

    def team() -> None:
        holds_head.wait(WAIT)
        teams.remove_member(actor=ada, project=project, username="mia")

    comment = lambda: comments.create_comment(actor=access.Actor(user=mia), session=session, body="hi", seq=0)  # noqa: E731
    assert _run(comment, team) == []


def test_a_parent_deleted_as_a_comment_on_its_child_is_made_both_end(monkeypatch, make_session, project):
    parent, child = make_session(events=3), make_session(events=3)
    Session.objects.filter(pk=child.pk).update(parent=parent)
    ada = access.Actor(user=get_user_model().objects.create_superuser("ada"))
    audit.record(action="project.change", actor="setup", project=project)
    there = _pausing_at_the_head(monkeypatch, seconds=1.5)

    def delete() -> None:  # the parent, the head, then the child's parent set to null
        there.wait(WAIT)
        deletion.delete_session(actor=ada, session=Session.objects.get(pk=parent.pk))

    comment = lambda: comments.create_comment(actor=ada, session=Session.objects.get(pk=child.pk), body="hi", seq=0)  # noqa: E731
    assert _run(comment, delete) == []


def test_retention_and_the_delete_of_a_tour_stopping_on_its_session_both_end(monkeypatch, make_session, project):
    from datetime import timedelta

    from django.utils import timezone

    from sessions_app import retention

    session = make_session(events=3)
    ada = access.Actor(user=get_user_model().objects.create_superuser("ada"))
    tour = tours.create_tour(actor=ada, project=project, title="T")
    tours.add_stop(actor=ada, tour=tour, session=session, seq=0, title="s")
    there = _pausing_at_the_head(monkeypatch, seconds=1.5)

    def clean() -> None:
        there.wait(WAIT)
        retention.delete_expired_sessions(days=1, now=timezone.now() + timedelta(days=3))

    assert _run(lambda: tours.delete_tour(actor=ada, tour=Tour.objects.get(pk=tour.pk)), clean) == []
    assert not Session.objects.filter(pk=session.pk).exists()


def test_a_member_removed_as_their_account_is_deleted_both_end(project):
    ada, mia = _two_admins_and_mia(project, Role.REVIEWER)
    held = threading.Event()

    def pause(execute, sql, params, many, context):
        result = execute(sql, params, many, context)
        if "auth_user" in sql and "FOR UPDATE" in sql and not held.is_set():
            held.set()
            time.sleep(1.5)  # the account is held; the removal takes the membership meanwhile
        return result

    def delete() -> None:
        with connection.execute_wrapper(pause), transaction.atomic():
            get_user_model().objects.get(username="mia").delete()

    def team() -> None:
        held.wait(WAIT)
        try:
            teams.remove_member(actor=ada, project=project, username="mia")
        except teams.TeamError:
            pass  # the account went first

    assert _run(delete, team) == []
