"""The offline demo behind ``python -m agent_sync demo``: no API key, no network.

1. An agent with a weather tool streams its answer to the terminal.
2. A second run is cancelled from another thread by a ``threading.Timer`` while the model
   is mid-answer, and the resulting (valid) history is printed.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Literal, TextIO

from .agent import Agent
from .events import TextDelta, ToolEnd, ToolStart
from .messages import validate_history
from .testing.scripted import ScriptedModel
from .tools import tool

CITY_TEMPERATURES = {"oslo": 21, "lima": 18, "cairo": 34}


@tool
def get_weather(city: str, unit: Literal["C", "F"] = "C") -> str:
    """Current temperature in a city.

    Args:
        city: The city, e.g. "Oslo".
        unit: "C" or "F".
    """
    celsius = CITY_TEMPERATURES.get(city.lower(), 15)
    value = celsius if unit == "C" else round(celsius * 9 / 5 + 32)
    return f"{value} degrees {unit} and clear skies in {city}"


def demo_model() -> ScriptedModel:
    """A scripted model: a tool call, an answer, then a long answer it is stopped in."""
    return ScriptedModel(
        [
            {
                "text": "Let me check the weather. ",
                "tool_calls": [{"name": "get_weather", "input": {"city": "Oslo"}}],
                "chunk_size": 4,
                "chunk_delay": 0.03,
            },
            {
                "text": "It is 21 degrees C with clear skies in Oslo: "
                "a fine day for a walk by the fjord.",
                "chunk_size": 4,
                "chunk_delay": 0.03,
            },
            {
                "text": "Here is a very long story about fjords, glaciers and the midnight sun, "
                * 8,
                "chunk_size": 4,
                "chunk_delay": 0.03,
            },
        ]
    )


def run(out: TextIO = sys.stdout, cancel_after: float = 0.6) -> int:
    """Run both parts of the demo, writing to ``out``. Returns a process exit code."""
    agent = Agent(demo_model(), tools=[get_weather], system_prompt="You are a weather assistant.")

    out.write("== 1. Streaming an answer (the model calls a tool on the way) ==\n")
    out.write("> What's the weather in Oslo?\n")
    for event in agent.stream("What's the weather in Oslo?"):
        if isinstance(event, TextDelta):
            out.write(event.text)
            out.flush()
        elif isinstance(event, ToolStart):
            out.write(f"\n  [tool] {event.tool_use['name']}({json.dumps(event.tool_use['input'])})")
        elif isinstance(event, ToolEnd):
            out.write(f" -> {event.result['content'][0].get('text', '')}\n")
    out.write("\n\n")

    out.write(f"== 2. Cancelled from another thread by threading.Timer({cancel_after}) ==\n")
    out.write("> Tell me a long story.\n")
    fired: list[float] = []

    def cancel_from_timer_thread() -> None:
        fired.append(time.perf_counter())
        agent.cancel("timer")

    timer = threading.Timer(cancel_after, cancel_from_timer_thread)
    timer.start()
    stream = agent.stream("Tell me a long story.")
    for event in stream:
        if isinstance(event, TextDelta):
            out.write(event.text)
            out.flush()
    ended = time.perf_counter()
    timer.join()
    result = stream.result
    assert result is not None
    latency_ms = (ended - fired[0]) * 1000 if fired else float("nan")
    out.write(f"\n\nstop_reason={result.stop_reason!r} cancel_reason={result.cancel_reason!r}")
    out.write(f" (cancel() -> stream ended in {latency_ms:.2f} ms)\n")
    out.write(f"agent ready for the next call: {not agent.is_running}\n\n")

    out.write("== History (Converse shape, valid for every provider) ==\n")
    for message in agent.messages:
        out.write(json.dumps(message)[:160] + "\n")
    problems = validate_history(agent.messages)
    out.write(f"validate_history: {'OK' if not problems else problems}\n")
    return 0 if not problems and result.stop_reason == "cancelled" else 1
