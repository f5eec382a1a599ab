"""Commands: imperatives the machine returns for a driver to carry out (docs/design/layers.md).

A command says what to do and, where it matters, not before when (``at``, on the
driver's clock). The driver persists the new record *before* carrying out any
command (SPEC X2), so a crash never loses a decision.
"""

from __future__ import annotations

import dataclasses

from longcall.core.record import TerminalReceipt


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Command:
    """Base of every command."""

    @property
    def name(self) -> str:
        return type(self).__name__


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class SendSubmit(Command):
    """Send the create request with this (always the same) submission key."""

    submission_key: str
    attempt: int
    at: float


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class LookupSubmission(Command):
    """Ask the server whether it created an operation under this key."""

    submission_key: str
    at: float


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Poll(Command):
    """Read the operation's status, not before ``at``."""

    operation_id: str
    at: float


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class StartResultFetch(Command):
    """Record ResultFetchStarted, then fetch (a commit point between the two)."""

    operation_id: str


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class FetchResult(Command):
    """Fetch and verify the result of a terminal operation."""

    operation_id: str
    at: float


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class SendCancel(Command):
    """Send the cancel request of this generation."""

    operation_id: str
    cancel_generation: int
    at: float


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class AskInput(Command):
    """Put the server's input request in front of the approval gate (X4)."""

    operation_id: str
    input_round: int
    keys: tuple[str, ...]
    schema_digest: str | None
    deadline_at: float | None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class SendInputResponse(Command):
    """Deliver the answers for these keys (idempotent per key on the server)."""

    operation_id: str
    input_round: int
    keys: tuple[str, ...]
    at: float


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class AcceptTerminal(Command):
    """Write this receipt and the ready-outbox row in one transaction (L5)."""

    receipt: TerminalReceipt


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class EscalateReconciliation(Command):
    """Tell operators: this operation needs a human (X2, X5, X7)."""

    reason: str
