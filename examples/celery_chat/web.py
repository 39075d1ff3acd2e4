"""The web side: the chat routes, handing every new run to the Celery workers.

gunicorn --worker-class gthread --workers 2 --threads 16 "web:create_app()"
"""

from typing import Any

import flask
import tasks

from agent_sync.celery import run_task
from agent_sync.web.flask import chat_blueprint


def start_in_celery(conversation_id: str, message: Any, run_id: str) -> None:
    """``start=``: a Celery worker runs it; the run's id is the task's id."""
    run_task.apply_async((conversation_id, message), task_id=run_id)


def create_app() -> flask.Flask:
    tasks.app.set_default()  # the request threads send tasks with this app
    app = flask.Flask(__name__)
    routes = chat_blueprint(tasks.make_agent, store=tasks.store, start=start_in_celery)
    app.register_blueprint(routes, url_prefix="/api")
    return app
