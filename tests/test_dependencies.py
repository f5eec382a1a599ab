"""Every third-party module the package imports is declared in ``pyproject.toml``.

A module that arrives only through a development tool's dependencies passes every test
here and fails on a user's machine (``pip install longcall``): the executor's metrics
once imported ``prometheus_client`` that way. Imports inside functions count too: a
lazy import is still needed when its code runs.
"""

from __future__ import annotations

import ast
import importlib.abc
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "src" / "longcall"
OPTIONAL = {"postgres", "fastmcp"}
"""Extras a user opts into; the modules behind them are imported only on that path."""


def _name(requirement: str) -> str:
    """The normalised distribution name of a requirement string (PEP 503)."""
    match = re.match(r"[A-Za-z0-9._-]+", requirement)
    assert match is not None, requirement
    return re.sub(r"[-_.]+", "-", match.group(0)).lower()


def _declared() -> tuple[set[str], set[str]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    required = {_name(r) for r in project["dependencies"]}
    extras = project.get("optional-dependencies", {})
    optional = {_name(r) for extra in OPTIONAL for r in extras.get(extra, [])}
    return required, optional


def _imported_top_level_modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for path in sorted(SOURCE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                found.setdefault(name.partition(".")[0], path)
    return found


def test_every_third_party_import_is_a_declared_dependency() -> None:
    required, optional = _declared()
    distributions = importlib.metadata.packages_distributions()
    undeclared = []
    for module, path in _imported_top_level_modules().items():
        if module in sys.stdlib_module_names or module in ("__future__", "longcall"):
            continue
        owners = {_name(d) for d in distributions.get(module, [])}
        assert owners, f"{module} (imported in {path.relative_to(ROOT)}) is not installed"
        if not owners & (required | optional):
            undeclared.append(f"{module} ({sorted(owners)}, imported in {path.relative_to(ROOT)})")
    assert not undeclared, f"imported but not declared in pyproject.toml: {undeclared}"


class _MissedImports(importlib.abc.MetaPathFinder):
    """Last on ``sys.meta_path``: every module no other finder found reaches it."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> None:
        self.names.append(fullname)


@pytest.mark.anyio
@pytest.mark.slow
async def test_no_import_fails_while_a_call_is_driven(tmp_path: Path) -> None:
    """A library's optional import on the request path is installed: a failed one walks
    sys.path at every request (httpcore's sniffio once cost a quarter of the CPU)."""
    from longcall import Client
    from longcall.server import build_reference_server, running_server

    server = build_reference_server(store=str(tmp_path / "tasks.db"))
    async with running_server(server) as url, Client(f"sqlite:///{tmp_path / 'l.db'}") as client:
        arguments = {"seconds": 0, "rows": 1}
        await client.call(url, "sleep_report", arguments, node="warm")
        missed = _MissedImports()
        sys.meta_path.append(missed)
        try:
            for index in range(3):
                result = await client.call(url, "sleep_report", arguments, node=f"n{index}")
                assert result.state.value == "accepted", result
        finally:
            sys.meta_path.remove(missed)
    assert not missed.names, f"imports that failed while calls were driven: {missed.names}"
