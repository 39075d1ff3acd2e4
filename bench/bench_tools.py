"""Tool input validation cost (offline): what checking the model's input adds to a tool call.

    python bench/bench_tools.py [--repeats 20000]

* per call, checking a plain ``(city: str, days: int)`` input: ``Tool.validate_input``
  (pydantic from the signature since issue 17; the JSON-schema validator before), and the
  same input against an explicit ``input_schema=`` (always the JSON-schema validator);
* per call, a typed input (a pydantic model, a ``date``, an ``Annotated`` constraint, a
  list of models) when this tree has typed parameters;
* a whole ``invoke`` with one model -> tool -> model cycle of the plain tool, median;
* cancel latency of an ``async def`` tool awaiting forever (grace period 60 s): from
  ``cancel()`` to ``invoke()`` returning, which only the task's cancel makes short.

Run it in two trees (``PYTHONPATH=<tree>``) to compare; interleave the runs on a loaded box.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import report  # noqa: E402
from pydantic import BaseModel, Field  # noqa: E402

from agent_sync import Agent, UsageError, tool  # noqa: E402
from agent_sync.testing import ScriptedModel  # noqa: E402

PLAIN_INPUT = {"city": "Oslo", "days": 3}


@tool
def forecast(city: str, days: int = 1) -> str:
    """Forecast for a city."""
    return f"{city}: {days} days of sun"


@tool(
    name="forecast_schema",
    input_schema={
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city"],
    },
)
def forecast_schema(city: str, days: int = 1) -> str:
    """Forecast for a city (explicit schema)."""
    return f"{city}: {days} days of sun"


class Leg(BaseModel):
    origin: str
    destination: str


def _typed_tool() -> Any:
    def book(legs: list[Leg], seats: Annotated[int, Field(ge=1, le=9)], when: datetime.date) -> str:
        """Book legs."""
        return "ok"

    try:
        return tool(book)
    except UsageError:  # a tree without typed parameters
        return None


TYPED_INPUT = {
    "legs": [{"origin": "OSL", "destination": "BER"}, {"origin": "BER", "destination": "OSL"}],
    "seats": 2,
    "when": "2026-12-01",
}


def per_call_us(check: Callable[[], object], repeats: int) -> float:
    """Median over 5 rounds of the mean cost of one call, in microseconds."""
    rounds = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(repeats):
            check()
        rounds.append((time.perf_counter() - start) / repeats * 1e6)
    return statistics.median(rounds)


def cycle_us(repeats: int) -> float:
    """Median of ``invoke`` with one tool cycle of the plain tool, in microseconds."""
    turn = {"tool_calls": [{"name": "forecast", "input": PLAIN_INPUT}]}
    samples = []
    for _ in range(repeats):
        agent = Agent(ScriptedModel([turn, "done"]), tools=[forecast])
        start = time.perf_counter()
        agent.invoke("go")
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1e6


def async_cancel_s() -> float:
    """Seconds from ``cancel()`` to ``invoke()`` returning, for an async tool at its await."""
    entered = threading.Event()
    called: list[float] = []

    async def forever(url: str) -> str:
        entered.set()
        await asyncio.Event().wait()
        return "never"

    agent = Agent(
        ScriptedModel([{"tool_calls": [{"name": "forever", "input": {"url": "u"}}]}]),
        tools=[tool(forever)],
        tool_grace_period=60,
    )

    def cancel() -> None:
        entered.wait(30)
        called.append(time.perf_counter())
        agent.cancel("bench")

    canceller = threading.Thread(target=cancel)
    canceller.start()
    agent.invoke("go")
    returned = time.perf_counter()
    canceller.join()
    return returned - called[0]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=20000)
    args = parser.parse_args()
    assert forecast.validate_input(PLAIN_INPUT) == []
    print("== tool input check, per call (median of 5 rounds)")
    plain = per_call_us(lambda: forecast.validate_input(PLAIN_INPUT), args.repeats)
    print(f"  signature (city: str, days: int)      {plain:8.2f} us")
    explicit = per_call_us(lambda: forecast_schema.validate_input(PLAIN_INPUT), args.repeats)
    print(f"  explicit input_schema (jsonschema)    {explicit:8.2f} us")
    typed = _typed_tool()
    if typed is not None:
        assert typed.validate_input(TYPED_INPUT) == []
        cost = per_call_us(lambda: typed.validate_input(TYPED_INPUT), args.repeats)
        print(f"  typed (models, date, constraint)      {cost:8.2f} us")
    else:
        print("  typed (models, date, constraint)      not supported in this tree")
    print(f"== invoke with one tool cycle (plain tool), median: {cycle_us(300):8.1f} us")
    report("== async tool cancel (grace 60 s)", [async_cancel_s() for _ in range(30)])


if __name__ == "__main__":
    main()
