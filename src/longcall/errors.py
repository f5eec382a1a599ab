"""Every exception longcall raises on purpose: one tree, defined and documented here.

Owns: the exception types of the caller side (core, ledger, adapters, runtime, client,
CLI) and the rule each branch stands for. The server library's errors are one more
branch of the same root (:mod:`longcall.server.errors`, ``LongcallServerError``).
Must not: import anything (the pure core imports it) or carry behaviour beyond
messages and the few fields a handler reads.

The tree, and what a handler does with each branch::

    LongcallError
    ├── UsageError               the caller asked for something our rules refuse: say so
    │   ├── UnsupportedLedgerURL    the ledger URL names no backend we have
    │   ├── RequestDigestMismatch   a call node asked again with another request (X2)
    │   ├── CallNodeConflict        a call node asked again at another server or protocol
    │   ├── InvalidCallNode         a call node id that cannot be stored and shown as given
    │   ├── InvalidArguments        tool arguments that are not a plain JSON object
    │   ├── InvalidAnswer           an answer that does not fit its question's form (X4)
    │   ├── NotWaitingForInput      an answer for a node that waits for none, or not that key
    │   ├── NotReconcilable         a manual resolution the operation's state does not allow
    │   ├── ClientNotStarted        calling or waiting outside ``async with Client(...)``
    │   ├── SyncClientInLoop        SyncClient inside a running event loop: use Client
    │   ├── ConfigError             the servers file cannot be read or names the impossible
    │   ├── MissingCredential       a configured secret is not there (C1)
    │   ├── AuthorizationFailed     an OAuth sign-in did not complete
    │   ├── UnknownMutant           a simulator mutant name that is not in the catalogue
    │   ├── HandleRefused           a gateway handle that is mistyped, cut short or invented
    │   ├── InvalidWebhookKey       a webhook key that is not whsec_/whsk_/whpk_ + base64
    │   └── WebhookRejected         a webhook delivery that does not verify: answered 4xx,
    │       │                       nothing changed (a delivery is only ever a hint)
    │       ├── WebhookMalformed    a missing or unreadable header, or an unreadable payload
    │       ├── WebhookBadSignature no signature matches a key of the receiver
    │       ├── WebhookStale        the timestamp is older than the tolerance window
    │       ├── WebhookFromFuture   the timestamp is ahead by more than the window
    │       └── WebhookDuplicate    a webhook-id already received within the window
    ├── LocalProtocolError       our own rules broken (a bug or a misuse here)
    │   ├── IllegalTransition       no edge for (state, event) in the table (L2)
    │   ├── StaleEvent              older than what the record knows: drop it
    │   │   └── StaleEpoch          from another execution epoch (fencing, D1, R3)
    │   └── MissingResultPayload    an acceptance without the bytes its digest describes
    ├── ConflictError            a LOST RACE: somebody else wrote first (L4).
    │   │                        Re-read the row and decide again; never an outcome.
    │   ├── VersionConflict         the compare-and-set found another row version
    │   ├── DuplicateCallNode       the call node was created by someone else first
    │   ├── Fenced                  another worker took the operation over (its lease
    │   │                           lapsed): the database refused the stale write, and
    │   │                           the worker lets the operation go, never re-decides
    │   └── SendWindowPassed        a request's send slot passed before it could leave:
    │                               nothing was sent; the poll is planned again
    ├── IntegrityError           data that contradicts itself or what we hold. Never
    │   │                        retried: the operation goes to reconciliation with
    │   │                        this reason and a timer (X7).
    │   ├── AcceptanceMismatch      accept_terminal found a field unlike the row (L5)
    │   │   └── DigestMismatch      a payload does not hash to its claimed digest (X6)
    │   ├── BlobConflict            a write-once payload written again, differently
    │   ├── ForeignIdentity         a server answered for another operation (C3)
    │   ├── MissingPayload          bytes a record points at are not stored
    │   ├── CorruptRow              a stored row does not decode into a record
    │   └── SchemaTooNew            the store was written by a newer longcall
    ├── UnavailableError         something needed cannot be opened or reached: say which
    │   ├── LedgerUnavailable       the ledger cannot be opened or used (C5)
    │   │   ├── LedgerMissing       nothing there, and this use must not create it
    │   │   └── LedgerRefused       an empty, truncated, foreign or damaged file
    │   ├── ServerUnreachable       the server cannot be reached (refused, no route, DNS)
    │   ├── MetricsPortUnavailable  ``/metrics`` cannot be served on the port asked for
    │   ├── ConsolePortUnavailable  the console cannot listen on the host and port asked for
    │   ├── WebhookPortUnavailable  the webhook receiver cannot listen where asked
    │   ├── OwnerLockError          this process's own lock file (by which others would
    │   │                           prove it dead) cannot be made or taken
    │   └── DriverStopped           the driver stopped while a caller waited; the call
    │       │                       goes on and resumes with the next driver (X8, L7)
    │       └── ExecutorFailed      an error escaped the executor's loop
    ├── NotFoundError            the thing asked for does not exist locally
    │   └── UnknownCallNode
    ├── AdapterError             a protocol adapter could not be set up or was misused
    │   ├── NegotiationFailed       the server answered no negotiation usably (X1)
    │   ├── TaskSupportMissing      a long call where no task support is declared (X1)
    │   ├── UnknownTool             the server does not list the tool
    │   │   └── InvalidToolHeaders  its x-mcp-header declarations are invalid: excluded
    │   ├── ToolNotAllowed          the servers file does not allow the tool here (C1)
    │   └── AdapterDisabled         new operations on this adapter are switched off (P6)
    └── LongcallServerError      the tool side's branch, drawn in longcall.server.errors

A test (tests/test_error_tree.py) holds this drawing against the real classes: every
subclass of the root is drawn, under its real parent, and nothing else is.

Remote failures (a 429, a reset, a malformed body, a JSON-RPC error) are not
exceptions: adapters turn them into core events, so the runtime has one path for them.
Foreign exceptions (httpx, sqlite3, psycopg) are translated once, where they enter.
"""

from __future__ import annotations


class LongcallError(Exception):
    """Root of every error longcall raises on purpose."""


# --- refusals of what the caller asked -------------------------------------------------


class UsageError(LongcallError):
    """The caller asked for something longcall's rules refuse (nothing was changed)."""


class UnsupportedLedgerURL(UsageError):
    """The ledger URL names no backend we have."""


class RequestDigestMismatch(UsageError):
    """The same call node was asked for again with a different request (X2)."""


class CallNodeConflict(UsageError):
    """The call node holds an operation at another server or protocol: a call node is one
    request, wherever it is sent (X2)."""


class InvalidCallNode(UsageError):
    """A call node id that could not be stored and shown as given: empty, longer than
    the ledger keeps, or holding control, line-breaking or direction-changing characters
    (a terminal would obey them when the id is printed)."""


class InvalidArguments(UsageError):
    """Tool arguments that are not a plain JSON object (NaN, a lone surrogate, too deep)."""


class InvalidAnswer(UsageError):
    """An answer that does not fit the question it answers; nothing was stored or sent (X4)."""


class NotWaitingForInput(UsageError):
    """An answer for a call node that waits for no input, or not for that key."""


class NotReconcilable(UsageError):
    """A manual resolution the operation's state (or the request) does not allow (X7)."""


class ClientNotStarted(UsageError):
    """Calling or waiting needs the client's driver: ``async with Client(...)``."""


class SyncClientInLoop(UsageError):
    """SyncClient was used where an event loop already runs (Jupyter, an async
    function): it would need a loop of its own there; ``Client`` is the one to use."""


class ConfigError(UsageError):
    """The servers configuration cannot be read or names something impossible."""


class MissingCredential(UsageError):
    """A configured secret is not there (the variable is unset, the file is missing)."""


class AuthorizationFailed(UsageError):
    """The authorization step did not complete (declined, timed out, malformed)."""


class UnknownMutant(UsageError):
    """A simulator mutant name that is not in the catalogue."""


class InvalidWebhookKey(UsageError):
    """A webhook key that is not ``whsec_``, ``whsk_`` or ``whpk_`` followed by base64 of
    the right length (the key itself is never quoted)."""


class WebhookRejected(UsageError):
    """A webhook delivery that does not verify. The receiver answers it with a 4xx (a
    duplicate: 200) and changes nothing; ``status`` is that answer."""

    status = 400


class WebhookMalformed(WebhookRejected):
    """A webhook header is missing or unreadable, or a verified payload names nothing readable."""


class WebhookBadSignature(WebhookRejected):
    """No signature of the delivery matches a key of this receiver."""

    status = 401


class WebhookStale(WebhookRejected):
    """The delivery's timestamp is older than the tolerance window (a replay, or a long delay)."""

    status = 401


class WebhookFromFuture(WebhookRejected):
    """The delivery's timestamp is further ahead than the tolerance window."""

    status = 401


class WebhookDuplicate(WebhookRejected):
    """A webhook-id this receiver already took within the tolerance window. Verified, so
    from the sender: answered 200 (a Standard Webhooks sender whose first 2xx was lost
    retries the same id until it gets a 2xx, and would otherwise retry to exhaustion or
    disable the endpoint), and, like every rejection, it changes nothing."""

    status = 200


class HandleRefused(UsageError):
    """A handle the gateway never issued: mistyped, truncated or invented (G1)."""

    def __init__(self, handle: object, reason: str) -> None:
        self.handle = handle
        self.reason = reason
        super().__init__(f"{handle!r} is not a valid handle: {reason}")


# --- our own rules -----------------------------------------------------------------------


class LocalProtocolError(LongcallError):
    """We were asked to do something our own rules forbid (a bug or a misuse here)."""


class IllegalTransition(LocalProtocolError):
    """The transition table has no edge for this (state, event) pair (L2).

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

    Callers drop it; the record is unchanged.
    """


class StaleEpoch(StaleEvent):
    """The event carries an execution epoch other than the record's (fencing, D1, R3)."""


class MissingResultPayload(LocalProtocolError):
    """An acceptance was attempted without the bytes its digest describes."""


# --- lost races: re-read and decide again --------------------------------------------------


class ConflictError(LongcallError):
    """A lost race: somebody else wrote first (L4). Re-read the row and decide again."""


class VersionConflict(ConflictError):
    """A compare-and-set found the row at another version than expected."""


class DuplicateCallNode(ConflictError):
    """An operation already exists for this call node id."""


class Fenced(ConflictError):
    """A worker wrote an operation it no longer holds (D1).

    Another worker took it over after this one's lease lapsed (a pause, a partition, a
    GC stop): the row's owner or execution epoch moved on, so the database refused the
    write. A lost race of a special kind: the stale worker lets the operation go
    instead of re-reading and deciding again.
    """


class SendWindowPassed(ConflictError):
    """The request's send slot passed before it could leave: nothing was sent (the
    executor plans the poll again, with a new slot). Not a failure of the server: a race
    with the clock, lost, and decided again like any other."""


# --- integrity: to an operator, never a retry ------------------------------------------------


class IntegrityError(LongcallError):
    """Data that contradicts itself or what we hold; retrying cannot help (X7).

    The engine hands the operation to reconciliation with this message as the reason.
    """


class AcceptanceMismatch(IntegrityError):
    """accept_terminal found a field that does not match the stored row (L5)."""


class DigestMismatch(AcceptanceMismatch):
    """A result payload does not hash to the digest claimed for it (L5, X6)."""


class BlobConflict(IntegrityError):
    """A write-once payload was written again with different bytes."""


class ForeignIdentity(IntegrityError):
    """A server's answer names another operation than the one asked about (C3)."""


class MissingPayload(IntegrityError):
    """Bytes a record depends on (its request arguments, an answer) are not stored."""


class CorruptRow(IntegrityError):
    """A stored row does not decode into a record (damaged or of a foreign schema)."""


class SchemaTooNew(IntegrityError):
    """The store was written by a newer longcall; we do not downgrade it."""


# --- what is needed cannot be reached ------------------------------------------------------


class UnavailableError(LongcallError):
    """Something needed cannot be opened or reached; the message says which and why."""


class LedgerUnavailable(UnavailableError):
    """The ledger cannot be opened (missing, unreachable, read-only, refused: C5), or its
    database failed while in use (locked past the busy timeout, the connection lost)."""


class LedgerMissing(LedgerUnavailable):
    """No ledger exists where the URL points, and this use must not create one."""


class LedgerRefused(LedgerUnavailable):
    """Something is there but it is not a ledger we may use: an empty or truncated file,
    another program's database, a damaged file (C5). Never silently recreated."""


class ServerUnreachable(UnavailableError):
    """The server could not be reached (connection refused, no route, DNS)."""


class MetricsPortUnavailable(UnavailableError):
    """``/metrics`` could not be served on the port asked for (taken, or not allowed)."""


class ConsolePortUnavailable(UnavailableError):
    """The console could not listen on the host and port asked for (taken, or not allowed)."""


class WebhookPortUnavailable(UnavailableError):
    """The webhook receiver cannot listen on the host and port asked for."""


class OwnerLockError(UnavailableError):
    """This process's own lock file cannot be made or taken: without it another process
    could prove it dead while it lives, so it holds no lease."""


class DriverStopped(UnavailableError):
    """The driver stopped (an error, or its client was closed) while a caller waited.

    The call goes on at the server and stays in the ledger; the next client, worker or
    ``longcall ops wait NODE`` resumes it (X8, L7)."""


class ExecutorFailed(DriverStopped):
    """An error escaped the executor's loop: every wait on it ends with this error (never
    a silent hang), the cause chained."""


# --- lookups ------------------------------------------------------------------------------


class NotFoundError(LongcallError):
    """The thing asked for does not exist (here: locally)."""


class UnknownCallNode(NotFoundError):
    """No operation is recorded for this call node id."""


# --- adapters --------------------------------------------------------------------------------


class AdapterError(LongcallError):
    """A protocol adapter could not be set up, or was misused."""


class NegotiationFailed(AdapterError):
    """The server answered neither ``server/discover`` nor ``initialize`` usably (X1)."""

    def __init__(self, message: str, *, unauthorized: bool = False) -> None:
        super().__init__(message)
        self.unauthorized = unauthorized
        """The server refused us with 401: credentials (or an OAuth login) are needed."""


class TaskSupportMissing(AdapterError):
    """The call is declared long but neither the server nor the tool supports tasks (X1)."""


class UnknownTool(AdapterError):
    """The server does not list the tool."""


class InvalidToolHeaders(UnknownTool):
    """A tool declares invalid ``x-mcp-header`` parameters: it is excluded (SEP-2243)."""


class ToolNotAllowed(AdapterError):
    """The servers configuration does not allow this tool at this server (C1)."""


class AdapterDisabled(AdapterError):
    """New operations on this protocol adapter are switched off (P6)."""


__all__ = [
    "AcceptanceMismatch",
    "AdapterDisabled",
    "AdapterError",
    "AuthorizationFailed",
    "BlobConflict",
    "CallNodeConflict",
    "ClientNotStarted",
    "ConfigError",
    "ConflictError",
    "ConsolePortUnavailable",
    "CorruptRow",
    "DigestMismatch",
    "DriverStopped",
    "DuplicateCallNode",
    "ExecutorFailed",
    "Fenced",
    "ForeignIdentity",
    "HandleRefused",
    "IllegalTransition",
    "IntegrityError",
    "InvalidAnswer",
    "InvalidArguments",
    "InvalidCallNode",
    "InvalidToolHeaders",
    "InvalidWebhookKey",
    "LedgerMissing",
    "LedgerRefused",
    "LedgerUnavailable",
    "LocalProtocolError",
    "LongcallError",
    "MetricsPortUnavailable",
    "MissingCredential",
    "MissingPayload",
    "MissingResultPayload",
    "NegotiationFailed",
    "NotFoundError",
    "NotReconcilable",
    "NotWaitingForInput",
    "OwnerLockError",
    "RequestDigestMismatch",
    "SchemaTooNew",
    "SendWindowPassed",
    "ServerUnreachable",
    "StaleEpoch",
    "StaleEvent",
    "SyncClientInLoop",
    "TaskSupportMissing",
    "ToolNotAllowed",
    "UnavailableError",
    "UnknownCallNode",
    "UnknownMutant",
    "UnknownTool",
    "UnsupportedLedgerURL",
    "UsageError",
    "VersionConflict",
    "WebhookBadSignature",
    "WebhookDuplicate",
    "WebhookFromFuture",
    "WebhookMalformed",
    "WebhookPortUnavailable",
    "WebhookRejected",
    "WebhookStale",
]
