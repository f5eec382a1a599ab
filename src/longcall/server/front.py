"""The one front door of every HTTP endpoint the server mounts (``/mcp``, ``/v1``, ``/apify/mcp``).

Owns everything a request must pass before any protocol code sees it: DNS-rebinding
protection (``Origin`` / ``Host``, SPEC I1 and the 2025-11-25 Streamable HTTP rules),
authentication to a principal (S5), media types (``Content-Type``, ``Accept``), the body
cap, recursion-safe and surrogate-safe JSON parsing with finite numbers only, the
JSON-RPC message shape (no batches, no ``id: null``), and the last-resort translation
of an unexpected exception into the endpoint's own error shape (never a plain-text
HTTP 500). Must not: know a protocol version, a tool or the store.

Each refusal is a :class:`Refused` carrying the HTTP status, a JSON-RPC code and a
message; ``/mcp`` and ``/apify/mcp`` render it as a JSON-RPC error, ``/v1`` as an
AIP-193 error (see :mod:`longcall.server.aip151`).
"""

from __future__ import annotations

import asyncio
import inspect
import ipaddress
import json
import logging
import math
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response

from longcall.server.auth import Authenticator
from longcall.server.errors import (
    INTERNAL_ERROR,
    INVALID_REQUEST,
    PARSE_ERROR,
    Refused,
    StoreUnavailable,
)
from longcall.server.model import Principal
from longcall.server.options import ServerOptions
from longcall.server.wire import error_response

logger = logging.getLogger(__name__)

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1", "[::1]"})
JSON_MEDIA_TYPE = "application/json"
EVENT_STREAM = "text/event-stream"
REASON_TOO_MANY_OPEN_TASKS = "too_many_open_tasks"
REASON_STORE_UNAVAILABLE = "store_unavailable"


def refusal_response(refusal: Refused) -> JSONResponse:
    """A refusal at the door as a JSON-RPC error response, with its HTTP status."""
    error = {"code": refusal.code, "message": refusal.message}
    return JSONResponse(
        error_response(refusal.request_id, error),
        status_code=refusal.status,
        headers=refusal.headers,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class Admitted:
    """A request that passed the door: lower-cased headers and who is calling."""

    headers: Mapping[str, str]
    principal: Principal


# ---- origin and host (DNS rebinding) --------------------------------------------------------


def _hostname(authority: str) -> str:
    """The host part of ``host[:port]`` (IPv6 literals keep their brackets off)."""
    text = authority.strip().lower()
    if text.startswith("["):
        return text[1 : text.find("]")] if "]" in text else text
    if text.count(":") == 1:
        return text.partition(":")[0]
    return text


def _is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _origin_allowed(origin: str, options: ServerOptions) -> bool:
    if origin in options.allowed_origins:
        return True
    parts = urlsplit(origin)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return False
    return _is_loopback(parts.hostname.lower())


def refuse_foreign_origin(request: Request, options: ServerOptions) -> None:
    """403 for a present ``Origin`` that is not allowed; 403 for a foreign ``Host`` on loopback.

    Streamable HTTP (2025-11-25): a server MUST validate ``Origin`` and answer 403 to an
    invalid one. Loopback origins are allowed by default, others only when configured.
    A connection that arrived on a loopback interface must also name a loopback host (or
    a configured one): that is what stops a rebound DNS name from reaching a local server.
    """
    origin = request.headers.get("origin")
    if origin is not None and not _origin_allowed(origin, options):
        raise Refused(403, INVALID_REQUEST, f"Forbidden: origin {origin!r} is not allowed")
    server = request.scope.get("server")
    local = server[0] if isinstance(server, tuple | list) and server else None
    if not isinstance(local, str) or not _is_loopback(local.lower()):
        return
    host = _hostname(request.headers.get("host", ""))
    if host and not _is_loopback(host) and host not in options.allowed_hosts:
        raise Refused(403, INVALID_REQUEST, f"Forbidden: host {host!r} is not allowed")


async def admit(request: Request, options: ServerOptions, authenticate: Authenticator) -> Admitted:
    """Origin, then authentication; the caller's principal or a refusal (403 / 401)."""
    refuse_foreign_origin(request, options)
    headers = {key.lower(): value for key, value in request.headers.items()}
    found = authenticate(headers)
    principal = await found if inspect.isawaitable(found) else found
    if principal is None:
        challenge = "Bearer"
        if options.resource_metadata_url is not None:
            challenge += f' resource_metadata="{options.resource_metadata_url}"'
        raise Refused(401, INVALID_REQUEST, "Unauthorized", headers={"www-authenticate": challenge})
    return Admitted(headers=headers, principal=principal)


# ---- media types and the body ----------------------------------------------------------------


def _media_types(header: str) -> list[str]:
    return [part.split(";", 1)[0].strip().lower() for part in header.split(",") if part.strip()]


def accepts(headers: Mapping[str, str], media_type: str) -> bool:
    """Whether the ``Accept`` header admits ``media_type`` (wildcards included)."""
    kind = media_type.split("/", 1)[0]
    wanted = {media_type, f"{kind}/*", "*/*"}
    return any(item in wanted for item in _media_types(headers.get("accept", "")))


def require_json_body(headers: Mapping[str, str]) -> None:
    """415 unless the body is declared ``application/json``."""
    declared = _media_types(headers.get("content-type", ""))
    if declared[:1] != [JSON_MEDIA_TYPE]:
        raise Refused(
            415, INVALID_REQUEST, "Unsupported Media Type: Content-Type must be application/json"
        )


def require_json_accepted(headers: Mapping[str, str]) -> None:
    """406 unless the client accepts ``application/json`` (a missing Accept accepts nothing)."""
    if not accepts(headers, JSON_MEDIA_TYPE):
        raise Refused(
            406,
            INVALID_REQUEST,
            "Not Acceptable: the Accept header must admit application/json"
            " (and text/event-stream for streamed answers)",
        )


async def read_body(request: Request, options: ServerOptions) -> bytes:
    """The whole body within the size cap (413) and the read deadline (408, slow senders)."""
    try:
        async with asyncio.timeout(options.body_read_timeout_s):
            return await _read_capped(request, options.max_body_bytes)
    except TimeoutError:
        raise Refused(
            408, INVALID_REQUEST, f"request body not received within {options.body_read_timeout_s}s"
        ) from None
    except ClientDisconnect:
        # A client that goes away mid-request (a process that exits with a request on
        # the wire) is its own business, not the server's internal error: refused and
        # counted like any incomplete request; nobody is left to read the answer.
        raise Refused(400, INVALID_REQUEST, "the request body ended early") from None


async def _read_capped(request: Request, limit: int) -> bytes:
    """The whole body, or 413 as soon as it passes ``limit`` bytes (never buffered past it)."""
    declared = request.headers.get("content-length")
    digits = declared is not None and declared.isascii() and declared.isdigit()
    if digits and declared is not None and (len(declared) > 12 or int(declared) > limit):
        raise Refused(413, INVALID_REQUEST, f"request body over {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise Refused(413, INVALID_REQUEST, f"request body over {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


# ---- JSON --------------------------------------------------------------------------------------


class _NotFinite(ValueError):
    pass


def _reject_constant(name: str) -> Any:
    raise _NotFinite(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NotFinite(f"number {text[:40]} is out of range")
    return value


def parse_json(body: bytes, *, max_depth: int) -> Any:
    """Strict JSON: UTF-8, finite numbers, nesting at most ``max_depth``, no lone surrogates.

    Any violation is a parse error (-32700, HTTP 400); nothing deeper than the limit or
    unencodable ever reaches a validator, the store or a response encoder.
    """
    try:
        value = json.loads(body, parse_constant=_reject_constant, parse_float=_finite_float)
    except RecursionError:
        raise Refused(
            400, PARSE_ERROR, f"Parse error: JSON nested deeper than {max_depth} levels"
        ) from None
    except _NotFinite as exc:
        raise Refused(400, PARSE_ERROR, f"Parse error: {exc}") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, int digit limit
        raise Refused(400, PARSE_ERROR, f"Parse error: {str(exc)[:200]}") from None
    check_text = b"\\u" in body
    # Nesting is never deeper than the brackets the body holds (strings included): a
    # body with no more of them than the limit, and no escape that could hide a lone
    # surrogate, has nothing for the walk to find — most requests, and it is counted in C.
    if check_text or body.count(b"[") + body.count(b"{") > max_depth:
        _check_tree(value, max_depth=max_depth, check_text=check_text)
    return value


def _check_tree(value: Any, *, max_depth: int, check_text: bool) -> None:
    """Iterative walk (no recursion to exhaust): depth, and text that UTF-8 can encode."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth > max_depth:
                raise Refused(
                    400, PARSE_ERROR, f"Parse error: JSON nested deeper than {max_depth} levels"
                )
            if isinstance(item, dict):
                if check_text:
                    for key in item:
                        _encodable(key)
                stack.extend((child, depth + 1) for child in item.values())
            else:
                stack.extend((child, depth + 1) for child in item)
        elif check_text and isinstance(item, str):
            _encodable(item)


def _encodable(text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise Refused(
            400, PARSE_ERROR, "Parse error: a string holds a lone UTF-16 surrogate"
        ) from None


# ---- JSON-RPC --------------------------------------------------------------------------------


def _valid_id(value: Any) -> bool:
    return isinstance(value, str | int) and not isinstance(value, bool)


def jsonrpc_message(message: Any) -> dict[str, Any]:
    """One JSON-RPC 2.0 request, notification or response; -32600 for anything else.

    MCP forbids ``id: null`` on requests (and JSON-RPC reserves it for errors about
    unreadable ids), so a request carrying it is refused rather than answered.
    """
    if isinstance(message, list):
        raise Refused(400, INVALID_REQUEST, "JSON-RPC batches are not supported")
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        raise Refused(400, INVALID_REQUEST, "not a JSON-RPC 2.0 message")
    request_id = message.get("id")
    echo = request_id if _valid_id(request_id) else None
    if "id" in message and not _valid_id(request_id):
        raise Refused(
            400, INVALID_REQUEST, "id must be a string or an integer (not null)", request_id=echo
        )
    if "method" in message:
        if not isinstance(message["method"], str):
            raise Refused(400, INVALID_REQUEST, "method must be a string", request_id=echo)
        return message
    if "result" not in message and "error" not in message:
        raise Refused(400, INVALID_REQUEST, "neither a request nor a response", request_id=echo)
    return message


async def read_jsonrpc(request: Request, admitted: Admitted, options: ServerOptions) -> Any:
    """Media types, the capped body and the strict parse of one JSON-RPC POST."""
    require_json_body(admitted.headers)
    require_json_accepted(admitted.headers)
    body = await read_body(request, options)
    return jsonrpc_message(parse_json(body, max_depth=options.max_json_depth))


STORE_RETRY_AFTER_S = 1


def store_unavailable(request_id: str | int | None, exc: StoreUnavailable) -> JSONResponse:
    """A busy or lost store: HTTP 503 with ``Retry-After``, the request may be sent again."""
    error = {"code": INTERNAL_ERROR, "message": f"Task store unavailable: {exc}"}
    return JSONResponse(
        error_response(request_id, error),
        status_code=503,
        headers={"retry-after": str(STORE_RETRY_AFTER_S)},
    )


Handler = Callable[[Request], Awaitable[Response]]


def guarded_jsonrpc(handler: Handler, refused: Callable[[str], None] | None = None) -> Handler:
    """Refusals as JSON-RPC errors; an unexpected exception as -32603, logged, never plain text.

    ``refused(reason)`` is told of each refusal (the server's metrics count them).
    """

    async def endpoint(request: Request) -> Response:
        try:
            return await handler(request)
        except Refused as exc:
            if refused is not None:
                refused(exc.reason)
            return refusal_response(exc)
        except StoreUnavailable as exc:
            if refused is not None:
                refused(REASON_STORE_UNAVAILABLE)
            return store_unavailable(None, exc)
        except Exception:
            logger.exception("internal error on %s %s", request.method, request.url.path)
            error = {"code": INTERNAL_ERROR, "message": "Internal error"}
            return JSONResponse(error_response(None, error), status_code=500)

    return endpoint
