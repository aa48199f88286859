"""A ReAct tool agent: the model calls tools until it answers, then the answer is scored.

    registry = ToolRegistry([calculator])
    workflow = ToolAgentWorkflow(registry, reward_fn=number_reward, max_turns=4)

Each turn renders the conversation with the tool list (``ChatRenderer``: the model's own tool format,
or Hermes ``<tool_call>`` text for templates without one), samples a reply, and parses it with the
tool parser. Calls are run through the registry; each result goes back as a ``tool`` message. A reply
without calls is the final answer. Nothing a tool or the model does aborts the episode: a malformed
call, an unknown tool, bad arguments, a tool that raises or times out each become an error message the
model reads on its next turn, and a counted metric (``tools/errors/<kind>``).

Metrics per episode: ``tools/calls``, ``tools/ok``, ``tools/errors/*`` (see ``tool_metrics``),
``tools/used`` (1 if any call succeeded), ``agent/turns``, ``agent/answered`` (1 if the model gave a
final answer before ``max_turns``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from rllm.runner.context import RolloutContext
from rllm.tool_calls import get_tool_parser, solved_example
from rllm.tools.tool import Tool, ToolRegistry, ToolResult, tool_metrics
from rllm.types import Outcome, TerminationReason
from rllm.workflows.single_turn import RewardFn, number_reward, question_messages, score


def worked_example(
    question: str,
    tool: str,
    arguments: dict[str, Any],
    result: str,
    answer: str,
    call_id: str = "call_example",
) -> list[dict[str, Any]]:
    """One solved question as chat messages: the question, a call to ``tool``, its result, the answer
    (``solved_example`` writes examples of several calls and turns)."""
    return solved_example(question, [[(tool, arguments, result)]], answer, id_prefix=call_id)


class ToolAgentWorkflow:
    """Answer ``task["question"]`` with the help of ``tools``; score the final answer with ``reward_fn``.

    ``tools`` is a ``ToolRegistry`` or a list of tools/functions. ``parser`` names the tool-call text
    format (``"hermes"``). ``examples`` are OpenAI-format chat messages placed between the system prompt
    and the question (worked examples: a small model copies their shape; see ``worked_example``). After ``max_turns`` replies without a final answer the episode ends with
    reason ``max_turns`` and the last reply is scored as the answer.
    """

    def __init__(
        self,
        tools: ToolRegistry | Sequence[Tool | Callable[..., Any]],
        reward_fn: RewardFn = number_reward,
        *,
        system_prompt: str | None = None,
        examples: Sequence[dict[str, Any]] = (),
        max_turns: int = 4,
        parser: str = "hermes",
        role: str = "default",
        instruction: str | None = None,
    ) -> None:
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        self.registry = tools if isinstance(tools, ToolRegistry) else ToolRegistry(list(tools))
        if not len(self.registry):
            raise ValueError("a tool agent needs at least one tool")
        self.reward_fn = reward_fn
        self.system_prompt = system_prompt
        self.examples = [dict(m) for m in examples]
        self.max_turns = max_turns
        self.parser = get_tool_parser(parser)
        self.role = role
        self.instruction = instruction

    def messages(self, task: dict[str, Any]) -> list[dict[str, Any]]:
        return question_messages(
            task, system_prompt=self.system_prompt, instruction=self.instruction, examples=self.examples
        )

    async def __call__(self, task: dict[str, Any], ctx: RolloutContext) -> Outcome:
        messages = self.messages(task)
        schemas = self.registry.schemas()
        results: list[ToolResult] = []
        answer, reason, turn = "", TerminationReason.MAX_TURNS, 0
        for turn in range(1, self.max_turns + 1):
            completion = await ctx.chat(messages, trajectory=self.role, tools=schemas)
            parsed = self.parser.parse(completion.text)
            answer = parsed.content or ""
            if not parsed.tool_calls and not parsed.errors:
                messages.append({"role": "assistant", "content": completion.text})
                reason = TerminationReason.ENV_DONE
                break
            # The reply goes back verbatim (not re-rendered from the parsed calls): the next prompt then
            # extends this one token for token, and the turns train as one sequence.
            messages.append({"role": "assistant", "content": completion.text})
            turn_results = [self.registry.malformed(e) for e in parsed.errors]
            turn_results += await self.registry.execute_all(parsed.tool_calls)
            results += turn_results
            ctx.trajectories[self.role].steps[-1].info["tool_results"] = [
                r.model_dump() for r in turn_results
            ]
            for r in turn_results:
                messages.append(
                    {"role": "tool", "tool_call_id": r.call_id, "name": r.name, "content": r.content}
                )
        outcome = await score(self.reward_fn, task, answer)
        outcome.termination_reason = reason
        outcome.metrics.update(tool_metrics(results))
        outcome.metrics["tools/used"] = float(any(r.error is None for r in results))
        outcome.metrics["agent/turns"] = float(turn)
        outcome.metrics["agent/answered"] = float(reason == TerminationReason.ENV_DONE)
        outcome.info["messages"] = messages
        return outcome
