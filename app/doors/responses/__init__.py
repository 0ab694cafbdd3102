"""OpenAI's Responses API (``POST /v1/responses``) as a door onto the chat pipeline.

``request`` checks a Responses request and builds the chat body; ``reply`` turns a chat
completion into a Responses ``response`` object; ``events`` turns a stream of chat
chunks into the Responses event sequence; ``store`` keeps stored responses (per API key,
bounded) for ``previous_response_id`` and ``GET``/``DELETE /v1/responses/{id}``.
"""
