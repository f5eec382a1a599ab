"""The gateway: long tools made safe for every MCP host, task-aware or not (G1, O4).

An MCP server in front of the upstream servers of a servers file. Every host call is
an operation in the gateway's own ledger, driven by the durable executor; task-aware
hosts get tasks, task-unaware hosts get the result within an early-return window or a
handle with ``longcall_status`` / ``longcall_result`` / ``longcall_cancel`` /
``longcall_answer``. Must not: import ``longcall.cli``.

Typical use::

    async with Gateway(servers=load_servers(path), ledger="sqlite:///gw.db") as gateway:
        await gateway.server.serve(host="127.0.0.1", port=8766)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from longcall.errors import HandleRefused
from longcall.gateway.handles import format_handle, parse_handle
from longcall.gateway.hostcalls import GatewayOptions

if TYPE_CHECKING:
    from longcall.gateway.app import Gateway
    from longcall.gateway.stdio import StdioSession, serve_stdio

_SHELL = {"Gateway": "app", "StdioSession": "stdio", "serve_stdio": "stdio"}
"""Loaded on first use: the pure decisions (``hostcalls``, ``repeats``, ``handles``) are
imported by the simulator, which must not load the server library with them."""


def __getattr__(name: str) -> Any:
    module = _SHELL.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


__all__ = [
    "Gateway",
    "GatewayOptions",
    "HandleRefused",
    "StdioSession",
    "format_handle",
    "parse_handle",
    "serve_stdio",
]
