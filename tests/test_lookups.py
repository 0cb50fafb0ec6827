"""`__any_of` (sessions_app/models/lookups.py): the rows `__in` finds, and on PostgreSQL a plan
that stays on the right index when the statement is prepared and planned without its values."""

import pytest
from django.db import connection, transaction
from django.utils import timezone

from sessions_app.models import OtlpTrace, Session


def _traces(project, count: int) -> list[str]:
    ids = [f"{n:032x}" for n in range(count)]
    now = timezone.now()
    session = Session.objects.create(project=project, source_format="otlp")
    OtlpTrace.objects.bulk_create(
        OtlpTrace(project=project, trace_id=trace_id, session=session, pending=False, last_received_at=now)
        for trace_id in ids
    )
    return ids


@pytest.mark.django_db
def test_any_of_finds_what_in_finds_for_text_and_numbers(project):
    ids = _traces(project, 30)
    wanted = [ids[3], ids[7], "not-a-trace", ids[7]]
    found = OtlpTrace.objects.filter(project=project, trace_id__any_of=wanted)
    assert sorted(t.trace_id for t in found) == sorted(
        t.trace_id for t in OtlpTrace.objects.filter(project=project, trace_id__in=wanted)
    )
    assert sorted(t.trace_id for t in found) == [ids[3], ids[7]]
    # None matches nothing, as with `__in`; an empty list finds nothing without a query.
    assert [t.trace_id for t in OtlpTrace.objects.filter(trace_id__any_of=[None, ids[0]])] == [ids[0]]
    assert list(OtlpTrace.objects.filter(trace_id__any_of=[])) == []
    assert list(OtlpTrace.objects.filter(trace_id__any_of=[None])) == []
    # A whole-number field (the chart's step positions are looked up this way).
    sessions = [Session.objects.create(project=project, step_count=n) for n in (2, 5, 9)]
    assert sorted(s.step_count for s in Session.objects.filter(step_count__any_of=[5, 9, 11])) == [5, 9]
    assert Session.objects.filter(step_count__any_of={2}).get() == sessions[0]
    assert Session.objects.filter(step_count__any_of=[2**62, -1]).count() == 0


@pytest.mark.django_db
def test_on_postgresql_the_list_is_one_array_and_a_plan_without_values_keeps_the_unique_index(project):
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL only")
    from psycopg import sql as pg_sql

    ids = _traces(project, 5000)
    wanted = ids[:2000]
    query = OtlpTrace.objects.filter(project=project, trace_id__any_of=wanted).values_list("pk")
    sql, params = query.query.get_compiler(connection=connection).as_sql()
    assert "= ANY(%s)" in sql and len(params) == 2 and list(params[1]) == wanted
    # The plan PostgreSQL makes for the prepared statement without its values (what it may use
    # for every execution once a connection has run it five times), with the table's statistics
    # as a burst of exports leaves them (never analysed): the unique (project, trace id) index.
    # The same with `trace_id__in` read the project's own index and compared each of its traces
    # with the 2,000 ids (a Filter of the bitmap scan), which made a retried export take minutes.
    numbered = sql.replace("%s", "$1", 1).replace("%s", "$2", 1)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"PREPARE any_of_plan (bigint, varchar[]) AS {numbered}")
        cursor.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        # (EXECUTE takes no bound values: the arguments are written into it as literals.)
        arguments = pg_sql.SQL("EXPLAIN EXECUTE any_of_plan({}, {})").format(
            pg_sql.Literal(project.pk), pg_sql.Literal(wanted)
        )
        cursor.execute(arguments.as_string(connection.connection))
        plan = "\n".join(row[0] for row in cursor.fetchall())
        cursor.execute("DEALLOCATE any_of_plan")
    assert "otlptrace_project_trace_uniq" in plan, plan
    assert len(OtlpTrace.objects.filter(project=project, trace_id__any_of=wanted)) == 2000
