"""The command starts without loading what it may not need: the read-only commands and
``--help`` never import the protocol adapters or the MCP SDK (a few seconds each time),
and the caller's executor loads the SDK only for a server that asks for OAuth."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from tests.bounds import LOADED_MACHINE_S

import longcall

HEAVY = ("mcp", "longcall.runtime.executor", "longcall.adapters.routing", "jsonschema")


def loaded_after(imports: str, *, among: str) -> str:
    """What a fresh interpreter prints after ``imports``: the modules loaded that
    ``among`` (a Python expression over a module name ``m``) selects."""
    probe = f"import sys\n{imports}\nprint([m for m in list(sys.modules) if {among}])\n"
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=LOADED_MACHINE_S,
        check=True,
    )
    return done.stdout.strip()


def test_importing_the_command_and_the_client_loads_no_protocol_stack() -> None:
    """``import longcall.cli`` (and the client) leaves the MCP SDK and adapters unloaded."""
    imports = "import longcall.cli, longcall.client, longcall\nlongcall.Client"
    assert loaded_after(imports, among=f"m in {HEAVY!r}") == "[]"


def test_the_executor_and_its_adapters_load_no_mcp_sdk() -> None:
    """What ``call --wait``, ``worker``, the gateway and the client drive (the executor, and
    every protocol's adapter it may route to) leaves the MCP SDK unloaded: only a server
    that asks for OAuth loads it (its client is the SDK's). Loading it cost every worker
    start about two thirds of its CPU."""
    imports = (
        "import longcall.runtime.executor, longcall.adapters.routing\n"
        "import longcall.adapters.mcp, longcall.adapters.aip151, longcall.adapters.apify"
    )
    assert loaded_after(imports, among="m == 'mcp' or m.startswith('mcp.')") == "[]"


# --- Ctrl-C while the command loads -------------------------------------------------------

SCRIPT = Path(sys.executable).with_name("longcall")
"""The console script pip wrote for this environment: what a user runs."""
TRIPWIRE = """
import os, signal, sys

class Tripwire:
    # Each module the command asks for, in order, on stderr; or SIGINT at the one named.
    def __init__(self, name):
        self.name = name
    def find_spec(self, name, path, target=None):
        if self.name == "":
            sys.stderr.write(f"IMPORT {name}\\n")
        elif name == self.name:
            self.name = None
            os.kill(os.getpid(), signal.SIGINT)
        return None

sys.meta_path.insert(0, Tripwire(sys.argv[1]))
script, sys.argv = sys.argv[2], sys.argv[2:]
with open(script) as text:
    code = compile(text.read(), script, "exec")
exec(code, {"__name__": "__main__", "__file__": script})
"""
"""Runs the console script as Python would, with a finder that sees every import first
(the probe itself imports nothing the command would: the SIGINT lands where it says)."""
ENTRY_MODULES = ("longcall", "longcall.entry")
"""What Python must find and load before any of the command's code runs (it imports
nothing): a SIGINT there, or before, is the interpreter's own to report."""
SAMPLES = 24
STARTS = 20


def run_script(tripwire: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", TRIPWIRE, tripwire, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=LOADED_MACHINE_S,
    )


def spread(names: list[str], count: int) -> list[str]:
    """The first names (where the package used to load its own imports) and then an
    even spread over the rest, ``count`` in all."""
    head, rest = names[: count // 3], names[count // 3 :]
    step = max(1, len(rest) // (count - len(head)))
    return head + rest[::step][: count - len(head)]


@pytest.mark.parametrize(
    "args", [("rollout", "status", "--ledger", "sqlite:///missing.db"), ("--version",)]
)
def test_ctrl_c_at_any_import_of_the_command_is_one_line(args: tuple[str, ...]) -> None:
    """SIGINT as the command imports any of its modules (a sample spread over all of
    them): exit 130 and one line, never a traceback."""
    assert SCRIPT.is_file(), f"no console script beside {sys.executable}"
    recorded = run_script("", *args)
    names = [
        line.removeprefix("IMPORT ")
        for line in recorded.stderr.splitlines()
        if line.startswith("IMPORT ")
    ]
    for name in spread([n for n in names if n not in ENTRY_MODULES], SAMPLES):
        done = run_script(name, *args)
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        assert "Traceback" not in done.stderr, (name, done.stderr)
        assert done.returncode == 130, (name, done.returncode, done.stderr)
        assert len(lines) == 1, (name, done.stderr)
        assert lines[0].startswith("longcall: interrupted"), (name, done.stderr)
    assert names[:2] == list(ENTRY_MODULES), names[:5]  # nothing before the entry runs


def test_ctrl_c_as_soon_as_the_command_starts_never_shows_its_traceback() -> None:
    """SIGINT the moment the process exists, many times (where it lands varies with the
    machine): no traceback ever passes through the command's code, and once its entry
    runs the answer is one line and exit 130."""
    import signal

    package = str(Path(longcall.__file__).parent)
    for _ in range(STARTS):
        process = subprocess.Popen(
            [str(SCRIPT), "rollout", "status", "--ledger", "sqlite:///missing.db"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=LOADED_MACHINE_S)
        assert package not in err, err
        if process.returncode == 130:
            lines = [line for line in err.splitlines() if line.strip()]
            assert len(lines) == 1, err
            assert lines[0].startswith("longcall: interrupted"), err
