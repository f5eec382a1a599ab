"""The public API is typed for its users: ``py.typed`` ships, and mypy --strict checks a
caller's code against ``longcall``'s names (a wrong call is an error, a right one is not)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import longcall

GOOD = """\
import asyncio
from typing import Any, assert_type

from longcall import (
    CallOutcome, CallResult, CancelOutcome, Client, InputRequest, Progress, State,
    SyncClient, TerminalReceipt,
)


async def on_input(request: InputRequest) -> dict[str, Any] | None:
    return request.accept(approved=True)


def on_progress(report: Progress) -> None:
    assert_type(report.fraction, float | None)


async def main() -> None:
    async with Client("sqlite:///x.db", on_input=on_input, on_progress=on_progress) as client:
        result = await client.call("http://h/mcp", "tool", {"a": 1}, node="n", wait=False)
        assert_type(result, CallResult)
        assert_type(result.outcome, CallOutcome)
        assert_type(result.state, State)
        assert_type(result.receipt, TerminalReceipt | None)
        assert_type(result.ok, bool)
        assert_type(await client.cancel("n"), CancelOutcome)
        assert_type(await client.wait("n", timeout_s=1.0), CallResult)
        assert_type(client.results(), list[CallResult])


with SyncClient("sqlite:///x.db") as sync:
    assert_type(sync.result("n"), CallResult)
"""

BAD = """\
from longcall import Client

Client(poll_qps_max="fast")
"""


def mypy(tmp_path: Path, modules: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """One ``mypy --strict`` run over ``modules`` (name -> code): checking longcall and its
    dependencies is most of the cost, so both callers share one run."""
    paths = []
    for name, code in modules.items():
        path = tmp_path / f"{name}.py"
        path.write_text(code, encoding="utf-8")
        paths.append(path.name)  # relative to the run's directory, as its report names it
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", *paths],
        capture_output=True, text=True, timeout=300, check=False, cwd=tmp_path,
    )  # fmt: skip


def test_py_typed_ships() -> None:
    """The package carries the PEP 561 marker."""
    assert (Path(longcall.__file__).parent / "py.typed").is_file()


def test_every_public_name_resolves() -> None:
    """Each name of ``longcall.__all__`` imports."""
    for name in longcall.__all__:
        assert getattr(longcall, name) is not None, name


@pytest.mark.slow
def test_mypy_checks_callers_against_the_public_api(tmp_path: Path) -> None:
    """Correct use passes mypy --strict with the types asserted; a wrong type fails."""
    checked = mypy(tmp_path, {"good": GOOD, "bad": BAD})
    errors = [line for line in checked.stdout.splitlines() if ": error:" in line]
    assert [line for line in errors if not line.startswith("bad.py:")] == [], checked.stdout
    assert len(errors) == 1, checked.stdout
    assert 'incompatible type "str"; expected "float"' in errors[0]
