"""Optional 2025-11-25 sessions (``Mcp-Session-Id``): the stateful mode of Streamable HTTP.

Owns: issuing a session at ``initialize``, checking the header on every later 2025-11-25
request (missing: 400; unknown, ended, expired or another principal's: 404, so the client
initializes again), ending a session on ``DELETE``, and what a session remembers (its
principal and the client capabilities declared at ``initialize``, e.g. whether the client
can answer elicitation). Bounded: at most ``max_sessions``, idle ones expire. Must not:
hold tasks — a task belongs to its principal and the durable store, never to a session,
so it outlives the session, the process and the connection (S2, S5).

Stateless stays the default (every request stands alone, any server process sharing the
store can answer it); stateful mode is per process, so several processes need a load
balancer that keeps a session on one of them.
"""

from __future__ import annotations

import secrets
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from longcall.server.errors import INVALID_REQUEST, Refused

SESSION_HEADER = "mcp-session-id"
SESSION_ID_BYTES = 24
DEFAULT_MAX_SESSIONS = 10_000
DEFAULT_IDLE_S = 3_600.0


@dataclass(slots=True, kw_only=True)
class Session:
    """One client session: who opened it and what it declared."""

    session_id: str
    principal: str
    capabilities: dict[str, Any]
    last_seen: float


class Sessions:
    """The sessions of one server process (bounded, idle ones expire)."""

    def __init__(
        self,
        *,
        max_sessions: int = DEFAULT_MAX_SESSIONS,
        idle_s: float = DEFAULT_IDLE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._sessions: OrderedDict[str, Session] = OrderedDict()
        self._max = max_sessions
        self._idle_s = idle_s
        self._clock = clock

    def open(self, principal: str, capabilities: Mapping[str, Any]) -> Session:
        """A new session (the least recently used one is dropped past the bound)."""
        self._expire()
        while len(self._sessions) >= self._max:
            self._sessions.popitem(last=False)
        session = Session(
            session_id=secrets.token_urlsafe(SESSION_ID_BYTES),
            principal=principal,
            capabilities=dict(capabilities),
            last_seen=self._clock(),
        )
        self._sessions[session.session_id] = session
        return session

    def find(self, headers: Mapping[str, str], principal: str) -> Session:
        """The request's session: 400 without the header, 404 for one we do not hold."""
        session_id = headers.get(SESSION_HEADER)
        if not session_id:
            raise Refused(400, INVALID_REQUEST, "Bad Request: Mcp-Session-Id header is required")
        self._expire()
        session = self._sessions.get(session_id)
        if session is None or session.principal != principal:
            raise Refused(404, INVALID_REQUEST, "Session not found; initialize again")
        session.last_seen = self._clock()
        self._sessions.move_to_end(session_id)
        return session

    def close(self, headers: Mapping[str, str], principal: str) -> None:
        """``DELETE``: end the request's session (404 if we do not hold it)."""
        session = self.find(headers, principal)
        del self._sessions[session.session_id]

    def __len__(self) -> int:
        return len(self._sessions)

    def _expire(self) -> None:
        cutoff = self._clock() - self._idle_s
        while self._sessions:
            oldest = next(iter(self._sessions.values()))
            if oldest.last_seen >= cutoff:
                return
            self._sessions.popitem(last=False)
