"""Command line: ``python -m agent_sync demo`` (or ``agent-sync demo``) runs the offline demo.

The demo needs no API key and no network:

1. An agent with a weather tool streams its answer to the terminal.
2. A second run is cancelled from another thread by a ``threading.Timer`` while the model
   is mid-answer, and the resulting (valid) history is printed.

It is written against the public API only (``Agent``, ``tool``, ``validate_history``,
``agent_sync.events``, ``agent_sync.testing.ScriptedModel``), so this file doubles as an
example. It lives here rather than in ``examples/`` because ``examples/`` is not installed
and the command must work after a plain ``pip install agent_sync``.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from typing import Literal, TextIO

from agent_sync import Agent, AgentResult, tool, validate_history
from agent_sync.events import Done, TextDelta, ToolEnd, ToolStart
from agent_sync.testing import ScriptedModel

_TEMPERATURES_C = {"oslo": 21, "lima": 18, "cairo": 34}
_SLOW = {"chunk_size": 4, "chunk_delay": 0.03}  # slow enough to watch, and to cancel mid-answer


@tool
def get_weather(city: str, unit: Literal["C", "F"] = "C") -> str:
    """Current temperature in a city.

    Args:
        city: The city, e.g. "Oslo".
        unit: "C" or "F".
    """
    celsius = _TEMPERATURES_C.get(city.lower(), 15)
    value = celsius if unit == "C" else round(celsius * 9 / 5 + 32)
    return f"{value} degrees {unit} and clear skies in {city}"


def _demo_model() -> ScriptedModel:
    """A tool call, an answer, then a long answer that the demo cancels."""
    story = "Here is a very long story about fjords, glaciers and the midnight sun, " * 8
    return ScriptedModel(
        [
            {
                "text": "Let me check the weather. ",
                "tool_calls": [{"name": "get_weather", "input": {"city": "Oslo"}}],
                **_SLOW,
            },
            {
                "text": "It is 21 degrees C with clear skies in Oslo: "
                "a fine day for a walk by the fjord.",
                **_SLOW,
            },
            {"text": story, **_SLOW},
        ]
    )


def run_demo(out: TextIO, *, cancel_after: float = 0.6) -> int:
    """Run both parts of the demo.

    Args:
        out: Where the demo writes (the terminal for the CLI).
        cancel_after: Seconds from the start of the second run to the ``cancel()`` call
            (positive).

    Returns:
        A process exit code: 0 if the second run was cancelled and the history is valid.

    Raises:
        ValueError: ``cancel_after`` is not a positive number of seconds.
    """
    if not cancel_after > 0:  # also refuses NaN
        raise ValueError(f"cancel_after must be a positive number of seconds, got {cancel_after}")
    agent = Agent(_demo_model(), tools=[get_weather], system_prompt="You are a weather assistant.")

    out.write("== 1. Streaming an answer (the model calls a tool on the way) ==\n")
    out.write("> What's the weather in Oslo?\n")
    for event in agent.stream("What's the weather in Oslo?"):
        if isinstance(event, TextDelta):
            out.write(event.text)
            out.flush()
        elif isinstance(event, ToolStart):
            call = event.tool_use
            out.write(f"\n  [tool] {call['name']}({json.dumps(call['input'])})")
        elif isinstance(event, ToolEnd):
            out.write(f" -> {event.result['content'][0].get('text', '')}\n")
    out.write("\n\n")

    out.write(f"== 2. Cancelled from another thread by threading.Timer({cancel_after}) ==\n")
    out.write("> Tell me a long story.\n")
    cancelled_at: list[float] = []
    stream = agent.stream("Tell me a long story.")  # the run exists from here on

    def cancel_from_timer_thread() -> None:
        now = time.perf_counter()
        if stream.cancel("timer"):  # this run's own handle: it reached the run
            cancelled_at.append(now)

    timer = threading.Timer(cancel_after, cancel_from_timer_thread)
    timer.start()
    result: AgentResult | None = None
    with stream:
        for event in stream:
            if isinstance(event, TextDelta):
                out.write(event.text)
                out.flush()
            elif isinstance(event, Done):
                result = event.result
    ended = time.perf_counter()
    timer.cancel()  # in case the story ended first: the summary below then says so
    timer.join()
    assert result is not None  # Done is always the last event of a stream run to its end
    if cancelled_at:
        latency = f"{(ended - cancelled_at[0]) * 1000:.2f} ms"
    else:
        latency = f"not reached: the answer ended before {cancel_after} s"
    out.write(f"\n\nstop_reason={result.stop_reason!r} cancel_reason={result.cancel_reason!r}")
    out.write(f" (cancel() -> stream ended: {latency})\n")
    out.write(f"agent ready for the next call: {not agent.is_running}\n\n")

    out.write("== History (Converse shape, valid for every provider) ==\n")
    for message in agent.messages:
        out.write(json.dumps(message)[:160] + "\n")
    problems = validate_history(agent.messages)
    out.write(f"validate_history: {'OK' if not problems else problems}\n")
    if result.stop_reason != "cancelled":
        out.write("the second run was not cancelled: try a shorter --cancel-after\n")
    return 0 if not problems and result.stop_reason == "cancelled" else 1


def _positive_seconds(text: str) -> float:
    """argparse type: a positive number of seconds."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text}")
    return value


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m agent_sync`` and the ``agent-sync`` script.

    Args:
        argv: The arguments (default: ``sys.argv[1:]``).

    Returns:
        The process exit code.
    """
    parser = argparse.ArgumentParser(prog="agent_sync", description="agent_sync command line")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="run an agent offline (no API key, no network)")
    demo.add_argument(
        "--cancel-after",
        type=_positive_seconds,
        default=0.6,
        help="seconds from the start of the second run to its cancel (positive)",
    )
    args = parser.parse_args(argv)  # exits with status 2 on anything but a known command
    # "demo" is the only command: argparse has already rejected everything else.
    return run_demo(sys.stdout, cancel_after=args.cancel_after)


if __name__ == "__main__":
    sys.exit(main())
