"""The simulated MCP servers answer the real mappings on the wire (SPEC P1, P2, F1).

Each test runs a real exchange of :mod:`longcall.adapters.mcp` against a simulated
server, with the simulator's driver step (:func:`longcall.sim.world.received`) between
them, and checks the event the real mapping makes of the server's wire reply.
"""

from __future__ import annotations

import random
from typing import Any

from longcall.adapters.exchange import HttpRequest, run_exchange
from longcall.adapters.mcp.legacy import LegacyMapping
from longcall.adapters.mcp.modern import ModernMapping
from longcall.adapters.mcp.negotiate import negotiate
from longcall.core import OperationRecord, ServerStatus, new_operation
from longcall.core import events as e
from longcall.core.keys import digest_json
from longcall.core.record import evolve
from longcall.core.retry import FailureKind
from longcall.sim.mcp import TOOL, McpServer, Wire
from longcall.sim.mutants import CI_PERMUTATIONS, Mutant, catch
from longcall.sim.server import LEGACY, MODERN, Hop, Served
from longcall.sim.truth import Plan, ServerFaults
from longcall.sim.world import received

ARGUMENTS = {"node": "n0"}


def _server(protocol: str, **faults: float) -> McpServer:
    server = McpServer(
        "s0",
        protocol=protocol,
        wire=Wire(input_interval_s=9.0),
        lookup=True,
        idempotent=False,
        poll_interval_s=3.0,
        ttl_s=3600.0,
        rng=random.Random(7),
        faults=ServerFaults(**faults),
        count=lambda fault: None,
    )
    plan = Plan(duration_s=20.0, outcome="value", input_offsets_s=(2.0,))
    server.plans[digest_json(ARGUMENTS)] = plan
    return server


def _serve(server: McpServer, now: float, action: str = "Poll") -> Any:
    def serve(request: HttpRequest) -> Any:
        hop = Hop(client=0, action=action, node="n0", sent_at=now)
        served = server.serve(request, now, hop)
        assert isinstance(served, Served), served
        return received(served)

    return serve


def _connect(server: McpServer) -> ModernMapping | LegacyMapping:
    mapping = run_exchange(negotiate(server.name), _serve(server, 0.0, "negotiate"))
    assert isinstance(mapping, ModernMapping | LegacyMapping)
    return mapping


def _record(server: McpServer, mapping: ModernMapping | LegacyMapping) -> OperationRecord:
    binding = run_exchange(mapping.bind(TOOL), _serve(server, 0.0, "negotiate"))
    return new_operation(
        call_node_id="n0",
        request_digest="sha256:r",
        tool_name=TOOL,
        tool_descriptor_digest=binding.descriptor_digest,
        principal="p",
        server="s0",
        protocol=binding.protocol,
        adapter_version=binding.adapter_version,
        now=0.0,
        submission_lookup=binding.submission_lookup,
    ).record


def _created(protocol: str, **faults: float) -> tuple[McpServer, Any, OperationRecord]:
    server = _server(protocol, **faults)
    mapping = _connect(server)
    record = _record(server, mapping)
    outcome = run_exchange(mapping.submit(record, ARGUMENTS), _serve(server, 0.0, "SendSubmit"))
    assert isinstance(outcome.event, e.SubmitAcknowledged), outcome
    assert outcome.event.poll_interval_s == 3.0
    return server, mapping, evolve(record, operation_id=outcome.event.operation_id)


def test_negotiation_picks_each_versions_real_mapping() -> None:
    """server/discover finds 2026-07-28; a 2025-11-25 server is found by initialize."""
    assert isinstance(_connect(_server(MODERN)), ModernMapping)
    legacy = _connect(_server(LEGACY))
    assert isinstance(legacy, LegacyMapping)
    assert legacy.submission_lookup


def test_2026_07_28_input_request_carries_the_changed_interval() -> None:
    """tasks/get of an input_required task: inputRequests and the new pollIntervalMs
    reach the event (X3: the interval rides on every status)."""
    server, mapping, record = _created(MODERN)
    outcome = run_exchange(mapping.poll(record), _serve(server, 5.0))
    assert isinstance(outcome.event, e.InputRequestObserved)
    assert outcome.event.poll_interval_s == 9.0
    assert outcome.event.keys == ("s0-e1-0",)


def test_2025_11_25_side_channel_asks_and_takes_the_answer() -> None:
    """input_required → tasks/result event stream with elicitation/create → keys; the
    posted JSON-RPC response answers the round; the task works on."""
    server, mapping, record = _created(LEGACY)
    outcome = run_exchange(mapping.poll(record), _serve(server, 5.0))
    assert isinstance(outcome.event, e.InputRequestObserved)
    assert outcome.event.keys == ("s0-e1-0",)
    assert outcome.event.poll_interval_s == 9.0
    answer = {"action": "accept", "content": {"approved": True, "for": "s0-e1-0"}}
    delivered = run_exchange(
        mapping.send_input(record, {"s0-e1-0": answer}), _serve(server, 6.0, "SendInputResponse")
    )
    assert delivered is None
    working = run_exchange(mapping.poll(record), _serve(server, 7.0))
    assert isinstance(working.event, e.WorkingObserved)


def test_a_retry_after_header_reaches_the_event() -> None:
    """429 with Retry-After: a rate-limited failure carrying the server's wait (X9)."""
    server, mapping, record = _created(MODERN, rate_limited=1.0)
    outcome = run_exchange(mapping.poll(record), _serve(server, 1.0))
    assert isinstance(outcome.event, e.RequestFailed)
    assert outcome.event.failure is FailureKind.RATE_LIMITED


def test_a_request_refused_unread_is_never_the_outcome() -> None:
    """An id: null error on tasks/result is a transport failure for the real mapping."""
    server, mapping, record = _created(LEGACY)
    record = evolve(record, server_status=ServerStatus.COMPLETED)
    server.faults.refused_unread = 1.0
    outcome = run_exchange(mapping.fetch_result(record), _serve(server, 30.0, "FetchResult"))
    assert isinstance(outcome.event, e.RequestFailed)
    assert outcome.event.failure is FailureKind.BAD_REQUEST


def test_an_event_stream_cut_before_the_answer_is_no_result() -> None:
    """A streamed tasks/result that ends early is a failed fetch, never a result (X6)."""
    server, mapping, record = _created(LEGACY)
    server.streams = True
    record = evolve(record, server_status=ServerStatus.COMPLETED)
    task = server.tasks[0]
    task.rounds[0].answered_at = 2.0

    def cut(request: HttpRequest) -> Any:
        served = server.serve(
            request, 40.0, Hop(client=0, action="FetchResult", node="n0", sent_at=40.0)
        )
        assert isinstance(served, Served)
        if request.method == "GET":
            return served.reply  # the resume the caller tries: this server keeps no history
        assert served.stream is not None
        return received(served, cut=0.5)

    outcome = run_exchange(mapping.fetch_result(record), cut)
    assert isinstance(outcome.event, e.ResultFetchFailed)


def _interval_dropped(original: Any) -> Any:
    """2026-07-28: the input request event without the reply's pollIntervalMs."""

    def input_requested(task: Any, raw: str, message: str | None, interval: Any) -> Any:
        return original(task, raw, message, None)

    return input_requested


def _side_channel_dropped(original: Any) -> Any:
    """2025-11-25: the side channel's event without the poll's pollInterval."""

    def side_channel(self: Any, task_id: str, message: str | None, interval: Any) -> Any:
        return original(self, task_id, message, None)

    return side_channel


INTERVAL_DROPPED_AT_INPUT = Mutant(
    name="input-interval-dropped",
    bug="the mappings drop pollIntervalMs on an input_required reply (the old drift)",
    patches=(
        ("longcall.adapters.mcp.modern", "_input_requested", _interval_dropped),
        ("longcall.adapters.mcp.legacy", "LegacyMapping._side_channel", _side_channel_dropped),
    ),
)


def test_the_poll_interval_gate_catches_an_interval_dropped_after_input() -> None:
    """Regression for the drift the real mappings had: an input_required reply's
    interval dropped, so the polls after the answer go at the older, shorter interval.
    The simulated servers change their interval once input is asked; the poll-interval
    gate, measured at the servers, catches the mapping that drops it."""
    found = catch(INTERVAL_DROPPED_AT_INPUT, permutations=CI_PERMUTATIONS)
    assert found.caught, found
    assert found.check == "poll interval"
