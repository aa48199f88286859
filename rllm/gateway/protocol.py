"""The OpenAI request shapes the gateway accepts, and its OpenAI-shaped errors.

Requests are validated here, at the edge, so the handlers can trust them. Fields the gateway does not
implement yet are refused with a 400 that names them (a knob that silently does nothing is worse than an
error); fields that change nothing about sampling (``user``, ``metadata``, ``stream: false`` ...) are
accepted and ignored, because agent frameworks send them by default.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

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


# Request fields the gateway would have to honour to be correct, and does not yet.
_UNSUPPORTED = {
    "tools": "tool calls are not supported by the gateway yet",
    "functions": "function calls are not supported by the gateway yet",
    "tool_choice": "tool calls are not supported by the gateway yet",
    "response_format": "response_format (JSON mode) is not supported by the gateway yet",
    "logit_bias": "logit_bias is not supported by the gateway yet",
    "presence_penalty": "presence_penalty is not supported by the gateway yet",
    "frequency_penalty": "frequency_penalty is not supported by the gateway yet",
    "best_of": "best_of is not supported by the gateway yet",
    "echo": "echo is not supported by the gateway yet",
    "logprobs": "logprobs in the response are not supported yet; read them from /sessions/{id}/traces",
    "top_logprobs": "top_logprobs are not supported by the gateway yet",
    "suffix": "suffix is not supported by the gateway yet",
}
# Values that mean "off" for the unsupported fields: sending them is harmless.
_OFF_VALUES: tuple[Any, ...] = (None, 0, 0.0, False, 1, {}, [], "none", "auto")


class TextPart(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["text"]
    text: str


class ChatMessage(BaseModel):
    """One chat message; content given as text parts is joined into one string for the template."""

    model_config = ConfigDict(extra="forbid")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None
    name: str | None = None
    tool_call_id: str | None = None

    def as_template_dict(self) -> dict[str, Any]:
        content = self.content
        if isinstance(content, list):
            content = "".join(p.text for p in content)
        out: dict[str, Any] = {"role": self.role, "content": content or ""}
        if self.name is not None:
            out["name"] = self.name
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        return out


class _SamplingRequest(BaseModel):
    """Fields shared by chat and text completions. Unknown fields are accepted and ignored (see module)."""

    model_config = ConfigDict(extra="allow")

    model: str
    n: int = Field(1, ge=1, le=128)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    max_tokens: int | None = Field(None, ge=1)
    stop: str | list[str] | None = None
    seed: int | None = None
    stream: bool | None = None

    @model_validator(mode="after")
    def _refuse_unsupported(self) -> _SamplingRequest:
        if self.stream:
            raise ValueError("stream=true is not supported by the gateway yet; send stream=false")
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
        return SamplingParams(**kwargs)


class ChatCompletionRequest(_SamplingRequest):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)

    def to_sampling_params(self) -> SamplingParams:
        # max_completion_tokens is the newer name; it wins when both are sent, as in OpenAI's API.
        return self.sampling_params(self.max_completion_tokens or self.max_tokens)


class CompletionRequest(_SamplingRequest):
    """A text completion of one prompt: a string, or a list of token ids (sent as is)."""

    prompt: str | list[int]

    @field_validator("prompt", mode="before")
    @classmethod
    def _one_prompt(cls, v: Any) -> Any:
        if isinstance(v, list) and v and not all(isinstance(x, int) for x in v):
            raise ValueError("send one prompt per request (a string or a list of token ids); batches of "
                             "prompts are not supported yet")
        return v

    @model_validator(mode="after")
    def _nonempty(self) -> CompletionRequest:
        if not self.prompt:
            raise ValueError("prompt must not be empty")
        return self

    def to_sampling_params(self) -> SamplingParams:
        # OpenAI's legacy completions default to 16 tokens.
        return self.sampling_params(self.max_tokens or 16)


def validation_error(exc: ValidationError) -> OpenAIError:
    """The first pydantic error, phrased for an API user, with the offending field as ``param``."""
    err = exc.errors()[0]
    loc = [str(p) for p in err.get("loc", ())]
    param = ".".join(loc) or None
    msg = err.get("msg", "invalid request")
    msg = msg.removeprefix("Value error, ")
    text = f"{param}: {msg}" if param else msg
    return OpenAIError(400, text, param=param)
