"""No test waits for an event with a bound only a quiet machine meets.

A bound written as a bare number in a test module (``BOUND_S = 30.0``) was how the suite
failed on a loaded CI machine, one file at a time: a host process that took 31 s to
import, a server that took 61 s to start. This check reads every test module's
module-level constants whose names say they bound a wait, and requires each to be at
least ``tests.bounds.LOADED_MACHINE_S`` (or an expression of it), unless it is listed
below with the reason it may be shorter.
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


def test_every_wait_bound_fits_a_loaded_machine() -> None:
    """Every literal wait bound in the tests is at least the loaded-machine bound."""
    short = [
        f"{path.relative_to(TESTS)}:{line} {name} = {value:g}"
        for path in sorted(TESTS.rglob("*.py"))
        for name, value, line in _numeric_bounds(path)
        if value < LOADED_MACHINE_S
        and f"{path.relative_to(TESTS).as_posix()}:{name}" not in SHORTER_ON_PURPOSE
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
