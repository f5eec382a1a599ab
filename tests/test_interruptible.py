"""Every process a test starts takes Ctrl-C, however the suite itself was started.

A suite started with SIGINT ignored (in the background of a script, under ``nohup``)
passed that on to every process its tests started: Python then installs no Ctrl-C
handler, and every test that presses Ctrl-C on a ``longcall`` command failed, each
with the command ending as if nothing had been pressed. ``tests/conftest.py`` takes
SIGINT back in each pytest process; these tests hold it there.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.bounds import LOADED_MACHINE_S

ROOT = Path(__file__).resolve().parents[1]
TAKES_CTRL_C = "import signal; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"


def test_a_process_a_test_starts_takes_ctrl_c() -> None:
    child = subprocess.run(
        [sys.executable, "-c", TAKES_CTRL_C],
        capture_output=True,
        text=True,
        check=True,
        timeout=LOADED_MACHINE_S,
    )
    assert child.stdout.strip() == "True"


def test_so_it_does_when_the_suite_starts_with_ctrl_c_ignored() -> None:
    """The test above, in a pytest run started with SIGINT ignored."""
    started_ignoring = (
        "import signal, sys, pytest\n"
        "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
        "sys.exit(pytest.main(sys.argv[1:]))\n"
    )
    run = subprocess.run(
        [
            sys.executable, "-c", started_ignoring, "-q", "-p", "no:xdist",
            f"tests/{Path(__file__).name}::test_a_process_a_test_starts_takes_ctrl_c",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=LOADED_MACHINE_S,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
