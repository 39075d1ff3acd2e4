"""The conversations' values of :class:`~agent_sync.stores.MemoryRunStore` (the rules are
:mod:`._value_rules`'s): a dict per conversation under the store's one lock, so a
compare-and-set is a look and a write with nothing in between."""

from __future__ import annotations

import threading

from ._rules import storable_id
from ._value_rules import check_key, checked_write

__all__ = ["MemoryValues"]


class MemoryValues:
    """The values half of the memory store (which inherits it), on its lock."""

    _lock: threading.Lock
    _values: dict[str, dict[str, str]]  # conversation id -> key -> value

    def get_value(self, conversation_id: str, key: str) -> str | None:
        key = check_key(key)
        if not storable_id(conversation_id):
            return None
        with self._lock:
            return self._values.get(conversation_id, {}).get(key)

    def set_value(
        self, conversation_id: str, key: str, value: str | None, *, expected: str | None
    ) -> bool:
        conversation_id, key, value, expected = checked_write(conversation_id, key, value, expected)
        with self._lock:
            values = self._values.get(conversation_id, {})
            if values.get(key) != expected:
                return False
            if value is not None:
                self._values.setdefault(conversation_id, values)[key] = value
            elif expected is not None:
                del values[key]
                if not values:
                    del self._values[conversation_id]
            return True
