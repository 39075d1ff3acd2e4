"""Where an MCP server is and how to reach it (:class:`Endpoint`), and a stdio child's
stderr (:class:`StderrTail`): its last bytes kept for errors, each chunk logged, secrets
masked."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from .._redact import MASK, redact

__all__ = ["MAX_RESULT_BYTES", "SHUTDOWN_TIMEOUT", "Endpoint", "StderrTail"]

logger = logging.getLogger(__name__)

_STDERR_TAIL = 4096  # bytes of the child's stderr kept for errors
MAX_RESULT_BYTES = 16 * 1024 * 1024  # the default bound of one message from a stdio server
SHUTDOWN_TIMEOUT = 2.0  # a stdio child's grace after its stdin is closed (the SDK's)
_SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "AUTHORIZATION")


@dataclass(frozen=True, kw_only=True)
class Endpoint:
    """Where a server is and how to start or reach it (immutable)."""

    name: str
    kind: Literal["stdio", "http"]
    command: tuple[str, ...] = ()
    env: dict[str, str] | None = None
    cwd: str | None = None
    url: str = ""
    headers: dict[str, str] | None = None
    max_result_bytes: int = MAX_RESULT_BYTES  # stdio: the largest message read (_stdio)
    shutdown_timeout: float = SHUTDOWN_TIMEOUT  # stdio: the child's grace at close (_stdio)
    secrets: tuple[str, ...] = field(default=(), repr=False)

    @staticmethod
    def secret_values(values: dict[str, str] | None) -> tuple[str, ...]:
        """The values of the entries whose names say they hold a secret."""
        return tuple(
            value
            for key, value in (values or {}).items()
            if value and any(word in key.upper() for word in _SECRET_WORDS)
        )

    def mask(self, text: str) -> str:
        """``text`` with this server's secret values (any length) masked, nothing else."""
        for secret in sorted(self.secrets, key=len, reverse=True):
            text = text.replace(secret, MASK)
        return text

    def redact(self, text: str) -> str:
        """``text`` with this server's secrets and every known or secret-shaped one masked
        (for errors and logs)."""
        return redact(self.mask(text))

    def describe(self) -> str:
        return f"MCP server {self.name!r}"


class StderrTail:
    """The stdio child's stderr: a pipe read on the loop, its last bytes kept."""

    def __init__(self, endpoint: Endpoint, on_eof: Callable[[], None]) -> None:
        self._endpoint = endpoint
        self._on_eof = on_eof
        self._read_fd, write_fd = os.pipe()
        os.set_blocking(self._read_fd, False)
        self.writer = os.fdopen(write_fd, "w")  # handed to the child; ours closed after spawn
        self._tail = bytearray()
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        loop.add_reader(self._read_fd, self._read)

    def close_writer(self) -> None:
        """Our copy of the write end: closed once the child has its own (or never started)."""
        with contextlib.suppress(OSError):
            self.writer.close()

    def _read(self) -> None:
        try:
            chunk = os.read(self._read_fd, 65536)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            self.stop()
            self._on_eof()
            return
        self._tail += chunk
        del self._tail[:-_STDERR_TAIL]
        if logger.isEnabledFor(logging.DEBUG):
            text = self._endpoint.redact(chunk.decode("utf-8", "replace").rstrip())
            logger.debug("server=<%s> | stderr: %s", self._endpoint.name, text)

    def text(self) -> str:
        """The last lines the child wrote to stderr, redacted ('' if none)."""
        shown = self._tail.decode("utf-8", "replace").strip()
        return self._endpoint.redact(shown)[-2000:]

    def stop(self) -> None:
        if self._loop is not None and not self._loop.is_closed():
            with contextlib.suppress(Exception):
                self._loop.remove_reader(self._read_fd)
        self._loop = None
        with contextlib.suppress(OSError):
            os.close(self._read_fd)
        self._read_fd = -1
