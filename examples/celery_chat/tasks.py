"""The Celery app, the store and the agents: imported by the Celery workers (``celery -A
tasks worker``) and by the web processes (``web.py``), which send runs to the workers."""

import os

import redis
from celery import Celery

from agent_sync import Agent
from agent_sync.celery import configure
from agent_sync.stores import RedisRunStore
from agent_sync.testing import ScriptedModel

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")

app = Celery("chat", broker=os.environ.get("CELERY_BROKER_URL", REDIS_URL))
store = RedisRunStore(
    redis.Redis.from_url(REDIS_URL),
    prefix=os.environ.get("AGENT_SYNC_KEY_PREFIX", "chat:agent_sync:"),
)


def make_agent(conversation_id: str) -> Agent:
    """The conversation's agent, on the shared store. Offline: choose your model here. A
    run whose worker dies goes on in another one (docs/recovery.md)."""
    model = ScriptedModel([f"Answered by a Celery worker (pid {os.getpid()})."], repeat=True)
    return Agent(model, store=store, conversation_id=conversation_id, on_owner_lost="resume")


configure(make_agent, store=store)  # how the workers build agents; they also take over lost runs
