"""When a 2026-07-28 mapping describes a tool from a listing it read earlier in its
session, and when it lists the tools again (X1, X2, R1): the exchanges run against a
scripted server, without a network."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest

from longcall.adapters.exchange import HttpReply, HttpRequest, run_exchange
from longcall.adapters.mcp.legacy import LegacyMapping
from longcall.adapters.mcp.modern import ModernMapping
from longcall.adapters.mcp.rpc import (
    LEGACY,
    SUBMISSION_KEY_EXTENSION,
    TOOLS_LIST_CHANGED,
    RpcChannel,
    open_session,
)
from longcall.core import OperationRecord, new_operation
from longcall.core.events import SubmitRejected
from longcall.core.keys import request_digest

URL = "http://scripted.invalid/mcp"
LOOKUP = {"extensions": {SUBMISSION_KEY_EXTENSION: {"storeId": "store-1"}}}
PLAIN = {"type": "object", "properties": {"text": {"type": "string"}}}


class Scripted:
    """A server that lists ``tools`` and answers a create as ``create`` says; it counts
    the methods it was asked, and sends ``notices`` on the next answer's stream."""

    def __init__(self, tools: list[dict[str, Any]]) -> None:
        self.tools = tools
        self.asked: dict[str, int] = {}
        self.notices: list[str] = []
        self.create: dict[str, Any] = {"result": {"resultType": "complete", "content": []}}

    def __call__(self, request: HttpRequest) -> HttpReply:
        body = json.loads(request.body)
        method = body["method"]
        self.asked[method] = self.asked.get(method, 0) + 1
        if method == "tools/list":
            answer: dict[str, Any] = {"result": {"tools": self.tools}}
        else:
            answer = self.create
        message = {"jsonrpc": "2.0", "id": body["id"], **answer}
        if not self.notices:
            return HttpReply(
                status=200,
                headers={"content-type": "application/json"},
                body=json.dumps(message).encode(),
            )
        events = [{"jsonrpc": "2.0", "method": notice} for notice in self.notices]
        self.notices = []
        stream = "".join(f"data: {json.dumps(event)}\n\n" for event in [*events, message])
        return HttpReply(
            status=200, headers={"content-type": "text/event-stream"}, body=stream.encode()
        )

    def listed(self) -> int:
        return self.asked.get("tools/list", 0)


def _tool(**extra: Any) -> dict[str, Any]:
    return {"name": "t", "inputSchema": PLAIN, **extra}


def _record(tool: str = "t") -> OperationRecord:
    arguments = {"text": "x"}
    return new_operation(
        call_node_id="node",
        request_digest=request_digest(tool, arguments),
        tool_name=tool,
        tool_descriptor_digest="d",
        principal="p",
        server=URL,
        protocol="2026-07-28",
        adapter_version="1",
        now=0.0,
        submission_lookup=True,
    ).record


def _bind(mapping: ModernMapping | LegacyMapping, server: Scripted, tool: str = "t") -> Any:
    return run_exchange(mapping.bind(tool), server)


def test_a_tool_listed_at_a_server_with_a_lookup_is_described_again_from_that_listing() -> None:
    """A second description of the tool sends nothing: a lost create is looked up by its
    key there, never resent on the idempotency hint, so that hint may age."""
    server = Scripted([_tool(annotations={"idempotentHint": True})])
    mapping = ModernMapping(URL, discovered={"capabilities": LOOKUP})
    first = _bind(mapping, server)
    again = _bind(mapping, server)
    assert again == first
    assert server.listed() == 1


@pytest.mark.parametrize(
    ("why", "capabilities", "tool"),
    [
        ("no lookup: a lost create is resent on the idempotency hint", {}, _tool()),
        ("read-only: a call of it is copied to shadow versions", LOOKUP,
         _tool(annotations={"readOnlyHint": True})),
        ("an argument sent as a header", LOOKUP, _tool(inputSchema={
            "type": "object",
            "properties": {"region": {"type": "string", "x-mcp-header": "Region"}},
        })),
    ],
)  # fmt: skip
def test_a_tool_whose_hints_decide_what_is_done_is_listed_for_every_description(
    why: str, capabilities: Mapping[str, Any], tool: dict[str, Any]
) -> None:
    server = Scripted([tool])
    mapping = ModernMapping(URL, discovered={"capabilities": capabilities})
    _bind(mapping, server)
    _bind(mapping, server)
    assert server.listed() == 2, why


def test_a_list_changed_notice_on_any_answer_makes_the_next_description_list_again() -> None:
    server = Scripted([_tool()])
    mapping = ModernMapping(URL, discovered={"capabilities": LOOKUP})
    _bind(mapping, server)
    server.notices = [TOOLS_LIST_CHANGED]
    run_exchange(mapping.submit(_record(), {"text": "x"}), server)  # the notice rides on it
    server.tools = [_tool(annotations={"readOnlyHint": True})]
    changed = _bind(mapping, server)
    assert server.listed() == 2
    assert changed.read_only


def test_a_refused_create_makes_the_next_description_list_again() -> None:
    """A refusal may say the tool is gone or takes other arguments now."""
    server = Scripted([_tool()])
    mapping = ModernMapping(URL, discovered={"capabilities": LOOKUP})
    _bind(mapping, server)
    server.create = {"error": {"code": -32602, "message": "Unknown tool: t"}}
    refused = run_exchange(mapping.submit(_record(), {"text": "x"}), server)
    assert isinstance(refused.event, SubmitRejected)
    _bind(mapping, server)
    assert server.listed() == 2


def test_forgetting_a_listing_makes_the_next_description_list_again() -> None:
    server = Scripted([_tool()])
    mapping = ModernMapping(URL, discovered={"capabilities": LOOKUP})
    _bind(mapping, server)
    mapping.forget_listing("t")
    _bind(mapping, server)
    _bind(mapping, server)
    assert server.listed() == 2


def test_a_2025_11_25_mapping_lists_for_every_description() -> None:
    """Its creates ask for a task by the listed task support: that hint must be fresh."""
    server = Scripted([_tool(execution={"taskSupport": "optional"})])
    offered = {"capabilities": {"experimental": LOOKUP["extensions"]}}
    mapping = LegacyMapping(URL, initialized=offered)
    _bind(mapping, server)
    _bind(mapping, server)
    assert server.listed() == 2


def test_a_session_opened_counts_as_a_change_of_the_tool_list() -> None:
    """A new session may list other tools: a listing read in the old one is not taken."""
    channel = RpcChannel()

    def serve(request: HttpRequest) -> HttpReply:
        body = json.loads(request.body)
        if "id" not in body:
            return HttpReply(status=202)
        result = {"protocolVersion": LEGACY, "capabilities": {}, "serverInfo": {"name": "s"}}
        answer = {"jsonrpc": "2.0", "id": body["id"], "result": result}
        return HttpReply(
            status=200,
            headers={"content-type": "application/json", "mcp-session-id": "s-2"},
            body=json.dumps(answer).encode(),
        )

    before = channel.tools_epoch
    opened = run_exchange(open_session(channel), serve)
    assert isinstance(opened, Mapping)
    assert channel.session_id == "s-2"
    assert channel.tools_epoch == before + 1
