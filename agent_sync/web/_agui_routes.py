"""The AG-UI routes: the chat routes' machinery with an AG-UI request parser and encoder.

:class:`AGUIRoutes` is :class:`._routes.ChatRoutes` (the same store, run control, checks,
``authorize``, bounds and run-control handlers) plus one route, ``POST {prefix}/``: a
``RunAgentInput`` (:mod:`._agui_request`) starts a run, or its ``resume`` entries answer
the conversation's paused run, and the run is streamed as AG-UI events
(:mod:`._agui_stream`). ``GET /runs/<run_id>/events`` streams AG-UI events too.
:func:`agent_sync.web.flask.agui_blueprint` and :func:`agent_sync.web.django.agui_urls`
only translate.
"""

from __future__ import annotations

from .._run_state import RunSnapshot
from ._agui_request import parse_agui
from ._agui_stream import AGUIEncoder
from ._encoders import StreamEncoder
from ._http import Refusal, WebRequest, WebResponse, parse_json_body
from ._routes import ChatRoutes

__all__ = ["AGUIRoutes"]


class AGUIRoutes(ChatRoutes):
    """The AG-UI routes over one store. See :func:`agent_sync.web.flask.agui_blueprint`
    for the arguments."""

    def agui_run(self, request: WebRequest) -> WebResponse:
        """``POST {prefix}/``: run the agent on a ``RunAgentInput``; AG-UI events as SSE."""
        return self._answer(self._agui_run, request)

    def _agui_run(self, request: WebRequest) -> WebResponse:
        asked = parse_agui(parse_json_body(request))
        conversation_id = asked.conversation_id
        self._check_allowed(request, conversation_id)
        if asked.decisions is None:
            if self._start is not None:  # another process runs it: follow its log
                run_id = self._runs.hand_off(conversation_id, asked.text, self._start)
                return self._follow(request, run_id, 0, AGUIEncoder(run_id, conversation_id), None)
            publisher = self._runs.start(conversation_id, asked.text)
            encoder = AGUIEncoder(publisher.run_id, conversation_id)
            return self._follow(request, publisher.run_id, 0, encoder, publisher)
        current = self._runs.current_run(conversation_id)
        snapshot = None if current is None else self._store.get(current.state.run_id)
        if snapshot is None or snapshot.status != "paused":
            raise Refusal(409, "not_paused", "no run of this conversation waits for a decision")
        publisher = self._runs.resume(snapshot, asked.decisions)  # checked against the stored
        run_id = publisher.run_id
        seen = publisher.first_seq  # the client's stream ended with these: the interrupt
        history = [event for event in self._store.read_events(run_id) if event.seq <= seen]
        encoder = AGUIEncoder(run_id, conversation_id, history=history)
        return self._follow(request, run_id, seen, encoder, publisher)

    def _events_encoder(self, snapshot: RunSnapshot, after: int) -> StreamEncoder:
        run_id = snapshot.run_id
        history = []
        if after > 0:
            history = [event for event in self._store.read_events(run_id) if event.seq <= after]
        return AGUIEncoder(run_id, snapshot.conversation_id or "", history=history)

    def _nothing_left(self, run_id: str, after: int, snapshot: RunSnapshot) -> bool:
        """Also 204 for a paused run whose records the client has: its stream ended with
        the interrupt; the next ``RunAgentInput`` (with ``resume``) goes on with it."""
        if snapshot.status == "paused" and after > 0:
            if not self._store.read_events(run_id, after=after):
                return True
        return super()._nothing_left(run_id, after, snapshot)
