"""`planned_for_values()` (sessions_app/models/planning.py): inside it PostgreSQL plans each
statement for its own values, since none is prepared; outside, a statement run five times is."""

import pytest
from django.db import connection

from sessions_app.models import Event, OtlpTrace
from sessions_app.models.planning import planned_for_values


def _lookup(project) -> None:
    list(OtlpTrace.objects.filter(project=project, trace_id__in=["a" * 32, "b" * 32]).values_list("pk"))


def _prepared_lookups() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE %s", ["%sessions_app_otlptrace%"]
        )
        return cursor.fetchone()[0]


@pytest.mark.django_db
def test_inside_the_block_a_repeated_look_up_is_never_prepared_and_outside_it_is(project):
    if connection.vendor != "postgresql":
        with planned_for_values():  # nothing to change elsewhere: the look-ups just run
            _lookup(project)
        pytest.skip("the rest is PostgreSQL's")
    threshold = connection.connection.prepare_threshold
    assert threshold == 5  # settings.postgres_options
    with planned_for_values():
        assert connection.connection.prepare_threshold is None
        for _ in range(8):
            _lookup(project)
        assert _prepared_lookups() == 0
    assert connection.connection.prepare_threshold == threshold
    for _ in range(8):
        _lookup(project)
    assert _prepared_lookups() == 1
    # The connection's own setting comes back however the block ends.
    with pytest.raises(RuntimeError), planned_for_values():
        raise RuntimeError("a failed look-up")
    assert connection.connection.prepare_threshold == threshold


@pytest.mark.django_db
def test_the_players_look_ups_of_a_list_of_seqs_are_never_prepared(project, tmp_path):
    # The overview strip and the cost chart read a session's events by a list of seqs; planned
    # without their values (a prepared statement's generic plan) PostgreSQL may scan the whole
    # session comparing each seq with the list.
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL only")
    from sessions_app.ingest.importing import import_local_file
    from sessions_app.replay.charts import cost_figure
    from sessions_app.replay.timeline import session_overview
    from tests.builders_ingest import write_canonical_file

    path = write_canonical_file(tmp_path / "long.jsonl", events=2000)
    session = import_local_file(path=path, project=project)[0].session
    for _ in range(8):
        session_overview(session=session)
        assert cost_figure(session=session)["data"]
        Event.objects.filter(session=session, seq=5).exists()  # outside any block: prepared
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements WHERE statement LIKE %s", ["%sessions_app_event%"])
        prepared = [row[0] for row in cursor.fetchall()]
    assert any('"seq" = ' in sql for sql in prepared), prepared  # the connection prepares the others
    assert not [sql for sql in prepared if " IN (" in sql], prepared


@pytest.mark.django_db
def test_retention_plans_each_projects_look_up_for_its_cutoff():
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL only")
    from sessions_app.models import Project, Session
    from sessions_app.retention import delete_expired_sessions

    for n in range(8):
        project = Project.objects.create(name=f"kept {n}", slug=f"kept-{n}", retention_days=30)
        Session.objects.create(project=project)  # new: not expired
    result = delete_expired_sessions(days=None)
    assert result.sessions == 0 and len(result.projects) >= 8
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        prepared = [row[0] for row in cursor.fetchall()]
    assert not [sql for sql in prepared if '"created_at" <' in sql], prepared
