"""Hostile requests against the chat routes, under Flask and Django (real werkzeug servers):
each rule of the edge (DESIGN.md section 7) over every route it covers.

- Every ``POST`` must be declared ``application/json``, else 415 and nothing changes: a
  cross-site form (no fields, any of the three types a form can send) cannot stop, answer,
  inject into or start a run. An empty Stop body sent as JSON is fine.
- A non-finite number (``NaN``, ``Infinity``, ``1e400``) anywhere in a body: 400.
- A body nested deeper than the limit (or deeper than the parser's recursion): 400.
- A ``Last-Event-ID`` (or Django's ``CONTENT_LENGTH``) with a non-ASCII digit: 400.

Ids, the 422 and stored histories: test_hostile_ids.py.

Each test starts a run blocked in a tool (``hold``) and one paused for a decision
(``ask``), sends the hostile request, and checks nothing moved: the blocked run then ends
normally (not cancelled, nothing injected) and the paused one is still paused.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from ._chat_sites import FRAMEWORKS
from ._client import frames_until
from ._hostile_site import Site, site_on


@pytest.fixture(params=FRAMEWORKS)
def site(request: pytest.FixtureRequest) -> Iterator[Site]:
    with site_on(request.param) as served:
        yield served


# Every POST route, with a body it would act on if it were accepted.


POSTS: dict[str, tuple[str, dict[str, Any]]] = {
    "chat": ("/chat", {"conversation_id": "fresh", "message": "hi"}),
    "ai-sdk chat": (
        "/chat",
        {"id": "fresh", "messages": [{"role": "user", "parts": [{"type": "text", "text": "x"}]}]},
    ),
    "run stop": ("/runs/RUN/stop", {}),
    "run decisions": ("/runs/PAUSED/decisions", {"decisions": {"APR": True}}),
    "run inject": ("/runs/RUN/inject", {"content": "psst"}),
    "cancel": ("/cancel", {"conversation_id": "hold"}),
    "ai-sdk stop": ("/chat/hold/stop", {}),
}

# What a cross-site <form> can send (no preflight), and no type at all.
FORM_TYPES = [
    None,
    "text/plain",
    "application/x-www-form-urlencoded",
    "multipart/form-data; boundary=x",
]


@pytest.mark.parametrize("route", list(POSTS))
def test_a_post_not_declared_json_gets_415_and_changes_nothing(site: Site, route: str) -> None:
    path, body = POSTS[route]
    before = site.moved()
    for content_type in FORM_TYPES:
        for sent in (b"", site.fill(json.dumps(body)).encode()):
            status, answer = site.request("POST", path, sent, content_type)
            assert status == 415, (content_type, sent, answer)
            assert answer["error"] == "unsupported_media_type"
            assert "application/json" in answer["message"]
    assert site.moved() == before
    site.finish()


@pytest.mark.parametrize("path", ["/runs/RUN/stop", "/chat/hold/stop"])
@pytest.mark.parametrize("body", [b"", b"{}"], ids=["empty", "{}"])
def test_an_empty_stop_sent_as_json_stops(site: Site, path: str, body: bytes) -> None:
    status, answer = site.request("POST", path, body, "application/json; charset=utf-8")
    assert status == 200 and answer["cancelled"] is True, answer
    # The held tool gives up once the cancel reaches its run (the store's watcher delivers
    # it, on its own thread): opening the gate here raced that delivery under load.
    assert frames_until(site.streams[0], "done")[-1].data["stop_reason"] == "cancelled"


NON_FINITE = ["NaN", "Infinity", "-Infinity", "1e400", "-1e999"]


@pytest.mark.parametrize("route", list(POSTS))
def test_a_non_finite_number_in_any_body_gets_400(site: Site, route: str) -> None:
    path, body = POSTS[route]
    before = site.moved()
    for literal in NON_FINITE:
        sent = site.fill(json.dumps({**body, "n": 0})).replace('"n": 0', f'"n": {literal}')
        status, answer = site.request("POST", path, sent.encode())
        assert status == 400 and answer["error"] == "bad_request", (literal, answer)
        assert "not finite" in answer["message"]
    assert site.moved() == before
    site.finish()


@pytest.mark.parametrize("literal", NON_FINITE)
def test_a_decision_with_a_non_finite_input_runs_nothing(site: Site, literal: str) -> None:
    for decision in (
        '{"approved": true, "input": {"path": %s}}',
        '{"approved": true, "data": {"score": %s}}',
        '{"approved": false, "data": {"score": [1, %s]}}',
    ):
        sent = '{"decisions": {"APR": %s}}' % (decision % literal)  # noqa: UP031
        status, answer = site.request("POST", "/runs/PAUSED/decisions", sent.encode())
        assert status == 400, answer
    site.finish()


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize("route", list(POSTS))
def test_a_deeply_nested_body_gets_400(site: Site, route: str) -> None:
    path, body = POSTS[route]
    before = site.moved()
    for depth in (101, 5_000, 400_000):  # over the limit; past the parser's recursion
        sent = site.fill(json.dumps({**body, "n": 0})).replace('"n": 0', f'"n": {_nested(depth)}')
        status, answer = site.request("POST", path, sent.encode())
        assert status == 400 and "nested deeper" in answer["message"], (depth, answer)
    assert site.moved() == before
    site.finish()


def test_nesting_up_to_the_limit_is_fine(site: Site) -> None:
    status, answer = site.request("POST", "/runs/RUN/inject", {"content": "x", "n": [[[]]]})
    assert status == 202, answer
    site.gate.opened.set()
    frames_until(site.streams[0], "done")


def test_a_last_event_id_ending_in_a_superscript_digit_gets_400(site: Site) -> None:
    # "²".isdigit() is true and int("²") fails: the header (latin-1) and the query
    status, answer = site.request(
        "GET", "/runs/RUN/events", content_type=None, headers={"Last-Event-ID": "RUN:1\u00b2"}
    )
    assert status == 400 and "Last-Event-ID" in answer["message"], answer
    for digit in ("%C2%B2", "%D9%A3", "%EF%BC%91"):  # superscript 2, Arabic-Indic 3, fullwidth 1
        path = f"/runs/RUN/events?last_event_id=RUN%3A1{digit}"
        status, answer = site.request("GET", path, content_type=None)
        assert status == 400 and "Last-Event-ID" in answer["message"], (digit, answer)
    site.finish()


# Conversation ids that must not reach make_agent or the store: whitespace (Agent refuses
# it: that UsageError was a 500), key separators and patterns of the stores.


def test_a_bad_content_length_is_not_a_500(site: Site) -> None:
    status, answer = site.request(
        "POST", "/runs/RUN/stop", None, headers={"Content-Length": "\u00b2"}
    )
    assert status in (200, 400), answer
