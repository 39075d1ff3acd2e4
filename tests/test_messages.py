"""validate_history: the invariant the agent keeps, checked independently."""

from __future__ import annotations

from agent_sync.messages import validate_history


def user(*blocks: dict) -> dict:
    return {"role": "user", "content": list(blocks)}


def assistant(*blocks: dict) -> dict:
    return {"role": "assistant", "content": list(blocks)}


def use(i: str) -> dict:
    return {"toolUse": {"toolUseId": i, "name": "t", "input": {}}}


def res(i: str) -> dict:
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
