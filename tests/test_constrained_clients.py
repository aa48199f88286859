"""Real agent clients against the gateway's grammar-constrained local engine: the OpenAI Agents SDK (its
chat-completions and Responses models, ``tool_choice="required"``, an ``output_type`` pydantic model),
smolagents' ToolCallingAgent and the Anthropic SDK with a forced tool each get a well-formed call or object
on every one of many runs sampled at T = 1, counted.

The model is the tiny random Llama: left to itself it never writes a call, so every well-formed reply here
is the grammar's doing. Arguments are integers and enums (a random model would not close a free JSON
string within the token budget; a trained one does). Skipped where the extras are not installed (CI's
extras tier installs them and checks that they import before running this file)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Literal

import pytest

pytest.importorskip("agents")
pytest.importorskip("smolagents")
anthropic = pytest.importorskip("anthropic")

from agents import (
    Agent,
    ModelSettings,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from openai import AsyncOpenAI
from pydantic import BaseModel, Field
from smolagents import OpenAIServerModel, ToolCallingAgent, tool
from smolagents.default_tools import FinalAnswerTool

from rllm.gateway.app import create_app
from rllm.gateway.server import GatewayServer
from rllm.gateway.traces import TraceStore
from rllm.inference.local import LocalEngine

set_tracing_disabled(True)  # offline: no trace export

MODEL, API_KEY = "tiny", "test-key"
RUNS = 12


@pytest.fixture(scope="module")
def gateway(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    engine = LocalEngine.from_pretrained(str(tiny_model_dir), device="cpu", dtype="float32")
    store = TraceStore(tmp_path_factory.mktemp("clients") / "traces.db")
    app = create_app(engine, store, model_name=MODEL, api_key=API_KEY)
    with GatewayServer(app) as srv:
        yield srv.url
    store.close()


@function_tool
def add(a: Annotated[int, Field(ge=0, le=999)], b: Annotated[int, Field(ge=0, le=999)]) -> int:
    """Add two integers.

    Args:
        a: The first integer.
        b: The second integer.
    """
    return a + b


class Verdict(BaseModel):
    value: int = Field(ge=0, le=10_000)
    sure: bool
    unit: Literal["cm", "m", "km"]


def _sdk_model(url: str, api: str, session: str) -> OpenAIChatCompletionsModel | OpenAIResponsesModel:
    """The Agents SDK's chat-completions or Responses model on a gateway session."""
    client = AsyncOpenAI(base_url=f"{url}/sessions/{session}/v1", api_key=API_KEY, max_retries=0)
    model_cls = OpenAIChatCompletionsModel if api == "chat" else OpenAIResponsesModel
    return model_cls(model=MODEL, openai_client=client)


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_agents_sdk_required_tool_choice_calls_the_tool_every_time(gateway: str, api: str) -> None:
    async def one(i: int) -> object:
        agent = Agent(
            name="adder",
            instructions="Add the numbers with the add tool.",
            tools=[add],
            model=_sdk_model(gateway, api, f"sdk-{api}-{i}"),
            # One call a reply: left to the grammar's "one or more calls", a random model goes on calling
            # until max_tokens cuts a call short.
            model_settings=ModelSettings(
                tool_choice="required", parallel_tool_calls=False, temperature=1.0, max_tokens=48
            ),
            tool_use_behavior="stop_on_first_tool",  # the tool's result is the run's output
        )
        result = await Runner.run(agent, "What is 17 + 25?", max_turns=2)
        return result.final_output

    outputs = asyncio.run(_gather(one))
    # Each run called add with two integers in range (the SDK parsed them against the tool's strict schema,
    # ran it, and its result is the run's output).
    assert sum(str(o).isdigit() and 0 <= int(o) <= 1998 for o in outputs) == RUNS, outputs


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_agents_sdk_output_type_is_a_valid_object_every_time(gateway: str, api: str) -> None:
    async def one(i: int) -> object:
        agent = Agent(
            name="judge",
            instructions="Say how long the bridge is.",
            output_type=Verdict,
            model=_sdk_model(gateway, api, f"out-{api}-{i}"),
            model_settings=ModelSettings(temperature=1.0, max_tokens=48),
        )
        return (await Runner.run(agent, "How long is the bridge?", max_turns=1)).final_output

    outputs = asyncio.run(_gather(one))
    assert sum(isinstance(o, Verdict) for o in outputs) == RUNS, outputs


async def _gather(one) -> list[object]:  # type: ignore[no-untyped-def]
    return list(await asyncio.gather(*(one(i) for i in range(RUNS))))


@tool
def multiply(a: int, b: int) -> int:
    """Multiply two integers.

    Args:
        a: The first integer.
        b: The second integer.
    """
    return a * b


class IntegerFinalAnswer(FinalAnswerTool):
    """smolagents' final_answer with an integer answer (its own takes "any": a free JSON string, which a
    random model would not close within the token budget)."""

    inputs = {"answer": {"type": "integer", "description": "The final answer to the problem"}}  # noqa: RUF012 (smolagents reads it)
    output_type = "integer"

    def forward(self, answer: int) -> int:
        return answer


def test_smolagents_tool_calling_agent_gets_a_well_formed_call_every_step(gateway: str) -> None:
    calls = 0
    for i in range(RUNS):
        model = OpenAIServerModel(
            model_id=MODEL,
            api_base=f"{gateway}/sessions/smol-{i}/v1",
            api_key=API_KEY,
            temperature=1.0,
            max_tokens=96,
            parallel_tool_calls=False,
        )
        tools = [multiply, IntegerFinalAnswer()]
        agent = ToolCallingAgent(tools=tools, model=model, max_steps=1, verbosity_level=0)
        agent.run("What is 6 * 7?")
        step = agent.memory.steps[1]  # after the task
        # A parsing error (no call, or arguments that do not fit the tool) would be the step's error.
        assert step.error is None or "max steps" in str(step.error).lower(), (step.error, step.model_output)
        assert step.tool_calls and step.tool_calls[0].name in ("multiply", "final_answer")
        if step.tool_calls[0].name == "multiply":
            assert set(step.tool_calls[0].arguments) == {"a", "b"}
            assert all(isinstance(v, int) for v in step.tool_calls[0].arguments.values())
        calls += 1
    assert calls == RUNS


def test_anthropic_forced_tool_gets_a_tool_use_block_every_time(gateway: str) -> None:
    client = anthropic.Anthropic(base_url=gateway, api_key=API_KEY, max_retries=0)
    tools = [
        {
            "name": "set_alarm",
            "description": "Set an alarm.",
            "input_schema": {
                "type": "object",
                "properties": {
                    "hour": {"type": "integer", "minimum": 0, "maximum": 23},
                    "repeat": {"type": "boolean"},
                    "day": {"enum": ["mon", "tue", "wed"]},
                },
                "required": ["hour", "repeat", "day"],
                "additionalProperties": False,
            },
        }
    ]
    good = 0
    for _ in range(RUNS):
        msg = client.messages.create(
            model=MODEL,
            max_tokens=48,  # temperature left at the Messages API's default, 1.0
            tools=tools,
            tool_choice={"type": "tool", "name": "set_alarm"},
            messages=[{"role": "user", "content": "Wake me at seven on Tuesday."}],
        )
        (block,) = [b for b in msg.content if b.type == "tool_use"]
        args = block.input
        assert block.name == "set_alarm" and msg.stop_reason == "tool_use"
        assert set(args) == {"hour", "repeat", "day"} and 0 <= args["hour"] <= 23, args
        assert isinstance(args["repeat"], bool) and args["day"] in ("mon", "tue", "wed"), args
        good += 1
    assert good == RUNS
