"""P3: Google AIP-151 long-running operations (+ AIP-155), client side: the pure mapping
(:mod:`~longcall.adapters.aip151.mapping`) and the thin I/O shell that runs it over HTTP
(:mod:`~longcall.adapters.aip151.client`). The names other modules use are re-exported
here."""

from longcall.adapters.aip151.client import Aip151Adapter, connect
from longcall.adapters.aip151.mapping import (
    ADAPTER_VERSION,
    API_VERSION_PATH,
    CANCELLED_CODE,
    COLLECTION,
    HTTP_FAILURES,
    PROTOCOL,
    REJECTING_STATUSES,
    REQUEST_ID_NAMESPACE,
    TOOL_ERROR_REASON,
    Aip151Mapping,
    ForeignOperation,
    MalformedOperation,
    api_root,
    check_operation,
    http_failure,
    is_empty_result,
    is_tool_error,
    poll_interval_hint_s,
    raw_status,
    request_id_for,
    result_of,
    status_message_of,
)

__all__ = [
    "ADAPTER_VERSION",
    "API_VERSION_PATH",
    "CANCELLED_CODE",
    "COLLECTION",
    "HTTP_FAILURES",
    "PROTOCOL",
    "REJECTING_STATUSES",
    "REQUEST_ID_NAMESPACE",
    "TOOL_ERROR_REASON",
    "Aip151Adapter",
    "Aip151Mapping",
    "ForeignOperation",
    "MalformedOperation",
    "api_root",
    "check_operation",
    "connect",
    "http_failure",
    "is_empty_result",
    "is_tool_error",
    "poll_interval_hint_s",
    "raw_status",
    "request_id_for",
    "result_of",
    "status_message_of",
]
