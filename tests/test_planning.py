"""`planned_for_values()` (sessions_app/models/planning.py): inside it PostgreSQL plans each
statement for its own values, since none is prepared; outside, a statement run five times is."""

import pytest
from django.db import connection

from sessions_app.models import OtlpTrace
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
