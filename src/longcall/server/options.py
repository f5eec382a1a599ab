"""Server options and the per-server fault plan (constructor arguments, never globals).

Owns: limits (body, argument and result sizes, JSON depth, open tasks per principal,
page size), the allowed origins and hosts, the server's identity, and the
fault-injection plan used by tests (lose the HTTP response of the Nth task creation,
so a client meets "created, response lost" — SPEC F1, X2). Must not: do I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from longcall import __version__

DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024
DEFAULT_MAX_ARGUMENT_BYTES = 1024 * 1024
DEFAULT_MAX_RESULT_BYTES = 4 * 1024 * 1024
DEFAULT_MAX_JSON_DEPTH = 64
DEFAULT_MAX_OPEN_TASKS_PER_PRINCIPAL = 1_000
DEFAULT_LEASE_S = 15.0
DEFAULT_CHANGE_POLL_S = 0.5
DEFAULT_BODY_READ_TIMEOUT_S = 30.0
DEFAULT_HEADER_READ_TIMEOUT_S = 10.0
DEFAULT_MAX_CONNECTIONS = 1_000


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerOptions:
    """Limits and identity of one server."""

    name: str = "longcall"
    version: str = __version__
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    """Every endpoint (``/mcp``, ``/v1``, ``/apify/mcp``): a larger body is HTTP 413."""
    max_argument_bytes: int = DEFAULT_MAX_ARGUMENT_BYTES
    """Tool arguments, as compact JSON, on every path that runs a tool."""
    max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES
    """A tool result larger than this is not stored: the call fails saying so."""
    max_json_depth: int = DEFAULT_MAX_JSON_DEPTH
    """Nesting limit of any JSON body (deeper is a parse error, never a RecursionError)."""
    max_open_tasks_per_principal: int = DEFAULT_MAX_OPEN_TASKS_PER_PRINCIPAL
    """Working / input-required tasks one principal may hold at once (SPEC S5 quota)."""
    allowed_origins: frozenset[str] = frozenset()
    """``Origin`` values allowed besides loopback ones (DNS-rebinding protection)."""
    allowed_hosts: frozenset[str] = frozenset()
    """``Host`` names allowed besides loopback ones on a loopback listener."""
    resource_metadata_url: str | None = None
    """RFC 9728: the protected-resource metadata URL named in ``WWW-Authenticate``."""
    lease_s: float = DEFAULT_LEASE_S
    """How long a running task stays this process's without a renewal (renewed every third).
    Another process takes it over only once the lease expired (D1); clocks of processes
    sharing a store must agree to well within this."""
    change_poll_s: float = DEFAULT_CHANGE_POLL_S
    """How often a waiter re-reads the store for changes made by another process."""
    body_read_timeout_s: float = DEFAULT_BODY_READ_TIMEOUT_S
    """A request body not received within this is answered 408 (slow senders)."""
    header_read_timeout_s: float = DEFAULT_HEADER_READ_TIMEOUT_S
    """A connection whose request head is not complete within this is closed (slow-loris)."""
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    """Connections and requests in flight; past it new requests are answered 503."""
    stateful: bool = False
    """Issue 2025-11-25 sessions (``Mcp-Session-Id``); stateless is the default."""
    list_page_size: int = 50
