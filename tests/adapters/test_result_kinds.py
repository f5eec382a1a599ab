"""An operator's outcome is classified by the rules its protocol's fetch uses: the same
bytes are accepted as the same kind whoever supplied them."""

from __future__ import annotations

from typing import Any

import pytest

from longcall.adapters.aip151 import mapping as aip151
from longcall.adapters.apify.mapping import PROTOCOL as APIFY
from longcall.adapters.base import Outcome
from longcall.adapters.kinds import result_kind_of
from longcall.adapters.mcp.results import protocol_error_result, verify_result
from longcall.adapters.mcp.rpc import LEGACY, MODERN
from longcall.core.events import ResultFetched
from longcall.core.keys import canonical_json
from longcall.core.record import ResultKind, ServerStatus

TEXT = [{"type": "text", "text": "the disk is full"}]
TOOL_ERROR_STATUS = {
    "code": 9,
    "message": "the tool failed",
    "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "TOOL_ERROR"}],
}


def _fetched(outcome: Outcome) -> tuple[ServerStatus, ResultKind, bytes]:
    assert isinstance(outcome.event, ResultFetched)
    assert outcome.payload is not None
    return outcome.event.status, outcome.event.result_kind, outcome.payload


FETCHES = {
    "mcp value": (MODERN, verify_result({"content": TEXT, "isError": False}, output_schema=None)),
    "mcp tool error that completed": (
        MODERN,
        verify_result({"content": TEXT, "isError": True}, output_schema=None),
    ),
    "mcp tool error that failed (2025-11-25)": (
        LEGACY,
        verify_result(
            {"content": TEXT, "isError": True}, output_schema=None, status=ServerStatus.FAILED
        ),
    ),
    "mcp protocol error": (
        MODERN,
        protocol_error_result({"code": -32603, "message": "internal", "data": {"at": 3}}),
    ),
    "aip-151 response": (
        aip151.PROTOCOL,
        aip151.result_of({"name": "operations/1", "done": True, "response": {"value": 3}}),
    ),
    "aip-151 tool error": (
        aip151.PROTOCOL,
        aip151.result_of({"name": "operations/1", "done": True, "error": TOOL_ERROR_STATUS}),
    ),
    "aip-151 protocol error": (
        aip151.PROTOCOL,
        aip151.result_of(
            {"name": "operations/1", "done": True, "error": {"code": 13, "message": "internal"}}
        ),
    ),
}


KIND_OF_CASE = {
    "mcp value": ResultKind.VALUE,
    "mcp tool error that completed": ResultKind.TOOL_ERROR,
    "mcp tool error that failed (2025-11-25)": ResultKind.TOOL_ERROR,
    "mcp protocol error": ResultKind.PROTOCOL_ERROR,
    "aip-151 response": ResultKind.VALUE,
    "aip-151 tool error": ResultKind.TOOL_ERROR,
    "aip-151 protocol error": ResultKind.PROTOCOL_ERROR,
}


@pytest.mark.parametrize("name", FETCHES)
def test_an_operator_s_bytes_get_the_kind_the_fetch_gave_them(name: str) -> None:
    """Whatever the engine fetched, an operator supplying the same bytes with the same
    status is given the same kind."""
    protocol, outcome = FETCHES[name]
    status, kind, payload = _fetched(outcome)
    assert kind is KIND_OF_CASE[name]
    assert result_kind_of(protocol, status, payload) is kind


@pytest.mark.parametrize(
    ("protocol", "status", "body", "kind"),
    [
        # What the bytes do not say, the status implies.
        (MODERN, ServerStatus.COMPLETED, {"rows": []}, ResultKind.VALUE),
        (MODERN, ServerStatus.FAILED, {"why": "checked by hand"}, ResultKind.TOOL_ERROR),
        (aip151.PROTOCOL, ServerStatus.FAILED, "no status", ResultKind.TOOL_ERROR),
        (APIFY, ServerStatus.COMPLETED, {"run": {}, "items": []}, ResultKind.VALUE),
        (APIFY, ServerStatus.FAILED, {"run": {}, "items": []}, ResultKind.TOOL_ERROR),
        ("scripted", ServerStatus.COMPLETED, {"content": TEXT, "isError": True}, ResultKind.VALUE),
        # A cancellation is one whatever its body holds.
        (MODERN, ServerStatus.CANCELLED, {"isError": True}, ResultKind.CANCELLED),
        # A JSON-RPC error's shape means a protocol error only for a failed task.
        (MODERN, ServerStatus.COMPLETED, {"code": 1, "message": "m"}, ResultKind.VALUE),
    ],
)
def test_what_the_bytes_do_not_say_the_status_implies(
    protocol: str, status: ServerStatus, body: Any, kind: ResultKind
) -> None:
    assert result_kind_of(protocol, status, canonical_json(body)) is kind


def test_bytes_that_are_not_json_get_the_kind_the_status_implies() -> None:
    assert result_kind_of(MODERN, ServerStatus.COMPLETED, b"\xff not json") is ResultKind.VALUE
    assert result_kind_of(MODERN, ServerStatus.FAILED, b"{") is ResultKind.TOOL_ERROR
