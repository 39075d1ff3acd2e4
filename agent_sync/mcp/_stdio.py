"""The stdio transport: the server's stdout read in linear time, one message bounded.

The SDK's ``stdio_client`` joins each chunk it reads to the part of the line it holds and
splits the whole again, so a message of n bytes costs O(n²) on the connection's only loop:
one 32 MB result held every other call on the connection for seconds, and a larger one
for longer than their timeouts. Here the reader keeps a line as a list of chunks, looks for
the newline only in the chunk that came, and joins once per message (linear); a message
past ``max_message`` bytes is not kept at all: its bytes are counted and dropped as they
come, and its request is answered with a JSON-RPC error (:data:`TOO_LARGE`) naming the
size, so the call ends with a clear error and the calls after it go on.

The id of a dropped answer is read from its first or last bytes (kept, a few hundred of
each): a JSON-RPC answer starts ``{"jsonrpc":"2.0","id":...`` (the Python SDK) or ends
``"id":...}`` (the TypeScript one). An answer whose id is in neither place is reported to
the session as a transport error (its call then ends at ``call_timeout``).

The rest is the SDK's: spawning the child in its own process group, and its shutdown
(stdin closed, a grace period, then the process tree terminated and killed), run shielded
so a cancelled caller never leaves the child running. Only the grace is ours to set
(``shutdown_timeout``; the SDK's is a module constant of 2 s): a server that keeps working
after its stdin closes, as server-everything does while a cancelled long operation runs,
holds ``close()`` for the whole grace.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TextIO

import anyio
import mcp_types as types
from mcp.client._transport import TransportStreams
from mcp.client.stdio import (
    StdioServerParameters,
    _create_platform_compatible_process,
    _drain_stdout,
    _get_executable_command,
    _stop_server_process,
    _terminate_process_tree,
    _wait_for_process_exit,
    get_default_environment,
)
from mcp.os.win32.utilities import ServerProcess
from mcp.shared.message import SessionMessage

__all__ = ["TOO_LARGE", "Lines", "stdio_transport"]

logger = logging.getLogger(__name__)

TOO_LARGE = -32099
"""JSON-RPC error code of an answer dropped for its size (ours, in the server-error range)."""

_KEPT = 512  # bytes of a dropped message's start and end, kept to find its id
_ID = rb'(-?\d+|"(?:[^"\\]|\\.)*")'
_ID_AT_START = re.compile(rb'\s*\{\s*(?:"jsonrpc"\s*:\s*"2\.0"\s*,\s*)?"id"\s*:\s*' + _ID)
_ID_AT_END = re.compile(rb'"id"\s*:\s*' + _ID + rb'\s*(?:,\s*"jsonrpc"\s*:\s*"2\.0"\s*)?\}\s*$')
_FLUSH_S = 0.5  # for the writer to send what it accepted before stdin is closed
_REAP_S = 30.0
"""How long a server the SDK killed may take to be seen dead. The SDK waits 2 s and then
abandons it: on a busy machine the loop sees the death later than that, and an abandoned
child stays a zombie whose ``Popen`` warns when collected. A killed process does die."""


class Lines:
    """Messages out of the byte chunks of a newline-delimited JSON-RPC stream.

    Linear in the bytes fed; holds at most ``limit`` bytes of a message (see the module
    docstring). One reader only.
    """

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._parts: list[bytes] = []
        self._size = 0
        self._head = b""  # of a message being dropped: its first bytes
        self._tail = b""  # and its last ones
        self._dropping = False

    def feed(self, chunk: bytes) -> list[SessionMessage | Exception]:
        """The messages that ``chunk`` completes, in order (parsed, or what went wrong)."""
        found: list[SessionMessage | Exception] = []
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            if end < 0:
                self._add(chunk[start:])
                return found
            self._add(chunk[start:end])
            start = end + 1
            message = self._end_line()
            if message is not None:
                found.append(message)

    def _add(self, part: bytes) -> None:
        if not part:
            return
        self._size += len(part)
        if self._dropping:
            self._tail = (self._tail + part[-_KEPT:])[-_KEPT:]
            return
        self._parts.append(part)
        if self._size > self._limit:  # from here on nothing of it is kept
            self._dropping = True
            self._head = b"".join(self._parts)[:_KEPT]
            self._tail = b"".join(self._parts[-2:])[-_KEPT:]
            self._parts = []

    def _end_line(self) -> SessionMessage | Exception | None:
        size, self._size = self._size, 0
        if self._dropping:
            self._dropping = False
            return self._too_large(size)
        line = b"".join(self._parts)
        self._parts = []
        if not line.strip():
            return None
        try:
            return SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False))
        except ValueError as exc:
            logger.warning("a message from the server is not JSON-RPC: %s", str(exc)[:200])
            return exc

    def _too_large(self, size: int) -> SessionMessage | Exception:
        head, tail, self._head, self._tail = self._head, self._tail, b"", b""
        what = f"the server's answer was {size} bytes, more than max_result_bytes={self._limit}"
        match = _ID_AT_START.match(head) or _ID_AT_END.search(tail)
        if match is None:
            logger.warning("%s; dropped, and its request id was not found", what)
            return ValueError(f"{what}; dropped")
        logger.warning("%s; dropped: its call ends with an error", what)
        request_id: int | str = json.loads(match.group(1))
        error = types.ErrorData(code=TOO_LARGE, message=f"{what}; it was dropped")
        return SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=request_id, error=error))


@asynccontextmanager
async def stdio_transport(
    parameters: StdioServerParameters, errlog: TextIO, max_message: int, *, grace: float
) -> AsyncIterator[TransportStreams]:
    """Start the server (as the SDK's ``stdio_client`` does) and yield the streams the
    SDK's client reads and writes; on leaving, stop it (shielded, every wait bounded), the
    child given ``grace`` seconds to exit after its stdin is closed.

    Raises:
        OSError: The server could not be spawned.
    """
    command = await _get_executable_command(parameters.command)
    process = await _create_platform_compatible_process(
        command=command,
        args=parameters.args,
        env=get_default_environment() | (parameters.env or {}),
        errlog=errlog,
        cwd=parameters.cwd,
    )
    # No await from the spawn to the task group: a cancel there would leave the child.
    to_client, from_server = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    to_server, from_client = anyio.create_memory_object_stream[SessionMessage](0)
    written = anyio.Event()
    stdout, stdin = process.stdout, process.stdin
    assert stdout is not None and stdin is not None

    async def read() -> None:
        lines = Lines(max_message)
        try:
            async with to_client:
                try:
                    async for chunk in stdout:
                        for message in lines.feed(chunk):
                            await to_client.send(message)
                finally:
                    await _drain_stdout(process)  # lets a server that is still writing exit
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, ConnectionError):
            pass  # our shutdown, or the client gone: the session sees the stream end

    async def write() -> None:
        try:
            async with from_client:
                async for message in from_client:
                    text = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await stdin.send((text + "\n").encode())
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            await to_client.aclose()  # the session sees the end, not a request hanging
        finally:
            written.set()

    async with anyio.create_task_group() as group:
        group.start_soon(read)
        group.start_soon(write)
        try:
            yield from_server, to_server
        finally:
            with anyio.CancelScope(shield=True):  # the child must be stopped whatever happens
                from_server.close()
                to_server.close()
                with anyio.move_on_after(_FLUSH_S):
                    await written.wait()
                await _stop(process, grace)
                await _reaped(process)
                for stream in (from_server, to_server, to_client, from_client):
                    await stream.aclose()
                await anyio.lowlevel.checkpoint()
            group.cancel_scope.cancel()


async def _stop(process: ServerProcess, grace: float) -> None:
    """The SDK's shutdown with a grace of ``grace`` seconds: stdin closed, then the
    process tree terminated (SIGTERM, then SIGKILL) if the child has not exited by then."""
    stdin = process.stdin
    assert stdin is not None
    with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        await stdin.aclose()
    if not await _wait_for_process_exit(process, grace):
        await _terminate_process_tree(process)
    # the rest of the SDK's (its own grace starts with the child already gone, or ended):
    # the pipes and the transport closed, and a child that survived killed again
    await _stop_server_process(process)


async def _reaped(process: ServerProcess) -> None:
    """Wait (at most :data:`_REAP_S`) until the loop has seen the stopped server exit."""
    with anyio.move_on_after(_REAP_S):
        while process.returncode is None:
            await anyio.sleep(0.01)
    if process.returncode is None:
        logger.warning("MCP server process %d did not exit after it was killed", process.pid)
