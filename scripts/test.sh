#!/usr/bin/env bash
# Set up (idempotent), lint, type-check and run every test, the real llama-server tier included.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh dev
echo "==> ruff"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
echo "==> mypy"
.venv/bin/mypy
echo "==> pytest"
exec .venv/bin/python -m pytest --cov=app --cov-report=term:skip-covered "$@"
