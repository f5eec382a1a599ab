"""Routing only: which mapping speaks for one executor process at one simulated server.

Owns :class:`Route` — per (executor process, server), what the real executor would hold
there: the pure mapping of the server's protocol, set up the way the real shells set it
up (MCP: the real negotiation :func:`~longcall.adapters.mcp.negotiate.negotiate`; the
Apify-style mapping: its ``connect``; AIP-151: nothing to negotiate), then the
mapping's own ``bind`` of the tool, all run against the simulated server as exchanges,
without network faults — and :func:`exchange_for`, which turns one engine
:class:`~longcall.runtime.engine.Action` into that mapping's exchange, as the executor
turns it into the adapter call.

Must not: map a reply, classify a failure or decide anything: what a reply means is
the mapping's, what happens next is the engine's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from longcall.adapters.aip151.mapping import Aip151Mapping
from longcall.adapters.apify.mapping import ApifyMapping, Clock
from longcall.adapters.base import Outcome, ToolBinding
from longcall.adapters.exchange import Exchange, HttpRequest, Reply, run_exchange
from longcall.adapters.mcp.legacy import LegacyMapping
from longcall.adapters.mcp.modern import ModernMapping
from longcall.adapters.mcp.negotiate import negotiate
from longcall.core.commands import (
    FetchResult,
    LookupSubmission,
    Poll,
    SendCancel,
    SendInputResponse,
    SendSubmit,
)
from longcall.runtime.engine import Action, Engine
from longcall.sim.aip151 import Aip151Server
from longcall.sim.apify import ApifyServer
from longcall.sim.mcp import TOOL
from longcall.sim.server import SimServer

Mapping = ModernMapping | LegacyMapping | Aip151Mapping | ApifyMapping
Link = Callable[[HttpRequest], Reply]
"""Answers one request at once, without the network (the link negotiation uses)."""


@dataclasses.dataclass(slots=True, kw_only=True)
class Route:
    """What one executor process holds for one server: a mapping and the tool's binding."""

    server: str
    mapping: Mapping
    binding: ToolBinding


def connect(server: SimServer, link: Link, *, clock: Clock, abort_gracefully: bool) -> Route:
    """Set the server's mapping up and bind its tool, as the executor does first (X1).

    ``clock`` is the executor's (the Apify-style mapping bounds its long polls by the
    operation's deadline); ``abort_gracefully`` is the Apify-style client's setting."""
    mapping: Mapping
    if isinstance(server, Aip151Server):
        mapping = Aip151Mapping(server.name)
    elif isinstance(server, ApifyServer):
        mapping = ApifyMapping(server.name, clock=clock, abort_gracefully=abort_gracefully)
        run_exchange(mapping.connect(), link)
    else:
        negotiated = run_exchange(negotiate(server.name), link)
        assert isinstance(negotiated, ModernMapping | LegacyMapping), negotiated
        mapping = negotiated
    binding = run_exchange(mapping.bind(TOOL), link)
    return Route(server=server.name, mapping=mapping, binding=binding)


def exchange_for(route: Route, action: Action, engine: Engine) -> Exchange[Outcome | None]:
    """The exchange that carries out ``action`` (the executor's command → call)."""
    mapping = route.mapping
    record = action.record
    match action.command:
        case SendSubmit():
            return mapping.submit(record, engine.request_payload(record.call_node_id))
        case LookupSubmission():
            return mapping.lookup(record)
        case Poll():
            return mapping.poll(record)
        case FetchResult():
            return mapping.fetch_result(record)
        case SendCancel():
            return mapping.cancel(record)
        case SendInputResponse(keys=keys):
            return mapping.send_input(record, engine.input_answers(record, keys))
    raise AssertionError(f"no exchange for {action.kind}")


__all__ = ["Route", "connect", "exchange_for"]
