"""The lean edge's collector settings, made once the app's long-lived objects are built."""

from __future__ import annotations

import gc

GC_YOUNG_THRESHOLD = 20_000  # net allocations between the collector's young passes


def settle() -> None:
    """Freeze what exists now out of the collector's passes; collect the young less often."""
    # Everything built so far lives as long as the app: keep it out of the collector's
    # full passes, which otherwise rescan it under load.
    gc.collect()
    gc.freeze()
    # A request leaves no reference cycles behind, but allocates and frees a thousand-odd
    # objects (an answer's JSON): at the default 700, a young pass ran every few requests
    # and rescanned only the requests in flight (~15 µs a request at c=64, nothing found).
    gc.set_threshold(GC_YOUNG_THRESHOLD)
