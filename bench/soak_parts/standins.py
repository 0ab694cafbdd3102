"""The soak's stand-in upstreams in a process of their own (so their CPU and memory are
not the proxy's, nor the load generator's):

    python -m bench.soak_parts.standins --ready FILE

serves ``ScriptedLlamaServer`` and ``ScriptedCerebras`` (tests/fakes, answering by
prompt) scripted with ``scenarios.mix()``, writes ``{"local": URL, "cloud": URL}`` to
FILE once both listen, and serves until SIGTERM. The fakes keep only their last 1,000
requests (they record every one, which over 30 minutes would grow without end).
"""

from __future__ import annotations

import argparse
import json
import signal
import threading
from collections import deque
from contextlib import ExitStack
from pathlib import Path

from bench.soak_parts.scenarios import mix
from tests.fakes import serve
from tests.fakes.by_prompt import ScriptedCerebras, ScriptedLlamaServer
from tests.support.proxy import CLOUD_KEY

KEEP_REQUESTS = 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ready", type=Path, required=True)
    args = parser.parse_args()
    local, cloud = ScriptedLlamaServer(), ScriptedCerebras(api_key=CLOUD_KEY)
    local.embeddings = True  # the embeddings kind's vectors
    for kind in mix():
        local.script[kind.prompt] = kind.local
        if kind.cloud is not None:
            cloud.script[kind.prompt] = kind.cloud
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    with ExitStack() as stack:
        urls = {}
        for name, fake in (("local", local), ("cloud", cloud)):
            fake.requests = deque(maxlen=KEEP_REQUESTS)  # type: ignore[assignment]
            fake.url = urls[name] = stack.enter_context(serve(fake.app))
        args.ready.write_text(json.dumps(urls))
        stop.wait()


if __name__ == "__main__":
    main()
