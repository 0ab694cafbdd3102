"""One build: the long-lived parts are made by plain construction and never written after.

``app.assembly.build`` makes what one configuration serves with, a reload swaps a whole
new ``Runtime`` into ``Services`` (``Services.serve``/``reloaded``), and no module
writes an attribute on a part it does not define: ``pipeline.local_can = ...`` after
the build, ``services.settings = ...`` from the reloader, ``stats.alerts = ...`` are
what this reads the source of ``app/`` for.
"""

from __future__ import annotations

import ast
import asyncio
import dataclasses
from pathlib import Path

import pytest

from app.assembly import Lasting, Runtime, pipeline_of
from app.services import Services
from app.telemetry import Telemetry
from app.telemetry.stats import Stats
from tests.support.proxy import proxy_config

APP = Path(__file__).resolve().parent.parent / "app"

# The names a long-lived part goes by, and the code that defines it (a file, or a
# package for parts that live in one): only there may its attributes be assigned.
HOMES: dict[str, str] = {
    "services": "services.py",
    "runtime": "assembly.py",
    "lasting": "assembly.py",
    "pipeline": "pipeline/",
    "answers": "pipeline/",
    "speculator": "pipeline/",
    "audits": "pipeline/",
    "depth": "depth_control.py",
    "policy": "routing/policy.py",
    "pricing": "pricing.py",
    "learner": "learning/",
    "telemetry": "telemetry/__init__.py",
    "stats": "telemetry/stats.py",
    "spec_log": "telemetry/spec_log/",
    "workers": "telemetry/workers.py",
    "upstream": "upstreams/",
    "upstreams": "upstreams/",
    "local": "upstreams/",
    "cloud": "upstreams/",
    "fleet": "state/",
    "reloader": "reload.py",
}


def _chain(node: ast.expr) -> list[str] | None:
    """``a.b.c`` -> ["a", "b", "c"]; None for anything but names and attributes."""
    names: list[str] = []
    while isinstance(node, ast.Attribute):
        names.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return [node.id, *reversed(names)]


def _targets(node: ast.AST) -> list[ast.expr]:
    if isinstance(node, ast.Assign):
        found = list(node.targets)
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        found = [node.target]
    elif (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "setattr"
        and node.args
    ):
        # setattr(part, "x", ...) writes part.x
        return [ast.Attribute(value=node.args[0], attr="?", ctx=ast.Store())]
    else:
        return []
    flat: list[ast.expr] = []
    for target in found:
        flat += target.elts if isinstance(target, ast.Tuple) else [target]
    return flat


def foreign_writes(source: str, where: str) -> list[str]:
    """Assignments in ``source`` (the file ``where``, relative to app/) to an attribute of
    a long-lived part that ``where`` does not define."""
    found = []
    for node in ast.walk(ast.parse(source)):
        for target in _targets(node):
            if not isinstance(target, ast.Attribute):
                continue
            owner = _chain(target.value)
            if owner is None or owner == ["self"] or owner == ["cls"]:
                continue  # a class writing its own attributes
            for name in owner:
                home = HOMES.get(name)
                if home is not None and not where.startswith(home):
                    found.append(f"app/{where}:{node.lineno}: {ast.unparse(target)}")
                    break
    return found


def test_no_module_writes_a_built_part_it_does_not_define() -> None:
    writes = [
        write
        for path in sorted(APP.rglob("*.py"))
        for write in foreign_writes(path.read_text(), path.relative_to(APP).as_posix())
    ]
    assert writes == [], "a built part is written after its build:\n" + "\n".join(writes)


@pytest.mark.parametrize(
    "line",
    [
        "pipeline.local_can = capabilities(props)",
        "pipeline.depth.found = True",
        "self.services.pipeline = pipeline",
        "services.settings, services.pipeline = settings, pipeline",
        "services.stats.alerts = settings.telemetry.alerts",
        "state = services.config; services.config.version += 1",
        "setattr(pipeline, 'local_can', None)",
    ],
)
def test_the_scan_finds_what_the_old_build_did(line: str) -> None:
    assert foreign_writes(line, "reload.py"), line


def test_a_class_may_write_its_own_and_a_request_its_record() -> None:
    assert foreign_writes("self.runtime = runtime", "services.py") == []
    assert foreign_writes("rec.outcome = outcome", "pipeline/__init__.py") == []
    assert foreign_writes("self.upstream.in_flight += 1", "upstreams/base.py") == []


def test_runtime_and_lasting_cannot_be_written() -> None:
    assert dataclasses.is_dataclass(Runtime) and Runtime.__dataclass_params__.frozen  # type: ignore[attr-defined]
    assert Lasting.__dataclass_params__.frozen  # type: ignore[attr-defined]


def test_a_swap_is_one_runtime_for_another() -> None:
    from app.config import settings_from_mapping

    settings = settings_from_mapping(
        proxy_config("http://127.0.0.1:1", "http://127.0.0.1:2"), env={}
    )

    async def scenario() -> None:
        from contextlib import AsyncExitStack

        from app.assembly import build_upstreams

        stack = AsyncExitStack()
        upstreams = build_upstreams(settings, stack, {})
        telemetry = Telemetry(Stats())
        first = Runtime(settings, pipeline_of(settings, upstreams, telemetry), stack)
        second = Runtime(settings, pipeline_of(settings, upstreams, telemetry), stack)
        services = Services(Stats())
        assert services.serve(first) is None
        assert services.reloaded(second, ("server.port",)) is first
        assert (services.chat, services.config.version) == (second.pipeline, 2)
        assert services.config.pending_restart == ("server.port",)
        services.refused("broken")
        assert (services.chat, services.config.reload_error) == (second.pipeline, "broken")
        assert services.config.version == 2
        await stack.aclose()

    asyncio.run(scenario())
