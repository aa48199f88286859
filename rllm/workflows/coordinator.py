"""Coordinator: a task of several parts is split into sub-tasks, each handed to the worker role that has done
best on that kind of sub-task so far, and the coordinator role writes the final answer from the workers'
reports. Every role is trained on its own contribution.

    workflow = CoordinatorWorkflow({"worker_a": "plain", "worker_b": "worked_example"}, exploration=1.0)
    cfg.algorithm.advantage = {"worker_a": "grpo", "worker_b": "grpo", "coordinator": "grpo"}

What code does and what the model does:

- **Split (code).** The task's parts are read from ``task["metadata"]["parts"]`` (``{"kind", "question",
  "ground_truth"}`` each; ``data.task=multi_part``). The split is structural, not written by the model.
- **Assignment (code).** Each part goes to a worker role chosen by ``CapabilityTable.choose(kind)``: UCB1
  over each role's running success rate on that kind, kept across episodes (``rllm.workflows.capability``).
  A greedy rollout (temperature 0: the held-out eval) takes the best rate, without exploring, and leaves
  the table as it is.
- **Sub-tasks (model, worker roles).** Each worker answers its part in its own trajectory (role = its name,
  key ``<role>#<part>``), prompted in its own style: ``plain`` (the question alone) or ``worked_example``
  (a system prompt and one solved question of the same kind first). The parts run concurrently.
- **Final answer (model, coordinator role).** The coordinator reads every part's question with its worker's
  reply and writes the final answer, the parts' answers in order ("82, 7, 3"): it extracts each number
  from a worker's wording, orders them, and may overrule a worker it believes wrong.
  With ``constrain_final`` (the default) its reply is held by a grammar to the answer's shape, exactly one
  number per part separated by ", " (``final_grammar``, llguidance through the engine's constrained
  decoding): which numbers, from which wording, in what order is still the model's choice; the separators
  and the end, which the grammar leaves no choice in, are recorded as forced (mask 0).

Credit by contribution: a worker trajectory's reward is its own part's score, set by ``worker_reward``:

- ``reported`` (the default): the number its reply passes on, its last number (``extract_last_number``,
  what the coordinator is shown to copy and what ``contribution`` credit compares with), is the part's
  truth (``last_number`` reward). "3 + 2 = 5" is a right report of 3 + 2: greedy SmolLM2-135M wrote 6 of 8
  held-out sums that way, and a faithful coordinator passes its 5 on.
- ``exact``: the reply is exactly one number, the truth (``number`` reward, the single-kind tasks'). It
  also asks the worker for the format "just the number", which the system does not need, and scores
  0 on most of the untrained model's sums, so neither the capability table nor the worker's own groups
  can tell a worker who adds right from one who does not.

Either way a reply cut off at ``rollout.max_tokens`` scores 0: the report never ended, and its last number
is wherever the cut fell. Without that rule ``reported`` paid for rambling: in a warm-started 16-step run
the workers drifted to replies like "49\n49 is the only number that ..." and "1\n1\n1\n..." (the right
number repeated to the cap), and the coordinator, copying from them, fell from 96 % faithful to 26 %.

The coordinator's depends on ``coordinator_reward``:

- ``contribution`` (the default): what it did with what it was told. Per part, 1 when its number is the
  truth (a right worker's answer passed on, or a wrong one overruled) or is its worker's answer (a worker's
  mistake passed on: not the coordinator's to carry), averaged over the parts; 0 unless it lists as many
  numbers as there are parts. A wrong worker's error stays with that worker's own reward.
- ``final``: the final answer's score against the truth (``reward_fn``, the dataset's ``number_list``:
  the fraction of parts right, 0 unless it lists as many numbers as there are parts), so every worker's
  mistake lowers the coordinator's reward too.

The episode's reward and correctness are the final answer's (``reward_fn``) either way. Across the ``group_size`` attempts at a task each role forms its own advantage
group (``algorithm.advantage`` per role works).

Metrics: ``coordinator/accuracy`` (the final answer is right), ``coordinator/faithful`` (it lists exactly the
workers' answers, in order), ``parts/accuracy`` and ``parts/<kind>/accuracy`` (the workers' answers),
``parts/all_correct`` (every part right; under ``worker_reward=reported``, what a faithful coordinator's
final answer scores, but for a reply cut off at ``max_tokens`` whose last number happens to be right),
``<role>/accuracy`` (over the parts that role answered in the episode), and the table:
``coordinator/capability/<role>/<kind>`` (running success rate), ``coordinator/assigned/<role>/<kind>``.
"""

from __future__ import annotations

import asyncio
import random
import re
from collections.abc import Mapping
from typing import Any

from rllm.data.builtin import GENERATORS, is_held_out
from rllm.inference.grammar import Grammar
from rllm.rewards.basic import (
    extract_last_number,
    last_number_reward,
    number_list,
    number_list_reward,
    number_reward,
)
from rllm.runner.context import RolloutContext
from rllm.types import Outcome
from rllm.workflows.capability import CapabilityTable
from rllm.workflows.single_turn import RewardFn, score

COORDINATOR = "coordinator"
COORDINATOR_REWARDS: tuple[str, ...] = ("contribution", "final")
"""How the coordinator's own trajectory is rewarded (see the module docstring)."""
WORKER_REWARDS: dict[str, RewardFn] = {"reported": last_number_reward, "exact": number_reward}
"""How a worker's part is scored (see the module docstring): ``reported``, the number the coordinator reads
from its reply (the last one) is the truth; ``exact``, the reply is that one number and nothing else."""
WORKER_STYLES: tuple[str, ...] = ("plain", "worked_example")
"""How a worker is prompted: ``plain``, the part's question alone; ``worked_example``, a system prompt and
one solved question of the part's kind before it."""

WORKER_SYSTEM_PROMPT = "You answer short questions. Reply with only the answer."
COORDINATOR_PROMPT = (
    "You coordinate workers. A task had {n} parts; each part went to a worker.\n\n{reports}\n\n"
    "Write the final answer: the number each worker found, in the order of the parts, separated by commas."
)
# The coordinator's worked example: told the format alone, SmolLM2-135M answers one number ("The answer is
# 41.") in 6 of 6 greedy replies and never lists one per part; after this solved prompt it writes "74, 6".
_EXAMPLE_PARTS = [
    {"question": "Which number is larger, 41 or 17? Answer with just the number."},
    {"question": "What is 2 + 4? Answer with just the number."},
]
_EXAMPLE_REPLIES = ["The larger number is 41.", "6"]
_EXAMPLE_ANSWER = "41, 6"


def _worked_example(kind: str) -> list[dict[str, str]]:
    """One solved train question of ``kind`` as a user/assistant pair (the first train problem of seed 0)."""
    rng = random.Random(0)
    problem = GENERATORS[kind](rng)
    while is_held_out(kind, problem):
        problem = GENERATORS[kind](rng)
    return [{"role": "user", "content": problem.question}, {"role": "assistant", "content": problem.answer}]


def _report(parts: list[dict[str, Any]], replies: list[str]) -> str:
    reports = "\n".join(
        f"Part {i + 1}: {p['question']}\nWorker's answer: {r.strip()}"
        for i, (p, r) in enumerate(zip(parts, replies, strict=True))
    )
    return COORDINATOR_PROMPT.format(n=len(parts), reports=reports)


def coordinator_messages(parts: list[dict[str, Any]], replies: list[str]) -> list[dict[str, str]]:
    """The coordinator's prompt: a solved example, then each part's question with its worker's reply and
    the answer format."""
    return [
        {"role": "user", "content": _report(_EXAMPLE_PARTS, _EXAMPLE_REPLIES)},
        {"role": "assistant", "content": _EXAMPLE_ANSWER},
        {"role": "user", "content": _report(parts, replies)},
    ]


# One number of the final answer: the grammar's NUMBER terminal, and what a faithful example may pass on.
_INTEGER = re.compile(r"-?[0-9]{1,12}")


def final_grammar(n_parts: int) -> str:
    """The final answer's shape as a Lark grammar: ``n_parts`` integers (at most 12 digits each) separated
    by ", ", nothing else."""
    numbers = ' ", " '.join(["NUMBER"] * n_parts)
    return f"start: {numbers}\nNUMBER: /{_INTEGER.pattern}/\n"


def _same_number(a: str | None, b: str | None) -> bool:
    try:
        return a is not None and b is not None and float(a) == float(b)
    except ValueError:
        return False


def contribution_credit(final: str, truths: list[str], worker_numbers: list[str | None]) -> float:
    """The coordinator's reward under ``coordinator_reward=contribution``: per part, 1 when the final
    answer's number is the truth or is the number its worker gave, averaged over the parts; 0 unless the
    final answer lists exactly one number per part."""
    got = number_list(final)
    if len(got) != len(truths) or not truths:
        return 0.0
    credited = sum(
        _same_number(g, t) or _same_number(g, w) for g, t, w in zip(got, truths, worker_numbers, strict=True)
    )
    return credited / len(truths)


def faithful_example(parts: list[dict[str, Any]], replies: list[str]) -> dict[str, Any] | None:
    """One supervised example of the coordinator's job done faithfully: its prompt for these workers'
    ``replies`` and, as the assistant's answer, each worker's number (``extract_last_number``, what
    ``contribution`` credit compares with) in the order of the parts, in the final answer's grammar.
    None when a reply has no integer to pass on (the grammar holds the answer to integers).

    These examples are the coordinator's warm start (``examples/coordinator/warm_start.py`` writes them from
    the model's own sampled worker replies; ``rllm sft`` trains on them): the base model copies a number
    from its worker's wording in about 1 reply of 40, too rarely for RL to reinforce."""
    numbers = [extract_last_number(r) for r in replies]
    if any(n is None or not _INTEGER.fullmatch(n) for n in numbers):
        return None
    answer = ", ".join(str(n) for n in numbers)
    return {"messages": [*coordinator_messages(parts, replies), {"role": "assistant", "content": answer}]}


class CoordinatorWorkflow:
    """Split ``task`` into its parts, assign each to a worker of ``workers`` (role name -> style) by the
    capability table, and let the coordinator compose the final answer. One instance keeps one table."""

    def __init__(
        self,
        workers: Mapping[str, str],
        reward_fn: RewardFn = number_list_reward,
        *,
        worker_reward: str = "reported",
        exploration: float = 1.0,
        coordinator_reward: str = "contribution",
        constrain_final: bool = True,
        seed: int = 0,
        instruction: str | None = None,
    ) -> None:
        if len(workers) < 2:
            raise ValueError(
                f"a coordinator needs at least 2 worker roles to choose from, got {list(workers)}"
            )
        for role, style in workers.items():
            if style not in WORKER_STYLES:
                raise ValueError(
                    f"worker {role!r} has style {style!r}: choose one of {', '.join(WORKER_STYLES)}"
                )
        if COORDINATOR in workers:
            raise ValueError(f"{COORDINATOR!r} is the coordinator's own role: name the workers otherwise")
        if worker_reward not in WORKER_REWARDS:
            raise ValueError(f"worker_reward {worker_reward!r}: choose one of {', '.join(WORKER_REWARDS)}")
        if coordinator_reward not in COORDINATOR_REWARDS:
            raise ValueError(
                f"coordinator_reward {coordinator_reward!r}: choose one of {', '.join(COORDINATOR_REWARDS)}"
            )
        self.coordinator_reward = coordinator_reward
        self.constrain_final = constrain_final
        # The trainer refuses an engine without constrained decoding at start-up when this is set.
        self.needs_constraints = constrain_final
        self._grammars: dict[tuple[int, int], Grammar] = {}
        self.workers = dict(workers)
        self.reward_fn = reward_fn
        self.part_reward_fn = WORKER_REWARDS[worker_reward]
        self.table = CapabilityTable(list(workers), exploration=exploration, seed=seed)
        self._examples: dict[str, list[dict[str, str]]] = {}
        # The dataset's answer instruction is the final answer's format, which the coordinator's prompt
        # already states; accepted so the trainer's scoring arguments fit every workflow.
        del instruction

    def _final_grammar(self, tokenizer: Any, n_parts: int) -> Grammar:
        key = (id(tokenizer), n_parts)
        if key not in self._grammars:
            self._grammars[key] = Grammar(final_grammar(n_parts), tokenizer)
        return self._grammars[key]

    def state_dict(self) -> dict[str, Any]:
        """The capability table, which the trainer saves in each checkpoint and restores on resume."""
        return {"capability": self.table.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.table.load_state_dict(state["capability"])

    def worker_messages(self, role: str, part: dict[str, Any]) -> list[dict[str, str]]:
        """The prompt worker ``role`` sees for ``part``, in its style."""
        question = [{"role": "user", "content": part["question"]}]
        if self.workers[role] == "plain":
            return question
        kind = part["kind"]
        if kind not in self._examples:
            self._examples[kind] = _worked_example(kind) if kind in GENERATORS else []
        return [{"role": "system", "content": WORKER_SYSTEM_PROMPT}, *self._examples[kind], *question]

    async def _work(
        self, task: dict[str, Any], ctx: RolloutContext, i: int, role: str
    ) -> tuple[str, Outcome]:
        part = task["metadata"]["parts"][i]
        done = await ctx.chat(self.worker_messages(role, part), trajectory=role, key=f"{role}#{i}")
        if done.finish_reason == "length":  # cut off at max_tokens: the report never ended
            return done.text, Outcome(reward=0.0, is_correct=False, info={"truncated": True})
        scored = await score(self.part_reward_fn, {**part, "task_id": f"{task['task_id']}#{i}"}, done.text)
        return done.text, scored

    async def __call__(self, task: dict[str, Any], ctx: RolloutContext) -> Outcome:
        parts = (task.get("metadata") or {}).get("parts")
        if not parts:
            raise ValueError(
                f"task {task.get('task_id', '?')!r} has no metadata.parts: the coordinator workflow needs "
                "multi-part tasks (data.task=multi_part)"
            )
        explore = ctx.sampling.temperature > 0
        roles = [self.table.choose(p["kind"], explore=explore) for p in parts]
        done = await asyncio.gather(*(self._work(task, ctx, i, role) for i, role in enumerate(roles)))
        replies = [reply for reply, _ in done]
        if explore:
            for part, role, (_, scored) in zip(parts, roles, done, strict=True):
                self.table.record(role, part["kind"], scored.reward)
        grammar = self._final_grammar(ctx.engine.tokenizer, len(parts)) if self.constrain_final else None
        verdict = await ctx.chat(
            coordinator_messages(parts, replies), trajectory=COORDINATOR, grammar=grammar
        )
        final = await score(self.reward_fn, task, verdict.text)

        rewards: dict[str, float] = {
            f"{role}#{i}": s.reward for i, (role, (_, s)) in enumerate(zip(roles, done, strict=True))
        }
        part_correct = [bool(s.is_correct) for _, s in done]
        worker_numbers = [extract_last_number(r) for r in replies]
        if self.coordinator_reward == "final":
            rewards[COORDINATOR] = final.reward
        else:
            truths = [str(p["ground_truth"]) for p in parts]
            rewards[COORDINATOR] = contribution_credit(verdict.text, truths, worker_numbers)
        metrics = {
            "coordinator/accuracy": float(bool(final.is_correct)),
            "coordinator/faithful": float(number_list(verdict.text) == worker_numbers),
            "parts/accuracy": sum(part_correct) / len(part_correct),
            # What the final answer would score if the coordinator passed every worker's answer on faithfully.
            "parts/all_correct": float(all(part_correct)),
        }
        for part, ok in zip(parts, part_correct, strict=True):
            metrics[f"parts/{part['kind']}/accuracy"] = float(ok)
        for role in dict.fromkeys(roles):
            mine = [ok for r, ok in zip(roles, part_correct, strict=True) if r == role]
            metrics[f"{role}/accuracy"] = sum(mine) / len(mine)
        metrics.update(self.table.metrics())
        return Outcome(
            reward=final.reward,
            is_correct=final.is_correct,
            role_rewards=rewards,
            metrics=metrics,
            info={"assigned": roles, "replies": replies, "final": verdict.text},
        )
