"""The ``longcall`` command end to end, as separate processes against the reference server
on 127.0.0.1: call, worker and ops, the approve flow a person completes with one worker
running, Ctrl-C, and what ``ops list`` / ``ops show`` print."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from tests.e2e.conftest import Fault, FaultLayer, serve

from longcall.cli.common import ExitCode
from longcall.server import build_reference_server

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

CLI_TIMEOUT_S = 120.0


class Watched(FaultLayer):
    """The fault layer that also lets a test await the first request of a method."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.arrived: dict[str, asyncio.Event] = {}

    def first(self, method: str) -> asyncio.Event:
        return self.arrived.setdefault(method, asyncio.Event())

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            seen = len(self.seen)
            wrapped_send = send

            async def note(message: dict[str, Any]) -> None:
                await wrapped_send(message)

            await super().__call__(scope, receive, note)
            for method, _at in self.seen[seen:]:
                self.first(method).set()
            return
        await super().__call__(scope, receive, send)


class Cli:
    def __init__(self, url: str, ledger: str, env: dict[str, str]) -> None:
        self.url = url
        self.ledger = ledger
        self.env = env

    async def start(self, *args: str) -> asyncio.subprocess.Process:
        return await asyncio.create_subprocess_exec(
            sys.executable, "-m", "longcall", *args,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=self.env,
        )  # fmt: skip

    async def run(self, *args: str) -> tuple[int, str, str]:
        process = await self.start(*args)
        async with asyncio.timeout(CLI_TIMEOUT_S):
            out, err = await process.communicate()
        assert process.returncode is not None
        return process.returncode, out.decode(), err.decode()

    async def call(
        self, tool: str, arguments: dict[str, Any], node: str, *more: str
    ) -> tuple[int, Any, str]:
        code, out, err = await self.run(
            "call", self.url, tool, "--args", json.dumps(arguments), "--node", node,
            "--ledger", self.ledger, "--json", *more,
        )  # fmt: skip
        return code, (json.loads(out) if out.strip() else None), err

    async def ops(self, *args: str) -> tuple[int, Any, str]:
        code, out, err = await self.run("ops", *args, "--ledger", self.ledger)
        try:
            data = json.loads(out)
        except ValueError:
            data = out
        return code, data, err


async def line_matching(stream: asyncio.StreamReader, pattern: str, seen: list[str]) -> str:
    """Read lines until one matches ``pattern`` (bounded by the caller's timeout)."""
    while True:
        raw = await stream.readline()
        if not raw:
            raise AssertionError(f"stream ended before {pattern!r}; saw:\n" + "".join(seen))
        line = raw.decode()
        seen.append(line)
        if re.search(pattern, line):
            return line


@pytest.fixture
async def cli(tmp_path: Path) -> AsyncIterator[tuple[Cli, Watched]]:
    """A reference server in this process and the CLI as separate processes."""
    server = build_reference_server(store=f"sqlite:///{tmp_path / 'tasks.db'}")
    layer = Watched(server.asgi_app())
    env = {k: v for k, v in os.environ.items() if k not in ("LONGCALL_LEDGER", "COLUMNS")}
    env["XDG_DATA_HOME"] = str(tmp_path / "data")
    async with serve(layer) as url:
        yield Cli(url, f"sqlite:///{tmp_path / 'ledger.db'}", env), layer


async def test_call_wait_json_prints_the_receipt(cli: tuple[Cli, Watched]) -> None:
    """--wait --json prints the receipt and exits 0; the same call attaches (one create);
    other arguments, another URL or another protocol on the node are refused (exit 5)."""
    runner, layer = cli
    args = {"seconds": 0.3, "rows": 2}
    code, view, err = await runner.call("sleep_report", args, "n1", "--wait")
    assert code == ExitCode.OK, err
    assert (view["state"], view["outcome"], view["warnings"]) == ("accepted", "ok", [])
    assert view["result"]["structuredContent"]["rows"][1] == {"index": 1, "value": 1}
    again, view_again, _ = await runner.call("sleep_report", args, "n1", "--wait")
    assert again == ExitCode.OK
    assert view_again["result_digest"] == view["result_digest"]
    assert layer.counts["tools/call"] == 1
    refused, _, err = await runner.call("sleep_report", {"seconds": 1, "rows": 2}, "n1", "--wait")
    assert refused == ExitCode.REFUSED
    assert "different request" in err
    runner.url = runner.url.replace("/mcp", "/other/mcp")
    refused, _, err = await runner.call("sleep_report", args, "n1", "--wait")
    assert refused == ExitCode.REFUSED
    assert "was called at" in err
    assert err.count("\n") == 1


async def test_exit_codes_and_warnings(cli: tuple[Cli, Watched]) -> None:
    """A tool error exits 3; a zero-item success exits 0 with the empty_result warning."""
    runner, _ = cli
    code, view, _ = await runner.call("fail", {"kind": "tool"}, "bad", "--wait")
    assert (code, view["outcome"]) == (ExitCode.NOT_OK, "tool_error")
    code, view, _ = await runner.call("crawl", {"pages": 0, "items_per_page": 3}, "zero", "--wait")
    assert (code, view["warnings"]) == (ExitCode.OK, ["empty_result"])


async def test_a_person_completes_the_approve_flow_with_one_worker_running(
    cli: tuple[Cli, Watched],
) -> None:
    """The README flow: the worker shows the question with a ready-to-paste answer; a
    wrong-shaped answer is refused before anything is sent; the pasted answer is picked
    up by the same running worker, which completes the call."""
    runner, layer = cli
    code, view, err = await runner.call("approve", {"change": "drop table"}, "gate")
    assert code == ExitCode.OK, err
    assert view["state"] in ("working", "input_required")
    worker = await runner.start("worker", "--ledger", runner.ledger)
    assert worker.stderr is not None
    seen: list[str] = []
    try:
        async with asyncio.timeout(CLI_TIMEOUT_S):
            await line_matching(worker.stderr, r"Approve this change\? drop table", seen)
            answer = await line_matching(worker.stderr, r"answer: longcall ops answer gate", seen)
            pasted = answer.split("answer: ", 1)[1].strip()
            assert pasted == f"longcall ops answer gate approved=true --ledger {runner.ledger}"
            code, _, err = await runner.ops("answer", "gate", "approved=maybe")
            assert code == ExitCode.REFUSED
            assert "boolean" in err
            assert err.count("\n") == 1
            assert "tasks/update" not in layer.counts  # nothing was sent
            code, _out, err = await runner.run(*pasted.split()[1:])
            assert code == ExitCode.OK, err
            await line_matching(worker.stderr, r"gate .*→ accepted: ok", seen)
            assert layer.counts["tasks/update"] >= 1
            assert worker.returncode is None  # the same worker, never restarted
    finally:
        if worker.returncode is None:
            worker.send_signal(signal.SIGTERM)
        async with asyncio.timeout(CLI_TIMEOUT_S):
            assert await worker.wait() == ExitCode.OK
    code, result, _ = await runner.ops("result", "gate")
    assert code == ExitCode.OK
    assert result["structuredContent"] == {"change": "drop table", "approved": True}
    _, shown, _ = await runner.ops("show", "gate", "--json", "--limit", "0")
    events = [h["event"] for h in shown["history"]]
    assert events.index("InputAnswered") < events.index("TerminalObserved")


async def test_worker_until_idle_exits_while_a_person_is_asked(cli: tuple[Cli, Watched]) -> None:
    """--until-idle ends once only a person can move things on (exit 4), having logged
    the question; it used to run for ever."""
    runner, _ = cli
    code, _, err = await runner.call("approve", {"change": "x"}, "gate")
    assert code == ExitCode.OK, err
    code, _, err = await runner.run("worker", "--ledger", runner.ledger, "--until-idle")
    assert code == ExitCode.NEEDS_PERSON, err
    assert "Approve this change? x" in err
    assert "1 operation(s) wait for a person" in err
    code, _, err = await runner.ops("wait", "gate", "--timeout", "0")
    assert code == ExitCode.NEEDS_PERSON
    assert "answer: longcall ops answer gate approved=true" in err


async def test_call_wait_shows_the_question_and_takes_an_answer_from_another_terminal(
    cli: tuple[Cli, Watched],
) -> None:
    """call --wait prints the question with the command that answers it and keeps
    waiting; the answer given by `ops answer` from another process completes the call."""
    runner, _ = cli
    waiting = await runner.start(
        "call", runner.url, "approve", "--args", '{"change": "x"}', "--node", "gate",
        "--ledger", runner.ledger, "--wait", "--json",
    )  # fmt: skip
    assert waiting.stderr is not None
    seen: list[str] = []
    try:
        async with asyncio.timeout(CLI_TIMEOUT_S):
            line = await line_matching(waiting.stderr, r"answer: longcall ops answer gate", seen)
            pasted = line.split("answer: ", 1)[1].split()
            code, _, err = await runner.run(*pasted[1:])
            assert code == ExitCode.OK, err
            out, _ = await waiting.communicate()
    finally:
        if waiting.returncode is None:
            waiting.kill()
            await waiting.wait()
    assert waiting.returncode == ExitCode.OK, "".join(seen)
    view = json.loads(out)
    assert view["result"]["structuredContent"] == {"change": "x", "approved": True}


async def test_the_worker_says_when_a_server_stops_answering_and_when_it_answers_again(
    cli: tuple[Cli, Watched],
) -> None:
    """Polls that fail leave the state as it is (they are retried with backoff): the
    worker says so in a line of its own, and again when the server answers; it used to
    say nothing while it waited."""
    runner, layer = cli
    code, view, err = await runner.call("sleep_report", {"seconds": 1, "rows": 1}, "flaky")
    assert (code, view["state"]) == (ExitCode.OK, "working"), err
    layer.faults.append(Fault(method="tasks/get", nth=(1, 2), status=503))
    code, _, err = await runner.run("worker", "--ledger", runner.ledger, "--until-idle")
    assert code == ExitCode.OK, err
    down = re.search(r"flaky server unreachable, retrying: .*503", err)
    back = re.search(r"flaky server answers again", err)
    assert down, err
    assert back, err
    assert down.start() < back.start(), err
    assert re.search(r"flaky .*→ accepted: ok", err), err


async def test_a_cancel_written_by_ops_is_sent_by_the_worker(cli: tuple[Cli, Watched]) -> None:
    """ops cancel records the request; the worker sends it and the cancellation wins
    (ops result then exits 3: cancelled is not ok)."""
    runner, layer = cli
    code, view, err = await runner.call("sleep_report", {"seconds": 300, "rows": 1}, "long")
    assert (code, view["state"]) == (ExitCode.OK, "working"), err
    code, outcome, _ = await runner.ops("cancel", "long", "--json")
    assert (code, outcome["outcome"], outcome["cancel_generation"]) == (0, "requested", 1)
    code, _, err = await runner.run("worker", "--ledger", runner.ledger, "--until-idle")
    assert code == ExitCode.OK, err
    assert re.search(r"long cancel_requested → cancelled_accepted: cancelled", err), err
    assert layer.counts["tasks/cancel"] == 1
    code, _, _ = await runner.ops("result", "long")
    assert code == ExitCode.NOT_OK


async def test_ctrl_c_says_how_to_resume_and_exits_130(cli: tuple[Cli, Watched]) -> None:
    """Ctrl-C during call --wait stops only local waiting: exit 130 and a resume line
    that works (ops wait needs no URL or arguments)."""
    runner, layer = cli
    polled = layer.first("tasks/get")
    process = await runner.start(
        "call", runner.url, "sleep_report", "--args", '{"seconds": 300, "rows": 1}',
        "--node", "long", "--ledger", runner.ledger, "--wait",
    )  # fmt: skip
    async with asyncio.timeout(CLI_TIMEOUT_S):
        await polled.wait()
        process.send_signal(signal.SIGINT)
        _out, err = await process.communicate()
    assert process.returncode == ExitCode.INTERRUPTED
    assert "Traceback" not in err.decode()
    resume = err.decode().strip().splitlines()[-1].split("Resume with: ", 1)[1]
    assert resume == f"longcall ops wait long --ledger {runner.ledger}"
    code, view, _ = await runner.run(*resume.split()[1:], "--timeout", "0", "--json")
    assert code == ExitCode.PENDING
    assert json.loads(view)["state"] == "working"
    assert layer.counts["tools/call"] == 1


async def test_ops_list_shows_full_node_ids_and_coloured_outcomes(
    cli: tuple[Cli, Watched],
) -> None:
    """Node ids are never cut, even in a narrow terminal; the outcome column is coloured."""
    runner, _ = cli
    long_node = "a-rather-long-call-node-id-that-must-stay-whole-0123456789"
    await runner.call("crawl", {"pages": 0, "items_per_page": 1}, long_node, "--wait")
    await runner.call("fail", {"kind": "protocol"}, "bad", "--wait")
    runner.env.update(COLUMNS="60", FORCE_COLOR="1")
    code, out, _ = await runner.ops("list")
    assert code == ExitCode.OK
    plain = re.sub(r"\x1b\[[0-9;]*m", "", out)
    assert long_node in plain
    assert "\x1b[32mok" in out  # green
    assert "\x1b[31mprotocol_error" in out  # red


async def test_default_ledger_lives_in_the_data_directory(cli: tuple[Cli, Watched]) -> None:
    """Without --ledger: the user data directory; $LONGCALL_LEDGER wins over it."""
    runner, _ = cli
    data = Path(runner.env["XDG_DATA_HOME"]) / "longcall" / "ledger.db"
    code, out, _ = await runner.run("ops", "where")
    assert code == 0
    assert str(data) in out
    code, _, err = await runner.run("ops", "list")
    assert code == ExitCode.ERROR
    assert "no ledger at" in err
    assert not data.exists()
    code, _, err = await runner.run(
        "call", runner.url, "echo", "--args", '{"text": "hi"}', "--wait"
    )
    assert code == ExitCode.OK, err
    assert data.exists()
    runner.env["LONGCALL_LEDGER"] = runner.ledger
    code, out, _ = await runner.run("ops", "where")
    assert runner.ledger in out
    assert "$LONGCALL_LEDGER" in out
