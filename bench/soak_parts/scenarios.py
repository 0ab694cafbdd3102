"""The soak's traffic mix: each kind of request, what the stand-ins answer to its prompt,
and which failure (if any) the soak injects into it on purpose.

The stand-ins answer by prompt (``tests.fakes.by_prompt``), so every request of a kind
gets the same scripted replies whatever the order in which they arrive.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bench.overhead_parts.loadgen import PROMPT
from tests.fakes import Reply
from tests.support.answers import CLOUD_OTHER, CLOUD_SAME, GOOD_DRAFT, HEDGED, LONG

WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city now.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
WEATHER_CALL = [{"name": "get_weather", "arguments": '{"city": "Paris"}'}]
# A long, slow cloud stream (about 60 chunks, 20 ms apart): a client cut lands mid-stream.
SLOW_TEXT = " ".join([CLOUD_OTHER] * 4)
SLOW_CHUNK_S = 0.02
BROKEN_AFTER = 5  # content chunks the broken cloud stream sends before it drops
# what each door's requests carry beyond the question: Anthropic's required max_tokens,
# and a stored response (the store fills to its bound and evicts: soak.config's)
DOOR_EXTRA: dict[str, dict[str, Any]] = {
    "/v1/messages": {"max_tokens": 256},
    "/v1/responses": {"store": True},
}
DOORS = ("/v1/responses", "/v1/messages", "/v1/completions")


@dataclass(frozen=True)
class Kind:
    """One kind of request in the mix.

    ``inject``: the failure the soak causes on purpose ("" none; "cut": the client
    hangs up after the first bytes of the stream; "broken": the cloud's stream drops
    after ``BROKEN_AFTER`` chunks, so the client may see an error event). A request of
    a kind without an injected failure that does not end whole is an error of the soak.
    """

    name: str
    stream: bool
    local: Reply
    cloud: Reply | None = None
    tools: bool = False
    inject: str = ""
    path: str = "/v1/chat/completions"  # the door it knocks on

    @property
    def marker(self) -> str:
        return f"[soak: {self.name}]"

    @property
    def prompt(self) -> str:
        """The request's message as ``loadgen.build_request`` writes it (the stand-ins'
        key)."""
        return f"{PROMPT} {self.marker}"

    def body_extra(self) -> dict[str, Any]:
        extra = dict(DOOR_EXTRA.get(self.path, {}))
        if self.tools:
            extra["tools"] = [WEATHER_TOOL]
        return extra


def mix() -> list[Kind]:
    """Every kind of request the soak sends, each from its own client connection(s)."""
    kinds: list[Kind] = []
    for stream in (False, True):
        kinds += [
            Kind("accepted", stream, Reply(GOOD_DRAFT)),
            Kind("verified", stream, Reply(HEDGED), Reply(CLOUD_SAME)),
            Kind("corrected", stream, Reply(HEDGED), Reply(CLOUD_OTHER)),
            Kind("truncated", stream, Reply(LONG), Reply(CLOUD_OTHER)),
            Kind(
                "tool call",
                stream,
                Reply("", tool_calls=WEATHER_CALL),
                Reply("", tool_calls=WEATHER_CALL),
                tools=True,
            ),
            # the local stream drops mid-draft: the cloud answers (the client sees no fault)
            Kind("local breaks", stream, Reply(LONG, fail_after_chunks=3), Reply(CLOUD_OTHER)),
            # the cloud fails whole: the draft is served, degraded
            Kind("cloud 500", stream, Reply(HEDGED), Reply(status=500)),
        ]
        for path in DOORS:  # the other doors, each translated to chat and back
            door = path.rsplit("/", 1)[1]
            kinds += [
                Kind(f"{door} accepted", stream, Reply(GOOD_DRAFT), path=path),
                Kind(f"{door} corrected", stream, Reply(HEDGED), Reply(CLOUD_OTHER), path=path),
            ]
    kinds.append(Kind("embeddings", False, Reply(""), path="/v1/embeddings"))
    kinds += [
        Kind(
            "client cut",
            True,
            Reply(LONG),
            Reply(SLOW_TEXT, chunk_delay=SLOW_CHUNK_S),
            inject="cut",
        ),
        Kind(
            "cloud breaks",
            True,
            Reply(LONG),
            Reply(CLOUD_OTHER, fail_after_chunks=BROKEN_AFTER),
            inject="broken",
        ),
    ]
    return kinds
