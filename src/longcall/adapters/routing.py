"""Which adapter speaks to a URL: AIP-151, Apify-style early return, or MCP (SPEC P3, P4, O1).

Owns: :func:`connect_any`, the one entry the runtime's adapter factory calls with a
server URL and an optional protocol, and :func:`protocol_of_url`, the discovery by
path (``…/v1…`` → AIP-151, ``…/apify/mcp`` → Apify-style, anything else → MCP, whose
version is negotiated by :func:`longcall.adapters.negotiate.connect`).

Must not: negotiate MCP itself (``negotiate`` does), import ``ledger``/``runtime``/
``server``, or guess: an explicit protocol always wins over the path.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlsplit

from longcall.adapters.base import Adapter, AdapterError

AIP151 = "aip-151"
APIFY = "apify"
MCP = "mcp"
ALIASES = {
    "aip-151": AIP151,
    "aip151": AIP151,
    "google": AIP151,
    "apify": APIFY,
    "apify-early-return": APIFY,
    "mcp": MCP,
}
"""``--protocol`` spellings; MCP version names (2026-07-28, 2025-11-25) pass through."""


def protocol_of_url(url: str) -> str:
    """The protocol family a URL's path names: ``aip-151``, ``apify`` or ``mcp``."""
    path = urlsplit(url).path.rstrip("/")
    if path.endswith("/apify/mcp"):
        return APIFY
    segments = path.split("/")
    if "v1" in segments or any(s.startswith("v1:") for s in segments):
        return AIP151
    return MCP


async def connect_any(
    url: str, prefer: str | None = None, headers: Mapping[str, str] | None = None
) -> Adapter:
    """A connected adapter for ``url``: ``prefer`` (a family or an MCP version) if given,
    else the family its path names. MCP goes through ``negotiate.connect``. ``headers``
    (credentials, C1) go on every request the adapter sends."""
    family = ALIASES.get(prefer.lower()) if prefer else None
    if prefer and family is None and not prefer[:4].isdigit():
        raise AdapterError(
            f"unknown protocol {prefer!r}: use aip-151, apify, mcp or an MCP version"
        )
    if family is None:
        family = protocol_of_url(url) if not prefer else MCP
    if family == AIP151:
        from longcall.adapters.aip151.client import connect as connect_aip151

        return await connect_aip151(url, headers=headers)
    if family == APIFY:
        from longcall.adapters.apify.client import connect as connect_apify

        return await connect_apify(url, headers=headers)
    from longcall.adapters.negotiate import connect

    mcp_version = None if prefer is None or prefer.lower() == MCP else prefer
    adapter_: Adapter = await connect(url, prefer=mcp_version)
    return adapter_
