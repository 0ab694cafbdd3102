"""A stand-in for llama-server: takes its launch flags and answers /health the same way.

Extra flags steer it: --loading N (503 "Loading model" N times first), --exit CODE (die
before serving), --fail-if-exists PATH (exit 3 when PATH exists), --ignore-sigterm,
--pid-file PATH (append its pid there, to check later that it is gone).
GET /served tells how many 503s it sent.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

LOADING = {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-m", required=True)
    parser.add_argument("-md")  # else argparse reads -md DRAFT as -m d
    parser.add_argument("--host", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--loading", type=int, default=0)
    parser.add_argument("--exit", type=int)
    parser.add_argument("--fail-if-exists")
    parser.add_argument("--ignore-sigterm", action="store_true")
    parser.add_argument("--pid-file")
    args, _ = parser.parse_known_args()
    if args.pid_file:
        with open(args.pid_file, "a") as f:
            f.write(f"{os.getpid()}\n")
    print(f"stand-in: model {args.m}", flush=True)
    if args.exit is not None:
        print("stand-in: failed to load model", flush=True)
        sys.exit(args.exit)
    if args.fail_if_exists and Path(args.fail_if_exists).exists():
        print("stand-in: told to fail", flush=True)
        sys.exit(3)
    if args.ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    served = {"503": 0}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/served":
                self._send(200, served)
            elif served["503"] < args.loading:
                served["503"] += 1
                self._send(503, LOADING)
            else:
                self._send(200, {"status": "ok"})

        def _send(self, status: int, body: object) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *a: object) -> None:
            print("stand-in:", format % a, flush=True)

    ThreadingHTTPServer((args.host, args.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
