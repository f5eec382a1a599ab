"""The README's main job: ``longcall demo`` runs end to end and every promise holds."""

from __future__ import annotations

import subprocess
import sys

import pytest

DEMO_TIMEOUT_S = 240


@pytest.mark.slow
def test_make_demo_end_to_end() -> None:
    """The demo starts its server, runs every scenario, and exits 0 with all checks held."""
    done = subprocess.run(
        [sys.executable, "-m", "longcall", "demo"],
        capture_output=True,
        text=True,
        timeout=DEMO_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "every promise held" in done.stdout
    for check in ("one receipt per call node", "one server task per call node"):
        assert f"✓ {check}" in done.stdout


def test_walkthrough_demo() -> None:
    """The offline walkthrough (core + ledger only) prints three receipts."""
    done = subprocess.run(
        [sys.executable, "-m", "longcall", "demo", "--walkthrough"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "3 ready-outbox rows" in done.stdout
