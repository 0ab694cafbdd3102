"""User-facing tools that work on specproxy's outputs (logs, stats), not on live traffic."""
