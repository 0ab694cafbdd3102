"""Tool-call ids between the dialects: a chat call id ``c`` is the tool_use id
``toolu_c`` and back, so a tool loop's ``tool_result.tool_use_id`` names the chat
``tool_call_id`` the upstream gave."""

from __future__ import annotations

import os

PREFIX = "toolu_"


def tool_use_id(chat_id: str | None) -> str:
    """The tool_use block's id for a chat tool call's id (a fresh one when it has none)."""
    return PREFIX + (chat_id or os.urandom(12).hex())


def chat_call_id(use_id: str) -> str:
    """The chat tool call's id for a tool_use id (``tool_use_id``'s inverse)."""
    return use_id.removeprefix(PREFIX)
