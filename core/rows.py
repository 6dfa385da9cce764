"""Model instances from hand-written SQL, each value converted as the ORM converts its own.

The few statements every address write runs (`config_service.statements`) are written by hand:
building one with the ORM costs about a millisecond of the web's CPU, running it about a tenth
of that, and on a busy machine each millisecond of CPU is several of a request's latency
(docs/scale.md, "The create's statements by hand"). The rows come back as the ORM's own
instances, so callers cannot tell them apart from a queryset's. `fetch_together` sends
several statements in one round trip.
"""
from contextlib import ExitStack

import psycopg
from django.db import connection


class Columns:
    """A model's concrete columns under a table alias: `sql` for a SELECT list, `take` to turn
    that slice of a row back into an instance."""

    def __init__(self, model, alias: str):
        self.model = model
        self.fields = model._meta.concrete_fields
        quote = connection.ops.quote_name
        self.sql = ", ".join(f"{alias}.{quote(f.column)}" for f in self.fields)
        self.names = [f.attname for f in self.fields]
        self._pk = self.names.index(model._meta.pk.attname)
        # Per column, the (converter, expression) pairs the ORM would apply: the backend's and
        # the field's own (a JSONField's text -> objects, say).
        self.converters = []
        for field in self.fields:
            col = field.get_col(model._meta.db_table)
            self.converters.append([(c, col) for c in connection.ops.get_db_converters(col)
                                    + col.get_db_converters(connection)])

    def take(self, row, start: int = 0):
        """(the instance from its slice of the row, from `start`, and the index after it); None for an
        outer join's all-NULL slice (no primary key)."""
        end = start + len(self.fields)
        values = list(row[start:end])
        if values[self._pk] is None:
            return None, end
        for i, pairs in enumerate(self.converters):
            for convert, col in pairs:
                values[i] = convert(values[i], col, connection)
        return self.model.from_db(connection.alias, self.names, values), end


def table(model) -> str:
    """The model's table, quoted for a statement."""
    return connection.ops.quote_name(model._meta.db_table)


def fetch(sql: str, params) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def fetch_together(statements: list[tuple[str, object]]) -> list[list[tuple]]:
    """Each (sql, params)'s rows, the statements sent at once in psycopg's pipeline mode: one
    round trip for all instead of one each. Each is still a statement of its own, run in order
    (a statement after a lock sees what the lock's previous holder committed). Inside a
    transaction, as every caller's; where libpq has no pipeline mode, one after the other."""
    if not psycopg.Pipeline.is_supported():
        return [fetch(sql, params) for sql, params in statements]
    connection.ensure_connection()
    # A pipeline's errors surface as it ends, past the cursor's own conversion into
    # django.db's errors: converted here as the cursor would.
    with connection.wrap_database_errors, ExitStack() as stack:
        cursors = [stack.enter_context(connection.cursor()) for _ in statements]
        # The results are read once the pipeline has ended: its end is the one wait for
        # them all (reading one inside it would wait for it, then again at the end).
        with connection.connection.pipeline():
            for cursor, (sql, params) in zip(cursors, statements, strict=True):
                cursor.execute(sql, params)
        return [cursor.fetchall() for cursor in cursors]
