"""What a new user meets in the first hour, end to end as separate processes against the
reference server on 127.0.0.1: Ctrl-C that says what the ledger holds, --answer and
--args checked before anything is created, a replay that says it sent nothing, the
tools of a server, arguments from a file or stdin."""

from __future__ import annotations

import asyncio
import importlib.abc
import json
import re
import signal
import sys
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from tests.cli.test_flows import CLI_TIMEOUT_S, Cli, Watched, line_matching
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
    assert "nothing was sent" in err
    assert "Resume with" not in err
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
    assert "no field 'aproved'" in err
    assert "approved" in err
    assert "longcall ops answer gate approved=" in err
    code, view, err = await runner.ops("show", "gate", "--json")
    assert view["state"] == "input_required", err
    code, view, err = await runner.ops("answer", "gate", "approved=true", "--json")
    assert code == ExitCode.OK, err
    assert view["call_node_id"] == "gate"
    assert view["input_keys_pending"] == []
    code, view, err = await runner.call("approve", {"change": "x"}, "gate", "--wait")
    assert code == ExitCode.OK, err
    assert view["result"]["structuredContent"]["approved"] is True


# --- 5. --args checked against the tool's input schema --------------------------------


async def test_arguments_the_schema_refuses_spend_nothing(cli: tuple[Cli, Holding]) -> None:
    """A missing required argument: a usage error before anything is recorded or sent;
    the same node then takes the right arguments."""
    runner, layer = cli
    code, _, err = await runner.call("approve", {}, "noargs", "--wait")
    assert code == ExitCode.USAGE, err
    assert "'change' is a required property" in err
    assert "nothing was sent" in err
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


# --- 8. a replay says it sent nothing; 10. arguments from a file or stdin -------------


async def test_a_replay_says_nothing_was_sent_and_how_to_call_again(
    cli: tuple[Cli, Holding], tmp_path: Path
) -> None:
    """The same settled call again: its receipt, and on stderr when it was accepted and
    that nothing was sent; a new --node makes the call again on purpose. Arguments come
    from @FILE or stdin as well as from the command line."""
    runner, layer = cli
    args = {"seconds": 0, "rows": 2}
    code, first, err = await runner.call("sleep_report", args, "r1", "--wait")
    assert code == ExitCode.OK, err
    assert "nothing sent" not in err
    assert first["replayed"] is False
    (tmp_path / "args.json").write_text(json.dumps(args))
    code, again, err = await runner.call("sleep_report", args, "r1", "--wait")
    assert code == ExitCode.OK, err
    assert again["replayed"] is True
    assert again["result_digest"] == first["result_digest"]
    assert "r1 was already accepted at " in err
    assert "nothing sent" in err
    assert "--node" in err
    assert layer.counts["tools/call"] == 1
    code, out, err = await runner.run(
        "call", runner.url, "sleep_report", "--args", f"@{tmp_path / 'args.json'}",
        "--node", "r2", "--ledger", runner.ledger, "--json", "--wait",
    )  # fmt: skip
    assert code == ExitCode.OK, err
    assert json.loads(out)["replayed"] is False
    assert layer.counts["tools/call"] == 2
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "longcall", "call", runner.url, "sleep_report", "--args", "-",
        "--node", "r3", "--ledger", runner.ledger, "--json", "--wait",
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env=runner.env,
    )  # fmt: skip
    async with asyncio.timeout(CLI_TIMEOUT_S):
        out_b, err_b = await process.communicate(json.dumps({"seconds": 0, "rows": 3}).encode())
    assert process.returncode == ExitCode.OK, err_b.decode()
    assert len(json.loads(out_b)["result"]["structuredContent"]["rows"]) == 3
    missing = f"@{tmp_path / 'missing.json'}"
    code, _, err = await runner.run(
        "call", runner.url, "sleep_report", "--args", missing, "--ledger", runner.ledger
    )
    assert code == ExitCode.USAGE
    assert "cannot read" in err


# --- 13. a call without --wait leaves nothing the server refuses ----------------------


async def test_a_call_without_wait_sends_nothing_the_server_refuses(tmp_path: Path) -> None:
    """``call`` returning once submitted: the server counts no refused request (it once
    counted the push stream the exiting command opened and dropped)."""
    import os

    server = build_reference_server(store=f"sqlite:///{tmp_path / 'tasks.db'}")
    env = {k: v for k, v in os.environ.items() if k != "LONGCALL_LEDGER"}
    async with serve(server.asgi_app()) as url:
        runner = Cli(url, f"sqlite:///{tmp_path / 'ledger.db'}", env)
        for node in ("a", "b"):
            code, view, err = await runner.call("sleep_report", {"seconds": 30, "rows": 1}, node)
            assert code == ExitCode.OK, err
            assert view["state"] == "working"
    # The server has stopped: every request that reached it has been handled and counted.
    assert dict(server.metrics.refused) == {}


# --- 15. rough edges --------------------------------------------------------------------


async def test_call_quiet_shows_the_question_once(cli: tuple[Cli, Holding]) -> None:
    """``call -q --wait`` ending at --timeout with a question open shows it once."""
    runner, _ = cli
    code, _out, err = await runner.run(
        "call", runner.url, "approve", "--args", '{"change": "q"}', "--node", "q",
        "--ledger", runner.ledger, "--wait", "-q", "--timeout", "20",
    )  # fmt: skip
    assert code == ExitCode.NEEDS_PERSON, err
    assert err.count("q needs an answer") == 1, err


async def test_ctrl_c_on_a_worker_says_the_worker_stopped(cli: tuple[Cli, Holding]) -> None:
    """A worker's Ctrl-C says it stopped and its operations go on with the next worker."""
    runner, _ = cli
    process = await runner.start("worker", "--ledger", runner.ledger)
    assert process.stderr is not None
    async with asyncio.timeout(CLI_TIMEOUT_S):
        while b"worker: driving" not in await process.stderr.readline():
            pass
        process.send_signal(signal.SIGINT)
        _out, raw = await process.communicate()
    err = raw.decode()
    assert process.returncode == ExitCode.INTERRUPTED, err
    assert "the worker stopped" in err
    assert "the call goes on" not in err
    assert "restart it with: longcall worker" in err


# --- 9. what a server offers ----------------------------------------------------------


async def test_tools_lists_names_task_support_and_arguments(cli: tuple[Cli, Holding]) -> None:
    """``longcall tools SERVER``: every tool with its task support and input schema; one
    tool's schema by name; a wrong name is refused with the close one; nothing recorded."""
    runner, layer = cli
    code, out, err = await runner.run("tools", runner.url, "--json")
    assert code == ExitCode.OK, err
    listed = {t["name"]: t for t in json.loads(out)}
    assert {"sleep_report", "crawl", "approve", "fail"} <= set(listed)
    assert listed["approve"]["inputSchema"]["required"] == ["change"]
    assert all(t["taskSupport"] in ("forbidden", "optional", "required") for t in listed.values())
    code, out, err = await runner.run("tools", runner.url)
    assert code == ExitCode.OK, err
    assert "sleep_report" in out
    assert "change: string" in out
    code, out, err = await runner.run("tools", runner.url, "approve")
    assert code == ExitCode.OK
    assert json.loads(out[out.index("{") :])["required"] == ["change"]
    code, _, err = await runner.run("tools", runner.url, "aprove")
    assert code == ExitCode.REFUSED
    assert "did you mean 'approve'?" in err
    assert layer.counts.get("tools/call", 0) == 0


async def test_tools_of_the_apify_style_facade_are_listed_through_mcp(
    cli: tuple[Cli, Holding],
) -> None:
    """``longcall tools URL/apify/mcp`` with no --protocol: the facade's tools and its
    helpers, listed through MCP, and a note on how a call to one goes; nothing called."""
    runner, layer = cli
    apify = runner.url.removesuffix("/mcp") + "/apify/mcp"
    code, out, err = await runner.run("tools", apify, "--json")
    assert code == ExitCode.OK, err
    names = {t["name"] for t in json.loads(out)}
    assert {"longcall--crawl", "get-actor-run", "get-dataset-items"} <= names
    code, out, err = await runner.run("tools", apify)
    assert code == ExitCode.OK, err
    assert "get-actor-run" in out
    assert "follows that run to its end" in err
    code, _, err = await runner.run("tools", apify, "longcall--crwl")
    assert code == ExitCode.REFUSED
    assert "did you mean 'longcall--crawl'" in err
    assert layer.counts.get("tools/call", 0) == 0


async def test_tools_of_an_aip151_endpoint(cli: tuple[Cli, Holding]) -> None:
    """``longcall tools URL/v1``: the tools the facade lists at GET /v1/tools, each a
    long-running operation; an AIP-151 endpoint without that listing is refused in one
    line saying it lists no tools and where its methods are instead."""
    runner, _ = cli
    aip151 = runner.url.removesuffix("/mcp") + "/v1"
    code, out, err = await runner.run("tools", aip151, "--json")
    assert code == ExitCode.OK, err
    listed = {t["name"]: t for t in json.loads(out)}
    assert {"sleep_report", "crawl", "approve", "fail"} <= set(listed)
    assert {t["taskSupport"] for t in listed.values()} == {"required"}
    assert listed["approve"]["inputSchema"]["required"] == ["change"]
    elsewhere = runner.url.removesuffix("/mcp") + "/elsewhere/v1"
    code, out, err = await runner.run("tools", elsewhere)
    assert code == ExitCode.REFUSED, err
    assert out == ""
    assert err.count("\n") == 1, err
    assert "lists no tools: AIP-151 has no tool list" in err
    assert "its methods are in its API documentation" in err
    assert "Traceback" not in err


# --- also: ops list filters, who holds a lease, a worker's id -------------------------


async def test_ops_list_filters_by_tool_server_and_age_and_limits_with_a_note(
    cli: tuple[Cli, Holding],
) -> None:
    """``ops list`` with --tool, --server, --older-than/--newer-than and --limit: each
    filter selects what it says; a limit keeps the newest and says how many more."""
    runner, _ = cli
    for node, tool, args in (
        ("c1", "crawl", {"pages": 0, "items_per_page": 1}),
        ("s1", "sleep_report", {"seconds": 600, "rows": 1}),
        ("c2", "crawl", {"pages": 0, "items_per_page": 2}),
    ):
        code, _, err = await runner.call(tool, args, node)
        assert code in (ExitCode.OK, ExitCode.PENDING), err

    async def listed(*filters: str) -> list[str]:
        code, rows, err = await runner.ops("list", "--json", *filters)
        assert code == ExitCode.OK, err
        return [row["call_node_id"] for row in rows]

    assert await listed() == ["c1", "s1", "c2"]
    assert await listed("--tool", "crawl") == ["c1", "c2"]
    assert await listed("--server", runner.url, "--tool", "sleep_report") == ["s1"]
    assert await listed("--server", runner.url + "/other") == []
    assert await listed("--newer-than", "1d") == ["c1", "s1", "c2"]
    assert await listed("--older-than", "1d") == []
    assert await listed("--older-than", "0s") == ["c1", "s1", "c2"]
    code, rows, err = await runner.ops("list", "--json", "--limit", "2")
    assert [row["call_node_id"] for row in rows] == ["s1", "c2"]
    assert "2 of 3 operations shown, the newest; 1 more" in err
    code, out, err = await runner.ops("list", "--limit", "1", "--tool", "crawl")
    assert code == ExitCode.OK, err
    assert [line.split()[0] for line in out.splitlines()[1:-1]] == ["c2"]
    assert (
        out.splitlines()[-1]
        == "1 of 2 operations shown, the newest; 1 more: a higher --limit, or a filter"
    )
    code, out, err = await runner.ops("list", "--limit", "2", "--tool", "crawl")
    assert out.splitlines()[-1] == "2 operation(s)"
    code, _, err = await runner.ops("list", "--older-than", "2x")
    assert code == ExitCode.USAGE
    assert "'2x' is not an age" in err


async def test_ops_show_names_the_worker_that_holds_the_lease_as_its_log_lines_do(
    cli: tuple[Cli, Holding],
) -> None:
    """A worker's log lines carry its short id; ``ops show`` names the same holder (its
    id and the ledger's owner), until when it holds the lease, and the next poll."""
    runner, _ = cli
    code, _, err = await runner.call("sleep_report", {"seconds": 600, "rows": 1}, "s1")
    assert code in (ExitCode.OK, ExitCode.PENDING), err
    code, view, err = await runner.ops("show", "s1", "--json")
    assert view["lease"] is None  # nobody drives it yet
    worker = await runner.start("worker", "--ledger", runner.ledger)
    assert worker.stderr is not None
    seen: list[str] = []
    try:
        async with asyncio.timeout(CLI_TIMEOUT_S):
            started = await line_matching(worker.stderr, r"worker: driving", seen)
            found = re.search(r"as \[(\w+)\] \(lease holder (\S+)\)", started)
            assert found, started
            short, owner = found.groups()
            await line_matching(worker.stderr, rf"^\d\d:\d\d:\d\d \[{short}\] s1 working", seen)
        code, view, err = await runner.ops("show", "s1", "--json")
        assert code == ExitCode.OK, err
        lease = view["lease"]
        assert (lease["owner"], lease["id"], lease["kind"], lease["live"]) == (
            owner,
            short,
            "worker",
            True,
        )
        assert owner.rpartition(":")[2].startswith(short)
        assert datetime.fromisoformat(lease["until_utc"]).tzinfo is not None
        assert datetime.fromisoformat(view["next_poll_at_utc"]).tzinfo is not None
        code, out, err = await runner.ops("show", "s1")
        assert f"worker {short} ({owner}) until" in " ".join(out.split())
        assert "next poll" in out
    finally:
        worker.send_signal(signal.SIGTERM)
        async with asyncio.timeout(CLI_TIMEOUT_S):
            await worker.communicate()


# --- also: the result alone, for pipes ------------------------------------------------


async def test_call_wait_result_prints_only_the_structured_result(
    cli: tuple[Cli, Holding],
) -> None:
    """``--wait --result``: stdout is the structured result as JSON and nothing else;
    without --wait it is a usage error."""
    runner, _ = cli
    args = '{"pages": 1, "items_per_page": 2}'
    code, out, err = await runner.run(
        "call", runner.url, "crawl", "--args", args, "--ledger", runner.ledger, "--wait", "--result"
    )
    assert code == ExitCode.OK, err
    assert len(json.loads(out)["items"]) == 2
    code, _, err = await runner.run(
        "call", runner.url, "crawl", "--args", args, "--ledger", runner.ledger, "--result"
    )
    assert code == ExitCode.USAGE, err
