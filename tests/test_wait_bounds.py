"""No test waits for an event with a bound only a quiet machine meets.

A bound written as a bare number in a test module (``BOUND_S = 30.0``) was how the suite
failed on a loaded CI machine, one file at a time: a host process that took 31 s to
import, a server that took 61 s to start. This check reads every test module's
module-level constants whose names say they bound a wait, and the bounds written in
place — ``fail_after(10)``, ``asyncio.timeout(30)``, ``limit_s=30`` and a ``limit_s``
parameter's default — and requires each to be at least
``tests.bounds.LOADED_MACHINE_S`` (or an expression of it), unless it is listed below
with the reason it may be shorter. A bound whose ``TimeoutError`` is suppressed is a
grace, not a failure, and is not read.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.bounds import LOADED_MACHINE_S

TESTS = Path(__file__).resolve().parent
WAIT_BOUND = re.compile(r"(^|_)(BOUND|LIMIT|STARTUP|START_TIMEOUT|WAIT)(_|$)")
"""Names of constants that bound how long a test waits for something to happen."""

SHORTER_ON_PURPOSE = {
    "interop/harness.py:STOP_LIMIT_S": "a child asked to stop is killed after it",
    "server/test_dead_owner.py:CHILD_LIMIT_S": "reaps a child already sent SIGKILL",
}
"""Bounds that may be short, by file and name, with the reason."""


def _numeric_bounds(path: Path) -> list[tuple[str, float, int]]:
    """(name, value, line) of each module-level ``NAME = <number>`` bounding a wait."""
    found = []
    for node in ast.parse(path.read_text(), filename=str(path)).body:
        targets = node.targets if isinstance(node, ast.Assign) else []
        if isinstance(node, ast.AnnAssign):
            targets = [node.target]
        value = getattr(node, "value", None)
        if not isinstance(value, ast.Constant) or not isinstance(value.value, int | float):
            continue
        found.extend(
            (target.id, float(value.value), node.lineno)
            for target in targets
            if isinstance(target, ast.Name) and WAIT_BOUND.search(target.id)
        )
    return found


BOUND_CALLS = ("fail_after", "timeout")
"""Calls whose first argument bounds a wait (anyio's and asyncio's)."""
BOUND_KEYWORDS = ("limit_s",)
"""Keyword arguments and parameters that bound a wait (the suite's helpers)."""


def _number(node: ast.expr | None) -> float | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return float(node.value)
    return None


def _suppressed_timeouts(tree: ast.AST) -> set[int]:
    """The nodes inside ``with contextlib.suppress(TimeoutError):`` blocks."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.With | ast.AsyncWith):
            continue
        suppresses = any(
            isinstance(item.context_expr, ast.Call)
            and ast.unparse(item.context_expr.func).endswith("suppress")
            and any(ast.unparse(arg) == "TimeoutError" for arg in item.context_expr.args)
            for item in node.items
        )
        if suppresses:
            inside.update(id(child) for stmt in node.body for child in ast.walk(stmt))
    return inside


def _bounds_in_place(path: Path) -> list[tuple[str, float, int]]:
    """(what, value, line) of each literal bound written where a wait is made."""
    tree = ast.parse(path.read_text(), filename=str(path))
    suppressed = _suppressed_timeouts(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and id(node) not in suppressed:
            name = ast.unparse(node.func).rsplit(".", 1)[-1]
            value = _number(node.args[0]) if name in BOUND_CALLS and node.args else None
            if value is not None:
                found.append((f"{name}(...)", value, node.lineno))
            for keyword in node.keywords:
                value = _number(keyword.value)
                if keyword.arg in BOUND_KEYWORDS and value is not None:
                    found.append((f"{keyword.arg}=", value, node.lineno))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            arguments = node.args
            positional = arguments.posonlyargs + arguments.args
            defaults = list(zip(positional[::-1], arguments.defaults[::-1], strict=False))
            defaults += list(zip(arguments.kwonlyargs, arguments.kw_defaults, strict=True))
            for argument, default in defaults:
                value = _number(default)
                if argument.arg in BOUND_KEYWORDS and value is not None:
                    found.append((f"{node.name}({argument.arg}=)", value, node.lineno))
    return found


def test_every_wait_bound_fits_a_loaded_machine() -> None:
    """Every literal wait bound in the tests is at least the loaded-machine bound."""
    short = [
        f"{path.relative_to(TESTS)}:{line} {name} = {value:g}"
        for path in sorted(TESTS.rglob("*.py"))
        for name, value, line in _numeric_bounds(path)
        if value < LOADED_MACHINE_S
        and f"{path.relative_to(TESTS).as_posix()}:{name}" not in SHORTER_ON_PURPOSE
    ]
    short += [
        f"{path.relative_to(TESTS)}:{line} {what} {value:g}"
        for path in sorted(TESTS.rglob("*.py"))
        if path.name != Path(__file__).name
        for what, value, line in _bounds_in_place(path)
        if value < LOADED_MACHINE_S
    ]
    assert short == [], (
        f"wait bounds below {LOADED_MACHINE_S:g} s (use tests.bounds.LOADED_MACHINE_S):\n"
        + "\n".join(short)
    )


def test_the_check_sees_a_short_bound(tmp_path: Path) -> None:
    """The reader finds a literal bound, and ignores one derived from the shared bound."""
    module = tmp_path / "test_x.py"
    module.write_text("WAIT_LIMIT_S = 30.0\nRUN_LIMIT_S = 3 * LOADED\nSHORT_TIMEOUT_S = 0.5\n")
    assert _numeric_bounds(module) == [("WAIT_LIMIT_S", 30.0, 1)]


def test_the_check_sees_a_short_bound_in_place(tmp_path: Path) -> None:
    """Bounds written where the wait is made are read, a suppressed one is not."""
    module = tmp_path / "test_x.py"
    module.write_text(
        "async def wait(limit_s=10.0, *, other=1.0):\n"
        "    with anyio.fail_after(5):\n"
        "        await ready(limit_s=30)\n"
        "    with contextlib.suppress(TimeoutError):\n"
        "        async with asyncio.timeout(2):\n"
        "            await gone()\n"
        "    async with asyncio.timeout(LOADED_MACHINE_S):\n"
        "        await done()\n"
    )
    assert sorted(_bounds_in_place(module)) == [
        ("fail_after(...)", 5.0, 2),
        ("limit_s=", 30.0, 3),
        ("wait(limit_s=)", 10.0, 1),
    ]
