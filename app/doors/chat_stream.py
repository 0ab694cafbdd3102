"""The chat reply's stream as a door reads it: its ``data:`` payloads, and the text of a
chunk that brings nothing else.

The Responses and Messages doors each wrap the chat pipeline's stream, whose blocks are
server-sent events cut anywhere. The usual block is whole events, ``data: <json>\\n\\n``
each on one line (the relay writes them so, many to a block), and its payloads are split
off in one pass; any other block goes through ``DataLines``. Most chunks bring one token
of text and nothing else: ``plain_text`` reads such a chunk for its text alone (a small
msgspec struct; the fields a door does not act on are skipped, not built) and says None
for any other chunk, which the door reads whole.
"""

from __future__ import annotations

import msgspec
from msgspec import UNSET, Raw, UnsetType

from app.sse import DataLines

_DATA = b"data: "
_BETWEEN = b"\n\n" + _DATA


class ChatPayloads:
    """The ``data:`` payloads of the chat reply's blocks, fed in order."""

    def __init__(self) -> None:
        self._lines = DataLines()
        self._whole = True  # every block so far ended a line: DataLines holds nothing back

    def feed(self, block: bytes) -> list[bytes]:
        """The payloads ``block`` completes."""
        payloads = _whole_events(block) if self._whole else None
        if payloads is None:
            payloads = self._lines.feed(block)
        self._whole = block.endswith(b"\n")
        return payloads


def _whole_events(block: bytes) -> list[bytes] | None:
    """The payloads of a block of whole one-line ``data: `` events, as ``DataLines``
    gives them; None for any other block (a line of another kind, a payload cut off)."""
    if not block.startswith(_DATA) or not block.endswith(b"\n\n"):
        return None
    payloads = block[len(_DATA) : -2].split(_BETWEEN)
    # two newlines per event, all of them between the events: no other line anywhere
    if block.count(b"\n") != 2 * len(payloads):
        return None
    return [payload.strip() for payload in payloads]


class _Delta(msgspec.Struct):
    content: str | None = None
    reasoning_content: Raw | UnsetType = UNSET
    tool_calls: Raw | UnsetType = UNSET


class _Choice(msgspec.Struct):
    delta: _Delta | None = None
    finish_reason: str | None = None


class _Chunk(msgspec.Struct):
    """What a door acts on in a chat chunk; ``Raw`` members are only looked for."""

    choices: list[_Choice] | UnsetType = UNSET
    usage: Raw | UnsetType = UNSET
    error: Raw | UnsetType = UNSET
    model_used: Raw | UnsetType = UNSET  # the proxy's fields, on the finishing chunk
    speculative_decoding: Raw | UnsetType = UNSET


_CHUNK = msgspec.json.Decoder(_Chunk)


def plain_text(payload: bytes) -> str | None:
    """The text a chunk brings ("" for none, as a role chunk's) when that is all it
    brings: one choice that finishes nothing, no tool call, reasoning, usage, error or
    proxy field. None for any other chunk, and for one not read so (the door reads it
    whole and says what is wrong with it)."""
    try:
        chunk = _CHUNK.decode(payload)
    except msgspec.DecodeError:  # a ValidationError too: a member of another type
        return None
    choices = chunk.choices
    if (
        choices is UNSET
        or len(choices) != 1
        or chunk.usage is not UNSET
        or chunk.error is not UNSET
        or chunk.model_used is not UNSET
        or chunk.speculative_decoding is not UNSET
    ):
        return None
    choice = choices[0]
    delta = choice.delta
    if (
        delta is None
        or choice.finish_reason is not None
        or delta.tool_calls is not UNSET
        or delta.reasoning_content is not UNSET
    ):
        return None
    return delta.content or ""
