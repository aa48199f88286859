"""Solver–judge: N solvers answer in parallel, a judge picks one; each role is trained on its own reward.

    workflow = SolverJudgeWorkflow(n_solvers=2)
    cfg.algorithm.advantage = {"solver": "grpo", "judge": "rloo"}    # an estimator per role

Trajectories: ``solver`` (N per episode, keys ``solver#0`` … ``solver#{N-1}``) and ``judge``. A solver's
reward is its own answer's score; the judge's reward is the score of the solution it picked (0 when it
names none). Across the ``group_size`` attempts at a task, all solver trajectories form one advantage
group and the judge trajectories another, so each role is compared with itself. The episode's reward and
correctness are the picked answer's: what the two-role system would answer.

Metrics: ``solver/accuracy`` (mean over solvers), ``judge/accuracy`` (picked a correct solution),
``judge/oracle`` (some solver was correct, so a perfect judge could score), ``judge/valid_pick``.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

from rllm.runner.context import RolloutContext
from rllm.types import Outcome
from rllm.workflows.single_turn import RewardFn, number_reward, question_messages, score

JUDGE_PROMPT = (
    "Question: {question}\n\n{solutions}\n\nWhich solution answers the question correctly? "
    "Answer with just the solution number."
)
_INT = re.compile(r"\d+")


def parse_pick(text: str, n: int) -> int | None:
    """The judge's pick as a 0-based index: the last integer in ``text`` that is a solution number."""
    picks = [int(m) for m in _INT.findall(text) if 1 <= int(m) <= n]
    return picks[-1] - 1 if picks else None


class SolverJudgeWorkflow:
    """``n_solvers`` solvers answer ``task["question"]``; a judge reads their answers and picks one."""

    def __init__(
        self,
        n_solvers: int = 2,
        reward_fn: RewardFn = number_reward,
        *,
        solver_system_prompt: str | None = None,
        judge_prompt: str = JUDGE_PROMPT,
        judge_max_tokens: int | None = None,
        instruction: str | None = None,
    ) -> None:
        if n_solvers < 2:
            raise ValueError(f"a judge needs at least 2 solutions to pick from: n_solvers={n_solvers}")
        self.n_solvers = n_solvers
        self.reward_fn = reward_fn
        self.solver_system_prompt = solver_system_prompt
        self.judge_prompt = judge_prompt
        self.judge_max_tokens = judge_max_tokens
        self.instruction = instruction

    async def _solve(self, task: dict[str, Any], ctx: RolloutContext, i: int) -> str:
        msgs = question_messages(task, system_prompt=self.solver_system_prompt, instruction=self.instruction)
        return (await ctx.chat(msgs, trajectory="solver", key=f"solver#{i}")).text

    async def __call__(self, task: dict[str, Any], ctx: RolloutContext) -> Outcome:
        answers = await asyncio.gather(*(self._solve(task, ctx, i) for i in range(self.n_solvers)))
        scores = await asyncio.gather(*(score(self.reward_fn, task, a) for a in answers))
        solutions = "\n".join(f"Solution {i + 1}: {a.strip()}" for i, a in enumerate(answers))
        prompt = self.judge_prompt.format(question=task["question"], solutions=solutions)
        overrides = {"max_tokens": self.judge_max_tokens} if self.judge_max_tokens else {}
        verdict = await ctx.chat([{"role": "user", "content": prompt}], trajectory="judge", **overrides)
        pick = parse_pick(verdict.text, self.n_solvers)
        picked = scores[pick] if pick is not None else Outcome(reward=0.0, is_correct=False)
        rewards = {f"solver#{i}": s.reward for i, s in enumerate(scores)}
        rewards["judge"] = picked.reward
        correct = [bool(s.is_correct) for s in scores]
        return Outcome(
            reward=picked.reward,
            is_correct=picked.is_correct,
            role_rewards=rewards,
            metrics={
                "solver/accuracy": sum(correct) / len(correct),
                "judge/accuracy": float(bool(picked.is_correct)),
                "judge/oracle": float(any(correct)),
                "judge/valid_pick": float(pick is not None),
            },
            info={"answers": answers, "pick": pick},
        )
