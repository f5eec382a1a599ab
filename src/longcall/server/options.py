"""Server options and the per-server fault plan (constructor arguments, never globals).

Owns: limits (body and argument sizes, page size), the server's identity, and the
fault-injection plan used by tests (lose the HTTP response of the Nth task creation,
so a client meets "created, response lost" — SPEC F1, X2). Must not: do I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from longcall import __version__

DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024
DEFAULT_MAX_ARGUMENT_BYTES = 1024 * 1024


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerOptions:
    """Limits and identity of one server."""

    name: str = "longcall"
    version: str = __version__
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_argument_bytes: int = DEFAULT_MAX_ARGUMENT_BYTES
    list_page_size: int = 50
    drop_create_response_at: int | None = None
    """If set to N, the HTTP response of the Nth task *creation* is dropped (task exists)."""


class CreateFaultPlan:
    """Counts task creations and says which one's response to lose (fault injection)."""

    def __init__(self, drop_at: int | None) -> None:
        self._drop_at = drop_at
        self._created = 0

    def should_drop_next_creation(self) -> bool:
        """Count one creation; true exactly for the configured Nth."""
        self._created += 1
        return self._drop_at is not None and self._created == self._drop_at
