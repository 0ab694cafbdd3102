"""JSON-schema regular expressions a client cannot stall the proxy with. Pure.

A tool's or ``response_format``'s schema is the client's, and its ``pattern`` runs on
text the model wrote: with Python's backtracking ``re`` (what jsonschema uses), a
pattern like ``^(a+)+$`` on a draft of 30 ``a``s and a ``!`` blocks the event loop for
minutes. Here the ``pattern``, ``patternProperties`` and (with ``patternProperties``)
``additionalProperties`` keywords match with RE2 (``google-re2``), whose time is linear
in the text. A pattern RE2 cannot run (a lookaround or a backreference) constrains
nothing, as a broken schema does: the draft is not refused for it.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import re2
from jsonschema import ValidationError, validators

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # a pattern RE2 refuses is the client's, not a log line


@functools.lru_cache(maxsize=512)
def _compiled(pattern: str) -> Any:
    try:
        return re2.compile(pattern, _OPTIONS)
    except (re2.error, TypeError, ValueError):
        return None


def matches(pattern: str, text: str) -> bool:
    """Whether ``pattern`` is found in ``text`` (a pattern RE2 cannot run: True)."""
    compiled = _compiled(pattern)
    return compiled is None or compiled.search(text) is not None


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[Any]:
    if validator.is_type(instance, "string") and not matches(pattern, instance):
        yield ValidationError(f"does not match {pattern!r}")


def _pattern_properties(
    validator: Any, patterns: dict[str, Any], instance: Any, schema: Any
) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if matches(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _extras(instance: dict[str, Any], schema: dict[str, Any]) -> list[str]:
    properties = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    return [
        key
        for key in instance
        if key not in properties and not any(matches(p, key) for p in patterns)
    ]


def bounded(cls: Any) -> Any:
    """``cls`` (a jsonschema validator class) with its regex keywords matched by RE2."""
    return _bounded(cls)


@functools.lru_cache(maxsize=16)
def _bounded(cls: Any) -> Any:
    stock = cls.VALIDATORS.get("additionalProperties")

    def additional(validator: Any, extra: Any, instance: Any, schema: Any) -> Iterator[Any]:
        if "patternProperties" not in schema or stock is None:
            if stock is not None:
                yield from stock(validator, extra, instance, schema)
            return
        if not validator.is_type(instance, "object"):
            return
        extras = _extras(instance, schema)
        if validator.is_type(extra, "object"):
            for key in extras:
                yield from validator.descend(instance[key], extra, path=key)
        elif not extra and extras:
            yield ValidationError(f"{sorted(extras)!r}: not allowed")

    keywords = {"pattern": _pattern, "patternProperties": _pattern_properties}
    if stock is not None:
        keywords["additionalProperties"] = additional
    return validators.extend(cls, keywords)
