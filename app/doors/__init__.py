"""The proxy's doors: other APIs' dialects translated to its one chat request and back.

Each door is pure translation (a dialect's request -> the internal chat body; a chat
completion or its stream of chunks -> the dialect's answer); its route (``app/api``)
calls the same ``Pipeline.chat`` the chat route calls, so every strategy and feature
works behind every door.
"""
