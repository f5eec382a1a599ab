"""MCP, client side: JSON-RPC framing (``rpc``), tool descriptors (``tools``), result
checks (``results``), what both task versions read alike (``common``), one pure
mapping per version (``modern``: 2026-07-28 with the tasks extension; ``legacy``:
2025-11-25 experimental tasks; ``sync``: plain tools), negotiation (``negotiate``) and
the thin I/O shells that run them (``client``, ``push``)."""
