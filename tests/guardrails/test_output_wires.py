"""The output stage on the three wires (DESIGN 13): the real anthropic, boto3 and openai
clients against the local wire servers of :mod:`agent_sync.testing`. A secret split at each
chunk boundary never reaches an event or the history; the history after the trip (and
after a trip that drops a tool call) is replayed through the same server, which refuses what
the real API refuses, and the next invoke works.
"""

from __future__ import annotations

from agent_sync import Agent, validate_history
from agent_sync.events import Done, TextDelta
from agent_sync.guardrails import STOPPED_TEXT
from tests.guardrails._wires import GUARD, SECRET, Wire, lookup


def test_a_split_secret_never_leaves_and_the_history_replays(wire: Wire) -> None:
    server, model = wire
    agent = Agent(model, tools=[lookup], guardrails=[GUARD])
    for chunk_size in (1, 4, 7, 25):
        for offset in (0, 3, 10):
            before = "a" * offset
            server.add_turns(
                {
                    "text": before + SECRET + " after",
                    "chunk_size": chunk_size,
                    "tool_calls": [{"name": "lookup", "input": {"city": "Oslo"}}],
                }
            )
            events = list(agent.stream("go"))
            released = "".join(e.text for e in events if isinstance(e, TextDelta))
            assert before.startswith(released), (chunk_size, offset)
            done = events[-1]
            assert isinstance(done, Done) and done.result.stop_reason == "guardrail"
            shown = repr(events) + repr(agent.messages)
            assert "sk-" not in shown and "after" not in shown
            assert agent.messages[-1]["content"][-1] == {"text": STOPPED_TEXT}
            assert validate_history(agent.messages) == []
    # the whole history, trips and all, goes back through the provider's rules
    server.add_turns("all good")
    result = agent.invoke("replay")
    assert result.stop_reason == "end_turn" and result.text == "all good"
    assert "sk-" not in repr(server.requests[-1].body)
