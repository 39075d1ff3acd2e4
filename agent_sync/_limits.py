"""Usage limits: a run's budget of requests, tokens, tool calls and dollars.

:class:`UsageLimits` is what a user gives (``Agent(..., usage_limits=...)``, or per call);
:class:`Budget` is the checked form a run holds: the limits and, with ``cost_usd``, the
price of the agent's model, looked up in ``genai-prices`` (the ``prices`` extra) when the
agent (or the call) is built, so an unknown model is refused before anything is sent. A
:class:`~agent_sync.models.FallbackModel` is priced per call with the model that answered
it (every model of the chain must be one genai-prices knows).

The run asks the budget at three points (``run/_model_step.py``, ``run/_steps.py``): before
each model call (:meth:`Budget.before_call`: a limit already reached stops the run), after
each response (:meth:`Budget.after_response`: a limit passed stops the run before anything
the response asked for runs) and before a tool batch (:meth:`Budget.before_tools`: a batch
that would pass ``tool_calls`` does not start). Each check is a few comparisons per model
call, never per stream chunk.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, Literal, TypeAlias

from .errors import UsageError
from .messages import Usage

__all__ = ["Budget", "LimitName", "UsageLimits", "checked_budget", "not_run_text", "stopped_text"]

LimitName: TypeAlias = Literal[
    "requests", "input_tokens", "output_tokens", "total_tokens", "tool_calls", "cost_usd"
]

_TOKEN_KEYS: dict[str, str] = {
    "input_tokens": "inputTokens",
    "output_tokens": "outputTokens",
    "total_tokens": "totalTokens",
}


@dataclass(frozen=True)
class UsageLimits:
    """A run's budget: it stops cleanly (``result.stop_reason == "usage_limit"``,
    ``result.usage_limit`` naming the limit) rather than spend past one.

    Every limit counts per run (a new ``invoke`` starts from zero); ``None`` means no
    limit. See ``docs/usage_limits.md``.

    Args:
        requests: Model calls (a retried call counts once).
        input_tokens: ``usage["inputTokens"]`` summed over the run (sub-agents' included,
            as in ``result.usage``).
        output_tokens: ``usage["outputTokens"]`` summed likewise.
        total_tokens: ``usage["totalTokens"]`` summed likewise.
        tool_calls: Tool calls run; a batch that would pass it does not start.
        cost_usd: Dollars spent on this run's model calls, priced by ``genai-prices``
            (the ``prices`` extra); the model must be one it knows.

    Raises:
        UsageError: A limit that is not a non-negative number (an int for counts).
    """

    requests: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None
    tool_calls: int | None = None
    cost_usd: float | None = None

    def __post_init__(self) -> None:
        for item in fields(self):
            value = getattr(self, item.name)
            if value is None:
                continue
            if item.name == "cost_usd":
                number = isinstance(value, (int, float)) and not isinstance(value, bool)
                if not number or not math.isfinite(value) or value < 0:
                    raise UsageError(
                        f"UsageLimits(cost_usd=...) must be a non-negative number of dollars, "
                        f"got {value!r}"
                    )
            elif not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise UsageError(
                    f"UsageLimits({item.name}=...) must be a non-negative int or None, "
                    f"got {value!r}"
                )


_NOT_RUN: dict[str, str] = {
    "requests": "request",
    "input_tokens": "input token",
    "output_tokens": "output token",
    "total_tokens": "total token",
    "tool_calls": "tool call",
    "cost_usd": "cost",
}


def not_run_text(limit: str) -> str:
    """The error text of a tool call a usage limit kept from running."""
    return f"not run: {_NOT_RUN.get(limit, limit)} limit"


def stopped_text(limit: str) -> str:
    """The assistant message that closes a run a usage limit stopped."""
    return f"Stopped: reached the usage limit ({limit})."


# (module, class name) -> (genai-prices provider id, whether our inputTokens leave out the
# cached tokens, which genai-prices counts in input_tokens); subclasses are found by MRO.
_PROVIDERS: dict[tuple[str, str], tuple[str, bool]] = {
    ("agent_sync.models.anthropic", "AnthropicModel"): ("anthropic", True),
    ("agent_sync.models.bedrock", "BedrockModel"): ("aws", True),
    ("agent_sync.models.openai", "OpenAIModel"): ("openai", False),
    ("agent_sync.models.responses", "OpenAIResponsesModel"): ("openai", False),
    ("agent_sync.models.gemini", "GeminiModel"): ("google", False),
}


@dataclass(frozen=True)
class _Price:
    """How to price one model's calls with genai-prices."""

    model_ref: str
    provider_id: str
    cache_excluded: bool

    def of(self, usage: Usage) -> float:
        """The dollars of one call's ``usage``."""
        from genai_prices import Usage as PriceUsage
        from genai_prices import calc_price

        read = int(usage.get("cacheReadInputTokens", 0) or 0)
        write = int(usage.get("cacheWriteInputTokens", 0) or 0)
        inputs = int(usage.get("inputTokens", 0) or 0)
        if self.cache_excluded:  # genai-prices' input_tokens is the whole prompt
            inputs += read + write
        priced = PriceUsage(
            input_tokens=inputs,
            output_tokens=int(usage.get("outputTokens", 0) or 0),
            cache_read_tokens=read or None,
            cache_write_tokens=write or None,
        )
        calculation = calc_price(priced, self.model_ref, provider_id=self.provider_id)
        return float(calculation.total_price)


@dataclass(frozen=True)
class _ChainPrice:
    """How to price the calls of a :class:`~agent_sync.models.FallbackModel`: each call
    with the model that answered it (``metrics.model_ids``), every model of the chain
    priced when the run starts."""

    prices: tuple[tuple[str, _Price], ...]  # (model id, its price), in the chain's order

    def of(self, usage: Usage, model_id: str | None = None) -> float:
        """The dollars of one call's ``usage``, answered by ``model_id``; a call whose
        model is not known is priced at the chain's dearest (a cap never under-counts)."""
        for known, price in self.prices:
            if known == model_id:
                return price.of(usage)
        return max(price.of(usage) for _, price in self.prices)


def _price_of(model: object) -> _Price | _ChainPrice:
    """The price of ``model``'s calls; ``UsageError`` if genai-prices cannot price it (for
    a fallback chain: any of its models)."""
    chain = _chain_models(model)
    if chain is not None:
        prices: list[tuple[str, _Price]] = []
        for member in chain:
            price = _price_of(member)
            if isinstance(price, _ChainPrice):  # a chain inside a chain: its models
                prices.extend(price.prices)
            else:
                prices.append((price.model_ref, price))
        return _ChainPrice(tuple(prices))
    return _single_price(model)


def _chain_models(model: object) -> tuple[object, ...] | None:
    """The models of a ``FallbackModel`` (found by name: this layer imports no model)."""
    for cls in type(model).__mro__:
        if (cls.__module__, cls.__qualname__) == ("agent_sync.models.fallback", "FallbackModel"):
            return tuple(getattr(model, "models", ()))
    return None


def _single_price(model: object) -> _Price:
    """The price of one model's calls; ``UsageError`` if genai-prices cannot price it."""
    try:
        import genai_prices  # noqa: F401
    except ImportError as exc:
        raise UsageError(
            "UsageLimits(cost_usd=...) needs genai-prices, which is not installed: this part "
            "of agent_sync needs the 'prices' extra (pip install 'agent_sync[prices]')"
        ) from exc
    provider: tuple[str, bool] | None = None
    for cls in type(model).__mro__:
        provider = _PROVIDERS.get((cls.__module__, cls.__qualname__))
        if provider is not None:
            break
    model_id = getattr(model, "model_id", None)
    if provider is None or not isinstance(model_id, str):
        raise UsageError(
            f"UsageLimits(cost_usd=...) needs a model genai-prices can price (AnthropicModel, "
            f"BedrockModel, OpenAIModel, OpenAIResponsesModel, GeminiModel, or a FallbackModel "
            f"of them), got "
            f"{type(model).__name__}"
        )
    provider_id, cache_excluded = provider
    base_url = getattr(model, "base_url", None)
    if provider_id == "openai" and isinstance(base_url, str) and ".openai.azure.com" in base_url:
        provider_id = "azure"
    price = _Price(model_id, provider_id, cache_excluded)
    try:
        price.of({"inputTokens": 0, "outputTokens": 0, "totalTokens": 0})
    except LookupError as exc:
        raise UsageError(
            f"UsageLimits(cost_usd=...): genai-prices does not know the model {model_id!r} "
            f"of provider {provider_id!r}, so its cost cannot be counted; update genai-prices "
            "or drop cost_usd"
        ) from exc
    return price


@dataclass(frozen=True)
class Budget:
    """The checked limits a run holds, with the model's price when ``cost_usd`` is set."""

    limits: UsageLimits
    price: _Price | _ChainPrice | None = None

    def cost(self, usage: Usage | None, model_id: str | None = None) -> float:
        """The dollars of one model call (0 without ``cost_usd``), answered by ``model_id``
        (which prices it, when the model is a fallback chain)."""
        if self.price is None or not usage:
            return 0.0
        if isinstance(self.price, _ChainPrice):
            return self.price.of(usage, model_id)
        return self.price.of(usage)

    def before_call(self, requests: int, usage: Usage, cost: float) -> LimitName | None:
        """The limit reached before a model call (the next call would pass it), if any."""
        limits = self.limits
        if limits.requests is not None and requests >= limits.requests:
            return "requests"
        for name, key in _TOKEN_KEYS.items():
            limit = getattr(limits, name)
            if limit is not None and _tokens(usage, key) >= limit:
                return name  # type: ignore[return-value]
        if limits.cost_usd is not None and cost >= limits.cost_usd:
            return "cost_usd"
        return None

    def after_response(self, usage: Usage, cost: float) -> LimitName | None:
        """The limit a response passed, if any."""
        limits = self.limits
        for name, key in _TOKEN_KEYS.items():
            limit = getattr(limits, name)
            if limit is not None and _tokens(usage, key) > limit:
                return name  # type: ignore[return-value]
        if limits.cost_usd is not None and cost > limits.cost_usd:
            return "cost_usd"
        return None

    def before_tools(self, done: int, batch: int) -> LimitName | None:
        """``"tool_calls"`` if a batch of ``batch`` calls after ``done`` would pass it."""
        limit = self.limits.tool_calls
        return "tool_calls" if limit is not None and done + batch > limit else None


def _tokens(usage: Usage, key: str) -> int:
    value: Any = usage.get(key, 0)
    return int(value or 0)


def checked_budget(limits: object, model: object) -> Budget | None:
    """The budget of ``limits`` for ``model`` (``None``: no limits).

    Raises:
        UsageError: ``limits`` is not a :class:`UsageLimits`, or ``cost_usd`` is set and
            genai-prices is missing or cannot price ``model``.
    """
    if limits is None:
        return None
    if not isinstance(limits, UsageLimits):
        raise UsageError(f"usage_limits must be a UsageLimits or None, got {type(limits).__name__}")
    price = _price_of(model) if limits.cost_usd is not None else None
    return Budget(limits, price)
