"""Command line: ``python -m agent_sync demo`` runs the offline demo."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m agent_sync`` and the ``agent-sync`` script."""
    parser = argparse.ArgumentParser(prog="agent_sync", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="run an agent offline (no API key, no network)")
    demo.add_argument("--cancel-after", type=float, default=0.6, help="seconds before the cancel")
    args = parser.parse_args(argv)
    if args.command == "demo":
        from ._demo import run

        return run(sys.stdout, cancel_after=args.cancel_after)
    return 2  # pragma: no cover (argparse rejects unknown commands)


if __name__ == "__main__":
    sys.exit(main())
