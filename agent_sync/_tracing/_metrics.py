"""The GenAI client metrics of model calls: ``gen_ai.client.token.usage`` (histogram,
``{token}``, one record per token type) and ``gen_ai.client.operation.duration``
(histogram, seconds; ``error.type`` when the call failed or was cut short), with the
conventions' attributes (operation and provider name, request and response model, server
address and port). The instruments are made once per meter, with the bucket boundaries the
conventions advise.

Imported only once OpenTelemetry is found. Thread-safety: :func:`instruments` may race
(two threads make the same instruments; the SDK returns the one registered first).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from . import _names as n

if TYPE_CHECKING:
    from opentelemetry.metrics import Histogram, Meter

__all__ = ["Instruments", "instruments"]

_TOKEN_BUCKETS = [4.0**k for k in range(14)]  # 1, 4, 16 ... 67108864
_DURATION_BUCKETS = [0.01 * 2**k for k in range(14)]  # 0.01, 0.02 ... 81.92 s


class Instruments(NamedTuple):
    """A meter's two histograms."""

    token_usage: Histogram
    duration: Histogram

    def record_call(
        self,
        attributes: dict[str, Any],
        *,
        duration_s: float,
        tokens: tuple[int | None, int | None],
        error_type: str | None,
    ) -> None:
        """Record one model call: its duration (with ``error.type`` if it failed) and the
        input and output tokens it reported."""
        inputs, outputs = tokens
        if inputs is not None:
            self.token_usage.record(inputs, {**attributes, n.TOKEN_TYPE: n.TOKEN_INPUT})
        if outputs is not None:
            self.token_usage.record(outputs, {**attributes, n.TOKEN_TYPE: n.TOKEN_OUTPUT})
        if error_type is not None:
            attributes = {**attributes, n.ERROR_TYPE: error_type}
        self.duration.record(max(duration_s, 0.0), attributes)


_cache: tuple[object, Instruments] | None = None


def instruments(meter: Meter) -> Instruments:
    """The histograms of ``meter`` (made on first use, then cached for it)."""
    global _cache
    cached = _cache
    if cached is not None and cached[0] is meter:
        return cached[1]
    made = Instruments(
        token_usage=meter.create_histogram(
            n.CLIENT_TOKEN_USAGE,
            unit="{token}",
            description="Number of input and output tokens used.",
            explicit_bucket_boundaries_advisory=_TOKEN_BUCKETS,
        ),
        duration=meter.create_histogram(
            n.CLIENT_OPERATION_DURATION,
            unit="s",
            description="GenAI operation duration.",
            explicit_bucket_boundaries_advisory=_DURATION_BUCKETS,
        ),
    )
    _cache = (meter, made)
    return made
