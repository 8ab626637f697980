"""The layers ARCHITECTURE.md draws: front ends (cli/, integrations/) open filters through
urlseen.kinds and import neither the stores nor the C core."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "src" / "urlseen"


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


@pytest.mark.parametrize(
    "path",
    sorted([*PACKAGE.glob("cli/*.py"), *PACKAGE.glob("integrations/*.py")]),
    ids=lambda p: f"{p.parent.name}/{p.name}",
)
def test_front_ends_import_neither_stores_nor_the_core(path: Path) -> None:
    bad = {
        name
        for name in _imports(path)
        if name.startswith(("urlseen.stores", "urlseen._core")) or name == "urlseen._core"
    }
    assert not bad, f"{path.name} imports {sorted(bad)}: open filters through urlseen.kinds"


def test_cli_stays_thin() -> None:
    lines = sum(len(p.read_text().splitlines()) for p in PACKAGE.glob("cli/*.py"))
    assert lines < 700, f"cli/ has {lines} lines: its logic belongs in kinds/ or the job"


@pytest.mark.parametrize(
    "path", sorted(PACKAGE.glob("splittable/*.py")), ids=lambda p: f"splittable/{p.name}"
)
def test_the_splittable_wing_is_redis_blind(path: Path) -> None:
    """The algorithm knows its store only by the LeafStore protocol (splittable/tree.py): the
    Redis store lives with the host code in shared/, as RedisBloom keeps its filter code
    unaware of Redis. Imports inside functions count too."""
    bad = {
        name
        for name in _imports(path)
        if name.startswith(("urlseen.shared", "redis")) or name in ("urlseen.shared", "redis")
    }
    assert not bad, f"splittable/{path.name} imports {sorted(bad)}"
