"""Whether an answer is one the client can use at all: its tool calls and structured output.

A request with ``tools``, ``tool_choice`` or a JSON ``response_format`` sets a
contract: calls must name an offered function, their arguments must be JSON that
fits that function's schema, ``tool_choice`` must be honoured, and JSON output must
parse (and fit its schema). A draft that breaks the contract is never served,
however confident the local model was: confidence says nothing about a misspelt
function. Pure: plain data in, the first violation (or None) out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import orjson
from jsonschema import SchemaError
from jsonschema.validators import validator_for

from app.routing.patterns import bounded
from app.routing.tool_calls import NOT_JSON, ToolCall


class Violation(StrEnum):
    """How an answer breaks its request's contract (a reason the client and the log see)."""

    UNKNOWN_FUNCTION = "tool_call_unknown_function"
    ARGUMENTS_NOT_JSON = "tool_call_arguments_not_json"
    ARGUMENTS_INVALID = "tool_call_arguments_invalid"
    CALL_REQUIRED = "tool_call_required"
    WRONG_FUNCTION = "tool_call_wrong_function"
    CALL_FORBIDDEN = "tool_call_forbidden"
    OUTPUT_NOT_JSON = "output_not_json"
    OUTPUT_INVALID = "output_schema_invalid"


@dataclass(frozen=True, slots=True)
class Contract:
    """What a request demands of any answer to it."""

    functions: dict[str, Any] = field(default_factory=dict)  # name -> parameters schema
    tool_choice: str = "auto"  # auto | none | required | function
    named: str | None = None  # the function tool_choice names
    json_output: bool = False  # response_format json_object or json_schema
    output_schema: Any = None

    @classmethod
    def of(cls, raw: dict[str, Any]) -> Contract:
        """The contract of a client's chat request body (malformed parts bind nothing:
        the upstreams answer those with their own 400)."""
        functions: dict[str, Any] = {}
        for tool in raw.get("tools") or ():
            function = tool.get("function") if isinstance(tool, dict) else None
            if isinstance(function, dict) and isinstance(function.get("name"), str):
                functions[function["name"]] = function.get("parameters")
        choice, named = raw.get("tool_choice") or "auto", None
        if isinstance(choice, dict):
            function = choice.get("function")
            named = function.get("name") if isinstance(function, dict) else None
            choice = "function"
        elif choice not in ("auto", "none", "required"):
            choice = "auto"
        fmt = raw.get("response_format")
        fmt = fmt if isinstance(fmt, dict) else {}
        kind = fmt.get("type")
        spec = fmt.get("json_schema") if kind == "json_schema" else None
        schema = spec.get("schema") if isinstance(spec, dict) else None
        return cls(
            functions=functions,
            tool_choice=str(choice),
            named=named if isinstance(named, str) else None,
            json_output=kind in ("json_object", "json_schema"),
            output_schema=schema if isinstance(schema, dict) else None,
        )

    @property
    def binding(self) -> bool:
        """Whether the contract asks anything of an answer (else every answer passes)."""
        return bool(self.functions) or self.tool_choice != "auto" or self.json_output

    @property
    def has_tools(self) -> bool:
        """The request offers functions to call."""
        return bool(self.functions)

    def violation(self, content: str, calls: tuple[ToolCall, ...]) -> Violation | None:
        """The first way this answer breaks the contract, or None if it keeps it."""
        if calls:
            return self._calls_violation(calls)
        if self.tool_choice in ("required", "function") and self.has_tools:
            return Violation.CALL_REQUIRED
        if self.json_output:
            try:
                value = orjson.loads(content)
            except orjson.JSONDecodeError:
                return Violation.OUTPUT_NOT_JSON
            if not _fits(value, self.output_schema):
                return Violation.OUTPUT_INVALID
        return None

    def _calls_violation(self, calls: tuple[ToolCall, ...]) -> Violation | None:
        if self.tool_choice == "none":
            return Violation.CALL_FORBIDDEN
        for call in calls:
            if call.name not in self.functions:
                return Violation.UNKNOWN_FUNCTION
            if self.named is not None and call.name != self.named:
                return Violation.WRONG_FUNCTION
            arguments = call.parsed
            if arguments is NOT_JSON:
                return Violation.ARGUMENTS_NOT_JSON
            if not _fits(arguments, self.functions[call.name]):
                return Violation.ARGUMENTS_INVALID
        return None


def _fits(value: Any, schema: Any) -> bool:
    """``value`` validates against the JSON schema (no schema, or a broken one the
    client sent, constrains nothing: its upstream would refuse the request)."""
    if not isinstance(schema, dict):
        return True
    try:
        cls = validator_for(schema)
        cls.check_schema(schema)
    except SchemaError:
        return True
    return bool(bounded(cls)(schema).is_valid(value))
