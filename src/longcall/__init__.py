"""longcall: exactly one accepted terminal outcome per long-running tool call.

The public caller API is here: :class:`Client` (async) and :class:`SyncClient` (for
scripts) make durable calls and return a :class:`CallResult`; input requests arrive as
an :class:`InputRequest`. The tool side is :mod:`longcall.server`.

The package is layered (docs/design/layers.md): ``core`` (pure decisions) at the
bottom, then ``ledger`` and ``adapters``, then ``runtime``, then ``client`` / ``server`` /
``sim``, then ``testing``, then ``cli``.
"""

# Nothing is imported here at run time (not even ``__future__``): the ``longcall``
# command loads this package before its entry can catch Ctrl-C (longcall.entry), so
# loading it must take no time.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__version__ = "0.1.0"

# The names below are loaded on first use, so that ``import longcall`` (the server, the
# version) does not pull in the caller's runtime.
_PUBLIC = {
    "CallNodeConflict": "longcall.client",
    "CallOutcome": "longcall.client",
    "CallResult": "longcall.client",
    "CancelOutcome": "longcall.client",
    "Client": "longcall.client",
    "ClientNotStarted": "longcall.client",
    "DriverStopped": "longcall.client",
    "InputField": "longcall.client",
    "InputQuestion": "longcall.client",
    "InputRequest": "longcall.client",
    "InvalidAnswer": "longcall.client",
    "InvalidArguments": "longcall.client",
    "LedgerMissing": "longcall.client",
    "NotWaitingForInput": "longcall.client",
    "Progress": "longcall.client",
    "ServerUnreachable": "longcall.client",
    "SyncClient": "longcall.client",
    "SyncClientInLoop": "longcall.client",
    "default_ledger_url": "longcall.client",
    "AdapterError": "longcall.errors",
    "ConflictError": "longcall.errors",
    "IntegrityError": "longcall.errors",
    "LedgerUnavailable": "longcall.errors",
    "LocalProtocolError": "longcall.errors",
    "NotFoundError": "longcall.errors",
    "UnavailableError": "longcall.errors",
    "UsageError": "longcall.errors",
    "LongcallError": "longcall.errors",
    "MetricsPortUnavailable": "longcall.errors",
    "RequestDigestMismatch": "longcall.errors",
    "State": "longcall.core",
    "TerminalReceipt": "longcall.core",
}

if TYPE_CHECKING:
    from longcall.client import (
        CallNodeConflict,
        CallOutcome,
        CallResult,
        CancelOutcome,
        Client,
        ClientNotStarted,
        DriverStopped,
        InputField,
        InputQuestion,
        InputRequest,
        InvalidAnswer,
        InvalidArguments,
        LedgerMissing,
        NotWaitingForInput,
        Progress,
        ServerUnreachable,
        SyncClient,
        SyncClientInLoop,
        default_ledger_url,
    )
    from longcall.core import State, TerminalReceipt
    from longcall.errors import (
        AdapterError,
        ConflictError,
        IntegrityError,
        LedgerUnavailable,
        LocalProtocolError,
        LongcallError,
        MetricsPortUnavailable,
        NotFoundError,
        RequestDigestMismatch,
        UnavailableError,
        UsageError,
    )


def __getattr__(name: str) -> "Any":
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'longcall' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_PUBLIC])


__all__ = [
    "AdapterError",
    "CallNodeConflict",
    "CallOutcome",
    "CallResult",
    "CancelOutcome",
    "Client",
    "ClientNotStarted",
    "ConflictError",
    "DriverStopped",
    "InputField",
    "InputQuestion",
    "InputRequest",
    "IntegrityError",
    "InvalidAnswer",
    "InvalidArguments",
    "LedgerMissing",
    "LedgerUnavailable",
    "LocalProtocolError",
    "LongcallError",
    "MetricsPortUnavailable",
    "NotFoundError",
    "NotWaitingForInput",
    "Progress",
    "RequestDigestMismatch",
    "ServerUnreachable",
    "State",
    "SyncClient",
    "SyncClientInLoop",
    "TerminalReceipt",
    "UnavailableError",
    "UsageError",
    "__version__",
    "default_ledger_url",
]
