"""Structured output benchmarks (offline: local wire servers and ScriptedModel).

    python bench/bench_output.py [--repeats 30]

1. Model calls per structured answer, per provider, through the real SDKs against the local
   wire servers (goal: 1 where the wire has native structured output, never more than one
   extra): OpenAI-compatible ``response_format``; the same server refusing
   ``response_format`` (the first answer pays one refused request, later ones none);
   Anthropic and Bedrock, the forced output tool.
2. Validation overhead per answer vs the raw text path: ``invoke()`` of a 200-chunk JSON
   answer with ``output_type`` vs without (goal <= 1.05x); and per wire through the real
   SDK clients (OpenAI ``response_format``, Anthropic and Bedrock the forced output tool
   whose input streams in 200 deltas) the typed answer vs a plain text answer of the same
   JSON in as many chunks (goal <= 1.05x on every wire).
3. Partial parsing cost per chunk, 1 KB vs 100 KB answers (goal: flat per chunk, so linear
   in the answer): agent_sync's incremental parser, and for contrast pydantic's ``jiter``
   partial mode re-parsing the text so far at each chunk (quadratic).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import timeit
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import boto3  # noqa: E402
import jiter  # noqa: E402
import pydantic  # noqa: E402

from agent_sync import Agent  # noqa: E402
from agent_sync.models import AnthropicModel, BedrockModel, OpenAIModel  # noqa: E402
from agent_sync.models._bedrock_stream import stream_events  # noqa: E402
from agent_sync.output._partial import PartialJSON  # noqa: E402
from agent_sync.output._spec import output_spec  # noqa: E402
from agent_sync.run._assemble import MessageAssembler  # noqa: E402
from agent_sync.testing import ScriptedModel  # noqa: E402
from agent_sync.testing.anthropic_server import AnthropicServer  # noqa: E402
from agent_sync.testing.bedrock_server import BedrockServer  # noqa: E402
from agent_sync.testing.openai_server import OpenAIServer  # noqa: E402


class Item(pydantic.BaseModel):
    name: str
    price: float
    tags: list[str]


class Order(pydantic.BaseModel):
    number: str
    items: list[Item]


def _order(items: int) -> dict[str, Any]:
    return {
        "number": "A-1",
        "items": [
            {"name": f"item {i}", "price": i * 1.5, "tags": ["a", "b"]} for i in range(items)
        ],
    }


def _final(value: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": "final_result", "input": value}]}


def calls_per_answer(answers: int) -> None:
    """Requests the server received per structured answer, per provider."""
    order = _order(3)
    print(f"model calls per structured answer ({answers} answers each):")

    with OpenAIServer([json.dumps(order)] * answers) as server:
        model = OpenAIModel("gpt-test", base_url=server.url, api_key="sk-bench")
        _answer_all(Agent(model, output_type=Order), answers)
        model.close()
        _row("openai-compatible, response_format", [len(server.requests)], answers)

    with OpenAIServer([_final(order)] * answers, rejected_fields=["response_format"]) as server:
        model = OpenAIModel("gpt-test", base_url=server.url, api_key="sk-bench")
        agent = Agent(model, output_type=Order)
        agent.invoke("extract")
        first = len(server.requests)
        _answer_all(agent, answers - 1)
        model.close()
        _row("openai-compatible, response_format refused", [first, len(server.requests)], answers)

    with AnthropicServer([_final(order)] * answers) as server:
        model = AnthropicModel(
            "claude-test", client_args={"base_url": server.base_url, "api_key": "sk-bench"}
        )
        _answer_all(Agent(model, output_type=Order), answers)
        model.close()
        _row("anthropic, forced output tool", [len(server.requests)], answers)

    with BedrockServer([_final(order)] * answers) as server:
        session = boto3.Session(
            aws_access_key_id="AKIDBENCH", aws_secret_access_key="bench", region_name="us-east-1"
        )
        model = BedrockModel("test-model", endpoint_url=server.base_url, boto_session=session)
        _answer_all(Agent(model, output_type=Order), answers)
        model.close()
        _row("bedrock, forced output tool", [len(server.requests)], answers)


def _answer_all(agent: Agent, answers: int) -> None:
    for _ in range(answers):
        agent.invoke("extract")
        agent.messages = []  # each answer from a fresh conversation


def _row(label: str, counts: list[int], answers: int) -> None:
    total = counts[-1]
    detail = f" (first answer: {counts[0]})" if len(counts) > 1 else ""
    print(f"  {label:<46} {total / answers:.2f} per answer{detail}")


def validation_overhead(chunks: int, repeats: int) -> None:
    """invoke() of the same JSON answer with and without output_type: on ScriptedModel (a
    model that costs nothing: the worst case for the ratio) and over the OpenAI wire."""
    text = json.dumps(_order(12))  # ~200 chunks of ~4 chars: a 200-token answer
    size = max(1, len(text) // chunks)
    turn = {"text": text, "chunk_size": size}
    events = -(-len(text) // size)
    print(
        f"validation overhead, invoke() of a {len(text)}-char answer in {events} chunks, "
        f"median of {repeats} (goal <= 1.05):"
    )
    raw, typed = _paired(
        repeats,
        lambda: Agent(ScriptedModel([turn])).invoke("go"),
        lambda: Agent(ScriptedModel([turn]), output_type=Order).invoke("go"),
    )
    print(
        f"  ScriptedModel   raw {raw * 1000:7.3f} ms   output_type {typed * 1000:7.3f} ms"
        f"   ratio {typed / raw:.3f}   (+{(typed - raw) * 1e6:.0f} us per answer)"
    )
    with OpenAIServer() as server:
        model = OpenAIModel("gpt-test", base_url=server.url, api_key="sk-bench")
        raw_agent, typed_agent = Agent(model), Agent(model, output_type=Order)

        def ask(agent: Agent) -> None:
            server.add_turns({"text": text, "chunk_size": size})
            agent.invoke("go")
            agent.messages = []

        raw, typed = _paired(repeats, lambda: ask(raw_agent), lambda: ask(typed_agent))
        model.close()
    print(
        f"  OpenAI wire     raw {raw * 1000:7.3f} ms   output_type {typed * 1000:7.3f} ms"
        f"   ratio {typed / raw:.3f}   (+{(typed - raw) * 1e6:.0f} us per answer)"
    )


def wire_overhead(repeats: int) -> None:
    """Per wire, ``invoke()`` of a typed answer vs a plain answer of the same JSON text, both
    in ~200 chunks of 12 characters (the Anthropic server's tool-input piece size), through
    the real SDK clients against the local wire servers."""
    order = _order(42)
    text = json.dumps(order)
    plain = {"text": text, "chunk_size": 12}
    print(
        f"typed vs plain answer per wire, {len(text)} chars in {-(-len(text) // 12)} chunks, "
        f"median of {repeats} (goal <= 1.05):"
    )
    with OpenAIServer() as oserver:
        model = OpenAIModel("gpt-test", base_url=oserver.url, api_key="sk-bench")
        _wire_row("openai (response_format)", oserver, model, plain, plain, repeats)
        model.close()
    typed = {**_final(order), "chunk_size": 12}
    with AnthropicServer() as aserver:
        model = AnthropicModel(
            "claude-test", client_args={"base_url": aserver.base_url, "api_key": "sk-bench"}
        )
        _wire_row("anthropic (output tool)", aserver, model, plain, typed, repeats)
        model.close()
    with BedrockServer() as bserver:
        session = boto3.Session(
            aws_access_key_id="AKIDBENCH", aws_secret_access_key="bench", region_name="us-east-1"
        )
        model = BedrockModel("test-model", endpoint_url=bserver.base_url, boto_session=session)
        _wire_row("bedrock (output tool)", bserver, model, plain, typed, repeats)
        model.close()


def bedrock_floor(repeats: int) -> None:
    """The Bedrock wire's own cost of a typed answer, with no agent: botocore's request
    (the output tool's schema in ``toolConfig``, validated and serialized by botocore) and
    agent_sync's frame reader over the answer (``toolUse`` deltas, larger frames than text
    deltas), against the same for a plain answer: the floor under the agent's figure."""
    order = _order(42)
    text = json.dumps(order)
    spec = output_spec(Order)
    tool_config = {
        "tools": [
            {
                "toolSpec": {
                    "name": spec.name,
                    "description": spec.description,
                    "inputSchema": {"json": spec.schema},
                }
            }
        ],
        "toolChoice": {"tool": {"name": spec.name}},
    }
    messages = [{"role": "user", "content": [{"text": "go"}]}]
    with BedrockServer() as server:
        session = boto3.Session(
            aws_access_key_id="AKIDBENCH", aws_secret_access_key="bench", region_name="us-east-1"
        )
        client = session.client("bedrock-runtime", endpoint_url=server.base_url)

        def plain() -> None:
            server.add_turns({"text": text, "chunk_size": 12})
            response = client.converse_stream(modelId="m", messages=messages)
            for _event in stream_events(response["stream"]):
                pass

        def typed() -> None:
            server.add_turns({**_final(order), "chunk_size": 12})
            response = client.converse_stream(
                modelId="m", messages=messages, toolConfig=tool_config
            )
            for _event in stream_events(response["stream"]):
                pass

        for _ in range(5):
            plain()
            typed()
        cpu: tuple[list[float], list[float]] = ([], [])
        for _ in range(repeats):
            for side, run in enumerate((plain, typed)):
                start = time.thread_time()
                run()
                cpu[side].append(time.thread_time() - start)
    raw, typed_cpu = statistics.median(cpu[0]), statistics.median(cpu[1])
    paired = statistics.median(t / p for p, t in zip(*cpu, strict=True))
    print(
        f"  {'bedrock, no agent (floor)':<26} thread CPU plain {raw * 1000:6.3f} ms typed "
        f"{typed_cpu * 1000:6.3f} ms ratio {typed_cpu / raw:.3f} (paired {paired:.3f})"
    )


def answer_handling(repeats: int) -> None:
    """CPU per answer once the stream is in, the part typed output adds on every wire: the
    assembler building the message from ~200 deltas (the output tool's input parsed from
    its pieces, or the text joined) and the answer validated. Minimum of ``repeats`` runs of
    200 answers each (the least disturbed by other load)."""
    order = _order(42)
    text = json.dumps(order)
    pieces = [text[i : i + 12] for i in range(0, len(text), 12)]
    spec = output_spec(Order)
    tool_events: list[Any] = [
        {
            "contentBlockStart": {
                "contentBlockIndex": 0,
                "start": {"toolUse": {"toolUseId": "toolu_1", "name": "final_result"}},
            }
        },
        *(
            {"contentBlockDelta": {"contentBlockIndex": 0, "delta": {"toolUse": {"input": p}}}}
            for p in pieces
        ),
        {"contentBlockStop": {"contentBlockIndex": 0}},
        {"messageStop": {"stopReason": "tool_use"}},
    ]
    text_events: list[Any] = [
        *({"contentBlockDelta": {"contentBlockIndex": 0, "delta": {"text": p}}} for p in pieces),
        {"contentBlockStop": {"contentBlockIndex": 0}},
        {"messageStop": {"stopReason": "end_turn"}},
    ]

    def assemble(events: list[Any]) -> Any:
        assembler = MessageAssembler(emit_deltas=False)
        for event in events:
            assembler.add(event)
        return assembler.finish().message

    def plain() -> None:
        assemble(text_events)

    def tool_typed() -> None:
        message = assemble(tool_events)
        spec.validate(message["content"][0]["toolUse"]["input"])

    def text_typed() -> None:
        message = assemble(text_events)
        spec.parse_text(message["content"][0]["text"])

    print(f"answer handling after the stream, {len(pieces)} deltas, min of {repeats} x 200:")
    figures = {}
    for label, run in (
        ("plain text", plain),
        ("typed, output tool", tool_typed),
        ("typed, text", text_typed),
    ):
        figures[label] = min(timeit.repeat(run, number=200, repeat=repeats)) / 200
    for label, figure in figures.items():
        extra = figure - figures["plain text"]
        print(f"  {label:<20} {figure * 1e6:7.1f} us per answer   (+{extra * 1e6:.1f} us)")


def _wire_row(label: str, server: Any, model: Any, plain: Any, typed: Any, repeats: int) -> None:
    plain_agent, typed_agent = Agent(model), Agent(model, output_type=Order)

    def ask(agent: Agent, turn: Any) -> None:
        server.add_turns(turn)
        agent.invoke("go")
        agent.messages = []

    for _ in range(3):  # warm the connection pool and the validators
        ask(plain_agent, plain)
        ask(typed_agent, typed)
    # wall time, and the CPU of the invoking thread alone (the wire server runs in this
    # process: its threads' work on a loaded machine would blur the wall figure)
    wall: tuple[list[float], list[float]] = ([], [])
    cpu: tuple[list[float], list[float]] = ([], [])
    for _ in range(repeats):
        for side, (agent, turn) in enumerate(((plain_agent, plain), (typed_agent, typed))):
            start, start_cpu = time.perf_counter(), time.thread_time()
            ask(agent, turn)
            cpu[side].append(time.thread_time() - start_cpu)
            wall[side].append(time.perf_counter() - start)
    raw, typed_s = statistics.median(wall[0]), statistics.median(wall[1])
    raw_cpu, typed_cpu = statistics.median(cpu[0]), statistics.median(cpu[1])
    # each round's typed over its own plain, then the median: a drift of the machine's
    # speed during the run (other load, the clock) moves both of a pair alike
    paired = statistics.median(t / p for p, t in zip(*wall, strict=True))
    paired_cpu = statistics.median(t / p for p, t in zip(*cpu, strict=True))
    print(
        f"  {label:<26} wall plain {raw * 1000:6.3f} ms typed {typed_s * 1000:6.3f} ms"
        f" ratio {typed_s / raw:.3f} (paired {paired:.3f}) | thread CPU plain"
        f" {raw_cpu * 1000:6.3f} ms typed {typed_cpu * 1000:6.3f} ms ratio"
        f" {typed_cpu / raw_cpu:.3f} (paired {paired_cpu:.3f})"
    )


def _paired(repeats: int, first: Any, second: Any) -> tuple[float, float]:
    """Medians of ``first`` and ``second`` run alternately (a loaded machine's drift hits
    both alike)."""
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(repeats):
        for run, into in ((first, times[0]), (second, times[1])):
            start = time.perf_counter()
            run()
            into.append(time.perf_counter() - start)
    return statistics.median(times[0]), statistics.median(times[1])


def partial_cost(repeats: int) -> None:
    """Per-chunk cost of the partial value, at two answer sizes (20-char chunks)."""
    print("partial parsing per 20-char chunk (feed + snapshot of the value so far):")
    for label, items in (("1 KB", 18), ("100 KB", 1800)):
        text = json.dumps(_order(items))
        chunks = [text[i : i + 20] for i in range(0, len(text), 20)]
        ours = _median_per_chunk(repeats, chunks, _incremental)
        theirs = _median_per_chunk(max(1, repeats // 10), chunks, _jiter_reparse)
        print(
            f"  {label:>6} ({len(text):>6} chars, {len(chunks):>5} chunks): "
            f"agent_sync {ours * 1e6:7.2f} us/chunk   "
            f"jiter re-parse {theirs * 1e6:9.2f} us/chunk"
        )


def _incremental(chunks: list[str]) -> None:
    parser = PartialJSON()
    for chunk in chunks:
        if parser.feed(chunk):
            parser.snapshot()


def _jiter_reparse(chunks: list[str]) -> None:
    so_far = b""
    for chunk in chunks:
        so_far += chunk.encode()
        jiter.from_json(so_far, partial_mode="trailing-strings")


def _median_per_chunk(repeats: int, chunks: list[str], run: Any) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run(chunks)
        times.append(time.perf_counter() - start)
    return statistics.median(times) / len(chunks)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument(
        "--wires-only", action="store_true", help="only the typed-vs-plain per wire section"
    )
    args = parser.parse_args()
    if args.wires_only:
        answer_handling(args.repeats)
        wire_overhead(args.repeats)
        bedrock_floor(args.repeats)
        return
    calls_per_answer(10)
    validation_overhead(200, args.repeats)
    answer_handling(args.repeats)
    wire_overhead(args.repeats)
    bedrock_floor(args.repeats)
    partial_cost(max(3, args.repeats // 5))


if __name__ == "__main__":
    main()
