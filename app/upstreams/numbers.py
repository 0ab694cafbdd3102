"""Numbers in an upstream's answer that the proxy cannot hold exactly (tests/hostile D29)."""

from __future__ import annotations

import json

# Where a number the proxy cannot hold exactly may stand: a run of 19 digits, or an
# exponent of three. The answer's bytes are mapped to three classes (a digit to 0, e/E to
# e, the rest to a space; signs dropped) and searched: about 8 µs on a 6 KB answer with
# logprobs, where a regex took 110. A long number inside a string matches too, and is
# then read to find out.


def _class_of(byte: int) -> int:
    if ord("0") <= byte <= ord("9"):
        return ord("0")
    return ord("e") if byte in b"eE" else ord(" ")


_CLASSES = bytes(map(_class_of, range(256)))
_SIGNS = (b"0" * 19, b"e000")


class _Inexact(ValueError):
    pass


def _int64(text: str) -> int:
    value = int(text)
    if not -(2**63) <= value < 2**64:
        raise _Inexact(f"an integer past 64 bits ({text[:24]}...)")
    return value


def _double(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise _Inexact(f"a number past a double ({text[:24]})")
    return value


def inexact_number(content: bytes) -> str | None:
    """The problem (``answered with ...``) if an answer holds a number the proxy cannot hold
    exactly: past a double, an integer past 64 bits; else None. Such an answer is the
    upstream's protocol failure on every path: passed on as its bytes or parsed and written
    again (orjson refuses the one and rounds the other). Costs a regex scan, and a strict
    read only when that matches."""
    classes = content.translate(_CLASSES, b"+-")
    if not any(sign in classes for sign in _SIGNS):
        return None
    try:
        json.loads(content, parse_int=_int64, parse_float=_double)
    except _Inexact as exc:
        return f"answered with {exc}"
    except (ValueError, RecursionError):
        return None  # not JSON: the caller's own reading says so
    return None
