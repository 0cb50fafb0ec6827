"""One object by a query fixed in advance, its SQL built once per process instead of by the
ORM's compiler on every call.

For the lookups every request makes (the access check's session with its project and the
caller's role, an API key with its user): Django compiled the same `select_related(...).get()`
again each time, ~0.5-1 ms of CPU, as much as SQLite took to answer it (bench/load_bench.py,
docs/benchmarks.md, issue 20). The objects come out as the ORM makes them: `Model.from_db` with
every concrete field, each value through the converters the ORM would apply, the related
objects cached as `select_related` caches them, the annotations set as attributes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import connection
from django.db.models import Model

from .bounds import MAX_ID


@dataclass(frozen=True)
class _Part:
    model: type[Model]
    start: int
    stop: int
    attnames: list[str]
    converters: list[tuple[int, list[Any], Any]]  # (index in the row, converters, the column expression)
    pk_index: int  # where its primary key is among its values
    field: Any = None  # for a related object: the foreign key it is cached under


@dataclass(frozen=True)
class _Plan:
    sql: str
    parts: list[_Part]
    annotations: list[tuple[int, str]]


class FixedLookup:
    """`SELECT` one `model` row (but its `deferred` fields, loaded when first read, as `defer`
    leaves them), its `related` foreign keys' rows and `annotations` (name -> SQL, each a scalar
    subquery; `{table}` in it is the model's quoted table) `WHERE` `where` (SQL with `%s`
    placeholders and `{table}`). `get` takes the annotations' parameters, then the WHERE's."""

    def __init__(self, model: type[Model], *, where: str, related: tuple[str, ...] = (),
                 annotations: dict[str, str] | None = None, deferred: tuple[str, ...] = ()) -> None:  # fmt: skip
        self.model, self.where, self.related, self.deferred = model, where, related, frozenset(deferred)
        self.annotations = annotations or {}
        self._plans: dict[tuple[str, str], _Plan] = {}

    def get(self, params: list[Any]) -> Model | None:
        """The object, or None when no row matches. An integer parameter no 64-bit column holds
        matches nothing, as the ORM's lookups answer it (no driver error)."""
        if any(type(p) is int and not -MAX_ID - 1 <= p <= MAX_ID for p in params):
            return None
        plan = self._plan()
        with connection.cursor() as cursor:
            cursor.execute(plan.sql, params)
            row = cursor.fetchone()
        if row is None:
            return None
        db = connection.alias
        row = list(row)
        found = None
        for part in plan.parts:
            for index, converters, expression in part.converters:
                value = row[index]
                for convert in converters:
                    value = convert(value, expression, connection)
                row[index] = value
            values = row[part.start : part.stop]
            if part.field is None:
                found = part.model.from_db(db, part.attnames, values)
            else:
                # As select_related: a null foreign key caches None.
                related = None if values[part.pk_index] is None else part.model.from_db(db, part.attnames, values)
                part.field.set_cached_value(found, related)
        for index, name in plan.annotations:
            setattr(found, name, row[index])
        return found

    def _plan(self) -> _Plan:
        key = (connection.alias, connection.vendor)
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = self._build()
        return plan

    def _build(self) -> _Plan:
        quote = connection.ops.quote_name
        meta = self.model._meta
        table = quote(meta.db_table)
        columns: list[str] = []
        parts: list[_Part] = []
        joins: list[str] = []

        def select(model: type[Model], alias: str, field: Any = None) -> None:
            # Every concrete field in their order (from_db takes them positionally, and marks
            # those left out deferred).
            fields = [f for f in model._meta.concrete_fields if field is not None or f.name not in self.deferred]
            start = len(columns)
            converters = []
            for i, f in enumerate(fields):
                columns.append(f"{alias}.{quote(f.column)}")
                expression = f.get_col(alias)
                found = connection.ops.get_db_converters(expression) + expression.get_db_converters(connection)
                if found:
                    converters.append((start + i, found, expression))
            pk_index = next(i for i, f in enumerate(fields) if f.primary_key)
            parts.append(_Part(model=model, start=start, stop=len(columns), attnames=[f.attname for f in fields],
                               converters=converters, pk_index=pk_index, field=field))  # fmt: skip

        select(self.model, table)
        for n, name in enumerate(self.related):
            field = meta.get_field(name)
            related = field.related_model
            alias = f"related{n}"
            join = "LEFT OUTER JOIN" if field.null else "INNER JOIN"
            joins.append(f"{join} {quote(related._meta.db_table)} {alias} "
                         f"ON {alias}.{quote(field.target_field.column)} = {table}.{quote(field.column)}")  # fmt: skip
            select(related, alias, field)
        annotations = []
        for name, sql in self.annotations.items():
            annotations.append((len(columns), name))
            columns.append(f"({sql.format(table=table)})")
        sql = f"SELECT {', '.join(columns)} FROM {table} {' '.join(joins)} WHERE {self.where.format(table=table)}"
        return _Plan(sql=sql, parts=parts, annotations=annotations)
