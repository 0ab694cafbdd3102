"""CPU of reading a recorded llama-server answer and stream: the proxy's readers today
against the typed structs of ``app.chat_completion``.

    cd /work/main && .venv/bin/python -m bench.wire_read [--repeat N]

Input: ``tests/fixtures/llama_server`` (a whole answer with logprobs, its stream, and the
same without logprobs). Each line is the best of five runs of ``--repeat`` calls, in
microseconds per answer or per stream:

- ``answer: pass-through view`` is ``read_answer`` (msgspec into ``AnswerView``, the
  bytes passed on); ``answer: parse`` is ``completion_body`` (orjson into a dict);
  ``answer: typed`` is ``ChatCompletion`` decoded alone.
- ``stream: parser`` is ``ChunkParser`` as the relay uses it (content chunks unread) and
  ``StreamRelay._take`` over its chunks; ``stream: parsed all`` is ``ChunkParser`` without
  ``unread`` (the draft's and the hedge's reading); ``stream: typed`` decodes every
  payload into ``ChatCompletionChunk``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path

from app.chat_completion import CHUNK_DECODER, COMPLETION_DECODER
from app.sse import DataLines
from app.upstreams.interface import OpenStream
from app.upstreams.parsing import ChunkParser, completion_body
from app.upstreams.passthrough import read_answer
from app.upstreams.relay import StreamRelay

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "llama_server"
MODEL = "local-model"


def _best_us(fn: Callable[[], object], repeat: int) -> float:
    fn()
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(repeat):
            fn()
        best = min(best, time.perf_counter() - start)
    return best / repeat * 1e6


class _Named:
    name = "local"


def _relay(sse: bytes) -> None:
    batch = ChunkParser("local", None, unread=True, model=MODEL).feed(sse).chunks
    stream = OpenStream(_Named(), batch, None, ())  # type: ignore[arg-type]
    StreamRelay(stream, keep_usage=False)._take(batch)


def _rows(answer: bytes, sse: bytes, payloads: list[bytes]) -> dict[str, Callable[[], object]]:
    """The readings timed, by label."""
    return {
        "answer: pass-through view": lambda: read_answer("local", answer, MODEL),
        "answer: parse (orjson dict)": lambda: completion_body("local", answer, MODEL),
        "answer: typed (ChatCompletion)": lambda: COMPLETION_DECODER.decode(answer),
        "stream: parser + relay take": lambda: _relay(sse),
        "stream: parsed all (draft, hedge)": lambda: ChunkParser("local", None, model=MODEL).feed(
            sse
        ),
        "stream: typed (ChatCompletionChunk)": lambda: [CHUNK_DECODER.decode(p) for p in payloads],
    }


def main() -> None:
    """Print the figures for both recorded answers."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=2000)
    repeat = parser.parse_args().repeat
    print(f"$ python -m bench.wire_read --repeat {repeat}")
    for name in ("chat_logprobs", "chat_stop"):
        answer = (FIXTURES / f"{name}.json").read_bytes()
        sse = (FIXTURES / f"{name}_stream.sse").read_bytes()
        payloads = [p for p in DataLines().feed(sse + b"\n") if p != b"[DONE]"]
        rows = _rows(answer, sse, payloads)
        print(f"{name} ({len(answer)} B answer, {len(payloads)} chunks)")
        for label, fn in rows.items():
            print(f"  {label:38} {_best_us(fn, repeat):8.1f} µs")


if __name__ == "__main__":
    main()
