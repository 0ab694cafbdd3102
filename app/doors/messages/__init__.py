"""Anthropic's Messages API (``POST /v1/messages``) as a door onto the chat pipeline.

Pure translation only: ``request`` turns a Messages request into the proxy's chat
request body, ``answer`` a chat completion into a Message, ``stream`` a stream of chat
chunks into Messages' events, ``errors`` a ``ProxyError`` into Anthropic's error
shape. ``app.api.messages`` does the HTTP.
"""

from app.doors.messages.answer import to_message
from app.doors.messages.errors import anthropic_error
from app.doors.messages.ids import chat_call_id, tool_use_id
from app.doors.messages.request import MessagesRequest, to_chat
from app.doors.messages.stream import MessageEvents

__all__ = [
    "MessageEvents",
    "MessagesRequest",
    "anthropic_error",
    "chat_call_id",
    "to_chat",
    "to_message",
    "tool_use_id",
]
