"""The contract of a conversation's values (``get_value``/``set_value``): a missing value
reads ``None``, every write is a compare-and-set on the value (writers racing from threads
and processes lose no update), any text up to the size limit comes back as it went in, and
a bad key, value or conversation id is a ``UsageError`` that writes nothing."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from ...errors import UsageError
from ...stores._protocol import RunStore
from ...stores._value_rules import MAX_KEY_CHARS, MAX_VALUE_BYTES
from ._base import OWNER, ContractBase, _answered, make_state

__all__ = ["INCREMENTS", "ValuesContract", "increment"]

INCREMENTS = 15
"""How many increments each racing writer makes."""


def increment(store: RunStore, conversation_id: str, key: str, times: int) -> int:
    """Add 1 to the counter under ``key``, ``times`` times, each by compare-and-set (read,
    then write if unchanged; on a conflict read again). Returns the conflicts met."""
    conflicts = 0
    for _ in range(times):
        while True:
            current = store.get_value(conversation_id, key)
            after = str(int(current or "0") + 1)
            if store.set_value(conversation_id, key, after, expected=current):
                break
            conflicts += 1
    return conflicts


def _increment_in_child(factory: Callable[[], RunStore], ready: Any, go: Any, out: Any) -> None:
    try:
        store = factory()
        ready.put(True)
        go.wait(30)
        out.put(increment(store, "shared", "counter", INCREMENTS))
    except BaseException as exc:  # reported to the parent
        out.put(f"error: {type(exc).__name__}: {exc}")


_TEXTS = (
    "",
    "plain",
    "línea 1\nline 2\r\n\ttab",
    "emoji 😀👩‍👩‍👧 and combining e\u0301",
    "nul\x00inside",
    '{"json": [1, "two", null]}',
    "\U0010ffff",
)


class ValuesContract(ContractBase):
    """A conversation's values: compare-and-set, any text, bad input refused."""

    def test_a_missing_value_is_none(self, store: RunStore) -> None:
        assert store.get_value("c1", "k") is None  # an unknown conversation
        state = make_state()
        store.begin("c1", state, owner=OWNER, lease_s=30, expected_length=0)
        store.commit(_answered(state), owner=OWNER, version=1)
        assert store.get_value("c1", "k") is None  # a conversation with no values
        for bad_id in (None, "", 7, "\ud800"):
            assert store.get_value(bad_id, "k") is None  # type: ignore[arg-type]

    def test_set_with_expected_none_writes_only_an_absent_value(self, store: RunStore) -> None:
        assert store.set_value("c1", "k", "first", expected=None) is True
        assert store.set_value("c1", "k", "second", expected=None) is False
        assert store.get_value("c1", "k") == "first"
        assert store.get_value("c2", "k") is None  # another conversation's
        assert store.get_value("c1", "other") is None  # another key's

    def test_every_write_is_a_compare_and_set(self, store: RunStore) -> None:
        store.set_value("c1", "k", "v1", expected=None)
        assert store.set_value("c1", "k", "v2", expected="stale") is False
        assert store.set_value("c1", "k", "v2", expected="v1\x00") is False  # all of it counts
        assert store.set_value("c1", "k", "v2", expected="") is False  # empty is not absent
        assert store.get_value("c1", "k") == "v1"
        assert store.set_value("c1", "k", "v2", expected="v1") is True
        assert store.set_value("c1", "k", "v3", expected="v1") is False  # v1 is gone
        assert store.get_value("c1", "k") == "v2"
        assert store.set_value("c1", "absent", "x", expected="v2") is False
        assert store.get_value("c1", "absent") is None
        # None as the value deletes, by compare-and-set too
        assert store.set_value("c1", "k", None, expected="v1") is False
        assert store.get_value("c1", "k") == "v2"
        assert store.set_value("c1", "k", None, expected="v2") is True
        assert store.get_value("c1", "k") is None
        assert store.set_value("c1", "k", None, expected=None) is True  # absent stays absent
        assert store.set_value("c1", "k", "again", expected=None) is True  # and can come back
        assert store.get_value("c1", "k") == "again"

    def test_values_outlive_runs_prune_and_a_replaced_log(self, store: RunStore) -> None:
        store.set_value("c1", "k", "kept", expected=None)
        state = make_state()
        store.begin("c1", state, owner=OWNER, lease_s=30, expected_length=0)
        assert store.get_value("c1", "k") == "kept"  # a running run changes nothing
        store.commit(_answered(state), owner=OWNER, version=1)
        assert store.prune(older_than=0) == 1
        store.replace_log("c1", [{"role": "user", "content": [{"text": "new"}]}])
        assert store.get_value("c1", "k") == "kept"
        factory = self.process_factory()
        if factory is not None:  # another store object on the same data sees it
            assert factory().get_value("c1", "k") == "kept"

    def test_names_of_other_keys_and_conversations_never_meet(self, store: RunStore) -> None:
        names = ["a", "a:values", "a:log", "{a}", "a}", "values", "é", "😀", " a", "a "]
        for conversation_id in names:
            for key in names:
                store.set_value(conversation_id, key, f"{conversation_id}|{key}", expected=None)
        for conversation_id in names:
            for key in names:
                assert store.get_value(conversation_id, key) == f"{conversation_id}|{key}"
        assert store.load("a:values").messages == ()  # values are not a log

    def test_any_text_comes_back_as_it_went_in(self, store: RunStore) -> None:
        for n, text in enumerate(_TEXTS):
            key = f"k{n}"
            assert store.set_value("c1", key, text, expected=None) is True
            assert store.get_value("c1", key) == text
            assert store.set_value("c1", key, text + "!", expected=text) is True
        unicode_key = "clé/😀:{x}" + "k" * (MAX_KEY_CHARS - 9)
        assert len(unicode_key) == MAX_KEY_CHARS
        assert store.set_value("c1", unicode_key, "v", expected=None) is True
        assert store.get_value("c1", unicode_key) == "v"

    def test_a_value_of_the_largest_size_comes_back_whole(self, store: RunStore) -> None:
        large = ("é" * (MAX_VALUE_BYTES // 2 - 1)) + "xy"  # 2-byte characters, then two
        assert len(large.encode("utf-8")) == MAX_VALUE_BYTES
        assert store.set_value("c1", "big", large, expected=None) is True
        assert store.get_value("c1", "big") == large
        assert store.set_value("c1", "big", "small", expected=large) is True
        with pytest.raises(UsageError, match="at most"):
            store.set_value("c1", "big", large + "z", expected="small")
        assert store.get_value("c1", "big") == "small"  # nothing written

    def test_bad_keys_values_and_ids_are_refused_and_write_nothing(self, store: RunStore) -> None:
        store.set_value("c1", "k", "v", expected=None)
        for bad_key in ("", None, 7, b"k", "k" * (MAX_KEY_CHARS + 1), "k\ud800"):
            with pytest.raises(UsageError, match="key"):
                store.get_value("c1", bad_key)  # type: ignore[arg-type]
            with pytest.raises(UsageError, match="key"):
                store.set_value("c1", bad_key, "x", expected=None)  # type: ignore[arg-type]
        for bad_value in (b"x", 7, "x\ud800"):
            with pytest.raises(UsageError, match="value"):
                store.set_value("c1", "k", bad_value, expected="v")  # type: ignore[arg-type]
            with pytest.raises(UsageError, match="value"):
                store.set_value("c1", "k", "x", expected=bad_value)  # type: ignore[arg-type]
        for bad_id in (None, "", 7, "c\ud800"):
            with pytest.raises(UsageError, match="conversation id"):
                store.set_value(bad_id, "k", "x", expected=None)  # type: ignore[arg-type]
        assert store.get_value("c1", "k") == "v"
        assert store.load("c1").messages == ()

    def test_writers_racing_from_threads_lose_no_update(self, store: RunStore) -> None:
        barrier = threading.Barrier(4)
        errors: list[BaseException] = []

        def race() -> None:
            try:
                barrier.wait(10)
                increment(store, "shared", "counter", INCREMENTS)
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=race) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert errors == [] and not any(thread.is_alive() for thread in threads)
        assert store.get_value("shared", "counter") == str(4 * INCREMENTS)

    @pytest.mark.timeout(120)
    def test_writers_racing_from_processes_lose_no_update(self, store: RunStore) -> None:
        factory = self.process_factory()
        if factory is None:
            pytest.skip("this store lives in one process")
        context = self.process_context()
        go = context.Event()
        ready, out = context.Queue(), context.Queue()
        children = [
            context.Process(target=_increment_in_child, args=(factory, ready, go, out))
            for _ in range(3)
        ]
        for child in children:
            child.start()
        for _ in children:
            ready.get(timeout=60)  # every child has its store: the race is real
        go.set()
        conflicts = [out.get(timeout=60) for _ in children]
        for child in children:
            child.join(30)
        assert all(isinstance(n, int) for n in conflicts), conflicts
        assert [child.exitcode for child in children] == [0] * len(children)
        assert store.get_value("shared", "counter") == str(3 * INCREMENTS)
