"""The AIP-151 adapter the runtime uses: :class:`Aip151Mapping` run over HTTP.

Owns: :func:`connect` (the driver at the API root, with the caller's headers and
bounds) and :class:`Aip151Adapter`, the thin I/O shell. Must not: read a reply or decide
an event (:mod:`longcall.adapters.aip151.mapping` does), or hold a credential anywhere
but the driver's headers.
"""

from __future__ import annotations

from collections.abc import Mapping

import httpx

from longcall.adapters.aip151.mapping import Aip151Mapping, api_root
from longcall.adapters.base import ProgressSink
from longcall.adapters.exchange import DEFAULT_TIMEOUT_S, LINE_BYTES_MAX, RESPONSE_BYTES_MAX
from longcall.adapters.http import HttpDriver
from longcall.adapters.shell import MappedAdapter


class Aip151Adapter(MappedAdapter):
    """P3 at one server; build it with :func:`connect`."""

    mapping: Aip151Mapping


async def connect(
    url: str,
    headers: Mapping[str, str] | None = None,
    http: httpx.AsyncClient | None = None,
    *,
    auth: httpx.Auth | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    response_bytes_max: int = RESPONSE_BYTES_MAX,
    line_bytes_max: int = LINE_BYTES_MAX,
    progress: ProgressSink | None = None,
) -> Aip151Adapter:
    """The adapter for the AIP-151 server at ``url`` (the API root or any URL under its
    ``/v1``). Nothing is sent until the first request: AIP-151 has no handshake.

    ``headers`` go on every request (credentials, C1: never into the ledger or a
    message); ``http`` lends a client (it is then not closed).
    """
    driver = HttpDriver(
        api_root(url),
        headers=headers,
        auth=auth,
        http=http,
        response_bytes_max=response_bytes_max,
        line_bytes_max=line_bytes_max,
    )
    return Aip151Adapter(Aip151Mapping(url, timeout_s=timeout_s), driver, progress=progress)


__all__ = ["Aip151Adapter", "connect"]
