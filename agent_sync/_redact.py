"""One redaction function for every surface a secret could reach.

Secrets (API keys, bearer tokens, AWS secret access keys and session tokens) must never
reach an error's ``str()``, ``repr()``, ``.args`` or ``.body``, nor a log record at any
level. Two layers, both applied by :func:`redact`:

* **known values**: a provider registers the credentials it was given or resolved
  (:func:`register_secret`), so even a key the server echoes back verbatim, in any
  format, is replaced;
* **shapes**: well-known secret formats (``sk-...`` keys, ``Bearer`` tokens, ``x-api-key``
  and ``X-Amz-Security-Token`` header values, AWS secret keys in key=value form) are
  replaced even when nobody registered them.

:class:`~agent_sync.errors.ModelError` redacts its message and body on construction, so
every provider's errors go through here without each one remembering to. For log records
(botocore logs signed headers at DEBUG) :class:`RedactingFilter` rewrites a record before
any handler sees it; :func:`install_log_filter` attaches it to named loggers once.

A provider raises ``map_error(exc) from exc``, so the SDK's own exception becomes the
``__cause__`` that every printed traceback shows: :func:`scrub_exception` redacts that
chain in place, in each provider's one mapping function.

The registry holds secrets for the life of the process (a model's key stays registered
after the model is closed): a handful of strings, and forgetting one early would be worse.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterable

__all__ = [
    "MASK",
    "RedactingFilter",
    "install_log_filter",
    "redact",
    "register_secret",
    "scrub_exception",
]

MASK = "***"
"""What a secret is replaced with."""

logger = logging.getLogger(__name__)

_MIN_SECRET_LENGTH = 8  # shorter values are not credentials and would mask ordinary words

_lock = threading.Lock()
_secrets: frozenset[str] = frozenset()
_installed: set[str] = set()

_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    # OpenAI / Anthropic style keys: sk-..., sk-proj-..., sk-ant-api03-...
    (re.compile(r"\bsk-[A-Za-z0-9_\-*]{8,}"), "sk-" + MASK),
    # Authorization: Bearer <token> (also in reprs of header dicts)
    (re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/=\-]{8,}"), r"\g<1>" + MASK),
    # header values: x-api-key, api-key, X-Amz-Security-Token, authorization (any quoting)
    (
        re.compile(
            r"(?i)((?:x-api-key|api-key|x-amz-security-token|authorization)"
            r"['\"]?\s*[:=]\s*b?['\"]?)([^'\"\s,}]{8,})"
        ),
        r"\g<1>" + MASK,
    ),
    # AWS credentials in key=value / JSON form
    (
        re.compile(
            r"(?i)((?:aws_)?(?:secret_access_key|session_token|secretaccesskey|sessiontoken)"
            r"['\"]?\s*[:=]\s*['\"]?)([^'\"\s,}]{8,})"
        ),
        r"\g<1>" + MASK,
    ),
)


def register_secret(value: str | None) -> None:
    """Add a credential to the process-wide set that :func:`redact` replaces.

    Thread-safe; ``None``, empty and very short values are ignored.
    """
    global _secrets
    if not value or len(value) < _MIN_SECRET_LENGTH:
        return
    with _lock:
        if value not in _secrets:
            _secrets = frozenset(_secrets | {value})


def redact(text: str) -> str:
    """``text`` with every registered secret and every secret-shaped token masked."""
    # longest first, so a secret that contains another is replaced whole
    for secret in sorted(_secrets, key=len, reverse=True):
        if secret in text:
            text = text.replace(secret, MASK)
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text


_MAX_CHAIN = 16  # exceptions walked per chain; a cycle or a pathological chain stops here


def scrub_exception(exc: BaseException) -> BaseException:
    """Redact, in place, every exception in ``exc``'s chain (itself, ``__cause__``,
    ``__context__``): its ``args`` and its string, dict and list attributes (an SDK's
    ``message``, ``body``, botocore's ``response``). Never raises.

    Returns:
        ``exc``, for ``raise map_error(scrub_exception(exc)) from exc``.
    """
    pending: list[BaseException | None] = [exc]
    seen: list[BaseException] = []
    while pending and len(seen) < _MAX_CHAIN:
        current = pending.pop()
        if current is None or any(current is done for done in seen):
            continue
        seen.append(current)
        try:
            current.args = tuple(_redacted(arg) for arg in current.args)
            for name, value in list(vars(current).items()):
                if isinstance(value, (str, dict, list)):
                    setattr(current, name, _redacted(value))
        except Exception:  # a read-only or hostile attribute: redact what we can
            logger.debug("could not redact every field of %s", type(current).__name__)
        pending += [current.__cause__, current.__context__]
    return exc


def _redacted(value: object) -> object:
    """``value`` with every string in it redacted (dicts, lists and tuples walked)."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {key: _redacted(item) for key, item in value.items()}
    if type(value) is list:
        return [_redacted(item) for item in value]
    if type(value) is tuple:  # exact type: a namedtuple is left as it is
        return tuple(_redacted(item) for item in value)
    return value


class RedactingFilter(logging.Filter):
    """A logging filter that redacts a record's message (arguments merged in first).

    It never drops a record; it rewrites ``msg`` to the redacted, formatted message and
    clears ``args``, so every handler downstream sees only the clean text.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a broken format string: let logging report it as usual
            return True
        clean = redact(message)
        if clean != message or record.args:
            record.msg = clean
            record.args = None
        return True


_FILTER = RedactingFilter()


def install_log_filter(logger_names: Iterable[str]) -> None:
    """Attach the redacting filter to each named logger, once per name (thread-safe).

    A logger's filters apply only to records logged *on that logger*, not its children,
    so name every logger that emits secrets (e.g. ``botocore.endpoint``), not a parent.
    """
    with _lock:
        for name in logger_names:
            if name not in _installed:
                logging.getLogger(name).addFilter(_FILTER)
                _installed.add(name)
