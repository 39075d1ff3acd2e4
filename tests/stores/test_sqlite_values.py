"""SQLiteRunStore's conversation values on a file written by the previous version: the
values table is added when the store opens it, with the summaries that version kept in its
own ``context_summaries`` table (the contract itself runs in test_sqlite.py)."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

from agent_sync.stores import SQLiteRunStore
from agent_sync.stores._sqlite_schema import SCHEMA
from agent_sync.stores._value_rules import SUMMARY_KEY

# What the previous version's agent_sync.context created in the store's file.
_OLD_SUMMARIES = """
CREATE TABLE IF NOT EXISTS context_summaries (
    conversation_id TEXT PRIMARY KEY,
    end_position INTEGER NOT NULL,
    summary TEXT NOT NULL
)
"""


def previous_version_file(path: Path, summaries: dict[str, tuple[int, str]]) -> None:
    """A store file as the previous version left it: its tables (the same ``SCHEMA``, no
    values table) and the summaries table of its ``agent_sync.context``, with rows."""
    with closing(sqlite3.connect(path)) as db:
        db.executescript(SCHEMA)
        db.execute(_OLD_SUMMARIES)
        db.executemany(
            "INSERT INTO context_summaries VALUES (?, ?, ?)",
            [(cid, end, text) for cid, (end, text) in summaries.items()],
        )
        db.commit()


def _tables(path: Path) -> set[str]:
    with closing(sqlite3.connect(path)) as db:
        return {row[0] for row in db.execute("SELECT name FROM sqlite_master")}


def test_a_file_of_the_previous_version_keeps_its_summaries(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    summaries = {"c1": (4, '{"end": 4, "prefix": "ab", "text": "é 😀"}'), "c:2": (2, "{}")}
    previous_version_file(path, summaries)
    assert "conversation_values" not in _tables(path)

    store = SQLiteRunStore(path)
    for conversation_id, (_, text) in summaries.items():
        assert store.get_value(conversation_id, SUMMARY_KEY) == text
    assert store.get_value("c1", "other") is None
    # the old table stays for a process of the previous version still on the file
    assert {"conversation_values", "context_summaries"} <= _tables(path)


def test_summaries_are_copied_once_not_over_newer_values(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    previous_version_file(path, {"c1": (4, "old")})
    store = SQLiteRunStore(path)
    assert store.set_value("c1", SUMMARY_KEY, "new", expected="old")
    with closing(sqlite3.connect(path)) as db:  # a process of the previous version writes
        db.execute("UPDATE context_summaries SET summary = 'older' WHERE conversation_id = 'c1'")
        db.commit()
    again = SQLiteRunStore(path)  # opening the file again copies nothing over it
    assert again.get_value("c1", SUMMARY_KEY) == "new"


def test_a_new_file_has_the_values_table_and_no_summaries_table(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    SQLiteRunStore(path).set_value("c1", "k", "v", expected=None)
    assert "conversation_values" in _tables(path)
    assert "context_summaries" not in _tables(path)
    assert SQLiteRunStore(path).get_value("c1", "k") == "v"
