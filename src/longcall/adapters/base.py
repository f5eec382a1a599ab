"""What every protocol adapter offers the runtime: wire in, core events out.

An adapter is bound to one protocol version at one server (SPEC P1–P6). It negotiates
what the server and tool support (X1), and turns each runtime request into exactly
one :class:`Outcome` — a core event plus, where the event carries a digest, the
bytes that digest describes. Adapters never raise for a remote failure: a 429, a
reset connection or a malformed body becomes an event (``RequestFailed``,
``SubmitOutcomeLost``, ``ResultFetchFailed``…), so the runtime has one path. They
raise only :class:`AdapterError` subclasses for our own misuse or an impossible
negotiation.

An adapter may also offer push (:meth:`Adapter.listen`): it reports that the server
said an operation changed, and nothing more; the runtime answers with an early poll,
never with a state change (X3: "poll for truth, listen for speed").

Protocol words (``working``, ``done``, ``SUCCEEDED``, JSON-RPC codes) live in the
adapter modules; each owns its table from wire errors to core failure kinds.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Callable, Collection, Mapping
from typing import Any, Literal

from longcall.core import OperationRecord
from longcall.core.events import Event
from longcall.errors import AdapterError, TaskSupportMissing, UnknownTool

TaskSupport = Literal["forbidden", "optional", "required"]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ToolBinding:
    """What negotiation found out about one tool at one server (X1)."""

    server: str
    tool_name: str
    protocol: str
    adapter_version: str
    descriptor_digest: str
    """Digest of the tool descriptor as listed: a changed tool is a different tool (L1)."""
    task_support: TaskSupport
    idempotent: bool
    """The tool declares resubmission harmless (idempotentHint, an idempotency argument)."""
    read_only: bool = False
    """The tool declares that it changes nothing (MCP ``readOnlyHint: true``): only such
    a call may be copied to a shadow adapter version (R1)."""
    submission_lookup: bool
    """The server can prove by submission key whether it created an operation (X2)."""
    output_schema: Mapping[str, Any] | None = None
    input_schema: Mapping[str, Any] | None = None
    """The arguments the tool takes, as it lists them (MCP ``inputSchema``): checked
    before a call is made, so a call the server would refuse spends no call node."""
    sync_timeout_s: float | None = None
    store_id: str | None = None
    """The identity of the durable store the server speaks for, if it says (C5)."""
    header_params: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Arguments the tool asks to see mirrored into ``Mcp-Param-<name>`` headers
    (argument → header name; 2026-07-28, SEP-2243)."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    """One adapter answer: the event to apply and the bytes its digest describes."""

    event: Event
    payload: bytes | None = None
    progress: float | None = None
    """Progress in [0, 1] where the server reported one (X11); never a state change."""


ProgressSink = Callable[[str, float | None, str | None], None]
"""(call node id, progress, status message): how adapters surface progress (X11)."""

PushSink = Callable[[str, str | None], None]
"""(operation id, the status the server pushed, as its wire word, or None): a hint that
the operation changed (X3). It wakes the poller; it is never a state change."""


class Adapter(abc.ABC):
    """One protocol version at one server."""

    protocol: str
    version: str

    @abc.abstractmethod
    async def bind(self, tool_name: str) -> ToolBinding:
        """Negotiate (X1) and describe the tool; raises TaskSupportMissing / UnknownTool."""

    def forget_listing(self, tool_name: str) -> None:  # noqa: B027 - nothing held by default
        """The next :meth:`bind` of ``tool_name`` describes it afresh, should this adapter
        hold a listing read earlier."""

    @abc.abstractmethod
    async def submit(self, record: OperationRecord, arguments: Mapping[str, Any]) -> Outcome:
        """Send the create with ``record.submission_key``."""

    @abc.abstractmethod
    async def lookup(self, record: OperationRecord) -> Outcome:
        """Ask whether an operation exists under ``record.submission_key``."""

    @abc.abstractmethod
    async def poll(self, record: OperationRecord) -> Outcome:
        """Read the operation's status."""

    @abc.abstractmethod
    async def fetch_result(self, record: OperationRecord) -> Outcome:
        """Fetch and verify the terminal result (X6)."""

    @abc.abstractmethod
    async def cancel(self, record: OperationRecord) -> Outcome:
        """Send the cancel request of ``record.cancel_generation`` (X5)."""

    @abc.abstractmethod
    async def send_input(
        self, record: OperationRecord, answers: Mapping[str, Any]
    ) -> Outcome | None:
        """Deliver answers for input keys; None when the delivery itself is the outcome."""

    async def tools(self) -> list[dict[str, Any]]:
        """The tools the server lists, as listed, each with ``taskSupport`` as this
        protocol reads it (``forbidden``, ``optional`` or ``required``). AdapterError
        when this protocol has no listing."""
        raise AdapterError(f"{self.protocol} offers no list of tools")

    async def list_tools(self) -> list[dict[str, Any]]:
        """Every tool the server lists, as listed (a gateway re-serves them): an
        MCP-framed server's ``tools/list``, else the protocol's own listing
        (:meth:`tools`); a protocol with no tool list raises AdapterError."""
        return await self.tools()

    async def listen(  # noqa: B027 - optional capability: no push by default
        self, operation_ids: Collection[str], on_change: PushSink
    ) -> None:
        """Report pushed status changes of ``operation_ids`` through ``on_change`` until
        cancelled (X3, S7). Returning means no (more) push for this set: the server
        offers none, refused it for good, or ended the stream because every operation is
        terminal. The default offers no push and returns at once."""

    def holds_result(self, record: OperationRecord) -> bool:
        """Whether the result of ``record``'s terminal operation is already in hand (a
        poll's reply carried it inline), so :meth:`fetch_result` sends nothing. By
        default it is not: every fetch is a request."""
        return False

    async def aclose(self) -> None:  # noqa: B027 - optional hook, nothing to release by default
        """Release connections."""


__all__ = [
    "Adapter",
    "AdapterError",
    "Outcome",
    "ProgressSink",
    "PushSink",
    "TaskSupport",
    "TaskSupportMissing",
    "ToolBinding",
    "UnknownTool",
]
