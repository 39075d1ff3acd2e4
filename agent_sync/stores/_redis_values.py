"""The conversations' values of :class:`~agent_sync.stores.RedisRunStore` (the rules are
:mod:`._value_rules`'s): a hash per conversation, ``{prefix}conv:{id}:values`` (one field
per key), in the conversation's shard on a Redis Cluster. A read and a compare-and-set are
each one script (:mod:`._redis_value_scripts`), one round trip."""

from __future__ import annotations

from ._redis_client import RedisScripts, text
from ._redis_keys import KeyLayout
from ._rules import storable_id
from ._value_rules import check_key, checked_write

__all__ = ["RedisValues"]


class RedisValues:
    """The values half of the Redis store (which inherits it), on its scripts."""

    _scripts: RedisScripts
    _keys: KeyLayout

    def get_value(self, conversation_id: str, key: str) -> str | None:
        key = check_key(key)
        if not storable_id(conversation_id):
            return None
        prefix = self._keys.conversation(conversation_id)
        found = self._scripts.run("get_value", prefix, conversation_id, key)
        return None if found is None else text(found)

    def set_value(
        self, conversation_id: str, key: str, value: str | None, *, expected: str | None
    ) -> bool:
        conversation_id, key, value, expected = checked_write(conversation_id, key, value, expected)
        prefix = self._keys.conversation(conversation_id)
        done = self._scripts.run(
            "set_value",
            prefix,
            conversation_id,
            key,
            "" if expected is None else expected,
            "0" if expected is None else "1",
            "" if value is None else value,
            "0" if value is None else "1",
        )
        return int(done) == 1
