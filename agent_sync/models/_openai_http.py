"""The HTTP side both OpenAI wires share (Chat Completions and Responses), written once.

:class:`OpenAITransport` owns the ``requests`` session (its adapters made abortable, the
SDK-style retries off), the credentials and how they are sent, and one ``POST`` that turns
an error status into the mapped error. Each model builds its body and reads its stream;
everything between runs here, inside the caller's ``mapped_errors`` block and
``abort_on_cancel`` handle (see :mod:`._abort.urllib3`).

Credentials: OpenAI and compatible servers take ``Authorization: Bearer <key>``; Azure
OpenAI (a ``base_url`` whose host ends with ``.openai.azure.com`` or
``.cognitiveservices.azure.com``) takes the key as the ``api-key`` header instead, and its
key defaults to ``AZURE_OPENAI_API_KEY`` (``OPENAI_API_KEY`` elsewhere). Every key and the value
of every credential-looking header is registered with the one redaction function at
construction, so none reaches a log, a repr or an error.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import requests

from .._redact import register_secret
from ..errors import ModelError
from ._abort.urllib3 import RequestAbort
from ._http import mount_abortable, post_streaming, register_header_secrets
from ._openai_errors import PROVIDER, http_error

__all__ = ["AZURE_HOST_SUFFIXES", "OpenAITransport", "is_azure"]

logger = logging.getLogger(__name__)

OPENAI_BASE_URL = "https://api.openai.com/v1"
AZURE_HOST_SUFFIXES = (".openai.azure.com", ".cognitiveservices.azure.com")
"""Hosts whose API takes the key as the ``api-key`` header (Azure OpenAI)."""


def is_azure(base_url: str) -> bool:
    """Whether ``base_url`` is an Azure OpenAI endpoint (the key goes in ``api-key``)."""
    host = (urlsplit(base_url).hostname or "").lower()
    return host.endswith(AZURE_HOST_SUFFIXES)


class OpenAITransport:
    """One model's session, credentials and ``POST`` to ``url``. Thread-safe (the session's
    pool is; everything else is read-only after construction).

    Args:
        url: The endpoint (``{base_url}/chat/completions`` or ``{base_url}/responses``).
        base_url: The endpoint root (decides Azure and the missing-key check).
        api_key: The key, or ``None`` for the environment's.
        session: A caller's session (its adapters are made abortable), or ``None``.
        timeout: ``(connect, read)`` seconds.
        headers: Extra headers sent with every request.
    """

    __slots__ = ("_auth", "_headers", "_no_credentials", "_owns_session", "session", "timeout",
                 "url")  # fmt: skip

    def __init__(
        self,
        url: str,
        *,
        base_url: str,
        api_key: str | None,
        session: requests.Session | None,
        timeout: tuple[float, float],
        headers: Mapping[str, str] | None,
    ) -> None:
        self.url = url
        self.timeout = timeout
        azure = is_azure(base_url)
        if api_key is None:
            # Never send an OpenAI key to Azure, nor the reverse.
            api_key = os.environ.get("AZURE_OPENAI_API_KEY" if azure else "OPENAI_API_KEY")
        self._headers = {"accept": "text/event-stream", **(headers or {})}
        self._owns_session = session is None
        self.session = session if session is not None else requests.Session()
        # Every credential we were given or resolved: errors and logs redact them by value.
        register_secret(api_key)
        register_header_secrets(self._headers)
        register_header_secrets(self.session.headers)
        self._auth: dict[str, str] = {}
        if api_key:
            self._auth = {"api-key": api_key} if azure else {"authorization": f"Bearer {api_key}"}
        mount_abortable(self.session)
        # OpenAI itself refuses a request without a key: say so before sending anything
        # (local servers at another base_url usually need none).
        given = {name.lower() for name in (*self._headers, *self.session.headers)}
        self._no_credentials = not api_key and (
            (
                urlsplit(base_url).hostname == urlsplit(OPENAI_BASE_URL).hostname
                and "authorization" not in given
            )
            or (azure and "api-key" not in given and "authorization" not in given)
        )

    def check_credentials(self) -> None:
        """Raise before anything is sent when the endpoint certainly needs a key we lack.

        Raises:
            ModelError: No key for OpenAI's own endpoint or for Azure (not retryable).
        """
        if self._no_credentials:
            raise ModelError(
                "no OpenAI API key: set the OPENAI_API_KEY (Azure: AZURE_OPENAI_API_KEY) "
                "environment variable or pass api_key= (nothing was sent; a local server at "
                "another base_url needs none)",
                provider=PROVIDER,
                retryable=False,
            )

    def post(self, body: dict[str, Any], abort: RequestAbort) -> requests.Response:
        """``POST`` ``body`` as JSON, streaming; an error status raises the mapped error.

        Runs inside the caller's ``mapped_errors`` block: ``requests`` errors leave it
        mapped, a cancel as :class:`~agent_sync.cancel.CancelledError`.
        """
        headers = {**self._headers, **self._auth}
        return post_streaming(
            self.session, self.url, body, headers, self.timeout, abort, http_error
        )

    def close(self) -> None:
        """Close the session (and its pooled connections) if this transport created it."""
        if self._owns_session:
            self.session.close()
