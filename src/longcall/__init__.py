"""longcall: exactly one accepted terminal outcome per long-running tool call.

The package is layered (DESIGN.md): ``core`` (pure decisions) at the bottom, then
``ledger`` and ``adapters``, then ``runtime``, then ``server`` / ``sim``, then ``cli``.
"""

__version__ = "0.1.0"
