"""The result kind an operator's outcome holds, read the way each protocol's fetch reads
a result.

Owns: turning (protocol, terminal status, result bytes) into a result kind, for an
operator's resolution (``Client.reconcile``, ``longcall ops reconcile``, the simulated
operator). The engine's fetch classifies a result in its protocol's mapping; an
operator's result must be classified by the same rules, or the same bytes are accepted
as a value when an operator supplied them and as a tool error when the engine fetched
them. Must not: perform I/O.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from longcall.adapters.aip151 import mapping as aip151
from longcall.adapters.mcp import results as mcp
from longcall.adapters.mcp.rpc import LEGACY, MODERN
from longcall.core.record import KINDS_OF_TERMINAL, ResultKind, ServerStatus

_READERS: dict[str, Callable[[ServerStatus, Any], ResultKind | None]] = {
    MODERN: mcp.kind_of_result,
    LEGACY: mcp.kind_of_result,
    aip151.PROTOCOL: aip151.kind_of_result,
}
"""Each protocol whose results can say more than their status does. An Apify run's
status alone decides (succeeded: a value; failed or timed out: a tool error)."""


def result_kind_of(protocol: str, status: ServerStatus, payload: bytes) -> ResultKind:
    """The kind of the outcome ``payload`` with terminal ``status`` over ``protocol``:
    what the protocol's fetch would give the same bytes, else the kind the status
    implies (a protocol we cannot read, bytes that are not JSON)."""
    reader = _READERS.get(protocol)
    kind = None
    if reader is not None:
        try:
            kind = reader(status, json.loads(payload))
        except ValueError:
            kind = None
    return kind or KINDS_OF_TERMINAL[status][0]
