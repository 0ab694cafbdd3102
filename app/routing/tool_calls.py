"""Tool calls as plain data: read from an answer, compared, written canonically.

An answer's calls are compared by what they do, not how they are spelled: the
same functions with equal parsed arguments, in any order. Arguments are kept as
the model wrote them (a JSON string that may not parse); ``parsed`` says whether
they do. Pure functions, no I/O.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import orjson

NOT_JSON: Any = object()  # what ``ToolCall.parsed`` returns for arguments that do not parse


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One function call an answer makes: the function's name and its raw JSON arguments."""

    name: str
    arguments: str

    @property
    def parsed(self) -> Any:
        """The arguments as a Python value, or ``NOT_JSON``."""
        try:
            return orjson.loads(self.arguments or "{}")
        except orjson.JSONDecodeError:
            return NOT_JSON

    def canonical(self) -> str:
        """The call as one string: name and sorted-key arguments (raw text if not JSON)."""
        parsed = self.parsed
        if parsed is NOT_JSON:
            return f"{self.name}({self.arguments})"
        return f"{self.name}({orjson.dumps(parsed, option=orjson.OPT_SORT_KEYS).decode()})"


def tool_calls_of(message: Any) -> tuple[ToolCall, ...]:
    """The calls of an OpenAI ``message`` (``message.tool_calls``); malformed items are
    kept with an empty name, so they can never pass as a valid call."""
    if not isinstance(message, dict):
        return ()
    calls = message.get("tool_calls")
    if not isinstance(calls, list):
        return ()
    out = []
    for item in calls:
        function = item.get("function") if isinstance(item, dict) else None
        function = function if isinstance(function, dict) else {}
        name, arguments = function.get("name"), function.get("arguments")
        out.append(
            ToolCall(
                name=name if isinstance(name, str) else "",
                arguments=arguments if isinstance(arguments, str) else "",
            )
        )
    return tuple(out)


def same_calls(a: Iterable[ToolCall], b: Iterable[ToolCall]) -> bool:
    """The same functions with equal parsed arguments, order-insensitive; a call whose
    arguments do not parse never matches."""
    a, b = tuple(a), tuple(b)
    if any(c.parsed is NOT_JSON for c in (*a, *b)):
        return False
    return Counter(c.canonical() for c in a) == Counter(c.canonical() for c in b)


def calls_text(calls: Iterable[ToolCall]) -> str:
    """All calls as one canonical string, order-insensitive (for surface similarity)."""
    return " ".join(sorted(c.canonical() for c in calls))
