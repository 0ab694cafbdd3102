"""The doors other than chat: other dialects translated to the chat request and back (pure)."""
