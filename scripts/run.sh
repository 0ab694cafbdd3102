#!/usr/bin/env bash
# Set up (idempotent) and run the proxy with its managed llama-server: `bash scripts/run.sh [main.py options]`
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
exec .venv/bin/python main.py "$@"
