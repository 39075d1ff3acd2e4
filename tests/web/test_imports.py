"""Flask and Django are optional: the core and ``agent_sync.web`` must not import them."""

from __future__ import annotations

import subprocess
import sys


def test_core_and_web_package_do_not_import_flask_or_django() -> None:
    code = (
        "import sys, agent_sync, agent_sync.web\n"
        "from agent_sync.web import sse_events, ConversationRegistry\n"
        "frameworks = ('flask', 'django', 'werkzeug')\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in frameworks)\n"
        "print(','.join(bad))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout.strip() == ""


def test_framework_modules_import_their_framework() -> None:
    import agent_sync.web.django as django_glue
    import agent_sync.web.flask as flask_glue

    assert callable(flask_glue.sse_response) and callable(django_glue.sse_response)
