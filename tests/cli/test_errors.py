"""Every way a command used to end in a traceback now ends in one line on stderr and the
documented exit status; ``--debug`` shows the traceback."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import anyio
import pytest
from click.testing import CliRunner
from starlette.applications import Starlette
from starlette.responses import HTMLResponse
from starlette.routing import Route
from tests.bounds import LOADED_MACHINE_S
from tests.protocols.conftest import serve_app

from longcall.cli import main
from longcall.cli.common import ExitCode

HTML_404 = (
    "<!DOCTYPE html><html><head><title>404</title></head><body><h1>Not Found</h1>\n</body></html>"
)


def run(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """The command in this process: (exit status, stdout, stderr)."""
    result = CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def assert_one_line(stderr: str, *fragments: str) -> None:
    """stderr is one line, names what went wrong, and holds no traceback."""
    assert stderr.count("\n") == 1, stderr
    assert stderr.startswith("longcall: "), stderr
    assert "Traceback" not in stderr
    for fragment in fragments:
        assert fragment in stderr, stderr


@pytest.fixture
def closed_port() -> int:
    """A 127.0.0.1 port nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def ledger(tmp_path: Path) -> str:
    """A ledger holding one accepted call node ``done`` (recorded by the real code)."""
    import random

    from tests.runtime.test_engine import RESULT, ScriptedServer, binding
    from tests.runtime.test_engine import run as drive

    from longcall.ledger import SQLiteLedger
    from longcall.runtime.engine import CallSpec, Engine

    path = tmp_path / "ledger.db"
    with SQLiteLedger(path) as opened:
        engine = Engine(opened, rng=random.Random(1))
        engine.start_call(CallSpec(call_node_id="done", binding=binding(), arguments={}), now=0.0)
        drive(engine, ScriptedServer())
        assert opened.result_payload("done") == RESULT
    return f"sqlite:///{path}"


def test_a_ledger_in_a_missing_directory(tmp_path: Path) -> None:
    """call and ops name the missing directory (exit 1) and create nothing."""
    url = f"sqlite:///{tmp_path / 'nope' / 'ledger.db'}"
    code, _, err = run("call", "http://127.0.0.1:1/mcp", "echo", "--ledger", url)
    assert code == ExitCode.ERROR
    assert_one_line(err, "does not exist")
    code, _, err = run("ops", "list", "--ledger", url)
    assert code == ExitCode.ERROR
    assert_one_line(err, "no ledger at")
    assert not (tmp_path / "nope").exists()


def test_read_only_commands_never_create_a_ledger(tmp_path: Path) -> None:
    """ops list/show/result/wait/answer/cancel and rollout shadow-report on a ledger that
    does not exist say so and leave none."""
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    for args in (
        ("ops", "list"),
        ("ops", "show", "n"),
        ("ops", "result", "n"),
        ("ops", "wait", "n"),
        ("ops", "cancel", "n"),
        ("ops", "answer", "n", "approved=true"),
        ("rollout", "shadow-report"),
    ):
        code, _, err = run(*args, "--ledger", url)
        assert code == ExitCode.ERROR, args
        assert_one_line(err, "no ledger at")
    assert list(tmp_path.iterdir()) == []


def test_rollout_status_before_any_ledger_shows_what_this_build_runs(tmp_path: Path) -> None:
    """No ledger yet: rollout status says no plan is set and names the adapter versions
    this build carries (exit 0; --json: an empty plan), and makes no ledger."""
    from longcall.adapters.routing import carried_versions

    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    code, out, err = run("rollout", "status", "--ledger", url)
    assert code == ExitCode.OK, err
    assert out.startswith(f"no plan is set: no ledger at {tmp_path / 'ledger.db'}")
    carried = out.splitlines()[-1]
    assert carried.startswith("this build runs: ")
    for protocol, version in carried_versions():
        if not protocol.endswith("/sync"):
            assert f"{protocol} {version}" in carried
    code, out, err = run("rollout", "status", "--json", "--ledger", url)
    assert (code, json.loads(out)) == (ExitCode.OK, []), err
    assert list(tmp_path.iterdir()) == []


def test_rollout_takes_the_ledger_every_command_takes(ledger: str) -> None:
    """Without --ledger, rollout reads $LONGCALL_LEDGER, as call, ops and worker do."""
    code, out, err = run(
        "rollout", "canary", "2026-07-28", "1", "10", env={"LONGCALL_LEDGER": ledger}
    )
    assert code == 0, err
    code, out, err = run("rollout", "status", "--json", env={"LONGCALL_LEDGER": ledger})
    assert code == 0, err
    assert [(r["protocol"], r["state"], r["canary_percent"]) for r in json.loads(out)] == [
        ("2026-07-28", "canary", 10.0)
    ]


def test_a_read_only_ledger(ledger: str) -> None:
    """A ledger the user may not write is one line, even for ops list (exit 1)."""
    # Root writes anything: the command then runs as nobody, in a directory it can read.
    shared = Path(tempfile.mkdtemp(prefix="longcall-ro-"))
    path = shared / "ledger.db"
    shutil.copy(ledger.removeprefix("sqlite:///"), path)
    path.chmod(0o444)
    shared.chmod(0o555)
    try:
        command = [sys.executable, "-m", "longcall", "ops", "list", "--ledger", f"sqlite:///{path}"]
        if os.geteuid() == 0:
            if shutil.which("setpriv") is None:
                pytest.skip("running as root without setpriv: nothing is read-only to root")
            command = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *command]
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=LOADED_MACHINE_S, check=False
        )
    finally:
        shared.chmod(0o755)
        shutil.rmtree(shared)
    assert done.returncode == ExitCode.ERROR
    assert_one_line(done.stderr, "readonly")


def test_unreachable_postgres_and_unsupported_urls(closed_port: int) -> None:
    """An unreachable PostgreSQL (no password shown, exit 1) and an unknown scheme (a
    usage error, exit 2)."""
    url = f"postgresql://user:secret@127.0.0.1:{closed_port}/db"
    code, _, err = run("ops", "list", "--ledger", url)
    assert code == ExitCode.ERROR
    assert_one_line(err, f"127.0.0.1:{closed_port}", "connect")
    assert "secret" not in err
    code, _, err = run("ops", "list", "--ledger", "mysql://x/y")
    assert code == ExitCode.USAGE
    assert_one_line(err, "no ledger backend for scheme 'mysql'")


def test_serve_on_a_port_in_use_and_a_read_only_store(tmp_path: Path) -> None:
    """serve: a taken port and a store it cannot open are one line each (exit 1)."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "longcall", "serve", "--port", str(port),
             "--store", f"sqlite:///{tmp_path / 'tasks.db'}"],
            capture_output=True, text=True, timeout=LOADED_MACHINE_S, check=False,
        )  # fmt: skip
    assert done.returncode == ExitCode.ERROR
    assert f"cannot serve on 127.0.0.1:{port}" in done.stderr
    assert "Traceback" not in done.stderr
    done = subprocess.run(
        [sys.executable, "-m", "longcall", "serve", "--port", "0",
         "--store", f"sqlite:///{tmp_path / 'missing' / 'tasks.db'}"],
        capture_output=True, text=True, timeout=LOADED_MACHINE_S, check=False,
    )  # fmt: skip
    assert done.returncode == ExitCode.ERROR
    assert_one_line(done.stderr, "cannot open task store")


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ('{"x": NaN}', "NaN is not a JSON number"),
        ('{"x": Infinity}', "Infinity is not a JSON number"),
        ('{"x": "\\ud800"}', "lone surrogate"),
        ("[" * 100_000, "nested too deeply"),
        ("{bad", "not JSON"),
        ("[1, 2]", "must be a JSON object"),
    ],
)
def test_arguments_that_are_not_plain_json(tmp_path: Path, text: str, why: str) -> None:
    """--args that is not a plain JSON object is a usage error (exit 2), nothing recorded."""
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    code, _, err = run("call", "http://127.0.0.1:1/mcp", "echo", "--args", text, "--ledger", url)
    assert code == ExitCode.USAGE
    assert_one_line(err, "--args", why)
    assert not (tmp_path / "ledger.db").exists()


def test_reconcile_bad_result_json_and_an_accepted_node(ledger: str) -> None:
    """--result that is not JSON is a usage error; reconciling an accepted node is refused
    in words, not a state-machine message."""
    code, _, err = run(
        "ops", "reconcile", "done", "--as", "completed", "--note", "n", "--result", "{bad",
        "--ledger", ledger,
    )  # fmt: skip
    assert code == ExitCode.USAGE
    assert_one_line(err, "--result", "not JSON")
    code, _, err = run(
        "ops", "reconcile", "done", "--as", "resume", "--note", "n", "--ledger", ledger
    )
    assert code == ExitCode.REFUSED
    assert_one_line(err, "'done' is accepted", "only an operation waiting for an operator")
    assert "State." not in err
    assert "ReconciledManually" not in err


def test_bad_option_values(ledger: str) -> None:
    """sim --permutations -5, --qps 0 and an unknown command are usage errors (exit 2)."""
    for args in (
        ("sim", "--permutations", "-5"),
        ("call", "http://127.0.0.1:1/mcp", "echo", "--qps", "0", "--ledger", ledger),
        ("ops", "frob"),
    ):
        code, _, err = run(*args)
        assert code == ExitCode.USAGE, args
        assert_one_line(err, "--help")


@pytest.mark.anyio
async def test_a_refused_connection_and_an_html_error_page(
    tmp_path: Path, closed_port: int
) -> None:
    """A refused connection says so (exit 6); an HTML 404 page is never printed raw."""
    url = f"sqlite:///{tmp_path / 'ledger.db'}"

    async def not_found(_request: object) -> HTMLResponse:
        return HTMLResponse(HTML_404, status_code=404)

    app = Starlette(routes=[Route("/{path:path}", not_found, methods=["GET", "POST"])])

    def invoke(*args: str) -> tuple[int, str, str]:
        return run(*args)

    with anyio.fail_after(LOADED_MACHINE_S):
        code, _, err = await anyio.to_thread.run_sync(
            invoke, "call", f"http://127.0.0.1:{closed_port}/mcp", "echo", "--ledger", url
        )
        assert code == ExitCode.UNREACHABLE
        assert_one_line(err, "cannot reach", "Connection refused")
        assert "answered neither" not in err
        async with serve_app(app) as base:
            for path in ("/v1", "/mcp"):
                code, _, err = await anyio.to_thread.run_sync(
                    invoke, "call", base + path, "echo", "--ledger", url
                )
                assert code == ExitCode.REFUSED, err
                assert_one_line(err)
                assert "<" not in err


def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    """--debug (or $LONGCALL_DEBUG) lets the error through with its traceback."""
    url = f"sqlite:///{tmp_path / 'nope' / 'ledger.db'}"
    done = subprocess.run(
        [sys.executable, "-m", "longcall", "--debug", "ops", "list", "--ledger", url],
        capture_output=True, text=True, timeout=LOADED_MACHINE_S, check=False,
    )  # fmt: skip
    assert done.returncode == 1
    assert "Traceback" in done.stderr
    assert "LedgerMissing" in done.stderr


def test_help_has_examples_exit_codes_and_no_requirement_ids() -> None:
    """-h works everywhere; each command's help has an example; no requirement ids."""
    code, out, _ = run("-h")
    assert code == 0
    assert "Exit codes:" in out
    assert "130" in out
    commands = [
        ("call",), ("worker",), ("serve",), ("sim",), ("demo",), ("ops",),
        ("ops", "list"), ("ops", "show"), ("ops", "wait"), ("ops", "result"),
        ("ops", "cancel"), ("ops", "answer"), ("ops", "reconcile"), ("ops", "where"),
        ("rollout",), ("rollout", "status"), ("rollout", "set"), ("rollout", "canary"),
        ("rollout", "shadow"), ("rollout", "shadow-report"), ("rollout", "rollback"),
    ]  # fmt: skip
    for command in commands:
        code, out, _ = run(*command, "-h")
        assert code == 0, command
        assert "Example" in out, command
        assert not _requirement_ids(out), (command, _requirement_ids(out))


def _requirement_ids(text: str) -> list[str]:
    import re

    return re.findall(r"\b[LXPSFROGDCI]\d{1,2}\b", text)


def test_json_errors_keep_stdout_clean(tmp_path: Path) -> None:
    """With --json, errors go to stderr: stdout stays parseable (here: empty)."""
    url = f"sqlite:///{tmp_path / 'nope.db'}"
    code, out, err = run("ops", "list", "--json", "--ledger", url)
    assert code == ExitCode.ERROR
    assert out == ""
    assert_one_line(err)
    json.dumps(err)


@pytest.mark.parametrize("command", ["worker", "serve"])
def test_a_taken_metrics_port_is_one_line_for_worker_and_serve(
    tmp_path: Path, command: str
) -> None:
    """``--metrics-port`` on a port another process holds: the same one line from both
    commands (exit 1), naming the address and why."""
    where = (
        ["--ledger", f"sqlite:///{tmp_path / 'l.db'}", "--until-idle"]
        if command == "worker"
        else ["--port", "0", "--store", f"sqlite:///{tmp_path / 'tasks.db'}"]
    )
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "longcall", command, *where, "--metrics-port", str(port)],
            capture_output=True,
            text=True,
            timeout=LOADED_MACHINE_S,
            check=False,
        )
    assert done.returncode == ExitCode.ERROR
    # serve logs first (a new task store is a warning of its own); the error is one line.
    error = done.stderr if command == "worker" else done.stderr.splitlines()[-1] + "\n"
    assert_one_line(error, f"cannot serve metrics on 127.0.0.1:{port}", "in use")


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (("worker", "--until-idle", "--lease", "1e300"), "not in the range"),
        (("worker", "--lease", "nan"), "not a finite number"),
        (("call", "http://127.0.0.1:9/mcp", "t", "--budget", "nan"), "not a finite number"),
        (("call", "http://127.0.0.1:9/mcp", "t", "--budget", "inf"), "not in the range"),
        (("call", "http://127.0.0.1:9/mcp", "t", "--qps", "nan"), "not a finite number"),
        (("ops", "wait", "n", "--timeout", "nan"), "not a finite number"),
        (("rollout", "canary", "2026-07-28", "2", "nan"), "not a finite number"),
        (("serve", "--lease-seconds", "inf"), "not in the range"),
        (("sim", "--permutations", "99999999999999999999999"), "above 1,000,000"),
        (("sim", "--permutations", "1_0"), "not a whole number"),
        (("sim", "--replay", "1", "--mutant", "nope"), "--replay does not take --mutant"),
        (("sim", "--replay", "1", "--json"), "--replay does not take --json"),
        (("sim", "--mutants", "--permutations", "5"), "--mutants does not take --permutations"),
        (("ops", "show", "n\udcff"), "'n\\xff' is not UTF-8 text"),
        (("call", "http://[::1", "t"), "not a usable URL"),
        (("call", "http://127.0.0.1:99999/mcp", "t"), "not a usable URL"),
        (("ops", "list", "--ledger", "sqlite:relative.db"), "use sqlite:///file.db"),
        (("ops", "list", "--ledger", "sqlite:///x.db?synchronous=bogus"), "synchronous must be"),
        (("rollout", "set", "", "", "enabled"), "'' is not a protocol or version name"),
        (("call", "http://127.0.0.1:9/mcp", "t", "--node", ""), "1 to 512 characters"),
        (
            ("call", "http://127.0.0.1:9/mcp", "t", "--args", '{"a": 1, "a": 2}'),
            "'a' appears twice",
        ),
        (("rollout", "set", "2026-07-28", "a b", "enabled"), "not a protocol or version name"),
        (("rollout", "rollback", "2026-07-28", "--from", "1", "--to", "1"), "the same version"),
        (
            ("call", "http://127.0.0.1:9/mcp", "t", "--node", "evil\nnode\x1b[31m"),
            "'evil\\nnode\\x1b[31m' holds U+000A",
        ),
    ],
)
def test_bad_values_are_usage_errors_before_anything_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: tuple[str, ...], fragment: str
) -> None:
    """NaN and the infinities (which pass click's bounds), numbers no timer can hold,
    options a mode would ignore, bytes that are not text, URLs that name nothing: each
    is one line and exit 2, and nothing is made (no ledger file in the directory)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LONGCALL_LEDGER", f"sqlite:///{tmp_path / 'ledger.db'}")
    code, _, err = run(*args)
    assert code == ExitCode.USAGE, err
    assert_one_line(err, fragment)
    assert list(tmp_path.iterdir()) == []


def test_debug_off_values_of_the_environment_variable(tmp_path: Path) -> None:
    """LONGCALL_DEBUG=0 (or false) means off, as a person writing it means."""
    url = f"sqlite:///{tmp_path / 'none.db'}"
    for value in ("0", "false", "no", ""):
        code, _, err = run("ops", "list", "--ledger", url, env={"LONGCALL_DEBUG": value})
        assert code == ExitCode.ERROR
        assert_one_line(err, "no ledger at")


def test_what_the_simulator_and_the_metrics_say_cites_no_requirement_ids() -> None:
    """Requirement ids belong to the code and its design notes; what a person reads
    (the simulator's tables, mutants and violations, metric help) names the behaviour.
    Every string of those modules that is not documentation is checked."""
    import ast

    import longcall

    root = Path(longcall.__file__).parent
    modules = ["cli/sim.py", "sim/mutants.py", "sim/checks.py", "sim/world.py",
               "sim/report.py", "runtime/metrics.py", "server/metrics.py"]  # fmt: skip
    found = []
    for module in modules:
        tree = ast.parse((root / module).read_text(encoding="utf-8"))
        docstrings = {  # a string standing alone: a docstring, or an attribute's
            id(node.value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
        }
        for node in ast.walk(tree):
            text = node.value if isinstance(node, ast.Constant) else None
            if isinstance(text, str) and id(node) not in docstrings and _requirement_ids(text):
                found.append(f"{module}:{getattr(node, 'lineno', 0)}: {text[:60]!r}")
    assert found == []


def test_reconcile_refuses_what_it_would_record_and_not_do(tmp_path: Path) -> None:
    """A result with a resolution that takes none, and ``resume`` of an operation whose
    wait budget is spent (polling would stop again at once), are refused with what to
    do instead; settling it as completed works."""
    from tests.core.builders import OP_ID, T0, new_record

    from longcall.core import State
    from longcall.core import events as e
    from longcall.ledger import SQLiteLedger
    from longcall.runtime.step import apply_event

    path = tmp_path / "ledger.db"
    with SQLiteLedger(path) as opened:
        record = opened.create(new_record(budget_s=0.5, call_node_id="spent"))
        for event, now in (
            (e.SubmitAcknowledged(operation_id=OP_ID, poll_interval_s=5.0), T0 + 0.1),
            (e.WorkingObserved(poll_interval_s=5.0), T0 + 5.2),
        ):
            record = apply_event(opened, record, event, now=now, jitter=0.5).record
        assert record.state is State.RECONCILIATION_REQUIRED
    url = f"sqlite:///{path}"
    base = ("ops", "reconcile", "spent", "--note", "n", "--ledger", url)
    code, _, err = run(*base, "--as", "resume", "--result", "{}")
    assert code == ExitCode.REFUSED
    assert_one_line(err, "a result goes with completed, failed or cancelled")
    code, _, err = run(*base, "--as", "resume")
    assert code == ExitCode.REFUSED
    assert_one_line(err, "wait budget has passed", "settle it as completed")
    code, out, err = run(*base, "--as", "completed", "--result", '{"rows": []}')
    assert code == 0, err
    assert "accepted" in out


def test_a_plan_set_on_a_fresh_machine_makes_the_default_ledger(tmp_path: Path) -> None:
    """With neither --ledger nor $LONGCALL_LEDGER, rollout finds the ledger as call does:
    a change makes the data-directory file (and its directory), a read does not."""
    env = {"XDG_DATA_HOME": str(tmp_path / "data"), "LONGCALL_LEDGER": ""}
    code, out, err = run("rollout", "status", env=env)
    assert code == ExitCode.OK, err
    assert "no plan is set: no ledger at" in out
    assert not (tmp_path / "data").exists()
    code, _, err = run("rollout", "set", "2026-07-28", "1", "enabled", env=env)
    assert code == 0, err
    assert (tmp_path / "data" / "longcall" / "ledger.db").is_file()
