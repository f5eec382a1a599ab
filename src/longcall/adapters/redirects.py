"""Which HTTP redirects the caller follows, without I/O: same origin, 307/308, a few hops.

Owns: :func:`next_hop`, the decision for one reply — not a redirect (None), the URL to
send the same request to, or a :class:`TransportFailure` of kind ``REDIRECT_REFUSED``
saying what the server asked and why it is not followed. A server mounted at ``/mcp``
by Starlette ``Mount`` answers ``POST /mcp`` with ``307`` to ``/mcp/``; the MCP SDKs'
own clients follow it, and so do we:

* only 307 and 308, which keep the method and the body (RFC 9110 §15.4); 301/302/303
  would turn a POST into a GET and lose the JSON-RPC request;
* only to the same origin — scheme, host and port all equal — so the credentials the
  driver adds (a bearer token, configured headers) never reach another server;
* at most :data:`REDIRECTS_MAX` hops per request.

A refused 307/308 proves the request was not processed (the server answered with a
redirect instead, and only the target would have processed it): ``processed_possible``
is False. A refused 301/302/303 proves nothing of the kind — a 303 (and, by old habit,
301/302) is the ordinary reply *after* a server processed a POST — so
``processed_possible`` is True there.

The URLs in a refusal's message lose their userinfo, query and fragment: an API key
in a query string never reaches a ledger's ``last_error`` or a log.

Must not: perform I/O or send anything (the driver does, :mod:`longcall.adapters.http`).
"""

from __future__ import annotations

from urllib.parse import urljoin, urlsplit

from longcall.adapters.exchange import TransportFailure
from longcall.core.retry import FailureKind

REDIRECTS_MAX = 3
"""Redirect hops followed for one request; the next one is refused."""
FOLLOWED = frozenset({307, 308})
"""Redirects that keep the method and the body."""
REDIRECTS = frozenset({301, 302, 303, 307, 308})
_DEFAULT_PORTS = {"http": 80, "https": 443}


def next_hop(
    url: str, status: int, location: str | None, *, hops: int
) -> str | TransportFailure | None:
    """Where to send the request again after ``status`` from ``url`` (already followed
    ``hops`` times); None when the reply is no redirect to follow or refuse (a 3xx
    without ``Location`` is read as any other status)."""
    if status not in REDIRECTS or not location:
        return None
    target = urljoin(url, location.strip())
    shown_from, shown_to = shown(url), shown(target)
    if status not in FOLLOWED:
        # The server may well have processed the POST before answering 301/302/303.
        return refused(
            f"HTTP {status} redirect from {shown_from} to {shown_to} not followed: only 307"
            " and 308 keep the request's method and body",
            processed_possible=True,
        )
    if origin(target) != origin(url):
        return refused(
            f"HTTP {status} redirect from {shown_from} to {shown_to}, another origin, not"
            " followed: redirects are followed only to the same scheme, host and port"
            " (credentials never leave the configured server); configure the target URL"
            " instead"
        )
    if hops >= REDIRECTS_MAX:
        return refused(
            f"HTTP {status} redirect from {shown_from} to {shown_to} not followed: more"
            f" than {REDIRECTS_MAX} redirects for one request"
        )
    return target


def shown(url: str) -> str:
    """``url`` fit for a message: no userinfo, query or fragment (they may hold secrets)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"  # an IPv6 literal keeps its brackets
    try:
        port = parts.port
    except ValueError:
        port = None
    netloc = host if port is None else f"{host}:{port}"
    return parts._replace(netloc=netloc, query="", fragment="").geturl()


def origin(url: str) -> tuple[str, str, int | None]:
    """``(scheme, host, port)`` with the scheme's default port made explicit."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:
        port = None
    return scheme, (parts.hostname or "").lower(), port or _DEFAULT_PORTS.get(scheme)


def refused(detail: str, *, processed_possible: bool = False) -> TransportFailure:
    return TransportFailure(
        kind=FailureKind.REDIRECT_REFUSED, detail=detail, processed_possible=processed_possible
    )


__all__ = ["FOLLOWED", "REDIRECTS_MAX", "next_hop", "origin", "shown"]
