"""The listening socket of every server longcall runs: the tool-side server, the gateway,
the console and the webhook receiver.

Owns: binding and listening, with the options they all want. Must not: import anything
beyond the standard library (the console and the receiver start without the server
library, and ``longcall --help`` without either).
"""

from __future__ import annotations

import socket

BACKLOG = 1024
"""Connections the kernel queues before the server accepts them (a burst of callers)."""


def listening_socket(host: str, port: int) -> socket.socket:
    """A bound, listening TCP socket (port 0: a free one; ``[::1]`` or ``::1`` alike),
    with TCP_NODELAY, which accepted sockets inherit on Linux: without it, small JSON-RPC
    answers wait for the peer's delayed ACK (about 40 ms a request). The socket is closed
    when binding or listening fails."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((host.strip("[]"), port))
        sock.listen(BACKLOG)
    except BaseException:
        sock.close()
        raise
    return sock
