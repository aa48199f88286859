"""The OpenAI request shapes the gateway accepts, and its OpenAI-shaped errors.

Requests are validated here, at the edge, so the handlers can trust them. Fields the gateway does not
implement yet are refused with a 400 that names them (a knob that silently does nothing is worse than an
error); fields that change nothing about sampling (``user``, ``metadata``, ``stream: false`` ...) are
accepted and ignored, because agent frameworks send them by default.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    ValidationError,
    field_validator,
    model_validator,
)

from rllm.inference.base import SamplingParams


class OpenAIError(Exception):
    """An error the gateway returns as ``{"error": {"message", "type", "param", "code"}}``."""

    def __init__(
        self,
        status_code: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message
        self.type = type
        self.param = param
        self.code = code

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


# Request fields the gateway would have to honour to be correct, and does not.
_UNSUPPORTED = {
    "functions": "the legacy 'functions' field is not supported: send 'tools' instead",
    "function_call": "the legacy 'function_call' field is not supported: send 'tool_choice' instead",
    "response_format": "response_format is supported on chat completions only (send the request to "
    "/v1/chat/completions)",
    "logit_bias": "logit_bias is not supported by the gateway",
    "presence_penalty": "presence_penalty is not supported by the gateway",
    "frequency_penalty": "frequency_penalty is not supported by the gateway",
    "best_of": "best_of is not supported by the gateway",
    "echo": "echo is not supported by the gateway",
    "suffix": "suffix is not supported by the gateway",
}
# Values that mean "off" for the unsupported fields: sending them is harmless.
_OFF_VALUES: tuple[Any, ...] = (None, 0, 0.0, False, 1, {}, [], "none", "auto", {"type": "text"})


_NO_TOP_LOGPROBS = (
    "top_logprobs > 0 is not supported: the gateway reports the sampled token's logprob only (send 0)"
)


class TextPart(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["text"]
    text: str


class FunctionCall(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    arguments: str


class ToolCallSpec(BaseModel):
    """An assistant message's tool call, as OpenAI clients send it back in the history."""

    model_config = ConfigDict(extra="forbid")

    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(BaseModel):
    """One chat message; content given as text parts is joined into one string for the template."""

    model_config = ConfigDict(extra="forbid")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None
    name: str | None = None
    tool_call_id: str | None = None
    tool_calls: list[ToolCallSpec] | None = None
    refusal: str | None = None

    @model_validator(mode="after")
    def _tool_fields_fit_role(self) -> ChatMessage:
        if self.tool_calls and self.role != "assistant":
            raise ValueError("only assistant messages carry tool_calls")
        if self.role == "tool" and not self.tool_call_id:
            raise ValueError("a tool message needs the tool_call_id of the call it answers")
        return self

    def as_template_dict(self) -> dict[str, Any]:
        content = self.content
        if isinstance(content, list):
            content = "".join(p.text for p in content)
        out: dict[str, Any] = {"role": self.role, "content": content or ""}
        if self.name is not None:
            out["name"] = self.name
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        if self.tool_calls:
            out["tool_calls"] = [tc.model_dump() for tc in self.tool_calls]
        return out


class FunctionSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ToolSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["function"]
    function: FunctionSpec


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow")

    include_usage: bool = False


class _SamplingRequest(BaseModel):
    """Fields shared by chat and text completions. Unknown fields are accepted and ignored (see module)."""

    model_config = ConfigDict(extra="allow")

    model: str
    n: int = Field(1, ge=1, le=128)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    max_tokens: int | None = Field(None, ge=1)
    stop: str | list[str] | None = None
    seed: int | None = Field(None, ge=-(2**63), lt=2**63)
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    # vLLM's extensions, spoken here too: the reply carries the prompt and completion token ids; top_k
    # (0 or -1: off) and ignore_eos sample as in vLLM.
    return_token_ids: bool | None = None
    top_k: int | None = Field(None, ge=-1, le=2**31)
    ignore_eos: bool | None = None

    @model_validator(mode="after")
    def _refuse_unsupported(self) -> _SamplingRequest:
        for key, value in (self.model_extra or {}).items():
            if key in _UNSUPPORTED and not any(value == off for off in _OFF_VALUES):
                raise ValueError(_UNSUPPORTED[key])
        if isinstance(self.stop, list) and len(self.stop) > 4:
            raise ValueError("stop takes at most 4 sequences")
        return self

    def sampling_params(self, max_tokens: int | None) -> SamplingParams:
        kwargs: dict[str, Any] = {"n": self.n, "stop": self.stop, "seed": self.seed}
        if self.temperature is not None:
            kwargs["temperature"] = self.temperature
        if self.top_p is not None:
            kwargs["top_p"] = self.top_p
        if max_tokens is not None:
            kwargs["max_tokens"] = max_tokens
        if self.top_k is not None and self.top_k > 0:
            kwargs["top_k"] = self.top_k
        if self.ignore_eos:
            kwargs["ignore_eos"] = True
        return SamplingParams(**kwargs)


class ChatCompletionRequest(_SamplingRequest):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    tools: list[ToolSpec] | None = None
    tool_choice: Literal["none", "auto", "required"] | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    # {"type": "text" | "json_object" | "json_schema", ...}: checked where its grammar is built
    # (rllm.gateway.structured), so an HTTP upstream gets it as the client sent it.
    response_format: dict[str, Any] | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = Field(None, ge=0)

    @model_validator(mode="after")
    def _tool_choice_needs_tools(self) -> ChatCompletionRequest:
        if self.tool_choice not in (None, "none") and not self.tools:
            raise ValueError("tool_choice needs tools: send the tools the model may call")
        if self.top_logprobs:
            raise ValueError(_NO_TOP_LOGPROBS)
        return self

    def to_sampling_params(self) -> SamplingParams:
        # max_completion_tokens is the newer name; it wins when both are sent, as in OpenAI's API.
        return self.sampling_params(self.max_completion_tokens or self.max_tokens)

    @property
    def max_tokens_given(self) -> bool:
        return self.max_completion_tokens is not None or self.max_tokens is not None


class CompletionRequest(_SamplingRequest):
    """A text completion of one prompt: a string, or a list of token ids (sent as is)."""

    prompt: str | list[StrictInt]
    logprobs: int | None = Field(None, ge=0)

    @field_validator("logprobs")
    @classmethod
    def _sampled_logprob_only(cls, v: int | None) -> int | None:
        if v:
            raise ValueError(_NO_TOP_LOGPROBS.replace("top_logprobs", "logprobs"))
        return v

    @field_validator("prompt", mode="before")
    @classmethod
    def _one_prompt(cls, v: Any) -> Any:
        if isinstance(v, list) and v and not all(isinstance(x, int) for x in v):
            raise ValueError(
                "send one prompt per request (a string or a list of token ids); batches of "
                "prompts are not supported yet"
            )
        return v

    @model_validator(mode="after")
    def _nonempty(self) -> CompletionRequest:
        if not self.prompt:
            raise ValueError("prompt must not be empty")
        return self

    def to_sampling_params(self) -> SamplingParams:
        # OpenAI's legacy completions default to 16 tokens.
        return self.sampling_params(self.max_tokens or 16)

    @property
    def max_tokens_given(self) -> bool:
        return self.max_tokens is not None


def validation_error(exc: ValidationError) -> OpenAIError:
    """The first pydantic error, phrased for an API user, with the offending field as ``param``."""
    err = exc.errors()[0]
    loc = [str(p) for p in err.get("loc", ())]
    param = ".".join(loc) or None
    msg = err.get("msg", "invalid request")
    msg = msg.removeprefix("Value error, ")
    text = f"{param}: {msg}" if param else msg
    return OpenAIError(400, text, param=param)
