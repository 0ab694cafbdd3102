"""The dashboard: one static page that polls ``/stats`` (``static/``), served by the proxy.

No build step and nothing from a CDN: the page, its script and style, and a pinned
Chart.js (``static/vendor``, vendored by ``scripts/vendor_chartjs.sh``, its license kept)
ship in the package. The page itself holds no data, so it needs no key; ``/stats`` does.
"""

from __future__ import annotations

from pathlib import Path

STATIC = Path(__file__).parent / "static"
