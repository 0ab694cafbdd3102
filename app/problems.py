"""The client's first mistake in a request body, as pydantic found it: the field's path
in the client's own JSON and what is wrong (every door's 400 names its field so)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def first_problem(data: Any, errors: Sequence[Mapping[str, Any]]) -> tuple[str | None, str]:
    """The client's first mistake: the field's path in its own JSON and what is wrong.

    pydantic reports one error per member of a union (``content`` a string or a list of
    parts), each with the member's tag in its path (``messages.0.content.str``). The
    tags are dropped; of one field's errors, the member that got deepest into the value
    tells the mistake, and one the value's kind matched beats those it did not; if none
    did, what each member wanted is said.
    """
    located = [(_path_in(data, error), error) for error in errors]
    first = located[0][0]
    same = [(path, error) for path, error in located if path[: len(first)] == first]
    deepest = max(len(path) for path, _ in same)
    at = [(path, error) for path, error in same if len(path) == deepest]
    matched = [(path, error) for path, error in at if not _wrong_kind(error)]
    path = (matched or at)[0][0]
    messages = dict.fromkeys(_message(error) for _, error in matched or at)
    return ".".join(map(str, path)) or None, ", or: ".join(messages)


def _wrong_kind(error: Mapping[str, Any]) -> bool:
    """The value is not of the kind a union member takes (a string for a model...)."""
    kind = str(error["type"])
    return kind.endswith("_type") or kind == "literal_error"


def _message(error: Mapping[str, Any]) -> str:
    if error["type"] == "model_type":
        return "Input should be an object"  # pydantic names the model's class
    return str(error["msg"]).removeprefix("Value error, ")


def _path_in(data: Any, error: Mapping[str, Any]) -> tuple[str | int, ...]:
    """An error's location as a path through the client's JSON (a union member's tag is
    not a key there); a missing field keeps its name."""
    path: list[str | int] = []
    loc = error["loc"]
    for i, step in enumerate(loc):
        in_list = isinstance(data, list) and isinstance(step, int) and 0 <= step < len(data)
        if in_list or (isinstance(data, dict) and step in data):
            data = data[step]
        elif not (i == len(loc) - 1 and error["type"] == "missing"):
            continue  # a union member's tag
        path.append(step)
    return tuple(path)
