"""The request's contract: which answers a client with tools or JSON output can use."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.routing.tool_calls import ToolCall, same_calls, tool_calls_of
from app.routing.validity import Contract, Violation

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "unit": {"type": "string", "enum": ["c", "f"]},
            },
            "required": ["city"],
        },
    },
}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}
TOOLS: dict[str, Any] = {"tools": [WEATHER, TIME]}
GOOD = ToolCall("get_weather", '{"city": "Paris"}')


@pytest.mark.parametrize(
    ("request_fields", "content", "calls", "expected"),
    [
        # every kind of invalid tool-call draft
        (TOOLS, "", (ToolCall("get_weather", '{"city": "Paris", "unit": '),), "not_json"),
        (TOOLS, "", (ToolCall("get_weather", '{"city": 42}'),), "invalid"),
        (TOOLS, "", (ToolCall("get_weather", "{}"),), "invalid"),  # required key missing
        (TOOLS, "", (ToolCall("get_wether", '{"city": "Paris"}'),), "unknown"),
        ({**TOOLS, "tool_choice": "required"}, "It is sunny.", (), "required"),
        ({**TOOLS, "tool_choice": "none"}, "", (GOOD,), "forbidden"),
        (
            {**TOOLS, "tool_choice": {"type": "function", "function": {"name": "get_time"}}},
            "",
            (GOOD,),
            "wrong",
        ),
        (
            {**TOOLS, "tool_choice": {"type": "function", "function": {"name": "get_time"}}},
            "Noon.",
            (),
            "required",
        ),
        # valid answers
        (TOOLS, "", (GOOD,), None),
        (TOOLS, "", (GOOD, ToolCall("get_time", "{}")), None),  # parallel calls
        (TOOLS, "I can answer that myself.", (), None),  # auto: text is fine
        ({**TOOLS, "tool_choice": "required"}, "", (GOOD,), None),
        ({**TOOLS, "tool_choice": "none"}, "No tools needed.", (), None),
        ({}, "plain", (), None),
    ],
)
def test_tool_call_contract(
    request_fields: dict[str, Any], content: str, calls: tuple[ToolCall, ...], expected: str | None
) -> None:
    violation = Contract.of({"messages": [], **request_fields}).violation(content, calls)
    names = {
        "not_json": Violation.ARGUMENTS_NOT_JSON,
        "invalid": Violation.ARGUMENTS_INVALID,
        "unknown": Violation.UNKNOWN_FUNCTION,
        "required": Violation.CALL_REQUIRED,
        "forbidden": Violation.CALL_FORBIDDEN,
        "wrong": Violation.WRONG_FUNCTION,
    }
    assert violation == (names[expected] if expected else None)


SCHEMA_FORMAT = {
    "type": "json_schema",
    "json_schema": {
        "name": "person",
        "schema": {
            "type": "object",
            "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
            "required": ["name", "age"],
        },
    },
}


@pytest.mark.parametrize(
    ("response_format", "content", "expected"),
    [
        ({"type": "json_object"}, '{"a": 1}', None),
        ({"type": "json_object"}, "Sure! Here is the JSON: {", Violation.OUTPUT_NOT_JSON),
        ({"type": "json_object"}, '{"a": 1', Violation.OUTPUT_NOT_JSON),  # cut at the budget
        (SCHEMA_FORMAT, '{"name": "Ada", "age": 36}', None),
        (SCHEMA_FORMAT, '{"name": "Ada", "age": "36"}', Violation.OUTPUT_INVALID),
        (SCHEMA_FORMAT, '{"name": "Ada"}', Violation.OUTPUT_INVALID),
        ({"type": "text"}, "not json", None),
    ],
)
def test_structured_output_contract(
    response_format: dict[str, Any], content: str, expected: Violation | None
) -> None:
    contract = Contract.of({"messages": [], "response_format": response_format})
    assert contract.violation(content, ()) == expected


def test_a_broken_schema_from_the_client_constrains_nothing() -> None:
    # The upstream refuses such a request itself; the proxy does not judge by it.
    broken = {"type": "json_schema", "json_schema": {"schema": {"type": 12}}}
    assert Contract.of({"response_format": broken}).violation('{"x": 1}', ()) is None


def test_malformed_request_parts_bind_nothing() -> None:
    contract = Contract.of({"tools": ["x", {"function": "y"}], "tool_choice": 7})
    assert not contract.binding
    assert contract.violation("text", ()) is None


def test_tool_calls_are_read_from_a_message_and_malformed_ones_never_pass() -> None:
    message = {
        "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "get_time", "arguments": "{}"}},
            {"id": "b", "function": None},
            "junk",
        ]
    }
    calls = tool_calls_of(message)
    assert calls[0] == ToolCall("get_time", "{}")
    assert calls[1] == calls[2] == ToolCall("", "")
    assert Contract.of(TOOLS).violation("", calls) is Violation.UNKNOWN_FUNCTION


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=8,
)
arguments = st.dictionaries(st.text(max_size=6), json_values, max_size=4)


@given(st.lists(st.tuples(st.sampled_from(["f", "g"]), arguments), max_size=4), st.randoms())
def test_same_calls_ignores_order_and_spelling(
    calls: list[tuple[str, dict[str, Any]]], rnd: Any
) -> None:
    a = [ToolCall(name, orjson.dumps(args).decode()) for name, args in calls]
    # the same calls, shuffled and with keys in another order and spaces added
    b = [
        ToolCall(
            name, orjson.dumps(dict(reversed(args.items())), option=orjson.OPT_INDENT_2).decode()
        )
        for name, args in calls
    ]
    rnd.shuffle(b)
    assert same_calls(a, b)


@given(st.lists(st.tuples(st.sampled_from(["f", "g"]), arguments), min_size=1, max_size=4))
def test_calls_that_differ_in_one_argument_never_agree(
    calls: list[tuple[str, dict[str, Any]]],
) -> None:
    a = [ToolCall(name, orjson.dumps(args).decode()) for name, args in calls]
    name, args = calls[0]
    changed = [ToolCall(name, orjson.dumps({**args, "__extra__": 1}).decode()), *a[1:]]
    assert not same_calls(a, changed)
    assert not same_calls(a, [ToolCall("h", a[0].arguments), *a[1:]])


def test_arguments_that_do_not_parse_never_agree() -> None:
    broken = ToolCall("f", '{"a": ')
    assert not same_calls([broken], [broken])
