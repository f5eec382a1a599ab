"""The tool-side library: serve slow async Python functions as long-running MCP tools.

Both task protocols on one Streamable HTTP endpoint (2026-07-28 +
``io.modelcontextprotocol/tasks``, and 2025-11-25 experimental tasks), a durable task
store (SQLite by default; PostgreSQL shared by several server processes, each running
task leased to one), idempotent creation by submission key, principal-bound tasks (or
tokens checked by an authorization server's verifier), input from inside a tool and
before a task exists, status push (SPEC S1-S7, D1). Must not: import ``longcall.cli``.

Typical use::

    server = LongcallServer(store="sqlite:///tasks.db")

    @server.tool(task="required", ttl_ms=3_600_000, idempotent=True)
    async def report(ctx: TaskContext, rows: int) -> dict: ...

    await server.serve(host="127.0.0.1", port=8765)
"""

from longcall.server.app import MCP_PATH, LongcallServer, running_server
from longcall.server.auth import Authenticator, BearerAuth, StaticTokens, token_principal
from longcall.server.errors import (
    InputDeclined,
    JsonRpcError,
    LongcallServerError,
    StoreError,
    ToolError,
    ToolProtocolError,
)
from longcall.server.examples import build_reference_server
from longcall.server.model import ANONYMOUS, Principal, TaskRecord, TaskStatus
from longcall.server.options import ServerOptions
from longcall.server.store import SqliteTaskStore, TaskStore, open_store
from longcall.server.tools import TaskContext, ToolSpec
from longcall.server.wire import LOOKUP_METHOD, SUBMISSION_KEY_META_KEY

__all__ = [
    "ANONYMOUS",
    "LOOKUP_METHOD",
    "MCP_PATH",
    "SUBMISSION_KEY_META_KEY",
    "Authenticator",
    "BearerAuth",
    "InputDeclined",
    "JsonRpcError",
    "LongcallServer",
    "LongcallServerError",
    "Principal",
    "ServerOptions",
    "SqliteTaskStore",
    "StaticTokens",
    "StoreError",
    "TaskContext",
    "TaskRecord",
    "TaskStatus",
    "TaskStore",
    "ToolError",
    "ToolProtocolError",
    "ToolSpec",
    "build_reference_server",
    "open_store",
    "running_server",
    "token_principal",
]
