"""Routing only: which mapping speaks for one executor process at one simulated server.

Owns :class:`Route` — per (executor process, server), what the real executor would hold
there: the pure mapping chosen by the real negotiation (:func:`~longcall.adapters.mcp.
negotiate.negotiate`, then the mapping's own ``bind`` of the tool, both run against the
simulated server as exchanges, without network faults) — and :func:`exchange_for`, which
turns one engine :class:`~longcall.runtime.engine.Action` into that mapping's exchange,
as the executor turns it into the adapter call.

AIP-151 and Apify-style servers are routed to the interim sim adapters
(:mod:`longcall.sim.interim`) until those protocols' mappings are exchanges.

Must not: map a reply, classify a failure or decide anything: what a reply means is
the mapping's, what happens next is the engine's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Generator
from typing import Any

from longcall.adapters.base import Outcome, ToolBinding
from longcall.adapters.exchange import HttpRequest, Reply, run_exchange
from longcall.adapters.mcp.legacy import LegacyMapping
from longcall.adapters.mcp.modern import ModernMapping
from longcall.adapters.mcp.negotiate import negotiate
from longcall.core import commands as c
from longcall.core.keys import digest_bytes
from longcall.runtime.engine import Action, Engine
from longcall.sim.interim import SimAdapter, interim_adapter
from longcall.sim.mcp import TOOL, McpServer
from longcall.sim.server import AIP151, APIFY, SimServer

Mapping = ModernMapping | LegacyMapping
Served = Callable[[HttpRequest], Reply]
"""Answers one request at once, without the network (negotiation's link)."""


@dataclasses.dataclass(slots=True, kw_only=True)
class Route:
    """What one executor process holds for one server: a mapping and the tool's binding."""

    server: str
    binding: ToolBinding
    mapping: Mapping | None = None
    interim: SimAdapter | None = None


def connect(server: SimServer, serve: Served) -> Route:
    """Negotiate with ``server`` (X1) and bind its tool, as the executor does first."""
    if isinstance(server, McpServer):
        mapping = run_exchange(negotiate(server.name), serve)
        assert isinstance(mapping, ModernMapping | LegacyMapping), mapping
        binding = run_exchange(mapping.bind(TOOL), serve)
        return Route(server=server.name, binding=binding, mapping=mapping)
    # P3: AIP-155 proves a start by requestId, so a lost start is looked up. P4: no
    # lookup by key; a resend is safe when the server advertises the submission-key
    # extension (``lookup`` here) or the tool is idempotent.
    aip = server.protocol == AIP151
    binding = ToolBinding(
        server=server.name,
        tool_name=TOOL,
        protocol=AIP151 if aip else APIFY,
        adapter_version="interim",
        descriptor_digest=digest_bytes(TOOL.encode()),
        task_support="required",
        idempotent=server.idempotent or (not aip and server.lookup_offered),
        submission_lookup=aip,
    )
    return Route(server=server.name, binding=binding, interim=interim_adapter(server.protocol))


def exchange_for(
    route: Route, action: Action, engine: Engine, *, request_id: str, now: float
) -> Generator[Any, Any, Outcome | None]:
    """The exchange that carries out ``action`` (``request_id`` names its business
    request for the interim adapters)."""
    if route.interim is not None:
        return route.interim.exchange(action, request_id, now)
    mapping = route.mapping
    assert mapping is not None
    record = action.record
    match action.command:
        case c.SendSubmit():
            return mapping.submit(record, engine.request_payload(record.call_node_id))
        case c.LookupSubmission():
            return mapping.lookup(record)
        case c.Poll():
            return mapping.poll(record)
        case c.FetchResult():
            return mapping.fetch_result(record)
        case c.SendCancel():
            return mapping.cancel(record)
        case c.SendInputResponse(keys=keys):
            return mapping.send_input(record, engine.input_answers(record, keys))
    raise AssertionError(f"no exchange for {action.kind}")


__all__ = ["Route", "connect", "exchange_for"]
