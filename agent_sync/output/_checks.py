"""Checking ``output_type=`` and ``output_retries=`` where a user passes them."""

from __future__ import annotations

from ..errors import UsageError
from ._spec import OutputSpec, output_spec

__all__ = ["checked_output_retries", "checked_output_type"]


def checked_output_type(output_type: object) -> OutputSpec | None:
    """The spec of ``output_type`` (``None``: free text).

    Raises:
        UsageError: A type without a JSON schema, or an invalid JSON-schema dict.
    """
    return None if output_type is None else output_spec(output_type)


def checked_output_retries(output_retries: object) -> int:
    """``output_retries`` if it is an int >= 0.

    Raises:
        UsageError: Anything else.
    """
    if isinstance(output_retries, bool) or not isinstance(output_retries, int):
        raise UsageError(f"output_retries must be an int, got {type(output_retries).__name__}")
    if output_retries < 0:
        raise UsageError("output_retries must be >= 0")
    return output_retries
