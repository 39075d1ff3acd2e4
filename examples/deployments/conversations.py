"""The part of the deployment examples that knows no web framework: the store, the agent,
and the three operations of the JSON API. ``flask_app.py`` and ``django_site/views.py``
only route requests here.

Every request builds its own agent from the store, so any worker process, on any host
sharing the store, can answer any request. Each operation returns ``(body, status)``; the
body's ``pid`` is the worker process that answered (to watch workers share conversations).

Authenticate the user, and check that they may use the conversation, before calling these:
a conversation id is a name, not a secret.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from typing import Any

from agent_sync import Agent, ConcurrentInvocationError, ModelError, ToolContext, tool
from agent_sync.errors import PendingApprovalError, StoreUnavailableError
from agent_sync.stores import MemoryRunStore, RunStore, SQLiteRunStore
from agent_sync.testing import ScriptedModel

Reply = tuple[dict[str, Any], int]
NewAgent = Callable[[RunStore, str], Agent]

_CONVERSATION_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
MAX_TEXT_CHARS = 20_000


def store_from_url(url: str, *, prefix: str = "agent_sync:") -> RunStore:
    """The run store named by ``url``; open it once per worker process.

    - ``memory:``: this process only (one worker);
    - ``sqlite:////var/lib/chat/agent_sync.db``: every worker of one host (local disk);
    - ``redis://host:6379/0``, ``rediss://user:password@host:6380/0`` (TLS): several
      hosts; ``prefix`` goes before every key.
    """
    if url == "memory:":
        return MemoryRunStore()
    if url.startswith("sqlite:///"):
        return SQLiteRunStore(url.removeprefix("sqlite:///"))
    if url.startswith(("redis://", "rediss://", "unix://")):
        import redis  # pip install "agent_sync[redis]"

        from agent_sync.stores import RedisRunStore

        client = redis.Redis.from_url(url, socket_connect_timeout=5, socket_timeout=10)
        return RedisRunStore(client, prefix=prefix)
    raise ValueError(f"unknown store URL scheme {url.split(':', 1)[0]!r}")  # no password


@tool
def long_task(minutes: float, context: ToolContext) -> str:
    """Work on a long task (a stand-in for a slow tool that stops as soon as it is told).

    Args:
        minutes: How long the task takes.
    """
    if context.wait(minutes * 60):  # wakes at once when the run is cancelled
        return "stopped: the run was cancelled"
    return f"done after {minutes} minutes"


def new_agent(store: RunStore, conversation_id: str) -> Agent:
    """The agent of one request: it loads the conversation's history from the store.

    The model is an offline stand-in; swap in yours, from ``agent_sync.models``, e.g.
    ``AnthropicModel("claude-sonnet-4-5", max_tokens=1024)`` (``ANTHROPIC_API_KEY``).
    """
    model = ScriptedModel(["Hello from the offline model: put a real one in new_agent()."])
    return Agent(
        model,
        tools=[long_task],
        system_prompt="Be brief.",
        store=store,
        conversation_id=conversation_id,
    )


def post_message(
    store: RunStore, cid: str, body: bytes, *, new_agent: NewAgent = new_agent, timeout: float
) -> Reply:
    """Answer ``{"text": "..."}`` in conversation ``cid``; blocks until the run is over."""
    if not _CONVERSATION_ID.fullmatch(cid):
        return _error(400, "bad_request", "a conversation id is 1-64 letters, digits, - or _")
    try:
        data = json.loads(body)
    except ValueError:
        data = None
    text = data.get("text") if isinstance(data, dict) else None
    if not isinstance(text, str) or not text.strip() or len(text) > MAX_TEXT_CHARS:
        return _error(400, "bad_request", 'send {"text": "..."}: a non-empty string')
    try:
        result = new_agent(store, cid).invoke(text, timeout=timeout)
    except ConcurrentInvocationError:  # answering another message, on any worker
        return _error(409, "busy", "the conversation is answering another message")
    except PendingApprovalError:
        return _error(409, "paused", "the conversation waits for a tool approval")
    except StoreUnavailableError:
        return _error(503, "store_unavailable", "try again later")
    except ModelError as exc:  # its message never holds an API key
        return _error(502, "model_error", str(exc))
    return {
        "text": result.text,
        "run_id": result.run_id,
        "stop_reason": result.stop_reason,
        "cancel_reason": result.cancel_reason,
        "pid": os.getpid(),
    }, 200


def get_conversation(store: RunStore, cid: str) -> Reply:
    """The conversation's finished messages and its current run (running or paused)."""
    if not _CONVERSATION_ID.fullmatch(cid):
        return _error(400, "bad_request", "a conversation id is 1-64 letters, digits, - or _")
    try:
        record = store.load(cid)
    except StoreUnavailableError:
        return _error(503, "store_unavailable", "try again later")
    run = record.run
    return {
        "messages": list(record.messages),
        "run": None if run is None else {"run_id": run.state.run_id, "status": run.state.status},
        "pid": os.getpid(),
    }, 200


def cancel(store: RunStore, cid: str) -> Reply:
    """Stop the conversation's running (or paused) run, whichever worker runs it."""
    if not _CONVERSATION_ID.fullmatch(cid):
        return _error(400, "bad_request", "a conversation id is 1-64 letters, digits, - or _")
    try:
        run = store.load(cid).run
        # The store tells the worker that owns the run; it stops within milliseconds.
        cancelled = run is not None and store.cancel(run.state.run_id, "stopped by user")
    except StoreUnavailableError:
        return _error(503, "store_unavailable", "try again later")
    return {"cancelled": cancelled, "pid": os.getpid()}, 200


def _error(status: int, error: str, message: str) -> Reply:
    return {"error": error, "message": message, "pid": os.getpid()}, status
