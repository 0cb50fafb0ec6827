"""`field__any_of=values`: the rows whose text or whole-number field is one of `values`, as `__in` gives them,
asked of PostgreSQL as `field = ANY(%s)` with the values bound as one array.

Why not `__in`: a statement a connection has run five times is prepared (replay_site/settings.py,
`postgres_options`), and PostgreSQL may then use one plan for any values. Planned without its
values, an `IN` of 2,000 parameters looks as if it kept most rows, so the plan of
`project_id = $1 AND trace_id IN ($2, ..., $2001)` read the project's every trace through the
project's index and compared each with the 2,000 ids: a retried export of 66,000 traces took 121 s
to find them again instead of about 5. One array parameter is planned as a short list, so the
unique (project, trace id) index serves the look-up whatever the list holds. Used wherever a
list is looked up beside a column that has an index of its own (a project, a session): look-ups
by primary key, or by a session's seqs (every index of events starts with the session), do not
need it.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import EmptyResultSet
from django.db.models import CharField, IntegerField
from django.db.models.lookups import In


@CharField.register_lookup
@IntegerField.register_lookup
class AnyOf(In):
    lookup_name = "any_of"

    def as_postgresql(self, compiler: Any, connection: Any) -> tuple[str, tuple[Any, ...]]:
        if not self.rhs_is_direct_value():  # a subquery: as `__in` writes it
            return self.as_sql(compiler, connection)
        values = [value for value in self.rhs if value is not None]  # as `__in`: None matches nothing
        if not values:
            raise EmptyResultSet
        lhs, lhs_params = self.process_lhs(compiler, connection)
        return f"{lhs} = ANY(%s)", (*lhs_params, values)
