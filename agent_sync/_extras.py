"""The error for an optional dependency that is not installed: it names the extra to install.

Modules that need an extra import it as::

    try:
        import flask
    except ImportError as exc:
        raise missing_extra("flask", "flask") from exc
"""

from __future__ import annotations

__all__ = ["missing_extra"]


def missing_extra(package: str, extra: str) -> ImportError:
    """An ``ImportError`` saying ``package`` is missing and ``agent_sync[extra]`` brings it."""
    return ImportError(
        f"{package} is not installed: this part of agent_sync needs the {extra!r} extra "
        f"(pip install 'agent_sync[{extra}]')",
        name=package,
    )
