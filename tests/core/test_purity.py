"""The core stays pure (docs/design/layers.md): no clock, randomness, I/O, concurrency or
third-party import, and no ``await`` or ``async def``, in any module of ``src/longcall/core``.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parents[2] / "src" / "longcall" / "core"
MODULES = sorted(CORE.rglob("*.py"))
BANNED = {
    "time",
    "random",
    "asyncio",
    "socket",
    "sqlite3",
    "threading",
    "os",
    "datetime",
    "pathlib",
    "subprocess",
}


def _imports(tree: ast.AST) -> list[str]:
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                names.append("longcall.core" + (f".{node.module}" if node.module else ""))
            else:
                assert node.module is not None
                names.append(node.module)
    return names


def test_core_has_modules() -> None:
    """The scan finds the core's modules (guards against a wrong path)."""
    assert {p.name for p in MODULES} >= {"machine.py", "states.py", "schedule.py"}


@pytest.mark.parametrize("path", MODULES, ids=[p.name for p in MODULES])
def test_module_imports_only_pure_stdlib_and_core(path: Path) -> None:
    """No banned stdlib module and no third-party package is imported."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for name in _imports(tree):
        top = name.split(".")[0]
        assert top not in BANNED, f"{path.name} imports {name}"
        if top == "longcall":
            # The one error tree is types only (longcall.errors imports nothing).
            assert name in ("longcall.core", "longcall.errors") or name.startswith(
                "longcall.core."
            ), f"{path.name} imports {name} from outside the core"
        else:
            assert top in sys.stdlib_module_names or top == "__future__", (
                f"{path.name} imports third-party {name}"
            )


@pytest.mark.parametrize("path", MODULES, ids=[p.name for p in MODULES])
def test_module_has_no_async(path: Path) -> None:
    """No ``async def``, ``await``, ``async for`` or ``async with`` in the core."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    asyncish = (ast.AsyncFunctionDef, ast.Await, ast.AsyncFor, ast.AsyncWith)
    found = [type(n).__name__ for n in ast.walk(tree) if isinstance(n, asyncish)]
    assert found == []


def test_dynamic_imports_are_absent() -> None:
    """No ``__import__`` or ``importlib`` calls sneak a banned module in."""
    for path in MODULES:
        source = path.read_text(encoding="utf-8")
        assert "__import__" not in source, path.name
        assert "importlib" not in source, path.name
