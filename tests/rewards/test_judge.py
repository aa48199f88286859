"""The LLM-judge reward through the real ``openai`` client, against a FAKE judge server on loopback.

A real judge model cannot run in the fast tier, so the server here is a FAKE: a small Starlette app that
speaks the chat-completions API and answers by a script chosen by a keyword in the response being
judged. What is real is everything on the client side: the openai client, HTTP, retries and timeouts.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Iterator

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from rllm.gateway.server import GatewayServer
from rllm.rewards.judge import (
    DEFAULT_JUDGE_PROMPT,
    make_async_llm_judge_reward,
    make_llm_judge_reward,
    parse_verdict,
)

MODEL = "fake-judge"
SLOW_S = 1.0

# Keyword in the judged response -> the FAKE judge's reply.
SCRIPT = {
    "say-correct": "The response names the same city.\nVERDICT: CORRECT",
    "say-incorrect": "Different city.\n**VERDICT: INCORRECT**",
    "say-unparseable": "I believe the response is right.",
    "say-think": "<think>VERDICT: INCORRECT? no.</think>Same answer.\nVerdict: correct.",
    "say-trailing": "VERDICT: CORRECT\nHope this helps!",
    "say-both": "VERDICT: INCORRECT\nOn reflection:\nVERDICT: CORRECT",
}


class FakeJudge:
    """The FAKE judge server's state: requests seen, and hits per keyword (for retry scripts)."""

    def __init__(self) -> None:
        self.requests: list[dict] = []
        self.hits: Counter[str] = Counter()
        self.url = ""

    def app(self) -> Starlette:
        async def chat(request: Request) -> Response:
            body = await request.json()
            self.requests.append({**body, "authorization": request.headers.get("authorization")})
            prompt = body["messages"][-1]["content"]
            key = next(
                (k for k in [*SCRIPT, "say-flaky", "say-down", "say-slow", "say-null"] if k in prompt), None
            )
            self.hits[key or ""] += 1
            if key == "say-flaky" and self.hits[key] == 1:
                return JSONResponse(
                    {"error": {"message": "overloaded"}}, status_code=500, headers={"retry-after-ms": "1"}
                )
            if key == "say-down":
                return JSONResponse(
                    {"error": {"message": "down"}}, status_code=500, headers={"retry-after-ms": "1"}
                )
            if key == "say-slow":
                await asyncio.sleep(SLOW_S)
            content = SCRIPT.get(key or "", "VERDICT: CORRECT")
            return JSONResponse(
                {
                    "id": "cmpl-1",
                    "object": "chat.completion",
                    "created": 0,
                    "model": body["model"],
                    "choices": [
                        {
                            "index": 0,
                            "finish_reason": "stop",
                            "message": {
                                "role": "assistant",
                                "content": None if key == "say-null" else content,
                            },
                        }
                    ],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                }
            )

        return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


@pytest.fixture(scope="module")
def fake_judge() -> Iterator[FakeJudge]:
    judge = FakeJudge()
    with GatewayServer(judge.app()) as server:
        judge.url = f"{server.url}/v1"
        yield judge


@pytest.fixture()
def judge(fake_judge: FakeJudge) -> FakeJudge:
    fake_judge.requests.clear()
    fake_judge.hits.clear()
    return fake_judge


def _task(truth: object = "Paris") -> dict:
    return {
        "task_id": "j1",
        "question": "What is the capital of France?",
        "ground_truth": truth,
        "data_source": "test",
    }


@pytest.mark.parametrize(
    ("reply", "verdict"),
    [
        ("VERDICT: CORRECT", True),
        ("Reasons.\nVERDICT: INCORRECT", False),
        ("Reasons.\n**Verdict:** Correct.\n\n", True),
        ("<think>hmm</think>VERDICT: INCORRECT", False),
        ("VERDICT: CORRECT\nthanks", None),  # the verdict must be the last line
        ("VERDICT: INCORRECT\nVERDICT: CORRECT", None),  # contradicting verdicts
        ("VERDICT: PARTIALLY CORRECT", None),
        ("The answer is correct.", None),
        ("<think>VERDICT: CORRECT", None),
        ("", None),
    ],
)
def test_parse_verdict(reply: str, verdict: bool | None) -> None:
    assert parse_verdict(reply) is verdict


@pytest.mark.parametrize(
    ("keyword", "correct", "reason"),
    [
        ("say-correct", True, None),
        ("say-incorrect", False, None),
        ("say-think", True, None),
        ("say-unparseable", False, "judge_unparseable"),
        ("say-trailing", False, "judge_unparseable"),
        ("say-both", False, "judge_unparseable"),
        ("say-null", False, "judge_unparseable"),  # a reply without content
    ],
)
def test_verdicts_through_http(judge: FakeJudge, keyword: str, correct: bool, reason: str | None) -> None:
    reward = make_llm_judge_reward(base_url=judge.url, model=MODEL, api_key="k")
    result = reward(_task(), f"It is Paris ({keyword}).")
    assert result.is_correct is correct and result.reward == float(correct)
    assert result.info.get("reason") == reason
    if reason is None:
        assert result.info["verdict"] == ("CORRECT" if correct else "INCORRECT")
    json.dumps(result.info)


def test_the_judge_sees_question_reference_and_answer(judge: FakeJudge) -> None:
    reward = make_llm_judge_reward(base_url=judge.url, model=MODEL, api_key="secret", max_tokens=64)
    reward(_task(["Paris", "Paris, France"]), "<think>maybe Lyon</think>It is Paris {say-correct}.")
    (request,) = judge.requests
    prompt = request["messages"][0]["content"]
    assert request["model"] == MODEL and request["temperature"] == 0.0 and request["max_tokens"] == 64
    assert request["authorization"] == "Bearer secret"
    assert "What is the capital of France?" in prompt and "any of: Paris | Paris, France" in prompt
    assert "It is Paris {say-correct}." in prompt  # braces in the response are not a template
    assert "Lyon" not in prompt  # the policy's reasoning is not shown to the judge


def test_custom_template(judge: FakeJudge) -> None:
    template = "Q={question} REF={reference} R={response} {{literal}} say-incorrect"
    reward = make_llm_judge_reward(base_url=judge.url, model=MODEL, api_key="k", prompt_template=template)
    assert not reward(_task({"value": 3}), "3").is_correct
    assert (
        judge.requests[0]["messages"][0]["content"] == 'Q=What is the capital of France? REF={"value": 3} '
        "R=3 {literal} say-incorrect"
    )
    with pytest.raises(ValueError, match="response"):
        make_llm_judge_reward(base_url=judge.url, model=MODEL, prompt_template="{question} {reference}")
    with pytest.raises(ValueError, match="extra"):
        make_llm_judge_reward(
            base_url=judge.url, model=MODEL, prompt_template="{question} {reference} {response} {extra}"
        )
    assert "{question}" in DEFAULT_JUDGE_PROMPT


def test_http_500_is_retried(judge: FakeJudge) -> None:
    reward = make_llm_judge_reward(base_url=judge.url, model=MODEL, api_key="k", max_retries=2)
    result = reward(_task(), "Paris say-flaky")
    assert result.is_correct and judge.hits["say-flaky"] == 2  # one 500, then the answer


def test_endpoint_failure_after_retries_scores_zero(judge: FakeJudge) -> None:
    reward = make_llm_judge_reward(base_url=judge.url, model=MODEL, api_key="k", max_retries=1)
    result = reward(_task(), "Paris say-down")
    assert not result.is_correct and result.reward == 0.0
    assert result.info["reason"] == "judge_error" and "500" in result.info["error"]
    assert judge.hits["say-down"] == 2


def test_timeout_scores_zero(judge: FakeJudge) -> None:
    reward = make_llm_judge_reward(base_url=judge.url, model=MODEL, api_key="k", timeout_s=0.2, max_retries=0)
    start = time.monotonic()
    result = reward(_task(), "Paris say-slow")
    assert time.monotonic() - start < SLOW_S
    assert result.info["reason"] == "judge_error" and "Timeout" in result.info["error"]


def test_unreachable_endpoint_scores_zero() -> None:
    reward = make_llm_judge_reward(base_url="http://127.0.0.1:9/v1", model=MODEL, api_key="k", max_retries=0)
    result = reward(_task(), "Paris")
    assert result.info["reason"] == "judge_error" and "Connection" in result.info["error"]


def test_nothing_to_judge_skips_the_call(judge: FakeJudge) -> None:
    reward = make_llm_judge_reward(base_url=judge.url, model=MODEL, api_key="k")
    assert reward(_task(), "<think>Paris say-correct").info == {"reason": "unclosed_think"}
    assert reward(_task(), "<think>x</think>  ").info == {"reason": "empty_response"}
    assert judge.requests == []


@pytest.mark.parametrize(
    "task",
    [
        {"task_id": "j1", "ground_truth": "Paris"},
        {"task_id": "j1", "question": "Q?"},
        {**_task(), "ground_truth": ""},
    ],
)
def test_malformed_task_raises_before_any_call(judge: FakeJudge, task: dict) -> None:
    reward = make_llm_judge_reward(base_url=judge.url, model=MODEL, api_key="k")
    with pytest.raises(ValueError, match="j1"):
        reward(task, "<think>unclosed")
    assert judge.requests == []


def test_async_judge(judge: FakeJudge) -> None:
    reward = make_async_llm_judge_reward(base_url=judge.url, model=MODEL, api_key="k", max_retries=2)

    async def grade_all() -> list:
        results = await asyncio.gather(
            *(
                reward(_task(), f"Paris {k}")
                for k in ["say-correct", "say-incorrect", "say-unparseable", "say-flaky"]
            )
        )
        await reward.aclose()
        return results

    results = asyncio.run(grade_all())
    assert [r.is_correct for r in results] == [True, False, False, True]
    assert results[2].info["reason"] == "judge_unparseable"

    # A second event loop gets its own client: the first loop's connections are not reused across loops.
    async def grade_one() -> bool:
        try:
            return (await reward(_task(), "Paris say-correct")).is_correct
        finally:
            await reward.aclose()

    assert asyncio.run(grade_one())


def test_async_judge_errors_score_zero(judge: FakeJudge) -> None:
    slow = make_async_llm_judge_reward(
        base_url=judge.url, model=MODEL, api_key="k", timeout_s=0.2, max_retries=0
    )
    down = make_async_llm_judge_reward(base_url=judge.url, model=MODEL, api_key="k", max_retries=1)

    async def grade() -> list:
        results = await asyncio.gather(slow(_task(), "say-slow"), down(_task(), "say-down"))
        await slow.aclose()
        await down.aclose()
        return results

    for result in asyncio.run(grade()):
        assert result.reward == 0.0 and result.info["reason"] == "judge_error"
