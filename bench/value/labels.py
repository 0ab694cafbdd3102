"""Label yield: which requests of an arm gave its learner a label, which did not and why.

Each request's row (the bench's, with the proxy's ``X-Request-Id``) is joined with its
speculation-log line (``--spec-logs DIR``) and put on one path; a line's ``agreement``
(true or false, with its ``features``) is a label, as the learner takes it. A draft
finished in the background after its stream was relayed from the cloud (issue 31), or
beside the cloud's answer (explored, unheld), labels the learner only, not the line:
the learner's own count (``/stats`` → ``learning.labels``) is printed beside the table.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

from tests.fakes.script import JSON

FIRST_TOKEN_BUDGET = "first_token_budget"
# the paths, in the order the table shows them
PATHS = (
    "cache hit",
    "gate: cloud lane",
    "no threshold holds: the cloud answers, the draft beside it",
    "no draft line: the draft failed, or a whole hedge came first",
    "first-token budget ran out: the cloud's stream relayed",
    "accepted, audited",
    "accepted, not audited",
    "doubted, verified (agreement judged)",
    "doubted, not judged",
)


def read_lines(path: Path) -> list[JSON]:
    """The speculation log's lines (none when there is no file)."""
    if not path.exists():
        return []
    text = path.read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def is_label(line: JSON | None) -> bool:
    """The line carries a label the learner takes (agreement judged, features known)."""
    return (
        line is not None
        and isinstance(line.get("agreement"), bool)
        and isinstance(line.get("features"), dict)
    )


def path_of(row: JSON, line: JSON | None) -> str:
    """The path one request took, as far as its row and its log line tell."""
    if row.get("cache") == "hit":
        return PATHS[0]
    if row.get("lane") == "cloud":
        return PATHS[1]
    if row.get("unheld"):
        return PATHS[2]
    if line is None:
        # a stream's draft not streamed (no partial to log: learning cold, or tools) that
        # the budget stopped has no line either; the shipped hedge is streams only
        return PATHS[4] if row.get("stream") else PATHS[3]
    if line.get("decision") is None or FIRST_TOKEN_BUDGET in (line.get("reasons") or []):
        return PATHS[4]
    if line.get("decision") == "accept":
        return PATHS[5] if line.get("audit") else PATHS[6]
    return PATHS[7] if is_label(line) else PATHS[8]


def label_yield(rows: Sequence[JSON], lines: Iterable[JSON]) -> list[JSON]:
    """Per path and streamed or not: requests, hedged ones, labels in the log."""
    by_id = {line.get("request_id"): line for line in lines}
    requests: Counter[tuple[str, bool]] = Counter()
    hedged: Counter[tuple[str, bool]] = Counter()
    labels: Counter[tuple[str, bool]] = Counter()
    for row in rows:
        line = by_id.get(row.get("request_id"))
        key = (path_of(row, line), bool(row["stream"]))
        requests[key] += 1
        hedged[key] += bool(line and line.get("hedged"))
        labels[key] += is_label(line)
    order = {path: i for i, path in enumerate(PATHS)}
    return [
        {
            "path": path,
            "stream": stream,
            "requests": n,
            "hedged": hedged[(path, stream)],
            "labels": labels[(path, stream)],
        }
        for (path, stream), n in sorted(
            requests.items(), key=lambda kv: (order[kv[0][0]], kv[0][1])
        )
    ]


def yield_markdown(table: Sequence[JSON], learner_labels: int | None = None) -> str:
    """The label-yield table; the learner's own count of labels under it."""
    total = sum(r["requests"] for r in table)
    lines = [
        "| path | streamed | requests | share | hedged | labels (log) |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in table:
        share = r["requests"] / total if total else 0.0
        lines.append(
            f"| {r['path']} | {'yes' if r['stream'] else 'no'} | {r['requests']} "
            f"| {100 * share:.1f}% | {r['hedged']} | {r['labels']} |"
        )
    logged = sum(r["labels"] for r in table)
    lines.append(f"| **all** | | {total} | 100% | {sum(r['hedged'] for r in table)} | {logged} |")
    if learner_labels is not None:
        lines.append(
            f"\nthe learner's labels (`/stats` → `learning.labels.total`): {learner_labels} "
            f"({learner_labels / total:.2f} per request)"
            if total
            else ""
        )
    return "\n".join(lines)
