"""State replicas share (``state.backend: redis``): pure rules in ``fleet``, I/O in ``sync``."""
