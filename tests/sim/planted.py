"""Planted bugs for the simulator's own tests (SPEC F2: the checks must be able to fail).

Each bug is planted outside ``core`` and ``runtime``: a ledger subclass or a sim
adapter subclass handed to the world. Nothing here is used by ``longcall sim``.
"""

from __future__ import annotations

import dataclasses

from longcall.adapters.aip151 import request_id_for
from longcall.adapters.base import Outcome
from longcall.core import OperationRecord, ResultKind, ServerStatus, TerminalReceipt
from longcall.core import commands as c
from longcall.core import events as e
from longcall.core.keys import digest_bytes
from longcall.core.record import evolve
from longcall.ledger import codec
from longcall.runtime.engine import Action
from longcall.sim.adapter import AdapterFactory, Aip151SimAdapter, Request, SimAdapter, sim_adapter
from longcall.sim.checks import ObservedLedger
from longcall.sim.server import MCP_PROTOCOLS, MODERN, Reply


def mcp_only(planted: type[SimAdapter]) -> AdapterFactory:
    """A factory planting an MCP adapter bug; AIP-151 and Apify servers get the sound one."""

    def factory(protocol: str) -> SimAdapter:
        return planted(protocol) if protocol in MCP_PROTOCOLS else sim_adapter(protocol)

    return factory


class NoCasLedger(ObservedLedger):
    """Bug: updates and acceptances skip the version check (no compare-and-set, L4)."""

    def write_update(self, record: OperationRecord, *, expected_version: int, event: str) -> None:
        with self._write() as conn:
            conn.execute(
                "UPDATE operations SET version = ?, state = ?, operation_id = ?,"
                " record_json = ? WHERE call_node_id = ?",
                (
                    record.version,
                    record.state.value,
                    record.operation_id,
                    codec.dumps(record),
                    record.call_node_id,
                ),
            )
            conn.execute(
                "INSERT OR REPLACE INTO history (call_node_id, version, state, event, at, at_utc)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (record.call_node_id, record.version, record.state.value, event, 0.0, ""),
            )

    def write_accept(
        self,
        record: OperationRecord,
        receipt: TerminalReceipt,
        *,
        expected_version: int,
        result_payload: bytes,
        event: str,
    ) -> int:
        stored = self.get(record.call_node_id)
        # Whatever the row holds now, write over it: the version the caller read is ignored.
        record = evolve(record, version=stored.version + 1)
        if stored.is_terminal:
            return 0
        return super().write_accept(
            record,
            receipt,
            expected_version=stored.version,
            result_payload=result_payload,
            event=event,
        )


class FabricatingAdapter(SimAdapter):
    """Bug: accepts a completed status without fetching the result (X6)."""

    def shortcut(self, action: Action) -> Outcome | None:
        if not isinstance(action.command, c.FetchResult):
            return None
        payload = b'{"fabricated":true}'
        status = action.record.server_status or ServerStatus.COMPLETED
        return Outcome(
            event=e.ResultFetched(
                status=status, result_kind=ResultKind.VALUE, result_digest=digest_bytes(payload)
            ),
            payload=payload,
        )


class AckIsCancelAdapter(SimAdapter):
    """Bug: a 2026-07-28 cancel ack is taken for the cancelled terminal (X5)."""

    def cancel_outcome(self, reply: Reply, generation: int) -> Outcome:
        if self.protocol != MODERN or reply.error is not None:
            return super().cancel_outcome(reply, generation)
        evidence = b'{"resultType":"complete"}'
        return Outcome(
            event=e.CancellationObserved(result_digest=digest_bytes(evidence)), payload=evidence
        )


class FreshKeyAdapter(SimAdapter):
    """Bug: a create sent again after a lost response carries a fresh key (X2)."""

    def request(self, action: Action, request_id: str) -> Request:
        request = super().request(action, request_id)
        if isinstance(action.command, c.SendSubmit) and action.command.attempt > 1:
            return dataclasses.replace(request, key=f"{request.key}-{action.command.attempt}")
        return request


class IgnoreIntervalAdapter(SimAdapter):
    """Bug: the server's poll interval is dropped, so the default schedule applies (X3)."""

    def outcome(self, action: Action, reply: Reply) -> Outcome | None:
        return super().outcome(action, dataclasses.replace(reply, poll_interval_s=None))


class FreshRequestIdAdapter(Aip151SimAdapter):
    """Bug: after a lost start, the resend (lookup or resubmit) uses a fresh AIP-155
    ``requestId`` instead of the one derived from the submission key (X2)."""

    def __init__(self, protocol: str = "aip-151") -> None:
        super().__init__(protocol)
        self.sends: dict[str, int] = {}

    def request_id(self, action: Action, key: str) -> str:
        sent = self.sends.get(key, 0)
        self.sends[key] = sent + 1
        return request_id_for(key if sent == 0 else f"{key}#{sent}")


def fresh_request_id(protocol: str) -> SimAdapter:
    """The AIP-151 sim adapter with the fresh-requestId bug; other protocols are sound."""
    return FreshRequestIdAdapter(protocol) if protocol == "aip-151" else sim_adapter(protocol)
