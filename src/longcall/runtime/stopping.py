"""How every server longcall runs stops on SIGINT or SIGTERM: soon, quietly, and with the
app's own shutdown intact.

Owns: :class:`StoppingServer`, uvicorn's server with a stop fit for a command line. On
a signal it stops accepting, gives the requests in flight ``drop_after_s`` to end, then
drops the connections still open, and runs the app's lifespan shutdown as uvicorn does
(the task server hands its leases back there). Must not: print (each command says in
its own words what stopped), or change what an app does when it stops.

Why drop: a push stream (``subscriptions/listen``, a 2025-11-25 status stream) or a
long poll never ends by itself, so uvicorn's own stop waits out its graceful timeout,
cancels the request and logs the cancellation as an ASGI error with a ~40-line
traceback. A dropped connection is what such a request's client is built to survive (it
reconnects or polls again; the task stays in the store), and the app sees it as the
client going away (``http.disconnect``), which it already handles. A request that does
not watch for that is still cancelled a little later, and that cancellation is expected
here, so it is not logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import socket
from collections.abc import Iterator

import uvicorn

DROP_AFTER_S = 1.0
"""How long requests in flight get to end once a stop began, before their connections
are dropped (an ordinary request takes milliseconds; a stream never ends)."""
CANCEL_AFTER_DROP_S = 2.0
"""How long a request whose connection was dropped gets to notice it before it is cancelled."""

UVICORN_LOGGER = "uvicorn.error"
"""The logger uvicorn reports a cancelled request on (``Exception in ASGI application``)."""


class StoppingServer(uvicorn.Server):
    """A uvicorn server whose stop drops the connections that would hold it up, quietly.

    Signals are handled as uvicorn does: the first SIGINT or SIGTERM starts the stop, a
    second SIGINT skips the wait (and the app's shutdown), and once stopped the signal
    is raised again for the process's own handler (asyncio turns SIGINT into
    ``KeyboardInterrupt``)."""

    def __init__(self, config: uvicorn.Config, *, drop_after_s: float = DROP_AFTER_S) -> None:
        super().__init__(config)
        self.drop_after_s = drop_after_s
        # uvicorn cancels what still runs after this; dropped requests end well before.
        config.timeout_graceful_shutdown = math.ceil(drop_after_s + CANCEL_AFTER_DROP_S)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        dropping = asyncio.get_running_loop().call_later(
            self.drop_after_s, self._drop_open_connections
        )
        try:
            with _expected_cancellations_unlogged():
                await super().shutdown(sockets)
        finally:
            dropping.cancel()

    def _drop_open_connections(self) -> None:
        """Close every connection still open: its request sees the client gone."""
        for connection in list(self.server_state.connections):
            transport = getattr(connection, "transport", None)
            if transport is not None:
                transport.close()


class _ExpectedCancellation(logging.Filter):
    """Drops uvicorn's report of a request cancelled by the stop (and its count)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if str(record.msg).startswith("Cancel %s running task(s)"):
            return False
        error = record.exc_info[1] if record.exc_info else None
        return not isinstance(error, asyncio.CancelledError)


@contextlib.contextmanager
def _expected_cancellations_unlogged() -> Iterator[None]:
    quiet = _ExpectedCancellation()
    logger = logging.getLogger(UVICORN_LOGGER)
    logger.addFilter(quiet)
    try:
        yield
    finally:
        logger.removeFilter(quiet)


__all__ = ["CANCEL_AFTER_DROP_S", "DROP_AFTER_S", "StoppingServer"]
