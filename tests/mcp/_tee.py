"""Run an MCP stdio server, recording every line the client writes to it.

    python _tee.py RECORDER_PORT COMMAND [ARGS...]

The server gets this process's stdout and stderr; its stdin is fed from ours, line by line,
and each line is first sent to the test's recorder (a local socket, see ``_recording.py``),
so a test sees exactly what the server received. The first line it sends is
``{"tee_pid", "server_pid"}``. When our stdin ends, the server's is closed; when the server
exits we exit with its code; SIGTERM (the client's shutdown) is passed on to it.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading


def main() -> int:
    port, command = int(sys.argv[1]), sys.argv[2:]
    recorder = socket.create_connection(("127.0.0.1", port))
    child = subprocess.Popen(command, stdin=subprocess.PIPE)
    pids = {"tee_pid": os.getpid(), "server_pid": child.pid}
    recorder.sendall(json.dumps(pids).encode() + b"\n")  # first: who is who, for the test
    signal.signal(signal.SIGTERM, lambda *_: child.terminate())
    # the server exits (or is killed): so do we, as npx and uvx do, closing the pipes
    threading.Thread(target=lambda: os._exit(child.wait()), daemon=True).start()
    assert child.stdin is not None
    for line in sys.stdin.buffer:
        recorder.sendall(line)
        try:
            child.stdin.write(line)
            child.stdin.flush()
        except BrokenPipeError:
            break
    child.stdin.close()
    recorder.close()
    return child.wait()


if __name__ == "__main__":
    sys.exit(main())
