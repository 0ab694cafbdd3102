"""Request bodies' JSON schemas for OpenAPI, each written whole (no components), so a
client or a fuzzer (schemathesis) reads the body a door takes from its operation alone."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from app.protocol import ChatCompletionRequest


def request_json_schema() -> dict[str, Any]:
    """The request body's JSON schema for OpenAPI (``inline_schema``)."""
    return inline_schema(ChatCompletionRequest)


def inline_schema(model: type[BaseModel]) -> dict[str, Any]:
    """A model's JSON schema for OpenAPI, whole: the nested models' schemas are written
    where they are referred to (none refers to itself), so it needs no components; the
    unions' ``discriminator`` hints, which point into ``$defs``, left out."""
    schema = model.model_json_schema()
    defs = schema.pop("$defs", {})

    def inline(node: Any) -> Any:
        if isinstance(node, dict):
            if (ref := node.get("$ref")) is not None:
                return inline(defs[ref.rpartition("/")[2]]) | {
                    k: inline(v) for k, v in node.items() if k != "$ref"
                }
            return {k: inline(v) for k, v in node.items() if k != "discriminator"}
        if isinstance(node, list):
            return [inline(v) for v in node]
        return node

    result: dict[str, Any] = inline(schema)
    return result
