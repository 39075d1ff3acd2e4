"""Stdio "servers" that never speak MCP, so they import nothing of the SDK (a child that
imported it took half a second to start, and a test waited for that at its close), run as

    python _silent_server.py MODE

* ``mute``: never answers ``initialize`` (a server that does not start); it reads its stdin
  and exits when that ends, as a stdio server does;
* ``deaf``: never reads its stdin at all: only the client's terminate, after its grace
  period (``shutdown_timeout``), ends it.
"""

from __future__ import annotations

import sys
import threading


def main(mode: str) -> None:
    if mode == "mute":
        for _ in sys.stdin.buffer:  # never answers: the client's startup_timeout ends it
            pass
        return
    if mode == "deaf":
        threading.Event().wait()
    raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv[1])
