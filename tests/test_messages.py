"""validate_history: the invariant the agent keeps, checked independently."""

from __future__ import annotations

from typing import Any

import pytest

from agent_sync.messages import validate_history


def user(*blocks: dict[str, Any]) -> dict[str, Any]:
    return {"role": "user", "content": list(blocks)}


def assistant(*blocks: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": list(blocks)}


def use(i: str) -> dict[str, Any]:
    return {"toolUse": {"toolUseId": i, "name": "t", "input": {}}}


def res(i: str) -> dict[str, Any]:
    return {"toolResult": {"toolUseId": i, "status": "success", "content": [{"text": "ok"}]}}


def test_valid_histories() -> None:
    assert validate_history([]) == []
    assert validate_history([user({"text": "hi"})]) == []
    assert (
        validate_history(
            [
                user({"text": "hi"}),
                assistant({"text": "x"}, use("1"), use("2")),
                user(res("2"), res("1")),
                assistant({"text": "done"}),
            ]
        )
        == []
    )


def test_roles_must_alternate_and_start_with_user() -> None:
    assert "must start with a user message" in validate_history([assistant({"text": "x"})])[0]
    assert (
        "two user messages in a row"
        in validate_history([user({"text": "a"}), user({"text": "b"})])[0]
    )


def test_every_tool_use_needs_exactly_one_result_in_the_next_message() -> None:
    missing = validate_history([user({"text": "a"}), assistant(use("1"), use("2")), user(res("1"))])
    assert missing == ["message 2: toolUse '2' (t) has no toolResult"]
    twice = validate_history([user({"text": "a"}), assistant(use("1")), user(res("1"), res("1"))])
    assert any("answered twice" in p for p in twice)
    stray = validate_history([user({"text": "a"}), assistant({"text": "b"}), user(res("9"))])
    assert any("answers no toolUse" in p for p in stray)
    pending_at_end = validate_history([user({"text": "a"}), assistant(use("1"))])
    assert pending_at_end == ["end of history: toolUse '1' (t) has no toolResult"]


def test_malformed_blocks_are_reported() -> None:
    problems = validate_history(
        [
            {"role": "system", "content": [{"text": "x"}]},
            {"role": "assistant", "content": []},
            user({"text": 1}, {"a": 1, "b": 2}),
            assistant({"toolUse": {"toolUseId": "1", "name": "t", "input": "not a dict"}}),
        ]
    )
    joined = "\n".join(problems)
    assert "role 'system'" in joined
    assert "non-empty list" in joined
    assert "text must be a string" in joined
    assert "exactly one key" in joined
    assert "input must be a JSON object" in joined


def _result_with(*pieces: object, status: object = "success") -> list[dict[str, Any]]:
    body = {"toolUseId": "1", "status": status, "content": list(pieces)}
    return [user({"text": "q"}), assistant(use("1")), user({"toolResult": body})]


@pytest.mark.parametrize(
    ("history", "named"),
    [
        (_result_with({"text": 5}), "toolResult content piece 0: text must be a string"),
        (_result_with({"json": {1, 2}}), "json is not JSON-serialisable"),
        (_result_with({"json": float("nan")}), "json is not JSON-serialisable"),
        (_result_with({"json": 10**5000}), "json is not JSON-serialisable"),
        (_result_with({"text": "a", "json": 1}), "exactly one key"),
        (_result_with({"image": {}}), "image needs a 'format'"),  # images: MCP tools' results
        (_result_with({"video": {}}), "unknown piece kind 'video'"),
        (_result_with("bare string"), "exactly one key"),
        (_result_with({"text": "x"}, status="maybe"), "status must be 'success' or 'error'"),
        ([user({"text": "q"}), assistant({"toolUse": {"toolUseId": "1", "name": "t",
                                                      "input": {"x": {1}}}})],
         "toolUse input is not JSON-serialisable"),
        ([user({"weird": {}})], "unknown block kind 'weird'"),
        ([user({"image": {"format": "png"}})], "image needs a source"),
        ([user({"image": {"source": {"bytes": b"x"}}})], "image needs a 'format'"),
        ([user({"document": {"format": "pdf", "source": {"bytes": b"x"}}})],
         "document needs a 'name'"),
        ([user({"text": "q"}), assistant({"reasoningContent": {"reasoningText": {"text": 1}}})],
         "reasoningText must be a dict with a str 'text'"),
        ([user({"text": "q"}), assistant({"reasoningContent": {"oops": 1}})],
         "reasoningContent reasoningText must be"),
        ([user({"text": "q"}), assistant({"reasoningContent": {"redactedContent": 5}})],
         "redactedContent must be bytes or str"),
        ([user({"reasoningContent": {"redactedContent": b"x"}})],
         "reasoningContent in a user message"),
        ([user({"text": "q"}), assistant({"text": "a"}), user({"toolResult": {"status": "error",
                                                                        "content": []}})],
         "toolResult without a toolUseId"),
    ],
)  # fmt: skip
def test_content_a_provider_would_reject_is_reported(history: list[Any], named: str) -> None:
    problems = validate_history(history)
    assert any(named in problem for problem in problems), problems


def test_content_every_provider_takes_is_valid() -> None:
    image = {"image": {"format": "png", "source": {"bytes": b"\x89PNG"}}}
    document = {"document": {"format": "txt", "name": "notes", "source": {"bytes": "aGk="}}}
    reasoning = {"reasoningContent": {"reasoningText": {"text": "hm", "signature": "s"}}}
    redacted = {"reasoningContent": {"redactedContent": b"\x00"}}
    history = [
        user({"text": "q"}, image, document),
        assistant(reasoning, redacted, {"text": "x"}, use("1")),
        user(
            {
                "toolResult": {
                    "toolUseId": "1",
                    "content": [{"json": {"a": [1, None]}}, {"text": ""}],
                }
            }
        ),
        assistant({"text": "done"}),
    ]
    assert validate_history(history) == []


def test_validate_history_never_raises() -> None:
    class Hostile:
        def __repr__(self) -> str:
            raise RuntimeError("no")

    assert validate_history([{"role": "user", "content": [{Hostile(): 1}]}])
    assert validate_history(None)  # type: ignore[arg-type]
    assert validate_history([user({"text": "q"}), assistant({"text": Hostile()})])


def test_the_stream_delta_reasoning_shape_keeps_its_former_name() -> None:
    # Renamed after Converse's ReasoningContentBlockDelta (events.ReasoningDelta is the
    # agent's event); code that imported the TypedDict by its former name still works.
    from agent_sync import messages

    assert messages.ReasoningDelta is messages.ReasoningContentBlockDelta
    delta: messages.ReasoningDelta = {"text": "hmm", "signature": "sig"}
    assert messages.ContentBlockDelta(reasoningContent=delta) == {"reasoningContent": delta}
