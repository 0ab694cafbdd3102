"""The generated configuration reference is current, and the docs stay short and linked."""

from __future__ import annotations

import re
from pathlib import Path
from types import ModuleType

from tests.support.scripts import load_script

ROOT = Path(__file__).resolve().parent.parent
README_MAX_LINES = 400


def generator() -> ModuleType:
    return load_script("config_docs")


def test_configuration_reference_is_up_to_date() -> None:
    written = (ROOT / "docs" / "configuration.md").read_text()
    assert written == generator().render(), (
        "docs/configuration.md is stale: run `python scripts/config_docs.py --write`"
    )


def test_every_setting_has_a_description() -> None:
    import importlib
    import pkgutil

    from pydantic import BaseModel

    import app.config

    modules = [
        importlib.import_module(f"app.config.{info.name}")
        for info in pkgutil.iter_modules(app.config.__path__)
    ]
    missing = [
        f"{name}.{key}"
        for module in modules
        for name, model in vars(module).items()
        if isinstance(model, type)
        and issubclass(model, BaseModel)
        and model.__module__ == module.__name__
        for key, info in model.model_fields.items()
        if not info.description
    ]
    assert missing == []
    checked = {name for module in modules for name in vars(module)}
    assert {"Settings", "ModelConfig", "LaunchConfig", "DepthConfig"} <= checked


def test_every_key_of_the_shipped_config_is_documented() -> None:
    import yaml

    reference = (ROOT / "docs" / "configuration.md").read_text()
    shipped = yaml.safe_load((ROOT / "config.yaml").read_text())

    def keys(tree: dict, path: str) -> list[tuple[str, str]]:
        found = []
        for key, value in tree.items():
            if path == "models":  # the names are the user's, the keys below them are not
                found += keys(value, "models.<name>")
                continue
            found.append((path, key))
            if isinstance(value, dict) and key not in ("start_offsets", "ceilings"):
                found += keys(value, f"{path}.{key}" if path else key)
        return found

    for section, key in keys(shipped, ""):
        heading = f"## `{section}`" if section else None
        if heading is None:
            assert f"- [`{key}" in reference, key
            continue
        body = reference.split(heading + "\n", 1)[1].split("\n## ", 1)[0]
        assert f"| `{key}` |" in body, f"{section}.{key}"


def test_the_readme_is_a_manual_not_a_lab_notebook() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines"


def anchors(page: Path) -> set[str]:
    """GitHub's anchors for a page's headings: lower case, punctuation dropped, spaces to -."""
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    headings = re.findall(r"^#+ (.+)$", text, flags=re.M)
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings}


def test_every_relative_link_in_the_docs_points_to_a_file() -> None:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    broken = []
    for page in pages:
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)  # code is not a link
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, fragment = target.partition("#")
            resolved = (page.parent / path).resolve() if path else page
            # docs/architecture.md is written on another branch; a link to it is expected
            if resolved == ROOT / "docs" / "architecture.md":
                continue
            if not resolved.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
            elif fragment and resolved.suffix == ".md" and fragment not in anchors(resolved):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert broken == []


def test_every_file_the_architecture_walk_names_exists() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    named = set(re.findall(r"`(app/[\w/]+\.py)", text))
    assert len(named) > 20
    assert sorted(p for p in named if not (ROOT / p).is_file()) == []
