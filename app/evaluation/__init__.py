"""Routing-quality evaluation: judges and metrics, pure code (no I/O)."""
