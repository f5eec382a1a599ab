"""The one error tree of longcall (DESIGN.md "Errors").

Every package raises subclasses of :class:`LongcallError`; foreign exceptions are
translated once, where they enter. This module is pure: it only defines types.
"""

from __future__ import annotations


class LongcallError(Exception):
    """Root of every error longcall raises on purpose."""


class LocalProtocolError(LongcallError):
    """We were asked to do something our own rules forbid (a bug or a misuse here)."""


class RemoteProtocolError(LongcallError):
    """A peer sent something malformed or contradictory."""


class IllegalTransition(LocalProtocolError):
    """The transition table has no edge for this (state, event) pair (SPEC L2).

    The record is left unchanged by whoever raises this.
    """

    def __init__(self, state: object, event_type: str, call_node_id: str) -> None:
        self.state = state
        self.event_type = event_type
        self.call_node_id = call_node_id
        super().__init__(
            f"operation {call_node_id!r}: event {event_type} is not allowed in state {state}"
        )


class StaleEvent(LocalProtocolError):
    """The event is older than what the record already knows (a replay, a late answer).

    Callers normally drop it; the record is unchanged.
    """


class StaleEpoch(StaleEvent):
    """The event carries an execution epoch other than the record's (fencing, SPEC D1/R3)."""


class ConflictError(LongcallError):
    """A compare-and-set lost its race: somebody else wrote first (SPEC L4)."""


class NotFoundError(LongcallError):
    """The thing asked for does not exist (here: locally)."""


class UnknownCallNode(NotFoundError):
    """No operation is recorded for this call node id."""


class AcceptanceMismatch(ConflictError):
    """accept_terminal found a field that does not match the stored row (SPEC L5)."""


class DigestMismatch(AcceptanceMismatch):
    """A result payload does not hash to the digest claimed for it (SPEC L5, X6)."""


class RequestDigestMismatch(ConflictError):
    """The same call node was asked for again with different arguments (SPEC X2)."""
