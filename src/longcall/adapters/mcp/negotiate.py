"""X1: negotiate per server, before anything is submitted, which mapping speaks to it — pure.

Owns: :func:`negotiate`, an exchange — 2026-07-28 ``server/discover`` with the tasks
extension → P1; else ``initialize`` (2025-11-25, declaring the capabilities we answer)
with ``capabilities.tasks.requests.tools.call`` → P2; else the synchronous mapping
(P5), which refuses a call declared long unless the tool declares a synchronous limit.
A -32022 answer's ``supported`` versions steer the fallback; a server we cannot reach
at all is said to be unreachable, not to "answer neither".

Must not: perform I/O, assume ``tasks/*`` exists where it was not declared, or submit
anything.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from longcall.adapters.exchange import DEFAULT_TIMEOUT_S, Exchange, TransportFailure
from longcall.adapters.mcp.legacy import LegacyMapping
from longcall.adapters.mcp.modern import ModernMapping
from longcall.adapters.mcp.rpc import (
    LEGACY,
    MODERN,
    OLDER_VERSIONS,
    TASKS_EXTENSION,
    Dialect,
    ModernDialect,
    RpcChannel,
    RpcReply,
    call,
    dialect_of,
    open_session,
)
from longcall.adapters.mcp.sync import SyncMapping
from longcall.core.retry import FailureKind
from longcall.errors import NegotiationFailed

Preference = str
"""``"2026-07-28"``, ``"2025-11-25"``, ``"sync"`` or a bound protocol name such as
``"2025-11-25/sync"`` (a record's ``protocol``: P6 keeps serving its operations)."""

Negotiated = ModernMapping | LegacyMapping | SyncMapping


def discover(channel: RpcChannel) -> Exchange[Mapping[str, Any] | RpcReply]:
    """The 2026-07-28 ``server/discover`` result, or the failed reply."""
    dialect = ModernDialect()
    params = {"_meta": dialect.meta("server/discover", consent=True)}
    answer = yield from call(
        channel, "server/discover", params, headers=dialect.headers("server/discover", None)
    )
    if isinstance(answer, TransportFailure) or answer.result is None:
        return answer
    versions = answer.result.get("supportedVersions")
    if isinstance(versions, list) and MODERN in versions:
        return answer.result
    return answer


def initialize(channel: RpcChannel) -> Exchange[Mapping[str, Any] | RpcReply]:
    """The ``initialize`` result (and ``notifications/initialized``), or the failed reply;
    a stateful server's session is the one issued with this answer (see
    :func:`~longcall.adapters.mcp.rpc.open_session`)."""
    return (yield from open_session(channel))


def session_of(mapping: Negotiated) -> dict[str, Any] | None:
    """What to keep of a stateful server's session so another process of this caller
    resumes it (the server binds its tasks to it): None when the server issued none."""
    channel = mapping.channel
    if channel.session_id is None or channel.initialized is None:
        return None
    return {
        "session_id": channel.session_id,
        "version": channel.dialect.version,
        "initialized": channel.initialized,
        "tasks": isinstance(mapping, LegacyMapping),
    }


def resumed(
    url: str,
    session: Mapping[str, Any],
    *,
    prefer: Preference | None = None,
    long_call: bool = False,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> Negotiated | None:
    """The mapping of a session this caller already holds at ``url``, without a new
    ``initialize`` (which would open another session, blind to the first one's tasks);
    None when the kept session does not fit what is asked for."""
    session_id, version = session.get("session_id"), session.get("version")
    initialized = session.get("initialized")
    if not isinstance(session_id, str) or not isinstance(initialized, dict):
        return None
    if version not in (LEGACY, *OLDER_VERSIONS):
        return None
    tasks = session.get("tasks") is True
    want_sync = prefer is not None and (prefer == "sync" or prefer.endswith("/sync"))
    if prefer is not None and prefer.partition("/")[0] not in (str(version), "sync"):
        return None
    channel = RpcChannel(dialect_of(str(version)))
    channel.session_id = session_id
    channel.initialized = dict(initialized)
    if tasks and not want_sync:
        return LegacyMapping(url, initialized=initialized, channel=channel)
    return SyncMapping(url, channel=channel, timeout_s=timeout_s, long_call=long_call)


def offers_modern_tasks(discovered: Mapping[str, Any]) -> bool:
    capabilities = discovered.get("capabilities")
    extensions = capabilities.get("extensions") if isinstance(capabilities, Mapping) else None
    return isinstance(extensions, Mapping) and isinstance(extensions.get(TASKS_EXTENSION), Mapping)


def offers_legacy_tasks(initialized: Mapping[str, Any]) -> bool:
    if initialized.get("protocolVersion") != LEGACY:
        return False
    capabilities = initialized.get("capabilities")
    tasks = capabilities.get("tasks") if isinstance(capabilities, Mapping) else None
    requests = tasks.get("requests") if isinstance(tasks, Mapping) else None
    tools = requests.get("tools") if isinstance(requests, Mapping) else None
    return isinstance(tools, Mapping) and "call" in tools


def supported_versions(reply: Any) -> list[str] | None:
    """The versions a -32022 (UnsupportedProtocolVersion) answer lists, if it does."""
    if isinstance(reply, TransportFailure) or not hasattr(reply, "error"):
        return None
    error = reply.error or {}
    data = error.get("data")
    if error.get("code") != -32022 or not isinstance(data, Mapping):
        return None
    listed = data.get("supported")
    return [str(v) for v in listed] if isinstance(listed, list) else None


def negotiate(
    url: str,
    *,
    prefer: Preference | None = None,
    long_call: bool = False,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> Exchange[Negotiated]:
    """Negotiate with the server at ``url`` and return the mapping to use (X1).

    ``prefer`` tries that protocol first (``"sync"`` skips task negotiation);
    ``long_call`` makes the synchronous fallback refuse at ``bind`` rather than run a
    long call under a request timeout. Raises :class:`NegotiationFailed`.
    """
    channel = RpcChannel(Dialect())
    want_sync = prefer is not None and (prefer == "sync" or prefer.endswith("/sync"))
    if want_sync and prefer is not None and prefer.partition("/")[0] == LEGACY:
        legacy = yield from initialize(channel)
        if not isinstance(legacy, Mapping):
            raise _failed(url, legacy, None, LEGACY)
        return SyncMapping(url, channel=channel, timeout_s=timeout_s, long_call=long_call)
    discovered: Mapping[str, Any] | RpcReply | None = None
    initialized: Mapping[str, Any] | RpcReply | None = None
    if prefer != LEGACY:
        discovered = yield from discover(channel)
        if MODERN in (supported_versions(discovered) or ()):
            # Refused with -32022 although the server lists our version: ask once more
            # (SEP-2575: a client retries with a supported version).
            discovered = yield from discover(channel)
        if isinstance(discovered, Mapping):
            if not want_sync and offers_modern_tasks(discovered):
                return ModernMapping(url, discovered=discovered)
            channel.dialect = ModernDialect()
            return SyncMapping(url, channel=channel, timeout_s=timeout_s, long_call=long_call)
        if _unreachable(discovered):
            raise _failed(url, discovered, None, MODERN)
        supported = supported_versions(discovered)
        if supported is not None and LEGACY not in supported and MODERN not in supported:
            raise NegotiationFailed(
                f"{url} supports only MCP versions {', '.join(supported)}; longcall speaks"
                f" {MODERN} and {LEGACY}"
            )
    initialized = yield from initialize(channel)
    if isinstance(initialized, Mapping):
        if not want_sync and offers_legacy_tasks(initialized):
            return LegacyMapping(url, initialized=initialized, channel=channel)
        return SyncMapping(url, channel=channel, timeout_s=timeout_s, long_call=long_call)
    if prefer == LEGACY:
        discovered = yield from discover(channel)
        if isinstance(discovered, Mapping) and offers_modern_tasks(discovered):
            return ModernMapping(url, discovered=discovered)
    raise _failed(url, discovered, initialized, None)


def _unreachable(reply: Any) -> bool:
    return isinstance(reply, TransportFailure) and reply.kind is FailureKind.CONNECT_FAILED


def _failed(url: str, discovered: Any, initialized: Any, only: str | None) -> NegotiationFailed:
    failures = [r for r in (discovered, initialized) if isinstance(r, TransportFailure)]
    unauthorized = bool(failures) and all(f.kind is FailureKind.UNAUTHORIZED for f in failures)
    return NegotiationFailed(
        _unanswered(url, discovered, initialized, only), unauthorized=unauthorized
    )


def _unanswered(url: str, discovered: Any, initialized: Any, only: str | None) -> str:
    """Why negotiation failed, in words a person can act on."""
    failures = [r for r in (discovered, initialized) if isinstance(r, TransportFailure)]
    if failures and all(f.kind is FailureKind.CONNECT_FAILED for f in failures):
        return f"cannot connect to {url}: {failures[0].detail}"
    if failures and all(f.kind is FailureKind.UNAUTHORIZED for f in failures):
        return f"{url} refused the credentials (HTTP 401): configure a token for this server"
    details = "; ".join(_detail(r) for r in (discovered, initialized) if r is not None)
    asked = only or f"server/discover ({MODERN}) nor initialize ({LEGACY})"
    return f"{url} did not answer {asked} usably: {details}"


def _detail(reply: Any) -> str:
    if isinstance(reply, TransportFailure):
        return reply.detail
    error = getattr(reply, "error", None) or {}
    if error:
        return f"JSON-RPC {error.get('code')}: {error.get('message')}"
    return "an answer without the expected result"


__all__ = [
    "Negotiated",
    "Preference",
    "discover",
    "initialize",
    "negotiate",
    "offers_legacy_tasks",
    "offers_modern_tasks",
    "resumed",
    "session_of",
]
