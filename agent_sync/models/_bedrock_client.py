"""The boto3 ``bedrock-runtime`` client made safe for :class:`~.bedrock.BedrockModel`.

Everything here works on botocore's objects, not on the conversation:

* session and region: :func:`resolve_session`;
* secrets: :func:`library_logger_names` (every botocore, boto3 and urllib3 logger, which
  get the redacting filter) and the credentials a client holds or signs with,
  registered with :mod:`agent_sync._redact` (:func:`known_credentials`,
  :func:`signing_credentials`, :func:`register_credentials`);
* cancel: :func:`make_abortable` swaps the client's connection-pool classes for the
  abortable ones of :mod:`._abort.urllib3`; :func:`abort_response_on_cancel` is the
  fallback for a client that could not be instrumented;
* :func:`close_pools`: the idle keep-alive sockets of a client the model closes.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable
from typing import Any

from .._redact import register_secret
from ..cancel import CancelScope
from ..errors import UsageError
from ._abort.urllib3 import AbortableConnectionMixin, abortable_pool_class

__all__ = [
    "abort_response_on_cancel",
    "close_pools",
    "is_abortable_response",
    "known_credentials",
    "library_logger_names",
    "make_abortable",
    "noop",
    "register_credentials",
    "resolve_session",
    "signing_credentials",
]

# The model's logger: the warning below is about the model's cancel.
logger = logging.getLogger("agent_sync.models.bedrock")


def resolve_session(boto_session: Any | None, region_name: str | None) -> tuple[Any, str]:
    """The boto3 session to build clients from and its region (``UsageError`` without one)."""
    import boto3

    session = boto_session if boto_session is not None else boto3.Session()
    region = region_name or session.region_name
    if not region:
        raise UsageError(
            "BedrockModel needs an AWS region: pass region_name=, a boto_session with a "
            "region, or set AWS_REGION"
        )
    return session, str(region)


@functools.cache
def library_logger_names() -> tuple[str, ...]:
    """Every logger botocore, boto3 and urllib3 may log on (each module logs on its name).

    Found from the installed files without importing anything; botocore's ``data`` folder
    (service models, thousands of JSON files) holds no code and is skipped.
    """
    import boto3
    import botocore
    import urllib3

    names: list[str] = []
    for package in (botocore, boto3, urllib3):
        root = os.path.dirname(package.__file__ or "")
        for folder, subfolders, files in os.walk(root):
            subfolders[:] = [d for d in subfolders if d not in ("data", "__pycache__")]
            relative = os.path.relpath(folder, os.path.dirname(root))
            prefix = relative.replace(os.sep, ".")
            names.append(prefix)
            names += [f"{prefix}.{f[:-3]}" for f in files if f.endswith(".py")]
    return tuple(sorted(set(n.removesuffix(".__init__") for n in names)))


def known_credentials(session: Any, client: Any) -> Any:
    """Credentials already held by ``session`` or ``client``, without resolving any.

    Resolving the credential chain may query instance metadata, which construction must
    not do; credentials resolved later are registered at each call instead.
    """
    if client is not None:
        return getattr(getattr(client, "_request_signer", None), "_credentials", None)
    return getattr(getattr(session, "_session", None), "_credentials", None)


def signing_credentials(client: Any) -> Any:
    """The frozen credentials the client signs this call with (the chain's current ones)."""
    credentials = getattr(getattr(client, "_request_signer", None), "_credentials", None)
    freeze = getattr(credentials, "get_frozen_credentials", None)
    if not callable(freeze):
        return credentials
    try:
        return freeze()
    except Exception:  # a refresh failing here fails again, mapped, when the call signs
        return None


def register_credentials(credentials: Any) -> None:
    # The access key id is an identifier, not a secret (AWS prints it in errors): keep it
    # readable; the secret key and the session token are what must never leak.
    if credentials is None:
        return
    if hasattr(credentials, "refresh_needed"):
        # RefreshableCredentials: the public properties may refresh (a network call);
        # the fields hold the current values.
        secret = getattr(credentials, "_secret_key", None)
        token = getattr(credentials, "_token", None)
    else:  # Credentials or the ReadOnlyCredentials of get_frozen_credentials()
        secret = getattr(credentials, "secret_key", None)
        token = getattr(credentials, "token", None)
    for value in (secret, token):
        if isinstance(value, str):
            register_secret(value)


def make_abortable(client: Any) -> None:
    """Make the connection pools of ``client`` abortable per request (idempotent)."""
    session = getattr(getattr(client, "_endpoint", None), "http_session", None)
    pool_classes = getattr(session, "_pool_classes_by_scheme", None)
    if not isinstance(pool_classes, dict):
        logger.warning(
            "session=<%s> | unknown botocore http session; cancel() can only abort a "
            "request after its response headers arrived",
            type(session).__name__,
        )
        return
    # botocore's PoolManager and its proxy managers share this very dict, so updating it
    # in place covers every pool created from now on.
    for scheme, pool_cls in list(pool_classes.items()):
        pool_classes[scheme] = abortable_pool_class(pool_cls)
    # Pools a user's client created before it reached us keep their old classes: drop
    # them from the managers so the next call builds abortable ones. In-flight calls keep
    # their pool object; its idle connections close when it is garbage collected.
    for manager in _managers(session):
        pools = getattr(manager, "pools", None)
        if pools is None:
            continue
        stale = [k for k in pools.keys() if not _is_abortable_pool(pools.get(k))]
        if stale:
            manager.clear()


def _is_abortable_pool(pool: Any) -> bool:
    return pool is None or issubclass(
        getattr(pool, "ConnectionCls", object), AbortableConnectionMixin
    )


def _managers(session: Any) -> list[Any]:
    managers = [getattr(session, "_manager", None)]
    managers += list(getattr(session, "_proxy_managers", {}).values())
    return [m for m in managers if m is not None]


def close_pools(client: Any) -> None:
    """Close every connection pool of ``client``'s managers."""
    # urllib3 2 no longer closes a pool's connections on PoolManager.clear() (it leaves it
    # to garbage collection), so idle keep-alive sockets would outlive close(): close the
    # pools ourselves.
    session = getattr(getattr(client, "_endpoint", None), "http_session", None)
    for manager in _managers(session):
        pools = getattr(manager, "pools", None)
        if pools is None:
            continue
        for key in list(pools.keys()):
            pool = pools.get(key)
            if pool is not None:
                pool.close()


def is_abortable_response(response_stream: Any) -> bool:
    """Whether the response's connection is one :func:`make_abortable` instrumented."""
    connection = getattr(getattr(response_stream, "_raw_stream", None), "_connection", None)
    return isinstance(connection, AbortableConnectionMixin)


def abort_response_on_cancel(response_stream: Any, cancel: CancelScope) -> Callable[[], None]:
    """Fallback for clients we could not instrument (returns the unregister function).

    urllib3's ``HTTPResponse.shutdown()`` shuts the socket's read side, which wakes a
    blocked read, once the response headers are in.
    """
    shutdown = getattr(getattr(response_stream, "_raw_stream", None), "shutdown", None)
    if not callable(shutdown):
        return noop

    def abort() -> None:
        try:
            shutdown()
        except (ValueError, RuntimeError, OSError):
            pass  # already released or closed: nothing to wake

    return cancel.register_abort(abort)


def noop() -> None:
    """An unregister function with nothing to unregister."""
    return None
