"""Interop: the caller against peers we did not write (the official MCP TypeScript SDK as a
task server, the official MCP conformance suite's client scenarios)."""
