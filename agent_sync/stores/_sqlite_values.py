"""The conversations' values of :class:`~agent_sync.stores.SQLiteRunStore` (the rules are
:mod:`._value_rules`'s), rows of the ``conversation_values`` table (:mod:`._sqlite_schema`).

A read is one autocommit statement; a compare-and-set is one statement in a ``BEGIN
IMMEDIATE`` transaction whose ``WHERE`` is the comparison (an ``INSERT`` that does nothing
on conflict, for "absent"), so two processes racing never both win: SQLite runs one write
at a time, and the loser's statement finds the winner's value and changes no row.
"""

from __future__ import annotations

from ._rules import storable_id
from ._sqlite_pool import Connections
from ._value_rules import check_key, checked_write

__all__ = ["SQLiteValues"]


class SQLiteValues:
    """The values half of the SQLite store (which inherits it), on its connections."""

    _connections: Connections

    def get_value(self, conversation_id: str, key: str) -> str | None:
        key = check_key(key)
        if not storable_id(conversation_id):
            return None
        rows = self._connections.rows(
            "SELECT value FROM conversation_values WHERE conversation_id = ? AND key = ?",
            (conversation_id, key),
        )
        return str(rows[0][0]) if rows else None

    def set_value(
        self, conversation_id: str, key: str, value: str | None, *, expected: str | None
    ) -> bool:
        conversation_id, key, value, expected = checked_write(conversation_id, key, value, expected)
        where = (conversation_id, key)
        with self._connections.transaction(write=True) as db:
            if expected is None and value is None:  # "absent stays absent": a look
                return not db.execute(
                    "SELECT 1 FROM conversation_values WHERE conversation_id = ? AND key = ?",
                    where,
                ).fetchone()
            if expected is None:
                cursor = db.execute(
                    "INSERT INTO conversation_values (conversation_id, key, value)"
                    " VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
                    (*where, value),
                )
            elif value is None:
                cursor = db.execute(
                    "DELETE FROM conversation_values"
                    " WHERE conversation_id = ? AND key = ? AND value = ?",
                    (*where, expected),
                )
            else:
                cursor = db.execute(
                    "UPDATE conversation_values SET value = ?"
                    " WHERE conversation_id = ? AND key = ? AND value = ?",
                    (value, *where, expected),
                )
            return cursor.rowcount == 1
