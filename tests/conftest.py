"""Shared pytest configuration: the anyio backend, a private home for every test, and the
rules that keep the suite safe to run in parallel.

``make test`` runs the suite under pytest-xdist (several worker processes, ``--dist
loadgroup``): tests of different files run at the same moment on one machine, often a
busy two-core one. Every test, the ones still to be written included, must therefore:

- listen on port 0 (or on a port the kernel just gave it) on 127.0.0.1, never on a fixed
  port;
- write only under ``tmp_path`` (or ``tmp_path_factory``). The working directory and the
  user directories are private to each test anyway (the autouse fixture below): a file a
  tool writes "in the current directory" or in "the user data directory" lands in a
  directory of that test alone, and ``$LONGCALL_LEDGER`` is unset unless the test sets it;
- use a PostgreSQL schema of its own (``tests.ledger.conftest.pg_schema`` and
  ``tests.server.conftest.pg_schema_url`` make one and drop it), never a fixed schema, a
  fixed table in ``public`` or a database-wide advisory lock key;
- wait on the event it needs (a line a child prints, a state in the ledger, a server's
  change event) with a bound generous enough for a loaded machine, never on a fixed time
  only a quiet machine meets (``tests.bounds.LOADED_MACHINE_S`` is such a bound).

A test that needs a resource it cannot make private (a fixed port, a lock shared by the
whole database, a file outside its temporary directory) says so with
``@pytest.mark.xdist_group("NAME")``: every test of group NAME runs on one worker, one
after another (still beside tests of other groups). A test whose assertions measure the
machine itself (a rate or a latency that other work on the machine would distort) is
marked ``@pytest.mark.serial``: ``make test`` runs those after the parallel run, one at a
time.

Every process a test starts can be interrupted with Ctrl-C (SIGINT), however the suite
itself was started (:func:`pytest_configure`).
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.database import DirectoryBasedExampleDatabase

ROOT = Path(__file__).resolve().parents[1]

# Property tests prove what their examples prove, however long the machine takes: no
# per-example deadline and no "generation too slow" failure on a busy CI machine. The
# example database stays at the project root (each test runs in a directory of its own).
settings.register_profile(
    "suite",
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    database=DirectoryBasedExampleDatabase(ROOT / ".hypothesis" / "examples"),
)
settings.load_profile("suite")

USER_DIRECTORIES = ("XDG_DATA_HOME", "XDG_CONFIG_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME")
CALLER_SETTINGS = ("LONGCALL_LEDGER", "LONGCALL_TOKEN_DIR")


def pytest_configure(config: pytest.Config) -> None:
    """A suite started in the background of a script (``make test &``, ``nohup``, a CI
    runner's shell) inherits SIGINT ignored, and so would every process its tests start:
    Python then installs no Ctrl-C handler, and a test that presses Ctrl-C sees nothing
    happen. Each pytest process (every xdist worker runs this too) takes SIGINT back, so
    the processes its tests start receive it, as under a terminal."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests marked ``slow`` (they start processes or servers) run first: on parallel
    workers, the long ones then overlap each other instead of ending the run one by one
    after the quick ones are done. (The order is the same in every worker, as xdist
    requires.)"""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture
def anyio_backend() -> str:
    """Async tests run on asyncio (the runtime's loop)."""
    return "asyncio"


@pytest.fixture(autouse=True)
def private_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test runs in a working directory of its own, with user directories of its
    own and no ``$LONGCALL_LEDGER``: a default ledger, a servers file or a task store
    written "here" never meets another test's, in this process or in a parallel one.
    (A directory apart from ``tmp_path``: a test may assert what its ``tmp_path`` holds.)"""
    home = tmp_path_factory.mktemp("home")
    for name in USER_DIRECTORIES:
        monkeypatch.setenv(name, str(home / name.removeprefix("XDG_").lower()))
    for name in CALLER_SETTINGS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(home)
    return home
