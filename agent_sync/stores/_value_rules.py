"""The rules of a conversation's values (:meth:`~agent_sync.stores.RunStore.get_value` and
:meth:`~agent_sync.stores.RunStore.set_value`), checked at the edge by every store of the
package, so a bad key or value is the caller's :class:`~agent_sync.errors.UsageError` and
never an error of the storage (nothing is written).

* A **key** is a non-empty ``str`` of at most :data:`MAX_KEY_CHARS` characters that UTF-8
  can encode. Keys starting with ``agent_sync.`` are the package's (:data:`SUMMARY_KEY`).
* A **value** is a ``str`` that UTF-8 can encode, of at most :data:`MAX_VALUE_BYTES` bytes
  once encoded (small data: a summary, a setting; not a file store).
* A conversation id that no store can hold (:func:`._rules.storable_id`) names no values:
  ``get_value`` answers ``None``, ``set_value`` raises ``UsageError`` (as ``begin`` does).
"""

from __future__ import annotations

from ..errors import UsageError
from ._rules import bad_conversation_id, storable_id

__all__ = [
    "MAX_KEY_CHARS",
    "MAX_VALUE_BYTES",
    "SUMMARY_KEY",
    "check_expected",
    "check_key",
    "check_value",
    "checked_write",
]

MAX_KEY_CHARS = 256
"""The longest key, in characters."""

MAX_VALUE_BYTES = 1_000_000
"""The largest value, in bytes of UTF-8."""

SUMMARY_KEY = "agent_sync.context.summary"
"""The key :mod:`agent_sync.context` keeps a conversation's latest summary under."""


def check_key(key: object) -> str:
    """``key`` if it is one (see the module rules).

    Raises:
        UsageError: It is not.
    """
    if not isinstance(key, str) or not key:
        raise UsageError(f"a value's key is a non-empty str, got {_shown(key)}")
    if len(key) > MAX_KEY_CHARS:
        raise UsageError(f"a value's key has at most {MAX_KEY_CHARS} characters, got {len(key)}")
    if not _encodable(key):
        raise UsageError("a value's key must be text UTF-8 can encode (it has a lone surrogate)")
    return key


def check_value(value: object, *, what: str = "value") -> str | None:
    """``value`` (``None``: absent) if it is one (see the module rules).

    Raises:
        UsageError: It is not.
    """
    if value is None:
        return None
    if not isinstance(value, str):
        raise UsageError(f"a {what} is a str or None, got {type(value).__name__}")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise UsageError(
            f"a {what} must be text UTF-8 can encode (it has a lone surrogate)"
        ) from None
    if size > MAX_VALUE_BYTES:
        raise UsageError(f"a {what} holds at most {MAX_VALUE_BYTES} bytes of UTF-8, got {size}")
    return value


def check_expected(expected: object) -> str | None:
    """``set_value``'s ``expected``: ``None`` (absent) or a ``str``. One that no value can
    equal (too large, unencodable) is refused too: the caller's mistake, not a conflict.

    Raises:
        UsageError: Anything else.
    """
    return check_value(expected, what="value expected")


def checked_write(
    conversation_id: object, key: object, value: object, expected: object
) -> tuple[str, str, str | None, str | None]:
    """``set_value``'s arguments, each checked (see the module rules).

    Raises:
        UsageError: One of them is bad; nothing is written.
    """
    if not storable_id(conversation_id):
        raise bad_conversation_id(conversation_id)
    assert isinstance(conversation_id, str)
    return conversation_id, check_key(key), check_value(value), check_expected(expected)


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _shown(key: object) -> str:
    return repr(key) if isinstance(key, str) else type(key).__name__
