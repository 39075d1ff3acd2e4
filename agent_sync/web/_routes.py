"""The chat routes (start, stream, stop, approve, inject), written once for every framework.

:class:`ChatRoutes` answers :class:`._http.WebRequest` with :class:`._http.WebResponse`;
:func:`agent_sync.web.flask.chat_blueprint` and :func:`agent_sync.web.django.chat_urls`
only translate. Every route:

- checks what comes in first (:class:`._http.BadRequest`: 400, or 415 for a ``POST`` not
  declared ``application/json``; nothing touched); an id that cannot name a run is 404;
- asks ``authorize(request, conversation_id)`` (a run's conversation is looked up in the
  store; ``False``: 403, nothing touched; an unknown run: 404);
- acts through the store, so it works on any worker: a run started here is published to
  the run's event log (:mod:`._publish`) and every stream follows that log (:mod:`._follow`);
- answers anything that fails before the stream starts (``make_agent`` or ``authorize``
  raising included) in the same JSON shape: 500 ``{"error": "internal_error"}``, the
  exception's text in the server log only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final, Literal, NoReturn

from .._decisions import Decision, Deny
from .._prompt import content_blocks
from .._run_log._publish import REPLAY_TTL_S, Publisher
from .._run_log._records import is_terminal, parse_event_id
from .._run_state import RunSnapshot, json_ready
from ..errors import (
    StoreUnavailableError,
    UsageError,
)
from ..stores import RunEventLog, RunStore
from ..stores._event_log import EventLogStore
from ._decision_input import parse_decisions
from ._disconnect import no_delay, socket_from_environ
from ._encoders import NativeEncoder, StreamEncoder
from ._follow import Follower
from ._http import (
    BadRequest,
    Refusal,
    WebRequest,
    WebResponse,
    check_id,
    error_response,
    json_response,
    optional_str,
    parse_json_body,
    require_json,
    required_str,
    valid_id,
)
from ._run_control import RunControl
from ._sse import SSE_HEADERS
from ._stall import bound_send_buffer
from ._ui_request import UIChatRequest, is_ui_chat, parse_ui_chat
from ._ui_stream import UI_STREAM_HEADERS, UIStreamEncoder, shown_calls

if TYPE_CHECKING:
    from ..agent import Agent

__all__ = ["Authorize", "ChatRoutes", "MakeAgent", "OnDisconnect", "StartRun"]

logger = logging.getLogger(__name__)

MakeAgent = Callable[[str], "Agent"]
"""Builds the agent of a conversation id (on the routes' store)."""
Authorize = Callable[[Any, str], bool]
"""``(request, conversation_id) -> bool``: may this request touch this conversation?"""
OnDisconnect = Literal["continue", "cancel"]
StartRun = Callable[[str, Any, str], object]
"""``(conversation_id, message, run_id)``: has the run started in another process, under
that id (``chat_blueprint(..., start=...)``)."""

EVENT_STREAM: Final = "text/event-stream"
_MAX_TREE_LEVELS: Final = 1024
"""How many ``parent_run_id`` links the routes follow up to a tree's top-level run (a
bound on a store's data, far past any ``as_tool(max_depth=...)``)."""
_UI_HEADERS: Final = {k: v for k, v in UI_STREAM_HEADERS.items() if k != "Content-Type"}
MAX_LIVE_RUNS: Final = 64
"""The default ``max_live_runs``: live runs one worker (one routes object) holds at once.
Each holds two threads (and a tool's while it runs); the stores bound their descriptors per
process, not per run."""
WRITE_TIMEOUT_S: Final = 60.0
"""The default ``write_timeout``: seconds a stream waits for a client that does not read."""


class ChatRoutes:
    """The chat routes over one store. See :func:`agent_sync.web.flask.chat_blueprint`
    for the arguments."""

    def __init__(
        self,
        make_agent: MakeAgent,
        *,
        store: RunStore,
        on_disconnect: OnDisconnect = "continue",
        timeout: float | None = None,
        keepalive: float | None = 15.0,
        replay_ttl: float = REPLAY_TTL_S,
        authorize: Authorize | None = None,
        max_live_runs: int = MAX_LIVE_RUNS,
        write_timeout: float | None = WRITE_TIMEOUT_S,
        start: StartRun | None = None,
    ) -> None:
        if start is not None and not callable(start):
            raise UsageError("start must be a callable (conversation_id, message, run_id)")
        if not isinstance(store, RunStore):
            raise UsageError(f"store must be a RunStore, got {type(store).__name__}")
        if not isinstance(store, RunEventLog):
            raise UsageError(
                f"store must keep event logs (a RunEventLog), got {type(store).__name__}"
            )
        if on_disconnect not in ("continue", "cancel"):
            raise UsageError(f'on_disconnect must be "continue" or "cancel", got {on_disconnect!r}')
        if keepalive is not None and not keepalive > 0:
            raise UsageError("keepalive must be a positive number of seconds, or None")
        if not replay_ttl >= 0:
            raise UsageError("replay_ttl must be a number of seconds >= 0")
        if timeout is not None and not timeout > 0:
            raise UsageError("timeout must be a positive number of seconds, or None")
        if isinstance(max_live_runs, bool) or not isinstance(max_live_runs, int):
            raise UsageError("max_live_runs must be an int >= 1")
        if max_live_runs < 1:
            raise UsageError("max_live_runs must be an int >= 1")
        if write_timeout is not None and not write_timeout > 0:
            raise UsageError("write_timeout must be a positive number of seconds, or None")
        self._store: EventLogStore = store
        self._on_disconnect = on_disconnect
        self._keepalive = keepalive
        self._replay_ttl = float(replay_ttl)
        self._authorize = authorize
        self._write_timeout = write_timeout
        self._start = start
        self._runs = RunControl(
            make_agent,
            store,
            timeout=timeout,
            replay_ttl=self._replay_ttl,
            max_live_runs=max_live_runs,
        )

    # -- the routes --

    def chat(self, request: WebRequest) -> WebResponse:
        """``POST /chat``: start a run on a conversation and stream it (native SSE)."""
        return self._answer(self._chat, request)

    def run_events(self, request: WebRequest, run_id: str) -> WebResponse:
        """``GET /runs/<run_id>/events``: the frames after ``Last-Event-ID``, then live."""
        return self._answer(self._run_events, request, run_id)

    def run_stop(self, request: WebRequest, run_id: str) -> WebResponse:
        """``POST /runs/<run_id>/stop``: cancel the run wherever it runs."""
        return self._answer(self._run_stop, request, run_id)

    def run_decisions(self, request: WebRequest, run_id: str) -> WebResponse:
        """``POST /runs/<run_id>/decisions``: answer a paused run's approvals; it goes on
        here, published to the run's log (its streams, on any worker, carry on)."""
        return self._answer(self._run_decisions, request, run_id)

    def run_inject(self, request: WebRequest, run_id: str) -> WebResponse:
        """``POST /runs/<run_id>/inject``: queue input for the run's next user message."""
        return self._answer(self._run_inject, request, run_id)

    def cancel(self, request: WebRequest) -> WebResponse:
        """``POST /cancel``: the Stop button by conversation."""
        return self._answer(self._cancel, request)

    def history(self, request: WebRequest) -> WebResponse:
        """``GET /history?conversation_id=``: the conversation's messages."""
        return self._answer(self._history, request)

    def ui_resume(self, request: WebRequest, conversation_id: str) -> WebResponse:
        """``GET /chat/<conversation_id>/stream``: the AI SDK's ``resume``: the current
        run's UI stream from ``start``, then live; 204 if none runs."""
        return self._answer(self._ui_resume, request, conversation_id)

    def ui_stop(self, request: WebRequest, conversation_id: str) -> WebResponse:
        """``POST /chat/<conversation_id>/stop``: stop the conversation's run (the AI SDK's
        ``stop()`` only aborts its fetch)."""
        return self._answer(self._ui_stop, request, conversation_id)

    # -- native --

    def _chat(self, request: WebRequest) -> WebResponse:
        data = parse_json_body(request)
        if is_ui_chat(data):
            return self._ui_chat(request, parse_ui_chat(data))
        conversation_id = required_str(data, "conversation_id", is_id=True)
        message = data.get("message")
        if not isinstance(message, (str, list)) or not message:
            raise BadRequest("'message' must be a non-empty string or a list of content blocks")
        self._check_allowed(request, conversation_id)
        if self._start is not None:  # another process runs it: follow its log
            run_id = self._runs.hand_off(conversation_id, message, self._start)
            return self._follow(request, run_id, 0, NativeEncoder(run_id), None)
        publisher = self._runs.start(conversation_id, message)
        return self._follow(
            request, publisher.run_id, 0, NativeEncoder(publisher.run_id), publisher
        )

    def _follow(
        self,
        request: WebRequest,
        run_id: str,
        after: int,
        encoder: StreamEncoder,
        publisher: Publisher | None,
        headers: Mapping[str, str] = SSE_HEADERS,
    ) -> WebResponse:
        """Stream a run's log from ``after``; a client that leaves cancels it with
        ``on_disconnect="cancel"`` (this worker's run directly, another's through the
        store; never a paused run)."""
        on_gone: Callable[[], object] | None = None
        if self._on_disconnect == "cancel":
            if publisher is not None:
                on_gone = publisher.cancel
            else:
                on_gone = lambda: self._runs.cancel_if_running(run_id)  # noqa: E731
        return self._stream(request, run_id, after, encoder, on_gone, headers)

    def _run_events(self, request: WebRequest, run_id: str) -> WebResponse:
        _check_run_id(run_id)
        after = self._last_event_id(request, run_id)
        snapshot = self._run(request, run_id)
        if self._nothing_left(run_id, after, snapshot):
            return WebResponse(204)
        if snapshot.status == "running":
            self._runs.notice_lost_runs(following=snapshot.conversation_id)
        return self._follow(request, run_id, after, self._events_encoder(snapshot, after), None)

    def _events_encoder(self, snapshot: RunSnapshot, after: int) -> StreamEncoder:
        """The encoder of ``GET /runs/<run_id>/events`` from ``after`` (each protocol's
        routes name theirs: :mod:`._agui_routes`)."""
        return NativeEncoder(snapshot.run_id)

    def _run_stop(self, request: WebRequest, run_id: str) -> WebResponse:
        _check_run_id(run_id)
        reason = optional_str(parse_json_body(request, required=False), "reason")
        if self._store.get(run_id) is None:  # handed off (start=), its task not started yet?
            conversation_id = self._runs.handed_off(run_id)
            if conversation_id is not None:
                self._check_allowed(request, conversation_id)
                return json_response(200, {"cancelled": self._runs.stop_handed_off(run_id)})
        snapshot, top = self._run_in_tree(request, run_id)
        if top is not snapshot and snapshot.status == "paused":
            _refuse_sub_agent_run(top, "stop it through the run that started it")
        return json_response(200, {"cancelled": self._runs.stop(snapshot, reason)})

    def _run_decisions(self, request: WebRequest, run_id: str) -> WebResponse:
        _check_run_id(run_id)
        decisions = parse_decisions(parse_json_body(request))
        snapshot, top = self._run_in_tree(request, run_id)
        if top is not snapshot:  # a sub-agent's pause is its top-level run's to answer
            _refuse_sub_agent_run(top, "post the decisions to the run that started it")
        if snapshot.status != "paused":
            raise Refusal(409, "not_paused", f"the run is {snapshot.status}, not paused")
        self._runs.resume(snapshot, decisions)
        return json_response(202, {"run_id": run_id, "status": "running"})

    def _run_inject(self, request: WebRequest, run_id: str) -> WebResponse:
        _check_run_id(run_id)
        content = parse_json_body(request).get("content")
        try:
            blocks = content_blocks(content, what="injected input")
        except UsageError as exc:
            raise BadRequest(str(exc)) from None
        self._run(request, run_id)
        try:
            self._store.inject(run_id, blocks)
        except UsageError:
            raise Refusal(409, "not_running", "the run is not running") from None
        return json_response(202, {"run_id": run_id, "queued": True})

    def _cancel(self, request: WebRequest) -> WebResponse:
        data = parse_json_body(request)
        conversation_id = required_str(data, "conversation_id", is_id=True)
        reason = optional_str(data, "reason")
        self._check_allowed(request, conversation_id)
        return json_response(
            200, {"cancelled": self._runs.stop_conversation(conversation_id, reason)}
        )

    def _history(self, request: WebRequest) -> WebResponse:
        conversation_id = check_id(request.query.get("conversation_id", ""), "conversation_id")
        self._check_allowed(request, conversation_id)
        record = self._store.load(conversation_id)
        return json_response(200, {"messages": json_ready(list(record.messages))})

    # -- the AI SDK (UI message stream protocol v1) --

    def _ui_chat(self, request: WebRequest, asked: UIChatRequest) -> WebResponse:
        conversation_id = asked.conversation_id
        if asked.trigger == "regenerate-message":
            # The store's history is the truth; answering the same text again would add a
            # second turn, not replace the answer.
            raise BadRequest("regenerating a message is not supported: send it again")
        self._check_allowed(request, conversation_id)
        if asked.approvals is None and self._start is not None:
            run_id = self._runs.hand_off(conversation_id, asked.text, self._start)
            return self._follow(request, run_id, 0, UIStreamEncoder(run_id), None, _UI_HEADERS)
        if asked.approvals is None:
            publisher = self._runs.start(conversation_id, asked.text)
            run_id = publisher.run_id
            return self._follow(request, run_id, 0, UIStreamEncoder(run_id), publisher, _UI_HEADERS)
        current = self._runs.current_run(conversation_id)
        if current is None or current.state.status != "paused":
            raise Refusal(409, "not_paused", "no run of this conversation waits for a decision")
        snapshot = self._store.get(current.state.run_id)
        if snapshot is None or snapshot.status != "paused":
            raise Refusal(409, "not_paused", "no run of this conversation waits for a decision")
        decisions: dict[str, Decision] = {
            approval_id: True if answer.approved else Deny(reason=answer.reason or "")
            for approval_id, answer in asked.approvals.items()
        }
        publisher = self._runs.resume(snapshot, decisions)  # checked against the stored requests
        run_id = publisher.run_id
        seen = publisher.first_seq  # the client's message holds what these announced
        client_has = shown_calls(r.data for r in self._store.read_events(run_id) if r.seq <= seen)
        encoder = UIStreamEncoder(run_id, client_has=client_has)
        return self._follow(request, run_id, seen, encoder, publisher, _UI_HEADERS)

    def _ui_resume(self, request: WebRequest, conversation_id: str) -> WebResponse:
        check_id(conversation_id, "conversation_id")
        self._check_allowed(request, conversation_id)
        current = self._runs.current_run(conversation_id)
        if current is None:
            return WebResponse(204)
        run_id = current.state.run_id
        if current.state.status == "running":
            self._runs.notice_lost_runs(following=current)  # read already: not again
        return self._follow(request, run_id, 0, UIStreamEncoder(run_id), None, _UI_HEADERS)

    def _ui_stop(self, request: WebRequest, conversation_id: str) -> WebResponse:
        check_id(conversation_id, "conversation_id")
        reason = optional_str(parse_json_body(request, required=False), "reason")
        self._check_allowed(request, conversation_id)
        return json_response(
            200,
            {"success": True, "cancelled": self._runs.stop_conversation(conversation_id, reason)},
        )

    # -- shared --

    def _answer(
        self, route: Callable[..., WebResponse], request: WebRequest, *args: Any
    ) -> WebResponse:
        try:
            if request.method == "POST":
                require_json(request)  # before anything: a cross-site form changes nothing
            self._runs.notice_lost_runs()
            return route(request, *args)
        except BadRequest as exc:
            return error_response(exc.status, exc.error, exc.message)
        except Refusal as refusal:
            return refusal.response
        except StoreUnavailableError:
            logger.warning("the run store is unavailable", exc_info=True)
            return error_response(503, "store_unavailable", "the run store is unavailable")
        except Exception:
            # The app's own code failed (make_agent, authorize) or ours did: the client gets
            # the routes' JSON shape, never the exception's text (it may hold a connection
            # string or a key); the server log has it all.
            logger.exception("the %s route failed", route.__name__.lstrip("_"))
            return error_response(500, "internal_error", "the server could not answer")

    def _check_allowed(self, request: WebRequest, conversation_id: str) -> None:
        if self._authorize is not None and not self._authorize(request.native, conversation_id):
            raise Refusal(403, "forbidden", "not allowed")

    def _run(self, request: WebRequest, run_id: str) -> RunSnapshot:
        """The run's snapshot, once this request may touch its tree."""
        return self._run_in_tree(request, run_id)[0]

    def _run_in_tree(self, request: WebRequest, run_id: str) -> tuple[RunSnapshot, RunSnapshot]:
        """The run's snapshot and its tree's top-level run's (the same for a top-level
        run), once this request may touch that tree: ``authorize`` is asked about the
        top-level run's conversation, the application's own (a sub-agent's run has a
        conversation of the library's, which ``authorize`` knows nothing of)."""
        _check_run_id(run_id)
        snapshot = self._store.get(run_id)
        if snapshot is None:
            raise Refusal(404, "not_found", "no such run")
        top = snapshot
        for _ in range(_MAX_TREE_LEVELS):
            if top.parent_run_id is None:
                break
            above = self._store.get(top.parent_run_id)
            if above is None:  # its tree's top is gone: nobody may touch what is left
                raise Refusal(404, "not_found", "no such run")
            top = above
        else:
            raise Refusal(404, "not_found", "no such run")
        self._check_allowed(request, top.conversation_id or "")
        return snapshot, top

    def _stream(
        self,
        request: WebRequest,
        run_id: str,
        after: int,
        encoder: StreamEncoder,
        on_gone: Callable[[], object] | None,
        headers: Mapping[str, str] = SSE_HEADERS,
    ) -> WebResponse:
        client = socket_from_environ(request.environ)
        if client is not None:
            no_delay(client)
            bound_send_buffer(client)  # a client that stops reading pins little
        body = Follower(
            self._store,
            run_id,
            after=after,
            encoder=encoder,
            keepalive=self._keepalive,
            replay_ttl=self._replay_ttl,
            client_socket=client,
            on_gone=on_gone,
            write_timeout=self._write_timeout,
        )
        return WebResponse(200, body, EVENT_STREAM, dict(headers))

    def _last_event_id(self, request: WebRequest, run_id: str) -> int:
        raw = request.headers.get("last-event-id") or request.query.get("last_event_id")
        if not raw:
            return 0
        parsed = parse_event_id(raw)
        if parsed is None or parsed[0] != run_id:
            raise BadRequest("Last-Event-ID must be an id of this run's stream (<run_id>:<n>)")
        return parsed[1]

    def _nothing_left(self, run_id: str, after: int, snapshot: RunSnapshot) -> bool:
        """Whether a reconnect after ``after`` has nothing to get: the run is over and
        ``after`` is its log's terminal record (or its log is gone)."""
        if snapshot.status in ("running", "paused"):
            return False
        tail = self._store.read_events(run_id, after=max(0, after - 1))
        if not tail:
            return True  # dropped after replay_ttl (or never written)
        return tail[-1].seq == after and is_terminal(tail[-1].data)


def _refuse_sub_agent_run(top: RunSnapshot, what: str) -> NoReturn:
    """409 for a sub-agent's run: a paused tree is answered and stopped through the run
    that started it (``top``), which the answer names."""
    raise Refusal(409, "sub_agent_run", f"this is a sub-agent's run: {what}", run_id=top.run_id)


def _check_run_id(run_id: str) -> None:
    """404 for an id no run can have (:func:`._http.valid_id`), before the store is asked:
    a crafted id (``<run_id>:signals``) must not name another key."""
    if not valid_id(run_id):
        raise Refusal(404, "not_found", "no such run")
