"""Apply one event to a stored operation: machine, then ledger, in that order.

This is the one place that turns a core :class:`~longcall.core.Transition` into a
ledger write. A transition that carries :class:`~longcall.core.commands.AcceptTerminal`
is written by ``accept_terminal`` (receipt, result and outbox in one transaction,
SPEC L5); every other one by a compare-and-set ``update`` (L4). Nothing is carried out
before its record is committed (X2): callers act on the returned commands only after
this returns.
"""

from __future__ import annotations

from longcall.core import DEFAULT_POLICY, OperationRecord, Policy, Transition, handle
from longcall.core.commands import AcceptTerminal
from longcall.core.events import Event
from longcall.errors import MissingResultPayload
from longcall.ledger import Ledger


def commit(
    ledger: Ledger,
    before: OperationRecord,
    transition: Transition,
    *,
    event: str,
    result_payload: bytes | None = None,
    owner: str | None = None,
) -> OperationRecord:
    """Write ``transition`` over ``before`` (which must still be the stored version).

    ``owner`` makes it a worker's write under its lease: the database refuses it
    (Fenced) once another worker took the operation over (D1)."""
    accepts = [cmd for cmd in transition.commands if isinstance(cmd, AcceptTerminal)]
    if accepts:
        if result_payload is None:
            raise MissingResultPayload(
                f"operation {before.call_node_id!r}: accepting needs the result payload"
            )
        ledger.accept_terminal(
            transition.record,
            accepts[0].receipt,
            expected_version=before.version,
            result_payload=result_payload,
            event=event,
            owner=owner,
        )
    else:
        ledger.update(transition.record, expected_version=before.version, event=event, owner=owner)
    return transition.record


def apply_event(
    ledger: Ledger,
    record: OperationRecord,
    event: Event,
    *,
    now: float,
    jitter: float,
    result_payload: bytes | None = None,
    policy: Policy = DEFAULT_POLICY,
) -> Transition:
    """Run the machine on ``record`` and commit the result; raise and write nothing if
    the machine refuses the event or the row moved on (ConflictError)."""
    transition = handle(record, event, now=now, jitter=jitter, policy=policy)
    commit(ledger, record, transition, event=event.name, result_payload=result_payload)
    return transition
