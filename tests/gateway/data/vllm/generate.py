"""Regenerate the vLLM response fixtures in this folder from a real vLLM server.

    .venv/bin/python tests/gateway/data/vllm/generate.py                # starts its own server
    .venv/bin/python tests/gateway/data/vllm/generate.py --base-url http://127.0.0.1:8765/v1
    .venv/bin/python tests/gateway/data/vllm/generate.py --only chat_named_tool_choice     # one case

Needs the vLLM venv (scripts/setup_vllm.sh) and the built-in model. Each fixture is one JSON file:
``endpoint``, ``request`` (the exact body sent), ``status`` and either ``response`` (the parsed JSON
body) or, for ``"stream": true``, ``events`` (every SSE ``data:`` payload in order, parsed, with the
final ``"[DONE]"`` kept as a string). Requests use small ``max_tokens`` and fixed seeds, so the files
stay small and a rerun gives the same tokens. docs/vllm_notes.md explains what each case shows.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import httpx

HERE = Path(__file__).resolve().parent
MODEL = "smollm2-135m"
CHAT = "/chat/completions"
COMPLETIONS = "/completions"
HI = [{"role": "user", "content": "Hi"}]
YES_NO = [{"role": "user", "content": "Reply with one word: yes or no. Is the sky blue?"}]
# The ChatML text of YES_NO (without the default system prompt): greedy decoding stops on <|im_end|>.
YES_NO_TEXT = (
    "<|im_start|>user\nReply with one word: yes or no. Is the sky blue?<|im_end|>\n<|im_start|>assistant\n"
)
PROMPT = "The capital of France is"
PROMPT_IDS = [504, 3575, 282, 4649, 314]  # PROMPT tokenized (no BOS is added)

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}

# Fields that make vLLM return token ids and per-token logprobs of the sampled tokens.
CHAT_IDS = {"logprobs": True, "return_token_ids": True}
COMPLETION_IDS = {"logprobs": 0, "return_token_ids": True}
SAMPLE = {"temperature": 1.0, "seed": 1234}

CASES: dict[str, tuple[str, dict[str, Any]]] = {
    # The four basic shapes, each with n=1 and n=2.
    "chat_n1": (CHAT, {"messages": HI, "max_tokens": 6, **SAMPLE, **CHAT_IDS}),
    "chat_n2": (CHAT, {"messages": HI, "max_tokens": 6, "n": 2, **SAMPLE, **CHAT_IDS}),
    "chat_stream_n1": (
        CHAT,
        {
            "messages": HI,
            "max_tokens": 6,
            "stream": True,
            "stream_options": {"include_usage": True},
            **SAMPLE,
            **CHAT_IDS,
        },
    ),
    "chat_stream_n2": (
        CHAT,
        {
            "messages": HI,
            "max_tokens": 6,
            "n": 2,
            "stream": True,
            "stream_options": {"include_usage": True},
            **SAMPLE,
            **CHAT_IDS,
        },
    ),
    "completions_n1": (COMPLETIONS, {"prompt": PROMPT, "max_tokens": 6, **SAMPLE, **COMPLETION_IDS}),
    "completions_n2": (COMPLETIONS, {"prompt": PROMPT, "max_tokens": 6, "n": 2, **SAMPLE, **COMPLETION_IDS}),
    "completions_stream_n1": (
        COMPLETIONS,
        {
            "prompt": PROMPT,
            "max_tokens": 6,
            "stream": True,
            "stream_options": {"include_usage": True},
            **SAMPLE,
            **COMPLETION_IDS,
        },
    ),
    "completions_stream_n2": (
        COMPLETIONS,
        {
            "prompt": PROMPT,
            "max_tokens": 6,
            "n": 2,
            "stream": True,
            "stream_options": {"include_usage": True},
            **SAMPLE,
            **COMPLETION_IDS,
        },
    ),
    # The prompt as a list of token ids.
    "completions_prompt_token_ids": (
        COMPLETIONS,
        {"prompt": PROMPT_IDS, "max_tokens": 4, **SAMPLE, **COMPLETION_IDS},
    ),
    # Stopping on eos (<|im_end|>, id 2): token_ids and logprobs include it, the text does not.
    "chat_eos": (CHAT, {"messages": YES_NO, "max_tokens": 8, "temperature": 0.0, **CHAT_IDS}),
    "chat_stream_eos": (
        CHAT,
        {"messages": YES_NO, "max_tokens": 8, "temperature": 0.0, "stream": True, **CHAT_IDS},
    ),
    "completions_eos": (
        COMPLETIONS,
        {"prompt": YES_NO_TEXT, "max_tokens": 8, "temperature": 0.0, **COMPLETION_IDS},
    ),
    "completions_stream_eos": (
        COMPLETIONS,
        {"prompt": YES_NO_TEXT, "max_tokens": 8, "temperature": 0.0, "stream": True, **COMPLETION_IDS},
    ),
    # Stop string / stop token: finish_reason "stop", stop_reason is the string / the token id.
    "completions_stop_string": (
        COMPLETIONS,
        {"prompt": "1, 2, 3,", "max_tokens": 8, "temperature": 0.0, "stop": [" 5"], **COMPLETION_IDS},
    ),
    "completions_stop_string_included": (
        COMPLETIONS,
        {
            "prompt": "1, 2, 3,",
            "max_tokens": 8,
            "temperature": 0.0,
            "stop": [" 5"],
            "include_stop_str_in_output": True,
            **COMPLETION_IDS,
        },
    ),
    "completions_stop_token_id": (
        COMPLETIONS,
        {"prompt": "1, 2, 3,", "max_tokens": 8, "temperature": 0.0, "stop_token_ids": [28], **COMPLETION_IDS},
    ),
    # -inf logprobs (tokens removed by top_k) are reported as -9999.0.
    "chat_top_k1_top_logprobs": (
        CHAT,
        {"messages": HI, "max_tokens": 2, "top_k": 1, "top_logprobs": 2, **SAMPLE, **CHAT_IDS},
    ),
    "completions_top_k1_logprobs2": (
        COMPLETIONS,
        {"prompt": PROMPT, "max_tokens": 2, "top_k": 1, **SAMPLE, **COMPLETION_IDS, "logprobs": 2},
    ),
    # Alternatives and extras.
    "chat_return_tokens_as_token_ids": (
        CHAT,
        {"messages": HI, "max_tokens": 3, "logprobs": True, "return_tokens_as_token_ids": True, **SAMPLE},
    ),
    "completions_prompt_logprobs": (
        COMPLETIONS,
        {"prompt": PROMPT, "max_tokens": 2, "prompt_logprobs": 0, **SAMPLE, **COMPLETION_IDS},
    ),
    # A named tool_choice (the server runs --tool-call-parser hermes): vLLM's grammar writes the call's
    # opening and the name; the tokens it left no choice over come with logprob 0.0.
    "chat_named_tool_choice": (
        CHAT,
        {
            "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
            "tools": [WEATHER_TOOL],
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
            "max_tokens": 48,
            "temperature": 0.0,
            **CHAT_IDS,
        },
    ),
    "completions_error_too_many_logprobs": (
        COMPLETIONS,
        {"prompt": PROMPT, "max_tokens": 2, "logprobs": 21, "return_token_ids": True},
    ),
}


def run_case(client: httpx.Client, endpoint: str, request: dict[str, Any]) -> dict[str, Any]:
    """Send one request and record the response (or the SSE events) as a fixture dict."""
    body = {"model": MODEL, **request}
    record: dict[str, Any] = {"endpoint": "/v1" + endpoint, "request": body}
    if body.get("stream"):
        with client.stream("POST", endpoint, json=body) as r:
            record["status"] = r.status_code
            if r.status_code != 200:
                record["response"] = json.loads(r.read())
                return record
            events: list[Any] = []
            for line in r.iter_lines():
                if line.startswith("data: "):
                    data = line[len("data: ") :]
                    events.append(data if data == "[DONE]" else json.loads(data))
            record["events"] = events
        return record
    r = client.post(endpoint, json=body)
    record["status"] = r.status_code
    record["response"] = r.json()
    return record


def generate(base_url: str, server_args: list[str] | None, only: list[str] | None = None) -> None:
    with httpx.Client(base_url=base_url, timeout=300.0, trust_env=False) as client:
        version = client.get(base_url.removesuffix("/v1") + "/version").json().get("version")
        for name, (endpoint, request) in CASES.items():
            if only and name not in only:
                continue
            record = {
                "vllm_version": version,
                "server_args": server_args,
                **run_case(client, endpoint, request),
            }
            path = HERE / f"{name}.json"
            path.write_text(json.dumps(record, indent=1) + "\n")
            print(f"{path.name}: status {record['status']}", file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--base-url", help="an already running server started like VLLMServer's defaults")
    parser.add_argument("--only", nargs="+", choices=sorted(CASES), help="record these cases only")
    args = parser.parse_args()
    if args.base_url:
        generate(args.base_url, None, args.only)
        return
    from rllm.inference.vllm_server import VLLMServer
    from rllm.models import resolve_model

    with VLLMServer(resolve_model(MODEL), served_model_name=MODEL, tool_call_parser="hermes") as server:
        cmd = server.command()[3:]  # without "python -m vllm.entrypoints.openai.api_server"
        cmd[cmd.index("--model") + 1] = "<model dir>"
        cmd[cmd.index("--port") + 1] = "<port>"
        generate(server.base_url, cmd, args.only)


if __name__ == "__main__":
    main()
