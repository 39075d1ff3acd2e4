"""The abortable ``httpx2.Client`` behind :class:`~.anthropic.AnthropicModel`.

:func:`abortable_http_client` builds the client the model uses by default (and that callers
may pass to their own ``anthropic.Anthropic``): every connection goes through an
:class:`~._abort.httpx.AbortableTransport`, so ``cancel()`` can shut its socket down while
it connects, waits for headers or waits for the next chunk.

Like the SDK's own client it sets TCP keep-alive on its sockets and honours
``HTTPS_PROXY``/``HTTP_PROXY``/``ALL_PROXY``/``NO_PROXY``: httpx2 reads those only when it
builds the transport itself, and here we build it, so the same proxies are mounted as
abortable transports. Proxy passwords (given or from the environment) are registered with
:mod:`agent_sync._redact` so no error or log shows them.
"""

from __future__ import annotations

import os
import socket
import ssl
import threading
from collections.abc import Mapping
from typing import Any

import httpx2

from .._redact import register_secret
from ._abort.httpx import AbortableTransport

try:  # the SDK's own client reads the environment's proxies with this very function
    from httpx2._utils import get_environment_proxies
except ImportError:  # pragma: no cover - a future httpx2 without it: no env proxies
    get_environment_proxies = None  # type: ignore[assignment]

__all__ = ["DEFAULT_TIMEOUT", "abortable_http_client"]

DEFAULT_TIMEOUT = httpx2.Timeout(connect=10.0, read=300.0, write=60.0, pool=30.0)
"""Connect 10 s; read 300 s between two chunks (the API sends pings while it thinks)."""


def _keepalive_options() -> list[tuple[int, int, int]]:
    # As the SDK's default client: detect dead peers on long, quiet streams.
    options = [(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)]
    for name, value in (("TCP_KEEPIDLE", 60), ("TCP_KEEPINTVL", 60), ("TCP_KEEPCNT", 5)):
        constant = getattr(socket, name, None)
        if constant is not None:
            options.append((socket.IPPROTO_TCP, constant, value))
    return options


def abortable_http_client(**kwargs: Any) -> httpx2.Client:
    """An ``httpx2.Client`` whose requests ``cancel()`` can abort at any point.

    Pass it as ``client_args={"http_client": ...}`` or to your own ``anthropic.Anthropic``
    when you need client settings ``AnthropicModel`` does not expose.

    Like the SDK's own client, it honours ``HTTPS_PROXY``/``HTTP_PROXY``/``ALL_PROXY``/
    ``NO_PROXY`` (httpx2's rules, read now) unless ``proxy=`` or ``trust_env=False`` is
    given; proxied connections (forward or ``CONNECT`` tunnels) stay abortable.

    Args:
        **kwargs: ``httpx2.Client`` arguments; ``verify``, ``proxy``, ``limits`` and
            ``socket_options`` configure the transport.

    Returns:
        A client (close it when done, or let the model own it).
    """
    transport_args: dict[str, Any] = {
        key: kwargs.pop(key)
        for key in ("verify", "cert", "proxy", "limits", "socket_options", "http1", "http2")
        if key in kwargs
    }
    if not {"verify", "cert", "http2"} & transport_args.keys():
        transport_args["verify"] = _default_verify()
    transport_args.setdefault("socket_options", _keepalive_options())
    limits = httpx2.Limits(max_connections=1000, max_keepalive_connections=100)
    transport_args.setdefault("limits", limits)
    kwargs.setdefault("timeout", DEFAULT_TIMEOUT)
    kwargs.setdefault("follow_redirects", True)
    if transport_args.get("proxy") is not None:
        _register_proxy_secret(transport_args["proxy"])
    elif kwargs.get("trust_env", True):
        # httpx2 reads env proxies only when it builds the transport itself; we build it
        # (to make it abortable), so mount the same proxies the SDK's client would.
        mounts = _environment_proxy_mounts(transport_args)
        mounts.update(kwargs.pop("mounts", None) or {})
        if mounts:
            kwargs["mounts"] = mounts
    return httpx2.Client(transport=AbortableTransport(**transport_args), **kwargs)


_VERIFY_LOCK = threading.Lock()
_VERIFY: dict[tuple[str | None, str | None], ssl.SSLContext] = {}


def _default_verify() -> ssl.SSLContext:
    """httpx2's default certificate check (``verify=True``: the system's CAs, or
    ``SSL_CERT_FILE``/``SSL_CERT_DIR``), made once per process and per value of those two.

    Making one reads the whole CA bundle (20-25 ms), and each model paid it, a chat route
    that builds a model per request at every request. Clients share it safely: nothing
    changes it once made but the ALPN protocols each new connection sets, the same
    ``http/1.1`` for every client that shares it (one asking for HTTP/2, or for its own
    ``verify`` or ``cert``, gets a context of its own, as before)."""
    key = (os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
    with _VERIFY_LOCK:
        context = _VERIFY.get(key)
        if context is None:
            context = _VERIFY[key] = httpx2.create_ssl_context()
        return context


def _environment_proxy_mounts(
    transport_args: Mapping[str, Any],
) -> dict[str, httpx2.BaseTransport | None]:
    """``HTTPS_PROXY``/``HTTP_PROXY``/``ALL_PROXY``/``NO_PROXY`` as httpx2 mounts.

    The patterns are httpx2's own (so the SDK's default client and ours agree); ``None``
    (a ``NO_PROXY`` host) means the client's direct, abortable transport.
    """
    if get_environment_proxies is None:  # pragma: no cover
        return {}
    mounts: dict[str, httpx2.BaseTransport | None] = {}
    for pattern, url in get_environment_proxies().items():
        if url is None:
            mounts[pattern] = None
        else:
            _register_proxy_secret(url)
            mounts[pattern] = AbortableTransport(proxy=url, **transport_args)
    return mounts


def _register_proxy_secret(proxy: Any) -> None:
    url = getattr(proxy, "url", proxy)
    try:
        register_secret(httpx2.URL(str(url)).password)
    except (TypeError, ValueError):
        pass  # not a URL httpx2 parses: it will say so when it is used
