"""The Celery app of the tests' worker: ``celery -A tests.celery.worker_app worker``.

Configured by the test through the environment: the broker and result backend (a real
redis-server), the queue, the store (``sqlite:///<path>`` or ``redis://...`` with a key
prefix) and the probe socket of :func:`tests.celery.agents.wait_for_stop`.

Its ``make_agent`` looks the conversation up, as real apps do: the tests' conversations
are ``c-<hex>``, any other id is refused (``configure`` must never build an agent of a
conversation it made up).
"""

from __future__ import annotations

import os

from celery import Celery

from agent_sync import Agent
from agent_sync.celery import configure
from tests.celery import agents
from tests.celery.stores import store_from_env

app = Celery(
    "agent_sync_tests",
    broker=os.environ["AGENT_SYNC_TEST_BROKER"],
    backend=os.environ["AGENT_SYNC_TEST_BACKEND"],
)
app.conf.task_default_queue = os.environ["AGENT_SYNC_TEST_QUEUE"]
app.conf.broker_connection_retry_on_startup = True

store = store_from_env()


def make_agent(conversation_id: str) -> Agent:
    """The conversation's agent; an unknown conversation is refused."""
    if not conversation_id.startswith("c-"):
        raise LookupError(f"no such conversation: {conversation_id!r}")
    return agents.make_agent(store, conversation_id, resume=True)


# NAMED_STORE=0: the store is learned from the first task's agent, in each process
configure(make_agent, store=store if os.environ.get("AGENT_SYNC_TEST_NAMED_STORE") != "0" else None)
