"""The request path's shape, read from the source: only the pipeline's top module writes the
record, nothing passes a callback down for a lower layer to call back up, and
docs/architecture.md walks one speculative stream through the files as they are.

Steps return typed results (``app.story``) and ``app.pipeline`` applies them
(``apply``); a step that wrote the record itself, or a lambda handed to the drafter, a
relay or an upstream, would bring back control flow that returns into a file already
left. Both rules are checked over the AST of ``app/pipeline/``, ``app/upstreams/`` and
the modules the pipeline's steps use elsewhere (``MOVED_OUT``).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOP = ROOT / "app" / "pipeline" / "__init__.py"
PIPELINE = sorted((ROOT / "app" / "pipeline").glob("*.py"))
# What the pipeline's steps use outside it: the story, the pure plan, the wire, the log
# and the stream relay (the upstreams' own layers are not scanned for callbacks).
MOVED_OUT = [
    ROOT / "app" / name
    for name in (
        "call.py",
        "story.py",
        "wire.py",
        "routing/plan.py",
        "telemetry/narrative.py",
        "upstreams/relay.py",
    )
]
BELOW = (
    [p for p in PIPELINE if p != TOP]
    + sorted((ROOT / "app" / "upstreams").rglob("*.py"))
    + [p for p in MOVED_OUT if p.parent.name != "upstreams"]
)

# RequestRecord's writers before the results: a call of one of these on a Call is a write.
CALL_WRITERS = frozenset({"finish", "count", "fail", "fell_over"})
MUTATORS = frozenset({"append", "extend", "insert", "clear", "pop", "remove", "update"})
RECORD_NAMES = frozenset({"rec", "record"})
# asyncio's own ways to run something later: not a lower layer of ours calling back up.
SCHEDULERS = frozenset({"add_done_callback", "call_soon", "call_later", "discard"})


def _is_record(node: ast.expr) -> bool:
    """``rec.x``, ``record.x``, ``call.record.x`` (or deeper): the expression is the record's."""
    while isinstance(node, ast.Attribute | ast.Subscript):
        node = node.value
        if isinstance(node, ast.Attribute) and node.attr == "record":
            return True
    return isinstance(node, ast.Name) and node.id in RECORD_NAMES


def record_writes(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """Where ``tree`` writes a request's record: assigns to it, mutates it in place, or
    calls a Call's old writers."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                elts = target.elts if isinstance(target, ast.Tuple) else [target]
                for elt in elts:
                    if isinstance(elt, ast.Attribute | ast.Subscript) and _is_record(elt):
                        yield node.lineno, ast.unparse(elt)
        elif isinstance(node, ast.Call) and isinstance(func := node.func, ast.Attribute):
            owner = func.value
            if func.attr in MUTATORS and isinstance(owner, ast.Attribute) and _is_record(owner):
                yield node.lineno, ast.unparse(func)
            if func.attr in CALL_WRITERS and isinstance(owner, ast.Name) and owner.id == "call":
                yield node.lineno, ast.unparse(func)


def callbacks(tree: ast.Module, filename: str) -> Iterator[tuple[int, str]]:
    """Where ``tree`` hands a function to another call: a lambda, a function it defines,
    or one of its own methods (``self.x``), other than to asyncio's schedulers."""
    defs = (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef))
    # a name that is also a variable or an attribute (``relay``, ``self.relay``) is data
    data = {n.arg for n in ast.walk(tree) if isinstance(n, ast.arg)}
    data |= {
        n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
    }
    data |= {
        n.attr
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store)
    }
    defined = {n.name for n in defs} - data
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else ast.unparse(node.func)
        if name in SCHEDULERS:
            continue
        for arg in [*node.args, *(k.value for k in node.keywords)]:
            if (
                isinstance(arg, ast.Lambda)
                or (isinstance(arg, ast.Name) and arg.id in defined)
                or (
                    isinstance(arg, ast.Attribute)
                    and isinstance(arg.value, ast.Name)
                    and arg.value.id == "self"
                    and arg.attr in defined
                )
            ):
                yield node.lineno, f"{name}({ast.unparse(arg)})"


def story_writes(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """Where ``tree`` adds to a call's story (``call.events``) itself."""
    for node in ast.walk(tree):
        if isinstance(node, ast.AugAssign | ast.Assign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Attribute) and target.attr == "events":
                    yield node.lineno, ast.unparse(target)
        elif isinstance(node, ast.Call) and isinstance(func := node.func, ast.Attribute):
            owner = func.value
            if (
                func.attr in MUTATORS
                and isinstance(owner, ast.Attribute)
                and owner.attr == "events"
            ):
                yield node.lineno, ast.unparse(func)


# The state machine collects the steps' events; the steps (drafting, hedge, answers,
# relays, audits) return theirs.
COLLECTORS = {TOP, ROOT / "app" / "pipeline" / "speculative.py"}


def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


@pytest.mark.parametrize("path", BELOW, ids=lambda p: str(p.relative_to(ROOT)))
def test_only_the_top_module_writes_the_record(path: Path) -> None:
    assert list(record_writes(_parse(path))) == []


@pytest.mark.parametrize("path", [*PIPELINE, *MOVED_OUT], ids=lambda p: str(p.relative_to(ROOT)))
def test_no_callback_is_passed_down(path: Path) -> None:
    assert list(callbacks(_parse(path), path.name)) == []


@pytest.mark.parametrize(
    "path", [p for p in BELOW if p not in COLLECTORS], ids=lambda p: str(p.relative_to(ROOT))
)
def test_steps_return_their_events_and_do_not_add_them(path: Path) -> None:
    assert list(story_writes(_parse(path))) == []


def test_the_top_module_applies_the_results() -> None:
    """The rules see writes where they are: the top module has them (in ``apply``)."""
    assert list(record_writes(_parse(TOP)))


WRITES = {
    "assign": "call.record.outcome = x",
    "tuple assign": "rec.similarity, rec.agreement = a, b",
    "augmented": "call.record.local_tokens += 3",
    "in place": "rec.usage.append(u)",
    "a writer": "call.finish(outcome)",
    "deeper": "call.record.bill.charges.extend(c)",
}
CALLBACKS = {
    "lambda": "drafter.draft_within(body, lambda: self._stream_hedge(call, hedge))",
    "a method": "def f(self):\n    relay.run(self.f)",
    "a function": "def start(): pass\nupstream.first(start)",
    "keyword": "hedge.live(on_first=lambda c: None)",
}


@pytest.mark.parametrize("source", WRITES.values(), ids=WRITES.keys())
def test_a_record_write_is_caught(source: str) -> None:
    assert list(record_writes(ast.parse(source)))


@pytest.mark.parametrize("source", CALLBACKS.values(), ids=CALLBACKS.keys())
def test_a_callback_is_caught(source: str) -> None:
    assert list(callbacks(ast.parse(source), "speculative.py"))


def test_adding_to_the_story_is_caught() -> None:
    assert list(story_writes(ast.parse("call.events.append(Drafted(s, 3))")))
    assert list(story_writes(ast.parse("call.events += more")))


def test_reads_and_schedulers_are_not_flagged() -> None:
    source = (
        "x = call.record.outcome\n"
        "n = len(rec.usage)\n"
        "task.add_done_callback(retrieve)\n"
        "def retrieve(t): pass\n"
    )
    assert list(record_writes(ast.parse(source))) == []
    assert list(callbacks(ast.parse(source), "hedge.py")) == []


# -- the walk in docs/architecture.md ---------------------------------------------------

WALK_HEADING = "## One speculative streaming request, file by file"


def walked() -> list[str]:
    """The files the architecture walk names, in order (each once, where first named)."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text.split(WALK_HEADING, 1)[1].split("\n## ", 1)[0]
    steps = re.findall(r"^\d+\. (.*?)(?=^\d+\. |\Z)", section, flags=re.M | re.S)
    named = [path for step in steps for path in re.findall(r"`(app/[\w/]+\.py)", step)]
    return list(dict.fromkeys(named))


def test_the_walk_names_files_that_exist_and_every_pipeline_file() -> None:
    names = walked()
    assert names[0].startswith(("app/edge/", "app/api/"))  # it starts at the HTTP edge
    assert [n for n in names if not (ROOT / n).is_file()] == []
    pipeline = {str(p.relative_to(ROOT)) for p in PIPELINE}
    assert sorted(pipeline - set(names)) == []


def test_the_pipeline_is_at_most_six_files_of_300_lines() -> None:
    long = {p.name: n for p in PIPELINE if (n := len(p.read_text().splitlines())) > 300}
    assert len(PIPELINE) <= 6 and long == {}


def test_the_walked_request_path_modules_are_at_most_300_lines() -> None:
    """Issue 30: the pipeline's files and the upstream and routing modules the walk names,
    and the modules moved out of the pipeline, are each at most 300 lines."""
    packages = ("app/pipeline/", "app/upstreams/", "app/routing/")
    walked_here = [ROOT / n for n in walked() if n.startswith(packages)]
    long = {
        str(p.relative_to(ROOT)): n
        for p in {*walked_here, *MOVED_OUT}
        if (n := len(p.read_text().splitlines())) > 300
    }
    assert long == {}
