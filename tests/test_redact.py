"""The one redaction rule: registered secrets and secret-shaped tokens never reach an
error's str/repr/args/body, nor a log record that passes the filter."""

from __future__ import annotations

import logging

import pytest

from agent_sync._redact import MASK, RedactingFilter, redact, register_secret
from agent_sync.errors import ModelError, ModelHTTPError, ModelThrottledError


def test_registered_secret_is_masked_in_any_format() -> None:
    register_secret("plain-secret-value-1234")
    assert redact("echo: plain-secret-value-1234!") == f"echo: {MASK}!"


@pytest.mark.parametrize(
    "text",
    [
        "Incorrect API key provided: sk-ant-api03-abcdefghijklmnop",
        "{'Authorization': 'Bearer abcdefghijklmnop1234'}",
        "x-api-key: abcdefghijklmnop1234",
        "'X-Amz-Security-Token': b'FwoGZXIvYXdzEXAMPLETOKEN'",
        '{"aws_secret_access_key": "wJalrXUtnFEMI/K7MDENG/bPxRfiCY"}',
    ],
)
def test_secret_shapes_are_masked_without_registration(text: str) -> None:
    clean = redact(text)
    for secret in ("abcdefghijklmnop", "FwoGZXIvYXdzEXAMPLETOKEN", "wJalrXUtnFEMI"):
        assert secret not in clean
    assert MASK in clean


def test_every_error_surface_is_redacted() -> None:
    register_secret("echoed-key-0123456789")
    for error in (
        ModelError("bad key echoed-key-0123456789"),
        ModelHTTPError("bad key echoed-key-0123456789", status=401, body="echoed-key-0123456789"),
        ModelThrottledError("slow down echoed-key-0123456789", body="echoed-key-0123456789"),
    ):
        surfaces = [str(error), repr(error), repr(error.args), str(getattr(error, "body", ""))]
        assert all("echoed-key-0123456789" not in surface for surface in surfaces), surfaces


def test_filter_rewrites_the_formatted_record() -> None:
    register_secret("logged-secret-0123456789")
    record = logging.LogRecord(
        "botocore.endpoint",
        logging.DEBUG,
        __file__,
        1,
        "headers=%s",
        ({"k": "logged-secret-0123456789"},),
        None,
    )
    assert RedactingFilter().filter(record) is True
    assert "logged-secret-0123456789" not in record.getMessage()
    assert record.args is None


class _SDKError(Exception):
    def __init__(self, message: str, body: dict[str, object]) -> None:
        super().__init__(message)
        self.message = message
        self.body = body


def test_scrub_exception_redacts_the_whole_chain_in_place() -> None:
    import traceback

    from agent_sync._redact import scrub_exception

    secret = "chained-" + "secret-0123456789"  # not spelled whole in the printed source
    register_secret(secret)
    try:
        try:
            raise OSError(f"inner {secret}")
        except OSError as inner:
            raise _SDKError(
                f"outer {secret}",
                {"error": {"message": [secret]}},
            ) from inner
    except _SDKError as exc:
        caught = exc
    assert scrub_exception(caught) is caught
    try:
        raise ModelError("mapped") from caught
    except ModelError as mapped:
        printed = "".join(traceback.format_exception(mapped))
    assert secret not in printed
    assert secret not in repr((caught.message, caught.body, caught.args))
    assert MASK in printed
