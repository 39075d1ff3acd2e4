"""The Celery app of the tests' worker: ``celery -A tests.celery.worker_app worker``.

Configured by the test through the environment: the broker and result backend (a real
redis-server), the queue, the store (``sqlite:///<path>`` or ``redis://...`` with a key
prefix) and the probe socket of :func:`tests.celery.agents.wait_for_stop`.
"""

from __future__ import annotations

import functools
import os

from celery import Celery

from agent_sync.celery import configure
from tests.celery.agents import make_agent
from tests.celery.stores import store_from_env

app = Celery(
    "agent_sync_tests",
    broker=os.environ["AGENT_SYNC_TEST_BROKER"],
    backend=os.environ["AGENT_SYNC_TEST_BACKEND"],
)
app.conf.task_default_queue = os.environ["AGENT_SYNC_TEST_QUEUE"]
app.conf.broker_connection_retry_on_startup = True

store = store_from_env()
configure(functools.partial(make_agent, store, resume=True))
