"""The helpers every provider shares: retry-after parsing, the cache-rejection memory."""

from __future__ import annotations

import email.utils
import logging
import threading
import time

import pytest
import requests.structures

from agent_sync.models._wire import CacheRejection, retry_after_seconds, shorten
from tests.fixtures.bounds import HANG_BOUND


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after": "7"}, 7.0),
        ({"retry-after": "1.5"}, 1.5),
        ({"retry-after-ms": "250", "retry-after": "9"}, 0.25),  # ms wins: more precise
        ({"retry-after": "-3"}, 0.0),
        ({"retry-after": "soon"}, None),
        ({}, None),
        (None, None),
    ],
)
def test_delta_seconds_and_milliseconds(headers: object, expected: float | None) -> None:
    assert retry_after_seconds(headers) == expected


def test_http_date_becomes_seconds_from_now() -> None:
    when = email.utils.formatdate(time.time() + 30, usegmt=True)
    seconds = retry_after_seconds({"retry-after": when})
    assert seconds is not None and 25 <= seconds <= 31


def test_case_insensitive_headers_work() -> None:
    headers = requests.structures.CaseInsensitiveDict({"Retry-After": "4"})
    assert retry_after_seconds(headers) == 4.0


def test_shorten_cuts_long_text() -> None:
    assert shorten("x" * 500, 10) == "x" * 10 + "..."
    assert shorten("short") == "short"


@pytest.mark.timeout(30)
def test_cache_rejection_is_remembered_and_logged_once_across_threads(
    caplog: pytest.LogCaptureFixture,
) -> None:
    logger = logging.getLogger("agent_sync.models.test_provider")
    caplog.set_level(logging.DEBUG, logger=logger.name)
    rejection = CacheRejection(logger)
    assert not rejection.rejected
    threads_n = 8
    start = threading.Barrier(threads_n)

    def reject(number: int) -> None:
        start.wait(HANG_BOUND)
        rejection.remember("caller=<%d> | server rejected the cache fields", number)

    workers = [
        threading.Thread(target=reject, args=(i,), name=f"test-reject-{i}")
        for i in range(threads_n)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(HANG_BOUND)
    assert not any(worker.is_alive() for worker in workers)
    assert rejection.rejected
    records = [r for r in caplog.records if "rejected the cache fields" in r.getMessage()]
    assert len(records) == 1 and records[0].levelno == logging.DEBUG
    assert records[0].name == logger.name  # on the provider's logger, where users filter
