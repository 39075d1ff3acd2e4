"""The Anthropic model's HTTP client (``abortable_http_client``): the default certificate
check is made once per process, not once per model (it reads the whole CA bundle: 20-25 ms,
paid at each request by a route that builds its model per request), and still follows
``SSL_CERT_FILE``; a client given its own ``verify`` keeps it."""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

import httpx2
import pytest

from agent_sync.models import AnthropicModel
from agent_sync.models.anthropic import abortable_http_client


def _context(client: httpx2.Client) -> Any:
    """The SSL context the client's connections are made with (httpcore2's pool keeps it)."""
    return client._transport._pool._ssl_context  # type: ignore[attr-defined]


def test_every_model_shares_one_default_certificate_check() -> None:
    first = AnthropicModel("c", client_args={"base_url": "https://a.test", "api_key": "k"})
    second = AnthropicModel("c", client_args={"base_url": "https://b.test", "api_key": "k"})
    try:
        shared = _context(first._client._client)
        assert _context(second._client._client) is shared
        assert shared.verify_mode == ssl.CERT_REQUIRED and shared.check_hostname
    finally:
        first.close()
        second.close()


def test_ssl_cert_file_is_still_read_and_an_own_verify_is_kept(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    default = abortable_http_client()
    with monkeypatch.context() as patched:
        patched.setenv("SSL_CERT_FILE", str(tmp_path / "missing.pem"))
        with pytest.raises(OSError):  # read, as httpx2 reads it: a missing file fails
            abortable_http_client()
    again = abortable_http_client()
    own = ssl.create_default_context()
    mine = abortable_http_client(verify=own)
    try:
        assert _context(again) is _context(default)
        assert _context(mine) is own
    finally:
        for client in (default, again, mine):
            client.close()
