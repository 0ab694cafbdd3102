"""Benchmarks of specproxy, each run from the repository root as ``python -m bench.NAME``.

Each prints the command it was run with, the machine and its figures; the
pure report halves (``*_report.py``) are tested under ``tests/bench``.
"""
