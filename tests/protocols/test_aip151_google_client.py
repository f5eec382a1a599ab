"""Google's own ``google-api-core`` REST operations client against our AIP-151 facade (P3, S8).

The construction follows the reference (§B.6.1) exactly: the proto's HTTP bindings as
``http_options``, the scheme inside ``host``, anonymous credentials, ``struct_pb2``
imported so the ``Any`` type URL resolves. The client runs in a worker thread (it is
synchronous); the server runs on the test's event loop.
"""

from __future__ import annotations

import functools
import uuid
from typing import Any

import anyio
import httpx
import pytest
from tests.bounds import LOADED_MACHINE_S

google_api_core = pytest.importorskip("google.api_core")
pytest.importorskip(
    "grpc_status",
    reason="operations_v1 needs grpcio + grpcio-status (google-api-core[grpc])",
)

from google.api_core import exceptions, operation, operations_v1  # noqa: E402
from google.api_core.future import polling  # noqa: E402
from google.api_core.operations_v1.transports.rest import OperationsRestTransport  # noqa: E402
from google.auth.credentials import AnonymousCredentials  # noqa: E402
from google.protobuf import json_format, struct_pb2  # noqa: E402

pytestmark = pytest.mark.anyio

HTTP_OPTIONS = {
    "google.longrunning.Operations.GetOperation": [
        {"method": "get", "uri": "/v1/{name=operations/**}"}
    ],
    "google.longrunning.Operations.ListOperations": [
        {"method": "get", "uri": "/v1/{name=operations}"}
    ],
    "google.longrunning.Operations.CancelOperation": [
        {"method": "post", "uri": "/v1/{name=operations/**}:cancel", "body": "*"}
    ],
    "google.longrunning.Operations.DeleteOperation": [
        {"method": "delete", "uri": "/v1/{name=operations/**}"}
    ],
}
FAST_POLLING = polling.DEFAULT_POLLING.with_delay(initial=0.05, maximum=0.2, multiplier=1.5)
RESULT_TIMEOUT_S = LOADED_MACHINE_S


def google_client(base: str) -> operations_v1.AbstractOperationsClient:
    transport = OperationsRestTransport(
        host=base, credentials=AnonymousCredentials(), http_options=HTTP_OPTIONS
    )
    return operations_v1.AbstractOperationsClient(transport=transport)


async def start(base: str, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    async with httpx.AsyncClient(timeout=10) as http:
        reply = await http.post(
            f"{base}/v1/tools/{tool}:start",
            json={"requestId": str(uuid.uuid4()), "arguments": arguments},
        )
    assert reply.status_code == 200, reply.text
    body: dict[str, Any] = reply.json()
    return body


def future_of(client: operations_v1.AbstractOperationsClient, name: str) -> operation.Operation:
    op_pb = client.get_operation(name, timeout=10)
    return operation.Operation(
        op_pb,
        refresh=functools.partial(client.get_operation, name, timeout=10),
        cancel=functools.partial(client.cancel_operation, name, timeout=10),
        result_type=struct_pb2.Struct,
        metadata_type=struct_pb2.Struct,
        polling=FAST_POLLING,
    )


async def test_completion_resolves_with_the_tool_result(reference_base: str) -> None:
    """A started operation resolves through ``from_gapic`` + ``result(timeout=…)``."""
    op = await start(reference_base, "sleep_report", {"seconds": 0.3, "rows": 3})
    client = google_client(reference_base)

    def wait() -> dict[str, Any]:
        op_pb = client.get_operation(op["name"], timeout=10)
        fut = operation.from_gapic(
            op_pb, client, struct_pb2.Struct, metadata_type=struct_pb2.Struct
        )
        result = fut.result(timeout=RESULT_TIMEOUT_S, polling=FAST_POLLING)
        assert fut.metadata is not None
        assert json_format.MessageToDict(fut.metadata)["tool"] == "sleep_report"
        return json_format.MessageToDict(result)

    result = await anyio.to_thread.run_sync(wait)
    assert [row["index"] for row in result["rows"]] == [0, 1, 2]


async def test_tool_error_and_protocol_error_raise_their_codes(reference_base: str) -> None:
    """A tool error ends in UNKNOWN (2), a protocol error in INTERNAL (13), as google.rpc.Status."""
    tool_op = await start(reference_base, "fail", {"kind": "tool"})
    protocol_op = await start(reference_base, "fail", {"kind": "protocol"})
    client = google_client(reference_base)

    def outcome(name: str) -> BaseException:
        fut = future_of(client, name)
        with pytest.raises(exceptions.GoogleAPICallError) as caught:
            fut.result(timeout=RESULT_TIMEOUT_S)
        assert fut.operation.error.details[0].type_url.endswith("google.rpc.ErrorInfo")
        return caught.value

    tool_error = await anyio.to_thread.run_sync(outcome, tool_op["name"])
    protocol_error = await anyio.to_thread.run_sync(outcome, protocol_op["name"])
    assert isinstance(tool_error, exceptions.Unknown)
    assert "the tool reported an error" in tool_error.message
    assert isinstance(protocol_error, exceptions.InternalServerError)


async def test_cancel_ends_cancelled_with_code_1(reference_base: str) -> None:
    """``cancel()`` posts :cancel; the operation then reads done with error.code = 1."""
    op = await start(reference_base, "sleep_report", {"seconds": 60, "rows": 1})
    client = google_client(reference_base)

    def cancel_then_wait() -> tuple[bool, bool]:
        fut = future_of(client, op["name"])
        sent = fut.cancel()
        with pytest.raises(exceptions.Cancelled):
            fut.result(timeout=RESULT_TIMEOUT_S)
        return sent, fut.cancelled()

    sent, cancelled = await anyio.to_thread.run_sync(cancel_then_wait)
    assert sent
    assert cancelled


async def test_list_pages_through_own_operations_only(reference_base: str) -> None:
    """ListOperations pages with page tokens, honours done=… and shows only the caller's."""
    names: set[str] = set()
    for _ in range(5):
        names.add((await start(reference_base, "sleep_report", {"seconds": 30, "rows": 1}))["name"])
    async with httpx.AsyncClient(timeout=10) as http:
        other = await http.post(
            f"{reference_base}/v1/tools/sleep_report:start",
            json={"arguments": {"seconds": 30, "rows": 1}},
            headers={"authorization": "Bearer someone-else"},
        )
    assert other.status_code == 200
    client = google_client(reference_base)

    def listed(filter_: str) -> list[str]:
        return [op.name for op in client.list_operations("operations", filter_, page_size=2)]

    everything = await anyio.to_thread.run_sync(listed, "")
    running = await anyio.to_thread.run_sync(listed, "done=false")
    finished = await anyio.to_thread.run_sync(listed, "done=true")
    assert set(everything) == names
    assert len(everything) == 5
    assert other.json()["name"] not in everything
    assert set(running) == names
    assert finished == []


async def test_delete_forgets_without_cancelling(reference_base: str) -> None:
    """DeleteOperation answers {} and the name reads NotFound; the task itself runs on."""
    op = await start(reference_base, "sleep_report", {"seconds": 0.3, "rows": 2})
    client = google_client(reference_base)

    def delete_then_get() -> None:
        client.delete_operation(op["name"], timeout=10)
        with pytest.raises(exceptions.NotFound):
            client.get_operation(op["name"], timeout=10)

    await anyio.to_thread.run_sync(delete_then_get)
