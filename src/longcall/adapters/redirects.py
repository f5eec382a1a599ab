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

A refused redirect proves the request was not processed (the server answered with a
redirect instead): ``processed_possible`` is False.

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
    if status not in FOLLOWED:
        return refused(
            f"HTTP {status} redirect from {url} to {target} not followed: only 307 and 308"
            " keep the request's method and body"
        )
    if origin(target) != origin(url):
        return refused(
            f"HTTP {status} redirect from {url} to {target}, another origin, not followed:"
            " redirects are followed only to the same scheme, host and port (credentials"
            " never leave the configured server); configure the target URL instead"
        )
    if hops >= REDIRECTS_MAX:
        return refused(
            f"HTTP {status} redirect from {url} to {target} not followed: more than"
            f" {REDIRECTS_MAX} redirects for one request"
        )
    return target


def origin(url: str) -> tuple[str, str, int | None]:
    """``(scheme, host, port)`` with the scheme's default port made explicit."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:
        port = None
    return scheme, (parts.hostname or "").lower(), port or _DEFAULT_PORTS.get(scheme)


def refused(detail: str) -> TransportFailure:
    return TransportFailure(
        kind=FailureKind.REDIRECT_REFUSED, detail=detail, processed_possible=False
    )


__all__ = ["FOLLOWED", "REDIRECTS_MAX", "next_hop", "origin"]
