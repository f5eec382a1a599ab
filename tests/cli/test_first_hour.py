"""What a new user meets in the first hour, end to end as separate processes against the
reference server on 127.0.0.1: Ctrl-C that says what the ledger holds, --answer and
--args checked before anything is created, a replay that says it sent nothing, the
tools of a server, arguments from a file or stdin."""

from __future__ import annotations

import asyncio
import importlib.abc
import json
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from tests.cli.test_flows import CLI_TIMEOUT_S, Cli, Watched
from tests.e2e.conftest import serve

from longcall.cli.common import ExitCode
from longcall.server import build_reference_server

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


class Holding(Watched):
    """The watched layer that can hold every request of one method until released."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.hold: str | None = None
        self.held = asyncio.Event()
        self.release = asyncio.Event()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if self.hold is not None and scope["type"] == "http" and scope["method"] == "POST":
            body = b""
            while True:
                message = await receive()
                body += message.get("body", b"")
                if not message.get("more_body"):
                    break
            if json.loads(body or b"{}").get("method") == self.hold:
                self.held.set()
                await self.release.wait()
            replayed = False

            async def replay() -> dict[str, Any]:
                nonlocal replayed
                if replayed:
                    return dict(await receive())
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}

            await super().__call__(scope, replay, send)
            return
        await super().__call__(scope, receive, send)


@pytest.fixture
async def cli(tmp_path: Path) -> AsyncIterator[tuple[Cli, Holding]]:
    """A reference server in this process and the CLI as separate processes."""
    import os

    server = build_reference_server(store=f"sqlite:///{tmp_path / 'tasks.db'}")
    layer = Holding(server.asgi_app())
    env = {k: v for k, v in os.environ.items() if k not in ("LONGCALL_LEDGER", "COLUMNS")}
    env["XDG_DATA_HOME"] = str(tmp_path / "data")
    env["XDG_CONFIG_HOME"] = str(tmp_path / "config")
    async with serve(layer) as url:
        try:
            yield Cli(url, f"sqlite:///{tmp_path / 'ledger.db'}", env), layer
        finally:
            layer.release.set()


# --- 3. Ctrl-C says what the ledger holds -------------------------------------------


async def test_ctrl_c_before_the_call_is_recorded_says_nothing_was_sent(
    cli: tuple[Cli, Holding],
) -> None:
    """Ctrl-C while the command still asks the server about the tool: exit 130, one line
    saying nothing was sent (no resume command that would fail), and no record."""
    runner, layer = cli
    layer.hold = "tools/list"
    process = await runner.start(
        "call", runner.url, "sleep_report", "--args", '{"seconds": 300, "rows": 1}',
        "--node", "early", "--ledger", runner.ledger, "--wait",
    )  # fmt: skip
    async with asyncio.timeout(CLI_TIMEOUT_S):
        await layer.held.wait()
        process.send_signal(signal.SIGINT)
        _out, raw = await process.communicate()
    err = raw.decode()
    assert process.returncode == ExitCode.INTERRUPTED, err
    assert "Traceback" not in err
    assert "nothing was sent" in err and "Resume with" not in err
    layer.release.set()
    code, _, err = await runner.ops("show", "early")
    assert code == ExitCode.REFUSED, err
    assert layer.counts.get("tools/call", 0) == 0


def test_ctrl_c_while_the_command_loads_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ctrl-C before the command has even loaded: exit 130 and one line, no traceback."""
    from longcall import entry

    class Interrupting(importlib.abc.MetaPathFinder):
        def find_spec(self, name: str, path: Any, target: Any = None) -> None:
            if name == "longcall.cli":
                raise KeyboardInterrupt

    monkeypatch.delitem(sys.modules, "longcall.cli", raising=False)
    monkeypatch.setattr(sys, "meta_path", [Interrupting(), *sys.meta_path])
    with pytest.raises(SystemExit) as ended:
        entry.main()
    assert ended.value.code == ExitCode.INTERRUPTED
    err = capsys.readouterr().err
    assert err.strip() == "longcall: interrupted before the command started: nothing was sent"


# --- 4. --answer is checked against the form -----------------------------------------


async def test_a_misspelt_answer_field_is_refused_and_the_call_waits(
    cli: tuple[Cli, Holding],
) -> None:
    """``--answer aproved=true``: exit 5 naming the form's fields and the command that
    answers; the call goes on, waiting for the answer, which then settles it."""
    runner, _ = cli
    code, _, err = await runner.call("approve", {"change": "x"}, "gate", "--answer", "aproved=true",
                                     "--wait")  # fmt: skip
    assert code == ExitCode.REFUSED, err
    assert "no field 'aproved'" in err and "approved" in err
    assert "longcall ops answer gate approved=" in err
    code, view, err = await runner.ops("show", "gate", "--json")
    assert view["state"] == "input_required", err
    code, view, err = await runner.call("approve", {"change": "x"}, "gate", "--answer",
                                        "approved=true", "--wait")  # fmt: skip
    assert code == ExitCode.OK, err
    assert view["result"]["structuredContent"]["approved"] is True


# --- 5. --args checked against the tool's input schema --------------------------------


async def test_arguments_the_schema_refuses_spend_nothing(cli: tuple[Cli, Holding]) -> None:
    """A missing required argument: a usage error before anything is recorded or sent;
    the same node then takes the right arguments."""
    runner, layer = cli
    code, _, err = await runner.call("approve", {}, "noargs", "--wait")
    assert code == ExitCode.USAGE, err
    assert "'change' is a required property" in err and "nothing was sent" in err
    assert layer.counts.get("tools/call", 0) == 0
    code, _, _ = await runner.ops("show", "noargs")
    assert code == ExitCode.REFUSED  # no such call node: nothing was spent
    code, view, err = await runner.call("fail", {"kind": "tool"}, "noargs", "--wait")
    assert code == ExitCode.NOT_OK, err
    assert view["outcome"] == "tool_error"


async def test_an_unknown_tool_suggests_the_close_names(cli: tuple[Cli, Holding]) -> None:
    """``call … sleep_reprot``: refused with the listed name it is one edit away from."""
    runner, _ = cli
    code, _, err = await runner.call("sleep_reprot", {}, "typo")
    assert code == ExitCode.REFUSED, err
    assert "did you mean 'sleep_report'?" in err
