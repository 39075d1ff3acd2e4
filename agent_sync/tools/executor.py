"""How an agent runs the tool calls of one assistant message: :data:`ExecutorKind`.

``"concurrent"`` (the default) runs them in parallel on up to ``max_tool_workers`` threads;
``"sequential"`` runs them one by one, checking for a cancel between them. Results are
recorded in call order either way, and every call runs in a named worker thread so that the
invoking thread can notice a cancel while a tool blocks. After a cancel, running tools get
``tool_grace_period`` seconds, then are abandoned (see :mod:`agent_sync.tools`); the logger
``agent_sync.tools.executor`` reports late results of abandoned tools.
"""

from __future__ import annotations

from typing import Literal

__all__ = ["ExecutorKind"]

ExecutorKind = Literal["concurrent", "sequential"]
"""``Agent(tool_executor=...)``: ``"concurrent"`` or ``"sequential"``."""
