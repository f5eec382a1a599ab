"""Every FastMCP seam this integration uses that FastMCP does not make public.

Owns: the two private touches, each named once here and nowhere else —

* ``Context._task_input_responses`` / ``Context._task_request_state``: how a re-entered
  guard leg (a tool that *returned* an ``InputRequiredResult``) reads the answers on
  ``ctx.input_responses`` / ``ctx.request_state``; FastMCP gives these properties no
  setter (fastmcp-tasks sets the same two fields).
* ``fastmcp.server.dependencies._is_client_tool_call``: whether the tool being dispatched
  is the one the client's ``tools/call`` named (a tool a tool body calls runs inline).
:func:`entered` is entered with the extension's lifespan: it checks that each private
seam is still there, so a FastMCP release that moves one fails at startup with a clear
message instead of mid-task. ``tests/integrations/test_fastmcp_seams.py`` fails the day
FastMCP makes any of them public (then this module shrinks). Must not: hold any logic
beyond reaching these seams.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import mcp_types
from fastmcp.server import dependencies
from fastmcp.server.context import Context

from longcall.server.errors import LongcallServerError

_CONTEXT_FIELDS = ("_task_input_responses", "_task_request_state")


@contextlib.contextmanager
def entered() -> Iterator[None]:
    """Check every private seam is present for the extension's lifespan."""
    probe = Context.__init__.__code__.co_names
    missing = [field for field in _CONTEXT_FIELDS if field not in probe]
    if not hasattr(dependencies, "_is_client_tool_call"):
        missing.append("fastmcp.server.dependencies._is_client_tool_call")
    if missing:
        raise LongcallServerError(
            "this FastMCP release does not have what longcall's task extension relies on: "
            + ", ".join(missing)
            + "; use a longcall release made for it"
        )
    yield


def set_task_input(
    ctx: Context, responses: mcp_types.InputResponses | None, request_state: str | None
) -> None:
    """What ``ctx.input_responses`` / ``ctx.request_state`` answer in this guard leg."""
    ctx._task_input_responses = responses
    ctx._task_request_state = request_state


def is_client_tool_call() -> bool:
    """The dispatch in progress is the tool the client's ``tools/call`` named."""
    return bool(dependencies._is_client_tool_call())
