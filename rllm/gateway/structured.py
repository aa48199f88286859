"""Which grammar a chat request's reply must match on the local engine: structured outputs and forced or
strict tool calls, as llguidance Lark text (:mod:`rllm.inference.grammar` samples under it).

- ``tool_choice`` ``"required"`` or a named function: the whole reply is tool calls, each spelt as the
  tool format writes it (``CallSyntax``: ``<tool_call>\\n{"name": NAME, "arguments": ARGS}\\n</tool_call>``
  for hermes), NAME one of the tools (the named one), ARGS JSON matching that tool's ``parameters``
  schema. A named call is the only one and ends the reply (its end of sequence is forced); under
  ``"required"`` more calls may follow, one per line, unless ``parallel_tool_calls`` is false.
- ``response_format`` ``json_object`` / ``json_schema``: the reply is JSON (matching the schema; ``strict``
  or not, it is always held to it). With tools that the model may call, the reply is either that JSON or
  tool calls.
- A ``strict`` tool under ``tool_choice`` ``"auto"``: the reply is free text, but once the format's
  trigger (``<tool_call>``) appears the call must name a tool and a strict tool's arguments must match its
  schema (a lazy, triggered sub-grammar: llguidance's ``StructTag``). Other tools' arguments are then any
  JSON object.

JSON is laid out as ``json.dumps`` writes it (``", "`` and ``": "``, no other whitespace). An object schema
that names its ``properties`` and leaves ``additionalProperties`` unset is held closed (``closed_schema``:
only the named keys), as OpenAI's strict mode requires it be written: open, a sampling model may wander
into keys no tool takes (a random model does, in one reply of a few), each a free string.
Bad input (an unknown ``response_format`` type, a schema llguidance cannot compile, ``response_format``
with a forced tool call) is a 400 naming what to fix.
"""

from __future__ import annotations

import json
from typing import Any

import llguidance

from rllm.inference.grammar import JSON_LAYOUT, json_schema_grammar, lark_json
from rllm.tool_calls import CallSyntax

ANY_OBJECT: dict[str, Any] = {"type": "object"}


class StructureError(ValueError):
    """The request asks for a structure the gateway cannot build a grammar for; the message says what to
    fix (the upstream answers it as a 400)."""


def response_schema(response_format: Any) -> dict[str, Any] | None:
    """The JSON schema a chat ``response_format`` holds the reply to (``None``: plain text)."""
    if response_format is None:
        return None
    kind = response_format.get("type") if isinstance(response_format, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return dict(ANY_OBJECT)
    if kind == "json_schema":
        spec = response_format.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, dict) else None
        if not isinstance(schema, dict):
            raise StructureError(
                "response_format.json_schema.schema: send the JSON schema the reply must match, as "
                '{"type": "json_schema", "json_schema": {"name": ..., "schema": {...}}}'
            )
        return closed_schema(schema)
    raise StructureError(f"response_format.type must be 'text', 'json_object' or 'json_schema', got {kind!r}")


def output_grammar(
    *,
    tools: list[dict[str, Any]] | None,
    tool_choice: Any,
    response_format: Any,
    parallel_tool_calls: bool | None,
    syntax: CallSyntax | None,
) -> str | None:
    """Lark text for the reply of a chat request (``None``: unconstrained). ``syntax`` is the tool format's
    call spelling (``None`` when the format has no tool calls); ``tool_choice`` is already checked (a
    named function is among ``tools``)."""
    schema = response_schema(response_format)
    callable_tools = [t["function"] for t in tools or []] if tool_choice != "none" else []
    forced = tool_choice == "required" or isinstance(tool_choice, dict)
    if forced:
        if schema is not None:
            raise StructureError(
                "response_format cannot be combined with a forced tool_choice (the reply is a tool call): "
                "send one of them, or tool_choice 'auto'"
            )
        assert syntax is not None  # the upstream refuses a forced call in a format without calls
        if isinstance(tool_choice, dict):
            name = tool_choice["function"]["name"]
            (function,) = [f for f in callable_tools if f["name"] == name]
            return _lark(f"start: {_call(function, syntax, strict=True)}")
        many = parallel_tool_calls is not False
        return _lark(f"start: {_calls(callable_tools, syntax, strict=True, many=many)}")
    if schema is not None:
        answer = _json(schema, "response_format.json_schema.schema")
        if callable_tools and syntax is not None:
            calls = _calls(callable_tools, syntax, strict=False, many=parallel_tool_calls is not False)
            return _lark(f"start: {answer} | {calls}")
        return _lark(f"start: {answer}")
    if syntax is not None and any(f.get("strict") for f in callable_tools):
        tags = [
            llguidance.StructTag(
                trigger=syntax.trigger,
                begin=syntax.open + json.dumps(f["name"], ensure_ascii=False) + syntax.between,
                grammar=_checked(_schema(f, strict=False), f"tools[{f['name']}].parameters"),
                end=syntax.close,
            )
            for f in callable_tools
        ]
        return llguidance.StructTag.to_grammar(tags, assume_special=False)
    return None


_SUBSCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SUBSCHEMA_MAPS = ("properties", "$defs", "definitions", "patternProperties")


def closed_schema(schema: Any) -> Any:
    """``schema`` with every object schema that names ``properties`` and leaves ``additionalProperties``
    unset closed (``additionalProperties: false``), at any depth; an explicit ``additionalProperties`` is
    kept as written."""
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    for key in _SUBSCHEMA_MAPS:
        if isinstance(out.get(key), dict):
            out[key] = {name: closed_schema(sub) for name, sub in out[key].items()}
    for key in _SUBSCHEMA_LISTS:
        if isinstance(out.get(key), list):
            out[key] = [closed_schema(sub) for sub in out[key]]
    for key in ("items", "additionalProperties", "not", "if", "then", "else"):
        if isinstance(out.get(key), dict):
            out[key] = closed_schema(out[key])
    if isinstance(out.get("properties"), dict) and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out


def _lark(rules: str) -> str:
    return "%llguidance {}\n" + rules + "\n"


def _schema(function: dict[str, Any], *, strict: bool) -> dict[str, Any]:
    """The schema a call's arguments are held to: the tool's ``parameters`` when forced (``strict``) or
    when the tool is strict, else any JSON object; with the canonical layout."""
    parameters = function.get("parameters")
    schema = parameters if (strict or function.get("strict")) and isinstance(parameters, dict) else ANY_OBJECT
    return {**closed_schema(schema), "x-guidance": JSON_LAYOUT}


def _checked(schema: dict[str, Any], where: str) -> dict[str, Any]:
    """``schema``, once llguidance has compiled it: one that it cannot is a ``StructureError`` naming
    ``where`` it came from and why."""
    try:
        error = llguidance.LLMatcher.validate_grammar(json_schema_grammar(schema))
    except ValueError as exc:  # not a JSON object at all
        error = str(exc)
    if error:
        raise StructureError(f"{where}: this JSON schema cannot be used to constrain the reply: {error}")
    return schema


def _json(schema: dict[str, Any], where: str) -> str:
    return "(" + lark_json(_checked(schema, where)) + ")"


def _call(function: dict[str, Any], syntax: CallSyntax, *, strict: bool) -> str:
    head = syntax.open + json.dumps(function["name"], ensure_ascii=False) + syntax.between
    schema = _checked(_schema(function, strict=strict), f"tools[{function['name']}].parameters")
    return f"({json.dumps(head)} {lark_json(schema)} {json.dumps(syntax.close)})"


def _calls(functions: list[dict[str, Any]], syntax: CallSyntax, *, strict: bool, many: bool) -> str:
    one = "(" + " | ".join(_call(f, syntax, strict=strict) for f in functions) + ")"
    return f"({one} ({json.dumps(syntax.separator)} {one})*)" if many else one
